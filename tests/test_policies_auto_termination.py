"""Tests of the auto-terminating GP-BO policy (Makarova et al., 2022, Algorithm 1).

Oracles: an independent NumPy GP (Matern-5/2 ARD posterior from the fitted
hyperparameters, top-set selection and standardisation written out below), the closed
forms of expected improvement, the confidence bounds and Eq. (8)-(10), and the
protocol played three ways (Python loop, ``sim.run``, ``vmap`` of ``sim.run``). Every
policy is compiled once per module; runs are shared through module-scoped fixtures.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erfcx
from scipy.stats import norm

from _oracles import (U, assert_pick_robust, assert_side_robust, drive, mean_std_reach, np_eq8, np_posterior,
                      posterior_reach, standardize_reach, with_states)
from jaxstop import policies, sim
from jaxstop.policies.auto_termination import AutoTerminationParams, auto_termination_bo

N, K, T, D = 48, 5, 3, 2
MAX_EVALS = MAX_JOBS = 40
MIN_ITER, NUM_INIT, MIN_POINTS, FRACTION = 20, 10, 20, 0.5


def make_problem(seed=3):
    """A bumpy quadratic on 48 random configurations, noisy 5-fold CV scores."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(N, D))
    f = 0.2 + 0.3 * ((X[:, 0] - 0.35) ** 2 + (X[:, 1] - 0.6) ** 2) + 0.03 * np.sin(7 * X[:, 0]) * np.cos(6 * X[:, 1])
    folds = f[:, None] + 0.004 * rng.normal(size=(N, K))
    values = f[:, None] + np.array([0.2, 0.1, 0.0])[None, :]  # curves end at f
    return X, f, folds, values


X, F, FOLDS, VALUES = make_problem()
TABLE = sim.CurveTable(VALUES, configs=X)
KEYS = jax.random.split(jax.random.key(7), 3)
TRACES = {"n": 0}


def _counted(fn):
    def wrapped(*args):
        TRACES["n"] += 1
        return fn(*args)

    return wrapped


_BASE = auto_termination_bo(max_budget=T, max_evals=MAX_EVALS, candidates=X, fold_scores=FOLDS)
POLICY = _BASE._replace(tell=_counted(_BASE.tell))
RUN_POLICY = with_states(POLICY)  # sim.run's traces then hold the state after every job
PARAMS = POLICY.default_params()
SCALES = (1.0, 0.5 / 0.21, 1.0)


def params_for(i):
    return PARAMS._replace(threshold_scale=jnp.asarray(SCALES[i], jnp.float64))


def np_tree(tree):
    """NumPy leaves (cheap slicing in the checks); PRNG keys stay keys."""
    return jax.tree_util.tree_map(
        lambda a: a if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key) else np.asarray(a), tree)


def row(tree, i):
    return jax.tree_util.tree_map(lambda x: x[i], tree)


# ----------------------------------------------------------------- runs (shared)
@pytest.fixture(scope="module")
def loop():
    """The protocol driven by hand from Python (jitted calls), with NumPy table lookups."""
    out = drive(POLICY, VALUES, np.full(N, T), KEYS[0], MAX_JOBS, PARAMS, jit=True, keep_states=True)
    out["before"] = [s["before"] for s in out["steps"]]
    out["after"] = [s["after"] for s in out["steps"]]
    return out


@pytest.fixture(scope="module")
def singles():
    return [np_tree(sim.run(RUN_POLICY, TABLE, KEYS[i], params_for(i), max_jobs=MAX_JOBS)) for i in range(3)]


@pytest.fixture(scope="module")
def batch():
    params = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[params_for(i) for i in range(3)])
    run = jax.vmap(lambda k, p: sim.run(RUN_POLICY, TABLE, k, p, max_jobs=MAX_JOBS))
    return np_tree(run(KEYS, params))


