"""Tests of jaxstop.regret (Makarova et al., 2022).

Oracles: a dense float64 NumPy GP written here (Eq. 1) evaluated with the same
hyperparameters (Eq. 8 directly); Optuna 5.0's terminator formulas re-derived in NumPy
(optuna/terminator/improvement/evaluator.py: ``_get_beta``,
``_compute_standardized_regret_bound``, ``RegretBoundEvaluator._get_top_n`` / ``evaluate``;
optuna/_gp/gp.py: ``GPRegressor.kernel`` / ``posterior``; optuna/_gp/acqf.py: ``UCB`` /
``LCB``; optuna/terminator/erroreval.py: ``CrossValidationErrorEvaluator``); closed forms
of beta, EI, PI and the Nadeau-Bengio threshold (scipy quadrature, asymptotic series);
the authors' released stopping rules (bo-early-stopping ``src/stop_methods.py``) replayed
on all 5,320 published stopping iterations; and a Python loop of ``fit_regret_bound``
against the scanned and the vmapped replay.
"""

import importlib.util
import math
from pathlib import Path

import chex
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate
import scipy.optimize
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from _compiles import count_compilations
from _oracles import np_eq8, np_matern52, np_posterior
from jaxstop._src import checks, gp_fit, linalg as _linalg, regret_bound, termination
from jaxstop import gp, regret

REPO = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ NumPy oracles
# the dense float64 GP and Eq. (8): tests/_oracles.py
def bound_rounding(X, y, pts, amp, ls, noise, mean, beta):
    """Pointwise reach of rounding on ``m -/+ sqrt(beta v)`` at ``pts`` between two float64
    programs (padded / exact-size, jit / eager, with / without refinement).

    Each program factorises K + E with ||E|| <= c n eps ||K|| (backward stability, c = 4),
    which moves alpha = K^-1 (y - m) by r ||alpha|| with r = c n kappa(K) eps, so a mean
    by r ||k|| ||alpha|| and a variance by r amp, its square root by
    min(sqrt(r amp), r amp / (2 sqrt v)). Two programs: r doubled. A minimum over points
    moves by at most the largest pointwise change.
    """
    K = np_matern52(X, X, amp, ls) + noise * np.eye(len(X))
    r = 2 * 4 * len(X) * np.linalg.cond(K) * np.finfo(float).eps
    alpha = np.linalg.solve(K, y - mean)
    kn = np.linalg.norm(np_matern52(pts, X, amp, ls), axis=1)
    _, v = np_posterior(X, y, amp, ls, noise, mean)(pts)
    return r * kn * np.linalg.norm(alpha) + math.sqrt(beta) * np.minimum(np.sqrt(r * amp),
                                                                         r * amp / (2 * np.sqrt(v) + 1e-300))


def study(rng, n, d, noise=0.05):
    X = rng.uniform(size=(n, d))
    y = np.sum((X - 0.3) ** 2, axis=1) + 0.3 * np.sin(5 * X[:, 0]) + noise * rng.normal(size=n)
    return X, y


@pytest.fixture(scope="module")
def datasets():
    spec = importlib.util.spec_from_file_location("_jaxstop_bench_datasets", REPO / "benchmarks" / "datasets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -------------------------------------------------------------------------- beta
def test_beta_closed_form():
    t = np.array([1.0, 20.0, 100.0, 200.0])
    got = regret.beta(jnp.asarray(t), 9.0, delta=0.05, scale=0.3)
    want = 0.3 * 2 * np.log(9 * t**2 * np.pi**2 / (6 * 0.05))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13)
    # Optuna's _get_beta: 2 log(n_params n_trials^2 pi^2 / 6 / delta) / 5
    assert float(regret.beta(50.0, 3.0)) == pytest.approx(2 * np.log(3 * 50**2 * np.pi**2 / 6 / 0.1) / 5, rel=1e-13)


def test_beta_dtype_and_errors():
    assert regret.beta(jnp.float32(10.0), jnp.float32(3.0)).dtype == jnp.float32
    assert regret.beta(10.0, 3.0).dtype == jnp.float64
    with pytest.raises(ValueError, match="delta"):
        regret.beta(10.0, 3.0, delta=0.0)
    with pytest.raises(ValueError, match="scale"):
        regret.beta(10.0, 3.0, scale=-1.0)
    with pytest.raises(ValueError, match="t must be"):
        regret.beta(0.0, 3.0)


# ------------------------------------------------------------- top set / threshold
@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 20]), st.sampled_from([0.2, 0.5, 0.7]), st.floats(0.0, 1.0), st.integers(0, 10**6))
def test_top_mask_matches_numpy(min_points, fraction, density, seed):
    rng = np.random.default_rng(seed)
    n = 40
    y = rng.integers(0, 8, size=n).astype(float)  # many ties
    mask = rng.uniform(size=n) < density  # 0 to 40 real entries
    real = np.nonzero(mask)[0]
    top = min(len(real), max(min_points, int(len(real) * fraction)))
    chosen = real[np.argsort(y[real], kind="stable")[:top]]
    want = np.zeros(n, bool)
    want[chosen] = True
    got = regret.top_mask(jnp.asarray(y), jnp.asarray(mask), fraction=fraction, min_points=min_points)
    np.testing.assert_array_equal(np.asarray(got), want)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([2, 10]), st.sampled_from([0, 1]), st.integers(0, 10**6))
def test_cv_threshold_matches_numpy(k, ddof, seed):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(4, k))
    fm = np.ones((4, k), bool)
    fm[1, 0] = False
    fm[2, : max(0, k - 2)] = False  # two real folds left
    # under jit the mask is traced: entries with too few folds give 0 instead of raising
    f = jax.jit(regret.cv_threshold, static_argnames=("ddof", "test_train_ratio"))
    got = f(jnp.asarray(s), jnp.asarray(fm), ddof=ddof)
    for i in range(4):
        x = s[i][fm[i]]
        kk = len(x)
        if kk < 2:
            assert float(got[i]) == 0.0
            continue
        want = math.sqrt((1 / kk + 1 / (kk - 1)) * np.var(x, ddof=ddof))
        assert float(got[i]) == pytest.approx(want, rel=1e-12)
    r = regret.cv_threshold(jnp.asarray(s[0]), test_train_ratio=0.25, ddof=ddof)
    assert float(r) == pytest.approx(math.sqrt((1 / k + 0.25) * np.var(s[0], ddof=ddof)), rel=1e-12)


def test_cv_threshold_nadeau_bengio_ten_folds():
    # 10-fold CV: Var f ~ (1/10 + 1/9) s^2 = 0.2111 s^2 (the paper's 0.21), Eq. (9), with
    # s^2 = (1/k) sum (y - y^i)^2 by default (Algorithm 1, line 11).
    s = np.linspace(0.1, 0.2, 10)
    got = float(regret.cv_threshold(jnp.asarray(s)))
    assert got == pytest.approx(math.sqrt(0.2111111111111111 * np.var(s, ddof=0)), rel=1e-12)


def test_cv_threshold_bad_inputs():
    with pytest.raises(ValueError, match="at least 2 folds"):
        regret.cv_threshold(jnp.ones((5, 1)))
    with pytest.raises(ValueError, match="fold_scores has 1 non-finite"):
        regret.cv_threshold(jnp.array([0.1, jnp.nan, 0.3]))
    with pytest.raises(ValueError, match="at least 2 real folds"):
        regret.cv_threshold(jnp.array([0.1, 0.2, 0.3]), jnp.array([True, False, False]))
    with pytest.raises(ValueError, match="ddof"):
        regret.cv_threshold(jnp.ones(3), ddof=2)
    # documented masking: a NaN fold that is masked out is ignored
    got = regret.cv_threshold(jnp.array([0.1, jnp.nan, 0.3]), jnp.array([True, False, True]))
    assert float(got) == pytest.approx(math.sqrt((1 / 2 + 1) * np.var([0.1, 0.3], ddof=0)), rel=1e-12)
    # inside jit the degenerate case is a threshold of 0 (never stops), not NaN
    f = jax.jit(lambda s, m: regret.cv_threshold(s, m))
    assert float(f(jnp.array([0.1, 0.2, 0.3]), jnp.array([True, False, False]))) == 0.0


# ------------------------------------------------------------------- EI and PI
def _prior_post(amp=1.0):
    return gp.posterior(gp.params(amp, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))


def test_ei_pi_against_quadrature_and_tail_series():
    post = _prior_post(amp=4.0)  # mu = 0, sigma = 2 everywhere
    X = jnp.array([[0.5]])
    for best in (-3.0, -1.0, 0.0, 0.7, 2.5):
        ei = float(regret.expected_improvement(post, X, best)[0])
        want = scipy.integrate.quad(lambda f: (best - f) * scipy.stats.norm.pdf(f, 0, 2), -np.inf, best)[0]
        assert ei == pytest.approx(want, rel=1e-9, abs=1e-14)
        pi = float(regret.probability_of_improvement(post, X, best)[0])
        assert pi == pytest.approx(scipy.stats.norm.cdf(best / 2), rel=1e-12)
    # far tail (z = best / sigma <= -12): EI = sigma phi(z)/z^2 (1 - 3/z^2 + 15/z^4 - 105/z^6 + 945/z^8)
    for z in (-12.0, -20.0, -35.0):
        ei = float(regret.expected_improvement(post, X, 2 * z)[0])
        series = 1 - 3 / z**2 + 15 / z**4 - 105 / z**6 + 945 / z**8
        want = 2 * scipy.stats.norm.pdf(z) / z**2 * series
        assert ei == pytest.approx(want, rel=1e-7)
        assert ei > 0


# -------------------------------------------------------- bound against Eq. (8)
N_B, D_B, M_B = 60, 3, 2048  # one set of shapes for most bound tests (few compilations)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(11)
    X, y = study(rng, N_B, D_B)
    cand = scipy.stats.qmc.Sobol(D_B, scramble=True, seed=1).random(M_B)
    return X, y, cand


