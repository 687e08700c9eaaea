"""Reliability of jaxstop.regret: the status of every result, NaN / inf on real and padded
rows, the domain of beta, unsupported dtypes.

Oracles: closed forms (beta; Eq. 9-10 in NumPy; EI / PI from scipy on the dense NumPy
posterior of ``_oracles``), the compacted problem (padded rows removed), and the exact
equivariance of the whole fit under scaling by a power of two (such a scaling is exact in
binary floating point, so the standardised problem is bit for bit the same and every
quantity in the units of ``y`` scales exactly, until it leaves the dtype's range).
Same-program comparisons (garbage against clean padding) are exact.
"""

import functools
import math
import types

import chex
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import scipy.stats

from _compiles import count_compilations
from _oracles import np_eq8, np_posterior
from jaxstop import gp, regret
from jaxstop._src import regret_bound as _rb
from jaxstop._src.status import Reason
from jaxstop.regret import _replay

N, D = 12, 2
KEY = jax.random.key(3)
FIT = dict(min_points=6, options=regret.FitOptions(fit_steps=4, refine_steps=2))
GARBAGE = (np.nan, np.inf, -np.inf, 1e300)


def fit_data():
    rng = np.random.default_rng(5)
    X = rng.uniform(size=(N, D))
    q = np.sum((X - 0.3) ** 2, axis=1)
    cand = rng.uniform(size=(32, D))
    # Values in (-1, 1) whose LCB reaches below -1 (checked in the test).
    y = -0.9 + 0.3 * q / q.max() + 0.05 * np.random.default_rng(6).normal(size=N)
    return X, y, cand


@functools.lru_cache(maxsize=None)
def fit_traced():
    """fit_regret_bound inside jit: one program for every fit check below."""
    _, _, cand = fit_data()
    return jax.jit(lambda X, y, m: regret.fit_regret_bound(KEY, X, y, m, candidates=cand, **FIT))


def assert_status_consistent(fb):
    """ok holds only with every floating field finite; otherwise bound is +inf and a reason is given."""
    leaves = jax.tree_util.tree_leaves(fb)
    finite = all(bool(jnp.all(jnp.isfinite(a))) for a in leaves if jnp.issubdtype(a.dtype, jnp.inexact))
    if bool(fb.ok):
        assert finite and int(fb.reason) == Reason.OK
    else:
        assert float(fb.bound.bound) == np.inf and int(fb.reason) != Reason.OK


def without_status(fb):
    return fb._replace(bound=fb.bound._replace(bound=0.0, ok=False, reason=0))


# ------------------------------------------------------------------ fit_regret_bound
def test_fit_scales_exactly_by_powers_of_two_until_unrepresentable():
    X, y, _ = fit_data()
    f, real = fit_traced(), np.ones(N, bool)
    small = f(X, y, real)
    assert bool(small.ok) and small.bound.reason.dtype == jnp.int32
    # About 1.3e30: every quantity in the units of y is the small one times 2^100, exactly.
    big = f(X, np.ldexp(y, 100), real)
    assert bool(big.ok)
    for name in ("bound", "ucb_min", "lcb_min", "lcb_min_grid"):
        assert float(getattr(big.bound, name)) == np.ldexp(float(getattr(small.bound, name)), 100), name
    assert float(big.y_std) == np.ldexp(float(small.y_std), 100)
    chex.assert_trees_all_equal(big.params, small.params)
    # Times 2^1024 the values are still finite (|y| < 1) but the LCB (< -1) is beyond the
    # float64 range: the result must say so instead of ok with -inf inside.
    assert np.abs(y).max() < 1 and float(small.bound.lcb_min) < -1
    huge_y = np.ldexp(y, 1024)
    assert np.all(np.isfinite(huge_y))
    huge = f(X, huge_y, real)
    assert not bool(huge.ok) and int(huge.reason) == Reason.UNREPRESENTABLE
    assert float(huge.bound.bound) == np.inf
    assert float(huge.bound.ucb_min) == np.ldexp(float(small.bound.ucb_min), 1024)  # representable: exact
    for fb in (small, big, huge):
        assert_status_consistent(fb)


def test_fit_padded_rows_are_inert_and_real_non_finite_rows_are_bad_input():
    X, y, cand = fit_data()
    f = fit_traced()
    mask = np.ones(N, bool)
    pad = [2, 7, 9, 10]
    mask[pad] = False
    Xc, yc = X.copy(), y.copy()
    Xc[pad], yc[pad] = 0.0, 0.0
    Xg, yg = X.copy(), y.copy()
    for i, g in zip(pad, GARBAGE):
        Xg[i], yg[i] = g, g
    clean = f(Xc, yc, mask)
    assert bool(clean.ok) and not bool(jnp.any(clean.top[np.asarray(pad)]))
    chex.assert_trees_all_equal(f(Xg, yg, mask), clean)
    # A non-finite value on a real row (traced): the row is left out, as if padded, and
    # the result says BAD_INPUT.
    for g in GARBAGE[:3]:
        yb, Xb = y.copy(), X.copy()
        yb[pad[0]] = g
        Xb[pad[1], 1] = g
        m2 = np.ones(N, bool)
        for Xi, yi, row in ((X, yb, pad[0]), (Xb, y, pad[1])):
            bad = f(Xi, yi, m2)
            ref = f(X, y, m2 & (np.arange(N) != row))
            assert not bool(bad.ok) and int(bad.reason) == Reason.BAD_INPUT
            chex.assert_trees_all_equal(without_status(bad), without_status(ref))
            assert_status_consistent(bad)
    # ... and eagerly a ValueError naming the argument.
    yb = y.copy()
    yb[3] = np.nan
    with pytest.raises(ValueError, match=r"^y has 1 non-finite"):
        regret.fit_regret_bound(KEY, X, yb, candidates=cand, **FIT)


def test_fit_without_real_dimensions_needs_beta_size():
    X, y, cand = fit_data()
    with pytest.raises(ValueError, match="dim_mask marks no real dimension"):
        regret.fit_regret_bound(KEY, X, y, dim_mask=np.zeros(D, bool), candidates=cand, **FIT)