# ------------------------------------------------------------------ NumPy oracles
def np_model(state):
    """Top set, standardisation and the latent GP posterior of a state, in NumPy, with the
    standardisation's reach between two programs (z per row, the std relatively, the mean)."""
    Xs, y, m = np.asarray(state.X), np.asarray(state.y), np.asarray(state.mask)
    n = int(m.sum())
    order = np.argsort(np.where(m, y, np.inf), kind="stable")
    top = min(n, max(MIN_POINTS, math.floor(FRACTION * n)))
    idx = order[:top]
    yt = y[idx]
    mean, std = yt.mean(), yt.std()
    std = std if (top >= 2 and std > 0) else 1.0
    z = (yt - mean) / std
    p = state.gp_params
    amp, noise, mu0 = math.exp(float(p.log_amplitude)), math.exp(float(p.log_noise)), float(p.mean)
    ls = np.exp(np.asarray(p.log_lengthscales))
    noise = noise + 10 * np.finfo(float).eps * amp  # the posterior's jitter
    gp_predict = np_posterior(Xs[idx], z, amp, ls, noise, mu0)
    dz, d_std = standardize_reach(yt)

    def predict(Xq):
        mu, var = gp_predict(Xq)
        return mu, np.sqrt(var)

    def reach(Xq):
        return posterior_reach(Xs[idx], z, Xq, amp, ls, noise, mu0, dy=dz)

    beta = 0.2 * 2 * math.log(D * n**2 * math.pi**2 / (6 * 0.1))  # paper: t = evaluations
    return {"Xt": Xs[idx], "z": z, "mean": mean, "std": std, "predict": predict, "gp": gp_predict, "beta": beta,
            "n": n, "reach": reach, "dz": dz, "d_std": d_std, "d_mean": mean_std_reach(yt)[0]}


def np_bound(state):
    """Eq. (8) over the table, in loss units."""
    mdl = np_model(state)
    bound, _, _ = np_eq8(mdl["gp"], mdl["Xt"], X, mdl["beta"])
    return bound * mdl["std"], mdl


def np_bound_reach(state):
    """Eq. (8) in loss units with the reach of ``(bound, ucb_min, lcb_min)`` between two
    programs with the state's hyperparameters: pointwise, the posterior's reach plus
    sqrt(beta)'s rounding (4 u relative) and the sum's (2 u); a minimum over points moves by
    at most the largest pointwise reach; loss units add the std's and the mean's reach."""
    mdl = np_model(state)
    bound, ucb, lcb = np_eq8(mdl["gp"], mdl["Xt"], X, mdl["beta"])
    sb, std = math.sqrt(mdl["beta"]), mdl["std"]

    def reach(Xq):
        mu, sd = mdl["predict"](Xq)
        d_mu, d_sd = mdl["reach"](Xq)
        return np.max(d_mu + sb * d_sd + 4 * U * sb * sd + 2 * U * (np.abs(mu) + sb * sd))

    r_ucb, r_lcb = reach(mdl["Xt"]), max(reach(mdl["Xt"]), reach(X))
    rel = mdl["d_std"] + 2 * U
    return dict(bound=(bound * std, std * (r_ucb + r_lcb) + abs(bound) * std * rel),
                ucb_min=(ucb * std + mdl["mean"], std * r_ucb + abs(ucb) * std * rel + mdl["d_mean"]),
                lcb_min=(lcb * std + mdl["mean"], std * r_lcb + abs(lcb) * std * rel + mdl["d_mean"]))


def np_threshold(state, scale=1.0):
    """Eq. (9)-(10) of the incumbent, s^2 = (1/k) sum_i (y - y^i)^2 (Algorithm 1, line 11)."""
    y, m, cfg = np.asarray(state.y), np.asarray(state.mask), np.asarray(state.config)
    inc = cfg[np.argmin(np.where(m, y, np.inf))]
    s2 = np.sum((FOLDS[inc].mean() - FOLDS[inc]) ** 2) / K
    return scale * math.sqrt((1 / K + 1 / (K - 1)) * s2), inc


