"""Kumaraswamy input warping of the GP (jaxstop.gp with warp_a / warp_b, fit(warping=True)).

Oracles: a literal NumPy transcription of the warping ``1 - (1 - x'^a)^b`` with
``x' = eps + (1 - 2 eps) x`` and of the Matérn-5/2 kernel, posterior and likelihood
(tests/_oracles.py) on the warped inputs; closed-form derivatives of the warping; central
finite differences of the NumPy likelihood.
"""

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jaxstop import gp
from jaxstop._src import gp_core, gp_fit, warping
from jaxstop._src.status import Reason
from tests._compiles import count_compilations
from tests._oracles import np_lml, np_matern52, np_posterior

N, D = 30, 2
A_TRUE, B_TRUE = np.array([0.35, 1.0]), np.array([3.0, 1.0])


def np_warp(X, a, b):
    """The warping as its definition reads (float64 squeeze ``eps = 2^-30``), evaluated in
    extended precision: in float64 ``1 - x'^a`` cancels near ``x = 1`` (relative error
    ``2^-53 / (1 - x'^a)``, up to 3e-8 at the box's corner ``a = 4``), in NumPy's long
    double (64-bit significand on x86-64) 2048 times less, below 1e-13 relative on ``w``."""
    e = np.longdouble(2.0**-30)
    L = np.longdouble
    xs = e + (1 - 2 * e) * np.asarray(X, L)
    return np.asarray(1 - (1 - xs ** np.asarray(a, L)) ** np.asarray(b, L), np.float64)


def warped_params(a, b, amp=1.3, ls=(0.4, 0.7), noise=1e-2, mean=0.1):
    return gp.params(amp, list(ls), noise, mean, warp_a=a, warp_b=b)


@pytest.fixture(scope="module")
def data():
    """Inputs and standardised values of a function that is smooth in the warped inputs
    ``w(x)`` (``a = (0.35, 1)``, ``b = (3, 1)``) and steep in ``x_0`` near 0."""
    rng = np.random.default_rng(7)
    X = rng.uniform(size=(N, D))
    W = np_warp(X, A_TRUE, B_TRUE)
    y = np.sin(7 * W[:, 0]) + 0.5 * W[:, 1] + 0.01 * rng.normal(size=N)
    return X, (y - y.mean()) / y.std()


@pytest.fixture(scope="module")
def fits(data):
    """The plain and the warped fit of ``data`` (compiled once for the module)."""
    X, z = data
    return gp.fit(X, z), gp.fit(X, z, warping=True)