# ---------------------------------------------------------------------------- beta
def test_fit_padded_dimensions_are_inert():
    """A column that dim_mask marks padded changes nothing, whatever it holds (a hyperparameter
    left out, values outside the cube, NaN): the bound is that of the real column, Eq. (8) of the
    dense NumPy GP with the fitted parameters and beta of one dimension (rounding: 1e-9)."""
    X, y, cand = fit_data()
    dm = np.array([True, False])
    fit = lambda X_: regret.fit_regret_bound(KEY, X_, y, dim_mask=dm, candidates=cand, **FIT)  # noqa: E731
    Xz = X.copy()
    Xz[:, 1] = 0.0
    zero = fit(Xz)
    assert bool(zero.ok)
    for g in (X[:, 1], 7.0, np.nan):
        Xg = X.copy()
        Xg[:, 1] = g
        chex.assert_trees_all_equal(fit(Xg), zero)
        # under the caller's jit the fit is another compiled program: float64 rounding (~1e-16)
        # carried through a BFGS fit whose optimum is well conditioned moves it far below 1e-9
        chex.assert_trees_all_close(jax.jit(fit)(jnp.asarray(Xg)), zero, rtol=1e-9, atol=1e-12)
    p, top = zero.params, np.asarray(zero.top)
    yt = y[top]
    z = (yt - yt.mean()) / yt.std()
    predict = np_posterior(X[top][:, :1], z, math.exp(float(p.log_amplitude)),
                           np.exp(np.asarray(p.log_lengthscales))[:1], math.exp(float(p.log_noise)), float(p.mean))
    t = int(zero.num_top)
    beta = 0.2 * 2 * math.log(t**2 * math.pi**2 / (6 * 0.1))  # |Gamma| = 1 real dimension
    assert float(zero.beta) == pytest.approx(beta, rel=1e-12)
    # the dense NumPy posterior against the library's, both float64 with the same parameters: the
    # difference is rounding times the Gram matrix's condition (noise-regularised), far below 1e-9
    _, ucb, lcb = np_eq8(predict, X[top][:, :1], cand[:, :1], beta)
    assert float(zero.bound.ucb_min) == pytest.approx(ucb * yt.std() + yt.mean(), rel=1e-9)
    assert float(zero.bound.lcb_min_grid) == pytest.approx(lcb * yt.std() + yt.mean(), rel=1e-9)


def test_beta_domain_concrete_raises_traced_gives_nan():
    for t in (0.0, -2.0, np.nan, np.inf):
        with pytest.raises(ValueError, match=r"^t must be"):
            regret.beta(t, 3.0)
        with pytest.raises(ValueError, match=r"^size must be"):
            regret.beta(5.0, t)
    f = jax.jit(regret.beta)
    t = jnp.array([-2.0, 0.0, np.nan, np.inf, 0.5, 7.0])
    got = np.asarray(f(t, 3.0))
    assert np.all(np.isnan(got[:4]))
    want = [0.2 * 2 * math.log(3 * s * s * math.pi**2 / (6 * 0.1)) for s in (0.5, 7.0)]
    # one log and four products in float64: a few ulps of a value of order 1-10
    np.testing.assert_allclose(got[4:], want, rtol=1e-14)
    assert np.all(np.isnan(np.asarray(f(2.0, jnp.array([0.0, -1.0, np.nan])))))
    assert np.isfinite(float(f(2.0, 1.0)))


# ------------------------------------------------------------ regret_bound (Eq. 8)
AMP, LS, NOISE = 1.0, np.array([0.3, 0.5]), 1e-2


@functools.lru_cache(maxsize=None)
def bound_case():
    rng = np.random.default_rng(8)
    X = rng.uniform(size=(8, D))
    y = np.sin(4 * X[:, 0]) + X[:, 1]
    post = gp.posterior(gp.params(AMP, LS, NOISE), X, y)
    return X, y, post, rng.uniform(size=(64, D))


@functools.lru_cache(maxsize=None)
def bound_traced():
    return jax.jit(lambda post, Xe, m, c, b: regret.regret_bound(post, Xe, m, c, b))


def test_regret_bound_status_padding_and_closed_form():
    X, y, post, cand = bound_case()
    f = bound_traced()
    beta = 2.0
    # 8 real rows and 3 padded ones, holding zeros or garbage: the same result.
    mask = np.r_[np.ones(8, bool), np.zeros(3, bool)]
    Xe = np.vstack([X, np.zeros((3, D))])
    Xg = np.vstack([X, np.array([[np.nan, 0.5], [np.inf, -np.inf], [1e300, 2.0]])])
    rb = f(post, Xe, mask, cand, beta)
    assert bool(rb.ok) and int(rb.reason) == Reason.OK
    chex.assert_trees_all_equal(f(post, Xg, mask, cand, beta), rb)
    # The compacted problem by the dense NumPy GP (float64; K's condition number is below
    # 1 + 8 / noise = 801, so predictions agree to ~801 * 8 * eps = 1.4e-12).
    want = np_eq8(np_posterior(X, y, AMP, LS, NOISE), X, cand, beta)
    np.testing.assert_allclose([float(rb.bound), float(rb.ucb_min), float(rb.lcb_min)], want, atol=1e-10)
    # The status field is appended: the old fields unpack by position as before.
    bound, ucb_min, lcb_min, lcb_grid, x_lcb, x_ucb, ok = rb[:7]
    assert rb._fields[-1] == "reason" and bool(ok) and float(bound) == float(rb.bound)

    def expect(res, reason):
        assert not bool(res.ok) and int(res.reason) == reason and float(res.bound) == np.inf

    Xn = Xe.copy()
    Xn[3, 0] = np.nan
    expect(f(post, Xn, mask, cand, beta), Reason.BAD_INPUT)
    cn = cand.copy()
    cn[5, 1] = np.inf
    expect(f(post, Xe, mask, cn, beta), Reason.BAD_INPUT)
    for b in (-1.0, np.nan):
        expect(f(post, Xe, mask, cand, b), Reason.BAD_INPUT)
    expect(f(post, Xe, np.zeros(11, bool), cand, beta), Reason.EMPTY)
    failed = post._replace(ok=jnp.asarray(False), reason=jnp.asarray(int(Reason.ILL_CONDITIONED), jnp.int32))
    expect(f(failed, Xe, mask, cand, beta), Reason.ILL_CONDITIONED)
    # Eagerly: ValueError naming the argument.
    for args, name in (((Xn, mask, cand, beta), "X_eval"), ((Xe, mask, cn, beta), "candidates"),
                       ((Xe, mask, cand, np.nan), "beta"), ((Xe, mask, cand, -1.0), "beta")):
        with pytest.raises(ValueError, match=rf"^{name} must be"):
            regret.regret_bound(post, *args)


def test_confidence_bounds_nan_where_undefined():
    X, y, post, cand = bound_case()
    f = jax.jit(regret.confidence_bounds)
    Xq = cand[:5].copy()
    lcb, ucb = f(post, Xq, 2.0)
    m, v = np_posterior(X, y, AMP, LS, NOISE)(Xq)
    np.testing.assert_allclose(np.asarray(lcb), m - np.sqrt(2.0 * v), atol=1e-10)  # as in the test above
    Xq[2, 1] = np.nan
    lcb_n, ucb_n = f(post, Xq, 2.0)
    assert np.isnan(lcb_n[2]) and np.isnan(ucb_n[2])
    keep = np.arange(5) != 2
    np.testing.assert_array_equal(np.asarray(lcb_n)[keep], np.asarray(lcb)[keep])
    for b in (-1.0, np.nan):
        assert np.all(np.isnan(np.asarray(f(post, cand[:5], b))))
    assert np.all(np.isnan(np.asarray(f(post._replace(ok=jnp.asarray(False)), cand[:5], 2.0))))
    with pytest.raises(ValueError, match=r"^X must be finite"):
        regret.confidence_bounds(post, Xq, 2.0)


