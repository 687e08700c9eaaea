"""Tests of the ask/tell protocol, random search, the simulator and save / load."""

import os
import subprocess
import sys
import textwrap
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxstop
from _compiles import count_compilations
from _oracles import drive
from jaxstop import policies, sim


def ragged_table(rng, num_configs=12, max_budget=9, with_configs=True):
    lengths = rng.integers(3, max_budget + 1, size=num_configs)
    mask = np.arange(max_budget)[None, :] < lengths[:, None]
    decay = rng.uniform(0.1, 0.9, size=(num_configs, 1))
    floor = rng.uniform(0.05, 0.5, size=(num_configs, 1))
    values = floor + decay * np.exp(-0.4 * np.arange(1, max_budget + 1))[None, :]
    values = np.where(mask, values, np.nan)  # padded entries are garbage
    test = values + 0.01
    configs = rng.uniform(size=(num_configs, 3)) if with_configs else None
    return sim.CurveTable(values, mask, test, configs), lengths


def python_loop(policy, table, key, max_jobs):
    """The protocol driven by hand, eagerly, with NumPy table lookups (tests/_oracles.py)."""
    return drive(policy, np.asarray(table.values), np.asarray(table.mask).sum(1), key, max_jobs)


def test_random_search_loop_scan_vmap_agree(rng):
    table, lengths = ragged_table(rng)
    policy = policies.random_search(12, max_budget=9, candidates=table.configs)
    keys = jax.random.split(jax.random.key(3), 5)
    batch = jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=15))(keys)
    for i, k in enumerate(keys):
        ref = python_loop(policy, table, k, 15)
        one = sim.run(policy, table, k, max_jobs=15)
        for tr in (one, jax.tree_util.tree_map(lambda a: a[i], batch)):
            assert int(tr.budget) == ref["spent"]
            assert int(tr.incumbent) == ref["incumbent"]
            assert int(tr.stop_job) == ref["stop_job"]
            n = len(ref["configs"])
            assert np.asarray(tr.jobs.config)[:n].tolist() == ref["configs"]
            assert np.all(np.asarray(tr.active)[:n]) and not np.any(np.asarray(tr.active)[n:])


def test_random_search_without_replacement_finds_the_table_optimum(rng):
    """Closed form: evaluating every row once returns argmin of the final losses
    and spends the sum of the curve lengths."""
    table, lengths = ragged_table(rng)
    final = np.asarray(table.values)[np.arange(12), lengths - 1]
    policy = policies.random_search(12, max_budget=9)
    tr = sim.run(policy, table, jax.random.key(0), max_jobs=20)
    assert int(tr.incumbent) == int(np.argmin(final))
    assert float(tr.incumbent_value) == pytest.approx(final.min())
    assert float(tr.incumbent_test) == pytest.approx(final.min() + 0.01)
    assert int(tr.budget) == int(lengths.sum())
    assert int(tr.stop_job) == 11 and int(tr.num_jobs) == 12
    assert sorted(np.asarray(tr.jobs.config)[:12].tolist()) == list(range(12))
    assert int(tr.bad_jobs) == 0
    np.testing.assert_array_equal(np.asarray(tr.spent)[11:], lengths.sum())


def test_random_search_cube_mode(key):
    policy = policies.random_search(dim=4, max_budget=3)
    state = policy.init(key)
    job, _ = policy.ask(jax.random.key(1), state, ())
    assert int(job.config) == -1 and job.x.shape == (4,)
    assert bool(jnp.all((job.x >= 0) & (job.x <= 1)))


class StopAbove(NamedTuple):
    threshold: jax.Array


def early_stopping_policy(num_configs, max_budget):
    """A toy policy with a per-epoch hook: stop a job once its loss exceeds a threshold
    after epoch 2, and terminate after ``num_configs`` jobs."""
    base = policies.random_search(num_configs, max_budget=max_budget)

    def report(state, job, epoch, value, params):
        return state, (epoch >= 2) & (value > params.threshold)

    return policies.Policy(base.init, base.ask, report, base.tell, lambda: StopAbove(jnp.asarray(0.4)))