def np_threshold_reach(state, scale=1.0):
    """The CV threshold of Eq. (9)-(10) and its reach: the folds' std (mean_std_reach), the
    factor and the scale (4 u)."""
    thr, inc = np_threshold(state, scale)
    return thr, scale * math.sqrt(1 / K + 1 / (K - 1)) * mean_std_reach(FOLDS[inc], ddof=0)[2] + 4 * U * thr


def np_ei(mu, sd, best):
    """Expected improvement ``sd (u Phi(u) + phi(u))``, ``u = (best - mu) / sd``; for u < -1 as
    ``sd phi(u) (1 + u sqrt(pi / 2) erfcx(-u / sqrt 2))`` (no cancellation of u Phi(u) + phi(u))."""
    u = (best - mu) / sd
    direct = u * norm.cdf(u) + norm.pdf(u)
    tail = norm.pdf(u) * (1 + u * math.sqrt(math.pi / 2) * erfcx(-u / math.sqrt(2)))
    return sd * np.where(u > -1, direct, tail)


def np_ei_reach(state):
    """EI over the table from the state's GP (-inf where evaluated) and its reach between two
    programs: dEI = Phi(u) (dmu + dbest) + phi(u) dsd (its derivatives) from the posterior's
    reach (best = min z: the standardisation's), plus EI's own rounding, (10 + 10 u^2) u
    relative per program (exp(-u^2 / 2) and the cancellation of 1 + u sqrt(pi/2) erfcx(.),
    ~1 / u^2, amplify the ulps of erfcx)."""
    mdl = np_model(state)
    mu, sd = mdl["predict"](X)
    d_mu, d_sd = mdl["reach"](X)
    b = int(np.argmin(mdl["z"]))
    u = (mdl["z"][b] - mu) / sd
    ei = np_ei(mu, sd, mdl["z"][b])
    reach = norm.cdf(u) * (d_mu + mdl["dz"][b]) + norm.pdf(u) * d_sd + (20 + 20 * u**2) * U * ei
    done = np.asarray(state.evaluated)
    return np.where(done, -np.inf, ei), np.where(done, 0.0, reach)


def program_states(tr, n, i=None):
    """The states after each of the first ``n`` jobs of a sim.run trace (row ``i`` of a vmap)."""
    return [jax.tree_util.tree_map(lambda a, j=j: a[j] if i is None else a[i, j], tr.infos.state) for j in range(n)]


def assert_run_well_posed(runs, scale):
    """Every decision of one study, in every program (``runs``: per program its infos and the
    state after each job), is decided by more than rounding, and each program's bound,
    threshold and confidence-bound minima are the NumPy ones at its own state to their reach:

    * job j >= NUM_INIT is EI's argmax over the unevaluated rows of the state after job j - 1
      (the first NUM_INIT are the largest of uniform draws: bits of jax.random, the same in
      every program; the top set and the incumbent compare losses that are table values);
    * after MIN_ITER evaluations, the criterion bound < threshold.
    """
    infos, states = zip(*runs)
    n = len(states[0])
    for j in range(n):
        margins, reaches = [], []
        for info, st in zip(infos, states):
            r = np_bound_reach(st[j])
            thr, d_thr = np_threshold_reach(st[j], scale)
            for name in ("bound", "ucb_min", "lcb_min"):
                assert abs(float(getattr(info, name)[j]) - r[name][0]) <= r[name][1], (name, j)
            assert abs(float(info.threshold[j]) - thr) <= d_thr
            margins.append(float(info.bound[j]) - float(info.threshold[j]))
            reaches.append(r["bound"][1] + d_thr)
        if j + 1 >= MIN_ITER:
            assert_side_robust(margins, reaches, f"criterion after {j + 1} evaluations")
    for j in range(NUM_INIT, n):
        picks = [np_ei_reach(st[j - 1]) for st in states]
        best = assert_pick_robust([v for v, _ in picks], [r for _, r in picks], "max", f"EI of job {j}")
        assert all(best == int(np.asarray(st[j].config)[j]) for st in states), j