# ------------------------------------------------------------------------ EI and PI
def test_ei_pi_best_and_rows_that_are_not_finite():
    X, y, post, cand = bound_case()
    Xq, best = cand[:6].copy(), float(np.min(y))
    m, v = np_posterior(X, y, AMP, LS, NOISE)(Xq)
    s = np.sqrt(v)
    z = (best - m) / s
    ei_want = s * (z * scipy.stats.norm.cdf(z) + scipy.stats.norm.pdf(z))
    pi_want = scipy.stats.norm.cdf(z)
    # dense-GP agreement as above (1.4e-12 in mu, sigma); EI and PI are 1-Lipschitz in both
    np.testing.assert_allclose(np.asarray(regret.expected_improvement(post, Xq, best)), ei_want, atol=1e-10)
    np.testing.assert_allclose(np.asarray(regret.probability_of_improvement(post, Xq, best)), pi_want, atol=1e-10)
    for fn in (regret.expected_improvement, regret.probability_of_improvement):
        for b in (np.nan, np.inf, -np.inf):
            with pytest.raises(ValueError, match=r"^best must be finite"):
                fn(post, Xq, b)
        Xn = Xq.copy()
        Xn[1, 0] = np.nan
        with pytest.raises(ValueError, match=r"^X must be finite"):
            fn(post, Xn, best)
        f = jax.jit(fn)
        ref = np.asarray(f(post, Xq, best))
        for b in (np.nan, np.inf, -np.inf):
            assert np.all(np.isnan(np.asarray(f(post, Xq, b))))
        got = np.asarray(f(post, Xn, best))
        assert np.isnan(got[1])
        np.testing.assert_array_equal(np.delete(got, 1), np.delete(ref, 1))  # same program
        assert np.all(np.isnan(np.asarray(f(post._replace(ok=jnp.asarray(False)), Xq, best))))
    # The zero-variance branch: a NaN best gave PI 0 and EI max(NaN, 0) before.
    zero = jnp.zeros(2)
    for g in (_rb.ei, _rb.pi):
        assert np.all(np.isnan(np.asarray(g(jnp.array([0.0, 1.0]), zero, jnp.nan))))
        assert np.all(np.isnan(np.asarray(g(jnp.array([0.0, 1.0]), jnp.array([jnp.nan, -1.0]), 0.5))))
    np.testing.assert_array_equal(np.asarray(_rb.pi(jnp.array([0.0, 1.0]), zero, 0.5)), [1.0, 0.0])
    np.testing.assert_array_equal(np.asarray(_rb.ei(jnp.array([0.0, 1.0]), zero, 0.5)), [0.5, 0.0])


# ---------------------------------------------------------------------- cv_threshold
def np_threshold(scores, mask, ddof=0):
    """Eq. (9)-(10) on the real folds; ``ddof = 0``: s^2 with 1/k (Algorithm 1, line 11)."""
    x = scores[mask]
    k = len(x)
    return math.sqrt((1 / k + 1 / (k - 1)) * np.var(x, ddof=ddof))


def test_cv_threshold_padded_folds_inert_real_nan_is_nan():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(5, 6))
    mask = rng.uniform(size=(5, 6)) < 0.7
    mask[:, :2] = True
    garbage = scores.copy()
    pads = np.argwhere(~mask)
    for j, (r, c) in enumerate(pads):
        garbage[r, c] = GARBAGE[j % 4]
    want = [np_threshold(scores[i], mask[i]) for i in range(5)]
    f = jax.jit(lambda s, m: regret.cv_threshold(s, m))
    # sums of at most 6 float64 terms, a square root: a few ulps (the two sides are
    # different programs: NumPy's pairwise sums, XLA's reductions)
    np.testing.assert_allclose(np.asarray(regret.cv_threshold(garbage, mask)), want, rtol=1e-13)
    ref = np.asarray(f(garbage, mask))
    np.testing.assert_allclose(ref, want, rtol=1e-13)
    for g in GARBAGE[:3]:
        bad = garbage.copy()
        bad[3, 0] = g  # a real fold
        got = np.asarray(f(bad, mask))
        assert np.isnan(got[3])
        np.testing.assert_array_equal(np.delete(got, 3), np.delete(ref, 3))  # same program
        with pytest.raises(ValueError, match=r"^fold_scores has 1 non-finite"):
            regret.cv_threshold(bad, mask)
    # Fewer than 2 real folds: 0 (traced), a ValueError (concrete), whatever the padding holds.
    one = mask.copy()
    one[1] = False
    one[1, 0] = True  # a finite fold; the others hold garbage or finite scores, now padded
    assert float(f(garbage, one)[1]) == 0.0
    with pytest.raises(ValueError, match="at least 2 real folds"):
        regret.cv_threshold(garbage, one)


def test_replay_threshold_ignores_folds_of_padded_evaluations():
    rng = np.random.default_rng(4)
    T, k = 6, 4
    values = rng.uniform(size=T)
    folds = values[:, None] + 0.1 * rng.normal(size=(T, k))
    mask = np.ones(T, bool)
    mask[[0, 3]] = False
    folds[[0, 3]] = np.nan  # padded evaluations, their folds marked real by fold_mask
    cfg = types.SimpleNamespace(lag=0, test_train_ratio=None, ddof=1, ties_last=False)
    fold_mask = np.ones((T, k), bool)
    _, incumbent, best, num_eval, thr, var, std = _replay._replay_prefix(
        jnp.zeros((T, 1)), jnp.asarray(values), jnp.asarray(folds), jnp.asarray(mask), jnp.asarray(fold_mask), cfg)
    # Row 0 has no real evaluation yet (threshold of no folds: 0); later rows use the real
    # incumbent's folds (Eq. 9-10 in NumPy).
    assert float(thr[0]) == 0.0 and float(var[0]) == 0.0 and int(num_eval[0]) == 0
    for t in range(1, T):
        i = int(incumbent[t])
        assert mask[i] and values[i] == min(values[: t + 1][mask[: t + 1]])
        assert float(thr[t]) == pytest.approx(np_threshold(folds[i], fold_mask[i], ddof=1), rel=1e-13)
        assert float(var[t]) == pytest.approx(np.var(folds[i], ddof=1), rel=1e-13)
        assert float(std[t]) == pytest.approx(np.std(folds[i], ddof=1), rel=1e-13)


