"""The GP fits keep their iterate in the box of the raw parameters (gp_fit.raw_box).

The objective clips the raw parameters into their box (log lengthscales in [-12, 12], the
warping's log a, log b in [-log 4, log 4], ...), so beyond a face it is flat in that
coordinate; an iterate out there would see a zero gradient and never come back. Every start
below lies beyond a face in at least one coordinate, on data whose optimum lies strictly
inside the box.

Oracle: a NumPy transcription of the joint negative log posterior (Matérn-5/2 on the
Kumaraswamy-warped inputs, the priors of gp_priors.log_prior and warping.log_prior), in the
coordinates psi = (log amplitude, log lengthscale, log noise-to-amplitude ratio, mean, log a,
log b), minimised by SciPy's L-BFGS-B with the box as bounds. The default fit profiles the
amplitude and the mean out of the same objective; its minimiser is the joint one.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.linalg
import scipy.optimize

from jaxstop import gp
from jaxstop._src import gp_fit
from jaxstop._src.gp_core import GPParams

N = 20
MIN_NOISE = 1e-6
TOL, STEPS = 1e-5, 300
LOG4 = math.log(4.0)
# the box as documented (gp.fit and jaxstop._src.warping), written out here on purpose
BOUNDS = [(-12.0, 12.0), (-12.0, 12.0), (math.log(MIN_NOISE), 12.0), (None, None), (-LOG4, LOG4), (-LOG4, LOG4)]


def np_warp(x, a, b):
    """``1 - (1 - x'^a)^b`` with ``x' = eps + (1 - 2 eps) x``, ``eps = 2^-30``, in extended precision."""
    e = np.longdouble(2.0**-30)
    xs = e + (1 - 2 * e) * np.asarray(x, np.longdouble)
    return np.asarray(1 - (1 - xs ** np.longdouble(a)) ** np.longdouble(b), np.float64)


def neg_log_post(psi, X, z):
    """Negative log marginal likelihood minus log prior at ``psi``, d = 1; noise = amplitude * ratio,
    plus the fit's base jitter of 10 eps amplitude on the diagonal."""
    la, lls, lr, m, lwa, lwb = psi
    amp, ls, r = math.exp(la), math.exp(lls), math.exp(lr)
    w = np_warp(X[:, 0], math.exp(lwa), math.exp(lwb))
    s = math.sqrt(5) * np.abs(w[:, None] - w[None, :]) / ls
    K = amp * ((1 + s + s * s / 3) * np.exp(-s) + (r + 10 * np.finfo(float).eps) * np.eye(len(z)))
    c = scipy.linalg.cho_factor(K, lower=True)
    res = z - m
    half_logdet = np.sum(np.log(np.diag(c[0])))
    lml = -0.5 * res @ scipy.linalg.cho_solve(c, res) - half_logdet - 0.5 * len(z) * math.log(2 * math.pi)
    lam = 1 / ls**2
    noise = amp * r
    prior = (-(0.1 / lam + 0.1 * lam) + la - amp + 0.1 * math.log(noise) - 30 * noise
             - sum(t + t * t / (2 * 0.75**2) for t in (lwa, lwb)))
    return -(lml + prior)


def fd_grad(f, psi, h=1e-5):
    return np.array([(f(psi + h * e) - f(psi - h * e)) / (2 * h) for e in np.eye(len(psi))])


def to_psi(p):
    """Fitted parameters (rows of a batch or one fit) as psi."""
    cols = [p.log_amplitude, p.log_lengthscales[..., 0], p.log_noise - p.log_amplitude, p.mean,
            p.log_warp_a[..., 0], p.log_warp_b[..., 0]]
    return np.stack([np.asarray(c, np.float64) for c in cols], axis=-1)


@pytest.fixture(scope="module")
def problem():
    """Data steep near x = 0 (a sine of the warped input x^0.5: a = 0.5, b = 1), its MAP by SciPy, and how far a fit
    stopped by the rule ``max |projected gradient| <= TOL`` may lie from it.

    Near a minimum psi*, psi - psi* = H^-1 g + O(|g|^2), so |psi - psi*| <= ||H^-1|| ||g||_2 to
    first order. The fit stops with at most 4 moving coordinates (lengthscale, ratio, a, b) each
    of gradient <= TOL, and its profiled amplitude and mean have zero joint gradient (their
    closed-form maximisers): ||g||_2 <= 2 TOL (the raw noise coordinate log(r - MIN_NOISE)
    scales the ratio's derivative by r / (r - MIN_NOISE), 1 + 1e-3 here). The reference has
    ||g_ref||_2 of SciPy's stop (3-point differences: error ~1e-10). The factor 2 covers the
    second-order remainder and the finite-difference Hessian (relative error ~1e-6). TOL lies
    above the gradient the fit can still resolve (near 2e-6 here: below it the decrease
    ||g||^2 ||H^-1|| / 2 is lost in the objective's rounding and every trial step is rejected).
    """
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(N, 1))
    y = np.sin(6 * X[:, 0] ** 0.5) + 0.05 * rng.normal(size=N)
    z = (y - y.mean()) / y.std()
    f = lambda psi: neg_log_post(psi, X, z)  # noqa: E731
    ref = scipy.optimize.minimize(f, np.array([0.0, math.log(0.5), math.log(1e-2), 0.0, 0.0, 0.0]),
                                  method="L-BFGS-B", jac="3-point", bounds=BOUNDS,
                                  options=dict(ftol=1e-15, gtol=1e-11, maxiter=2000)).x
    h = 1e-4
    H = np.array([(fd_grad(f, ref + h * e) - fd_grad(f, ref - h * e)) / (2 * h) for e in np.eye(6)])
    H = (H + H.T) / 2
    assert np.all(np.linalg.eigvalsh(H) > 0)
    tol = 2 * np.linalg.norm(np.linalg.inv(H), 2) * (2 * TOL + np.linalg.norm(fd_grad(f, ref)))
    # the premise: the optimum lies strictly inside the box, farther than tol from every face
    for v, (lo, hi) in zip(ref, BOUNDS):
        assert (lo is None or v > lo + 10 * tol) and (hi is None or v < hi - 10 * tol)
    return jnp.asarray(X), jnp.asarray(z), ref, tol