# ------------------------------------------------------------------------- tests
def test_python_loop_sim_run_and_vmap_agree(loop, singles, batch):
    """The three programs make the same decisions (jobs, criterion, termination, incumbent),
    compared exactly once every decision of every program is shown to be decided by more
    than rounding (assert_run_well_posed); their floats are each the NumPy oracle's at the
    program's own state, to rounding. (The programs' warm-started fits differ by rounding
    carried from trial to trial: their hyperparameters, hence their bounds, are not equal.)"""
    jobs = np.array([j.config for j in loop["jobs"]])
    n = len(jobs)
    tr = singles[0]
    assert int(tr.num_jobs) == n
    li = loop["infos_stacked"]
    assert_run_well_posed([(li, loop["after"]), (tr.infos, program_states(tr, n)),
                           (row(batch, 0).infos, program_states(batch, n, 0))], SCALES[0])
    np.testing.assert_array_equal(tr.jobs.config[:n], jobs)
    np.testing.assert_array_equal(tr.jobs.budget[:n], T)
    for name in ("terminate", "incumbent", "criterion", "num_fitted", "num_evaluations", "ok", "incumbent_value"):
        np.testing.assert_array_equal(getattr(tr.infos, name)[:n], getattr(li, name), err_msg=name)
    for i in range(3):  # vmap over (keys, params) == one run per (key, params)
        a, b = singles[i], row(batch, i)
        m = int(a.num_jobs)
        if i:
            assert_run_well_posed([(a.infos, program_states(a, m)), (b.infos, program_states(batch, m, i))],
                                  SCALES[i])
        for name in ("terminate", "criterion", "incumbent", "incumbent_value"):
            np.testing.assert_array_equal(getattr(a.infos, name), getattr(b.infos, name), err_msg=name)
        np.testing.assert_array_equal(a.jobs.config, b.jobs.config)
        assert int(a.stop_job) == int(b.stop_job) and int(a.incumbent) == int(b.incumbent)
    # different keys explore differently
    assert len({tuple(s.jobs.config[:NUM_INIT]) for s in singles}) == 3


def test_bound_and_threshold_match_numpy_oracle(loop):
    """Eq. (8) and the threshold of every step equal the NumPy oracle's at the step's state
    to the rounding between NumPy and the policy (np_bound_reach, np_threshold_reach)."""
    infos = loop["infos"]
    for j in range(2, len(infos)):
        state = loop["after"][j]
        r = np_bound_reach(state)
        _, mdl = np_bound(state)
        thr, d_thr = np_threshold_reach(state)
        _, inc = np_threshold(state)
        info = infos[j]
        assert mdl["n"] == j + 1 == int(info.num_evaluations)
        assert int(info.num_fitted) == len(mdl["z"])
        assert bool(info.ok)
        assert abs(float(info.bound) - r["bound"][0]) <= r["bound"][1], f"step {j}"
        assert abs(float(info.threshold) - thr) <= d_thr
        np.testing.assert_allclose(float(state.beta), mdl["beta"], rtol=8 * np.finfo(float).eps)
        assert int(info.incumbent) == inc
        assert float(info.incumbent_value) == F[inc]
        np.testing.assert_array_equal(info.incumbent_x, X[inc])
        assert info.bound.dtype == info.threshold.dtype == np.float64  # float64 in -> float64 out


def test_terminate_rule_and_stop_job(loop, singles, batch):
    for tr in [*singles, *[row(batch, i) for i in range(3)]]:
        n = int(tr.num_jobs)
        info = jax.tree_util.tree_map(lambda x, n=n: x[:n], tr.infos)
        evals = np.arange(1, n + 1)
        np.testing.assert_array_equal(info.num_evaluations, evals)
        rule = (evals >= MIN_ITER) & (info.bound < info.threshold)
        np.testing.assert_array_equal(info.criterion, rule)
        np.testing.assert_array_equal(info.terminate, rule | (evals >= MAX_EVALS))
        assert not info.terminate[: MIN_ITER - 1].any()  # never before min_iterations
        first = int(np.argmax(info.terminate)) if info.terminate.any() else MAX_JOBS
        assert int(tr.stop_job) == first
        assert n == min(first + 1, MAX_JOBS)
        assert int(tr.budget) == n * T and int(tr.bad_jobs) == 0
        assert not tr.active[n:].any()
        assert int(tr.incumbent) == int(info.incumbent[-1])