def test_replay_traced_status_per_row():
    rng = np.random.default_rng(0)
    T = 10
    X = rng.uniform(size=(T, D))
    folds = np.sum((X - 0.3) ** 2, 1)[:, None] + 0.01 * rng.normal(size=(T, 3))
    values = folds.mean(1)
    opts = regret.ReplayOptions(candidates=16, num_segments=1, first_fit_steps=2, fit_steps=2, refine_steps=0)
    f = jax.jit(lambda X, v, fo, m: regret.replay(jax.random.key(1), X, v, fo, mask=m, min_points=3,
                                                  min_evaluations=4, options=opts))
    real = np.ones(T, bool)
    ref = f(X, values, folds, real)
    assert np.array_equal(np.asarray(ref.ok), np.arange(T) >= 3)
    np.testing.assert_array_equal(np.asarray(ref.reason), np.where(np.arange(T) >= 3, Reason.OK, Reason.EMPTY))
    # A NaN value on real row 5: rows 5.. are not ok (BAD_INPUT, bound +inf); rows before
    # it never saw the row and are unchanged (same program).
    v = values.copy()
    v[5] = np.nan
    bad = f(X, v, folds, real)
    np.testing.assert_array_equal(np.asarray(bad.reason)[5:], Reason.BAD_INPUT)
    assert np.all(np.asarray(bad.bound)[5:] == np.inf) and not np.any(np.asarray(bad.ok)[5:])
    np.testing.assert_array_equal(np.asarray(bad.bound)[:5], np.asarray(ref.bound)[:5])
    # A NaN fold score of a real evaluation: NaN threshold exactly where it is the incumbent.
    inc = np.asarray(ref.incumbent)
    fo = folds.copy()
    fo[inc[-1], 1] = np.nan
    res = f(X, values, fo, real)
    thr = np.asarray(res.threshold)
    np.testing.assert_array_equal(np.isnan(thr), inc == inc[-1])
    np.testing.assert_array_equal(thr[inc != inc[-1]], np.asarray(ref.threshold)[inc != inc[-1]])
    # ... and those computed rows are not ok: their threshold is undefined (an input)
    nan_rows = (inc == inc[-1]) & (np.arange(T) >= 3)
    np.testing.assert_array_equal(np.asarray(res.ok), (np.arange(T) >= 3) & ~nan_rows)
    np.testing.assert_array_equal(np.asarray(res.reason)[nan_rows], Reason.BAD_INPUT)
    # finite folds whose variance overflows: their threshold (about 1e300) is computed on
    # rescaled folds and is right, but the variance the result reports cannot be
    # represented: UNREPRESENTABLE on those rows (NOT_FINITE is for a threshold that overflowed)
    fo = folds.copy()
    fo[inc[-1]] = [1e300, -1e300, 1e300]
    res = f(X, values, fo, real)
    unit = float(regret.cv_threshold(jnp.asarray([1.0, -1.0, 1.0])))
    # 1e300 is no power of two: the two sides round differently, each in about ten float64
    # operations of well-conditioned sums (|fold - mean| ~ 1e300), so within ~10 eps (2e-15)
    np.testing.assert_allclose(np.asarray(res.threshold)[nan_rows], 1e300 * unit, rtol=1e-14)
    assert np.all(np.isnan(np.asarray(res.variance)[nan_rows]))
    np.testing.assert_array_equal(np.asarray(res.reason)[nan_rows], Reason.UNREPRESENTABLE)


# -------------------------------------------------------------- stopping rules, top set
def conv_loop(best, mask, k):
    """Conv-i by a Python loop: a NaN row does not improve; padded rows are skipped."""
    level, count, last = np.inf, 0, None
    for i, (b, m) in enumerate(zip(best, mask)):
        if not m:
            continue
        if last is None or b < level:
            level, count = (b if b < level else level), 0
        else:
            count += 1
        last = i
        if count == k:
            return i, True
    return last, False


def test_stop_rules_nan_on_real_rows_and_padding():
    best = np.array([5.0, 4.0, 4.0, np.nan, 4.0, 4.0, 3.0, 3.0, 3.0, 3.0])
    mask = np.ones(10, bool)
    f = jax.jit(lambda b, m: regret.convergence_stop(b, 3, mask=m))
    stop, fired = f(best, mask)
    assert (int(stop), bool(fired)) == conv_loop(best, mask, 3) == (4, True)
    with pytest.raises(ValueError, match=r"^best_so_far has 1 NaN"):
        regret.convergence_stop(best, 3)
    # Padded rows holding garbage: the same stop as the compacted trace.
    padded = np.insert(np.array([5.0, 4.0, 4.0, 4.0, 4.0, 3.0]), [1, 3, 3], [np.nan, -np.inf, 1e300])
    pmask = np.isin(np.arange(9), [1, 3, 4], invert=True)
    stop, fired = regret.convergence_stop(padded, 2, mask=pmask)
    real = np.flatnonzero(pmask)
    cstop, cfired = regret.convergence_stop(padded[pmask], 2)
    assert int(stop) == real[int(cstop)] and bool(fired) == bool(cfired)
    # stop_iterations: NaN on a real row is named; garbage on padded rows is inert (the
    # stops, in numbers of evaluations, are those of the compacted trace).
    n = np.arange(1, 31)
    bound = np.linspace(1.0, 0.01, 30)
    thr = np.full(30, 0.1)
    best = np.where(n < 8, 1.0 / n, 1.0 / 8)  # improves until 8 evaluations, then flat
    kw = dict(ours_scales=(1.0,), conv_patience=(5,), min_evaluations=5)
    m = np.ones(30, bool)
    m[[6, 12, 25]] = False  # rows 25: before ours fires (row 27); 6 and 12: around Conv-5's count
    for name, pos, g in (("bound", 0, -np.inf), ("threshold", 1, np.inf), ("best_so_far", 2, -1.0)):
        args = [bound.copy(), thr.copy(), best.copy()]
        args[pos][12] = np.nan
        with pytest.raises(ValueError, match=rf"^{name} has 1 NaN"):
            regret.stop_iterations(*args, n, **kw)
        args[pos][[6, 25]] = g  # would fire (or reset Conv) at once if it counted
        got = regret.stop_iterations(*args, n, mask=m, **kw)
        want = regret.stop_iterations(*(a[m] for a in (bound, thr, best)), n[m], **kw)
        assert int(got.ours[0]) == int(want.ours[0]) and int(got.conv[0]) == int(want.conv[0]), name


