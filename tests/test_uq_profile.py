"""The offline uncertainty profile of Appendix C (confidence.delta_sigma_profile) and its
use by the UQ halving policies (delta_estimate = "profile" / "window" / "window_var" /
"offline").

Oracles: a NumPy transcription of the procedure (np.std, np.polyfit), curves whose
window std is a known piecewise function (closed form), the simulator's two protocols
against each other, and the documented budget identity.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _oracles import drive
from jaxstop import confidence, policies, sim
from jaxstop._src.status import Reason

EPS = np.finfo(np.float64).eps


# --------------------------------------------------------------------------
# the kernel


def np_profile(curves, window, breakpoints):
    """Appendix C's procedure, transcribed loop by loop: per candidate and epoch the std
    (ddof = 1) of the last `window` finite losses where the candidate reached the epoch,
    their mean, one least-squares line per phase (np.polyfit; phase 2 on log sigma over the
    epochs with sigma > 0; the flat line through a single point). None when a non-empty
    phase has no usable epoch."""
    m, T = curves.shape
    sig = np.zeros((m, T))
    defined = np.zeros((m, T), bool)
    for c in range(m):
        for t in range(1, T + 1):
            if not np.isfinite(curves[c, t - 1]):
                continue
            w = curves[c, max(0, t - window):t]
            w = w[np.isfinite(w)]
            if len(w) >= 2:
                sig[c, t - 1], defined[c, t - 1] = np.std(w, ddof=1), True
    count = defined.sum(0)
    agg = np.where(count > 0, sig.sum(0) / np.maximum(count, 1), 0.0)
    bounds = [1, *breakpoints, T + 1]
    fit = np.zeros(T)
    for p in range(4):
        ts = np.arange(bounds[p], bounds[p + 1])
        if len(ts) == 0:
            continue
        use = np.array([t for t in ts if count[t - 1] > 0 and (p != 1 or agg[t - 1] > 0)], int)
        if len(use) == 0:
            return None
        y = np.log(agg[use - 1]) if p == 1 else agg[use - 1]
        slope, icpt = np.polyfit(use, y, 1) if len(use) >= 2 else (0.0, y[0])
        line = slope * ts + icpt
        fit[ts - 1] = np.exp(line) if p == 1 else line
    delta = np.append(fit[:-1] - fit[1:], fit[-2] - fit[-1])
    return dict(sigma=sig, count=count, aggregate=agg, fit=fit, delta=delta)


def noisy_curves(seed, m, T, ragged=False):
    rng = np.random.default_rng(seed)
    t = np.arange(1, T + 1)
    v = (rng.uniform(0.1, 0.5, (m, 1)) + rng.uniform(0.2, 1.0, (m, 1)) * np.exp(-rng.uniform(0.02, 0.2, (m, 1)) * t)
         + 0.02 * rng.normal(size=(m, T)))
    if ragged:
        lengths = rng.integers(T // 2, T + 1, m)
        lengths[0] = T  # one full curve: every phase has data
        v = np.where(t[None, :] <= lengths[:, None], v, np.nan)
    return v


@pytest.mark.parametrize("T, window, ragged", [(200, 10, False), (60, 10, True), (40, 5, False)])
def test_profile_matches_numpy_transcription(T, window, ragged):
    curves = noisy_curves(T, 4, T, ragged)
    # a padded candidate holding garbage has no effect
    padded = np.concatenate([curves, np.full((1, T), 1e30)])
    mask = np.array([True] * 4 + [False])
    prof = confidence.delta_sigma_profile(padded, mask, window=window)
    b = confidence.default_breakpoints(T)
    ref = np_profile(curves, window, b)
    assert bool(prof.ok) and int(prof.reason) == Reason.OK
    assert prof.breakpoints.tolist() == list(b)
    # per-candidate sigma is confidence.window_std at every epoch, where defined
    for t in range(1, T + 1):
        ws = confidence.window_std(curves, jnp.full((4,), t), window)
        np.testing.assert_allclose(np.asarray(prof.sigma)[:4, t - 1], np.where(ref["sigma"][:, t - 1] > 0, ws, 0.0),
                                   rtol=1e-13, atol=0)
    assert np.all(np.asarray(prof.sigma)[4] == 0)
    np.testing.assert_array_equal(prof.count, ref["count"])
    # Two programs: the window std is a two-pass sum of <= window terms on both sides
    # (relative rounding <= ~4 window eps), so the aggregates agree to 1e-13. The line
    # fits differ in method (centred normal equations vs np.polyfit's scaled lstsq): each
    # is backward stable, so a fitted value moves by <= ~n eps kappa max|y| with n <= T
    # points and kappa (the conditioning of [t, 1] over a phase) <= ~T; with T <= 200 that
    # is <= 200 * 200 * 2.2e-16 ~ 1e-11 of the largest sigma; 1e-9 leaves a margin and is
    # far below the differences a wrong rule makes (>= 1e-4 here).
    np.testing.assert_allclose(prof.aggregate, ref["aggregate"], rtol=1e-13, atol=0)
    scale = np.max(ref["aggregate"])
    np.testing.assert_allclose(prof.fit, ref["fit"], rtol=0, atol=1e-9 * scale)
    np.testing.assert_allclose(prof.delta, ref["delta"], rtol=0, atol=2e-9 * scale)


def g_piecewise(t):
    """A known sigma(t) of Appendix C's shape on 200 epochs (breakpoints 6, 50, 180)."""
    t = np.asarray(t, float)
    return np.select([t < 6, t < 50, t < 180],
                     [0.01 * t + 0.02, 0.2 * np.exp(-0.05 * t), 1e-4 * t + 0.01], -2e-4 * t + 0.1)