def test_threshold_scale_in_params(singles):
    # the same run with threshold_scale 0.5/0.21 (the authors' code's Ours_0.5) has that
    # multiple of the threshold; s^2 with 1/k (Algorithm 1, line 11)
    for i in (0, 1):
        tr = singles[i]
        n = int(tr.num_jobs)
        inc = tr.infos.incumbent[:n]
        s2 = np.sum((FOLDS[inc].mean(axis=1, keepdims=True) - FOLDS[inc]) ** 2, axis=1) / K
        s = np.sqrt((1 / K + 1 / (K - 1)) * s2)
        np.testing.assert_allclose(tr.infos.threshold[:n], SCALES[i] * s, rtol=1e-10)


def test_threshold_variance_is_the_papers_half_s2(singles):
    """threshold_scale 0, threshold_variance 0.5: the Ours_0.5 of the paper's text,
    sqrt(0.5 s^2) with s^2 = (1/k) sum_i (y - y^i)^2 of the incumbent (Sec. 4.1, Algorithm
    1, line 11), in the same compiled program as the default params (no retrace)."""
    before = TRACES["n"]
    p = PARAMS._replace(threshold_scale=jnp.asarray(0.0, jnp.float64),
                        threshold_variance=jnp.asarray(0.5, jnp.float64))
    tr = sim.run(RUN_POLICY, TABLE, KEYS[0], p, max_jobs=MAX_JOBS)
    assert TRACES["n"] == before
    n = int(tr.num_jobs)
    inc = np.asarray(tr.infos.incumbent[:n])
    s2 = np.sum((FOLDS[inc].mean(axis=1, keepdims=True) - FOLDS[inc]) ** 2, axis=1) / K
    # sums of K = 5 float64 terms and a square root: a few ulps apart from NumPy's
    np.testing.assert_allclose(tr.infos.threshold[:n], np.sqrt(0.5 * s2), rtol=1e-13)
    # against Eq. (9)'s threshold: the factor sqrt(0.5 / (1/k + 1/(k-1))), 1.054 for k = 5
    a = singles[0]
    m = min(n, int(a.num_jobs), NUM_INIT)  # the random initial design: the same jobs
    ratio = np.asarray(tr.infos.threshold[:m]) / np.asarray(a.infos.threshold[:m])
    np.testing.assert_allclose(ratio, math.sqrt(0.5 / (1 / K + 1 / (K - 1))), rtol=1e-13)


def test_ei_choice_is_numpy_argmax_and_no_repeats(loop):
    jobs = np.array([j.config for j in loop["jobs"]])
    assert len(set(jobs.tolist())) == len(jobs)  # never re-evaluates a candidate
    assert len(jobs) > NUM_INIT + 5
    for j in range(NUM_INIT, len(jobs)):
        state = loop["before"][j]
        evaluated = np.asarray(state.evaluated)
        np.testing.assert_array_equal(np.flatnonzero(evaluated), np.sort(jobs[:j]))
        ei, reach = np_ei_reach(state)
        assert not evaluated[jobs[j]]
        # NumPy's EI and the policy's round differently: the argmax must be clear of that
        assert jobs[j] == assert_pick_robust(ei, reach, "max", f"EI of job {j}")