def test_report_hook_stops_jobs_like_the_python_loop(rng):
    table, lengths = ragged_table(rng)
    policy = early_stopping_policy(12, 9)
    key = jax.random.key(5)
    ref = python_loop(policy, table, key, 12)
    tr = sim.run(policy, table, key, max_jobs=12)
    assert int(tr.budget) == ref["spent"]
    assert int(tr.incumbent) == ref["incumbent"]
    values = np.asarray(table.values)
    for c, e, stopped in zip(np.asarray(tr.jobs.config), np.asarray(tr.results.epoch), np.asarray(tr.results.stopped)):
        row = values[c, : lengths[c]]
        over = np.nonzero((np.arange(1, lengths[c] + 1) >= 2) & (row > 0.4))[0]
        expected = over[0] + 1 if len(over) else lengths[c]
        assert e == expected and stopped == bool(len(over))
    # vmapping over params: a threshold above every loss never stops a job.
    thresholds = StopAbove(jnp.array([0.4, 10.0]))
    trs = jax.vmap(lambda p: sim.run(policy, table, key, p, max_jobs=12))(thresholds)
    assert int(trs.budget[0]) == ref["spent"] and int(trs.budget[1]) == int(lengths.sum())


def test_no_retrace_for_new_keys_or_params(rng):
    table, _ = ragged_table(rng)
    policy = early_stopping_policy(12, 9)
    with count_compilations() as first:
        sim.run(policy, table, jax.random.key(0), max_jobs=12)
    assert first["_run"] == 1  # a new policy: one program (and the count sees it)
    values2 = np.where(np.asarray(table.mask), np.asarray(table.values) * 0.5, 0.0)
    with count_compilations() as compiled:
        sim.run(policy, table, jax.random.key(1), StopAbove(jnp.asarray(0.3)), max_jobs=12)
        sim.run(policy, table._replace(values=values2), jax.random.key(2), max_jobs=12)
    assert compiled["_run"] == 0


def test_save_load_round_trip(tmp_path, rng):
    table, _ = ragged_table(rng)
    policy = policies.random_search(12, max_budget=9, candidates=table.configs)
    state = policy.init(jax.random.key(0))
    job, state = policy.ask(jax.random.key(1), state, ())
    state, _ = policy.tell(state, job, policies.Result(jnp.asarray(0.3), jnp.asarray(9, jnp.int32), jnp.asarray(False)), ())
    tree = {"state": state, "key": jax.random.key(42), "trace": sim.run(policy, table, jax.random.key(2), max_jobs=4)}
    path = tmp_path / "state.npz"
    jaxstop.save(tree, path)
    back = jaxstop.load(path, like=tree)
    for a, b in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(back)):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # The restored state continues exactly like the original.
    j1, _ = policy.ask(jax.random.key(9), state, ())
    j2, _ = policy.ask(jax.random.key(9), back["state"], ())
    assert int(j1.config) == int(j2.config)
    with pytest.raises(ValueError, match="leaves"):
        jaxstop.load(path, like={"state": state})


@pytest.mark.parametrize(
    "make, err, match",
    [
        (lambda v, m: sim.CurveTable(v[0]), ValueError, "table.values must be 2-D"),
        (lambda v, m: sim.CurveTable(v, m[:, ::-1]), ValueError, "prefix"),
        (lambda v, m: sim.CurveTable(v, m.astype(int)), TypeError, "table.mask must have dtype bool"),
        (lambda v, m: sim.CurveTable(v, m, test=v[:, :2]), ValueError, "table.test must have shape"),
        (lambda v, m: sim.CurveTable(v, m, configs=np.full((4, 2), 2.0)), ValueError, "unit cube"),
        (lambda v, m: sim.CurveTable(np.where(m, np.nan, v), m), ValueError, "non-finite"),
    ],
)
def test_bad_tables_raise(make, err, match):
    v = np.ones((4, 5))
    m = np.arange(5)[None, :] < np.array([[5], [3], [4], [1]])
    policy = policies.random_search(4, max_budget=5)
    with pytest.raises(err, match=match):
        sim.run(policy, make(v, m), jax.random.key(0), max_jobs=3)