def test_profile_recovers_a_known_piecewise_sigma():
    # With window = 2 the std (ddof = 1) of losses x_{t-1}, x_t is |x_t - x_{t-1}| / sqrt 2,
    # so curves with increments d_t = +-sqrt(2) k_c g(t) have sigma_c(t) = k_c g(t) exactly
    # (to rounding). Their mean is kbar g(t): linear in phases 1, 3, 4 and exponential in
    # phase 2, so the phase-wise least squares must return g's own coefficients and
    # fit(t) = kbar g(t) at every epoch (epoch 1 on phase 1's line), delta(t) = kbar (g(t) -
    # g(t + 1)). One epoch of phase 2 has sigma = 0 for every candidate: the log fit leaves
    # it out (guard) and still recovers the exponential.
    T = 200
    t = np.arange(1, T + 1)
    k = np.array([0.5, 1.0, 2.0])
    d = np.sqrt(2) * k[:, None] * g_piecewise(t)[None, :] * (-1.0) ** t[None, :]
    d[:, 19] = 0.0  # epoch 20: no change from epoch 19, sigma_c(20) = 0
    curves = np.cumsum(d, axis=1)  # alternating signs: |x| stays below max |d|
    prof = confidence.delta_sigma_profile(curves, window=2)
    assert bool(prof.ok)
    kbar = k.mean()
    # Rounding: x_t - x_{t-1} recovers d_t to ~2 eps max|x| <= 2 eps max|d|, and max|d| /
    # min|d| <= 12 over a curve (d_20 = 0 aside, which gives exactly 0), so sigma_c is exact
    # to ~30 eps relative. A fitted value inside its phase is a combination of the phase's
    # sigma(t) with absolute weights summing to <= 4 (a line's hat matrix), so it inherits
    # <= 120 eps plus ~n eps (n <= 130 points) of its own sums: < 1e-13 relative; the
    # coefficients likewise (slope errors times t <= 200 enter the intercepts). 1e-10 / 1e-9
    # leave margin and are far below what a wrong model gives (>= 1e-3 relative).
    np.testing.assert_allclose(prof.coef[1], [-0.05, np.log(0.2 * kbar)], rtol=1e-10)
    lines = kbar * np.array([[0.01, 0.02], [1e-4, 0.01], [-2e-4, 0.1]])  # phases 1, 3, 4
    np.testing.assert_allclose(np.asarray(prof.coef)[[0, 2, 3]], lines,
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(prof.fit, kbar * g_piecewise(t), rtol=1e-10)
    want = kbar * (g_piecewise(t) - g_piecewise(t + 1))
    want[-1] = want[-2]
    np.testing.assert_allclose(prof.delta, want, rtol=0, atol=1e-10 * kbar * 0.2)
    # the uncertainty rises in phase 1 (negative delta), falls in phase 2, jumps at breakpoints
    assert np.all(np.asarray(prof.delta)[:4] < 0) and np.all(np.asarray(prof.delta)[6:48] > 0)


def test_default_breakpoints_scale_the_papers_200_epochs():
    assert confidence.default_breakpoints(200) == (6, 50, 180)
    assert confidence.default_breakpoints(400) == (12, 100, 360)
    # half up, then phase 1 keeps epochs 1 and 2 (a sigma needs two losses)
    assert confidence.default_breakpoints(52) == (3, 13, 47)
    assert confidence.default_breakpoints(20) == (3, 5, 18)
    assert confidence.default_breakpoints(2) == (3, 3, 3)


def test_profile_reports_what_it_cannot_fit():
    T = 40
    curves = noisy_curves(1, 3, T)
    # no real candidate
    none = confidence.delta_sigma_profile(curves, np.zeros(3, bool))
    assert not bool(none.ok) and int(none.reason) == Reason.EMPTY
    assert np.all(np.asarray(none.delta) == 0) and np.all(np.isfinite(none.fit))
    # curves that end before phase 4: a non-empty phase without data
    short = np.where(np.arange(T)[None, :] < 20, curves, np.nan)
    res = confidence.delta_sigma_profile(short)
    assert not bool(res.ok) and int(res.reason) == Reason.EMPTY
    # given breakpoints that leave the late phases empty make it fittable
    res = confidence.delta_sigma_profile(short, breakpoints=np.array([3, 10, 41]))
    ref = np_profile(short, 10, (3, 10, 41))
    assert bool(res.ok)
    np.testing.assert_allclose(res.delta[:19], ref["delta"][:19], rtol=0, atol=1e-9 * ref["aggregate"].max())
    # constant curves: sigma = 0 leaves the exponential phase without usable epochs
    flat = confidence.delta_sigma_profile(np.ones((3, T)))
    assert not bool(flat.ok) and int(flat.reason) == Reason.EMPTY
    # inside jit, bad breakpoints are data
    bad = jax.jit(lambda c, b: confidence.delta_sigma_profile(c, breakpoints=b))(curves, jnp.array([10, 5, 30]))
    assert not bool(bad.ok) and int(bad.reason) == Reason.BAD_INPUT
    # jit and vmap run the same program as the eager call
    eager = confidence.delta_sigma_profile(curves)
    jitted = jax.jit(confidence.delta_sigma_profile)(curves)
    mapped = jax.vmap(confidence.delta_sigma_profile)(jnp.stack([curves, curves[::-1]]))
    np.testing.assert_array_equal(eager.delta, jitted.delta)
    np.testing.assert_allclose(mapped.delta[0], eager.delta, rtol=1e-12, atol=1e-15)  # vmap: same sums, batched
    assert confidence.delta_sigma_profile(curves.astype(np.float32)).delta.dtype == jnp.float32


@pytest.mark.parametrize("call, err, match", [
    (lambda c: confidence.delta_sigma_profile(c[0]), ValueError, "curves must be 2-D"),
    (lambda c: confidence.delta_sigma_profile(c, window=1), ValueError, "window must be a Python int >= 2"),
    (lambda c: confidence.delta_sigma_profile(c, np.ones(2, bool)), ValueError, "mask must have shape"),
    (lambda c: confidence.delta_sigma_profile(c, breakpoints=[10, 5, 30]), ValueError, "non-decreasing"),
    (lambda c: confidence.delta_sigma_profile(c, breakpoints=[3, 5]), ValueError, "shape \\(3,\\)"),
    (lambda c: confidence.delta_sigma_profile(c, breakpoints=[3.0, 5.0, 9.0]), TypeError, "integers"),
    (lambda c: confidence.delta_sigma_profile(c.astype(jnp.float16)), TypeError, "float16"),
])
def test_profile_bad_arguments_raise(call, err, match):
    with pytest.raises(err, match=match):
        call(jnp.asarray(noisy_curves(2, 3, 20)))


# --------------------------------------------------------------------------
# the policies

N, T, ETA = 9, 20, 3  # SH: 9 candidates, rungs at 2, 7, 20 epochs (r_0 = 2)


def policy_table(seed, ragged=False, flat=False):
    v = noisy_curves(seed, N, T)
    lengths = np.full(N, T)
    if ragged:  # every other curve ends between epochs 8 and T
        lengths[1::2] = np.random.default_rng(seed).integers(8, T + 1, N)[1::2]
    if flat:
        v = np.full((N, T), 0.5) + np.linspace(0, 0.1, N)[:, None]
    mask = np.arange(T)[None, :] < lengths[:, None]
    return sim.CurveTable(jnp.asarray(np.where(mask, v, np.nan)), jnp.asarray(mask)), lengths


SH_PLUS = policies.sh(N, T, ETA, uq=True)


def test_profile_schedule_and_budget_accounting():
    sched = policies.halving_schedule("sh", N, T, ETA, uq=True)
    plain = policies.halving_schedule("sh", N, T, ETA, uq=True, num_profile=0)
    assert sched.num_profile == 3 and sched.profile_budget == 3 * T
    assert sched.total_budget == plain.total_budget + 3 * T
    assert plain.total_budget == policies.halving_schedule("sh", N, T, ETA).total_budget
    assert sched.max_jobs == plain.max_jobs + 3 == SH_PLUS.limits.max_jobs
    assert SH_PLUS.history == T and SH_PLUS.batch_size == 9
    assert policies.sh(N, T, ETA, uq=True, delta_estimate="window").limits.max_jobs == plain.max_jobs
    assert policies.sh(N, T, ETA).limits.max_jobs == policies.halving_schedule("sh", N, T, ETA).max_jobs
    for ragged in (False, True):
        table, lengths = policy_table(5, ragged)
        tr = sim.run(SH_PLUS, table, jax.random.key(2))
        n = int(tr.num_jobs)
        assert not bool(tr.truncated) and n <= SH_PLUS.limits.max_jobs
        last = n - 1
        # spent + unspent = the schedule's budget, profile included; the profile's unspent
        # part is what ragged profiled curves did not train
        assert int(tr.infos.spent[last]) + int(tr.infos.unspent[last]) == sched.total_budget
        assert int(tr.budget) <= sched.total_budget
        cfg = np.asarray(tr.jobs.config)[:3]
        assert len(set(cfg.tolist())) == 3
        assert np.all(np.asarray(tr.jobs.start)[:3] == 0) and np.all(np.asarray(tr.jobs.budget)[:3] == T)
        np.testing.assert_array_equal(np.asarray(tr.results.epoch)[:3], np.minimum(lengths[cfg], T))
        # the profiled candidates are results at max_budget: the best is the incumbent after them
        final = np.asarray(table.values)[cfg, np.minimum(lengths[cfg], T) - 1]
        assert int(tr.infos.incumbent[2]) == cfg[np.argmin(final)]
        assert int(tr.infos.spent[2]) == np.minimum(lengths[cfg], T).sum()
        # then the bracket: its first rung (r_0 = 2) decides by the UQ rule, two losses suffice
        assert bool(tr.infos.profile_ok[2]) and not bool(tr.infos.profile_ok[1])
        dec = np.flatnonzero(np.asarray(tr.infos.decisions)[:n] == 1)
        assert not bool(tr.infos.fallback[dec[0]])


def test_profile_batched_trace_is_the_one_job_trace():
    # The profiling jobs come as one batch (Result.history = the whole curve) or one at a
    # time (report); the profile fit and the keep rule run in two programs. Margin check as
    # in test_sim_batched: the batched decisions do not move when every loss moves by 1e-9
    # relative (orders above float64 rounding), so the discrete traces must be equal.
    for ragged in (False, True):
        table, _ = policy_table(7, ragged)
        key = jax.random.key(3)
        batch = sim.run(SH_PLUS, table, key)
        v = np.asarray(table.values)
        nudged = v * (1.0 + 1e-9 * np.random.default_rng(0).uniform(-1, 1, v.shape))
        moved = sim.run(SH_PLUS, sim.CurveTable(jnp.asarray(nudged), table.mask), key)
        np.testing.assert_array_equal(moved.jobs.config, batch.jobs.config)
        np.testing.assert_array_equal(moved.infos.kept, batch.infos.kept)
        one = sim.run(SH_PLUS, table, key, batched=False)
        n = int(batch.num_jobs)
        assert int(one.num_jobs) == n
        for a, b in [(one.jobs, batch.jobs), (one.results.epoch, batch.results.epoch), (one.spent, batch.spent),
                     (one.incumbents, batch.incumbents), (one.infos.kept, batch.infos.kept),
                     (one.infos.fallback, batch.infos.fallback), (one.infos.profile_ok, batch.infos.profile_ok),
                     (one.infos.unspent, batch.infos.unspent)]:
            for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
                np.testing.assert_array_equal(x, y)
        assert (np.asarray(batch.infos.decisions)[:n] == 1).sum() >= 2


def test_failed_profile_falls_back_to_the_window_estimate():
    # Constant curves: sigma = 0, the exponential phase has no usable epoch, the profile
    # fails (profile_ok stays False) and the window estimate stands in, which needs three
    # losses: the first decision (r_0 = 2) is the plain count n_1 = 3, flagged.
    table, _ = policy_table(1, flat=True)
    tr = sim.run(SH_PLUS, table, jax.random.key(0))
    n = int(tr.num_jobs)
    assert not np.asarray(tr.infos.profile_ok)[:n].any()
    dec = np.flatnonzero(np.asarray(tr.infos.decisions)[:n] == 1)
    assert bool(tr.infos.fallback[dec[0]]) and int(tr.infos.kept[dec[0]]) == 3


def test_policy_state_reads_the_profile_at_each_candidates_epoch():
    # The protocol driven call by call (report per epoch): the profiled candidates' curves
    # are the table's rows, the fitted profile is delta_sigma_profile on them, and at every
    # later state a candidate with two losses carries delta = profile[t - 1] at its epoch t.
    table, lengths = policy_table(9, ragged=True)
    values = np.asarray(table.values)
    out = drive(SH_PLUS, np.nan_to_num(values, nan=0.0), lengths, jax.random.key(4), 20, keep_states=True)
    after = [s["after"] for s in out["steps"]]
    prof = after[2].prof
    cfg = np.asarray(prof.configs)
    np.testing.assert_array_equal(prof.curves, values[cfg])
    want = confidence.delta_sigma_profile(values[cfg], window=10)
    assert bool(prof.ok) == bool(want.ok) is True
    # the fit runs inside the policy's compiled tell piece and eagerly here: the same sums
    # in two XLA programs (fusion may reorder them): <= ~T eps relative per value
    np.testing.assert_allclose(prof.delta, want.delta, rtol=0, atol=1e-12 * np.abs(want.fit).max())
    checked = 0
    for s in after[3:]:
        has = np.asarray(s.uq.count) >= 2
        at = np.asarray(s.prof.delta)[np.clip(np.asarray(s.epochs), 1, T) - 1]
        np.testing.assert_array_equal(np.asarray(s.uq.delta)[has], at[has])
        checked += has.sum()
    assert checked > 0


def test_window_var_and_offline_estimates():
    table, lengths = policy_table(11)
    values = np.asarray(table.values)
    # window_var: the variance difference of two consecutive windows (App. C as printed)
    pol = policies.sh(N, T, ETA, uq=True, delta_estimate="window_var")
    assert pol.limits.max_jobs == policies.halving_schedule("sh", N, T, ETA, uq=True, num_profile=0).max_jobs
    out = drive(pol, values, lengths, jax.random.key(1), 18, keep_states=True)
    assert (int(out["jobs"][0].start), int(out["jobs"][0].budget)) == (0, 2)  # no profiling: the first rung
    s = out["steps"][-1]["after"]
    cnt = np.minimum(np.asarray(s.uq.count), 11)
    want = confidence.window_delta_sigma(s.uq.recent, jnp.asarray(cnt), 10, kind="variance")
    has = np.asarray(s.uq.count) >= 2
    assert has.sum() >= 3
    # two programs, the same two-pass sums of <= 11 terms: ~1e-15 of the variances
    np.testing.assert_allclose(np.asarray(s.uq.delta)[has], np.asarray(want)[has], rtol=0, atol=1e-14)
    # offline: params.delta_profile where finite, else the window estimate
    pol = policies.sh(N, T, ETA, uq=True, delta_estimate="offline")
    given = np.full(T, np.nan)
    given[:4] = [0.5, -0.25, 0.125, 0.0625]  # epochs 1..4; later epochs not given
    params = pol.default_params()._replace(delta_profile=jnp.asarray(given))
    out = drive(pol, values, lengths, jax.random.key(1), 18, params, keep_states=True)
    std_delta = confidence.window_delta_sigma
    for step in out["steps"][8:]:
        s = step["after"]
        has = np.asarray(s.uq.count) >= 2
        ep = np.asarray(s.epochs)
        cnt = np.minimum(np.asarray(s.uq.count), 11)
        window = np.asarray(std_delta(s.uq.recent, jnp.asarray(cnt), 10))
        want = np.where(np.isfinite(given[np.clip(ep, 1, T) - 1]), given[np.clip(ep, 1, T) - 1], window)
        np.testing.assert_allclose(np.asarray(s.uq.delta)[has], want[has], rtol=0, atol=1e-14)
    # with the profile given at r_0 = 2, two losses suffice: the first decision is the UQ rule's
    first = next(i for i in out["infos"] if int(i.decisions) == 1)
    assert not bool(first.fallback)


def test_bohb_plus_profiles_first_and_models_the_profiled_results():
    # BOHB+ (one job at a time): three uniformly drawn candidates to max_budget first,
    # their results recorded for the density model at the top rung, then the brackets;
    # the budget identity holds with the profile included.
    table, lengths = policy_table(13)
    values = np.asarray(table.values)
    x = np.random.default_rng(13).uniform(size=(N, 2))
    pol = policies.bohb(N, T, ETA, uq=True, candidates=x)
    sched = policies.halving_schedule("bohb", N, T, ETA, uq=True)
    assert pol.ask_batch is None and pol.limits.max_jobs == sched.max_jobs
    out = drive(pol, values, lengths, jax.random.key(6), pol.limits.max_jobs, keep_states=True)
    n = len(out["jobs"])
    assert out["stop_job"] == n - 1
    first3 = [(int(j.config), int(j.start), int(j.budget)) for j in out["jobs"][:3]]
    assert len({c for c, _, _ in first3}) == 3 and all((s, b) == (0, T) for _, s, b in first3)
    end = out["steps"][-1]["after"]
    np.testing.assert_array_equal(np.asarray(end.bohb.rec_config)[:3], [c for c, _, _ in first3])
    np.testing.assert_array_equal(np.asarray(end.bohb.rec_level)[:3], 2)  # levels (2, 7, 20): the top one
    np.testing.assert_array_equal(np.asarray(end.bohb.rec_loss)[:3], values[[c for c, _, _ in first3], T - 1])
    last = out["infos"][-1]
    assert int(last.spent) + int(last.unspent) == sched.total_budget and bool(last.profile_ok)


@pytest.mark.parametrize("make, err, match", [
    (lambda: policies.sh(N, T, uq=True, delta_estimate="median"), ValueError, "delta_estimate must be one of"),
    (lambda: policies.sh(N, T, uq=True, delta_estimate="window", num_profile=2), ValueError, "num_profile"),
    (lambda: policies.hyperband(N, T, uq=True, num_profile=0), ValueError, "needs num_profile >= 1"),
    (lambda: policies.sh(N, T, uq=True, num_profile=N + 1), ValueError, "num_profile must be <= num_configs"),
    (lambda: policies.sh(N, T, num_profile=2), ValueError, "num_profile"),
    (lambda: policies.halving_schedule("subsampling", N, T, num_profile=2), ValueError, "not subsampling"),
    (lambda: SH_PLUS.init(jax.random.key(0), SH_PLUS.default_params()._replace(delta_profile=jnp.zeros(T - 1))),
     ValueError, "delta_profile must have shape"),
])
def test_profile_options_raise(make, err, match):
    with pytest.raises(err, match=match):
        make()