def test_ucb_choice_is_numpy_argmin_lcb(loop):
    ucb_policy = auto_termination_bo(max_budget=T, max_evals=MAX_EVALS, candidates=X, fold_scores=FOLDS,
                                     acquisition="ucb")
    ask = jax.jit(ucb_policy.ask)
    for j in (NUM_INIT, 15, len(loop["jobs"]) - 1):
        state = loop["before"][j]
        job, _ = ask(jax.random.key(j), state, PARAMS)
        mdl = np_model(state)
        mu, sd = mdl["predict"](X)
        d_mu, d_sd = mdl["reach"](X)
        sb = math.sqrt(mdl["beta"])
        lcb = np.where(np.asarray(state.evaluated), np.inf, mu - sb * sd)
        reach = d_mu + sb * d_sd + 4 * U * sb * sd + 2 * U * np.abs(lcb)
        c = int(job.config)
        assert c == assert_pick_robust(lcb, np.where(np.isfinite(lcb), reach, 0.0), "min", f"LCB at job {j}")
        np.testing.assert_array_equal(job.x, X[c])


def test_nan_loss_is_masked_and_not_repeated(loop):
    state = loop["after"][NUM_INIT + 2]
    job, _ = loop["ask"](jax.random.key(99), state, PARAMS)
    bad = policies.Result(jnp.asarray(np.nan, jnp.float64), jnp.asarray(T, jnp.int32), jnp.asarray(False))
    new, info = loop["tell"](state, job, bad, PARAMS)
    c, slot = int(job.config), int(state.count)
    assert bool(new.evaluated[c]) and not bool(new.mask[slot]) and int(new.count) == int(state.count) + 1
    assert int(info.incumbent) == int(loop["infos"][NUM_INIT + 2].incumbent)
    assert np.isfinite(float(info.bound)) and bool(info.ok)
    _, mdl = np_bound(new)  # the oracle sees only the real rows ...
    assert mdl["n"] == int(state.count)
    # ... but beta_t="evaluations" counts finite evaluations, as the oracle does
    bound, reach = np_bound_reach(new)["bound"]
    assert abs(float(info.bound) - bound) <= reach
    job2, _ = loop["ask"](jax.random.key(100), new, PARAMS)
    assert int(job2.config) != c


def test_terminates_with_near_best_incumbent(batch):
    best = F.min()
    for i in range(3):
        stop = int(batch.stop_job[i])
        assert stop < MAX_JOBS - 1, "terminated by the budget, not by the criterion"
        assert bool(batch.infos.criterion[i, stop])
        assert int(batch.num_jobs[i]) < N
        assert batch.incumbent_value[i] - best <= batch.infos.threshold[i, stop]


def test_no_retrace_with_new_key_and_params(singles):
    before = TRACES["n"]
    p = PARAMS._replace(fold_scores=jnp.asarray(FOLDS * 1.5), beta_scale=jnp.asarray(0.3, jnp.float64))
    tr = sim.run(RUN_POLICY, TABLE, jax.random.key(123), p, max_jobs=MAX_JOBS)
    assert TRACES["n"] == before
    assert tr.infos.bound.dtype == jnp.float64


def test_float32_in_float32_out():
    # traced only (no compilation): every floating leaf of the state and the info is float32
    x32 = X.astype(np.float32)
    policy = auto_termination_bo(max_budget=T, max_evals=MAX_EVALS, candidates=x32,
                                 fold_scores=FOLDS.astype(np.float32))
    table = sim.CurveTable(VALUES.astype(np.float32), configs=x32)
    trace = jax.eval_shape(lambda k: sim.run(policy, table, k, max_jobs=MAX_JOBS), KEYS[0])
    floats = [a.dtype for a in jax.tree_util.tree_leaves(trace.infos) if jnp.issubdtype(a.dtype, jnp.floating)]
    assert floats and all(dt == jnp.float32 for dt in floats)
    state = jax.eval_shape(policy.init, KEYS[0], policy.default_params())
    assert state.X.dtype == state.y.dtype == state.gp_params.log_lengthscales.dtype == jnp.float32