def test_regret_bound_matches_dense_float64_eq8(problem, rng):
    X, y, cand = problem
    amp, ls, noise, mean = 1.3, np.array([0.3, 0.6, 0.9]), 1e-3, 0.2
    p = gp.params(amp, ls, noise, mean)
    post_u = gp.posterior(p, jnp.asarray(X), jnp.asarray(y))
    beta = float(regret.beta(float(N_B), float(D_B)))
    rb = regret.regret_bound(post_u, jnp.asarray(X), None, jnp.asarray(cand), beta)
    predict = np_posterior(X, y, amp, ls, noise, mean)
    bound, ucb_min, lcb_min = np_eq8(predict, X, cand, beta)
    assert bool(rb.ok)
    np.testing.assert_allclose([float(rb.bound), float(rb.ucb_min), float(rb.lcb_min)], [bound, ucb_min, lcb_min],
                               rtol=1e-9, atol=1e-11)
    assert float(rb.lcb_min_grid) == float(rb.lcb_min)
    # padded rows (garbage values, masked out) have no effect
    Xp = np.concatenate([X, rng.uniform(size=(5, D_B))])
    yp = np.concatenate([y, 1e3 * np.ones(5)])
    mask = np.r_[np.ones(N_B, bool), np.zeros(5, bool)]
    post_p = gp.posterior(p, jnp.asarray(Xp), jnp.asarray(yp), jnp.asarray(mask))
    rb_p = regret.regret_bound(post_p, jnp.asarray(Xp), jnp.asarray(mask), jnp.asarray(cand), beta)
    # ... up to rounding: padded and exact-size calls are different programs
    # (bound_rounding; kappa(K) ~2e4 here)
    pts = np.concatenate([X, cand])
    mp, vp = predict(pts)
    sb = math.sqrt(beta)
    tol = bound_rounding(X, y, pts, amp, ls, noise, mean, beta).max()
    # x_lcb is an argmin: robust only if the runner-up is further than rounding can move them
    lcb_all = np.sort(mp - sb * np.sqrt(vp))
    assert lcb_all[1] - lcb_all[0] > 2 * tol

    def assert_bounds_agree(a, b, with_x_ucb=True):
        np.testing.assert_allclose([float(a.ucb_min), float(a.lcb_min), float(a.lcb_min_grid)],
                                   [float(b.ucb_min), float(b.lcb_min), float(b.lcb_min_grid)], rtol=0, atol=tol)
        np.testing.assert_allclose(float(a.bound), float(b.bound), rtol=0, atol=2 * tol)
        np.testing.assert_array_equal(np.asarray(a.x_lcb), np.asarray(b.x_lcb))
        if with_x_ucb:
            np.testing.assert_array_equal(np.asarray(a.x_ucb), np.asarray(b.x_ucb))
        assert bool(a.ok) == bool(b.ok)

    assert_bounds_agree(rb_p, rb, with_x_ucb=False)
    # confidence_bounds is the same formula
    lcb, ucb = regret.confidence_bounds(post_u, jnp.asarray(cand), beta)
    m, v = predict(cand)
    np.testing.assert_allclose(np.asarray(lcb), m - np.sqrt(beta * v), rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(np.asarray(ucb), m + np.sqrt(beta * v), rtol=1e-9, atol=1e-11)
    # jit of the public function equals the eager call (another program: up to rounding;
    # x_ucb an argmin over X, with the margin checked here)
    ucb_X = np.sort(mp[:N_B] + sb * np.sqrt(vp[:N_B]))
    assert ucb_X[1] - ucb_X[0] > 2 * tol
    jitted = jax.jit(lambda post, c: regret.regret_bound(post, post.X, None, c, beta))
    assert_bounds_agree(jitted(post_u, jnp.asarray(cand)), rb)
    # no recompilation for new values of the same shapes
    X2, cand2 = jnp.asarray(X) * 0.9, jnp.asarray(cand) * 0.5
    with count_compilations() as compiled:
        regret.regret_bound(post_u, X2, None, cand2, 3.0)
    assert compiled.total() == 0, compiled
    # no real evaluated point: bound +inf (never stops) and ok False, not NaN
    rb0 = regret.regret_bound(post_u, jnp.asarray(X), jnp.zeros(N_B, bool), jnp.asarray(cand), beta)
    assert not bool(rb0.ok) and float(rb0.bound) == np.inf


def test_acquisitions_compile_once_whatever_form_best_takes(problem):
    # best given as a Python float, a NumPy scalar or a (weakly typed) jnp.array(0.2): one
    # program per shape (a weakly typed best once gave the jitted kernel a second signature)
    X, y, cand = problem
    post = gp.posterior(gp.params(1.0, [0.4, 0.4, 0.4], 1e-3), jnp.asarray(X), jnp.asarray(y))
    Q = jnp.asarray(cand[:5])
    for fn in (regret.expected_improvement, regret.probability_of_improvement):
        first = fn(post, Q, 0.1)
        with count_compilations() as compiled:
            values = [fn(post, Q, b) for b in (0.1, np.float64(0.1), jnp.array(0.1), jnp.asarray(0.1, jnp.float64))]
        assert compiled["_acq_jit"] == 0, compiled
        for v in values:
            np.testing.assert_array_equal(np.asarray(v), np.asarray(first))


def test_regret_bound_float32(problem):
    X, y, cand = problem
    p = gp.params(1.0, [0.4, 0.4, 0.4], 1e-3)
    post64 = gp.posterior(p, jnp.asarray(X), jnp.asarray(y))
    p32 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), p)
    post32 = gp.posterior(p32, jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32))
    rb32 = regret.regret_bound(post32, post32.X, None, jnp.asarray(cand, jnp.float32), 2.0)
    rb64 = regret.regret_bound(post64, post64.X, None, jnp.asarray(cand), 2.0)
    assert rb32.bound.dtype == rb32.lcb_min.dtype == jnp.float32 and rb64.bound.dtype == jnp.float64
    assert float(rb32.bound) == pytest.approx(float(rb64.bound), rel=1e-4)
    lcb, ucb = regret.confidence_bounds(post32, jnp.asarray(cand, jnp.float32), 2.0)
    assert lcb.dtype == ucb.dtype == jnp.float32
    assert regret.cv_threshold(jnp.ones((3, 4), jnp.float32)).dtype == jnp.float32
    assert regret.top_mask(jnp.ones(5, jnp.float32)).dtype == jnp.bool_


def test_regret_bound_bad_inputs(problem):
    X, y, cand = problem
    post = gp.posterior(gp.params(1.0, [0.4, 0.4, 0.4], 1e-3), jnp.asarray(X), jnp.asarray(y))
    with pytest.raises(ValueError, match="candidates must have 3 columns"):
        regret.regret_bound(post, post.X, None, jnp.zeros((4, 2)), 1.0)
    with pytest.raises(ValueError, match="key is required"):
        regret.regret_bound(post, post.X, None, 100, 1.0)
    with pytest.raises(ValueError, match="mask must have shape"):
        regret.regret_bound(post, post.X, jnp.ones(3, bool), jnp.asarray(cand), 1.0)
    with pytest.raises(TypeError, match="posterior must be"):
        regret.regret_bound(X, post.X, None, jnp.asarray(cand), 1.0)
    with pytest.raises(ValueError, match="candidates must lie in the unit cube"):
        regret.regret_bound(post, post.X, None, jnp.asarray(cand) + 1.0, 1.0)
    with pytest.raises(ValueError, match="beta must be >= 0"):
        regret.regret_bound(post, post.X, None, jnp.asarray(cand), -1.0)


# ----------------------------------------------------- Optuna's conventions
def optuna_regret_bound(X, values, inv_sq_ls, kernel_scale, noise_var, samples):
    """Optuna 5.0 RegretBoundEvaluator.evaluate for a minimised study, re-derived in NumPy
    with given kernel parameters (instead of its own fit)."""
    n, d = X.shape
    vals = -values  # _gp assumes maximisation
    top_n = int(np.clip(int(n * 0.5), 20, n))
    top_val = np.partition(vals, n - top_n)[n - top_n]
    sel = vals >= top_val
    Xt, yt = X[sel], vals[sel]
    y_std = max(1e-10, yt.std())
    Y = (yt - yt.mean()) / y_std
    ls = 1 / np.sqrt(inv_sq_ls)
    K = np_matern52(Xt, Xt, kernel_scale, ls) + noise_var * np.eye(len(Xt))
    L = np.linalg.cholesky(K)
    a = np.linalg.solve(L.T, np.linalg.solve(L, Y))

    def post(x):
        ks = np_matern52(x, Xt, kernel_scale, ls)
        v = np.linalg.solve(L, ks.T)
        return ks @ a, np.maximum(kernel_scale - np.sum(v * v, axis=0), 0)

    beta = 2 * np.log(d * len(Xt) ** 2 * np.pi**2 / 6 / 0.1) / 5
    m_t, v_t = post(Xt)
    m_s, v_s = post(samples)
    ucb_max = max(np.max(m_t + np.sqrt(beta * v_t)), np.max(m_s + np.sqrt(beta * v_s)))
    lcb_max = np.max(m_t - np.sqrt(beta * v_t))
    return (ucb_max - lcb_max) * y_std, sel


def test_optuna_conventions(problem, rng):
    X, y, samples = problem  # samples: a scrambled Sobol sequence of 2,048 points, as Optuna draws
    inv_sq_ls = np.array([4.0, 1.5, 0.8])
    kernel_scale, noise_var = 1.7, 3e-3
    want, sel = optuna_regret_bound(X, y, inv_sq_ls, kernel_scale, noise_var, samples)
    top = regret.top_mask(jnp.asarray(y))  # no ties here: Optuna's >= selection is the same set
    np.testing.assert_array_equal(np.asarray(top), sel)
    z, mean, std = gp.standardize(jnp.asarray(y), top)
    p = gp.params(kernel_scale, 1 / np.sqrt(inv_sq_ls), noise_var, 0.0)  # zero mean, like Optuna
    post = gp.posterior(p, jnp.asarray(X), z, top)
    b = regret.beta(float(top.sum()), float(D_B))  # (dimension, number of top points)
    rb = regret.regret_bound(post, post.X, top, jnp.asarray(samples), b, refine_steps=0)
    assert float(rb.bound * std) == pytest.approx(want, rel=1e-8)
    # CrossValidationErrorEvaluator: sqrt((1/k + 1/(k-1)) np.var(scores)), ddof 0
    scores = rng.normal(size=5)
    assert float(regret.cv_threshold(jnp.asarray(scores), ddof=0)) == pytest.approx(
        math.sqrt((1 / 5 + 1 / 4) * np.var(scores)), rel=1e-12)