@jax.jit
def fit_one(X, z, init):
    return gp_fit.fit_profiled(X, z, jnp.ones(N, bool), init, MIN_NOISE, steps=STEPS, fit_mean=True, tol=TOL,
                               warping=True)[:2]


def in_box(psi):
    """Whether every coordinate of psi (rows) lies in the box. The ratio's faces are
    MIN_NOISE + exp(-36) and MIN_NOISE + exp(12) (raw log noise in [-36, 12]): the upper one lies
    MIN_NOISE e^-12 (6e-12) above e^12 in log."""
    ok = np.ones(psi.shape[:-1], bool)
    for k, (lo, hi) in enumerate(BOUNDS):
        if lo is not None:
            ok &= psi[..., k] >= lo
        if hi is not None:
            ok &= psi[..., k] <= hi + (1e-11 if k == 2 else 0)
    return ok


@pytest.mark.parametrize("start", [dict(warp_a=math.exp(3.0)), dict(lengthscale=math.exp(14.0)),
                                   dict(warp_b=math.exp(-2.5))], ids=["a>4", "lengthscale>e^12", "b<1/4"])
def test_fit_started_beyond_a_face_reaches_the_interior_map(problem, start):
    """A start beyond a face: the fit moves that coordinate back in, to SciPy's MAP. (With the
    iterate left outside, e.g. a = e^3, the coordinate froze at its face, log a = log 4, while the
    MAP has log a = -0.99; a step that carried b out froze it too.)"""
    X, z, ref, tol = problem
    kw = dict(lengthscale=0.3, warp_a=1.0, warp_b=1.0) | start
    init = gp.params(1.0, [kw["lengthscale"]], 1e-2, warp_a=kw["warp_a"], warp_b=kw["warp_b"])
    p, info = fit_one(X, z, init)
    assert bool(info.ok)
    assert int(info.steps) < STEPS  # stopped by the rule, so the tolerance above applies
    psi = to_psi(p)
    assert in_box(psi)
    np.testing.assert_allclose(psi, ref, rtol=0, atol=tol)
    # the fit's objective is the transcription's at its parameters (one float64 Cholesky each)
    assert float(info.objective) == pytest.approx(neg_log_post(psi, np.asarray(X), np.asarray(z)), rel=1e-9)