def test_top_mask_padded_garbage_is_inert():
    rng = np.random.default_rng(1)
    y = rng.normal(size=10)
    mask = np.ones(10, bool)
    mask[[1, 4, 8]] = False
    yg = y.copy()
    yg[[1, 4, 8]] = [np.nan, -np.inf, -1e300]
    got = np.asarray(regret.top_mask(yg, mask, fraction=0.5, min_points=2))
    real = np.flatnonzero(mask)
    want = np.zeros(10, bool)
    want[real[np.argsort(y[real], kind="stable")[:3]]] = True  # floor(0.5 * 7) = 3
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- dtypes
def _dtype_calls(h):
    X, y, post, cand = bound_case()
    Xq = jnp.asarray(cand[:2])
    ones, n2 = jnp.ones(2), jnp.array([1, 2])
    Xf, yf = np.full((3, 1), 0.5), jnp.ones(3)
    key = jax.random.key(0)
    return [
        ("t", lambda: regret.beta(h(10.0), 2.0)),
        ("size", lambda: regret.beta(10.0, h(2.0))),
        ("posterior.X", lambda: regret.expected_improvement(post._replace(X=h(post.X)), Xq, 0.0)),
        ("X", lambda: regret.confidence_bounds(post, h(Xq), 1.0)),
        ("beta", lambda: regret.confidence_bounds(post, Xq, h(1.0))),
        ("X_eval", lambda: regret.regret_bound(post, h(Xq), None, Xq, 1.0)),
        ("candidates", lambda: regret.regret_bound(post, Xq, None, h(Xq), 1.0)),
        ("beta", lambda: regret.regret_bound(post, Xq, None, Xq, h(1.0))),
        ("X", lambda: regret.expected_improvement(post, h(Xq), 0.0)),
        ("best", lambda: regret.expected_improvement(post, Xq, h(0.0))),
        ("best", lambda: regret.probability_of_improvement(post, Xq, h(0.0))),
        ("y", lambda: regret.top_mask(h([1.0, 2.0]))),
        ("fold_scores", lambda: regret.cv_threshold(h([1.0, 2.0]))),
        ("best_so_far", lambda: regret.convergence_stop(h([1.0, 2.0]), 1)),
        ("bound", lambda: regret.stop_iterations(h(ones), ones, ones, n2)),
        ("threshold", lambda: regret.stop_iterations(ones, h(ones), ones, n2)),
        ("ei", lambda: regret.stop_iterations(ones, ones, ones, n2, ei=h(ones))),
        ("ours_scales", lambda: regret.stop_iterations(ones, ones, ones, n2, ours_scales=h([1.0]))),
        ("y_final", lambda: regret.ryc(h(1.0), 1.0)),
        ("t_stop", lambda: regret.rtc(1.0, h(1.0))),
        ("X", lambda: regret.fit_regret_bound(key, h(Xf), yf)),
        ("y", lambda: regret.fit_regret_bound(key, Xf, h(yf))),
        ("candidates", lambda: regret.fit_regret_bound(key, Xf, yf, candidates=h(Xq[:, :1]))),
        ("init.log_amplitude", lambda: regret.fit_regret_bound(
            key, Xf, yf, init=gp.GPParams(h(0.0), h([0.0]), h(-3.0), h(0.0)))),
        ("init_inv_hessian", lambda: regret.fit_regret_bound(key, Xf, yf, init_inv_hessian=h(jnp.eye(4)))),
        ("configs", lambda: regret.replay(key, h(Xf), yf, jnp.ones((3, 2)))),
        ("values", lambda: regret.replay(key, Xf, h(yf), jnp.ones((3, 2)))),
        ("fold_scores", lambda: regret.replay(key, Xf, yf, h(jnp.ones((3, 2))))),
        ("ei", lambda: regret.replay(key, Xf, yf, jnp.ones((3, 2)), ei=h(yf))),
    ]


@pytest.mark.parametrize("dtype", [jnp.float16, ml_dtypes.bfloat16])
def test_half_precision_is_rejected_everywhere_naming_the_argument(dtype):
    def h(a):
        return jnp.asarray(a, dtype)

    for name, call in _dtype_calls(h):
        with pytest.raises(TypeError, match=rf"^{name} has unsupported dtype"):
            call()


# ------------------------------------------------------------ adversarial inputs
def test_out_of_cube_inputs_inside_jit_are_status_and_concrete_ones_raise():
    """The unit cube is the domain of every input (gp_core.in_unit_cube): inside jit an
    evaluated point or candidate outside it is BAD_INPUT, a query row outside it NaN (EI,
    PI, confidence bounds), as a non-finite one is; with concrete inputs all raise naming
    the argument. (Before, traced rows at 3 or 1e6 gave ok True and finite numbers.)"""
    X, y, cand = fit_data()
    post = gp.posterior(gp.params(1.0, [0.3, 0.3], 1e-3), X, y)
    bound = jax.jit(lambda Xe, c: regret.regret_bound(post, Xe, None, c, 2.0))
    for Xe, c in ((X * 3, cand), (X, cand * 1e6), (X, -cand)):
        rb = bound(Xe, c)
        assert not bool(rb.ok) and int(rb.reason) == Reason.BAD_INPUT and float(rb.bound) == np.inf
    assert bool(bound(X, cand).ok)
    Xq = np.stack([X[0], [0.5, 3.0]])
    ei = jax.jit(regret.expected_improvement)(post, Xq, 0.0)
    lcb, _ = jax.jit(regret.confidence_bounds)(post, Xq, 1.0)
    assert np.isfinite(ei[0]) and np.isnan(ei[1]) and np.isfinite(lcb[0]) and np.isnan(lcb[1])
    for call in (lambda: regret.expected_improvement(post, Xq, 0.0),
                 lambda: regret.probability_of_improvement(post, Xq, 0.0),
                 lambda: regret.confidence_bounds(post, Xq, 1.0)):
        with pytest.raises(ValueError, match="^X must lie in the unit cube"):
            call()
    fb = fit_traced()(np.where(np.arange(N)[:, None] == 0, 2.0, X), y, np.ones(N, bool))
    assert int(fb.reason) == Reason.BAD_INPUT


def test_beta_is_finite_for_every_representable_t():
    """beta = 2 scale log(size t^2 pi^2 / (6 delta)) as a sum of logs: t^2 overflowed to inf
    for t above 1e154 (float64) or 1.8e19 (float32), and underflowed to log 0 below their
    square roots. Closed form from math.log (no overflow in Python's log of a float)."""
    for t, dtype, rtol in ((1e200, np.float64, 1e-14), (1e-200, np.float64, 1e-14), (1e30, np.float32, 1e-6)):
        want = 0.2 * 2 * (math.log(3.0) + 2 * math.log(t) + math.log(math.pi**2 / 6 / 0.1))
        got = regret.beta(np.asarray(t, dtype), np.asarray(3.0, dtype))
        assert got.dtype == dtype
        np.testing.assert_allclose(float(got), want, rtol=rtol)
    with pytest.raises(ValueError, match="^t and size must broadcast"):
        regret.beta(np.ones(3), np.ones(2))