# ------------------------------------------------------------------- refinement
M_R = 256


@pytest.fixture(scope="module")
def post9():
    rng = np.random.default_rng(7)
    X, y = study(rng, 100, 9)
    z = (y - y.mean()) / y.std()
    p = gp.params(1.0, np.full(9, 0.6), 1e-3)
    return gp.posterior(p, jnp.asarray(X), jnp.asarray(z)), X, z


def test_smallest_matches_a_stable_argsort(rng):
    """The refinement's starts: the k smallest, ascending, ties to the lower index, infinities last."""
    for n, k in ((612, 8), (30, 8), (5, 5), (9, 1)):
        v = np.round(rng.normal(size=n), 1)  # many ties
        v[rng.uniform(size=n) < 0.2] = np.inf
        got = np.asarray(regret_bound.smallest(jnp.asarray(v), k))
        np.testing.assert_array_equal(got, np.argsort(v, kind="stable")[:k])


def test_refinement_lowers_lcb_in_9d(post9):
    post, X, z = post9
    cand = jax.random.uniform(jax.random.key(3), (M_R, 9), jnp.float64)
    beta = float(regret.beta(100.0, 9.0))
    grid = regret.regret_bound(post, post.X, None, cand, beta)
    ref = regret.regret_bound(post, post.X, None, cand, beta, refine_steps=30)
    # with and without refinement are different programs: the grid minimum agrees up to
    # rounding (bound_rounding)
    tol = bound_rounding(X, z, np.concatenate([X, np.asarray(cand)]), 1.0, np.full(9, 0.6), 1e-3, 0.0, beta).max()
    np.testing.assert_allclose(float(ref.lcb_min_grid), float(grid.lcb_min), rtol=0, atol=tol)
    assert float(ref.lcb_min) <= float(ref.lcb_min_grid)  # one program: exact
    assert float(ref.lcb_min) < float(grid.lcb_min) - 0.05  # a real improvement, not rounding
    assert float(ref.bound) > float(grid.bound)
    # the refined minimum is a real LCB value at a point of the cube (dense oracle)
    x = np.asarray(ref.x_lcb)
    assert np.all((x >= 0) & (x <= 1))
    m, v = np_posterior(X, z, 1.0, np.full(9, 0.6), 1e-3, 0.0)(x[None, :])
    assert float(ref.lcb_min) == pytest.approx(m[0] - math.sqrt(beta * v[0]), rel=1e-8, abs=1e-10)


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10**6), st.floats(0.1, 6.0))
def test_refinement_never_raises_lcb_min(post9, seed, beta):
    post, X, z = post9
    cand = jax.random.uniform(jax.random.key(seed), (M_R, 9), jnp.float64)
    grid = regret.regret_bound(post, post.X, None, cand, beta)
    ref = regret.regret_bound(post, post.X, None, cand, beta, refine_steps=30)
    # the refinement never raises the grid's minimum: exact within one program; across the
    # two programs (with and without refinement) the grid values agree up to rounding
    # (see test_refinement_lowers_lcb_in_9d)
    assert float(ref.lcb_min) <= float(ref.lcb_min_grid)
    tol = bound_rounding(X, z, np.concatenate([X, np.asarray(cand)]), 1.0, np.full(9, 0.6), 1e-3, 0.0, beta).max()
    np.testing.assert_allclose(float(ref.lcb_min_grid), float(grid.lcb_min), rtol=0, atol=tol)
    np.testing.assert_allclose(float(ref.ucb_min), float(grid.ucb_min), rtol=0, atol=tol)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_refinement_lcb_gradient_matches_finite_differences_of_dense_gp(seed):
    """The refinement's LCB and analytic gradient (from K^-1) against the dense NumPy GP
    and its central differences; padded training rows have no effect."""
    rng = np.random.default_rng(seed)
    m, d, pad = 40 + 10 * seed, 2 + 3 * seed, 5
    X = rng.uniform(size=(m, d))
    y = np.sin(4 * X[:, 0]) + X[:, -1] ** 2 + 0.05 * rng.normal(size=m)
    amp, ls, noise, mean = 1.3, rng.uniform(0.2, 0.9, d), 10.0 ** (-2 - seed), 0.2
    predict = np_posterior(X, y, amp, ls, noise, mean)
    Xp = np.concatenate([X, rng.uniform(size=(pad, d))])
    yp = np.concatenate([y, rng.normal(size=pad) * 1e3])
    post = gp.posterior(gp.params(amp, ls, noise, mean=mean), jnp.asarray(Xp), jnp.asarray(yp),
                        jnp.asarray(np.arange(m + pad) < m))
    Kinv = _linalg.inv_from_tri_inv(post.chol_inv)
    sb = 1.7
    x = np.concatenate([rng.uniform(size=(6, d)), X[:2] + 1e-3])
    f, g = regret_bound.lcb_value_and_grad(post, Kinv, sb, jnp.asarray(x))

    def lcb(z):
        mu, var = predict(z)
        return mu - sb * np.sqrt(var)

    np.testing.assert_allclose(f, lcb(x), rtol=1e-10, atol=1e-10)
    h = 1e-6
    fd = np.stack([(lcb(x + h * e) - lcb(x - h * e)) / (2 * h) for e in np.eye(d)], axis=1)
    np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd)))


def test_padded_dimensions_stay_at_zero(post9):
    _, X, z = post9
    Xp = np.concatenate([X[:, :4], np.zeros((100, 5))], axis=1)
    dm = np.r_[np.ones(4, bool), np.zeros(5, bool)]
    post_p = gp.posterior(gp.params(1.0, np.full(9, 0.6), 1e-3), jnp.asarray(Xp), jnp.asarray(z))
    key = jax.random.key(0)
    rb = regret.regret_bound(post_p, post_p.X, None, M_R, 1.5, key=key, refine_steps=30, dim_mask=jnp.asarray(dm))
    assert np.all(np.asarray(rb.x_lcb)[4:] == 0)
    # the same bound as the 4-D problem with the same candidates: the two are different
    # programs, so they agree up to rounding (bound_rounding) on the candidate grid; the
    # refinement's accept tests compare nearly equal LCB values, so the two local searches
    # are not compared with each other: the padded one's minimum is the 4-D GP's LCB at
    # its point (dense oracle), and no worse than the 4-D grid's
    post4 = gp.posterior(gp.params(1.0, np.full(4, 0.6), 1e-3), jnp.asarray(X[:, :4]), jnp.asarray(z))
    cand = jax.random.uniform(key, (M_R, 9), jnp.float64)[:, :4]
    grid_p = regret.regret_bound(post_p, post_p.X, None, M_R, 1.5, key=key, dim_mask=jnp.asarray(dm))
    grid4 = regret.regret_bound(post4, post4.X, None, cand, 1.5)
    x4 = np.asarray(rb.x_lcb)[None, :4]
    reach = bound_rounding(X[:, :4], z, np.concatenate([X[:, :4], np.asarray(cand), x4]), 1.0, np.full(4, 0.6), 1e-3,
                           0.0, 1.5)
    tol = reach.max()
    for name in ("bound", "ucb_min", "lcb_min"):
        assert abs(float(getattr(grid_p, name)) - float(getattr(grid4, name))) <= 2 * tol, name
    assert abs(float(rb.ucb_min) - float(grid4.ucb_min)) <= tol
    m, v = np_posterior(X[:, :4], z, 1.0, np.full(4, 0.6), 1e-3, 0.0)(x4)
    assert abs(float(rb.lcb_min) - (m[0] - math.sqrt(1.5 * v[0]))) <= reach[-1]
    assert float(rb.lcb_min) <= float(grid4.lcb_min) + tol


# ------------------------------------------------------------ stopping rules
def authors_conv(vals, k):
    """get_stop_info_conv of the authors' src/stop_methods.py over rows 20..T-1:
    returns (stop row, whether the count reached k)."""
    best, count, stop = np.inf, 0, len(vals) - 1
    for it in range(20, len(vals)):
        if vals[it] < best:
            best, count = vals[it], 0
        else:
            count += 1
        stop = it
        if count == k:
            return stop, True
    return stop, False


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 15))
def test_convergence_stop_matches_authors_loop(seed, k):
    rng = np.random.default_rng(seed)
    steps = rng.uniform(size=60) < 0.15
    best = 10.0 - np.cumsum(steps * rng.uniform(size=60))
    stop, fired = regret.convergence_stop(jnp.asarray(best), k, start=20)
    assert (int(stop), bool(fired)) == authors_conv(best, k)
    stops, _ = regret.convergence_stop(jnp.asarray(best), jnp.array([k, k + 3]), start=20)
    assert int(stops[1]) == authors_conv(best, k + 3)[0]


def test_convergence_stop_after_an_incumbent_of_minus_infinity():
    # Nothing improves on -inf: the count runs on from the row that reached it, as in the
    # authors' loop (-inf < -inf is False); it was once reset at every row, and never fired.
    best = np.concatenate([10.0 - 0.1 * np.arange(25), np.full(15, -np.inf)])
    for k in (1, 2, 5, 14):
        stop, fired = regret.convergence_stop(jnp.asarray(best), k, start=20)
        assert (int(stop), bool(fired)) == authors_conv(best, k) == (25 + k, True)
    stops = regret.stop_iterations(jnp.full(40, jnp.inf), jnp.full(40, 0.1), jnp.asarray(best), jnp.arange(40),
                                   min_evaluations=1, conv_patience=(2, 3))
    assert np.asarray(stops.conv_fired).tolist() == [True, True]


