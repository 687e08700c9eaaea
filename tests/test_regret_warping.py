"""The regret bound and its replay on a GP with Kumaraswamy input warping.

Oracles: the dense float64 NumPy GP of tests/_oracles.py on the warped inputs (Eq. 8 by
hand from the fitted hyperparameters), the gradient of the warped fit's objective
recomputed at the fit's result, a dense grid of the LCB (1-D), and the same calls with the
warping off (bit for bit).
"""

import math

import chex
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest

from _compiles import count_compilations
from _oracles import np_matern52, np_posterior
from jaxstop import gp, regret
from jaxstop._src import gp_core, gp_fit, linalg, regret_bound, termination, warping

EPS = np.finfo(np.float64).eps
N, D = 24, 2
A_TRUE, B_TRUE = np.array([0.5, 1.0]), np.array([2.0, 1.0])


def rounding_reach(W, z, pts, p, beta):
    """Pointwise reach of rounding on ``m -/+ sqrt(beta v)`` at the warped points ``pts``
    between two float64 programs that factorise the same Gram matrix of the warped
    inputs ``W``: each factorises K + E with ||E|| <= 4 n eps ||K|| (backward stability),
    which moves alpha = K^-1 (z - m) by r ||alpha||, r = 4 n kappa(K) eps, a mean by
    r ||k|| ||alpha|| and a variance by r amp (its square root by
    min(sqrt(r amp), r amp / (2 sd))); two programs: r doubled."""
    amp, ls, noise, mean = float(p.amplitude), np.asarray(p.lengthscales), float(p.noise), float(p.mean)
    K = np_matern52(W, W, amp, ls) + noise * np.eye(len(W))
    r = 2 * 4 * len(W) * np.linalg.cond(K) * EPS
    alpha = np.linalg.solve(K, z - mean)
    kn = np.linalg.norm(np_matern52(pts, W, amp, ls), axis=1)
    _, v = np_posterior(W, z, amp, ls, noise, mean)(pts)
    return r * kn * np.linalg.norm(alpha) + math.sqrt(beta) * np.minimum(np.sqrt(r * amp),
                                                                         r * amp / (2 * np.sqrt(v) + 1e-300))


@pytest.fixture(scope="module")
def warped_study():
    """A study that is smooth in the warped inputs (``a = (0.5, 1)``, ``b = (2, 1)``):
    steep in ``x_0`` near 0, where a stationary GP on ``x`` fits it badly."""
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(N, D))
    xs = 2.0**-30 + (1 - 2.0**-29) * X
    W = 1 - (1 - xs**A_TRUE) ** B_TRUE
    y = np.sin(6 * W[:, 0]) + np.cos(3 * W[:, 1]) + 0.01 * rng.normal(size=N)
    return X, y