def test_structural_errors_name_the_argument():
    """No rows, an integer seed for a key, a NaN tolerance: ValueError / TypeError naming the
    argument (before: 'zero-size array to reduction', 'attempt to get argmax of an empty
    sequence', JAX's 'invalid PRNG key data', a silent NaN conv_rtol)."""
    X, y, cand = fit_data()
    post = gp.posterior(gp.params(1.0, [0.3, 0.3], 1e-3), X, y)
    none, n = np.zeros((0, D)), jnp.arange(1, 4)
    calls = [
        (ValueError, "^X must have at least one row", lambda: regret.fit_regret_bound(KEY, none, np.zeros(0))),
        (ValueError, "^X_eval must have at least one row", lambda: regret.regret_bound(post, none, None, cand, 1.0)),
        (ValueError, "^configs must have at least one row",
         lambda: regret.replay(KEY, none, np.zeros(0), np.zeros((0, 3)))),
        (ValueError, "^bound must have at least one row",
         lambda: regret.stop_iterations(np.zeros(0), np.zeros(0), np.zeros(0), np.zeros(0, int))),
        (ValueError, "^best_so_far must have at least one row", lambda: regret.convergence_stop(np.zeros(0), 2)),
        (TypeError, "^key must be a PRNG key", lambda: regret.fit_regret_bound(0, X, y)),
        (TypeError, "^key must be a PRNG key", lambda: regret.regret_bound(post, X, None, 8, 1.0, key=0)),
        (ValueError, "^conv_rtol must be", lambda: regret.stop_iterations(n * 1.0, n * 1.0, n * 1.0, n,
                                                                           conv_rtol=float("nan"))),
    ]
    for err, match, call in calls:
        with pytest.raises(err, match=match):
            call()


def test_optuna_terminator_fits_the_gp_its_options_name():
    """RegretBoundTerminator with FitOptions(warping=True): the start and curvature it passes
    are those the warped fit takes (before: a (d+3)-square curvature against the warped
    fit's (3d+3): fit_regret_bound raised about init_inv_hessian from inside
    study.optimize); an unknown prior is named at once (before: a KeyError). The fit's own
    checks are the oracle: they run while tracing (eval_shape: nothing is compiled)."""
    import optuna

    from jaxstop.integrations.optuna import RegretBoundTerminator

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=4)
    term = RegretBoundTerminator(min_n_trials=1, threshold=0.0, candidates=8, min_capacity=8,
                                 options=regret.FitOptions(fit_steps=2, refine_steps=0, warping=True))
    i = term.inputs(study)
    out = jax.eval_shape(lambda: regret.fit_regret_bound(
        i.key, i.X, i.y, i.mask, init=i.init, init_inv_hessian=i.init_inv_hessian, dim_mask=i.dim_mask,
        candidates=i.candidates, fraction=i.fraction, min_points=i.min_points, beta_t=i.beta_t, options=i.options))
    assert out.params.warped and out.inv_hessian.shape == i.init_inv_hessian.shape
    with pytest.raises(ValueError, match="^options.prior must be one of"):
        RegretBoundTerminator(options=regret.FitOptions(prior="gaussian"))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_cv_threshold_scales_with_the_folds_whose_squares_leave_the_dtype(dtype):
    # Eq. (9)-(10) is homogeneous of degree 1 in the folds, and scaling by a power of two is
    # exact: folds times 2^e must give the threshold times 2^e, bit for bit, also where the
    # squares overflow (2^70 in float32) or underflow (2^-70); the threshold once came out
    # NaN and 0 (with a study that could never stop and no sign of why).
    folds = jnp.asarray([1.0, 1.1, 0.9, 1.05, 0.95], dtype)
    base = regret.cv_threshold(folds)
    big = 600 if dtype == jnp.float64 else 70
    for e in (big, -big, 3, -3):
        scaled = regret.cv_threshold(folds * dtype(2.0 ** e))
        assert float(scaled) == float(base) * 2.0 ** e, e
    # the rules' thresholds on s (Sec. 4.1's sqrt(0.5 s^2), the auto-termination policy's
    # threshold_variance) scale the same way; s against NumPy's std of the folds
    from jaxstop._src import termination

    real = jnp.ones(folds.shape, bool)
    std0 = termination.cv_std(folds, real, 0)[0]
    # against NumPy in float64 on the same (rounded) folds: a mean, 5 squared deviations
    # of size ~s and a square root in the working dtype, each relative error ~eps, and the
    # deviations are well conditioned (|x - mean| ~ s): a few eps
    assert float(std0) == pytest.approx(np.std(np.asarray(folds, np.float64)), rel=4 * float(jnp.finfo(dtype).eps))
    rule0 = termination.scaled_threshold(base, std0, 0.0, 0.5)
    for e in (big, -big):
        f = folds * dtype(2.0 ** e)
        std = termination.cv_std(f, real, 0)[0]
        assert float(std) == float(std0) * 2.0 ** e, e
        rule = termination.scaled_threshold(regret.cv_threshold(f), std, 0.0, 0.5)
        assert float(rule) == float(rule0) * 2.0 ** e, e


# ------------------------------------------------------------ values the dtype cannot resolve, overflowing ratios
def test_bound_of_top_values_within_rounding_is_unrepresentable():
    """float32 losses near 1e6 whose top set differs only in its last bits (spacing 1/16 at 1e6):
    standardize takes them for constant (scale 1), so a bound on that scale would not be in the
    units of y; it is reported UNREPRESENTABLE. The same values exactly equal stay ok, and the
    same spread on a scale float32 resolves (losses near 1) gives an ok bound."""
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(25, 2)).astype(np.float32)
    q = np.sum((X - 0.3) ** 2, axis=1)
    cand = rng.uniform(size=(64, 2)).astype(np.float32)
    opts = regret.FitOptions(fit_steps=10, refine_steps=0)
    fit = functools.partial(regret.fit_regret_bound, KEY, X, candidates=cand, options=opts)
    y = (q + 1e6).astype(np.float32)
    top = np.sort(y)[:10]
    assert top.max() > top.min() and (top.max() - top.min()) <= 4 * np.finfo(np.float32).eps * 1e6  # within rounding
    res = fit(y)
    assert not bool(res.ok) and int(res.reason) == Reason.UNREPRESENTABLE and float(res.bound.bound) == np.inf
    assert bool(fit(np.full(25, 1e6, np.float32)).ok)
    assert bool(fit(q.astype(np.float32)).ok)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_expected_improvement_where_the_ratio_overflows(dtype):
    """EI = sd (z Phi(z) + phi(z)), z = (best - mu) / sd: for z beyond +-40 (and where the ratio
    overflows to +-inf) it is max(best - mu, 0) to rounding, never NaN or inf for a finite best."""
    post = gp.posterior(gp.params(0.01, [0.2], 1e-2, dtype=dtype), np.zeros((0, 1), dtype), np.zeros(0, dtype))
    x = np.array([[0.5]], dtype)
    big = float(np.finfo(dtype).max) / 4
    assert float(regret.expected_improvement(post, x, -big)[0]) == 0.0
    np.testing.assert_allclose(float(regret.expected_improvement(post, x, big)[0]), big, rtol=4 * np.finfo(dtype).eps)
    # either side of the switch at |z| = 40 the value is the closed form (mpmath-free: at z = +-39.9 and
    # +-40.1 Phi and phi are exactly 1 / 0 to double rounding, so EI = sd z, resp. 0)
    mean, var = gp.predict(post, x)
    s = float(np.sqrt(np.asarray(var, np.float64))[0])
    for z in (39.9, 40.1, -39.9, -40.1):
        best = dtype(float(mean[0]) + z * s)
        zz = (np.float64(best) - float(mean[0])) / s
        want = s * (zz * scipy.stats.norm.cdf(zz) + scipy.stats.norm.pdf(zz))
        got = float(regret.expected_improvement(post, x, best)[0])
        np.testing.assert_allclose(got, want, rtol=8 * np.finfo(dtype).eps, atol=0)