def test_stop_rules_reproduce_all_published_stops(datasets):
    """All 5,320 stopping iterations of result_identity_cv_top0.5.csv from the authors'
    bound traces, recorded EI / PI and the rules of their stop_methods.py."""
    tr = datasets.load_bo_cv()
    rg = datasets.load_authors_regrets()
    rs = datasets.load_authors_results()
    T, N = tr.values.shape
    best = np.full((T, N), np.inf)
    best[:, 1:] = np.minimum.accumulate(tr.values, axis=1)[:, :-1]  # row i: min of the first i
    bound = np.where(rg.mask, rg.regret_bound, np.inf)
    thr = np.where(rg.mask, rg.incumbent_std, 0.0)
    s = jax.vmap(lambda b, t, bs, e, p: regret.stop_iterations(
        b, t, bs, jnp.arange(N), ei=e, pi=p, fixed_threshold=True, ours_scales=(1.0, 0.5 / 0.21, 1.0 / 0.21),
        conv_patience=(10, 30, 50, 70, 90), ei_thresholds=(1e-8, 1e-12, 1e-16), pi_thresholds=(1e-4, 1e-8, 1e-12),
        conv_rtol=1e-12))(bound, thr, best, tr.ei, tr.pi)
    col = {"Ours_0.21": ("ours", 0), "Ours_0.5": ("ours", 1), "Ours_1.0": ("ours", 2)}
    col.update({f"Conv_{k}": ("conv", j) for j, k in enumerate((10, 30, 50, 70, 90))})
    col.update({f"EI_{t}": ("ei", j) for j, t in enumerate(("1e-08", "1e-12", "1e-16"))})
    col.update({f"PI_{t}": ("pi", j) for j, t in enumerate(("0.0001", "1e-08", "1e-12"))})
    index = {(a, d, int(sd)): t for t, (a, d, sd) in enumerate(zip(tr.algo, tr.dataset, tr.seed))}
    stops = {g: np.asarray(getattr(s, g)) for g in ("ours", "conv", "ei", "pi")}
    got = np.array([stops[col[m][0]][index[(a, d, int(sd))], col[m][1]]
                    for a, d, sd, m in zip(rs.algo, rs.dataset, rs.seed, rs.method)])
    np.testing.assert_array_equal(got, rs.stop_iter)
    # RTC and RYC of the published table from those stops (Eq. 11-12)
    test_inc = rg.incumbent_test_metric
    rows = np.array([index[(a, d, int(sd))] for a, d, sd in zip(rs.algo, rs.dataset, rs.seed)])
    np.testing.assert_allclose(np.asarray(regret.rtc(199, got)), rs.rel_iter, atol=1e-12)
    np.testing.assert_allclose(np.asarray(regret.ryc(test_inc[rows, -1], test_inc[rows, got])), rs.rel_test, atol=1e-12)


def test_stop_iterations_bad_inputs():
    n = jnp.arange(1, 31)
    with pytest.raises(ValueError, match="threshold must have shape"):
        regret.stop_iterations(jnp.ones(30), jnp.ones(29), jnp.ones(30), n)
    with pytest.raises(ValueError, match="num_evaluations must be ints"):
        regret.stop_iterations(jnp.ones(30), jnp.ones(30), jnp.ones(30), jnp.ones(30))
    with pytest.raises(ValueError, match="conv_patience"):
        regret.stop_iterations(jnp.ones(30), jnp.ones(30), jnp.ones(30), n, conv_patience=(0,))


def test_ryc_rtc():
    assert float(regret.ryc(0.3, 0.2)) == pytest.approx(1 / 3)
    assert float(regret.ryc(0.2, 0.3)) == pytest.approx(-1 / 3)
    assert float(regret.rtc(199, 20)) == pytest.approx(179 / 199)


# ------------------------------------------------------------------- replay
T_R, D_R, K_R = 30, 2, 5
PAPER = regret.CONVENTIONS["paper"]
REPLAY_KW = dict(min_points=10, min_evaluations=20, options=regret.ReplayOptions(candidates=128, num_segments=1))


def _trace(seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(T_R, D_R))
    folds = (np.sum((X - 0.4) ** 2, axis=1) + 0.1 * np.sin(7 * X[:, 1]))[:, None] + 0.05 * rng.normal(size=(T_R, K_R))
    return X, folds.mean(axis=1), folds