def test_bound_with_warping_is_eq8_of_the_warped_fit(warped_study):
    """fit_regret_bound(warping=True) = a warped ML-II fit on the top set (the gradient of
    the warped objective, all coordinates, is within the fit's tolerance at its parameters,
    recomputed in another program) + Eq. (8) of the GP on the warped inputs, recomputed by
    hand with the dense NumPy GP."""
    X, y = warped_study
    rng = np.random.default_rng(4)
    cand = rng.uniform(size=(64, D))
    # The gradient a fit can reach is limited by its objective's rounding: this fit's noise
    # ratio (~1e-5) makes K ill-conditioned, and near the optimum the computed objective
    # varies by ~1e-10 between trial points whose predicted decrease is 1e-12. From
    # max |g| ~ 1e-4 on (predicted decreases ~1e-10) trials are accepted or rejected on
    # rounding and the fit stops as stalled, with max |g| above 1e-5 on some CPUs (a correct
    # stop, but not the stopping test checked here). While max |g| > 1e-3 the steps predict
    # decreases of at least ~1e-8, 100x that rounding: the gradient test stops this fit.
    tol = 1e-3
    opts = regret.FitOptions(warping=True, fit_steps=100, fit_tol=tol, refine_steps=0)
    fb = regret.fit_regret_bound(jax.random.key(0), X, y, candidates=cand, min_points=N, options=opts)
    assert bool(fb.ok) and fb.params.warped
    assert fb.inv_hessian.shape == (gp_fit.raw_size(D, True),) * 2 == (3 * D + 3,) * 2
    assert int(fb.fit_info.steps) < 100  # converged: max |g| <= fit_tol at the accepted point
    p = fb.params
    assert float(p.warp_a[0]) < 0.7  # the steep dimension is warped (the data's a_0 = 0.5)
    # strictly inside the box [0.25, 4] of a and b, where the objective is smooth and
    # its gradient is the stopping test's
    logs = np.concatenate([p.log_warp_a, p.log_warp_b])
    assert np.all(np.abs(logs) < warping.LOG_BOX - 1e-3), logs

    # (1) the warped fit's stopping test, recomputed at its result in another program: the
    # gradient of the profiled objective in the raw coordinates (log a, log b included)
    z = (y - y.mean()) / y.std()
    Xj, zj, mask = jnp.asarray(X), jnp.asarray(z), jnp.ones(N, bool)
    raw = gp_fit.to_raw(p._replace(log_noise=p.log_noise - p.log_amplitude), 1e-6)
    theta, unravel = jax.flatten_util.ravel_pytree(raw)
    assert theta.shape == (3 * D + 3,)
    f, g = jax.value_and_grad(lambda t: gp_fit.objective_profiled_scale(
        unravel(t), Xj, zj, mask, 1e-6, True, True, p.mean)[0])(theta)
    W = np.asarray(gp_core.warp_inputs(p, Xj))
    K = np_matern52(W, W, float(p.amplitude), np.asarray(p.lengthscales)) + float(p.noise) * np.eye(N)
    # the Cholesky of K is exact for K + E, ||E|| <= 4 n eps ||K||: it moves each term of the
    # gradient (alpha' dK alpha / 2, tr(K^-1 dK) / 2, ||dK|| <= 2 ||K||) by about kappa n eps
    # times its size; two programs
    g_round = 2 * 2 * 4 * N * EPS * np.linalg.cond(K) * (abs(float(f)) + N)
    assert float(jnp.max(jnp.abs(g))) <= tol + g_round
    # the profiled amplitude and mean are the fit's (the same closed forms)
    np.testing.assert_allclose(float(p.mean), np.sum(np.linalg.solve(K, z)) / np.sum(np.linalg.solve(K, np.ones(N))),
                               rtol=1e-8)

    # (2) Eq. (8) by hand: the dense NumPy GP on the warped inputs, beta of the fitted points
    beta = float(regret.beta(float(N), float(D)))
    assert float(fb.beta) == pytest.approx(beta, rel=1e-14)
    Wc = np.asarray(gp_core.warp_inputs(p, jnp.asarray(cand)))
    pred = np_posterior(W, z, float(p.amplitude), np.asarray(p.lengthscales), float(p.noise), float(p.mean))
    mu_e, v_e = pred(W)
    mu_c, v_c = pred(Wc)
    sb = math.sqrt(beta)
    ucb = mu_e + sb * np.sqrt(v_e)
    lcb = np.concatenate([mu_c - sb * np.sqrt(v_c), mu_e - sb * np.sqrt(v_e)])
    reach = rounding_reach(W, z, np.concatenate([Wc, W]), p, beta)
    want_bound = (ucb.min() - lcb.min()) * y.std()
    atol = (reach[64:].max() + reach.max()) * y.std()
    np.testing.assert_allclose(float(fb.bound.bound), want_bound, rtol=0, atol=atol)
    np.testing.assert_allclose(float(fb.bound.ucb_min), ucb.min() * y.std() + y.mean(), rtol=0,
                               atol=reach[64:].max() * y.std() + 4 * EPS * abs(y.mean()))
    # and the bound's posterior is gp.posterior's on the raw inputs (same program as gp.predict)
    post = gp.posterior(p, Xj, zj)
    mu, var = gp.predict(post, jnp.asarray(cand))
    np.testing.assert_allclose(mu, mu_c, rtol=0, atol=reach[:64].max() + 1e-300)


def _lcb_1d_problem():
    """A 1-D warped posterior (``a = 0.25``: ``w(x) ~ x^(1/4)``, steep near 0) whose LCB
    minimum lies at small ``x``, and a few coarse candidates away from it."""
    p = gp.params(1.0, [0.15], 1e-4, 0.0, warp_a=[0.25], warp_b=[1.0])
    w_train = np.array([0.1, 0.3, 0.45, 0.6, 0.8, 0.95])
    X = np.asarray(warping.unwarp(jnp.asarray(w_train[:, None]), p.log_warp_a, p.log_warp_b))
    y = np.array([0.8, -0.2, -1.0, -0.3, 0.5, 1.0])
    post = gp.posterior(p, jnp.asarray(X), jnp.asarray(y))
    return p, X, y, post