def test_bad_run_arguments_raise():
    table = sim.CurveTable(np.ones((4, 5)))
    policy = policies.random_search(4, max_budget=5)
    with pytest.raises(ValueError, match="max_jobs must be >= 1"):
        sim.run(policy, table, jax.random.key(0), max_jobs=0)
    with pytest.raises(TypeError, match="policy must be"):
        sim.run(lambda: None, table, jax.random.key(0), max_jobs=2)
    with pytest.raises(ValueError, match="num_configs \\(3\\) must equal"):
        policies.random_search(3, max_budget=5, candidates=np.zeros((4, 2)))
    with pytest.raises(ValueError, match="max_budget must be >= 1"):
        policies.random_search(3, max_budget=0)
    # a table narrower than the policy's max_budget: no curve could reach it
    with pytest.raises(ValueError, match="max_budget=6 budget units but table.values has 5 columns"):
        sim.run(policies.sh(4, 6), table, jax.random.key(0))
    # params that are not the policy's (a number, another policy's params)
    with pytest.raises(TypeError, match="params must have the structure of policy.default_params"):
        sim.run(policies.sh(4, 5, uq=True), table, jax.random.key(0), params=3)
    with pytest.raises(TypeError, match="params must have the structure"):
        sim.run_batch(policy, table, jax.random.split(jax.random.key(0), 2), params=policies.sh(4, 5).default_params())
    with pytest.raises(TypeError, match="one PRNG key"):
        sim.run(policy, table, jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError, match="devices must name at least one device"):
        sim.run_batch(policy, table, jax.random.split(jax.random.key(0), 2), devices=[])
    with pytest.raises(ValueError, match="devices must name at least one device"):
        sim.run_many(policy, table, jax.random.key(0), 2, devices=[], progress=False)
    for dtype in (jnp.int32, jnp.float16, "bfloat16", bool):
        with pytest.raises(TypeError, match="dtype must be a floating dtype"):
            policies.sh(4, 5, dtype=dtype)
        with pytest.raises(TypeError, match="dtype must be a floating dtype"):
            policies.random_search(4, max_budget=5, dtype=dtype)


def test_run_batch_shards_over_eight_host_devices(tmp_path):
    """Sharded runs over 8 (forced host) devices equal the vmapped runs, also with each
    device's share run in blocks."""
    code = textwrap.dedent(
        """
        import os
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8 --xla_cpu_multi_thread_eigen=false"
        import jax, jax.numpy as jnp, numpy as np
        from jaxstop import policies, sim
        assert len(jax.devices()) == 8
        rs = np.random.default_rng(0)
        table = sim.CurveTable(rs.uniform(size=(20, 6)))
        policy = policies.random_search(20, max_budget=6)
        keys = jax.random.split(jax.random.key(0), 16)
        out = sim.run_batch(policy, table, keys, max_jobs=7)
        ref = jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=7))(keys)
        assert len(out.incumbent.sharding.device_set) == 8
        np.testing.assert_array_equal(out.incumbent, ref.incumbent)
        np.testing.assert_array_equal(out.budget, ref.budget)
        # each device's share in blocks (2 studies per device, blocks of 1 here)
        from jaxstop._src import batching
        batching.CPU_BLOCK = 1
        blocked = sim.run_batch(policy, table, keys, max_jobs=7)
        assert len(blocked.incumbent.sharding.device_set) == 8
        np.testing.assert_array_equal(blocked.incumbent, ref.incumbent)
        np.testing.assert_array_equal(blocked.budget, ref.budget)
        np.testing.assert_array_equal(blocked.jobs.config, ref.jobs.config)
        print("ok")
        """
    )
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip().endswith("ok")