def _loop_chain(key, X, values, fraction, min_points, refine_steps):
    """One GP along the trace as a user would write it: a Python loop of fit_regret_bound
    calls, each warm-started from the previous row's fit (rows 19..T_R - 1)."""
    out = []
    params, inv_hessian = None, None
    first_passes = -(-30 // 6)  # first_fit_steps / fit_steps
    opts = regret.FitOptions(refine_steps=refine_steps, fit_steps=6)
    for t in range(19, T_R):
        avail = jnp.arange(T_R) < t + 1
        for _ in range(first_passes if t == 19 else 1):
            fb = regret.fit_regret_bound(jax.random.fold_in(key, t), X, values, avail, init=params,
                                         init_inv_hessian=inv_hessian, fraction=fraction, min_points=min_points,
                                         candidates=128, beta_t="evaluations", options=opts)
            params, inv_hessian = fb.params, fb.inv_hessian
        out.append(fb)
    return out, params


def _loop_replay(key, X, values, folds, fold_mask):
    """The paper's replay as a user would write it: the bound's GP on the top set and the
    BO's GP on every evaluation (its EI / PI: ``acq_gp="all"``), two warm-started chains
    of fit_regret_bound with the same row keys (hence the same random candidates)."""
    top, params = _loop_chain(key, X, values, 0.5, 10, PAPER["refine_steps"])
    bo, _ = _loop_chain(key, X, values, 1.0, 1, 0)  # every evaluation is in the fit
    # incumbent threshold of every row: Algorithm 1, lines 8-12 in NumPy (s^2 with 1/k)
    thr, var = [], []
    for t in range(T_R):
        i = int(np.argmin(values[: t + 1]))  # no ties in these traces
        x = folds[i][fold_mask[i]]
        s2 = np.sum((x.mean() - x) ** 2) / len(x)
        var.append(s2)
        thr.append(math.sqrt((1 / len(x) + 1 / (len(x) - 1)) * s2))
    return dict(bound=[float(f.bound.bound) for f in top], ucb=[float(f.bound.ucb_min) for f in top],
                lcb=[float(f.bound.lcb_min) for f in top], ei=[float(f.ei_max) for f in bo],
                pi=[float(f.pi_max) for f in bo], ntop=[int(f.num_top) for f in top],
                ok=[bool(f.bound.ok) and bool(g.bound.ok) for f, g in zip(top, bo)], thr=np.array(thr),
                var=np.array(var), params=params)


PAPER_RULES = dict(ours_scales=(1.0,), ours_variances=(0.5,))  # Ours_0.21, Ours_0.5 of the text


def assert_stop_margins(res, rows, rtol_bound, rtol_acq):
    """No stop decision of a replay sits within the cross-program tolerances of its threshold.

    The paper's rules compare ``bound < threshold`` (Ours_0.21), ``bound < sqrt(0.5 s^2)``
    (Ours_0.5) and ``ei`` / ``pi`` against 1e-8 (the defaults). Where the bounds, EI and PI
    of two programs agree to ``rtol_bound`` / ``rtol_acq`` (asserted by the caller), a
    decision can only differ between them when its margin is below those tolerances; the
    thresholds themselves are one program's NumPy-checked values (rtol 1e-12). Checked
    here, the stops of the two programs must then be equal.
    """
    b = np.asarray(res.bound)[rows]
    for thr in (np.asarray(res.threshold)[rows], np.sqrt(0.5 * np.asarray(res.variance)[rows])):
        assert np.all(np.abs(b - thr) > rtol_bound * np.abs(b) + 1e-12 * thr)
    for name in ("ei", "pi"):
        v = np.asarray(getattr(res, name))[rows]
        assert np.all(np.abs(v - 1e-8) > rtol_acq * np.abs(v) + 1e-12), name


def test_replay_loop_scan_vmap_and_padding():
    key = jax.random.key(5)
    X, values, folds = _trace(0)
    fold_mask = np.ones((T_R, K_R), bool)
    folds[3, 2] = np.nan  # masked NaN fold: documented masking
    fold_mask[3, 2] = False
    values[3] = folds[3][fold_mask[3]].mean()
    res = regret.replay(key, jnp.asarray(X), jnp.asarray(values), jnp.asarray(folds),
                        fold_mask=jnp.asarray(fold_mask), **REPLAY_KW)
    loop = _loop_replay(key, jnp.asarray(X), jnp.asarray(values), folds, fold_mask)
    rows = slice(19, T_R)
    assert np.all(np.asarray(res.computed)[rows]) and not np.any(np.asarray(res.computed)[:19])
    np.testing.assert_allclose(np.asarray(res.bound)[rows], loop["bound"], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(res.ucb_min)[rows], loop["ucb"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.asarray(res.lcb_min)[rows], loop["lcb"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(np.asarray(res.ei)[rows], loop["ei"], rtol=1e-5, atol=1e-12)
    np.testing.assert_allclose(np.asarray(res.pi)[rows], loop["pi"], rtol=1e-5, atol=1e-12)
    np.testing.assert_array_equal(np.asarray(res.num_fitted)[rows], loop["ntop"])
    np.testing.assert_array_equal(np.asarray(res.ok)[rows], loop["ok"])
    np.testing.assert_allclose(np.asarray(res.threshold), loop["thr"], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(res.variance), loop["var"], rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(res.num_evaluations), np.arange(1, T_R + 1))
    np.testing.assert_array_equal(np.asarray(res.best), np.minimum.accumulate(values))
    chex.assert_trees_all_close(res.params, loop["params"], rtol=1e-6, atol=1e-8)
    assert_stop_margins(res, rows, 1e-6, 1e-5)  # so the loop's bounds give the replay's stops
    s = regret.stop_iterations(jnp.asarray(np.r_[np.full(19, np.inf), loop["bound"]]), jnp.asarray(loop["thr"]),
                               jnp.asarray(np.minimum.accumulate(values)), jnp.arange(1, T_R + 1),
                               ei=jnp.asarray(np.r_[np.full(19, np.inf), loop["ei"]]),
                               pi=jnp.asarray(np.r_[np.full(19, np.inf), loop["pi"]]),
                               variance=jnp.asarray(loop["var"]), **PAPER_RULES)
    chex.assert_trees_all_equal(res.stops, s)

    # vmapped over two traces: this one, and its first 24 rows followed by 6 padded rows
    pad = 24
    Xb = X.copy()
    Xb[pad:] = 0.5
    vb = values.copy()
    vb[pad:] = np.nan  # padded values are ignored
    fb = folds.copy()
    fb[pad:] = np.nan
    masks = np.stack([np.ones(T_R, bool), np.arange(T_R) < pad])
    fmasks = np.stack([fold_mask, fold_mask & (np.arange(T_R) < pad)[:, None]])
    batched = jax.vmap(lambda c, v, f, m, fm: regret.replay(key, c, v, f, mask=m, fold_mask=fm, **REPLAY_KW))(
        jnp.asarray(np.stack([X, Xb])), jnp.asarray(np.stack([values, vb])), jnp.asarray(np.stack([folds, fb])),
        jnp.asarray(masks), jnp.asarray(fmasks))
    first = jax.tree_util.tree_map(lambda a: a[0], batched)
    # vmapped and single replays are different programs: each row's fit is 6 BFGS steps
    # warm-started from the previous row's, so rounding differences are carried along the
    # trace through unconverged steps, an amplification no closed form bounds. They are
    # held to the loop-vs-scan tolerances above (percent-level errors stay far outside),
    # and the discrete outputs (stops) are equal because no decision sits within them.
    for name, rtol, atol in (("bound", 1e-6, 0), ("ucb_min", 1e-6, 1e-9), ("lcb_min", 1e-6, 1e-9),
                             ("ei", 1e-5, 1e-12), ("pi", 1e-5, 1e-12)):
        np.testing.assert_allclose(np.asarray(getattr(first, name))[rows], np.asarray(getattr(res, name))[rows],
                                   rtol=rtol, atol=atol, err_msg=name)
    chex.assert_trees_all_close(first.params, res.params, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(first.threshold), np.asarray(res.threshold), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(first.variance), np.asarray(res.variance), rtol=1e-12)
    for name in ("best", "incumbent", "num_evaluations", "num_fitted", "computed", "ok", "stops"):
        chex.assert_trees_all_equal(getattr(first, name), getattr(res, name))  # margins checked above
    padded = jax.tree_util.tree_map(lambda a: np.asarray(a[1]), batched)
    real = slice(19, pad)
    # the padded trace and the full one are rows of ONE program: its real rows are bit-identical
    first = jax.tree_util.tree_map(np.asarray, first)
    for name in ("bound", "ucb_min", "lcb_min", "ei", "pi", "num_fitted", "ok"):
        np.testing.assert_array_equal(getattr(padded, name)[real], getattr(first, name)[real], err_msg=name)
    np.testing.assert_array_equal(padded.threshold[:pad], first.threshold[:pad])
    assert np.all(np.isinf(padded.bound[pad:])) and not np.any(padded.computed[pad:])
    # stops of the padded trace: as if the trace had ended after 24 evaluations
    trunc = regret.stop_iterations(jnp.asarray(np.asarray(res.bound)[:pad]), res.threshold[:pad], res.best[:pad],
                                   res.num_evaluations[:pad], ei=res.ei[:pad], pi=res.pi[:pad],
                                   variance=res.variance[:pad], **PAPER_RULES)
    chex.assert_trees_all_equal(jax.tree_util.tree_map(jnp.asarray, padded.stops), trunc)

    # a second call with new values does not recompile
    args = (jnp.asarray(X), jnp.asarray(values) + 0.1, jnp.asarray(folds))
    key9, fmask = jax.random.key(9), jnp.asarray(fold_mask)
    with count_compilations() as compiled:
        regret.replay(key9, *args, fold_mask=fmask, **REPLAY_KW)
    assert compiled.total() == 0, compiled


def test_replay_bad_inputs():
    X, values, folds = _trace(1)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="same number of rows"):
        regret.replay(key, X[:-1], values, folds)
    with pytest.raises(ValueError, match="at least 2 folds"):
        regret.replay(key, X, values, folds[:, :1])
    bad = folds.copy()
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="fold_scores has 1 non-finite"):
        regret.replay(key, X, values, bad)
    with pytest.raises(ValueError, match="at least 2 real folds"):
        fm = np.ones(folds.shape, bool)
        fm[2, 1:] = False
        regret.replay(key, X, values, folds, fold_mask=fm)
    with pytest.raises(ValueError, match="values has 1 non-finite"):
        v = values.copy()
        v[0] = np.nan
        regret.replay(key, X, v, folds)
    with pytest.raises(ValueError, match="configs must lie in the unit cube"):
        regret.replay(key, X + 1, values, folds)
    with pytest.raises(ValueError, match="convention"):
        regret.replay(key, X, values, folds, convention="mine")
    with pytest.raises(TypeError, match="unexpected keyword"):
        regret.replay(key, X, values, folds, refine=3)
    with pytest.raises(ValueError, match="padded"):
        regret.replay(key, X, values, folds, dim_mask=np.array([True, False]))
    with pytest.raises(ValueError, match="ei must have shape"):
        regret.replay(key, X, values, folds, ei=np.zeros(3))


def test_fit_regret_bound_top_set_and_units(rng):
    X, y = study(rng, T_R, D_R)
    key = jax.random.key(1)
    fb = regret.fit_regret_bound(key, jnp.asarray(X), jnp.asarray(y), jnp.ones(T_R, bool), fraction=0.5,
                                 min_points=10, candidates=128, beta_t="evaluations",
                                 options=regret.FitOptions(refine_steps=PAPER["refine_steps"], fit_steps=6))
    np.testing.assert_array_equal(np.asarray(fb.top), np.asarray(regret.top_mask(jnp.asarray(y), min_points=10)))
    assert int(fb.num_top) == 15
    sel = np.asarray(fb.top)
    assert float(fb.y_mean) == pytest.approx(y[sel].mean(), rel=1e-12)
    assert float(fb.y_std) == pytest.approx(y[sel].std(), rel=1e-12)
    assert float(fb.beta) == pytest.approx(float(regret.beta(float(T_R), float(D_R))), rel=1e-12)
    # Eq. (8) from the dense oracle with the fitted hyperparameters, mapped back to y's units
    p = fb.params
    z = (y[sel] - y[sel].mean()) / y[sel].std()
    predict = np_posterior(X[sel], z, float(p.amplitude), np.asarray(p.lengthscales), float(p.noise), float(p.mean))
    me, ve = predict(X[sel])
    ucb_min = np.min(me + math.sqrt(float(fb.beta)) * np.sqrt(ve))
    assert float(fb.bound.ucb_min) == pytest.approx(ucb_min * y[sel].std() + y[sel].mean(), rel=1e-8)
    assert float(fb.bound.bound) == pytest.approx(float(fb.bound.ucb_min - fb.bound.lcb_min), rel=1e-10)
    assert float(fb.bound.lcb_min) <= float(fb.bound.lcb_min_grid)
    with pytest.raises(ValueError, match="beta_t"):
        regret.fit_regret_bound(key, X, y, beta_t="iterations")
    with pytest.raises(ValueError, match="X and y must have the same number of rows"):
        regret.fit_regret_bound(key, X, y[:-1])


def test_fixed_cost_fit_reaches_the_scipy_map_optimum(rng):
    """The bound's quasi-Newton fit (mean profiled out) reaches the joint MAP found by SciPy's
    L-BFGS-B over all hyperparameters including the mean, and its mean is the GLS estimate."""
    import scipy.optimize

    X, y = study(rng, 40, 3)
    z = (y - y.mean()) / y.std() + 0.7  # an offset for the mean to find
    mask = np.ones(40, bool)
    init = termination.default_params(3, jnp.ones(3, bool), jnp.float64)
    p, info, post, _ = gp_fit.fit_profiled(jnp.asarray(X), jnp.asarray(z), jnp.asarray(mask), init, 1e-6, steps=80,
                                     fit_mean=True)

    def neg(t):
        amp, ls, noise = np.exp(t[0]), np.exp(t[1:4]), np.exp(t[4]) + 1e-6
        lam = 1 / ls**2
        prior = -np.sum(0.1 / lam + 0.1 * lam) + np.log(amp) - amp + 0.1 * np.log(noise) - 30 * noise
        K = np_matern52(X, X, amp, ls) + noise * np.eye(len(X))
        return -(scipy.stats.multivariate_normal(np.full(len(z), t[5]), K).logpdf(z) + prior)

    best = min(
        scipy.optimize.minimize(neg, t0, method="L-BFGS-B").fun
        for t0 in (np.array([0, -0.7, -0.7, -0.7, -4.6, 0]), np.array([0.5, 0, 0, 0, -2, 0.5]))
    )
    ours = neg(np.concatenate([[p.log_amplitude], p.log_lengthscales, [np.log(p.noise - 1e-6)], [p.mean]]))
    np.testing.assert_allclose(float(info.objective), ours, rtol=1e-8)
    assert ours <= best + 1e-6 * abs(best)
    # stopping once converged (largest gradient component <= 1e-4) lands on the same optimum
    pe, ie, _, _ = gp_fit.fit_profiled(jnp.asarray(X), jnp.asarray(z), jnp.asarray(mask), init, 1e-6, steps=80,
                                 fit_mean=True, tol=1e-4)
    assert int(ie.steps) < 80 and int(info.steps) == 80
    early = neg(np.concatenate([[pe.log_amplitude], pe.log_lengthscales, [np.log(pe.noise - 1e-6)], [pe.mean]]))
    assert early <= best + 1e-6 * abs(best)
    K = np_matern52(X, X, float(p.amplitude), np.asarray(p.lengthscales)) + float(p.noise) * np.eye(40)
    k1 = np.linalg.solve(K, np.ones(40))
    assert float(p.mean) == pytest.approx(k1 @ z / k1.sum(), rel=1e-8)
    # the fit's GP (from the accepted evaluation's factor) predicts as the dense oracle does
    Xq = rng.uniform(size=(9, 3))
    mu_ref, var_ref = np_posterior(X, z, float(p.amplitude), np.asarray(p.lengthscales), float(p.noise),
                                   float(p.mean))(Xq)
    mu, var = gp.predict(post, Xq)
    assert bool(post.ok)
    np.testing.assert_allclose(mu, mu_ref, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(var, var_ref, rtol=1e-6, atol=1e-9)


def _fit_geometry(fb, X, y, min_noise=1e-6):
    """Largest gradient component of a fit's stopping test, recomputed at ``fb.params``, and
    the curvature and rounding needed to compare two fits of one study (fit_tol tests).

    The stopping test is ``max |g| <= tol`` with g the gradient of the profiled objective
    (gp_fit.objective_profiled_scale) in the raw coordinates. Recomputed in another program
    g moves by rounding only: the Cholesky of K is exact for K + E, ||E|| <= 4 m u ||K||,
    which moves alpha^T K_i alpha / 2 and tr(K^-1 K_i) / 2 by about kappa m u times their
    size; ||K_i|| <= 2 ||K|| for log-lengthscales / log-noise, so |dg| <= 2 * 2 * 4 m u kappa
    (|f| + m) (two programs). Returns (max |g|, its rounding, ||H^-1||, grad of the bound in
    psi = (log a, log ls, log g, m) at the reported x_ucb / x_lcb, psi).
    """
    u = np.finfo(np.float64).eps
    top = np.asarray(fb.top)
    Xt, z = jnp.asarray(X[top]), (jnp.asarray(y[top]) - fb.y_mean) / fb.y_std
    p = jax.tree_util.tree_map(jnp.asarray, fb.params)
    raw = gp_fit.to_raw(p._replace(log_noise=p.log_noise - p.log_amplitude), min_noise)
    theta, unravel = jax.flatten_util.ravel_pytree(raw)
    mask = jnp.ones(len(z), bool)
    f, g = jax.value_and_grad(lambda t: gp_fit.objective_profiled_scale(
        unravel(t), Xt, z, mask, min_noise, True, True, p.mean)[0])(theta)
    m = len(z)
    L = np.asarray(gp.posterior(fb.params, Xt, z).chol)
    kappa = np.linalg.cond(L @ L.T)
    g_round = 2 * 2 * 4 * m * u * kappa * (abs(float(f)) + m)

    def unpack(psi):
        return gp.GPParams(psi[0], psi[1:-2], psi[0] + psi[-2], psi[-1])

    def objective(psi):
        q = unpack(psi)
        return -(gp.log_marginal_likelihood(q, Xt, z) + gp.log_prior(q))

    def bound(psi):  # Eq. (8) at the reported minimisers (envelope: their derivative is the bound's)
        mu, var = gp.predict(gp.posterior(unpack(psi), Xt, z), jnp.stack([fb.bound.x_ucb, fb.bound.x_lcb]))
        sd = jnp.sqrt(fb.beta * var)
        return fb.y_std * (mu[0] + sd[0] - mu[1] + sd[1])

    psi = jnp.concatenate([p.log_amplitude[None], p.log_lengthscales, (p.log_noise - p.log_amplitude)[None],
                           p.mean[None]])
    H = np.asarray(jax.hessian(objective)(psi))
    assert np.all(np.linalg.eigvalsh(H) > 0), "the fit did not end at a minimum"
    return (float(jnp.max(jnp.abs(g))), g_round, np.linalg.norm(np.linalg.inv(H), 2),
            np.asarray(jax.jacfwd(bound)(psi)), np.asarray(psi))


def test_fit_stops_once_converged_and_vmap_agrees(rng):
    """``fit_tol``: the fit stops early at a point whose objective is that of the full fit
    (so at the optimum), reports the steps it took, takes every step with ``fit_tol=0``,
    and a vmapped batch of studies that converge at different steps equals the
    studies fitted one by one."""
    studies = [study(rng, 60, 3, noise=0.02 + 0.05 * i) for i in range(4)]
    key = jax.random.key(0)
    opts = regret.FitOptions(fit_steps=60, fit_tol=0.0)
    full = [regret.fit_regret_bound(key, X, y, options=opts) for X, y in studies]
    early = [regret.fit_regret_bound(key, X, y, options=opts._replace(fit_tol=1e-4)) for X, y in studies]
    for a, b in zip(full, early):
        assert int(a.fit_info.steps) == 60
        assert 1 < int(b.fit_info.steps) < 60
        assert float(b.fit_info.objective) == pytest.approx(float(a.fit_info.objective), abs=1e-7)
        assert float(b.bound.bound) == pytest.approx(float(a.bound.bound), rel=1e-3)
    assert len({int(b.fit_info.steps) for b in early}) > 1
    # the default fit_tol (1e-2, Optuna's gradient tolerance) given enough steps
    for a, (X, y) in zip(full, studies):
        d = regret.fit_regret_bound(key, X, y, options=regret.FitOptions(fit_steps=60))
        assert int(d.fit_info.steps) < 60
        assert float(d.bound.bound) == pytest.approx(float(a.bound.bound), rel=1e-3)
    X = jnp.stack([jnp.asarray(X) for X, _ in studies])
    Y = jnp.stack([jnp.asarray(y) for _, y in studies])
    tol = 1e-4

    def fit_batch(steps):
        opts = regret.FitOptions(fit_steps=steps, fit_tol=tol)
        return jax.vmap(lambda X, y: regret.fit_regret_bound(key, X, y, options=opts))(X, Y)

    batch = fit_batch(60)
    # Vmapped and single fits are different programs: a rounding-level difference can change
    # a line search or the stopping step, so their step counts are not compared. Each
    # program's own stop is checked instead: its final point has max |g| <= tol and the point
    # it accepted one evaluation earlier (the same program with fit_steps = steps - 1) has
    # max |g| > tol, both by more than g's rounding (else the check fails: a knife edge).
    # Both points then lie where |g| <= tol, H^-1 g from the optimum to second order
    # (H: the Hessian in psi, q = 4 free components): |d psi| <= 2 sqrt(q) tol ||H^-1||,
    # and the bound moves by at most ||db/dpsi|| times that.
    for s, ((Xs, ys), one) in enumerate(zip(studies, early)):
        steps_b = int(batch.fit_info.steps[s])
        opts = regret.FitOptions(fit_steps=int(one.fit_info.steps) - 1, fit_tol=tol)
        runs = [(one, regret.fit_regret_bound(key, Xs, ys, options=opts)),
                (jax.tree_util.tree_map(lambda a, s=s: a[s], batch),
                 jax.tree_util.tree_map(lambda a, s=s: a[s], fit_batch(steps_b - 1)))]
        for end, before in runs:
            g_end, r_end, h_inv, db, psi_end = _fit_geometry(end, Xs, ys)
            g_before, r_before, *_ = _fit_geometry(before, Xs, ys)
            assert g_end < tol - r_end and g_before > tol + r_before, ("knife-edge stop", s, g_end, g_before, r_end)
        dpsi = 2 * np.sqrt(4) * tol * h_inv
        _, _, _, _, psi_one = _fit_geometry(one, Xs, ys)
        np.testing.assert_allclose(psi_end, psi_one, rtol=0, atol=dpsi)
        assert float(batch.bound.bound[s]) == pytest.approx(float(one.bound.bound),
                                                            abs=np.linalg.norm(db) * dpsi)
    with pytest.raises(ValueError, match="fit_tol"):
        regret.fit_regret_bound(key, *studies[0], options=regret.FitOptions(fit_tol=-1.0))


def test_warm_inverse_hessian_converges_in_fewer_steps(rng):
    """A running study's warm start: the previous trial's params *and* inverse Hessian.
    The next fit then reaches the optimum that a 200-step cold fit finds, in at most half
    the steps taken from the params alone; an unusable matrix (zeros, NaN) is exactly the
    start from the params alone (identity curvature)."""
    key = jax.random.key(3)
    kw = dict(candidates=64, options=regret.FitOptions(fit_steps=60, fit_tol=1e-4, refine_steps=0))
    steps_h, steps_p = [], []
    for i in range(4):
        X, y = study(rng, 80, 3, noise=0.02 + 0.03 * i)
        X, y = jnp.asarray(X), jnp.asarray(y)
        prev = regret.fit_regret_bound(key, X, y, jnp.arange(80) < 79, **kw)
        H = np.asarray(prev.inv_hessian)
        assert H.shape == (6, 6)
        np.testing.assert_allclose(H, H.T, rtol=1e-8, atol=1e-12)
        assert np.all(np.linalg.eigvalsh(0.5 * (H + H.T)) > 0)  # BFGS keeps it positive definite
        full = regret.fit_regret_bound(key, X, y, candidates=64,
                                       options=regret.FitOptions(fit_steps=200, fit_tol=0.0, refine_steps=0))
        with_h = regret.fit_regret_bound(key, X, y, init=prev.params, init_inv_hessian=prev.inv_hessian, **kw)
        params_only = regret.fit_regret_bound(key, X, y, init=prev.params, **kw)
        # (from the params alone the first steps can overshoot into a poorer optimum:
        # one of these studies ends 0.6 nats above it)
        assert float(with_h.fit_info.objective) == pytest.approx(float(full.fit_info.objective), abs=1e-6)
        assert float(with_h.bound.bound) == pytest.approx(float(full.bound.bound), rel=1e-3)
        assert float(params_only.fit_info.objective) >= float(full.fit_info.objective) - 1e-6
        steps_h.append(int(with_h.fit_info.steps))
        steps_p.append(int(params_only.fit_info.steps))
        for bad in (np.zeros((6, 6)), np.full((6, 6), np.nan)):
            cold = regret.fit_regret_bound(key, X, y, init=prev.params, init_inv_hessian=bad, **kw)
            chex.assert_trees_all_equal(cold, params_only)
    assert all(a <= b for a, b in zip(steps_h, steps_p)) and 2 * sum(steps_h) < sum(steps_p), (steps_h, steps_p)
    with pytest.raises(ValueError, match="init_inv_hessian must have shape"):
        regret.fit_regret_bound(key, X, y, init_inv_hessian=np.eye(5))


def _rounding_reach(fb, X, y, cand):
    """How far rounding alone can move a float64 ``fit_regret_bound`` of one study.

    Two programs that compute the same thing (a padded and an exact-size call) round
    differently, by amounts that depend on the CPU's vector width and reduction order. The
    fit minimises ``f(theta) = -(log marginal likelihood + log prior)`` of the standardised
    top set (m rows). Evaluated in floating point (unit roundoff u), the Cholesky factor of
    the Gram matrix K is exact for ``K + E`` with ``|E| <~ m u |K|`` (backward stability),
    which moves the quadratic form and the log-determinant of f by at most about
    ``delta_f = kappa(K) m u (|f| + m)`` to first order. An optimiser cannot tell apart
    points whose objectives differ by less than ``delta_f``: those fill the ellipsoid
    ``dtheta^T H dtheta / 2 <= delta_f`` around the minimum (H: the Hessian of f), and a
    program may stop anywhere in it. Across that ellipsoid a smooth function b of theta
    moves by at most ``sqrt(2 delta_f s^T H^-1 s)`` (s = db/dtheta), so two programs'
    results differ by at most twice that, plus b's own evaluation error. The objective
    itself is stationary there: each side is within ``delta_f`` of the minimum and carries
    ``delta_f`` of evaluation error.

    Returns a dict of absolute tolerances for ``objective``, ``bound`` and ``ucb_min``.
    """
    u = np.finfo(np.float64).eps
    top = np.asarray(fb.top)
    Xt = jnp.asarray(X[top])
    z = (jnp.asarray(y[top]) - fb.y_mean) / fb.y_std
    theta, unravel = jax.flatten_util.ravel_pytree(fb.params)

    def objective(th):
        p = unravel(th)
        return -(gp.log_marginal_likelihood(p, Xt, z) + gp.log_prior(p))

    def bound_parts(th):  # Eq. (8) at fixed hyperparameters, in the units of y
        rb = regret.regret_bound(gp.posterior(unravel(th), Xt, z), Xt, None, cand, fb.beta)
        return jnp.stack([rb.bound * fb.y_std, rb.ucb_min * fb.y_std + fb.y_mean])

    H = np.asarray(jax.hessian(objective)(theta))
    H_inv = np.linalg.inv(H)
    assert np.all(np.linalg.eigvalsh(H) > 0), "the fit did not end at a minimum"
    L = np.asarray(gp.posterior(fb.params, Xt, z).chol)
    m = len(z)
    kappa = np.linalg.cond(L @ L.T)
    f = float(objective(theta))
    delta_f = kappa * m * u * (abs(f) + m)
    parts = np.asarray(bound_parts(theta))
    # the recomputation is the function whose sensitivity is used below
    eval_err = kappa * m * u * (np.abs(parts) + float(fb.y_std) * (1 + float(jnp.sqrt(fb.beta))))
    np.testing.assert_allclose(parts, [float(fb.bound.bound), float(fb.bound.ucb_min)], rtol=0, atol=eval_err.max())
    S = np.asarray(jax.jacfwd(bound_parts)(theta))  # (2, p)
    reach = np.sqrt(2 * delta_f * np.einsum("kp,pq,kq->k", S, H_inv, S))
    tol = 2 * reach + 2 * eval_err
    return {"objective": 4 * delta_f, "bound": tol[0], "ucb_min": tol[1]}


def test_fit_regret_bound_fixed_capacity_matches_exact_size_without_recompiling(rng):
    """A running study keeps fixed-capacity arrays and a mask: rows past the real ones (any
    values, NaN included) change nothing, and growing the mask compiles nothing new.

    Inertness is exact where both calls are the same program (same capacity, different
    padding): every output is bit-identical. Against a call on exactly the real rows (a
    different program) the top set is identical and the floats agree to the reach of
    rounding through the fit (:func:`_rounding_reach`)."""
    cap, d = 90, 3
    X, y = study(rng, cap, d)
    key = jax.random.key(6)
    cand = jnp.asarray(rng.uniform(size=(64, d)))
    # (no refinement: its accept tests compare nearly equal LCB values, so rounding-level
    # differences can send an unconverged local search down another path)
    kw = dict(candidates=cand, min_points=10, options=regret.FitOptions(fit_steps=100, fit_tol=0.0, refine_steps=0))
    padded_compiles, exact_compiles = 0, 0
    for n in (25, 41, 60):
        mask = jnp.arange(cap) < n
        Xa, ya = X.copy(), y.copy()
        Xa[n:], ya[n:] = 0.5, np.nan
        Xb, yb = X.copy(), y.copy()
        Xb[n:], yb[n:] = rng.uniform(size=(cap - n, d)), 1e30
        with count_compilations() as compiled:
            padded = regret.fit_regret_bound(key, jnp.asarray(Xa), jnp.asarray(ya), mask, **kw)
        padded_compiles += compiled["_fit_regret_bound_jit"]
        chex.assert_trees_all_equal(
            regret.fit_regret_bound(key, jnp.asarray(Xb), jnp.asarray(yb), mask, **kw), padded)
        with count_compilations() as compiled:
            exact = regret.fit_regret_bound(key, jnp.asarray(X[:n]), jnp.asarray(y[:n]), **kw)
        exact_compiles += compiled["_fit_regret_bound_jit"]
        assert int(padded.num_top) == int(exact.num_top) == max(10, n // 2)
        np.testing.assert_array_equal(np.asarray(padded.top)[:n], np.asarray(exact.top))
        assert not np.any(np.asarray(padded.top)[n:])
        tol = _rounding_reach(exact, X[:n], y[:n], cand)
        assert abs(float(padded.fit_info.objective) - float(exact.fit_info.objective)) <= tol["objective"]
        assert abs(float(padded.bound.bound) - float(exact.bound.bound)) <= tol["bound"]
        assert abs(float(padded.bound.ucb_min) - float(exact.bound.ucb_min)) <= tol["ucb_min"]
        # the tolerance stays far below what a masking error would cause (percent level)
        assert tol["bound"] <= 1e-4 * float(exact.bound.bound)
    # at most one program for the padded calls (the first may find it compiled by an earlier
    # test); every exact size compiles its own, which shows the count sees this entry point
    assert padded_compiles <= 1 and exact_compiles >= 2


def test_fit_regret_bound_in_float32_matches_float64(rng):
    """The whole fit-and-bound runs in the inputs' dtype; with fits run to convergence, float32 lands
    on the float64 bound (same studies, same candidate points). (With the default cap of 20 steps a
    study whose fit has not converged by then can stop at a different point in each dtype.)"""
    n, d, num = 60, 3, 6
    data = [study(rng, n, d) for _ in range(num)]
    X = np.stack([a for a, _ in data])
    y = np.stack([b for _, b in data])
    cand = rng.uniform(size=(256, d))
    keys = jax.random.split(jax.random.key(4), num)

    def run(dtype):
        f = jax.vmap(lambda k, X, y: regret.fit_regret_bound(k, X, y, candidates=jnp.asarray(cand, dtype),
                                                             options=regret.FitOptions(fit_steps=100, fit_tol=1e-4)))
        return f(keys, jnp.asarray(X, dtype), jnp.asarray(y, dtype))

    r32, r64 = run(jnp.float32), run(jnp.float64)
    assert r32.bound.bound.dtype == r32.params.lengthscales.dtype == jnp.float32
    assert bool(jnp.all(r32.bound.ok)) and bool(jnp.all(r64.bound.ok))
    b32, b64 = np.asarray(r32.bound.bound, np.float64), np.asarray(r64.bound.bound)
    np.testing.assert_allclose(b32, b64, rtol=3e-3)
    # ucb_min is a level of y (near 0 here): compare on the scale of the top set's spread
    ucb32, ucb64 = np.asarray(r32.bound.ucb_min, np.float64), np.asarray(r64.bound.ucb_min)
    assert np.all(np.abs(ucb32 - ucb64) <= 1e-2 * np.asarray(r64.y_std))


# ------------------------------------------------------------ one API style (deprecated forms)
def test_replay_key_first_and_options_match_the_deprecated_forms():
    """replay(key, ...) with options= equals the old replay(..., key=key) with the settings
    and convention overrides as keywords, which warns; the options take effect."""
    key = jax.random.key(5)
    X, values, folds = (jnp.asarray(a) for a in _trace(2))
    opts = regret.ReplayOptions(candidates=128, num_segments=1, fit_steps=3, lag=1, beta_scale=0.3, acq_gp="top")
    new = regret.replay(key, X, values, folds, min_points=10, min_evaluations=20, options=opts)
    with pytest.warns(DeprecationWarning) as record:
        old = regret.replay(X, values, folds, key=key, min_points=10, min_evaluations=20, candidates=128,
                            num_segments=1, fit_steps=3, lag=1, beta_scale=0.3, acq_gp="top")
    messages = " ".join(str(w.message) for w in record)
    assert "replay(key, configs, values, fold_scores)" in messages and "options=ReplayOptions(" in messages
    chex.assert_trees_all_equal(new, old)
    # lag 1 (an override of the "paper" preset): row t uses t evaluations; beta_scale reaches beta
    assert int(new.num_evaluations[-1]) == T_R - 1 and not bool(new.computed[19]) and bool(new.computed[20])
    with pytest.warns(DeprecationWarning, match="ReplayOptions"):  # a keyword goes on top of options
        both = regret.replay(key, X, values, folds, min_points=10, options=opts._replace(fit_steps=9), fit_steps=3)
    chex.assert_trees_all_equal(new, both)
    with pytest.warns(DeprecationWarning, match=r"\['candidates'\].*ReplayOptions\(candidates="):  # a count: old form
        count = regret.replay(key, X, values, folds, min_points=10, options=opts._replace(candidates=512),
                              candidates=128)
    chex.assert_trees_all_equal(new, count)
    assert checks.is_prng_key(key) and checks.is_prng_key(jax.random.PRNGKey(0))
    assert not checks.is_prng_key(X) and not checks.is_prng_key(np.zeros(2))
    with pytest.raises(TypeError, match="first argument"):
        regret.replay(X, values, folds)
    with pytest.raises(TypeError, match="key twice"):
        regret.replay(key, X, values, folds, key=key)
    with pytest.raises(TypeError, match="options must be a ReplayOptions"):
        regret.replay(key, X, values, folds, options=regret.FitOptions())
    with pytest.raises(TypeError, match="fold_scores"):
        regret.replay(key, X, values)


def test_fit_regret_bound_options_match_the_deprecated_keywords(rng):
    """options=FitOptions(...) equals the same settings as (deprecated, warning) keywords;
    every field takes effect."""
    X, y = (jnp.asarray(a) for a in study(rng, 40, 2))
    key = jax.random.key(3)
    opts = regret.FitOptions(fit_steps=4, fit_tol=0.0, fit_mean=False, min_noise=1e-4, refine_steps=2,
                             refine_starts=4, chunk_size=32, beta_size=3.0, delta=0.2, beta_scale=0.5)
    new = regret.fit_regret_bound(key, X, y, candidates=64, options=opts)
    with pytest.warns(DeprecationWarning, match="FitOptions"):
        old = regret.fit_regret_bound(key, X, y, candidates=64, **opts._asdict())
    chex.assert_trees_all_equal(new, old)
    assert int(new.fit_info.steps) == 4 and float(new.params.mean) == 0.0  # fit_steps, fit_tol, fit_mean
    assert float(new.params.noise) / float(new.params.amplitude) > 1e-4  # min_noise: the ratio's floor
    # beta_t "fitted": t = 20 top points, with beta_size, delta and beta_scale of the options
    assert float(new.beta) == pytest.approx(float(regret.beta(20.0, 3.0, 0.2, 0.5)), rel=1e-12)
    default = regret.fit_regret_bound(key, X, y, candidates=64)
    assert float(default.beta) != float(new.beta) and float(default.params.mean) != 0.0
    with pytest.raises(TypeError, match="unexpected keyword"):
        regret.fit_regret_bound(key, X, y, fit_step=4)
    with pytest.raises(TypeError, match="options must be a FitOptions"):
        regret.fit_regret_bound(key, X, y, options=dict(fit_steps=4))


def test_regret_bound_mask_replaces_eval_mask(rng):
    """mask is the name of the rows of X_eval that are real; eval_mask= still works and warns."""
    X = rng.uniform(size=(12, 2))
    post = gp.posterior(gp.params(1.0, [0.3, 0.3], 1e-3), X, np.sin(5 * X[:, 0]))
    m = jnp.asarray(np.arange(12) < 7)
    cand = jnp.asarray(rng.uniform(size=(50, 2)))
    new = regret.regret_bound(post, post.X, m, cand, 2.0)
    by_name = regret.regret_bound(post, post.X, mask=m, candidates=cand, beta=2.0)
    with pytest.warns(DeprecationWarning, match="eval_mask"):
        old = regret.regret_bound(post, post.X, eval_mask=m, candidates=cand, beta=2.0)
    chex.assert_trees_all_equal(new, old)
    chex.assert_trees_all_equal(new, by_name)
    mean, var = gp.predict(post, post.X[:7])  # the UCB minimum over the 7 real rows only
    assert float(new.ucb_min) == pytest.approx(float(jnp.min(mean + math.sqrt(2.0) * jnp.sqrt(var))), rel=1e-10)
    full = regret.regret_bound(post, post.X, None, cand, 2.0)
    assert float(full.ucb_min) < float(new.ucb_min)
    with pytest.warns(DeprecationWarning, match="eval_mask"):  # even eval_mask=None is the old name
        chex.assert_trees_all_equal(regret.regret_bound(post, post.X, eval_mask=None, candidates=cand, beta=2.0), full)
    with pytest.raises(TypeError, match="both mask"):
        regret.regret_bound(post, post.X, m, cand, 2.0, eval_mask=m)
    with pytest.raises(TypeError, match="candidates"):
        regret.regret_bound(post, post.X, m)


def test_fit_with_autogluon_priors_is_a_stationary_point_of_their_objective(rng):
    """``FitOptions(prior="autogluon")``: the fitted hyperparameters maximise AutoGluon 0.1's
    MAP objective, written out here in NumPy on the standardised values: the log marginal
    likelihood of a Matérn-5/2 ARD GP with a scalar mean plus LogNormal(0, 1) on the
    covariance scale, Gamma(shape 0.1, rate 1) on the noise variance, Normal(0, 1) on the
    mean and a flat prior on the lengthscales. Its central-difference gradient in (log a, log lengthscales, log
    noise, mean) vanishes at the fit, and does not at the fit with Optuna's priors (a
    different maximiser: the test can fail). Bad ``prior`` values raise, naming it."""
    n, d = 24, 2
    X = rng.uniform(size=(n, d))
    y = np.sin(4 * X[:, 0]) + 0.3 * X[:, 1] ** 2 + 0.05 * rng.normal(size=n)
    z = (y - y.mean()) / y.std()  # the top set is every row (fraction 1, min_points n)

    def objective(theta):
        log_a, log_ls, log_s, m = theta[0], theta[1:1 + d], theta[1 + d], theta[2 + d]
        a, s = np.exp(log_a), np.exp(log_s)
        K = np_matern52(X, X, a, np.exp(log_ls)) + s * np.eye(n)
        L = np.linalg.cholesky(K)
        r = np.linalg.solve(L, z - m)
        lml = -0.5 * r @ r - np.log(np.diag(L)).sum() - 0.5 * n * np.log(2 * np.pi)
        return lml - log_a - 0.5 * log_a ** 2 + (0.1 - 1) * log_s - s - 0.5 * m ** 2

    def gradient_at(prior):
        fb = regret.fit_regret_bound(jax.random.key(0), X, y, candidates=64, fraction=1.0, min_points=n,
                                     options=regret.FitOptions(prior=prior, fit_steps=300, fit_tol=1e-9,
                                                               min_noise=1e-9, refine_steps=0))
        assert bool(fb.ok)
        p = fb.params
        theta = np.concatenate([[float(p.log_amplitude)], np.asarray(p.log_lengthscales),
                                [float(p.log_noise), float(p.mean)]])
        h = 1e-5
        return np.array([(objective(theta + h * e) - objective(theta - h * e)) / (2 * h) for e in np.eye(d + 3)])

    # the fit stops once no raw gradient component exceeds fit_tol; central differences of
    # step 1e-5 on a float64 objective of size ~30 are accurate to ~1e-9; 1e-5 leaves room
    np.testing.assert_allclose(gradient_at("autogluon"), 0.0, atol=1e-5)
    assert np.abs(gradient_at("optuna")).max() > 1e-2
    with pytest.raises(ValueError, match="prior"):
        regret.fit_regret_bound(jax.random.key(0), X, y, options=regret.FitOptions(prior="gpy"))
    with pytest.raises(ValueError, match="prior"):
        regret.replay(jax.random.key(0), X, y, np.ones((n, 3)), options=regret.ReplayOptions(prior=True))


def test_joint_fit_floors_the_noise_variance_as_autogluon_does(rng):
    """``FitOptions(joint=True)``: the amplitude and the mean are fitted jointly and
    ``min_noise`` floors the noise variance itself (AutoGluon 0.1's fit). On noiseless smooth
    data AutoGluon's Gamma(0.1, 1) noise prior drives the noise to that floor, and the joint
    fit is the maximiser of AutoGluon's objective (NumPy, as above) over its box: SciPy's
    L-BFGS-B, run to machine precision from the fit, finds nothing better. The profiled fit
    floors the noise-to-amplitude ratio instead, which couples the noise to the amplitude: it
    ends elsewhere, at a smaller amplitude and a lower value of that objective (the test can
    fail)."""
    n, d = 20, 2
    X = rng.uniform(size=(n, d))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2
    z = (y - y.mean()) / y.std()

    def objective(theta):
        log_a, log_ls, log_s, m = theta[0], theta[1:1 + d], theta[1 + d], theta[2 + d]
        a, s = np.exp(log_a), np.exp(log_s)
        L = np.linalg.cholesky(np_matern52(X, X, a, np.exp(log_ls)) + s * np.eye(n))
        r = np.linalg.solve(L, z - m)
        lml = -0.5 * r @ r - np.log(np.diag(L)).sum() - 0.5 * n * np.log(2 * np.pi)
        return lml - log_a - 0.5 * log_a ** 2 + (0.1 - 1) * log_s - s - 0.5 * m ** 2

    def fit(joint):
        fb = regret.fit_regret_bound(jax.random.key(0), X, y, candidates=64, fraction=1.0, min_points=n,
                                     options=regret.FitOptions(prior="autogluon", fit_steps=400, fit_tol=1e-9,
                                                               min_noise=1e-9, refine_steps=0, joint=joint))
        assert bool(fb.ok)
        p = fb.params
        return np.concatenate([[float(p.log_amplitude)], np.asarray(p.log_lengthscales),
                               [float(p.log_noise), float(p.mean)]])

    theta = fit(True)
    # the floor is 1e-9 plus exp(-36) (the raw box's lower face): log 1e-9 to within 3e-7
    assert abs(theta[1 + d] - np.log(1e-9)) < 1e-6
    box = [(-12, 12)] * (1 + d) + [(np.log(1e-9), 12), (None, None)]
    best = scipy.optimize.minimize(lambda t: -objective(t), theta, method="L-BFGS-B", bounds=box,
                                   options=dict(ftol=1e-15, gtol=1e-10, maxiter=2000))
    # the fit stops at a projected gradient below fit_tol = 1e-9, or at a step whose predicted
    # decrease is within the objective's rounding (16 eps |f|, ~1e-13 here): either leaves a
    # gap to the maximum far below 1e-6
    assert -best.fun - objective(theta) < 1e-6
    theta_p = fit(False)
    assert theta_p[0] < theta[0] - 0.1  # a smaller amplitude
    assert objective(theta_p) < objective(theta) - 0.1  # not AutoGluon's maximiser
    with pytest.raises(TypeError, match="joint"):
        regret.fit_regret_bound(jax.random.key(0), X, y, options=regret.FitOptions(joint=1))