def test_unit_cube_mode_terminates_near_optimum():
    centre = np.array([0.3, 0.7])
    policy = auto_termination_bo(max_budget=1, max_evals=40, dim=2, threshold=0.002, num_init=5,
                                 min_iterations=10, num_candidates=256)
    params = policy.default_params()
    assert params.fold_scores.shape == (0, 0)

    def objective(x):
        return 0.1 + jnp.sum((x - centre) ** 2)

    @jax.jit
    def run(key):
        k0, k1 = jax.random.split(key)

        def step(s, k):
            job, s = policy.ask(k, s, params)
            s, info = policy.tell(s, job, policies.Result(objective(job.x), job.budget, jnp.asarray(False)), params)
            return s, (job, info)

        return jax.lax.scan(step, policy.init(k0, params), jax.random.split(k1, 40))[1]

    jobs, infos = np_tree(run(jax.random.key(5)))
    assert (jobs.config == -1).all() and (jobs.x >= 0).all() and (jobs.x <= 1).all()
    assert len(np.unique(jobs.x[:5], axis=0)) == 5  # random initial design
    evals = np.arange(1, 41)
    np.testing.assert_array_equal(infos.threshold, 0.002)
    np.testing.assert_array_equal(infos.criterion, (evals >= 10) & (infos.bound < 0.002))
    np.testing.assert_array_equal(infos.terminate, infos.criterion | (evals >= 40))
    np.testing.assert_array_equal(infos.incumbent, -1)
    assert infos.criterion.any(), "never terminated"
    stop = int(np.argmax(infos.terminate))
    seen = 0.1 + np.sum((jobs.x[: stop + 1] - centre) ** 2, axis=1)
    np.testing.assert_allclose(infos.incumbent_value[stop], seen.min(), rtol=1e-12)
    np.testing.assert_array_equal(infos.incumbent_x[stop], jobs.x[np.argmin(seen)])
    assert np.linalg.norm(infos.incumbent_x[stop] - centre) < 0.1


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"min_iterations": 0}, "min_iterations"),
        ({"num_init": 41}, "num_init"),
        ({"num_init": 0}, "num_init"),
        ({"max_evals": 49}, "max_evals"),
        ({"acquisition": "pi"}, "acquisition"),
        ({"fold_scores": np.zeros((N, 1))}, "fold_scores"),
        ({"fold_scores": np.zeros((N - 1, K))}, "fold_scores"),
        ({"fold_scores": np.full((N, K), np.nan)}, "fold_scores"),
        ({"fold_scores": None}, "threshold"),
        ({"threshold": -1.0}, "threshold"),
        ({"threshold_scale": -1.0}, "threshold_scale"),
        ({"threshold_variance": -0.5}, "threshold_variance"),
        ({"candidates": X + 1.0}, "candidates"),
        ({"candidates": X[:, 0]}, "candidates"),
        ({"num_configs": 10}, "num_configs"),
        ({"beta_t": "iterations"}, "beta_t"),
        ({"fraction": 0.0}, "fraction"),
        ({"delta": 2.0}, "delta"),
    ],
)
def test_bad_inputs_raise(kwargs, match):
    args = {"max_budget": T, "max_evals": MAX_EVALS, "candidates": X, "fold_scores": FOLDS}
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        auto_termination_bo(**args)


def test_bad_params_and_modes_raise():
    with pytest.raises(ValueError, match="fold_scores"):
        auto_termination_bo(max_budget=1, max_evals=5, dim=2, fold_scores=FOLDS, num_init=2)
    with pytest.raises(ValueError, match="dim"):
        auto_termination_bo(max_budget=1, max_evals=5, threshold=0.1, num_init=2)
    with pytest.raises(ValueError, match="max_budget"):
        auto_termination_bo(max_budget=0, max_evals=5, dim=2, threshold=0.1, num_init=2)
    bad = PARAMS._replace(fold_scores=jnp.zeros((N, K + 1)))
    with pytest.raises(ValueError, match="params.fold_scores"):
        sim.run(POLICY, TABLE, KEYS[0], bad, max_jobs=MAX_JOBS)
    with pytest.raises(TypeError, match="AutoTerminationParams"):
        POLICY.init(KEYS[0], {"threshold": 1.0})
    assert isinstance(PARAMS, AutoTerminationParams)