def test_warp_matches_its_definition_and_derivatives(rng):
    X = np.concatenate([[[0.0, 1.0], [1.0, 0.0]], rng.uniform(size=(6, 2))])
    a, b = np.array([0.25, 4.0]), np.array([4.0, 0.25])  # the corners of the fit's box
    la, lb = jnp.log(a), jnp.log(b)
    W = warping.warp(jnp.asarray(X), la, lb)
    np.testing.assert_allclose(W, np_warp(X, a, b), rtol=1e-12, atol=1e-15)
    # d w / d log a = a b (1 - x'^a)^(b - 1) x'^a log x', d w / d log b = -b (1 - x'^a)^b log(1 - x'^a)
    L = np.longdouble  # extended precision, as in np_warp
    xs = L(2.0**-30) + (1 - L(2.0**-29)) * np.asarray(X, L)
    a_, b_ = np.asarray(a, L), np.asarray(b, L)
    dwa = np.asarray(a_ * b_ * (1 - xs**a_) ** (b_ - 1) * xs**a_ * np.log(xs), np.float64)
    dwb = np.asarray(-b_ * (1 - xs**a_) ** b_ * np.log(1 - xs**a_), np.float64)
    per_row = jax.jit(jax.vmap(jax.grad(lambda x, s, t: jnp.sum(warping.warp(x, s, t)), argnums=(1, 2)),
                               (0, None, None)))
    ga, gb = per_row(jnp.asarray(X), la, lb)
    # rtol: a few ulps of each factor, amplified by the cancellation-free forms only
    np.testing.assert_allclose(ga, dwa, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(gb, dwb, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(warping.unwarp(W, la, lb), X, atol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_identity_warping_is_the_squeeze(dtype):
    # a = b = 1: w(x) = x' = eps + (1 - 2 eps) x exactly in exact arithmetic; in floating point
    # -expm1(log(-expm1(log x'))) loses a few ulps of 1 (absolute) at most
    x = jnp.linspace(0, 1, 101, dtype=dtype)[:, None]
    w = warping.warp(x, jnp.zeros(1, dtype), jnp.zeros(1, dtype))
    e = 2.0**-30 if dtype == jnp.float64 else 2.0**-20
    ulp = float(jnp.finfo(dtype).eps)
    assert w.dtype == dtype
    np.testing.assert_allclose(w, np.asarray(e + (1 - 2 * e) * np.asarray(x, np.float64)), rtol=0, atol=8 * ulp)
    assert float(jnp.max(jnp.abs(w - x))) <= e + 8 * ulp


def test_warped_kernel_and_posterior_match_numpy(rng):
    a, b = np.array([0.5, 2.0]), np.array([1.5, 0.7])
    p = warped_params(a, b)
    X, Xq = rng.uniform(size=(9, 2)), rng.uniform(size=(5, 2))
    y = rng.normal(size=9)
    W, Wq = np_warp(X, a, b), np_warp(Xq, a, b)
    amp, ls = 1.3, np.array([0.4, 0.7])
    np.testing.assert_allclose(gp.kernel(p)(jnp.asarray(Xq), jnp.asarray(X)), np_matern52(Wq, W, amp, ls),
                               rtol=1e-12)
    np.testing.assert_allclose(gp.warp(p, X), W, rtol=1e-12, atol=1e-15)
    post = gp.posterior(p, X, y)
    assert bool(post.ok) and post.params.warped
    np.testing.assert_allclose(post.X, W, rtol=1e-12, atol=1e-15)
    mean, var = gp.predict(post, Xq)
    m_np, v_np = np_posterior(W, y, amp, ls, 1e-2, mean=0.1, jitter=float(post.jitter))(Wq)
    np.testing.assert_allclose(mean, m_np, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(var, v_np, rtol=1e-9, atol=1e-12)


def test_likelihood_is_the_plain_likelihood_of_the_warped_inputs(rng):
    a, b = np.array([0.3, 2.5]), np.array([2.0, 0.5])
    p = warped_params(a, b)
    X, y = rng.uniform(size=(12, 2)), rng.normal(size=12)
    W = np_warp(X, a, b)
    lml = float(gp.log_marginal_likelihood(p, X, y))
    plain = gp_core.unwarped(p)
    # Both sides factor the same Gram matrix up to the warping's rounding (~1e-16 in W):
    # agreement to ~n kappa eps relative, far below 1e-9 for this well-conditioned K.
    np.testing.assert_allclose(lml, float(gp.log_marginal_likelihood(plain, W, y)), rtol=1e-9)
    np.testing.assert_allclose(lml, np_lml(W, y, 1.3, np.array([0.4, 0.7]), 1e-2 + 10 * 2.0**-52 * 1.3, 0.1),
                               rtol=1e-9)
    # its gradient in log a, log b (through the inputs' cotangent of the custom VJP)
    # against central differences of the NumPy likelihood: error h^2 f''' / 6 + eps f / h
    g = jax.jit(jax.grad(gp_fit.log_likelihood))(p, jnp.asarray(X), jnp.asarray(y), jnp.ones(12, bool))
    h = 1e-5
    for field, k in (("log_warp_a", 0), ("log_warp_a", 1), ("log_warp_b", 0), ("log_warp_b", 1)):
        vals = []
        for s in (h, -h):
            la, lb = np.log(a), np.log(b)
            (la if field == "log_warp_a" else lb)[k] += s
            vals.append(np_lml(np_warp(X, np.exp(la), np.exp(lb)), y, 1.3, np.array([0.4, 0.7]),
                               1e-2 + 10 * 2.0**-52 * 1.3, 0.1))
        np.testing.assert_allclose(getattr(g, field)[k], (vals[0] - vals[1]) / (2 * h), rtol=1e-6, atol=1e-7)


def test_identity_warping_likelihood_matches_no_warping(rng):
    X, y = rng.uniform(size=(12, 2)), rng.normal(size=12)
    p = gp.params(1.0, [0.3, 0.6], 1e-3)
    pw = gp.params(1.0, [0.3, 0.6], 1e-3, warp_a=1.0, warp_b=1.0)
    lml, lml_w = float(gp.log_marginal_likelihood(p, X, y)), float(gp.log_marginal_likelihood(pw, X, y))
    # a = b = 1 moves every input by at most eps = 2^-30 (the squeeze) plus 8 ulps
    # (test_identity_warping_is_the_squeeze): |dlml| <= sum_ik |d lml / d x_ik| * that,
    # with the gradient's own rounding covered by a factor 2.
    grad_x = jax.jit(jax.grad(gp_fit.lml, argnums=1))(p, jnp.asarray(X), jnp.asarray(y), jnp.ones(12, bool))
    g1 = 2 * float(jnp.sum(jnp.abs(grad_x)))
    assert abs(lml_w - lml) <= g1 * (2.0**-30 + 8 * 2.0**-52) + 1e-12 * abs(lml)
    # against the plain likelihood of the squeezed inputs: only the 8 ulps remain
    squeezed = 2.0**-30 + (1 - 2.0**-29) * X
    lml_s = float(gp.log_marginal_likelihood(p, squeezed, y))
    assert abs(lml_w - lml_s) <= g1 * 8 * 2.0**-52 + 1e-12 * abs(lml)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_gradients_finite_at_the_cube_faces(dtype):
    X = jnp.asarray([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [0.5, 0.25]], dtype)
    y = jnp.asarray([0.3, -1.0, 0.5, 0.2, -0.4], dtype)
    mask = jnp.ones(5, bool)
    min_noise = jnp.asarray(1e-6, dtype)

    @jax.jit
    def grads(p):
        g_lml = jax.grad(gp_fit.log_likelihood, argnums=(0, 1))(p, X, y, mask)
        # the fit's objective (profiled amplitude and mean) too
        raw = gp_fit.to_raw(p._replace(log_noise=p.log_noise - p.log_amplitude), min_noise)
        g_obj = jax.grad(lambda r: gp_fit.objective_profiled_scale(r, X, y, mask, min_noise, True, True,
                                                                   jnp.zeros((), dtype))[0])(raw)
        return g_lml, g_obj

    for a, b in ((0.25, 4.0), (4.0, 0.25), (1.0, 1.0)):
        p = gp.params(1.0, [0.5, 0.5], 1e-2, warp_a=a, warp_b=b, dtype=dtype)
        (g_p, g_x), g_obj = grads(p)
        assert all(bool(jnp.all(jnp.isfinite(v))) for v in jax.tree_util.tree_leaves((g_p, g_x, g_obj)))
        assert g_p.log_warp_a.dtype == dtype and g_obj.log_warp_b.dtype == dtype
        assert float(jnp.max(jnp.abs(g_p.log_warp_a))) > 0  # the warping does move the likelihood


def test_fit_objective_gradient_matches_finite_differences(data):
    X, z = (jnp.asarray(v) for v in data)
    mask = jnp.ones(N, bool)
    p = gp.params(1.0, [0.4, 0.6], 0.02, warp_a=[0.6, 1.4], warp_b=[1.8, 0.8])
    raw = gp_fit.to_raw(p._replace(log_noise=p.log_noise - p.log_amplitude), jnp.asarray(1e-6))

    @jax.jit
    def f(r):
        return gp_fit.objective_profiled_scale(r, X, z, mask, jnp.asarray(1e-6), True, True, jnp.zeros(()))[0]

    g = jax.jit(jax.grad(f))(raw)
    h = 1e-5  # central differences: error ~ h^2 |f'''| + eps |f| / h, about 1e-9 here
    for field in ("log_warp_a", "log_warp_b"):
        for k in range(D):
            step = getattr(raw, field).at[k].add(h)
            back = getattr(raw, field).at[k].add(-h)
            fd = (f(raw._replace(**{field: step})) - f(raw._replace(**{field: back}))) / (2 * h)
            np.testing.assert_allclose(getattr(g, field)[k], fd, rtol=1e-5, atol=1e-6)


def test_fit_on_warped_data_beats_no_warping(data, fits):
    X, z = data
    (p0, i0), (p1, i1) = fits
    assert bool(i0.ok) and bool(i1.ok)
    assert not p0.warped and p1.warped and p1.warp_a.shape == (D,)
    assert bool(jnp.all((p1.warp_a >= 0.25 - 1e-12) & (p1.warp_a <= 4 + 1e-12)))
    lml0, lml1 = float(gp.log_marginal_likelihood(p0, X, z)), float(gp.log_marginal_likelihood(p1, X, z))
    # the warped model holds the data's warping (a_0 = 0.35, b_0 = 3); the plain one must
    # spend a short lengthscale on the steep region: a large likelihood ratio
    assert lml1 > lml0 + 10, (lml0, lml1)
    # steep near x_0 = 0: a_0 < 1 (the data's 0.35), within the prior's pull
    assert float(p1.warp_a[0]) < 0.6


def test_warm_start_of_a_warped_fit(data, fits):
    X, z = data
    _, (p1, i1) = fits
    with count_compilations() as compiled:
        p2, i2 = gp.fit(X, z, warping=True, init=p1)
    assert compiled["fit_restarts"] == 0  # same shapes and static settings: no recompilation
    assert bool(i2.ok) and int(i2.steps) < int(i1.steps)
    assert float(i2.objective) <= float(i1.objective)
    with pytest.raises(ValueError, match="warping is False"):
        gp.fit(X, z, init=p1)
    # a plain warm start into a warped fit starts from the identity warping
    p3, i3 = gp.fit(X, z, warping=True, init=gp_core.unwarped(p1))
    assert bool(i3.ok) and p3.warped


def test_padded_rows_are_inert(data, fits):
    X, z = (np.array(v) for v in data)
    mask = np.arange(N) < N - 6
    garbage = X.copy(), z.copy()
    garbage[0][~mask] = np.nan
    garbage[1][~mask] = 1e30
    zeros = np.where(mask[:, None], X, 0), np.where(mask, z, 0)
    # the shapes and settings of the module's fits: no new compilation
    pa, ia = gp.fit(*garbage, mask, warping=True)
    pb, ib = gp.fit(*zeros, mask, warping=True)
    assert bool(ia.ok) and int(ia.num_valid) == N - 6
    for u, v in zip(jax.tree_util.tree_leaves((pa, ia)), jax.tree_util.tree_leaves((pb, ib))):
        np.testing.assert_array_equal(u, v)  # the same program: bit for bit
    # likelihood and its warping gradient: padded (NaN) against compact, float64 rounding
    p = warped_params([0.5, 2.0], [1.5, 0.7])
    ll = jax.value_and_grad(gp_fit.log_likelihood)
    ll = jax.jit(ll)
    va, ga = ll(p, jnp.asarray(garbage[0]), jnp.asarray(garbage[1]), jnp.asarray(mask))
    vc, gc = ll(p, jnp.asarray(X[mask]), jnp.asarray(z[mask]), jnp.ones(int(mask.sum()), bool))
    np.testing.assert_allclose(va, vc, rtol=1e-10)
    np.testing.assert_allclose(ga.log_warp_a, gc.log_warp_a, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ga.log_warp_b, gc.log_warp_b, rtol=1e-8, atol=1e-10)


def test_float32_warped_fit(data):
    X, z = (jnp.asarray(v, jnp.float32) for v in data)
    p, info = gp.fit(X, z, warping=True)
    assert bool(info.ok)
    assert p.log_warp_a.dtype == jnp.float32 and p.log_warp_b.dtype == jnp.float32
    mean, var = gp.predict(gp.posterior(p, X, z), X[:5])
    assert mean.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(mean) & jnp.isfinite(var)))


def test_status_and_validation(data):
    X, y = jnp.asarray([[0.2, 0.3], [0.7, 0.9]]), jnp.asarray([0.1, -0.2])
    p = warped_params([1.0, 1.0], [1.0, 1.0])
    bad = p._replace(log_warp_b=p.log_warp_b.at[0].set(jnp.nan))
    post = jax.jit(gp_core.posterior)(bad, X, y, jnp.ones(2, bool))
    assert not bool(post.ok) and int(post.reason) == int(Reason.BAD_INPUT)
    assert not bool(jnp.any(jax.jit(gp.predict)(post, X).ok))
    # a NaN warping in the start of a fit (the program of the module's fits): status
    _, info = gp.fit(*data, init=bad, warping=True)
    assert not bool(info.ok) and int(info.reason) == int(Reason.BAD_INPUT)
    with pytest.raises(ValueError, match="warp_a and warp_b"):
        gp.params(1.0, [0.5, 0.5], 1e-2, warp_a=1.0)
    with pytest.raises(ValueError, match="warp_b"):
        gp.params(1.0, [0.5, 0.5], 1e-2, warp_a=1.0, warp_b=[1.0, -1.0])
    with pytest.raises(ValueError, match="log_warp_b"):
        gp.posterior(p._replace(log_warp_b=None), X, y)
    with pytest.raises(TypeError, match="log_warp_a"):
        gp.posterior(p._replace(log_warp_a=p.log_warp_a.astype(jnp.float16)), X, y)


def test_log_prior_adds_autogluons_lognormal():
    # LogNormal(0, 0.75) density of every a and b (scipy), differences cancel its constant
    a1, b1, a2, b2 = [0.3, 2.0], [1.0, 0.5], [1.0, 1.0], [3.0, 0.8]
    lp = scipy.stats.lognorm(s=0.75).logpdf
    want = np.sum(lp(a1) + lp(b1)) - np.sum(lp(a2) + lp(b2))
    got = gp.log_prior(warped_params(a1, b1)) - gp.log_prior(warped_params(a2, b2))
    np.testing.assert_allclose(got, want, rtol=1e-12)
    flat, _ = jax.flatten_util.ravel_pytree(gp_fit.to_raw(warped_params(a1, b1), 1e-6))
    assert flat.shape == (gp_fit.raw_size(D, warping=True),)


def test_unwarped_params_keep_their_structure(rng):
    p = gp.params(1.0, [0.5, 0.5], 1e-2)
    old = gp.GPParams(p.log_amplitude, p.log_lengthscales, p.log_noise, p.mean)
    assert not p.warped and p.warp_a is None
    assert len(jax.tree_util.tree_leaves(p)) == 4
    assert jax.tree_util.tree_structure(p) == jax.tree_util.tree_structure(old)
    flat, _ = jax.flatten_util.ravel_pytree(p)
    assert flat.shape == (D + 3,) == (gp_fit.raw_size(D),)
    X = rng.uniform(size=(5, 2))
    np.testing.assert_array_equal(gp.warp(p, X), X)
