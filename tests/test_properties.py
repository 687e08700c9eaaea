"""Property-based tests over the public API (hypothesis).

For random sizes, masks and injected bad values, each call either raises a ValueError /
TypeError naming the argument (concrete inputs), or returns a status flag (inside jit),
and the entries of the real rows equal those of the compacted problem (padded rows are
inert whatever they hold). Fixed capacities keep one compiled program per test.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxstop import bos, confidence, gp, regret

CAP, D = 10, 2
GARBAGE = [np.nan, np.inf, -np.inf, 1e30, -1e30, 7.0, -3.0]
SETTINGS = settings(max_examples=20, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow])


def problem(seed, n):
    """A GP data set of ``n`` real rows padded to ``CAP`` (float64)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(CAP, D))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 + 0.01 * rng.normal(size=CAP)
    mask = np.arange(CAP) < n
    return X, y, mask


P = gp.params(1.0, [0.4, 0.6], 1e-2, dtype=jnp.float64)
XQ = np.random.default_rng(99).uniform(size=(16, D))
_predict_padded = jax.jit(lambda X, y, m: gp.predict(gp.posterior(P, X, y, m), XQ))
_posterior_ok = jax.jit(lambda X, y, m: gp.posterior(P, X, y, m).ok)


def gp_rounding(X, n, scale):
    """Reach of rounding between the padded (CAP) and the exact-size (n) solves: a few
    units of eps times the condition number of the real Gram block and its size, times
    the scale of the predictions."""
    K = np.asarray(gp.kernel(P)(jnp.asarray(X[:n]), jnp.asarray(X[:n]))) + np.exp(float(P.log_noise)) * np.eye(n)
    return 8 * np.linalg.cond(K) * n * np.finfo(np.float64).eps * scale


@SETTINGS
@given(n=st.integers(2, CAP), seed=st.integers(0, 50), bad=st.sampled_from(GARBAGE),
       bad_y=st.sampled_from(GARBAGE))
def test_gp_padded_rows_are_inert(n, seed, bad, bad_y):
    X, y, mask = problem(seed, n)
    X[~mask], y[~mask] = bad, bad_y
    mean, var = _predict_padded(X, y, mask)
    ref_mean, ref_var = gp.predict(gp.posterior(P, X[:n], y[:n]), XQ)
    scale = 1.0 + float(np.max(np.abs(y[:n])))
    tol = gp_rounding(X, n, scale)
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=tol)
    np.testing.assert_allclose(var, ref_var, rtol=0, atol=tol)
    # eagerly too: padded garbage is allowed, and inert
    eager_mean, _ = gp.predict(gp.posterior(P, X, y, mask), XQ)
    np.testing.assert_allclose(eager_mean, ref_mean, rtol=0, atol=tol)


@SETTINGS
@given(n=st.integers(2, CAP), seed=st.integers(0, 50), row=st.integers(0, CAP - 1),
       bad=st.sampled_from([np.nan, np.inf, -np.inf]), in_x=st.booleans())
def test_gp_bad_real_rows_raise_or_give_status(n, seed, row, bad, in_x):
    X, y, mask = problem(seed, n)
    row = row % n
    if in_x:
        X[row, 0] = bad
    else:
        y[row] = bad
    with pytest.raises(ValueError, match="X" if in_x else "y"):
        gp.posterior(P, X, y, mask)
    assert not bool(_posterior_ok(X, y, mask))


_std_padded = jax.jit(lambda y, m: gp.standardize(y, m))


@SETTINGS
@given(n=st.integers(1, CAP), seed=st.integers(0, 50), bad=st.sampled_from(GARBAGE),
       log_scale=st.floats(-30, 30))
def test_standardize_padded_rows_inert_at_any_scale(n, seed, bad, log_scale):
    # z of the real rows is scale-free: the same for y and for 10^s * y up to rounding
    # (a few eps per operation on values of order one after scaling).
    rng = np.random.default_rng(seed)
    y = rng.normal(size=CAP) * 10.0 ** log_scale
    mask = np.arange(CAP) < n
    y[~mask] = bad
    z, mean, std = _std_padded(y, mask)
    z_ref, _, _ = gp.standardize(y[:n] / 10.0 ** log_scale)
    np.testing.assert_allclose(np.asarray(z)[:n], z_ref, rtol=0, atol=64 * np.finfo(np.float64).eps * CAP)
    assert np.all(np.asarray(z)[n:] == 0) and np.isfinite(float(std)) and float(std) > 0


_keep_padded = jax.jit(lambda mu, s, ds, m: confidence.keep_count(mu, s, ds, 6.0, mask=m))