def _replay_trace(T=22):
    k1, k2 = jax.random.split(jax.random.key(0))
    X = jax.random.uniform(k1, (T, 2), jnp.float32)
    folds = jnp.sum((X - 0.4) ** 2, 1)[:, None] + 0.05 * jax.random.normal(k2, (T, 5), jnp.float32)
    return X, folds


def test_replay_fold_variance_beyond_float32_is_unrepresentable_not_not_finite():
    """float32 fold scores near 1e20: s^2 near 1e38-1e40 may overflow while s and the threshold
    are representable. Scaling by 2^70 (exact) multiplies the threshold by 2^70 (the rules
    compare with it and with s); a row whose variance overflowed is UNREPRESENTABLE, not
    NOT_FINITE, and a row whose variance is finite keeps the unscaled row's status."""
    X, folds = _replay_trace()
    opts = regret.ReplayOptions(candidates=32, num_segments=1, refine_steps=0, acq_gp="top")
    plain = regret.replay(KEY, X, folds.mean(1), folds, min_points=10, options=opts)
    s = np.float32(2.0**70)
    big = regret.replay(KEY, X, folds.mean(1) * s, folds * s, min_points=10, options=opts)
    np.testing.assert_array_equal(np.asarray(big.threshold), np.asarray(plain.threshold) * s)
    over = np.asarray(big.computed) & ~np.isfinite(np.asarray(big.variance))
    assert over.any() and bool(np.all(np.asarray(plain.ok)[over]))
    np.testing.assert_array_equal(np.asarray(big.reason)[over], int(Reason.UNREPRESENTABLE))
    assert not np.any(np.asarray(big.ok)[over])
    fine = np.asarray(big.computed) & ~over
    np.testing.assert_array_equal(np.asarray(big.reason)[fine], np.asarray(plain.reason)[fine])


@pytest.mark.parametrize("field", ["fit_mean", "fixed_threshold", "warping"])
def test_replay_boolean_options_must_be_bools(field):
    X, folds = _replay_trace(12)
    opts = regret.ReplayOptions(candidates=8, num_segments=1, refine_steps=0, acq_gp="top", **{field: "no"})
    with pytest.raises(TypeError, match=field):
        regret.replay(KEY, X, folds.mean(1), folds, min_points=4, min_evaluations=6, options=opts)


def test_fit_boolean_option_must_be_a_bool():
    X, y, cand = fit_data()
    with pytest.raises(TypeError, match="fit_mean"):
        regret.fit_regret_bound(KEY, X, y, candidates=cand, options=regret.FitOptions(fit_mean="no"))


def test_stop_iterations_argument_checks():
    """Thresholds must be finite and >= 0, a fold variance >= 0; an empty Conv-i list means no
    such rule (as an empty ours_scales means no Ours rule); recorded EI / PI of replay may not
    be NaN on real rows; rtc / ryc name their arguments on shapes that do not broadcast."""
    T = 30
    args = (jnp.linspace(1.0, 0.01, T), jnp.full(T, 0.1), jnp.linspace(1.0, 0.5, T), jnp.arange(1, T + 1))
    for name in ("ei_thresholds", "pi_thresholds"):
        for bad in ((-1.0,), (np.nan,)):
            with pytest.raises(ValueError, match=name):
                regret.stop_iterations(*args, ei=jnp.zeros(T), pi=jnp.zeros(T), **{name: bad})
    with pytest.raises(ValueError, match="variance must be >= 0"):
        regret.stop_iterations(*args, variance=jnp.full(T, -1.0), ours_variances=(0.5,))
    none = regret.stop_iterations(*args, conv_patience=())
    full = regret.stop_iterations(*args)
    assert np.asarray(none.conv).shape == (0,)
    np.testing.assert_array_equal(np.asarray(none.ours), np.asarray(full.ours))
    X, folds = _replay_trace(12)
    with pytest.raises(ValueError, match="ei has 1 NaN"):
        regret.replay(KEY, X, folds.mean(1), folds, ei=jnp.zeros(12).at[3].set(jnp.nan), min_points=4,
                      min_evaluations=6, options=regret.ReplayOptions(candidates=8, num_segments=1, acq_gp="top"))
    with pytest.raises(ValueError, match="t_final and t_stop"):
        regret.rtc(jnp.ones(3), jnp.ones(2))
    with pytest.raises(ValueError, match="y_final and y_stop"):
        regret.ryc(jnp.ones(3), jnp.ones(2))


def test_float_options_accept_concrete_zero_d_arrays():
    """A 0-d NumPy or JAX scalar is its value, as a Python float is (beta's closed form)."""
    want = 0.2 * 2 * math.log(3.0 * 2.0**2 * math.pi**2 / (6 * 0.1))
    for delta in (0.1, np.float32(0.1), jnp.float32(0.1), jnp.asarray(0.1)):
        np.testing.assert_allclose(float(regret.beta(2.0, 3.0, delta=delta)), want, rtol=1e-6)
    assert regret.FitOptions(delta=jnp.float32(0.1)) is not None
    with pytest.raises(TypeError, match="delta"):
        regret.beta(2.0, 3.0, delta=jnp.ones(2))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_cv_threshold_of_equal_folds_is_exactly_zero(dtype):
    # Equal fold scores have s^2 = 0 (Eq. 9), so the threshold of Eq. (10) is exactly 0. The
    # rounded mean of k equal values can sit an ulp away from them, and the deviations from
    # it made s ~1e-7 relative in float32: a positive threshold where no gap can be resolved.
    rng = np.random.default_rng(5)
    for value in rng.uniform(-1e3, 1e3, 60).astype(dtype):
        for k in (3, 5, 10):
            folds = jnp.full((k,), value, dtype)
            assert float(regret.cv_threshold(folds)) == 0.0, (value, k)


def test_warm_started_fit_reuses_the_cold_fits_program():
    """A running study calls fit_regret_bound first without a curvature, then with the last
    call's inv_hessian (its docstring's advice): one program for both. None was a different
    pytree than an array, and the warm calls compiled the whole fit and bound again (seconds).
    The cold start itself is unchanged: zeros are documented as no curvature, bit for bit."""
    X, y, cand = fit_data()
    kw = dict(candidates=cand, min_points=6, options=regret.FitOptions(fit_steps=4, refine_steps=2, fit_tol=0.0))
    cold = regret.fit_regret_bound(KEY, X, y, **kw)
    with count_compilations() as compiled:
        warm = regret.fit_regret_bound(KEY, X, y, init=cold.params, init_inv_hessian=cold.inv_hessian, **kw)
    assert compiled["_fit_regret_bound_jit"] == 0 and bool(warm.ok)
    zeros = regret.fit_regret_bound(KEY, X, y, init_inv_hessian=np.zeros_like(cold.inv_hessian), **kw)
    chex.assert_trees_all_equal(zeros, cold)


