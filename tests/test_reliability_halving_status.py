"""Status as data in the halving family and sub-sampling: ``info.ok`` / ``info.reason`` for traced
params out of range, non-finite losses and keep decisions the dtype cannot carry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxstop
from jaxstop import policies, sim
from test_reliability_policies import error_curves


def _valid_halving_params(p):
    """The ranges of HalvingParams, transcribed from its docstring (NumPy, per member)."""
    f = {k: np.asarray(getattr(p, k), np.float64) for k in p._fields if getattr(p, k) is not None}
    with np.errstate(invalid="ignore"):
        ok = (np.isfinite(f["min_sigma"]) & (f["min_sigma"] > 0) & np.isfinite(f["min_bandwidth"])
              & (f["min_bandwidth"] > 0))
        for k, low_open in (("threshold", False), ("top_fraction", True), ("random_fraction", False)):
            v = f[k]
            ok &= np.isfinite(v) & (v <= 1) & ((v > 0) if low_open else (v >= 0))
    ok &= ~np.isinf(f["delta_sigma"]) & ~np.isinf(f["delta_profile"]).any(axis=-1)
    return ok


@pytest.mark.parametrize("name", ["sh_uq", "bohb_uq", "subsampling_uq"])
def test_traced_invalid_params_flag_exactly_their_member_and_run_on_the_defaults(name):
    """Under vmap over params check_params cannot see the values: a min_sigma of 0 or NaN,
    a threshold of 1.5, a top_fraction of 0, ... once ran silently (a NaN min_sigma made every
    sigma NaN and a UQ round keep nobody). Now each bad scalar stands replaced by its default
    (an infinite delta entry by NaN, not given), so the member's study is the default study, and
    every info of that member, and only of it, says ok False with BAD_INPUT. Oracle: the
    ranges of the HalvingParams docstring (NumPy), and the study of the default params."""
    cand = np.linspace(0.0, 1.0, 9)[:, None]
    policy = {"sh_uq": lambda: policies.sh(9, 8, eta=2, uq=True, delta_estimate="offline"),
              "bohb_uq": lambda: policies.bohb(9, 8, eta=2, uq=True, candidates=cand, delta_estimate="window"),
              "subsampling_uq": lambda: policies.subsampling(9, 8, eta=2, uq=True)}[name]()
    table = sim.CurveTable(jnp.asarray(error_curves(4)[:9, :8]) + 0.05 * jnp.asarray(cand))
    d = policy.default_params()
    inf_profile = d.delta_profile.at[2].set(jnp.inf)
    members = [d, d._replace(min_sigma=0.0), d._replace(min_sigma=jnp.nan), d._replace(threshold=1.5),
               d._replace(top_fraction=0.0), d._replace(random_fraction=-0.1), d._replace(min_bandwidth=-1e-3),
               d._replace(delta_sigma=jnp.inf), d._replace(delta_profile=inf_profile), d._replace(threshold=1.0)]
    batch = jax.tree_util.tree_map(lambda *a: jnp.stack([jnp.asarray(x, jnp.float64) for x in a]), *members)
    want = _valid_halving_params(batch)
    assert want.tolist() == [True] + [False] * 8 + [True]
    key = jax.random.key(3)
    tr = jax.vmap(lambda p: sim.run(policy, table, key, p))(batch)
    act = np.asarray(tr.active)
    ok, reason = np.asarray(tr.infos.ok), np.asarray(tr.infos.reason)
    for i, valid in enumerate(want):
        assert ok[i][act[i]].all() == valid and (~ok[i][act[i]]).all() == (not valid)
        assert set(reason[i][act[i]].tolist()) == ({0} if valid else {int(jaxstop.Reason.BAD_INPUT)})
        if not valid:  # the default study, job by job
            for a in jax.tree_util.tree_leaves((tr.jobs, tr.results, tr.incumbents)):
                np.testing.assert_array_equal(np.asarray(a)[i], np.asarray(a)[0])
    # inside jit without vmap the same; eagerly the policy's check raises (as before)
    last = jax.jit(lambda p: sim.run(policy, table, key, p))(members[2])
    assert int(last.incumbent) == int(tr.incumbent[0])
    assert not np.asarray(last.infos.ok)[np.asarray(last.active)].any()
    with pytest.raises(ValueError, match="params.min_sigma must be"):
        sim.run(policy, table, key, members[2])


@pytest.mark.parametrize("name", ["sh", "sh_uq", "hyperband_uq", "subsampling", "subsampling_uq"])
def test_a_non_finite_loss_turns_ok_false_from_the_step_that_told_it(name):
    """A diverged run (NaN at epochs 3-4 of one row, inf at epoch 2 of another, in a table
    traced under jit, whose values cannot be checked) once left every info ok. Now ok turns
    False at the first job whose losses hold one and stays False (a study-wide status), with
    BAD_INPUT; the batch protocol's per-job infos say the same as the one-job protocol's.
    Oracle: the trace's own jobs and the table, by hand: the plain versions see the job's
    last loss; the UQ versions every loss it reported (the window, 11 losses, holds all 8)."""
    T = 8
    v = error_curves(5)[:9, :T].copy()
    v[8, 2:4] = np.nan  # the best rows: most studies train them that far
    v[4, 1] = np.inf
    uq = name.endswith("uq")
    policy = {"sh": lambda: policies.sh(9, T, eta=2), "sh_uq": lambda: policies.sh(9, T, eta=2, uq=True),
              "hyperband_uq": lambda: policies.hyperband(9, T, eta=2, uq=True, delta_estimate="window"),
              "subsampling": lambda: policies.subsampling(9, T, eta=2),
              "subsampling_uq": lambda: policies.subsampling(9, T, eta=2, uq=True)}[name]()
    hit = 0
    # one compiled program per protocol, the key an argument (not a new closure per seed)
    programs = [jax.jit(lambda t, k, b=b: sim.run(policy, sim.CurveTable(t), k, batched=b))
                for b in ((True, False) if policy.ask_batch is not None else (None,))]
    for seed in range(3):
        key = jax.random.key(seed)
        runs = [run(jnp.asarray(v), key) for run in programs]
        tr = runs[0]
        n = int(tr.num_jobs)
        cfg, start, ep = (np.asarray(a)[:n] for a in (tr.jobs.config, tr.jobs.start, tr.results.epoch))
        bad = [not np.all(np.isfinite(v[c, (s if uq else e - 1):e])) for c, s, e in zip(cfg, start, ep)]
        want = np.cumsum(bad) == 0
        hit += not want.all()
        for r in runs:
            np.testing.assert_array_equal(np.asarray(r.infos.ok)[:n], want)
            np.testing.assert_array_equal(np.asarray(r.infos.reason)[:n],
                                          np.where(want, 0, int(jaxstop.Reason.BAD_INPUT)))
    assert hit  # some study met a bad loss


def test_a_window_variance_beyond_float32_is_reported_at_the_decision_that_used_it():
    """delta_estimate="window_var" on float32 losses near 1e20: the window variances overflow
    and the keep rule takes Delta_t sigma as 0 (no shrinkage), as it did before, but the infos
    said ok. Now the first UQ decision (not a fallback) and every info after it say ok False,
    NOT_FINITE; the infos before it (the first rung's fallback included) stay ok. Oracle: the
    float64 variance of a window of these losses, beyond float32's largest number."""
    T = 9
    rng = np.random.default_rng(0)
    values = (1e20 * (1.0 + 0.1 * np.arange(9))[:, None] + 3e19 * rng.standard_normal((9, T))).astype(np.float32)
    assert np.var(values[:, :3].astype(np.float64), axis=1, ddof=1).max() > np.finfo(np.float32).max
    policy = policies.sh(9, T, uq=True, delta_estimate="window_var", dtype=jnp.float32)
    tr = sim.run(policy, sim.CurveTable(jnp.asarray(values)), jax.random.key(0))
    n = int(tr.num_jobs)
    uq_decision = (np.asarray(tr.infos.decisions)[:n] == 1) & ~np.asarray(tr.infos.fallback)[:n]
    assert uq_decision.any() and np.asarray(tr.infos.fallback)[:n][np.asarray(tr.infos.decisions)[:n] == 1][0]
    first = int(np.argmax(uq_decision))
    np.testing.assert_array_equal(np.asarray(tr.infos.ok)[:n], np.arange(n) < first)
    assert set(np.asarray(tr.infos.reason)[first:n].tolist()) == {int(jaxstop.Reason.NOT_FINITE)}
    # the standard-deviation estimate stays within float32: the same study says ok throughout
    std = sim.run(policies.sh(9, T, uq=True, delta_estimate="window", dtype=jnp.float32),
                  sim.CurveTable(jnp.asarray(values)), jax.random.key(0))
    assert np.asarray(std.infos.ok)[: int(std.num_jobs)].all()


@pytest.mark.parametrize("name", ["sh", "sh_uq", "hyperband_uq", "subsampling_uq"])
def test_default_params_say_ok_throughout_studies_on_the_alexnet_table(name):
    """The status must not cry wolf: the default params on the embedded AlexNet curves (their
    ended curves padded as in jaxstop.demo) say ok at every step of every study. Hyperband+
    meets plateaued runs (errors flat at 0.999, sigma at the floor) behind the leaders: with a
    floor of 1e-6, below the spread prob_best's rule resolves in that window, its decisions
    were UNREPRESENTABLE in two of these three studies; the default floor 2^-18 is resolved."""
    from jaxstop import data

    c = data.alexnet_curves()
    table = sim.CurveTable(np.where(c.mask, c.values, 0.0), c.mask)
    n, t = c.values.shape
    policy = {"sh": lambda: policies.sh(n, t, 3), "sh_uq": lambda: policies.sh(n, t, 3, True),
              "hyperband_uq": lambda: policies.hyperband(n, t, 3, True),
              "subsampling_uq": lambda: policies.subsampling(n, t, uq=True)}[name]()
    keys = jax.random.split(jax.random.key(0), 8)[2:5]
    tr = jax.vmap(lambda k: sim.run(policy, table, k))(keys)
    act = np.asarray(tr.active)
    assert np.asarray(tr.infos.ok)[act].all() and not np.asarray(tr.infos.reason)[act].any()
    if name == "hyperband_uq":  # the check is live: the floor of 1e-6 is not resolved there
        d = policy.default_params()
        low = d._replace(min_sigma=jnp.asarray(1e-6, d.min_sigma.dtype))
        tr = jax.vmap(lambda k: sim.run(policy, table, k, low))(keys)
        last = np.asarray(tr.num_jobs) - 1
        reason = np.asarray(tr.infos.reason)[np.arange(3), last]
        assert (reason == int(jaxstop.Reason.UNREPRESENTABLE)).any(), reason