@SETTINGS
@given(n=st.integers(2, CAP), seed=st.integers(0, 50), bad=st.sampled_from(GARBAGE))
def test_keep_count_padded_entries_inert(n, seed, bad):
    # The same compiled program with benign and with garbage padding: padded entries are
    # replaced before any arithmetic, so every field must be bit-identical (the padded vs
    # exact-size comparison, two programs, is in test_confidence with its tolerances).
    rng = np.random.default_rng(seed)
    mu = rng.uniform(0.2, 0.4, CAP)
    sigma = rng.uniform(0.01, 0.05, CAP)
    delta = rng.uniform(0.0, 0.003, CAP)
    mask = np.arange(CAP) < n
    clean = _keep_padded(mu, sigma, delta, mask)
    mu[~mask], sigma[~mask], delta[~mask] = bad, bad, bad
    dirty = _keep_padded(mu, sigma, delta, mask)
    assert bool(clean.ok) and bool(dirty.ok)
    for x, y in zip(jax.tree_util.tree_leaves(clean), jax.tree_util.tree_leaves(dirty)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert not np.asarray(dirty.keep)[n:].any() and int(dirty.num_valid) == n


_cv_padded = jax.jit(lambda f, m: regret.cv_threshold(f, m))


@SETTINGS
@given(n=st.integers(2, CAP), seed=st.integers(0, 50), bad=st.sampled_from(GARBAGE))
def test_cv_threshold_padded_folds_inert(n, seed, bad):
    folds = np.random.default_rng(seed).uniform(0.1, 0.3, CAP)
    mask = np.arange(CAP) < n
    folds[~mask] = bad
    got = _cv_padded(folds, mask)
    ref = regret.cv_threshold(folds[:n])
    # a standard deviation of n <= CAP values in two programs (masked and compact sums):
    # each pass rounds by at most ~n eps relative, the square root halves it; 16 CAP eps covers both
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=16 * CAP * np.finfo(np.float64).eps)


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
def test_half_precision_is_refused_naming_the_argument(dtype):
    X, y, mask = problem(0, 6)
    half = lambda a: jnp.asarray(a, dtype)  # noqa: E731
    calls = [
        ("X", lambda: gp.fit(half(X), y, mask)),
        ("y", lambda: gp.posterior(P, X, half(y), mask)),
        ("y", lambda: gp.standardize(half(y))),
        ("mu", lambda: confidence.keep_count(half(y), np.ones(CAP), np.zeros(CAP), 3.0)),
        ("mu", lambda: confidence.prob_best(half(y), np.ones(CAP))),
        ("fold_scores", lambda: regret.cv_threshold(half(y))),
        ("X", lambda: regret.fit_regret_bound(jax.random.key(0), half(X), y, mask)),
    ]
    for name, call in calls:
        with pytest.raises(TypeError, match=name):
            call()


_bound_padded = jax.jit(lambda X, y, m: regret.regret_bound(gp.posterior(P, X, y, m), X, m, 64, 2.0,
                                                            key=jax.random.key(0)))


@SETTINGS
@given(n=st.integers(2, CAP), seed=st.integers(0, 50), bad=st.sampled_from(GARBAGE),
       bad_y=st.sampled_from(GARBAGE))
def test_regret_bound_padded_rows_inert(n, seed, bad, bad_y):
    # The same compiled program with benign and with garbage padding: every field of the
    # bound must be bit-identical (padded rows are replaced before any arithmetic).
    X, y, mask = problem(seed, n)
    clean = _bound_padded(X, y, mask)
    X[~mask], y[~mask] = bad, bad_y
    dirty = _bound_padded(X, y, mask)
    assert bool(clean.ok)
    for a, b in zip(jax.tree_util.tree_leaves(clean), jax.tree_util.tree_leaves(dirty)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


_solve = jax.jit(lambda prefix, best, k1, k2, cost: bos.solve(
    jax.random.key(0), prefix, best, 20, k1, k2, cost, num_paths=2_000, chunk_size=2_000, fit_steps=50))
_GOOD = {"best": 0.3, "k1": 100.0, "k2": 99.0, "cost": 1.0}
_BAD = {"best": [np.nan, np.inf, -0.5, 1.5], "k1": [np.nan, -1.0, np.inf], "k2": [np.nan, -1.0],
        "cost": [np.nan, -1.0]}


@SETTINGS
@given(arg=st.sampled_from(sorted(_BAD)), pick=st.integers(0, 3), bad_epoch=st.integers(-1, 7))
def test_bos_bad_values_inside_jit_give_a_void_table(arg, pick, bad_epoch):
    # A bad scalar (or a NaN epoch of the prefix) inside jit: the table says not ok and its
    # every action is "continue" - never a stop decided from garbage.
    prefix = np.array([0.62, 0.48, 0.41, 0.37, 0.345, 0.33, 0.32, 0.312])
    values = dict(_GOOD)
    if bad_epoch >= 0:
        prefix[bad_epoch] = np.nan
    else:
        values[arg] = _BAD[arg][pick % len(_BAD[arg])]
    table = _solve(prefix, values["best"], values["k1"], values["k2"], values["cost"])
    assert not bool(table.ok)
    assert np.all(np.asarray(table.actions) == bos.ACTION_FORCED_CONTINUE)