def test_refinement_never_starts_from_padded_rows():
    """With fewer real points (candidates and real rows of X_eval) than refine_starts, the
    refinement took padded rows of X_eval as starts: inert, they sit at the origin, and a
    descent from there found the prior's LCB far from the data (bound 4.0 against 0.38 for the
    same problem without the padding). The oracle is the compacted problem (padded rows
    removed); the two are different programs, equal to float64 rounding of a few products of
    order-1 numbers, so 1e-12."""
    X, y = np.array([[0.6, 0.7], [0.8, 0.5]]), np.array([2.0, 2.0])
    Xp = np.concatenate([X, np.full((5, 2), 0.9)])
    mp = np.arange(7) < 2
    p = gp.params(1.0, [0.3, 0.3], 1e-3)
    post, postp = gp.posterior(p, X, y), gp.posterior(p, Xp, np.concatenate([y, np.zeros(5)]), mp)
    cand = np.array([[0.62, 0.69]])
    for steps in (1, 2, 5):
        want = regret.regret_bound(post, X, None, cand, 4.0, refine_steps=steps, refine_starts=8)
        got = regret.regret_bound(postp, Xp, mp, cand, 4.0, refine_steps=steps, refine_starts=8)
        assert bool(got.ok)
        np.testing.assert_allclose(float(got.bound), float(want.bound), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(got.x_lcb), np.asarray(want.x_lcb), rtol=1e-12, atol=1e-15)


# ------------------------------------------------------------ derivatives
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_expected_improvement_gradient_is_finite_far_below_the_incumbent(dtype):
    """dEI/dbest = Phi(z), z = (best - mu) / sd, for the prior (mu = 0, sd = 1). Far below
    the incumbent (z above ~13 in float32, ~38 in float64) the untaken tail branch evaluated
    erfcx(-z / sqrt2) = inf times phi(z) = 0: the value was right and the gradient NaN. Tolerance:
    in the tail (z <= -1) the derivative of the erfcx form sums terms a few times the result,
    each with a few eps of rounding (6 eps in float32, 19 in float64 seen at z = -5): 64 eps."""
    post = gp.posterior(gp.params(1.0, [0.2], 1e-2, dtype=dtype), np.zeros((0, 1), dtype), np.zeros(0, dtype))
    Xq = np.array([[0.5]], dtype)
    for z in (-30.0, -5.0, 0.0, 5.0, 15.0, 20.0, 30.0, 39.0, 45.0):
        g = jax.grad(lambda b: regret.expected_improvement(post, Xq, b)[0])(dtype(z))
        gx = jax.grad(lambda x: regret.expected_improvement(post, x, dtype(z))[0])(Xq)
        assert np.isfinite(g) and np.all(np.isfinite(gx)), z
        np.testing.assert_allclose(float(g), scipy.stats.norm.cdf(z), rtol=64 * np.finfo(dtype).eps, atol=1e-30)


def test_regret_bound_gradient_with_refinement_is_the_partial_derivative_at_its_points():
    """jax.grad of regret_bound(...).bound in the hyperparameters (through gp.posterior) and in
    beta, with refine_steps > 0: the refinement's descent carries no derivative, so the bound's
    is that of ucb(x_ucb) - lcb(x_lcb) at the points found (the envelope theorem for the
    minimum); before, autodiff through the descent gave NaN for the lengthscales. The oracle
    is central differences of the NumPy posterior at those fixed points (h = 1e-5: truncation
    ~h^2 |f'''| / 6 ~ 1e-9, rounding ~1e-11), so 1e-6."""
    rng = np.random.default_rng(5)
    n, d = 8, 2
    X = rng.uniform(0.1, 0.9, (n, d))
    y = rng.normal(size=n)
    mask = np.array([True] * 6 + [False] * 2)
    cand = rng.uniform(0, 1, (64, d))
    amp, ls, noise, mean, beta = 1.3, np.array([0.4, 0.7]), 1e-2, 0.1, 2.0

    def bound(t, b):
        p = gp.params(jnp.exp(t[0]), jnp.exp(t[1:3]), jnp.exp(t[3]), mean)
        return regret.regret_bound(gp.posterior(p, X, y, mask), X, mask, cand, b, refine_steps=5)

    t = np.array([np.log(amp), *np.log(ls), np.log(noise)])
    rb = bound(t, beta)
    assert bool(rb.ok) and float(rb.lcb_min) < float(rb.lcb_min_grid)  # the refinement moved
    x_u, x_l = np.asarray(rb.x_ucb)[None], np.asarray(rb.x_lcb)[None]

    def at_points(t, b=beta):
        predict = np_posterior(X[mask], y[mask], np.exp(t[0]), np.exp(t[1:3]), np.exp(t[3]), mean,
                               jitter=10 * np.finfo(np.float64).eps * np.exp(t[0]))
        (mu, vu), (ml, vl) = predict(x_u), predict(x_l)
        return float(((mu + math.sqrt(b) * np.sqrt(vu)) - (ml - math.sqrt(b) * np.sqrt(vl)))[0])

    # the NumPy posterior and jaxstop's differ by the rounding of their solves: condition number
    # at most (6 amp + noise) / noise ~ 8e2, so ~ kappa n eps64 ~ 1e-12 of an O(1) bound; 1e-9
    assert abs(at_points(t) - float(rb.bound)) < 1e-9
    g_t, g_b = jax.grad(lambda t, b: bound(t, b).bound, argnums=(0, 1))(t, beta)
    h = 1e-5
    want = [(at_points(t + e) - at_points(t - e)) / (2 * h) for e in np.eye(4) * h]
    np.testing.assert_allclose(g_t, want, atol=1e-6)
    np.testing.assert_allclose(g_b, (at_points(t, beta + h) - at_points(t, beta - h)) / (2 * h), atol=1e-6)


def test_patience_and_masks_that_are_not_arrays_are_named():
    # None / a string failed inside jnp.asarray with JAX's message, naming nothing
    best = jnp.array([0.5, 0.4, 0.4, 0.4])
    for patience in (None, "2"):
        with pytest.raises(TypeError, match="patience must be an int"):
            regret.convergence_stop(best, patience)
    with pytest.raises(TypeError, match="mask must be a bool array"):
        regret.top_mask(best, "all")
    X = jnp.full((4, 1), 0.5)
    with pytest.raises(TypeError, match="mask must be a bool array"):
        gp.posterior(gp.params(1.0, [0.5], 0.1), X, best, "all")
