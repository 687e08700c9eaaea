"""The ``record`` argument of the runners: a smaller trace, the same study."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxstop import data, policies, sim
from jaxstop.policies import Info, build_policy, make_job

OUTCOME = ("incumbent", "incumbent_value", "incumbent_test", "budget", "stop_job", "num_jobs", "bad_jobs",
           "truncated")
PER_STEP = ("jobs", "results", "active", "spent", "incumbents")


def _table():
    c = data.alexnet_curves()
    values = np.asarray(c.values)[:27, :27]
    return sim.CurveTable(jnp.asarray(values), jnp.asarray(np.asarray(c.mask)[:27, :27]), jnp.asarray(values + 0.01))


def _assert_same(a, b):
    """Equal pytrees, leaf for leaf (NaN equal to NaN). Exact on purpose: the records compile
    to different programs, but what they share involves no float arithmetic of the
    simulator (indices, counts, budgets and losses looked up in the table), and the
    policy's decisions come from the same per-study code; the one float computation that
    decides something, SH+'s keep rule, would have to land within rounding of a tie of its
    threshold to differ."""
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for u, v in zip(la, lb):
        u, v = np.asarray(u), np.asarray(v)
        np.testing.assert_array_equal(u, v)


def _records(policy, table, keys, records=sim._run.RECORDS, **kw):
    return {r: sim.run_batch(policy, table, keys, record=r, **kw) for r in records}


@pytest.mark.parametrize("name", ["sh", "sh_one_job", "sh+", "random_search"])
def test_records_hold_the_same_study(name):
    """``"jobs"`` is ``"full"`` without the infos and ``"final"`` its outcome alone, for the
    batch and the one-job protocol, plain and UQ halving. (``"jobs"`` and the one-study
    runner on plain SH only: every policy goes through the same recording code, and each
    record is a compilation of its own.)"""
    table = _table()
    n, t = table.values.shape
    kw = {}
    records = ("full", "final")
    if name.startswith("sh"):
        policy = policies.sh(n, t, eta=3, uq=name == "sh+")
        kw = {"batched": False} if name == "sh_one_job" else {}
        records = sim._run.RECORDS if name == "sh" else records
    else:
        policy = policies.random_search(n, max_budget=t)
    keys = jax.random.split(jax.random.key(3), 6)
    out = _records(policy, table, keys, records, **kw)
    full, final = out["full"], out["final"]
    for field in OUTCOME:
        _assert_same(getattr(full, field), getattr(final, field))
    for field in PER_STEP:
        assert getattr(final, field) is None
    assert full.infos is not None and final.infos is None
    if name == "sh":
        jobs = out["jobs"]
        for field in OUTCOME + PER_STEP:
            _assert_same(getattr(full, field), getattr(jobs, field))
        assert jobs.infos is None
        one = sim.run(policy, table, keys[2], record="final")
        for field in OUTCOME:
            _assert_same(getattr(one, field), getattr(full, field)[2])
        # summarize reads what "jobs" keeps: the same arrays into the same program, the same
        # summary bit for bit; it refuses an outcome-only trace
        _assert_same(sim.summarize(full, table), sim.summarize(jobs, table))
        with pytest.raises(ValueError, match="record='final'"):
            sim.summarize(final, table)


def _wild_policy(stop):
    """Proposes configs -2, -1, 0, ..., 4 in turn (outside a 3-row table for 4 of 7), one
    budget unit each, and terminates after ``stop`` jobs."""

    def init(cfg, key, params):
        return jnp.zeros((), jnp.int32)

    def ask(cfg, key, state, params):
        return make_job(state % 7 - 2, jnp.zeros((0,)), 1), state

    def tell(cfg, state, job, result, params):
        return state + 1, Info(state + 1 >= cfg[0], jnp.clip(job.config, 0, 2))

    return build_policy((stop,), init=init, ask=ask, tell=tell)


@pytest.mark.parametrize("stop", [5, 11])
def test_bad_jobs_are_counted_whatever_is_recorded(stop):
    """``bad_jobs`` counts the run jobs whose config lies outside the table: against a count
    over the full trace's jobs and a literal count of the proposals; a study cut by
    ``max_jobs`` counts only the jobs it ran."""
    table = sim.CurveTable(jnp.asarray([[0.5, 0.4], [0.3, 0.2], [0.9, 0.1]]))
    policy = _wild_policy(stop)
    keys = jax.random.split(jax.random.key(0), 2)
    for max_jobs in (stop, 8):
        out = _records(policy, table, keys, max_jobs=max_jobs)
        full = out["full"]
        ran = min(stop, max_jobs)
        proposed = np.arange(ran) % 7 - 2
        literal = int(np.sum((proposed < 0) | (proposed >= 3)))
        cfg = np.asarray(full.jobs.config)
        from_trace = np.sum(np.asarray(full.active) & ((cfg < 0) | (cfg >= 3)), axis=1)
        np.testing.assert_array_equal(from_trace, [literal] * 2)
        for r in sim._run.RECORDS:
            np.testing.assert_array_equal(np.asarray(out[r].bad_jobs), [literal] * 2)


def test_bad_record_raises():
    table = _table()
    policy = policies.sh(*table.values.shape)
    for bad in ("all", None, 1):
        with pytest.raises(ValueError, match="record must be one of"):
            sim.run(policy, table, jax.random.key(0), record=bad)
        with pytest.raises(ValueError, match="record must be one of"):
            sim.run_batch(policy, table, jax.random.split(jax.random.key(0), 2), record=bad)
        with pytest.raises(ValueError, match="record must be one of"):
            sim.run_many(policy, table, jax.random.key(0), 2, record=bad, progress=False)


def test_run_many_records_and_checkpoints_by_record(tmp_path):
    """``run_many`` with ``record="final"`` equals ``"full"``'s outcome; a checkpoint written
    with one record is refused with another, and resumes with its own."""
    table = _table()
    policy = policies.sh(*table.values.shape)
    key = jax.random.key(5)
    full = sim.run_many(policy, table, key, 6, chunk_size=3, progress=False)
    final = sim.run_many(policy, table, key, 6, chunk_size=3, progress=False, record="final",
                         checkpoint=tmp_path / "ck")
    for field in OUTCOME:
        _assert_same(getattr(full, field), getattr(final, field))
    assert final.jobs is None
    again = sim.run_many(policy, table, key, 6, chunk_size=3, progress=False, record="final",
                         checkpoint=tmp_path / "ck")
    _assert_same(final, again)
    with pytest.raises(ValueError, match="other arguments"):
        sim.run_many(policy, table, key, 6, chunk_size=3, progress=False, checkpoint=tmp_path / "ck")