def test_every_fitted_parameter_lies_in_its_box_from_random_starts(problem):
    """Starts drawn in and far out of the box (every other start with its log lengthscale in
    +-[12.5, 18], every third its noise-to-amplitude ratio in [e^12.5, e^15], log a, log b in
    [-3, 3]): every returned parameter lies in the box, every fit stops by its rule, and, the
    MAP being unique here, at SciPy's MAP."""
    X, z, ref, tol = problem
    k = 12
    rng = np.random.default_rng(1)
    draw = lambda lo, hi: rng.uniform(lo, hi, k)  # noqa: E731
    far = rng.choice([-1.0, 1.0], k) * draw(12.5, 18)
    ls = np.where(np.arange(k) % 2 == 0, far, draw(-3, 1))
    log_ratio = np.where(np.arange(k) % 3 == 1, draw(12.5, 15), draw(-8, 2))
    log_amp = draw(-2, 2)
    inits = GPParams(*(jnp.asarray(v) for v in (log_amp, ls[:, None], log_amp + log_ratio, np.zeros(k),
                                                   draw(-3, 3)[:, None], draw(-3, 3)[:, None])))
    beyond = lambda v: int(np.sum(np.abs(np.asarray(v)) > LOG4))  # noqa: E731
    assert beyond(inits.log_warp_a) >= 4 and beyond(inits.log_warp_b) >= 4
    fit = jax.jit(jax.vmap(lambda i: gp_fit.fit_profiled(X, z, jnp.ones(N, bool), i, MIN_NOISE, steps=STEPS,
                                                         fit_mean=True, tol=TOL, warping=True)[:2]))
    p, info = fit(inits)
    psi = to_psi(p)
    assert np.all(in_box(psi)) and np.all(np.asarray(info.ok))
    assert np.all(np.asarray(info.steps) < STEPS)
    np.testing.assert_allclose(psi, np.broadcast_to(ref, psi.shape), rtol=0, atol=tol)


def test_optax_fit_leaves_the_face_it_starts_beyond(problem):
    """The optax path projects its iterate too: from a = e^3 Adam ends with a inside the box, at an
    objective below the best one with log a held on its face (SciPy with log a fixed at log 4),
    which is where an iterate frozen beyond the face ends at best."""
    X, z, _, _ = problem
    Xn, zn = np.asarray(X), np.asarray(z)
    init = gp.params(1.0, [0.3], 1e-2, warp_a=math.exp(3.0), warp_b=1.0)
    run = jax.jit(lambda X, z: gp_fit.fit_restarts(None, X, z, jnp.ones(N, bool), init, MIN_NOISE, 0.0, steps=300,
                                                   num_restarts=1, fit_mean=True, use_prior=True,
                                                   optimizer=optax.adam(0.05), warping=True))
    p, info = run(X, z)
    psi = to_psi(p)
    assert bool(info.ok) and in_box(psi) and -LOG4 < psi[4] < LOG4
    held = list(BOUNDS)
    held[4] = (LOG4, LOG4)
    on_face = scipy.optimize.minimize(lambda t: neg_log_post(t, Xn, zn), np.array([0, 0, -3, 0, LOG4, 0.0]),
                                      method="L-BFGS-B", jac="3-point", bounds=held).fun
    ours = neg_log_post(psi, Xn, zn)
    assert ours == pytest.approx(float(info.objective), rel=1e-9)
    # L-BFGS-B stops once a step lowers the objective by less than ftol = 2.2e-9 relative, so its
    # value on the face is within far less than 1e-6 relative of that face's minimum
    assert ours < on_face - 1e-6 * abs(on_face), (ours, on_face)