def test_refine_on_a_warped_posterior_reaches_the_dense_grid_minimum():
    """The LCB refinement descends in the warped coordinates: from coarse starts it reaches
    the minimum of the LCB over a dense grid of the unit interval. A descent on gradients
    taken at the raw inputs (against the warped training inputs) points the wrong way here."""
    p, X, y, post = _lcb_1d_problem()
    beta = 2.0
    sb = math.sqrt(beta)
    # the dense grid, uniform in the warped coordinate (where the LCB is smooth), as inputs
    h = 1e-5
    u = np.arange(0, 1 + h / 2, h)
    xg = np.asarray(warping.unwarp(jnp.asarray(u[:, None]), p.log_warp_a, p.log_warp_b))
    lcb_g = np.asarray(regret.confidence_bounds(post, jnp.asarray(xg), beta)[0])
    i = int(np.argmin(lcb_g))
    assert 0.001 < xg[i, 0] < 0.3  # the minimum is in the steep region of x
    # coarse starts: the grid points of x that bracket nothing close to the minimum
    starts = jnp.asarray([[0.5], [0.9], [float(X[3, 0])]])
    x_r, f_r = regret_bound.refine(post, jnp.asarray(sb), starts, jnp.ones(1, bool), steps=60)
    lcb_starts = np.asarray(regret.confidence_bounds(post, starts, beta)[0])
    assert float(jnp.min(f_r)) < lcb_starts.min() - 0.1  # it travelled to a lower basin
    # Tolerance: the grid (spacing h in u) misses the minimum by at most f''_u (h/2)^2 / 2
    # (f''_u from the grid's second differences, where the LCB is smooth), and each LCB
    # value carries the rounding of its prediction (rounding_reach, two programs).
    curv = np.max(np.abs(np.diff(lcb_g, 2))[max(i - 50, 0):i + 50]) / h**2
    Wt = np.asarray(post.X)
    reach = rounding_reach(Wt, y, np.array([[u[i]]]), p, beta).max()
    tol = curv * (h / 2) ** 2 / 2 + 2 * reach
    assert abs(float(jnp.min(f_r)) - lcb_g[i]) <= tol, (float(jnp.min(f_r)), lcb_g[i], tol)
    # the values are the LCB of the raw-input posterior at the returned inputs
    np.testing.assert_allclose(f_r, regret.confidence_bounds(post, x_r, beta)[0], rtol=0, atol=1e-12)
    # through regret_bound: the refined domain minimum is that minimum too
    rb = regret.regret_bound(post, jnp.asarray(X), None, starts, beta, refine_steps=60, refine_starts=3)
    assert float(rb.lcb_min) <= lcb_g[i] + tol
    assert float(rb.lcb_min) <= float(rb.lcb_min_grid)


def test_refine_in_raw_coordinates_would_fail_here():
    """The case above is one where the raw-coordinate descent goes wrong: the LCB's gradient
    taken at a raw input against the warped training inputs has the wrong sign at a start
    (checked against central differences of the true LCB in x)."""
    p, X, y, post = _lcb_1d_problem()
    sb = math.sqrt(2.0)
    Kinv = linalg.inv_from_tri_inv(post.chol_inv)
    x = jnp.asarray([[0.5]])
    _, g_raw = regret_bound.lcb_value_and_grad(post, Kinv, sb, x)  # raw x in kernel coordinates: wrong
    hd = 1e-6
    lo, hi = (regret.confidence_bounds(post, x + s, 2.0)[0] for s in (-hd, hd))
    fd = float((hi - lo)[0]) / (2 * hd)
    assert np.sign(float(g_raw[0, 0])) != np.sign(fd)
    # in warped coordinates the same function is the gradient in u = w(x) (chain rule)
    u = gp_core.warp_inputs(p, x)
    _, g_u = regret_bound.lcb_value_and_grad(post, Kinv, sb, u)
    dw = jax.grad(lambda t: warping.warp(t, p.log_warp_a, p.log_warp_b)[0, 0])(x)
    np.testing.assert_allclose(float(g_u[0, 0] * dw[0, 0]), fd, rtol=1e-5)


def test_warping_off_is_the_plain_fit_bit_for_bit(warped_study):
    X, y = warped_study
    key = jax.random.key(1)
    plain = regret.fit_regret_bound(key, X, y, candidates=32, min_points=10,
                                    options=regret.FitOptions(fit_steps=8, refine_steps=5))
    off = regret.fit_regret_bound(key, X, y, candidates=32, min_points=10,
                                  options=regret.FitOptions(fit_steps=8, refine_steps=5, warping=False))
    chex.assert_trees_all_equal(plain, off)
    assert not plain.params.warped and plain.inv_hessian.shape == (D + 3, D + 3)
    # the internal default configuration is the plain one as well
    cfg = termination.FitConfig(10, 0.5, 10, "fitted", 8, True, 1e-6, 32, 5, 8, 1024, 1e-2)
    assert cfg.warping is False
    # the warm starts of one setting are checked against the other
    with pytest.raises(ValueError, match="init_inv_hessian must have shape"):
        regret.fit_regret_bound(key, X, y, init_inv_hessian=plain.inv_hessian,
                                options=regret.FitOptions(warping=True))
    warped_init = termination.default_params(D, jnp.ones(D, bool), jnp.float64, warping=True)
    with pytest.raises(ValueError, match="warping is False"):
        regret.fit_regret_bound(key, X, y, init=warped_init)
    with pytest.raises(TypeError, match="warping must be a bool"):
        regret.fit_regret_bound(key, X, y, options=regret.FitOptions(warping="yes"))