def test_equal_policies_are_equal_and_compile_once():
    """Policies are built by policies.build_policy from a static config hashed by value:
    two equal factory calls give equal policies, and sim.run compiles one program for both."""
    table = sim.CurveTable(jnp.linspace(1.0, 0.1, 7)[:, None] * jnp.ones((7, 4)))
    a, b = policies.random_search(7, max_budget=4), policies.random_search(7, max_budget=4)
    assert a == b and hash(a) == hash(b)
    assert a != policies.random_search(7, max_budget=3) and a != policies.random_search(7, max_budget=4, replace=True)
    with count_compilations() as compiled:
        ta = sim.run(a, table, jax.random.key(0), max_jobs=7)
        tb = sim.run(b, table, jax.random.key(0), max_jobs=7)
    assert compiled["_run"] == 1
    for x, y in zip(jax.tree_util.tree_leaves(ta), jax.tree_util.tree_leaves(tb)):
        np.testing.assert_array_equal(x, y)
    assert int(ta.incumbent) == 6 and int(ta.budget) == 28


def test_default_params_are_kept_concrete_only():
    """policy.default_params() built eagerly is kept and returned again (the same arrays), per
    x64 setting; defaults first built inside jit are tracers and are not kept (a later eager
    call returns concrete arrays); a deep copy of the policy starts without the kept ones and builds
    equal ones; params that are the defaults skip the check that user params take."""
    import copy

    policy = policies.sh(9, 9, eta=3, uq=True, dtype=jnp.float32)
    seen = []
    jax.jit(lambda x: (seen.append(policy.default_params()), x)[1])(1.0)
    assert all(isinstance(a, jax.core.Tracer) for a in jax.tree_util.tree_leaves(seen[0]))
    first = policy.default_params()
    leaves = jax.tree_util.tree_leaves(first)
    assert leaves and not any(isinstance(a, jax.core.Tracer) for a in leaves)
    assert policy.default_params() is first
    assert policies.sh(9, 9, eta=3, uq=True).default_params() is not first  # kept per policy object
    with jax.enable_x64(False):
        assert policy.default_params() is not first  # dtypes without an explicit one follow x64
    for other in (copy.deepcopy(policy),):
        again = other.default_params()
        assert again is not first and other == policy
        for x, y in zip(leaves, jax.tree_util.tree_leaves(again)):
            assert x.dtype == y.dtype
            np.testing.assert_array_equal(x, y)
    # the kept defaults pass without the check; equal params of other arrays still go through it
    # (compiled first: tracing the steps runs the check on traced params)
    table = sim.CurveTable(jnp.linspace(1.0, 0.1, 9, dtype=jnp.float32)[:, None] * jnp.ones((9, 9), jnp.float32))
    sim.run(policy, table, jax.random.key(0), record="final")
    calls = []
    check = policy.init.check
    policy.init.check = lambda config, params: (calls.append(1), check(config, params))[1]
    try:
        sim.run(policy, table, jax.random.key(0), first, record="final")
        assert calls == []
        sim.run(policy, table, jax.random.key(0), jax.tree_util.tree_map(jnp.copy, first), record="final")
        assert calls == [1]
    finally:
        policy.init.check = check


def test_incumbent_tracker_is_a_strict_running_minimum():
    """update_incumbent: NaN never wins, ties keep the earlier result, ok masks out, replace wins."""
    values = [0.5, np.nan, 0.3, 0.3, 0.7, np.inf, 0.1]
    inc = policies.init_incumbent(jnp.float64, 1)
    for i, v in enumerate(values):
        inc = policies.update_incumbent(inc, jnp.asarray(v), i, jnp.full((1,), float(i)), ok=i != 6)
    assert (float(inc.value), int(inc.config), float(inc.x[0])) == (0.3, 2, 2.0)
    inc = policies.update_incumbent(inc, jnp.asarray(0.9), 9, jnp.zeros((1,)), replace=True)
    assert (float(inc.value), int(inc.config)) == (0.9, 9) and inc.value.dtype == jnp.float64


def test_best_value_is_a_deprecated_alias_of_incumbent_value():
    policy = policies.random_search(3, max_budget=2)
    state = policy.init(jax.random.key(0))
    job, state = policy.ask(jax.random.key(1), state)
    result = policies.Result(jnp.asarray(0.25), jnp.asarray(2, jnp.int32), jnp.asarray(False))
    state, info = policy.tell(state, job, result)
    assert float(info.incumbent_value) == float(state.incumbent_value) == 0.25
    with pytest.warns(DeprecationWarning, match="incumbent_value"):
        assert float(info.best_value) == 0.25
    with pytest.warns(DeprecationWarning, match="incumbent_value"):
        assert float(state.best_value) == 0.25


