"""Tests of jaxstop.gp against a dense NumPy float64 GP, SciPy and known-GP draws."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize
import scipy.stats

import _oracles
from _compiles import count_compilations
from _oracles import np_lml, np_log_prior, np_matern52
from jaxstop import gp
from jaxstop._src import gp_core, gp_fit

# ---------------------------------------------------------------- NumPy oracle


def np_posterior(X, y, Xq, amp, ls, noise, mean):
    """(mean, var) at ``Xq`` of the shared dense float64 GP."""
    return _oracles.np_posterior(X, y, amp, ls, noise, mean)(Xq)


def make_data(rng, n=25, d=3):
    X = rng.uniform(size=(n, d))
    y = np.sin(5 * X[:, 0]) + X[:, 1] ** 2 - X[:, 2] + 0.05 * rng.normal(size=n)
    return X, y


P = dict(amp=1.7, ls=np.array([0.3, 0.6, 1.1]), noise=0.02, mean=0.25)


def gp_params(dtype=jnp.float64):
    return gp.params(P["amp"], P["ls"], P["noise"], P["mean"], dtype=dtype)


EPS = np.finfo(np.float64).eps


def rounding_reach(X, y, Xq, amp, ls, noise, mean):
    """How far two float64 programs computing the same GP posterior can drift apart.

    Padded and exact-size arrays, vmap and a loop, jit and eager are different programs:
    they sum in different orders (depending on the CPU's vector width), so they round
    differently. Each factorises ``K + E`` exactly (Cholesky is backward stable), with
    ``||E|| <= c n eps ||K||``; c = 4 covers the constant of the bound. To first order
    that moves ``alpha = K^-1 (y - m)`` by ``r ||alpha||`` with ``r = c n kappa(K) eps``, so
    the mean by ``r ||k_q|| ||alpha||``, the variance ``amp - k_q^T K^-1 k_q`` by ``r amp``
    and the log marginal likelihood (quadratic form and log-determinant) by
    ``r (|q| + n)``. Two programs: twice that. With kappa computed here (~1e2-1e3 for
    these problems) these are ~1e-11 to 1e-9, far below the percent-level changes a
    masking or batching bug causes.
    """
    K = np_matern52(X, X, amp, ls) + noise * np.eye(len(X))
    n = len(X)
    r = 2 * 4 * n * np.linalg.cond(K) * EPS
    alpha = np.linalg.solve(K, y - mean)
    kq = np_matern52(Xq, X, amp, ls)
    return {"mean": r * np.linalg.norm(kq, axis=1) * np.linalg.norm(alpha), "var": r * amp,
            "lml": r * (abs((y - mean) @ alpha) + n), "r": r}


# ------------------------------------------------------------------ posterior


def test_kernel_matches_tinygp_and_numpy(rng):
    X1, X2 = rng.uniform(size=(7, 3)), rng.uniform(size=(5, 3))
    p = gp_params()
    ref = np_matern52(X1, X2, P["amp"], P["ls"])
    np.testing.assert_allclose(gp.kernel(p)(X1, X2), ref, rtol=1e-12)
    np.testing.assert_allclose(gp_core.matern52(p, jnp.asarray(X1), jnp.asarray(X2)), ref, rtol=1e-10, atol=1e-14)


def test_posterior_matches_dense_numpy(rng):
    X, y = make_data(rng)
    Xq = rng.uniform(size=(40, 3))
    post = gp.posterior(gp_params(), X, y)
    mean, var = gp.predict(post, Xq)
    mu_ref, var_ref = np_posterior(X, y, Xq, **P)
    assert bool(post.ok)
    np.testing.assert_allclose(mean, mu_ref, rtol=1e-9)
    np.testing.assert_allclose(var, var_ref, rtol=1e-9, atol=1e-12)


def test_predictions_at_the_training_rows_from_the_factor(rng):
    """``_predict_train`` (O(n^2), Eq. 2.23-2.24 with K_* = K_f) equals the dense NumPy
    posterior at the conditioning rows, with padded rows interleaved, for a posterior
    from a factorisation and one from the fit's scaled factor; small noise included."""
    X, y = make_data(rng, n=30)
    for noise in (P["noise"], 1e-6):
        p = gp_params()._replace(log_noise=jnp.log(jnp.asarray(noise)))
        mu_ref, var_ref = np_posterior(X, y, X, P["amp"], P["ls"], noise, P["mean"])
        Xpad = np.concatenate([X, rng.uniform(size=(7, 3))])
        ypad = np.concatenate([y, 1e3 * rng.normal(size=7)])
        perm = rng.permutation(37)
        mask = (np.arange(37) < 30)[perm]
        post = gp.posterior(p, Xpad[perm], ypad[perm], mask)
        mu, var = gp_core.predict_train(post, jnp.asarray(ypad[perm]))
        inv = np.argsort(perm)[:30]
        np.testing.assert_allclose(np.asarray(mu)[inv], mu_ref, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(np.asarray(var)[inv], var_ref, rtol=1e-6, atol=1e-12)
        assert np.all(np.asarray(mu)[~mask] == 0) and np.all(np.asarray(var)[~mask] == 0)
    # the fit's posterior (built from the scaled factor, base jitter only)
    z = (y - y.mean()) / y.std()
    init = gp_core.default_init(3, jnp.float64)
    fp, _, post, _ = gp_fit.fit_profiled(jnp.asarray(X), jnp.asarray(z), jnp.ones(30, bool), init, 1e-6, steps=30,
                                      fit_mean=True)
    mu_ref, var_ref = np_posterior(X, z, X, float(fp.amplitude), np.asarray(fp.lengthscales), float(fp.noise),
                                   float(fp.mean))
    mu, var = gp_core.predict_train(post, jnp.asarray(z))
    np.testing.assert_allclose(mu, mu_ref, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(var, var_ref, rtol=1e-6, atol=1e-10)


def test_lml_matches_scipy(rng):
    X, y = make_data(rng)
    lml = gp.log_marginal_likelihood(gp_params(), X, y)
    np.testing.assert_allclose(lml, np_lml(X, y, **P), rtol=1e-10)


def test_lml_gradient_matches_finite_differences(rng):
    """The analytic gradient (custom VJP) against central differences of the NumPy oracle."""
    X, y = make_data(rng, n=20)
    p = gp_params()
    grads = jax.grad(lambda q, X, y: gp_fit.lml(q, X, y, jnp.ones(len(y), bool)), argnums=(0, 1, 2))(
        p, jnp.asarray(X), jnp.asarray(y)
    )
    theta = np.concatenate([[np.log(P["amp"])], np.log(P["ls"]), [np.log(P["noise"])], [P["mean"]]])

    def f(t):
        return np_lml(X, y, np.exp(t[0]), np.exp(t[1:4]), np.exp(t[4]), t[5])

    h = 1e-5
    fd = np.array([(f(theta + h * e) - f(theta - h * e)) / (2 * h) for e in np.eye(6)])
    ours = np.concatenate([[grads[0].log_amplitude], grads[0].log_lengthscales, [grads[0].log_noise], [grads[0].mean]])
    np.testing.assert_allclose(ours, fd, rtol=1e-6, atol=1e-7)
    # Inputs and targets: d lml / d y = -K^-1 (y - m); d lml / d X by differences.
    K = np_matern52(X, X, P["amp"], P["ls"]) + P["noise"] * np.eye(len(X))
    np.testing.assert_allclose(grads[2], -np.linalg.solve(K, y - P["mean"]), rtol=1e-8)
    i, k = 3, 1
    Xp, Xm = X.copy(), X.copy()
    Xp[i, k] += h
    Xm[i, k] -= h
    fd_x = (np_lml(Xp, y, **P) - np_lml(Xm, y, **P)) / (2 * h)
    np.testing.assert_allclose(grads[1][i, k], fd_x, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("use_prior", [True, False, "autogluon"])
@pytest.mark.parametrize("fit_mean", [True, False])
def test_scale_profile_is_the_maximum_over_the_amplitude(rng, use_prior, fit_mean):
    """Amplitude (and mean) profiled out, covariance a (C + g I): value, a* and m* against
    SciPy's maximisation of the NumPy oracle (+ the amplitude and noise priors: Optuna's,
    or AutoGluon's LogNormal(0, 1) on a, Gamma(0.1, 1) on the noise a g and Normal(0, 1)
    on m, written out here) over log a (and m) at fixed lengthscales and ratio g; the gradient in (log
    lengthscales, log g) against central differences of that maximum; padded rows change
    nothing."""
    X, y = make_data(rng, n=20)
    y = 2.0 * y + 1.0
    m0 = 0.4

    def neg(log_a, m, ls, g):
        a = np.exp(log_a)
        val = np_lml(X, y, a, ls, a * g, m)
        if use_prior == "autogluon":
            # LogNormal(0, 1): -log a - (log a)^2 / 2; Gamma(shape 0.1, rate 1): (0.1 - 1) log s - s;
            # Normal(0, 1) on the mean: -m^2 / 2
            val += -np.log(a) - 0.5 * np.log(a) ** 2 + (0.1 - 1) * np.log(a * g) - a * g - 0.5 * m ** 2
        elif use_prior:
            val += np.log(a) - a + 0.1 * np.log(a * g) - 30 * a * g
        return -val

    def profile(t):
        ls, g = np.exp(t[:3]), np.exp(t[3])
        if fit_mean:
            f, u0 = (lambda u: neg(u[0], u[1], ls, g)), np.array([0.0, y.mean()])
        else:
            f, u0 = (lambda u: neg(u[0], m0, ls, g)), np.array([0.0])
        res = scipy.optimize.minimize(f, u0, method="BFGS", options={"gtol": 1e-10})
        return -res.fun, res.x

    theta = np.concatenate([np.log(P["ls"]), [np.log(0.05)]])
    p = gp.GPParams(jnp.asarray(5.0), jnp.asarray(theta[:3]), jnp.asarray(theta[3]), jnp.asarray(m0))

    def f(q, Xa, ya, ma):
        return gp_fit.lml_profiled_scale(q, Xa, ya, ma, fit_mean, use_prior)

    value, log_a, mean, factor = f(p, jnp.asarray(X), jnp.asarray(y), jnp.ones(20, bool))
    ref_value, ref_u = profile(theta)
    np.testing.assert_allclose(float(value), ref_value, rtol=1e-10)
    np.testing.assert_allclose(float(log_a), ref_u[0], atol=1e-6)
    np.testing.assert_allclose(float(mean), ref_u[1] if fit_mean else m0, rtol=1e-6)
    grad = jax.grad(lambda q: f(q, jnp.asarray(X), jnp.asarray(y), jnp.ones(20, bool))[0])(p)
    h = 1e-4
    fd = np.array([(profile(theta + h * e)[0] - profile(theta - h * e)[0]) / (2 * h) for e in np.eye(4)])
    ours = np.concatenate([grad.log_lengthscales, [grad.log_noise]])
    np.testing.assert_allclose(ours, fd, rtol=1e-5, atol=1e-6)
    assert float(grad.log_amplitude) == 0.0
    if fit_mean:
        assert float(grad.mean) == 0.0
    else:  # the fixed mean's partial derivative at a* (a maximiser: envelope theorem)
        ls, g = np.exp(theta[:3]), np.exp(theta[3])
        fd_m = (neg(ref_u[0], m0 - h, ls, g) - neg(ref_u[0], m0 + h, ls, g)) / (2 * h)
        np.testing.assert_allclose(float(grad.mean), fd_m, rtol=1e-5)
    Xp = np.concatenate([X, rng.uniform(size=(5, 3))])
    yp = np.concatenate([y, 100 * np.ones(5)])
    padded = f(p, jnp.asarray(Xp), jnp.asarray(yp), jnp.arange(25) < 20)
    # padded and exact-size calls are different programs: equal up to rounding. With C + g I
    # factorised to backward error c n eps (r = 2 c n kappa eps for two programs, see
    # rounding_reach) the value moves by r (|q| + n), log a* = log(q / n) (q the quadratic
    # form) by r, and the GLS mean w^T y (w = C^-1 1 / 1^T C^-1 1) by r ||w|| ||y||.
    C = np_matern52(X, X, 1.0, P["ls"]) + 0.05 * np.eye(20)
    r = 2 * 4 * 20 * np.linalg.cond(C) * EPS
    w = np.linalg.solve(C, np.ones(20))
    w /= w.sum()
    np.testing.assert_allclose(float(padded[0]), float(value), rtol=0, atol=r * (abs(float(value)) + 2 * 20))
    np.testing.assert_allclose(float(padded[1]), float(log_a), rtol=0, atol=r)
    np.testing.assert_allclose(float(padded[2]), float(mean), rtol=0, atol=r * np.linalg.norm(w) * np.linalg.norm(y))
    # The returned factor conditions the GP at (a*, lengthscales, a* g, m*) without another
    # factorisation: predictions equal the NumPy oracle's, padded or not.
    fitted = gp.GPParams(log_a, p.log_lengthscales, log_a + p.log_noise, mean)
    a = float(np.exp(log_a))
    Xq = rng.uniform(size=(7, 3))
    mu_ref, var_ref = np_posterior(X, y, Xq, a, P["ls"], a * 0.05, float(mean))
    for Xa, ya, ma, fac in ((X, y, np.ones(20, bool), factor), (Xp, yp, np.arange(25) < 20, padded[3])):
        post = gp_core.posterior_from_scaled_factor(fitted, jnp.asarray(Xa), jnp.asarray(ya), jnp.asarray(ma), fac)
        assert bool(post.ok)
        mu, var = gp.predict(post, Xq)
        np.testing.assert_allclose(mu, mu_ref, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(var, var_ref, rtol=1e-7, atol=1e-9 * a)
        direct = gp.posterior(fitted, Xa, ya, ma)
        # sqrt(a) chol(C + g I) against chol(a (C + g I)): two computations of one factor; each
        # is within ~ c n kappa eps ||L|| of the exact one (forward error of Cholesky)
        np.testing.assert_allclose(post.chol, direct.chol, rtol=0, atol=r * np.abs(np.asarray(direct.chol)).max())


def test_padding_has_no_effect(rng):
    X, y = make_data(rng, n=15)
    Xq = rng.uniform(size=(9, 3))
    Xpad = np.concatenate([X, rng.uniform(size=(10, 3))])
    ypad = np.concatenate([y, 1e6 * rng.normal(size=10)])
    mask = np.arange(25) < 15
    perm = rng.permutation(25)  # padded rows interleaved with real ones
    p = gp_params()
    m2, v2 = gp.predict(gp.posterior(p, Xpad[perm], ypad[perm], mask[perm]), Xq)
    l2 = gp.log_marginal_likelihood(p, Xpad[perm], ypad[perm], mask[perm])
    # Inert padding, exactly: the same program (same shapes, same layout) with other values
    # on the padded rows, NaN included, gives bit-identical results.
    Xother = Xpad.copy()
    Xother[~mask] = rng.uniform(size=(10, 3))
    ynan = ypad.copy()
    ynan[~mask] = np.nan
    m3, v3 = gp.predict(gp.posterior(p, Xother[perm], ynan[perm], mask[perm]), Xq)
    np.testing.assert_array_equal(m3, m2)
    np.testing.assert_array_equal(v3, v2)
    l3 = gp.log_marginal_likelihood(p, Xother[perm], ynan[perm], mask[perm])
    assert float(l3) == float(l2)
    # Against a call on exactly the real rows (another program): equal up to rounding.
    m1, v1 = gp.predict(gp.posterior(p, X, y), Xq)
    l1 = gp.log_marginal_likelihood(p, X, y)
    tol = rounding_reach(X, y, Xq, P["amp"], P["ls"], P["noise"], P["mean"])
    np.testing.assert_allclose(m2, m1, rtol=0, atol=tol["mean"].max())
    np.testing.assert_allclose(v2, v1, rtol=0, atol=tol["var"])
    np.testing.assert_allclose(l2, l1, rtol=0, atol=tol["lml"])


def test_vmap_over_studies_equals_loop(rng):
    S, n = 100, 12
    X = rng.uniform(size=(S, n, 3))
    y = rng.normal(size=(S, n))
    mask = np.arange(n)[None, :] < rng.integers(1, n + 1, size=(S, 1))
    Xq = rng.uniform(size=(S, 6, 3))
    p = gp_params()

    def one(X, y, m, Xq):
        post = gp.posterior(p, X, y, m)
        return gp.predict(post, Xq), gp.log_marginal_likelihood(p, X, y, m)

    (mb, vb), lb = jax.vmap(one)(X, y, mask, Xq)
    for s in range(0, S, 7):
        (m1, v1), l1 = one(X[s], y[s], mask[s], Xq[s])
        # vmap and a single call are different programs: equal up to rounding
        m = mask[s]
        tol = rounding_reach(X[s][m], y[s][m], Xq[s], P["amp"], P["ls"], P["noise"], P["mean"])
        np.testing.assert_allclose(mb[s], m1, rtol=0, atol=tol["mean"].max())
        np.testing.assert_allclose(vb[s], v1, rtol=0, atol=tol["var"])
        np.testing.assert_allclose(lb[s], l1, rtol=0, atol=tol["lml"])


def test_no_retrace_when_real_rows_change(rng):
    X, y = make_data(rng, n=20)
    p = gp_params()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(X, y, mask, p):
        post = gp.posterior(p, X, y, mask)
        q, _ = gp.fit(X, y, mask, init=p, steps=3)
        return gp.predict(post, X)[0], q

    for k in (3, 11, 20):
        step(X, y, np.arange(20) < k, p)
    # The library's own jitted entry points compile once per shape as well.
    with count_compilations() as compiled:
        for k in (5, 17):
            gp.posterior(p, X, y, np.arange(20) < k)
            gp.fit(X, y, np.arange(20) < k, steps=30)
        gp.fit(X, y, np.arange(20) < 9, steps=30)
    # at most one new program each (the first mask seen by the library's entry points), none per mask
    assert compiled["posterior"] <= 1 and compiled["fit_restarts"] <= 1
    # the count sees these entry points: a new shape (posterior) or static argument (fit) compiles
    with count_compilations() as control:
        gp.posterior(p, X[:19], y[:19], np.arange(19) < 9)
        gp.fit(X, y, np.arange(20) < 9, steps=31)
    assert control["posterior"] == 1 and control["fit_restarts"] == 1


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_dtype_follows_input(rng, dtype):
    X, y = make_data(rng, n=10)
    X, y = jnp.asarray(X, dtype), jnp.asarray(y, dtype)
    p, info = gp.fit(X, y, steps=5)
    assert p.log_lengthscales.dtype == dtype and info.objective.dtype == dtype
    post = gp.posterior(p, X, y)
    mean, var = gp.predict(post, X)
    assert mean.dtype == dtype and var.dtype == dtype and post.chol.dtype == dtype
    z, m, s = gp.standardize(y)
    assert z.dtype == dtype and m.dtype == dtype


def test_float32_posterior_close_to_float64(rng):
    X, y = make_data(rng)
    Xq = rng.uniform(size=(30, 3))
    m32, v32 = gp.predict(gp.posterior(gp_params(jnp.float32), X.astype(np.float32), y.astype(np.float32)), Xq)
    mu_ref, var_ref = np_posterior(X, y, Xq, **P)
    np.testing.assert_allclose(m32, mu_ref, atol=2e-3)
    np.testing.assert_allclose(v32, var_ref, atol=2e-3)


# ------------------------------------------------------------------------ fit


def test_fit_reaches_the_scipy_optimum(rng):
    """Our fixed-step L-BFGS reaches the MAP objective found by SciPy's L-BFGS-B."""
    X, y = make_data(rng, n=30)
    z, _, _ = gp.standardize(y)
    z = np.asarray(z)
    p, info = gp.fit(X, z, steps=40, num_restarts=3, key=jax.random.key(1))

    def neg(t):
        amp, ls, noise = np.exp(t[0]), np.exp(t[1:4]), np.exp(t[4]) + 1e-6
        return -(np_lml(X, z, amp, ls, noise, t[5]) + np_log_prior(amp, ls, noise))

    best = min(
        scipy.optimize.minimize(neg, t0, method="L-BFGS-B").fun
        for t0 in (np.array([0, -0.7, -0.7, -0.7, -4.6, 0]), np.array([0.5, 0, 0, 0, -2, 0]))
    )
    ours = neg(np.concatenate([[p.log_amplitude], p.log_lengthscales, [np.log(p.noise - 1e-6)], [p.mean]]))
    np.testing.assert_allclose(float(info.objective), ours, rtol=1e-8)
    assert ours <= best + 1e-4 * abs(best)
    assert bool(info.finite) and int(info.num_valid) == 30


def test_fit_vmapped_equals_loop_and_stops_early(rng):
    """Each study of a vmapped batch stops at its own convergence and gets what it gets alone."""
    S, n = 12, 30
    X = rng.uniform(size=(S, n, 3))
    y = np.sin(5 * X[..., 0]) + X[..., 1] ** 2 + 0.05 * rng.normal(size=(S, n))
    mask = np.arange(n)[None, :] < rng.integers(8, n + 1, size=(S, 1))
    z = jax.vmap(lambda y, m: gp.standardize(y, m)[0])(y, mask)
    fit_batch = jax.vmap(lambda X, z, m: gp.fit(X, z, m, steps=60))
    pb, ib = fit_batch(X, z, mask)
    # Each study stops on its own, exactly: the same program with the other half of the
    # batch replaced by other studies (which stop at other steps) gives every kept study
    # bit-identical parameters, objective and step count.
    keep = np.arange(S) % 2 == 0
    X2 = np.where(keep[:, None, None], X, rng.uniform(size=X.shape))
    z2 = np.where(keep[:, None], np.asarray(z), rng.normal(size=(S, n)) * np.asarray(mask))
    pb2, ib2 = fit_batch(X2, z2, mask)
    for a, b in zip(jax.tree_util.tree_leaves((pb, ib)), jax.tree_util.tree_leaves((pb2, ib2))):
        np.testing.assert_array_equal(np.asarray(a)[keep], np.asarray(b)[keep])
    assert not np.array_equal(np.asarray(ib.steps)[~keep], np.asarray(ib2.steps)[~keep])
    # Alone (another program) a study gets the same fit up to what rounding can move. Both
    # runs stop once max |g| <= tol = 1e-4 (g: the gradient in psi = (log a, log ls, log g,
    # m), zero in the profiled log a and m); a rounding-level difference early on can change
    # a line search or the stopping step, so either may stop anywhere in that region. To
    # second order (H: the objective's Hessian at the fit) a point with gradient g lies
    # H^-1 g from the optimum and g^T H^-1 g / 2 above it: with q = 4 free components,
    # |d psi| <= 2 sqrt(q) tol ||H^-1|| and |d objective| <= q tol^2 ||H^-1|| (both runs),
    # plus the objective's own rounding (small beside it).
    tol = 1e-4
    for s in range(S):
        p1, i1 = gp.fit(X[s], z[s], mask[s], steps=60)
        assert int(i1.steps) < 60 and int(ib.steps[s]) < 60
        m = mask[s]
        Xs, zs = jnp.asarray(X[s][m]), jnp.asarray(z[s][m])

        def objective(psi):
            q = gp.GPParams(psi[0], psi[1:4], psi[0] + psi[4], psi[5])
            return -(gp.log_marginal_likelihood(q, Xs, zs) + gp.log_prior(q))

        def psi_of(q, i=None):
            q = jax.tree_util.tree_map(lambda a: np.asarray(a if i is None else a[i]), q)
            return np.concatenate([[q.log_amplitude], q.log_lengthscales, [q.log_noise - q.log_amplitude], [q.mean]])

        H = np.asarray(jax.hessian(objective)(jnp.asarray(psi_of(p1))))
        assert np.all(np.linalg.eigvalsh(H) > 0), "the fit did not end at a minimum"
        h_inv = np.linalg.norm(np.linalg.inv(H), 2)
        np.testing.assert_allclose(psi_of(pb, s), psi_of(p1), rtol=0, atol=2 * np.sqrt(4) * tol * h_inv)
        K = np_matern52(X[s][m], X[s][m], float(p1.amplitude), np.asarray(p1.lengthscales)) + float(p1.noise) * np.eye(m.sum())
        delta_f = 2 * 4 * m.sum() * np.linalg.cond(K) * EPS * (abs(float(i1.objective)) + m.sum())
        np.testing.assert_allclose(float(ib.objective[s]), float(i1.objective), rtol=0,
                                   atol=4 * tol**2 * h_inv + delta_f)
    assert np.all(np.asarray(ib.finite))
    assert int(np.max(ib.steps)) < 60 and len(set(np.asarray(ib.steps).tolist())) > 1
    # tol = 0 always takes every step and lands on the same optimum
    _, iz = jax.vmap(lambda X, z, m: gp.fit(X, z, m, steps=60, tol=0.0))(X, z, mask)
    assert np.all(np.asarray(iz.steps) == 60)
    np.testing.assert_allclose(iz.objective, ib.objective, rtol=1e-7)


def test_fit_with_an_optax_optimizer_approaches_the_default_optimum(rng):
    import optax

    X, y = make_data(rng, n=30)
    z, _, _ = gp.standardize(y)
    _, info = gp.fit(X, z, steps=60)
    _, info_adam = gp.fit(X, z, steps=400, optimizer=optax.adam(3e-2))
    assert bool(info_adam.finite) and int(info_adam.steps) == 400
    # the default lands on the MAP (see the SciPy test): Adam gets close, never below it
    assert float(info.objective) <= float(info_adam.objective) + 1e-8 * abs(float(info.objective))
    assert float(info_adam.objective) - float(info.objective) < 0.05


def test_fit_recovers_known_hyperparameters():
    """Data drawn from a known GP: the median ML-II estimate lands near the truth."""
    true_ls, true_amp, true_noise = np.array([0.25, 0.8]), 1.0, 0.01
    S, n = 16, 100
    rs = np.random.default_rng(7)
    X = rs.uniform(size=(S, n, 2))
    Y = np.stack([
        rs.multivariate_normal(np.zeros(n), np_matern52(x, x, true_amp, true_ls) + true_noise * np.eye(n))
        for x in X
    ])
    fit = jax.vmap(lambda x, y: gp.fit(x, y, steps=40, prior=False, fit_mean=False)[0])
    est = fit(jnp.asarray(X), jnp.asarray(Y))
    med_ls = np.exp(np.median(np.asarray(est.log_lengthscales), axis=0))
    med_amp = np.exp(np.median(np.asarray(est.log_amplitude)))
    med_noise = np.exp(np.median(np.asarray(est.log_noise)))
    # Tolerances reflect estimation error at n = 120 (lengthscales within ~25%).
    np.testing.assert_allclose(med_ls, true_ls, rtol=0.25)
    np.testing.assert_allclose(med_amp, true_amp, rtol=0.5)
    np.testing.assert_allclose(med_noise, true_noise, rtol=0.5)


@pytest.mark.parametrize(
    "case",
    ["one_point", "constant_y", "duplicated_X", "no_points"],
)
def test_fit_degenerate_inputs_stay_finite(rng, case):
    n = 8
    X = rng.uniform(size=(n, 3))
    y = rng.normal(size=n)
    mask = np.ones(n, bool)
    if case == "one_point":
        mask = np.arange(n) < 1
    elif case == "constant_y":
        y = np.full(n, 3.0)
    elif case == "duplicated_X":
        X[:] = X[0]
    elif case == "no_points":
        mask = np.zeros(n, bool)
    z, _, _ = gp.standardize(y, mask)
    p, info = gp.fit(X, z, mask)
    assert bool(info.finite)
    for leaf in jax.tree_util.tree_leaves(p):
        assert np.all(np.isfinite(leaf))
    mean, var = gp.predict(gp.posterior(p, X, z, mask), rng.uniform(size=(5, 3)))
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(var)) and np.all(var >= 0)


def test_fit_without_data_or_prior_reports_the_start_as_not_finite():
    X = np.full((6, 2), 0.5)
    init = gp.params(1.3, [0.4, 0.7], 0.05, 0.2)
    p, info = gp.fit(X, np.zeros(6), np.zeros(6, bool), init=init, prior=False)
    assert not bool(info.finite)
    for a, b in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(init)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_posterior_survives_singular_gram():
    """Duplicated inputs with a tiny noise: the growing jitter keeps the factor finite."""
    X = np.full((6, 2), 0.5)
    y = np.arange(6.0)
    post = gp.posterior(gp.params(1.0, [0.3, 0.3], 1e-300), X, y)
    assert bool(post.ok) and float(post.jitter) > 0
    mean, var = gp.predict(post, X[:2])
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(var))


def test_standardize_against_numpy(rng):
    y = rng.normal(size=12) * 3 + 1
    mask = rng.uniform(size=12) < 0.7
    z, m, s = gp.standardize(y, mask)
    ref = (y[mask] - y[mask].mean()) / y[mask].std()
    np.testing.assert_allclose(np.asarray(z)[mask], ref, rtol=1e-12)
    assert np.all(np.asarray(z)[~mask] == 0)
    np.testing.assert_allclose([m, s], [y[mask].mean(), y[mask].std()], rtol=1e-12)


# ----------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    "kwargs, err, match",
    [
        (dict(X=np.zeros(5)), ValueError, "X must be 2-D"),
        (dict(X=np.full((5, 2), 1.5)), ValueError, "X must lie in the unit cube"),
        (dict(y=np.zeros(4)), ValueError, "same number of rows"),
        (dict(mask=np.ones(4, bool)), ValueError, "mask must have shape"),
        (dict(mask=np.ones(5)), TypeError, "mask must have dtype bool"),
        (dict(y=np.array([0.0, np.nan, 1, 2, 3])), ValueError, "y has 1 non-finite"),
    ],
)
def test_bad_data_raises(kwargs, err, match):
    args = dict(X=np.full((5, 2), 0.5), y=np.zeros(5), mask=None)
    args.update(kwargs)
    with pytest.raises(err, match=match):
        gp.posterior(gp.params(1.0, [0.5, 0.5], 0.1), args["X"], args["y"], args["mask"])
    with pytest.raises(err, match=match):
        gp.fit(args["X"], args["y"], args["mask"])


@pytest.mark.parametrize(
    "args, match",
    [
        ((0.0, [0.5], 0.1), "amplitude must be > 0"),
        ((1.0, [0.5, -1.0], 0.1), "lengthscales must be > 0"),
        ((1.0, [0.5], 0.0), "noise must be > 0"),
        ((1.0, 0.5, 0.1), "lengthscales must be 1-D"),
        ((1.0, [0.5], np.nan), "noise must be finite"),
    ],
)
def test_bad_params_raise(args, match):
    with pytest.raises(ValueError, match=match):
        gp.params(*args)


def test_wrong_dimension_params_and_queries_raise():
    X = np.full((4, 2), 0.5)
    with pytest.raises(ValueError, match="log_lengthscales must have shape"):
        gp.posterior(gp.params(1.0, [0.5, 0.5, 0.5], 0.1), X, np.zeros(4))
    post = gp.posterior(gp.params(1.0, [0.5, 0.5], 0.1), X, np.zeros(4))
    with pytest.raises(ValueError, match="Xq must have 2 columns"):
        gp.predict(post, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="key is required"):
        gp.fit(X, np.zeros(4), num_restarts=2)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        gp.fit(X, np.zeros(4), steps=0)
    with pytest.raises(ValueError, match="tol"):
        gp.fit(X, np.zeros(4), tol=-1.0)


def test_nan_inside_jit_is_reported_not_silent(rng):
    """Inside jit values cannot be checked eagerly: a NaN on a real row makes
    ``info.finite`` False instead of returning NaN parameters."""
    X, y = make_data(rng, n=10)
    y[3] = np.nan
    p, info = jax.jit(lambda X, y: gp.fit(X, y, steps=5))(X, y)
    assert not bool(info.finite)
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(p))


# ------------------------------------------------------------ one API style: GPFit, FitInfo.ok
def test_fit_returns_gpfit_with_info_ok():
    """gp.fit returns a GPFit NamedTuple that unpacks like the old (params, info) tuple;
    FitInfo.ok is the status (== finite). Values recorded from the release that returned
    a plain tuple."""
    X = jax.random.uniform(jax.random.key(0), (12, 2))
    z, _, _ = gp.standardize(jnp.sin(6 * X[:, 0]) + X[:, 1])
    res = gp.fit(X, z, steps=5)
    assert isinstance(res, gp.GPFit) and isinstance(res, tuple) and len(res) == 2
    p, info = res
    assert p is res.params and info is res.info and res[0] is res.params
    assert float(info.objective) == pytest.approx(7.492941642456884, rel=1e-10)
    np.testing.assert_allclose(np.asarray(p.lengthscales), [0.3884186054668105, 1.8020600325310896], rtol=1e-8)
    assert bool(info.ok) and bool(info.finite) and int(info.steps) == 5
    # a fit that fails: ok False exactly where finite is False
    _, bad = gp.fit(np.full((6, 1), 0.5), np.zeros(6), np.zeros(6, bool), prior=False)
    assert not bool(bad.ok) and not bool(bad.finite)
    # a pytree: vmap batches both fields
    batched = jax.vmap(lambda X, z: gp.fit(X, z, steps=5))(jnp.stack([X, X]), jnp.stack([z, z]))
    assert isinstance(batched, gp.GPFit) and batched.info.ok.shape == (2,)
    np.testing.assert_array_equal(np.asarray(batched.info.ok), np.asarray(batched.info.finite))


# ---------------------------------------------------------------- the kernel-agnostic core


def _np_exp_decay(x, z, alpha, beta):
    return beta**alpha / (x[:, None] + z[None, :] + beta) ** alpha


def test_gp_likelihood_core_with_another_kernel(rng):
    """jaxstop._src.gp_likelihood with the learning-curve kernel of bos (not the Matern):
    the log likelihood against scipy, its gradient ``0.5 tr(W dK)`` from the kernel's
    log-derivatives against central differences of scipy's, padded rows (any values)
    without effect, and the mask-free form (``mask=None``) equal to the masked one."""
    from jaxstop._src import gp_likelihood as gl

    x = np.arange(1.0, 9.0)
    y = 0.5 * np.exp(-0.3 * x) + 0.02 * rng.normal(size=8)
    noise, mean = 1e-3, 0.1

    def np_lml(u):
        alpha, beta = np.exp(u[1]), np.exp(u[1] - u[0])
        K = _np_exp_decay(x, x, alpha, beta) + noise * np.eye(8)
        return scipy.stats.multivariate_normal(np.full(8, mean), K).logpdf(y)

    def core(u, xs, ys, mask):
        alpha, beta = jnp.exp(u[1]), jnp.exp(u[1] - u[0])
        s = xs[:, None] + xs[None, :]
        K0 = jnp.exp(-alpha * jnp.log1p(s / beta))
        Kf = K0 if mask is None else jnp.where(gl.real_block(mask), K0, 0)
        Sinv, _, r, v, logdet, n, _ = gl.masked_solve(gl.conditioned(Kf, mask, noise), ys, mask, mean)
        q = s / (s + beta)
        grads = gl.lml_grad_log(gl.lml_weights(v, Sinv, mask), Kf, [-alpha * q, alpha * (q - jnp.log1p(s / beta))])
        return gl.log_marginal(r, v, logdet, n), jnp.stack(grads)

    u = np.array([np.log(0.4), np.log(2.0)])
    value, grad = core(jnp.asarray(u), jnp.asarray(x), jnp.asarray(y), None)
    np.testing.assert_allclose(float(value), np_lml(u), rtol=1e-11)
    h = 1e-5
    fd = [(np_lml(u + h * e) - np_lml(u - h * e)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(np.asarray(grad), fd, rtol=1e-6, atol=1e-8)
    # padded rows interleaved, with garbage inputs and values
    perm = rng.permutation(11)
    xp = np.concatenate([x, [50.0, 0.5, 3.0]])[perm]
    yp = np.concatenate([y, [1e3, -7.0, np.pi]])[perm]
    mask = (np.arange(11) < 8)[perm]
    vm, gm = core(jnp.asarray(u), jnp.asarray(xp), jnp.asarray(yp), jnp.asarray(mask))
    np.testing.assert_allclose(float(vm), float(value), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(gm), np.asarray(grad), rtol=1e-10)


def test_gp_likelihood_posterior_factor_and_multistart(rng):
    """posterior_from_factor: the whitened full covariance (bos) and the alpha / diagonal
    form (gp) agree with each other and with dense NumPy conditioning; factor's jitter
    policy (no retry vs retries); multistart picks the best usable start or falls back."""
    from jaxstop._src import gp_likelihood as gl
    from jaxstop._src import linalg, optim

    x, xq = np.arange(1.0, 7.0), np.arange(7.0, 12.0)
    y = 0.6 * np.exp(-0.2 * x)
    K = _np_exp_decay(x, x, 1.5, 4.0) + 1e-3 * np.eye(6)
    Kxq, Kqq = _np_exp_decay(x, xq, 1.5, 4.0), _np_exp_decay(xq, xq, 1.5, 4.0)
    mu_ref = 0.2 + Kxq.T @ np.linalg.solve(K, y - 0.2)
    cov_ref = Kqq - Kxq.T @ np.linalg.solve(K, Kxq)
    L, extra, ok = gl.factor(jnp.asarray(K), None, 0.0, max_tries=0)
    assert bool(ok) and float(extra) == 0
    Linv = linalg.tri_inv(L)
    mu, cov = gl.posterior_from_factor(Linv, jnp.asarray(Kxq), jnp.asarray(Kqq), 0.2, resid=jnp.asarray(y - 0.2),
                                       full_cov=True)
    np.testing.assert_allclose(np.asarray(mu), mu_ref, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(cov), cov_ref, atol=1e-11)
    assert np.array_equal(np.asarray(cov), np.asarray(cov).T)
    alpha = gl.solve_from_inverse(Linv, jnp.asarray(y - 0.2), None)
    mu2, var2 = gl.posterior_from_factor(Linv, jnp.asarray(Kxq), jnp.asarray(np.diag(Kqq)), 0.2, alpha=alpha,
                                         full_cov=False)
    np.testing.assert_allclose(np.asarray(mu2), mu_ref, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(var2), np.maximum(np.diag(cov_ref), 0), atol=1e-11)
    # a singular matrix: one plain try fails, the retries add jitter until it factors
    S = jnp.asarray(np.ones((4, 4)) - np.eye(4) * 1e-17)
    assert not bool(gl.factor(S, None, 1e-10, max_tries=0)[2])
    L, extra, ok = gl.factor(S, jnp.ones(4, bool), 1e-10)
    assert bool(ok) and float(extra) > 0 and np.all(np.isfinite(np.asarray(L)))

    def run(start):
        value = jnp.where(start[0] > 2.5, jnp.nan, (start[0] - 1.2) ** 2)
        return start * 2, value, start[0].astype(jnp.int32)

    starts = jnp.asarray([[0.0, 1.0], [1.0, 1.0], [3.0, 1.0], [1.0, 2.0]])
    p, v, aux, best, any_ok = optim.multistart(run, starts)
    assert int(best) == 1 and bool(any_ok) and int(aux) == 1 and float(v) == pytest.approx(0.04)
    np.testing.assert_array_equal(np.asarray(p), [2.0, 2.0])
    p, v, aux, best, any_ok = optim.multistart(run, starts, max_value=0.01, fallback=starts)
    assert int(best) == 0 and not bool(any_ok)
    np.testing.assert_array_equal(np.asarray(p), [0.0, 1.0])


def test_fit_stops_at_the_rounding_floor_instead_of_the_step_cap():
    """A tol finer than the dtype can resolve: near the optimum the gradient's rounding
    exceeds tol and every further trial is a rejected step along a rounding direction. The
    fit stops at the first rejected step whose predicted decrease is below the objective's
    rounding (16 eps |f|), long before the step cap, where float64 converged (same data,
    started from the float64 optimum). Without that stop it runs all 200 steps."""
    for seed in range(3):
        rng = np.random.default_rng(seed)
        X = rng.uniform(size=(120, 4))
        z, _, _ = gp.standardize(jnp.asarray(np.sin(5 * X[:, 0]) + X[:, 1] ** 2 + 0.05 * rng.normal(size=120)))
        p64, i64 = gp.fit(jnp.asarray(X), z, steps=200, tol=1e-6)
        assert bool(i64.ok)
        start = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), p64)
        p32, i32 = gp.fit(jnp.asarray(X, jnp.float32), jnp.asarray(z, jnp.float32), init=start, steps=200, tol=1e-6)
        assert bool(i32.ok) and int(i32.steps) < 20
        # float32's objective carries a rounding of order n eps32 (1.4e-5 of |f| here, a few
        # times that through the Cholesky factor): the stop is within that of the float64
        # optimum, and its log lengthscales within sqrt(2 |f| 1e-4 / curvature ~ n) ~ 1e-2
        f64, f32 = float(i64.objective), float(i32.objective)
        assert abs(f32 - f64) <= 2e-4 * abs(f64)
        np.testing.assert_allclose(np.log(np.asarray(p32.lengthscales, np.float64)),
                                   np.log(np.asarray(p64.lengthscales)), rtol=0, atol=2e-2)
