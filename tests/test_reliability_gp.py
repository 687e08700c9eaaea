"""Reliability of jaxstop.gp at the edges: padded rows holding NaN / inf / 1e30, bad real
rows inside jit, huge, tiny and constant data, ill-conditioned Gram matrices, unsupported
dtypes, and what a batched fit may differ in from a single one.

References are independent: float64 NumPy (tests/_oracles.py), closed forms, or the same
program run on clean values (padding must be inert bit for bit).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import scipy.optimize

from _oracles import np_lml, np_log_prior, np_matern52, np_posterior
from jaxstop import Reason, gp
from jaxstop._src import gp_core, gp_fit
from jaxstop._src import gp_likelihood as gl

EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)


def smooth_study(n=21, d=2, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, d))
    y = np.sin(5 * X[:, 0]) + X[:, 1] ** 2
    return X.astype(dtype), ((y - y.mean()) / y.std()).astype(dtype)


def leaves_equal(a, b):
    for u, v in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def objective64(X, z):
    """The fit's objective -(lml + log prior) in float64 NumPy, as a function of
    psi = (log a, log ls, log(noise / a), mean)."""
    def f(psi):
        a, ls, noise, m = np.exp(psi[0]), np.exp(psi[1:-2]), np.exp(psi[0] + psi[-2]), psi[-1]
        return -(np_lml(X, z, a, ls, noise, m) + np_log_prior(a, ls, noise))
    return f


def psi_of(p):
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), p)
    return np.concatenate([[p.log_amplitude], p.log_lengthscales, [p.log_noise - p.log_amplitude], [p.mean]])


def stop_gap(f, psi):
    """``(g' H^-1 g / 2, ||H^-1||)``: to second order how far a point with gradient ``g``
    lies above the minimum of ``f`` (float64 central differences at ``psi``; the profiled
    amplitude and mean of a float32 fit are only float32 maximisers, so all of psi)."""
    g, H = grad_hess(f, psi)
    assert np.all(np.linalg.eigvalsh(H) > 0), "not at a minimum"
    Hinv = np.linalg.inv(H)
    return 0.5 * g @ Hinv @ g, np.linalg.norm(Hinv, 2)


def grad_hess(f, x, h=1e-4):
    """Central-difference gradient and Hessian of a float64 function (errors O(h^2))."""
    k = len(x)
    E = np.eye(k) * h
    g = np.array([(f(x + e) - f(x - e)) / (2 * h) for e in E])
    H = np.empty((k, k))
    for i in range(k):
        for j in range(k):
            H[i, j] = (f(x + E[i] + E[j]) - f(x + E[i] - E[j]) - f(x - E[i] + E[j]) + f(x - E[i] - E[j])) / (4 * h * h)
    return g, 0.5 * (H + H.T)


# ------------------------------------------------------------ 1. padded rows are inert
def test_padded_rows_are_inert_in_every_entry_point():
    """A NaN / inf / 1e30 on a padded row changes nothing: every entry point gives, bit for
    bit, what the same program gives with ordinary values there (before, a NaN in X on a
    padded row zeroed the fit's lengthscale gradient and the fit stayed near its start).
    One program: the variants are a vmapped batch, compared position by position with the
    same batch of clean copies (rounding may depend on the position in a batch)."""
    X, z = smooth_study()
    mask = np.arange(21) < 20
    variants = [(0.5, 0.0), (np.nan, np.nan), (np.inf, -np.inf), (1e30, 1e30)]
    Xs = np.stack([np.where(mask[:, None], X, bx) for bx, _ in variants]).astype(np.float32)
    zs = np.stack([np.where(mask, z, bz) for _, bz in variants]).astype(np.float32)
    p = gp.params(1.0, [0.4, 0.6], 1e-2, dtype=jnp.float32)
    Xq = np.asarray(np.random.default_rng(1).uniform(size=(5, 2)), np.float32)

    def everything(X, z):
        post = gp.posterior(p, X, z, mask)
        return (gp.fit(X, z, mask), post, gp.predict(post, Xq), gp.log_marginal_likelihood(p, X, z, mask),
                gp.standardize(z, mask), gp.fit(X, z, mask, optimizer=optax.adam(1e-2), steps=3))

    run = jax.jit(jax.vmap(everything))
    out = run(Xs, zs)
    leaves_equal(run(np.stack([Xs[0]] * len(variants)), np.stack([zs[0]] * len(variants))), out)
    fit = jax.tree_util.tree_map(lambda a: a[1], out[0])
    assert bool(fit.info.ok) and int(fit.info.reason) == Reason.OK and int(fit.info.num_valid) == 20
    assert bool(jnp.all(out[1].ok)) and np.all(np.isfinite(np.asarray(out[1].X)))
    # The fit reached the compact problem's optimum (before, it stayed near its start, tens
    # of nats above). f*: SciPy's minimum of the float64 NumPy objective of the 20 real
    # rows, started at the fit. To second order the fit's stop lies g' H^-1 g / 2 above it;
    # twice that is allowed for the higher-order terms, plus SciPy's own stop (gtol).
    X64, z64 = X[:20].astype(np.float64), z[:20].astype(np.float64)
    f = objective64(X64, z64)
    psi = psi_of(fit.params)
    gap, h_inv = stop_gap(f, psi)
    gtol = 1e-7
    best = scipy.optimize.minimize(f, psi, method="BFGS", options={"gtol": gtol})
    assert f(psi) - best.fun <= 2 * gap + len(psi) * gtol**2 * h_inv


def test_padded_rows_are_inert_in_the_kernel_agnostic_core():
    """gp_likelihood (shared with the learning-curve GP of bos): a Gram matrix with NaN off
    the real block and NaN targets on padded rows give the clean call's values exactly."""
    rng = np.random.default_rng(2)
    x = np.arange(1.0, 9.0)
    Kf = 1.0 / (1.0 + np.abs(x[:, None] - x[None, :]))
    mask = np.arange(8) < 6
    y = rng.normal(size=8)
    Kc = np.where(mask[:, None] & mask[None, :], Kf, 0.0)
    Kd = np.where(mask[:, None] & mask[None, :], Kf, np.nan)
    yc, yd = np.where(mask, y, 0.0), np.where(mask, y, np.nan)
    out_c = gl.masked_solve(gl.conditioned(jnp.asarray(Kc), jnp.asarray(mask), 0.1), jnp.asarray(yc),
                            jnp.asarray(mask), 0.0, True)
    out_d = gl.masked_solve(gl.conditioned(jnp.asarray(Kd), jnp.asarray(mask), 0.1), jnp.asarray(yd),
                            jnp.asarray(mask), 0.0, True)
    leaves_equal(out_c, out_d)
    # and the values are the 6 x 6 problem's (SciPy-free closed form: a Gaussian log density)
    S = Kf[:6, :6] + 0.1 * np.eye(6)
    w = np.linalg.solve(S, np.ones(6))
    m = w @ y[:6] / w.sum()
    r = y[:6] - m
    ref = -0.5 * r @ np.linalg.solve(S, r) - 0.5 * np.linalg.slogdet(S)[1] - 3 * math.log(2 * math.pi)
    _, mean, rr, v, logdet, n, _ = out_d
    np.testing.assert_allclose(float(gl.log_marginal(rr, v, logdet, n)), ref, rtol=1e-12)
    np.testing.assert_allclose(float(mean), m, rtol=1e-12)


# ------------------------------------------------------------ 1b. query points
def test_predict_rejects_or_flags_bad_query_rows():
    X, z = smooth_study(n=12, dtype=np.float64)
    amp, ls, noise = 1.3, np.array([0.4, 0.7]), 1e-2
    post = gp.posterior(gp.params(amp, ls, noise), X, z)
    for bad, what in ((np.nan, "finite"), (7.0, "unit cube"), (-0.5, "unit cube")):
        Xq = np.array([[0.2, 0.3], [bad, 0.5]])
        with pytest.raises(ValueError, match=f"Xq must .*{what}"):
            gp.predict(post, Xq)
        pred = jax.jit(gp.predict)(post, Xq)
        assert isinstance(pred, gp.Prediction)
        np.testing.assert_array_equal(np.asarray(pred.ok), [True, False])
        assert np.isnan(pred.mean[1]) and np.isnan(pred.var[1])
        mu, var = np_posterior(X, z, amp, ls, noise + float(post.jitter))(Xq[:1])
        np.testing.assert_allclose([pred.mean[0], pred.var[0]], [mu[0], var[0]], rtol=1e-9, atol=1e-12)
    # the corners of the cube are inside it
    mean, var = gp.predict(post, np.array([[0.0, 1.0], [1.0, 0.0]]))
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(var))


# ------------------------------------------------------------ 2. bad real rows inside jit
def test_bad_real_rows_inside_jit_give_ok_false():
    """NaN / inf on a real row of y or X, or in the parameters: under jit and vmap the
    posterior, its predictions and the fit say ok False with Reason.BAD_INPUT (before, a
    NaN on a real row of y gave ok True and NaN means); eagerly the input raises."""
    X, z = smooth_study(n=10, dtype=np.float64)
    p = gp.params(1.0, [0.4, 0.6], 1e-2)
    cases = [("good", None), ("y", np.nan), ("y", np.inf), ("X", np.nan), ("X", -np.inf),
             ("params", np.nan), ("params", np.inf)]
    Xs, zs, noise = [], [], []
    for where, bad in cases:
        Xb, zb = X.copy(), z.copy()
        if where == "y":
            zb[3] = bad
        elif where == "X":
            Xb[3, 1] = bad
        Xs.append(Xb)
        zs.append(zb)
        noise.append(bad if where == "params" else float(p.log_noise))

    def run(X, z, log_noise):
        q = p._replace(log_noise=log_noise)
        post = gp.posterior(q, X, z)
        return post, gp.predict(post, X[:4]), gp.fit(X, z, init=q, steps=3)

    post, pred, fit = jax.jit(jax.vmap(run))(np.stack(Xs), np.stack(zs), np.asarray(noise))
    want = [Reason.OK] + [Reason.BAD_INPUT] * (len(cases) - 1)
    np.testing.assert_array_equal(np.asarray(post.reason), want)
    np.testing.assert_array_equal(np.asarray(post.ok), [True] + [False] * (len(cases) - 1))
    np.testing.assert_array_equal(np.asarray(fit.info.reason), want)
    np.testing.assert_array_equal(np.asarray(fit.info.ok), np.asarray(post.ok))
    ok_rows = np.asarray(pred.ok)
    assert np.all(ok_rows[0]) and not np.any(ok_rows[1:]) and np.all(np.isnan(np.asarray(pred.mean)[1:]))
    # the fit's parameters stay finite (a start) unless the start itself was bad
    for k, (where, _) in enumerate(cases):
        if where != "params":
            assert all(np.all(np.isfinite(np.asarray(a)[k])) for a in jax.tree_util.tree_leaves(fit.params))
    # outside jit the same data raise, naming the argument
    for k, (where, _) in enumerate(cases[1:5], start=1):
        with pytest.raises(ValueError, match=f"^{where} "):
            gp.posterior(p, Xs[k], zs[k])


def test_status_fields_are_appended():
    """``reason`` comes last, so positional unpacking of the earlier fields still works."""
    assert gp.Posterior._fields[:-1] == ("params", "X", "mask", "chol", "chol_inv", "alpha", "jitter", "ok")
    assert gp.FitInfo._fields[:-1] == ("objective", "finite", "restart", "num_valid", "steps", "ok")
    assert gp.Posterior._fields[-1] == gp.FitInfo._fields[-1] == "reason"
    assert gp.Prediction._fields == ("mean", "var") and gp.Standardized._fields == ("z", "mean", "std")


# ------------------------------------------------------------ 3 / 5. standardize
def np_standardize(y):
    y = np.asarray(y, np.float64)
    return (y - y.mean()) / y.std(), y.mean(), y.std()


@pytest.mark.parametrize("y", [
    [1e30, -1e30, 0.0, 1.0],          # squares overflow float32
    [3e38, -3e38, -3e38, 1e38],       # so do sums
    [1e-30, 2e-30, 3e-30, 2.5e-30],   # squares underflow float32
    [1e-20, 1.5e-20, 4e-20],          # variance below float32's smallest normal
    [1.0, 1.0 + 2**-10, 1.0 - 2**-12],
])
def test_standardize_works_whenever_the_result_is_representable(y):
    """float32 against float64 NumPy: the relative errors of z and std are a few roundings
    of float32 (each of the O(1) operations on each value rounds once: 8 eps covers them
    and the pairwise sums of n <= 4 terms); the mean's error is relative to the spread."""
    y32 = np.asarray(y, np.float32)
    res = gp.standardize(y32)
    zr, mr, sr = np_standardize(y32)
    assert bool(res.ok) and int(res.reason) == Reason.OK
    np.testing.assert_allclose(np.asarray(res.z, np.float64), zr, rtol=0, atol=8 * EPS32 * np.abs(zr).max())
    np.testing.assert_allclose(float(res.std), sr, rtol=8 * EPS32)
    assert abs(float(res.mean) - mr) <= 8 * EPS32 * np.abs(np.asarray(y32, np.float64)).max()


def test_standardize_constant_data_up_to_rounding_give_std_one():
    for v in (0.3, 1 / 3, 1e6 + 0.1, -2.5e-30, 7e37):
        for n in (2, 7, 1000):
            y = np.full(n, v, np.float32)
            z, m, s = gp.standardize(y)
            assert float(s) == 1.0 and np.all(np.asarray(z) == 0.0)
            assert float(m) == float(np.float32(v))
    # values that differ by rounding (one unit in the last place) are constant too
    y = np.float32(0.3) + np.array([0, 1, -1, 0, 1], np.float32) * np.spacing(np.float32(0.3))
    z, m, s = gp.standardize(y)
    assert float(s) == 1.0 and np.all(np.asarray(z) == 0.0)
    # ... but a genuine variation well above that is scaled (here 64 units: 16x the threshold)
    y = np.float32(0.3) + np.array([0, 64, -64, 0], np.float32) * np.spacing(np.float32(0.3))
    z, _, s = gp.standardize(y)
    assert float(s) != 1.0
    np.testing.assert_allclose(np.asarray(z, np.float64), np_standardize(y)[0], atol=1e-5)


def test_standardize_status_inside_jit():
    y = np.array([1.0, np.nan, 3.0, 4.0])
    with pytest.raises(ValueError, match="y has 1 non-finite"):
        gp.standardize(y)
    res = jax.jit(gp.standardize)(y, np.array([True, True, True, False]))
    assert not bool(res.ok) and int(res.reason) == Reason.BAD_INPUT
    res = jax.jit(gp.standardize)(y, np.array([True, False, True, True]))   # NaN padded: inert
    np.testing.assert_allclose(np.asarray(res.z)[[0, 2, 3]], np_standardize([1.0, 3.0, 4.0])[0], rtol=1e-14)
    assert bool(res.ok) and float(res.z[1]) == 0.0
    batched = jax.vmap(gp.standardize)(np.stack([y, np.arange(4.0)]), np.ones((2, 4), bool))
    np.testing.assert_array_equal(np.asarray(batched.ok), [False, True])


# ------------------------------------------------------------ 4. ill-conditioned Gram matrices
@pytest.mark.parametrize("dtype, noise", [(np.float32, 1e-6), (np.float64, 1e-300)])
def test_posterior_of_identical_points_is_accurate(dtype, noise):
    """20 identical configurations: K = a 11' + s I, condition number kappa = (n a + s) / s,
    far beyond 1 / eps for s = noise. The posterior mean there is sum(y) a / (n a + s), the
    variance a s / (n a + s) (Sherman-Morrison). An ok posterior's factored matrix (s =
    noise + jitter) has kappa eps <= 1/64 by its pivot estimate, which is kappa (n - 1) / n
    here (smallest pivot s (n a + s) / ((n - 1) a + s)): 1/32 allows that and the pivots'
    rounding. A backward-stable solve is then off by at most kappa eps max|y| in the mean
    and kappa eps a in the variance (first order), on top of the jitter's own effect,
    which the closed form at s includes and which is checked against noise alone."""
    n, a = 20, 1.0
    eps = float(np.finfo(dtype).eps)
    X = np.full((n, 1), 0.5, dtype)
    run = jax.jit(lambda y: (lambda post: (post, gp.predict(post, X[:1])))(
        gp.posterior(gp.params(a, [0.3], noise, dtype=dtype), X, y)))
    for seed in range(8):
        y = np.random.default_rng(seed).normal(size=n).astype(dtype)
        post, (mean, var) = run(y)
        assert bool(post.ok)
        s = noise + float(post.jitter)
        kappa = (n * a + s) / s
        assert kappa * eps <= 1 / 32
        total = float(np.sum(y, dtype=np.float64))
        tol = kappa * eps * np.abs(y).max()
        np.testing.assert_allclose(float(mean[0]), total * a / (n * a + s), rtol=0, atol=tol)
        np.testing.assert_allclose(float(var[0]), a * s / (n * a + s), rtol=0, atol=kappa * eps * a)
        # the jitter is the least the dtype needs (not a coarse ladder step): the answer
        # with the noise alone is within the same rounding allowance
        exact = total * a / (n * a + noise)
        assert abs(float(mean[0]) - exact) <= 2 * tol and s < 1e-3 * a


def test_inaccurate_factor_is_reported_and_the_fit_posterior_is_refactorised():
    n = 20
    K = jnp.asarray(np.ones((n, n)) + 2e-6 * np.eye(n), jnp.float32)
    L, _, ok = gl.factor(K, None, 0.0, max_tries=0)
    assert bool(jnp.all(jnp.isfinite(L))) and not bool(ok)   # finite is not enough
    L, extra, ok = gl.factor(K, None, 0.0)
    assert bool(ok) and float(extra) > 0
    # The fit's posterior is built from the factor of its last evaluation (scale_parts): for
    # identical points in float32 at the noise floor 1e-6 that factor is inaccurate, and
    # the posterior is conditioned afresh with jitter: accurate as above (the closed form
    # with the prior mean m: m + a sum(z - m) / (n a + s)).
    rng = np.random.default_rng(4)
    z = rng.normal(size=n).astype(np.float32)
    X = np.full((n, 2), 0.25, np.float32)
    q = gp.params(1.0, [0.5, 0.5], 1e-6, mean=0.1, dtype=jnp.float32)   # log_noise: the ratio
    mask = jnp.ones(n, bool)
    profiled = jax.jit(gp_fit.lml_profiled_scale, static_argnums=(4, 5))
    from_factor = jax.jit(gp_core.posterior_from_scaled_factor)
    value, log_a, m, factor = profiled(q, jnp.asarray(X), jnp.asarray(z), mask, False, True)
    assert not bool(factor[2])
    p = gp.GPParams(log_a, q.log_lengthscales, log_a + q.log_noise, m)
    post = from_factor(p, jnp.asarray(X), jnp.asarray(z), mask, factor)
    assert bool(post.ok) and int(post.reason) == Reason.OK and float(post.jitter) > 10 * EPS32 * float(p.amplitude)
    amp, s, m = float(p.amplitude), float(p.noise) + float(post.jitter), float(p.mean)
    mean, _ = gp_core.predict(post, jnp.asarray(X[:1]))
    exact = m + amp * np.sum(z.astype(np.float64) - m) / (n * amp + s)
    # (1/64 of the residuals' scale, as above; the float32 inputs m, a, s round by eps32 each)
    np.testing.assert_allclose(float(mean[0]), exact, rtol=0, atol=(1 / 64 + 8 * EPS32) * np.abs(z - m).max())
    # an accurate factor is used as it is (no refactorisation: the base jitter only)
    q = q._replace(log_noise=jnp.log(jnp.float32(0.1)))
    value, log_a, m, factor = profiled(q, jnp.asarray(X), jnp.asarray(z), mask, False, True)
    p = gp.GPParams(log_a, q.log_lengthscales, log_a + q.log_noise, m)
    post = from_factor(p, jnp.asarray(X), jnp.asarray(z), mask, factor)
    assert bool(factor[2]) and bool(post.ok) and float(post.jitter) == float(gp_core.base_jitter(p, jnp.float32))


# ------------------------------------------------------------ 6. unsupported dtypes
def test_every_entry_point_rejects_unsupported_dtypes_naming_the_argument():
    X, z = smooth_study(n=6, dtype=np.float32)
    p = gp.params(1.0, [0.4, 0.6], 1e-2, dtype=jnp.float32)
    post = gp.posterior(p, X, z)
    for bad in (jnp.float16, jnp.bfloat16):
        p16 = jax.tree_util.tree_map(lambda a: a.astype(bad), p)
        cases = [
            (lambda: gp.params(1.0, [0.5], 0.1, dtype=bad), "dtype"),
            (lambda: gp.params(jnp.asarray(1.0, bad), [0.5], 0.1), "amplitude"),
            (lambda: gp.kernel(p16), "p.log_amplitude"),
            (lambda: gp.log_prior(p16), "p.log_amplitude"),
            (lambda: gp.standardize(z.astype(bad)), "y"),
            (lambda: gp.posterior(p16, X, z), "p.log_amplitude"),
            (lambda: gp.posterior(p, X.astype(bad), z), "X"),
            (lambda: gp.posterior(p, X, z.astype(bad)), "y"),
            (lambda: gp.log_marginal_likelihood(p16, X, z), "p.log_amplitude"),
            (lambda: gp.predict(post, X.astype(bad)), "Xq"),
            (lambda: gp.fit(X.astype(bad), z), "X"),
            (lambda: gp.fit(X, z.astype(bad)), "y"),
            (lambda: gp.fit(X, z, init=p16), "init.log_amplitude"),
        ]
        for call, name in cases:
            with pytest.raises(TypeError, match=f"^{name} .*(unsupported|float32 or float64)"):
                call()


# ------------------------------------------------------------ 7. batched vs single fits
def test_batched_and_single_float32_fits_agree_as_documented():
    """What gp.fit's docstring promises for vmap vs single calls (different programs) in
    float32, where the fits stop at the step cap wherever they stand. Measured with the
    float64 NumPy objective F at each stop's parameters: each stop lies its second-order
    gap g' H^-1 g / 2 above the minimum (g, H: float64 gradient and Hessian of F in psi),
    so the two F values differ by at most the sum of the gaps (twice that allowed for the
    higher-order terms). Each reported float32 objective is F at its parameters up to the
    float32 rounding 2 * 4 n kappa eps32 (|f| + n) (backward error of the factorisation,
    as in test_gp's rounding_reach), so the reported values agree within both. The float64
    promise (converged fits: psi within 2 sqrt(q) tol ||H^-1||) is
    test_gp.py::test_fit_vmapped_equals_loop_and_stops_early."""
    rng = np.random.default_rng(6)
    n = 16
    X = rng.uniform(size=(n, 2))
    y = np.sin(5 * X[:, 0]) + X[:, 1] ** 2 + 0.05 * rng.normal(size=n)
    z = (y - y.mean()) / y.std()
    f = objective64(X, z)
    X32, z32 = X.astype(np.float32), z.astype(np.float32)
    one = gp.fit(X32, z32)
    batch = jax.vmap(gp.fit)(np.stack([X32, X32]), np.stack([z32, z32]))
    two = jax.tree_util.tree_map(lambda a: a[1], batch)
    assert bool(one.info.ok) and bool(two.info.ok)
    F = [f(psi_of(fit.params)) for fit in (one, two)]
    gaps = [stop_gap(f, psi_of(fit.params))[0] for fit in (one, two)]
    assert abs(F[0] - F[1]) <= 2 * sum(gaps)
    K = np_matern52(X, X, float(one.params.amplitude), np.asarray(one.params.lengthscales, np.float64))
    kappa = np.linalg.cond(K + float(one.params.noise) * np.eye(n))
    rounding = 2 * 4 * n * kappa * EPS32 * (abs(float(one.info.objective)) + n)
    for fit, Fi in zip((one, two), F):
        assert abs(float(fit.info.objective) - Fi) <= rounding
    assert abs(float(one.info.objective) - float(two.info.objective)) <= 2 * sum(gaps) + 2 * rounding


# ------------------------------------------------------------ adversarial inputs
def test_out_of_cube_inputs_inside_jit_are_bad_input():
    """Inside jit a real row of X outside the unit cube is BAD_INPUT for the posterior and the
    fit (gp_fit.bad_input, its status), as a non-finite one is and as gp.predict already
    reported for its queries (before: ok True); a padded row outside it is inert; eagerly
    the same X raises naming it."""
    X, z = smooth_study(n=6, dtype=np.float64)
    p = gp.params(1.0, [0.4, 0.6], 1e-2)
    post = jax.jit(gp.posterior)
    fit_bad = jax.jit(gp_fit.bad_input)
    real, padded = np.ones(6, bool), np.arange(6) != 3
    assert bool(post(p, X, z, real).ok) and not bool(fit_bad(X, z, real, p))
    for bad in (1.5, -0.25):
        Xb = X.copy()
        Xb[3, 1] = bad
        assert int(post(p, Xb, z, real).reason) == Reason.BAD_INPUT
        assert bool(fit_bad(Xb, z, real, p)) and not bool(fit_bad(Xb, z, padded, p))
        leaves_equal(post(p, Xb, z, padded), post(p, X, z, padded))
        with pytest.raises(ValueError, match="^X must lie in the unit cube"):
            gp.posterior(p, Xb, z)


def test_log_marginal_likelihood_of_out_of_cube_rows_inside_jit_is_nan():
    """Inside jit a real row of X outside the unit cube makes the log marginal likelihood NaN,
    as a non-finite one does (eagerly it raises): before, it was a finite number, and with a
    warping the number of the clipped input (X = 1.7 gave the value of X = 1.0). A padded
    row outside the cube stays inert: the value of the real rows alone (NumPy oracle; one
    Cholesky of a 5 x 5 matrix in float64, so 1e-12 relative)."""
    X, z = smooth_study(n=6, dtype=np.float64)
    lml = jax.jit(gp.log_marginal_likelihood)
    real, padded = np.ones(6, bool), np.arange(6) != 3
    for p in (gp.params(1.0, [0.4, 0.6], 1e-2), gp.params(1.0, [0.4, 0.6], 1e-2, warp_a=2.0, warp_b=1.0)):
        assert np.isfinite(float(lml(p, X, z, real)))
        for bad in (1.7, -0.25):
            Xb = X.copy()
            Xb[3, 1] = bad
            assert np.isnan(float(lml(p, Xb, z, real)))
            if not p.warped:
                want = np_lml(X[padded], z[padded], 1.0, np.array([0.4, 0.6]), 1e-2 + 10 * EPS64)
                np.testing.assert_allclose(float(lml(p, Xb, z, padded)), want, rtol=1e-12)
            assert float(lml(p, Xb, z, padded)) == float(lml(p, X, z, padded))
            with pytest.raises(ValueError, match="^X must lie in the unit cube"):
                gp.log_marginal_likelihood(p, Xb, z)


def test_warp_of_out_of_cube_rows_inside_jit_is_nan():
    """gp.warp inside jit: a row outside the unit cube or not finite is NaN, as predict's
    query rows are (eagerly it raises); before, it was warped as if clipped to the cube
    (1.7 gave w(1) = 1). The other rows are the closed form w(x) = x'^2 (a = 2, b = 1)
    with x' = 2^-30 + (1 - 2^-31) x. The warping computes it as -expm1(b log1mexp(a log x')):
    the power carries |a log x'| <= 4.6 float64 eps of relative error (x = 0.1), the logs and
    exponentials a few eps more, so below 10 eps (2.2e-15): 4e-15 relative."""
    p = gp.params(1.0, [0.5, 0.5], 1e-2, warp_a=2.0, warp_b=1.0)
    X = np.array([[0.2, 0.5], [1.7, 0.5], [0.3, np.nan], [0.9, 0.1]])
    W = np.asarray(jax.jit(gp.warp)(p, X))
    assert np.all(np.isnan(W[1:3]))
    e = 2.0**-30
    np.testing.assert_allclose(W[[0, 3]], (e + (1 - 2 * e) * X[[0, 3]]) ** 2, rtol=4e-15)
    plain = np.asarray(jax.jit(gp.warp)(gp.params(1.0, [0.5, 0.5], 1e-2), X))
    assert np.all(np.isnan(plain[1:3])) and np.array_equal(plain[[0, 3]], X[[0, 3]])
    with pytest.raises(ValueError, match="^X must"):
        gp.warp(p, X[:2])


def test_bad_settings_name_the_argument():
    """gp.fit's key and optimizer, gp.params' mean: TypeError / ValueError naming them
    (before: JAX's 'invalid PRNG key data', "'str' object has no attribute 'init'", and a
    GPParams holding mean = inf)."""
    X, z = smooth_study(n=6, dtype=np.float64)
    with pytest.raises(TypeError, match="^key must be a PRNG key"):
        gp.fit(X, z, num_restarts=2, key=0)
    with pytest.raises(TypeError, match="^optimizer must be an optax"):
        gp.fit(X, z, optimizer="adam")
    with pytest.raises(ValueError, match="^mean must be finite"):
        gp.params(1.0, [0.5], 1e-2, mean=np.inf)


# ------------------------------------------------------------ derivatives through the posterior
def _fd(f, x, h):
    """Central differences of a float64 NumPy function of the array ``x`` (any shape)."""
    x = np.asarray(x, np.float64)
    g = np.empty(x.size)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        g[i] = (f(x + e.reshape(x.shape)) - f(x - e.reshape(x.shape))) / (2 * h)
    return g.reshape(x.shape)


def test_gradients_of_predictions_at_the_training_inputs_match_finite_differences():
    """jax.grad of gp.predict's mean and variance in the query points, the training inputs
    and the hyperparameters, against central differences of the NumPy posterior
    (_oracles.np_posterior, with gp's base jitter 10 eps a). Queries sit on training inputs,
    where the scaled distance is 0: autodiff through r = sqrt(r^2 + tiny) multiplied
    1 / (2r) = 3e153 by a difference that is 0 only when rounded exactly, and under jit (every
    public function is jitted) the gradient in the queries came out 0 (4.7 here) and the one in
    the training inputs wrong; reverse mode through the posterior's jitter loop (a
    while_loop) raised. Padded rows (junk, NaN) get exactly 0 and change nothing.
    Tolerance: h = 1e-5 leaves a truncation error h^2 / 6 |f'''| with |f'''| below
    amp (sqrt5 / l)^3 ~ 2e2 here (l >= 0.4), about 3e-9 per unit of input, and a
    rounding error eps |f| / h ~ 1e-10; 1e-6 is far above both and far below the O(1) errors."""
    rng = np.random.default_rng(3)
    n, d = 6, 2
    X = rng.uniform(0.1, 0.9, (n, d))
    y = rng.normal(size=n)
    amp, ls, noise, mean = 1.3, np.array([0.4, 0.7]), 1e-2, 0.1
    p = gp.params(amp, ls, noise, mean)
    Xq = X[:3].copy()
    w = np.array([[0.3, -1.0, 0.7], [1.0, 0.5, -0.2]])  # weights of the means, the variances

    def loss_np(Xq, X=X, amp=amp, ls=ls, noise=noise):
        m, v = np_posterior(X, y, amp, ls, noise, mean, jitter=10 * EPS64 * amp)(Xq)
        return w[0] @ m + w[1] @ v

    pad = np.array([True] * n + [False] * 2)
    X_pad = np.concatenate([X, [[np.nan, 0.5], [3.0, -1e30]]])
    y_pad = np.concatenate([y, [np.nan, 1e30]])

    def loss(p, X, Xq):
        m, v = gp.predict(gp.posterior(p, X, y_pad, pad), Xq)
        return jnp.dot(w[0], m) + jnp.dot(w[1], v)

    g_p, g_X, g_q = jax.grad(loss, argnums=(0, 1, 2))(p, X_pad, Xq)
    assert np.all(np.asarray(g_X[n:]) == 0)
    np.testing.assert_allclose(g_q, _fd(loss_np, Xq, 1e-5), atol=1e-6)
    np.testing.assert_allclose(g_X[:n], _fd(lambda X: loss_np(Xq, X=X), X, 1e-5), atol=1e-6)
    t = np.array([np.log(amp), *np.log(ls), np.log(noise)])
    want = _fd(lambda t: loss_np(Xq, amp=np.exp(t[0]), ls=np.exp(t[1:3]), noise=np.exp(t[3])), t, 1e-5)
    np.testing.assert_allclose([g_p.log_amplitude, *g_p.log_lengthscales, g_p.log_noise], want, atol=1e-6)
    # forward mode and vmap agree with reverse mode: other programs for the same derivative,
    # apart by the rounding of the solves with the Gram matrix, whose condition number is at
    # most (n amp + noise) / noise ~ 8e2 here: ~ kappa n eps64 ~ 1.4e-12 relative; rtol 1e-10
    fwd = jax.jacfwd(loss, argnums=2)(p, X_pad, Xq)
    np.testing.assert_allclose(fwd, g_q, rtol=1e-10, atol=1e-12)
    batched = jax.vmap(jax.grad(loss, argnums=2), in_axes=(None, None, 0))(p, X_pad, jnp.stack([Xq, Xq]))
    np.testing.assert_allclose(batched[1], g_q, rtol=1e-10, atol=1e-12)


def test_gradient_of_a_jittered_posterior_holds_its_jitter_fixed():
    """Identical inputs with a tiny noise in float32 need the jitter ladder (Posterior.jitter
    far above the base jitter 10 eps a); jax.grad in the hyperparameters then runs through
    it (it raised: reverse mode of a while_loop) and is the derivative of the posterior with
    that jitter held fixed: central differences (h = 1e-5, float64) of the NumPy posterior
    at noise + post.jitter. K = a C + (noise + jitter) I has condition kappa ~ 4 / 5e-5 ~ 1e5,
    so float32 keeps at worst ~kappa eps32 ~ 1e-2 of relative accuracy (4e-4 seen): rtol 1e-2."""
    f32 = np.float32
    X = np.array([[0.3, 0.3], [0.3, 0.3], [0.7, 0.2], [0.7, 0.2]])
    y = np.array([0.1, 0.2, -0.5, -0.4])
    Xq = np.array([[0.5, 0.5], [0.31, 0.3]])
    p = gp.params(1.0, [0.5, 0.5], 1e-7, dtype=jnp.float32)
    post = gp.posterior(p, X.astype(f32), y.astype(f32))
    jitter = float(post.jitter)
    assert bool(post.ok) and jitter > 10 * 10 * EPS32

    def loss(t):
        q = p._replace(log_amplitude=t[0], log_lengthscales=t[1:3])
        m, v = gp.predict(gp.posterior(q, X.astype(f32), y.astype(f32)), Xq.astype(f32))
        return jnp.sum(m) + jnp.sum(v)

    def loss_np(t):
        m, v = np_posterior(X, y, np.exp(t[0]), np.exp(t[1:3]), float(f32(1e-7)), jitter=jitter)(Xq)
        return np.sum(m) + np.sum(v)

    t = np.array([0.0, np.log(0.5), np.log(0.5)])
    g = np.asarray(jax.grad(loss)(t.astype(f32)))
    assert g.dtype == np.float32 and np.all(np.isfinite(g))
    np.testing.assert_allclose(g, _fd(loss_np, t, 1e-5), rtol=1e-2, atol=1e-2 * np.max(np.abs(g)))


def test_fit_flags_must_be_bools():
    # a string is truthy: fit_mean="no", prior="no" and warping="no" once ran the fit of True
    X, y = smooth_study(n=8)
    for name in ("fit_mean", "prior", "warping"):
        with pytest.raises(TypeError, match=f"{name} must be a bool"):
            gp.fit(X, y, **{name: "no"})
    assert gp.fit(X, y, steps=2, fit_mean=np.bool_(False)).info.steps >= 1