def test_padded_dimensions_start_at_the_warping_prior_mode():
    dm = jnp.asarray([True, False, True])
    p = termination.default_params(3, dm, jnp.float64, warping=True)
    np.testing.assert_array_equal(p.log_warp_a, [0.0, warping.PRIOR_MODE, 0.0])
    np.testing.assert_array_equal(p.log_warp_b, [0.0, warping.PRIOR_MODE, 0.0])
    # where the prior's gradient in log a, log b is 0 (its maximiser)
    g = jax.grad(lambda t: warping.log_prior(t, t))(jnp.asarray([warping.PRIOR_MODE]))
    assert float(g[0]) == 0.0
    np.testing.assert_array_equal(termination.default_params(3, dm, jnp.float64).log_lengthscales,
                                  p.log_lengthscales)


def _trace(seed, T=32, d=2, k=5):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(T, d))
    xs = 2.0**-30 + (1 - 2.0**-29) * X
    W = 1 - (1 - xs ** A_TRUE) ** B_TRUE
    f = np.sin(6 * W[:, 0]) + 0.5 * W[:, 1]
    folds = f[:, None] + 0.1 * rng.normal(size=(T, k))
    return X, folds.mean(1), folds


def test_authors_replay_runs_warped_and_compiles_once():
    """convention="authors" with warping=True fits warped GPs, every computed row is usable,
    and a second trace of the same shapes compiles nothing."""
    opts = regret.ReplayOptions(candidates=64, num_segments=1, warping=True)
    X, values, folds = _trace(0)
    key = jax.random.key(2)
    res = regret.replay(key, X, values, folds, convention="authors", min_points=10, options=opts)
    assert res.params.warped and res.params.log_warp_a.shape == (2,)
    comp = np.asarray(res.computed)
    assert comp.sum() == 32 - 20  # rows 20..31 (lag 1: row t uses t evaluations)
    assert np.all(np.asarray(res.ok)[comp])
    assert np.all(np.isfinite(np.asarray(res.bound)[comp])) and np.all(np.asarray(res.bound)[comp] >= 0)
    assert np.all(np.isfinite(np.asarray(res.ei)[comp])) and np.all(np.isfinite(np.asarray(res.pi)[comp]))
    X2, values2, folds2 = _trace(1)
    with count_compilations() as compiled:
        res2 = regret.replay(jax.random.key(3), X2, values2, folds2, convention="authors", min_points=10,
                             options=opts)
    assert compiled.total() == 0, compiled
    assert np.all(np.asarray(res2.ok)[np.asarray(res2.computed)])
    assert not any(regret.CONVENTIONS[c]["warping"] for c in ("paper", "authors", "optuna"))
    with pytest.raises(TypeError, match="warping must be a bool"):
        regret.replay(key, X, values, folds, options=opts._replace(warping=1))


def test_auto_termination_policy_with_warping():
    """The policy's state carries a warped GP from init on (same pytree structure along
    the run: one compiled step) and its steps run usable warped fits."""
    from jaxstop import sim
    from jaxstop.policies.auto_termination import auto_termination_bo

    x = jnp.linspace(0, 1, 16)[:, None]
    loss = np.sin(6 * (1 - (1 - np.asarray(x[:, 0]) ** 0.5) ** 2))  # smooth in w(x), a = 0.5, b = 2
    table = sim.CurveTable(jnp.stack([jnp.asarray(loss) + 0.1, jnp.asarray(loss)], 1), configs=x)
    policy = auto_termination_bo(max_budget=2, max_evals=12, candidates=x, threshold=1e-9, num_init=3,
                                 min_iterations=5, min_points=5, fit_steps=6, warping=True)
    state = policy.init(jax.random.key(0))
    assert state.gp_params.warped and state.gp_inv_hessian.shape == (gp_fit.raw_size(1, True),) * 2
    trace = sim.run(policy, table, jax.random.key(0), max_jobs=12)
    assert int(trace.num_jobs) == 12
    active = np.asarray(trace.active)
    assert np.all(np.asarray(trace.infos.ok)[active])  # every warped fit and bound usable
    bound = np.asarray(trace.infos.bound)[active]
    assert np.all(np.isfinite(bound) & (bound >= 0))
    with pytest.raises(TypeError, match="warping must be a bool"):
        auto_termination_bo(max_budget=2, max_evals=12, candidates=x, threshold=0.1, warping="on")