def test_every_deprecated_field_alias_warns_and_reads_incumbent_value():
    """Each state / info field kept under its old name (best_value, inc_value) warns and
    reads incumbent_value."""
    aliases = [(cls, name) for cls in vars(policies).values() if isinstance(cls, type)
               for name, prop in vars(cls).items()
               if isinstance(prop, property) and (prop.__doc__ or "").startswith("Deprecated alias")]
    assert {(c.__name__, n) for c, n in aliases} >= {("HalvingState", "inc_value"), ("BoBosInfo", "best_value"),
                                                    ("AutoTerminationInfo", "best_value")}
    for cls, name in aliases:
        obj = cls(*range(len(cls._fields)))
        with pytest.warns(DeprecationWarning, match=rf"^{cls.__name__}\.{name} is deprecated.*use \.incumbent_value"):
            assert getattr(obj, name) == obj.incumbent_value


def test_policy_steps_document_themselves():
    """help(policy.tell) shows what the step does, with the protocol's signature."""
    import inspect

    x = np.linspace(0.0, 1.0, 9)[:, None]
    built = [policies.random_search(9, max_budget=9), policies.sh(9, 9, uq=True), policies.bohb(9, 9, candidates=x),
             policies.subsampling(9, 9, uq=True), policies.bo_bos(x, max_budget=9, max_evals=4, n0=3),
             policies.auto_termination_bo(max_budget=9, max_evals=4, candidates=x, threshold=0.1, num_init=2)]
    for policy in built:
        for name in ("init", "ask", "report", "tell"):
            step = getattr(policy, name)
            if step is None:
                continue
            assert step.__doc__.lstrip().startswith(f"``{name}("), (policy, name)
            params = list(inspect.signature(step).parameters)
            assert params[-1] == "params" and len(params) == {"init": 2, "ask": 3, "report": 5, "tell": 4}[name]


@pytest.mark.parametrize("uq", [False, True])
def test_traced_tables_count_the_jobs_they_cannot_answer(uq):
    # A table traced under vmap cannot be checked: a configuration without a valid entry
    # (row 2 of the second table) or a NaN at a job's end (row 1 of the third) must
    # neither be read as a loss (the masked entry 0.05 was once returned as the incumbent's
    # loss) nor pass unflagged: the job counts in bad_jobs and its result is NaN.
    values = jnp.asarray([[0.9, 0.5, 0.4], [0.8, 0.3, 0.2], [0.7, 0.1, 0.05]])
    full = jnp.ones((3, 3), bool)
    empty_row = full.at[2].set(False)
    masks = jnp.stack([full, empty_row, full])
    vals = jnp.stack([values, values, values.at[1, 2].set(jnp.nan).at[2].set(jnp.nan)])
    policy = (policies.sh(3, 3, eta=3, uq=True, delta_estimate="window") if uq
              else policies.random_search(3, max_budget=3))

    def run(v, m):
        return sim.run(policy, sim.CurveTable(v, m), jax.random.key(0), max_jobs=8)

    tr = jax.vmap(run)(vals, masks)
    assert np.asarray(tr.bad_jobs)[0] == 0 and int(tr.incumbent[0]) == 2
    assert float(tr.incumbent_value[0]) == 0.05
    for b, rows in ((1, [2]), (2, [1, 2])):
        active, config = np.asarray(tr.active[b]), np.asarray(tr.jobs.config[b])
        result = np.asarray(tr.results.value[b])
        # every job on the empty row gives NaN; the bad jobs are the active ones with NaN
        assert np.all(np.isnan(result[active & (config == 2)]))
        bad = active & np.isin(config, rows) & np.isnan(result)
        assert bad.sum() >= 1 and int(tr.bad_jobs[b]) == bad.sum() == np.sum(active & np.isnan(result))
        # the incumbent's loss is its curve's last: NaN exactly when that is a bad row (SH may
        # keep row 1 of the third table, whose early losses are finite); never the empty row
        inc = int(tr.incumbent[b])
        assert inc != 2 and np.isfinite(float(tr.incumbent_value[b])) == (inc not in rows)
