"""Tests for jaxstop.confidence against independent oracles.

Oracles: scipy.integrate.quad on the defining integrals (x-space, products of
scipy survival functions), the paper's Eq. (3) in its own y-space form, brute
force Monte Carlo with 4-standard-error tolerances, and NumPy reference
implementations of the keep rule and the windowed statistics written here.
"""

import functools
import math

import chex
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from scipy import integrate, special

from _oracles import norm_logpdf, norm_logsf, norm_pdf
from jaxstop._src import numerics
from jaxstop._src.status import Reason
from jaxstop.confidence import _batch, _curves, _keep, _quadrature, _validate
from jaxstop.confidence import (
    confidence_curve,
    confidence_curve_batch,
    effective_mask,
    keep_count,
    leader_curve,
    prob_best,
    prob_best_batch,
    problem_status,
    prob_better,
    window_delta_sigma,
    window_std,
    zeta,
)

PAD = 50  # common padded size for oracle cases: one compilation serves them all
HYP = settings(max_examples=25, deadline=None, derandomize=True)
# Most tests use problems of 6 candidates so that compiled functions are shared.
MU6 = np.array([0.31, 0.30, 0.36, 0.33, 0.42, 0.39])
SIGMA6 = np.array([0.03, 0.02, 0.04, 0.03, 0.05, 0.02])
choose_k = jax.jit(_keep._choose_k, static_argnames="rule")


@jax.jit
@chex.assert_max_traces(n=1)
def keep_count_vmapped(mu, sigma, delta, budget, mask):
    """keep_count over a batch of problems of 6 candidates, traced once per session."""
    return jax.vmap(keep_count, in_axes=(0, 0, 0, None, 0))(mu, sigma, delta, budget, mask)


EPS = np.finfo(np.float64).eps


def p_rtol(n):
    """Relative tolerance for probabilities (and curves) that two float64 programs computed.

    Padded and exact-size arrays, vmap and a loop, jit and eager, other block or batch sizes
    are different programs; they sum in other orders and round differently (by amounts that
    depend on the CPU's vector width). Every p_i is a sum of non-negative terms
    ``w_k exp(L_k) h_ki`` over 208 nodes, normalised by their total; so its relative error
    is bounded by the node factor's: ``L_k`` sums n log-survivals, each off by ~7 eps
    absolute (erfcx to 1.6e-15), plus the summation's (n / 8 + 4) eps relative of
    ``|L_k| <= ~50`` at the nodes evaluated; the hazard ~10 eps; the node sum 208 eps and
    the normalisation n + 1 eps. Per program (7 n + 50 (n / 8 + 4) + n + 219) eps < (15 n +
    420) eps; two programs: twice that (~2e-13 for 6 candidates, 2e-11 for 3,000). The
    cuts (irrelevant candidates, skipped panels) add at most ~2e-19 absolute. Masking or
    blocking bugs move probabilities at the percent level.
    """
    return 2 * (15 * n + 420) * EPS


P_ATOL = 1e-18  # the cuts of the rule (see p_rtol)


def assert_keep_counts_agree(a, b, budget, n):
    """Two KeepCounts of one problem from different programs: floats up to rounding
    (``p_rtol``; zeta is a difference of two such probabilities, gain is budget times zeta
    over k (k - 1)), and the decisions exactly where they are robust, which is checked
    here on ``a`` (the argmax rule).

    k* maximises F(k) = sum_{j > k} (gain_j - cost_j); rounding moves F by at most
    tol (1 + 2 budget). Where several k are that close to the maximum (typically a last
    candidate with zero cost and a gain that is rounding noise, ~1e-16), k* itself is
    decided by rounding, and the test only asks that b's k* is one of them and that they
    all give the same tau and k (equal tail sums 1 - P_k, e.g. zero costs in between).
    k counts the tail sums above 1 - P_{k*}: those must differ from it by more than their
    rounding, or be equal exactly.
    """
    tol = p_rtol(n)
    for name in ("cost", "curve", "tau"):
        np.testing.assert_allclose(np.asarray(getattr(b, name)), np.asarray(getattr(a, name)), rtol=tol, atol=P_ATOL,
                                   err_msg=name)
    np.testing.assert_allclose(np.asarray(b.zeta), np.asarray(a.zeta), rtol=0, atol=2 * tol)
    np.testing.assert_allclose(np.asarray(b.gain), np.asarray(a.gain), rtol=0, atol=2 * tol * max(budget, 1.0))
    for name in ("k", "keep", "order", "num_valid", "num_invalid", "num_bad_delta"):
        np.testing.assert_array_equal(np.asarray(getattr(b, name)), np.asarray(getattr(a, name)), err_msg=name)
    nv = int(a.num_valid)
    if nv < 2:
        assert int(b.k_star) == int(a.k_star)
        return
    cost, gain = np.asarray(a.cost, float)[:nv], np.asarray(a.gain, float)[:nv]
    net = np.where(np.arange(1, nv + 1) >= 2, gain - cost, 0.0)
    f = np.array([net[k:].sum() for k in range(1, nv + 1)])
    after = np.array([cost[k:].sum() for k in range(1, nv + 1)])  # 1 - P_k
    near = np.flatnonzero(f >= f.max() - tol * (1 + 2 * budget)) + 1  # candidate k*
    assert int(a.k_star) in near and int(b.k_star) in near
    # k counts the tails above 1 - P_{k*} by more than the quadrature's resolution res;
    # the cuts move a tail by at most res (down), rounding by tol: a robust tail is either
    # within res / 2 of 1 - P_{k*} (unresolved probabilities in between) or beyond 2 res + tol
    res = nv * RESOLUTION64
    assert np.all(np.abs(after[near - 1] - after[int(a.k_star) - 1]) <= res / 2), "k sits on a knife edge"
    gap = np.abs(after - after[int(a.k_star) - 1])
    assert np.all((gap <= res / 2) | (gap > 2 * res + tol)), "k sits on a knife edge"


# ----------------------------------------------------------------------------
# oracles


def _breakpoints(mu, sigma, lo, hi):
    ks = (-6.0, -3.0, -1.0, 0.0, 1.0, 3.0, 6.0)
    pts = {m + k * s for m, s in zip(mu, sigma) for k in ks}
    return sorted(p for p in pts if lo < p < hi)


def quad_prob_best(mu, sigma):
    """p_i = int pdf_i(x) prod_{j != i} sf_j(x) dx by adaptive quadrature."""
    mu = np.asarray(mu, float)
    sigma = np.asarray(sigma, float)
    n = len(mu)
    out = np.zeros(n)
    for i in range(n):
        others = np.arange(n) != i
        lo, hi = mu[i] - 12 * sigma[i], mu[i] + 12 * sigma[i]
        if others.any():
            hi = min(hi, np.min(mu[others] + 12 * sigma[others]))
        if hi <= lo:
            continue  # p_i < Phi(-12)^2

        def f(x, i=i, others=others):
            logsf = np.sum(norm_logsf(x, mu[others], sigma[others]))
            return norm_pdf(x, mu[i], sigma[i]) * np.exp(logsf)

        pts = _breakpoints(mu, sigma, lo, hi)
        out[i] = integrate.quad(
            f, lo, hi, points=pts or None, limit=4000, epsabs=1e-14, epsrel=1e-12
        )[0]
    return out


def quad_leader(mu_sorted, sigma_sorted, k):
    """Pr(X_1 < min(X_2..X_k)) by adaptive quadrature."""
    mu, sigma = np.asarray(mu_sorted, float), np.asarray(sigma_sorted, float)
    lo, hi = mu[0] - 12 * sigma[0], mu[0] + 12 * sigma[0]
    if k > 1:
        hi = min(hi, np.min(mu[1:k] + 12 * sigma[1:k]))
    if hi <= lo:
        return 0.0

    def f(x):
        return norm_pdf(x, mu[0], sigma[0]) * np.exp(np.sum(norm_logsf(x, mu[1:k], sigma[1:k])))

    pts = _breakpoints(mu[:k], sigma[:k], lo, hi)
    return integrate.quad(f, lo, hi, points=pts or None, limit=4000, epsabs=1e-14, epsrel=1e-12)[0]


def paper_eq3_curve(mu_sorted, sigma):
    """P_m of Eq. (3) of Liu et al. (2024), in its own variable y = -loss."""
    mu = np.asarray(mu_sorted, float)
    lo, hi = -mu.max() - 12 * sigma, -mu.min() + 12 * sigma
    pts = sorted(set(-mu))

    def term(y, m):
        u = (y + mu) / sigma
        log_cdf = special.log_ndtr(u)
        log_pdf = norm_logpdf(u, 0.0, 1.0)
        return np.sum(np.exp(log_pdf[:m] - log_cdf[:m] + log_cdf.sum())) / sigma

    return np.array(
        [
            integrate.quad(lambda y, m=m: term(y, m), lo, hi, points=pts, limit=2000, epsabs=1e-14)[
                0
            ]
            for m in range(1, len(mu) + 1)
        ]
    )


# The most probability the quadrature's cuts drop from one candidate (outside the window
# of +-9 sigma: 2 Phi(-9); the skipped nodes: 1e-4 eps), written out independently of
# _quadrature.probability_resolution: the keep rule counts a tail 1 - P_k as above
# 1 - P_{k*} only by more than n_valid times this.
RESOLUTION64 = 2 * special.ndtr(-9.0) + 1e-4 * EPS


def ref_choose(cost, gain, curve, nv, rule):
    """The keep rule written out loop by loop (k = 1..nv): k* by the rule, tau = P_{k*},
    and the smallest k with P_k >= tau up to the quadrature's resolution, decided on the
    tail sums 1 - P_k = sum_{j > k} cost_j."""
    if nv == 0:
        return 0, 0, 0.0
    if rule == "argmax":
        f = {
            k: sum(gain[j - 1] - cost[j - 1] for j in range(k + 1, nv + 1))
            for k in range(1, nv + 1)
        }
        best = max(f.values())
        k_star = max(k for k, v in f.items() if v == best)
    else:
        ks = [k for k in range(2, nv + 1) if cost[k - 1] >= gain[k - 1]]
        k_star = max(ks) if ks else 1
    tau = curve[k_star - 1]
    tail = [math.fsum(cost[k:nv]) for k in range(1, nv + 1)]
    k = min(k for k in range(1, nv + 1) if tail[k - 1] <= tail[k_star - 1] + nv * RESOLUTION64)
    return k, k_star, tau


def ref_window_std(losses, epochs, window, ddof):
    out = []
    for row, e in zip(np.asarray(losses), np.asarray(epochs)):
        if e <= 0:
            out.append(0.0)
            continue
        w = row[max(0, e - window) : e]
        w = w[np.isfinite(w)]
        out.append(float(np.std(w, ddof=ddof)) if len(w) > ddof else 0.0)
    return np.array(out)


def ref_window_count_ok(losses, epochs, window, ddof):
    ok = []
    for row, e in zip(np.asarray(losses), np.asarray(epochs)):
        w = row[max(0, e - window) : e] if e > 0 else row[:0]
        ok.append(np.isfinite(w).sum() > ddof)
    return np.array(ok)


def pad_case(mu, sigma, size=PAD, seed=0):
    """Embed a problem at random positions of a larger masked array with junk padding."""
    rng = np.random.default_rng(seed)
    n = len(mu)
    pos = np.sort(rng.choice(size, n, replace=False))
    mu_p = rng.normal(size=size) * 5
    sg_p = rng.uniform(-1, 1, size)
    mu_p[rng.integers(size)] = np.nan
    mask = np.zeros(size, bool)
    mu_p[pos], sg_p[pos], mask[pos] = mu, sigma, True
    return mu_p, sg_p, mask, pos


def hard_cases():
    rng = np.random.default_rng(42)
    return {
        "hetero_3_decades": (rng.normal(size=20), 10 ** rng.uniform(-3, 0, 20)),
        "ties": (
            np.array([0.0, 0.0, 0.0, 0.1, 0.1, 0.5]),
            np.array([1.0, 0.1, 0.01, 0.001, 1.0, 0.3]),
        ),
        "tiny_sigma": (
            np.array([0.0, 0.5, 0.5001, 1.0, -0.3]),
            np.array([1.0, 1e-3, 1e-3, 1.0, 1.0]),
        ),
        "far_apart": (np.array([0.0, 100.0, 1e4, 0.2]), np.array([1.0, 1.0, 1e-3, 1e-3])),
        "tiny_at_edge": (np.array([0.0, 2.0, 2.0 + 1e-4, 3.0]), np.array([1.0, 1e-3, 1e-3, 1e-3])),
        "n50_hetero": (rng.normal(size=50), 10 ** rng.uniform(-3, 0, 50)),
        "n16_clustered": (rng.choice([0.0, 1e-3, 0.5, 3.0], 16), 10 ** rng.uniform(-2, 0, 16)),
    }


@functools.cache
def hard_case_oracle(name):
    mu, sigma = hard_cases()[name]
    return quad_prob_best(mu, sigma)


@functools.cache
def keep_case_oracle():
    """Sorted prob_best and zeta (sigma shrunk by 10%) of (MU6, SIGMA6) by quadrature."""
    order = np.argsort(MU6, kind="stable")
    ms, ss = MU6[order], SIGMA6[order]
    p = quad_prob_best(MU6, SIGMA6)[order]
    z = np.array([quad_leader(ms, 0.9 * ss, k) - quad_leader(ms, ss, k) for k in range(1, 7)])
    return order, p, z


# ----------------------------------------------------------------------------
# accuracy


def test_survival_function_building_blocks_match_scipy():
    """The erfcx polynomial, S = 1 - Phi and the hazard against scipy.special."""
    a = np.concatenate([np.linspace(0.0, 12.0 / np.sqrt(2.0), 4001), np.geomspace(1e-12, 1.0, 200)])
    r = np.asarray(jax.jit(numerics.erfcx)(jnp.asarray(a)))
    np.testing.assert_allclose(r, special.erfcx(a), rtol=5e-15, atol=0)
    z = np.concatenate([np.linspace(-40.0, 12.0, 5201), [-np.inf, 15.0]])
    zc = np.minimum(z, 12.0)
    gauss, sf = (np.asarray(v) for v in jax.jit(numerics.gauss_and_sf)(jnp.asarray(z)))
    ref = special.ndtr(-zc)
    # XLA flushes subnormal results to zero
    tiny = np.finfo(np.float64).tiny
    np.testing.assert_allclose(gauss, np.exp(-0.5 * zc * zc), rtol=1e-15, atol=tiny)
    up = zc >= 0
    # both round z^2 / 2: relative errors grow to ~4e-14 at z = 12 (XLA's erfc alike)
    np.testing.assert_allclose(sf[up], ref[up], rtol=1e-13, atol=0)
    np.testing.assert_allclose(sf[~up], ref[~up], rtol=0, atol=5e-16)
    # hazards and grouped log-survival sums, padded to whole groups of 8
    zm = jnp.asarray(z[:5200].reshape(26, 200))
    h, total = (np.asarray(v) for v in jax.jit(numerics.hazard_and_log_sf_sum)(zm))
    zz = np.minimum(z[:5200].reshape(26, 200), 12.0)
    np.testing.assert_allclose(h, np.exp(-0.5 * zz * zz) / special.ndtr(-zz), rtol=1e-13, atol=tiny)
    np.testing.assert_allclose(total, special.log_ndtr(-zz).sum(axis=1), rtol=1e-14, atol=1e-15)
    # float32: the degree-10 polynomial; S = 1 - T near 1 is exact to an ulp of 1 absolute
    a32 = a.astype(np.float32)
    r32 = np.asarray(jax.jit(numerics.erfcx)(jnp.asarray(a32)), float)
    # (the rounding of the rational map s near a = 0 dominates: 6e-7 at degree 18 as well)
    np.testing.assert_allclose(r32, special.erfcx(a32.astype(float)), rtol=1e-6, atol=0)
    h32, total32 = jax.jit(numerics.hazard_and_log_sf_sum)(zm.astype(jnp.float32))
    assert h32.dtype == jnp.float32
    z32 = np.asarray(zm.astype(jnp.float32), float)
    h_ref = np.exp(-0.5 * z32**2) / special.ndtr(-z32)
    np.testing.assert_allclose(np.asarray(h32, float), h_ref, rtol=2e-6, atol=1e-30)
    # one logarithm per element in float32
    total_ref = special.log_ndtr(-z32).sum(axis=1)
    atol = 200 * np.finfo(np.float32).eps
    np.testing.assert_allclose(np.asarray(total32, float), total_ref, rtol=2e-6, atol=atol)


def test_float64_log_series_matches_numpy():
    """The float64 logarithm built from exponent bits and a series: within 5e-16 relative of
    numpy.log from the smallest to the largest normal number, exactly 0 at 1, derivative 1 / x."""
    rng = np.random.default_rng(3)
    x = np.concatenate([
        10.0 ** rng.uniform(-307, 308, 20000),
        rng.uniform(0.5, 2.0, 20000),
        1.0 + rng.uniform(-1e-6, 1e-6, 2000),
        2.0 ** np.arange(-1022.0, 1024.0, 37.0),
        [np.finfo(float).tiny, np.finfo(float).max, np.sqrt(2.0), np.nextafter(np.sqrt(2.0), 3.0)],
    ])
    got = np.asarray(jax.jit(numerics.log_normal64)(jnp.asarray(x)))
    np.testing.assert_allclose(got, np.log(x), rtol=5e-16, atol=0)
    assert float(numerics.log_normal64(jnp.float64(1.0))) == 0.0
    d = np.asarray(jax.vmap(jax.grad(numerics.log_normal64))(jnp.asarray(x[:200])))
    np.testing.assert_allclose(d, 1.0 / x[:200], rtol=1e-15, atol=np.finfo(float).tiny)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stable_argsort_matches_numpy(dtype, rng):
    """The argsort (pairwise ranks, or two integer sorts) equals NumPy's stable argsort: repeated keys,
    -0.0 against 0.0, infinities, negative numbers; one vector and a vmapped batch."""
    for n in (1, 2, 7, 64, 65, 100, 1000):  # pairwise ranks up to 64 keys, sorts beyond
        k = rng.normal(size=(3, n)).astype(dtype)
        k[:, ::3] = np.round(k[:, ::3], 1)  # many exact ties
        if n >= 7:
            k[:, 1], k[:, 2], k[:, 4], k[:, 5], k[:, 6] = -0.0, 0.0, np.inf, -np.inf, np.inf
        ref = np.argsort(k, axis=1, kind="stable")
        got = np.asarray(jax.jit(jax.vmap(numerics.stable_argsort))(jnp.asarray(k)))
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(np.asarray(jax.jit(numerics.stable_argsort)(jnp.asarray(k[0]))), ref[0])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_stable_ranks_and_first_argmin_match_numpy(dtype, rng):
    """Ranks counted in groups of keys (unrolled up to 256 keys, a loop beyond, the last group
    partly padding) are the inverse of NumPy's stable argsort; the first argmin is
    ``np.argmin``: repeated keys, -0.0 against 0.0, infinities; one vector and a vmapped batch."""
    for n in (1, 2, 15, 16, 17, 64, 256, 257, 300):
        k = rng.normal(size=(3, n)).astype(dtype)
        k[:, ::3] = np.round(k[:, ::3], 1)  # many exact ties
        if n >= 15:
            k[:, 1], k[:, 2], k[:, 4], k[:, 5], k[:, 14] = -0.0, 0.0, np.inf, -np.inf, np.inf
        ref = np.argsort(np.argsort(k, axis=1, kind="stable"), axis=1, kind="stable")
        got = np.asarray(jax.jit(jax.vmap(numerics.stable_ranks))(jnp.asarray(k)))
        np.testing.assert_array_equal(got, ref)
        np.testing.assert_array_equal(np.asarray(jax.jit(numerics.stable_ranks)(jnp.asarray(k[0]))), ref[0])
        first = np.asarray(jax.jit(jax.vmap(numerics.first_argmin))(jnp.asarray(k)))
        np.testing.assert_array_equal(first, np.argmin(k, axis=1))
    assert int(numerics.first_argmin(jnp.full(5, jnp.inf, dtype))) == 0  # as argmin
    assert int(numerics.first_argmin(jnp.asarray([3.0, -0.0, 0.0, -0.0], dtype))) == 1  # -0.0 == 0.0


@pytest.mark.parametrize("width", [8, 32, 64, 200])
def test_log_survival_sums_every_tile_width(width, rng):
    """Summed log-survivals and hazards for narrow and wide tiles (library log below 8
    products per row, the series from 8), at far-away, underflowing and clipped distances,
    with finite derivatives -h / sqrt(2 pi) (0 above the clip)."""
    z = rng.uniform(-45.0, 14.0, (24, width))
    z[0, 0], z[1, :3], z[2, -1] = -np.inf, -1e154, 13.0
    tiny = np.finfo(np.float64).tiny
    h, total = (np.asarray(v) for v in jax.jit(numerics.hazard_and_log_sf_sum)(jnp.asarray(z)))
    zc = np.minimum(z, 12.0)
    with np.errstate(invalid="ignore", over="ignore"):
        h_ref = np.where(np.isinf(zc), 0.0, np.exp(-0.5 * zc * zc) / special.ndtr(-zc))
    np.testing.assert_allclose(h, h_ref, rtol=1e-13, atol=tiny)
    np.testing.assert_allclose(total, special.log_ndtr(-zc).sum(axis=1), rtol=1e-14, atol=1e-15)
    zf = np.where(np.isinf(z), -1e154, z)  # the derivative at a finite far-away distance
    grad = np.asarray(jax.grad(lambda v: numerics.hazard_and_log_sf_sum(v)[1].sum())(jnp.asarray(zf)))
    hf = np.asarray(jax.jit(numerics.hazard_and_log_sf_sum)(jnp.asarray(zf))[0])
    assert np.all(np.isfinite(grad))
    expect = np.where(zf < 12.0, -hf / np.sqrt(2.0 * np.pi), 0.0)
    # S is recovered from h, so d log S / dz is a difference of O(|z|) terms: absolute accuracy
    np.testing.assert_allclose(grad, expect, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", list(hard_cases()))
def test_prob_best_matches_quad(name):
    mu, sigma = hard_cases()[name]
    oracle = hard_case_oracle(name)
    if len(mu) < PAD:
        mu_p, sg_p, mask, pos = pad_case(mu, sigma)
        p = np.asarray(prob_best(mu_p, sg_p, mask))
        assert np.all(p[~mask] == 0.0)
        p = p[pos]
    else:
        p = np.asarray(prob_best(mu, sigma))
    assert p.dtype == np.float64
    np.testing.assert_allclose(p, oracle, rtol=0, atol=1e-9)


def test_prob_best_float32_accuracy():
    """Error against the float64 oracle, rounding of the inputs to float32 included."""
    worst = 0.0
    for name, (mu, sigma) in hard_cases().items():
        mu_p, sg_p, mask, pos = pad_case(mu, sigma)
        p = prob_best(mu_p.astype(np.float32), sg_p.astype(np.float32), mask)
        assert p.dtype == jnp.float32
        worst = max(
            worst, float(np.max(np.abs(np.asarray(p, float)[pos] - hard_case_oracle(name))))
        )
    assert worst <= 2e-6


@pytest.mark.parametrize(
    "name", ["ties", "tiny_sigma", "far_apart", "tiny_at_edge", "hetero_3_decades"]
)
def test_leader_curve_matches_quad(name):
    mu, sigma = hard_cases()[name]
    mu_p, sg_p, mask, _ = pad_case(mu, sigma)
    curve, order = leader_curve(mu_p, sg_p, mask)
    n = len(mu)
    order = np.asarray(order)
    assert mask[order[:n]].all() and not mask[order[n:]].any()
    ms, ss = mu_p[order[:n]], sg_p[order[:n]]
    assert np.all(np.diff(ms) >= 0)
    oracle = np.array([quad_leader(ms, ss, k) for k in range(1, n + 1)])
    np.testing.assert_allclose(np.asarray(curve)[:n], oracle, rtol=0, atol=1e-9)
    # beyond the valid candidates the curve repeats the last value
    np.testing.assert_allclose(np.asarray(curve)[n:], oracle[-1], rtol=0, atol=1e-9)


def test_leader_curve_float32_accuracy():
    """The float32 leader curve (its own rule, 8 nodes per panel) against scipy quad of the
    float32-rounded problem, every hard case: within 2e-6, prob_best's float32 bound (the
    float32 rounding of the running products over n survival values and of the sums over
    208 nodes; the rule's truncation is below 2e-9, test_reliability_confidence)."""
    worst = 0.0
    for name, (mu, sigma) in hard_cases().items():
        mu_p, sg_p, mask, _ = pad_case(mu.astype(np.float32), sigma.astype(np.float32))
        assert bool(problem_status(mu_p.astype(np.float32), sg_p.astype(np.float32), mask).ok), name
        curve, order = leader_curve(mu_p.astype(np.float32), sg_p.astype(np.float32), mask)
        assert curve.dtype == jnp.float32
        n = len(mu)
        order = np.asarray(order)[:n]
        ms, ss = mu_p[order].astype(np.float32).astype(float), sg_p[order].astype(np.float32).astype(float)
        oracle = np.array([quad_leader(ms, ss, k) for k in range(1, n + 1)])
        worst = max(worst, float(np.max(np.abs(np.asarray(curve, float)[:n] - oracle))))
    assert worst <= 2e-6
    # a probability: never above 1 (curve[0] once came out at 1 + 3 float32 ulps on this problem)
    mu = (1e30 + np.array([0.0, 1e15, 2e15])).astype(np.float32)
    curve = np.asarray(leader_curve(mu, np.full(3, 1e15, np.float32)).curve)
    assert curve[0] <= 1.0 and np.all(np.diff(curve) <= 0)
    np.testing.assert_allclose(curve, [1.0, 0.5, 1.0 / 3.0], rtol=0, atol=2e-6)  # ties: 1/k exactly


def test_equal_sigma_matches_paper_eq3():
    rng = np.random.default_rng(3)
    mu = np.sort(rng.normal(size=8) * 0.4)
    sigma = 0.3
    mu_p, sg_p, mask, pos = pad_case(mu, np.full(8, sigma), seed=5)
    curve, order = confidence_curve(mu_p, sg_p, mask)
    np.testing.assert_array_equal(np.asarray(order)[:8], pos)
    np.testing.assert_allclose(np.asarray(curve)[:8], paper_eq3_curve(mu, sigma), rtol=0, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(curve)[8:], 1.0)


def test_prob_best_monte_carlo(rng):
    mu = np.array([0.0, 0.1, 0.15, 0.4, -0.05, 0.02])
    sigma = np.array([0.2, 0.05, 0.3, 0.5, 0.01, 0.1])
    draws = 1_000_000
    x = mu + sigma * rng.standard_normal((draws, 6))
    freq = np.bincount(np.argmin(x, axis=1), minlength=6) / draws
    p = np.asarray(prob_best(mu, sigma))
    se = np.sqrt(p * (1 - p) / draws)
    assert np.all(np.abs(freq - p) <= 4 * se + 1e-12)


def test_zeta_against_quad_and_monte_carlo(rng):
    mu = np.array([0.3, 0.0, 0.1, 0.12, 0.35, 0.2])
    sigma = np.array([0.1, 0.08, 0.05, 0.2, 0.1, 0.02])
    delta = np.array([0.02, 0.01, 0.02, 0.05, 0.0, 0.001])
    z = np.asarray(zeta(mu, sigma, delta))
    order = np.asarray(confidence_curve(mu, sigma).order)
    np.testing.assert_array_equal(order, np.argsort(mu, kind="stable"))
    ms, ss = mu[order], sigma[order]
    ss2 = np.maximum(ss - delta[order], 1e-3 * ss)
    quad = np.array([quad_leader(ms, ss2, k) - quad_leader(ms, ss, k) for k in range(1, 7)])
    np.testing.assert_allclose(z, quad, rtol=0, atol=1e-9)
    assert z[0] == 0.0
    # Monte Carlo with common random numbers: X_1 < min(X_2..X_k) before / after shrinking
    draws = 1_000_000
    e = rng.standard_normal((draws, 6))
    x0, x1 = ms + ss * e, ms + ss2 * e
    win0 = x0[:, :1] < np.minimum.accumulate(x0[:, 1:], axis=1)
    win1 = x1[:, :1] < np.minimum.accumulate(x1[:, 1:], axis=1)
    diff = win1.astype(float) - win0.astype(float)
    est, se = diff.mean(axis=0), diff.std(axis=0) / np.sqrt(draws)
    assert np.all(np.abs(z[1:] - est) <= 4 * se + 1e-12)


# ----------------------------------------------------------------------------
# keep rule


def test_choose_k_edge_cases():
    """No crossing, ties and the tau plateau, by hand (5 valid of 7)."""
    curve = jnp.array([0.5, 0.75, 0.875, 1.0, 1.0, 1.0, 1.0])
    zeros = jnp.zeros(7)
    five, none = jnp.int32(5), jnp.int32(0)
    for rule in ("argmax", "crossing"):
        # gain everywhere above cost: keep 1
        k, ks, tau = choose_k(curve * 0 + 0.1, jnp.full(7, 1.0), curve, five, rule)
        assert (int(k), int(ks), float(tau)) == (1, 1, 0.5)
        # no gain: k* = n_valid, tau = 1, the zero-probability tail is dropped
        cost = jnp.array([0.5, 0.25, 0.125, 0.125, 0.0, 0.0, 0.0])
        k, ks, tau = choose_k(cost, zeros, curve, five, rule)
        assert (int(k), int(ks), float(tau)) == (4, 5, 1.0)
        # exact balance at every k counts as keep
        k, ks, tau = choose_k(cost, cost.at[0].set(0.0), curve, five, rule)
        assert int(ks) == 5
        # nothing valid
        k, ks, tau = choose_k(cost, zeros, curve, none, rule)
        assert (int(k), int(ks), float(tau)) == (0, 0, 0.0)


def test_keep_decision_uses_tail_sums_near_one():
    """A last candidate with probability 1e-16: the curve rounds to 1 one step early, but
    P_2 = 1 - 1e-16 < tau = P_3 = 1, so all three are kept, as in exact arithmetic.
    Below the quadrature's resolution (3 x 2.5e-19 here) a probability is not resolved
    (a batch and a single problem may compute 1e-37 or 0 for it) and counts as 0: the
    last candidate is dropped whatever its value there."""
    for last, kept in ((1e-16, 3), (1e-17, 3), (5e-19, 2), (1e-37, 2), (1e-300, 2), (0.0, 2)):
        cost = jnp.array([0.5, 0.5, last])
        curve = jnp.minimum(jnp.cumsum(cost), 1.0)
        assert float(curve[1]) == 1.0
        for rule in ("argmax", "crossing"):
            k, ks, tau = choose_k(cost, jnp.zeros(3), curve, jnp.int32(3), rule)
            assert (int(k), int(ks), float(tau)) == (kept, 3, 1.0)
            assert int(k) == ref_choose(np.asarray(cost), np.zeros(3), np.asarray(curve), 3, rule)[0]
    assert 3 * RESOLUTION64 == pytest.approx(_quadrature.probability_resolution(jnp.float64) * 3, rel=1e-12)


def test_keep_count_ignores_probabilities_below_the_resolution():
    """The keep count of a problem is the same whatever the candidates beyond k compute
    below the quadrature's resolution: tau = 1 problems (the uncertainty grows, so no gain:
    k* = n) whose last candidates' probabilities are unresolved, moved there by 1e-300 to
    1e-20 per candidate, keep what they keep with those probabilities at 0."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = 12
        cost = np.sort(rng.uniform(0.01, 1.0, n))[::-1]
        cost[rng.integers(4, n):] = 0.0  # the resolved candidates come first
        cost /= cost.sum()
        base = choose_k(jnp.asarray(cost), jnp.zeros(n), jnp.asarray(np.cumsum(cost)), jnp.int32(n), "argmax")
        assert int(base[1]) == n and float(base[2]) == pytest.approx(1.0, abs=n * EPS)  # a cumulative sum
        moved = np.where(cost == 0.0, 10.0 ** rng.uniform(-300, -20, n), cost)
        k = choose_k(jnp.asarray(moved), jnp.zeros(n), jnp.asarray(np.cumsum(moved)), jnp.int32(n), "argmax")[0]
        assert int(k) == int(base[0]) == int(np.count_nonzero(cost))


def test_rules_differ_with_two_crossings():
    # net gain (gain - cost) for k = 2..6: +4, -1, -1, -1, +0.5 (eighths); k = 7 is padding
    cost = jnp.array([4, 1, 3, 3, 3, 1, 0], float) / 8
    gain = jnp.array([0, 5, 2, 2, 2, 1.5, 9], float) / 8
    curve = jnp.minimum(jnp.cumsum(cost) / jnp.sum(cost), 1.0)
    k_a = choose_k(cost, gain, curve, jnp.int32(6), "argmax")
    k_c = choose_k(cost, gain, curve, jnp.int32(6), "crossing")
    # greedy: dropping the 6th helps (+0.5), dropping the 5th does not (-1): stop at 5
    assert int(k_c[1]) == 5 and int(k_c[0]) == 5
    # F(k) = sum_{j>k} net_j: F(5) = 0.5, F(4) = -0.5, F(3) = -1.5, F(2) = -2.5, F(1) = 1.5
    assert int(k_a[1]) == 1 and int(k_a[0]) == 1


@HYP
@given(
    cost=st.lists(st.integers(0, 8), min_size=7, max_size=7),
    gain=st.lists(st.integers(0, 8), min_size=7, max_size=7),
    nv=st.integers(0, 7),
    rule=st.sampled_from(["argmax", "crossing"]),
)
def test_choose_k_matches_reference(cost, gain, nv, rule):
    # dyadic: sums are exact; as in keep_count, cost is 0 beyond the valid candidates
    # and the curve is its cumulative sum
    cost = np.where(np.arange(7) < nv, np.array(cost) / 8.0, 0.0)
    gain = np.array(gain) / 8.0
    curve = np.cumsum(cost)
    k, k_star, tau = choose_k(
        jnp.asarray(cost), jnp.asarray(gain), jnp.asarray(curve), jnp.int32(nv), rule
    )
    assert (int(k), int(k_star), float(tau)) == ref_choose(cost, gain, curve, nv, rule)


@pytest.mark.parametrize("rule", ["argmax", "crossing"])
def test_keep_count_against_oracles(rule):
    mu, sigma = MU6, SIGMA6
    delta = 0.1 * sigma
    order, p, z = keep_case_oracle()
    kk = np.arange(1, 7)
    decided = set()
    for budget in (0.0, 2.0, 8.0, 30.0, 1e4):
        res = keep_count(mu, sigma, delta, budget, rule=rule)
        gain = np.where(kk >= 2, budget * z / np.maximum(kk * (kk - 1), 1), 0.0)
        np.testing.assert_array_equal(np.asarray(res.order), order)
        np.testing.assert_allclose(np.asarray(res.cost), p, rtol=0, atol=1e-9)
        np.testing.assert_allclose(np.asarray(res.zeta), np.where(kk >= 2, z, 0), rtol=0, atol=1e-9)
        np.testing.assert_allclose(np.asarray(res.gain), gain, rtol=0, atol=1e-9 * max(budget, 1))
        np.testing.assert_allclose(np.asarray(res.curve), np.cumsum(p), rtol=0, atol=1e-9)
        # the oracle decision must not sit on a knife edge for the comparison to mean anything
        assert np.min(np.abs(p[1:] - gain[1:])) > 1e-6
        k, k_star, _ = ref_choose(p, gain, np.cumsum(p), 6, rule)
        assert int(res.k_star) == k_star
        assert int(res.k) == k
        assert float(res.tau) == pytest.approx(np.cumsum(p)[k_star - 1], abs=1e-9)
        keep = np.zeros(6, bool)
        keep[order[:k]] = True
        np.testing.assert_array_equal(np.asarray(res.keep), keep)
        assert res.k.dtype == jnp.int32 and res.k_star.dtype == jnp.int32
        if rule == "argmax":
            f = np.array([np.sum((gain - p)[k:]) for k in range(1, 7)])  # F(k), j > k
            top2 = np.sort(f)[-2:]
            assert top2[1] - top2[0] > 1e-7
        decided.add(k)
    # R = 0 keeps everyone, a huge R keeps only the leader, something in between occurs
    assert {1, 6} < decided


def test_keep_count_padding_and_invariance():
    """Padded problems (junk under mask=False) against the oracle of the unpadded one."""
    mu, sigma = MU6[:4], SIGMA6[:4]
    delta = 0.1 * sigma
    order = np.argsort(mu, kind="stable")
    p = quad_prob_best(mu, sigma)[order]
    z = [
        quad_leader(mu[order], 0.9 * sigma[order], k) - quad_leader(mu[order], sigma[order], k)
        for k in (1, 2, 3, 4)
    ]
    rows = []
    for seed in (0, 1):  # two different padding layouts
        mu_p, sg_p, mask, pos = pad_case(mu, sigma, size=6, seed=seed)
        d_p = np.full(6, np.nan)
        d_p[pos] = delta
        rows.append((mu_p, sg_p, d_p, mask, pos))
    # third and fourth problems: an affine change of units of the first layout
    for a, b in ((3.0, -7.0), (0.01, 100.0)):
        mu_p, sg_p, d_p, mask, pos = rows[0]
        rows.append((a * mu_p + b, a * sg_p, a * d_p, mask, pos))
    cols = [np.stack([r[i] for r in rows]) for i in range(4)]
    res = keep_count_vmapped(*cols[:3], 8.0, cols[3])
    for i, (_, _, _, mask, pos) in enumerate(rows):
        r = jax.tree.map(lambda f, i=i: f[i], res)
        assert int(r.num_valid) == 4 and int(r.num_invalid) == 0 and int(r.num_bad_delta) == 0
        np.testing.assert_array_equal(np.asarray(r.order)[:4], pos[order])
        np.testing.assert_allclose(np.asarray(r.cost)[:4], p, atol=1e-9)
        np.testing.assert_allclose(np.asarray(r.curve)[:4], np.cumsum(p), atol=1e-9)
        np.testing.assert_allclose(np.asarray(r.zeta)[:4], z, atol=1e-9)
        np.testing.assert_array_equal(np.asarray(r.curve)[4:], 1.0)
        np.testing.assert_array_equal(np.asarray(r.gain)[4:], 0.0)
        np.testing.assert_array_equal(np.asarray(r.cost)[4:], 0.0)
        assert not np.asarray(r.keep)[~mask].any()
        kk = np.arange(1, 5)
        gain = np.where(kk >= 2, 8.0 * np.array(z) / np.maximum(kk * (kk - 1), 1), 0.0)
        assert np.min(np.abs(p[1:] - gain[1:])) > 1e-6
        assert int(r.k) == ref_choose(p, gain, np.cumsum(p), 4, "argmax")[0]


# ----------------------------------------------------------------------------
# properties

finite = {"allow_nan": False, "allow_infinity": False}
mus = st.lists(st.floats(-3, 3, **finite), min_size=6, max_size=6)
log_sigmas = st.lists(st.floats(-2, 0.5, **finite), min_size=6, max_size=6)


@HYP
@given(mu=mus, ls=log_sigmas, perm=st.permutations(range(6)))
def test_permutation_equivariance(mu, ls, perm):
    mu, sigma, perm = np.array(mu), 10 ** np.array(ls), np.array(perm)
    p = np.asarray(prob_best(mu, sigma))
    np.testing.assert_allclose(np.asarray(prob_best(mu[perm], sigma[perm])), p[perm], atol=1e-12)


@HYP
@given(mu=mus, ls=log_sigmas)
def test_curve_properties(mu, ls):
    mu, sigma = np.array(mu), 10 ** np.array(ls)
    p = np.asarray(prob_best(mu, sigma))
    curve, order = confidence_curve(mu, sigma)
    curve, order = np.asarray(curve), np.asarray(order)
    assert np.all(p >= 0)
    assert abs(p.sum() - 1.0) <= 1e-12
    assert np.all(np.diff(curve) >= 0) and curve[-1] == 1.0
    np.testing.assert_array_equal(order, np.argsort(mu, kind="stable"))
    np.testing.assert_allclose(curve, np.cumsum(p[order]), atol=1e-12)


@HYP
@given(
    mu=mus,
    ls=log_sigmas,
    a=st.floats(0.01, 100, **finite),
    b=st.floats(-100, 100, **finite),
)
def test_shift_scale_invariance(mu, ls, a, b):
    mu, sigma = np.array(mu), 10 ** np.array(ls)
    p = np.asarray(prob_best(mu, sigma))
    q = np.asarray(prob_best(a * mu + b, a * sigma))
    np.testing.assert_allclose(q, p, atol=1e-8)


@HYP
@given(mu=mus, ls=log_sigmas, seed=st.integers(0, 2**16))
def test_mask_padding_equals_unpadded(mu, ls, seed):
    mu, sigma = np.array(mu), 10 ** np.array(ls)
    mu_p, sg_p, mask, pos = pad_case(mu, sigma, seed=seed)
    p = np.asarray(prob_best(mu_p, sg_p, mask))
    # the same program (same shapes and layout) with other junk on the padded entries:
    # bit-identical
    junk = np.random.default_rng(seed + 1)
    mu_q, sg_q = mu_p.copy(), sg_p.copy()
    mu_q[~mask], sg_q[~mask] = junk.normal(size=PAD - 6) * 50, junk.uniform(-1, 1, PAD - 6)
    np.testing.assert_array_equal(np.asarray(prob_best(mu_q, sg_q, mask)), p)
    # against the unpadded problem (another program): up to rounding
    np.testing.assert_allclose(p[pos], np.asarray(prob_best(mu, sigma)), rtol=p_rtol(6), atol=P_ATOL)
    assert np.all(p[~mask] == 0.0)
    curve_p, order_p = confidence_curve(mu_p, sg_p, mask)
    curve, order = confidence_curve(mu, sigma)
    np.testing.assert_allclose(np.asarray(curve_p)[:6], np.asarray(curve), rtol=p_rtol(6), atol=P_ATOL)
    np.testing.assert_array_equal(np.asarray(curve_p)[6:], 1.0)
    np.testing.assert_array_equal(np.asarray(order_p)[:6], pos[np.asarray(order)])


def test_all_masked_and_single_candidate():
    mu, sigma = MU6, SIGMA6
    none = np.zeros(6, bool)
    np.testing.assert_array_equal(np.asarray(prob_best(mu, sigma, none)), 0.0)
    np.testing.assert_array_equal(np.asarray(confidence_curve(mu, sigma, none).curve), 0.0)
    res = keep_count(mu, sigma, 0.1 * sigma, 10.0, none)
    assert int(res.k) == 0 and int(res.num_valid) == 0 and not np.asarray(res.keep).any()
    one = np.arange(6) == 4
    np.testing.assert_array_equal(np.asarray(prob_best(mu, sigma, one)), one.astype(float))
    res = keep_count(mu, sigma, 0.1 * sigma, 10.0, one)
    assert int(res.k) == 1 and np.asarray(res.keep).tolist() == one.tolist()


# ----------------------------------------------------------------------------
# dtypes, transformations, compilation


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_follows_input(dtype):
    mu_p, sg_p, mask, _ = pad_case(MU6, SIGMA6)  # the padded size shares compilations
    assert prob_best(mu_p.astype(dtype), sg_p.astype(dtype), mask).dtype == dtype
    mu, sigma = MU6.astype(dtype), SIGMA6.astype(dtype)
    curve, order = confidence_curve(mu, sigma)
    assert curve.dtype == dtype and order.dtype == jnp.int32
    res = keep_count(mu, sigma, 0.1 * sigma, dtype(8.0))  # runs leader_curve and zeta inside
    for field in (res.tau, res.curve, res.cost, res.gain, res.zeta):
        assert field.dtype == dtype
    assert res.k.dtype == jnp.int32 and res.k_star.dtype == jnp.int32
    assert prob_better(mu, sigma, mu[::-1], sigma).dtype == dtype
    losses = np.linspace(1, 0, 9 * 15).reshape(9, 15).astype(dtype)
    assert window_std(losses, np.full(9, 12), 10, ddof=1).dtype == dtype
    np.testing.assert_allclose(np.asarray(curve)[-1], 1.0)
    np.testing.assert_allclose(np.asarray(res.curve), np.asarray(curve), atol=1e-6)


def test_jit_vmap_and_no_retrace(rng):
    """jit(vmap(keep_count)) == a Python loop of eager calls; new values do not retrace."""
    for _ in range(2):  # the second batch has new values: no retrace (assert_max_traces)
        mu = rng.normal(size=(4, 6))
        sigma = 10 ** rng.uniform(-2, 0, (4, 6))
        mask = rng.uniform(size=(4, 6)) < 0.8
        mask[:, 0] = True
        delta = 0.1 * sigma
        batched = keep_count_vmapped(mu, sigma, delta, 5.0, mask)
        for i in range(4):
            eager = keep_count(mu[i], sigma[i], delta[i], 5.0, mask[i])
            # batched and eager are different programs: up to rounding
            assert_keep_counts_agree(eager, jax.tree.map(lambda f, i=i: f[i], batched), 5.0, 6)
            np.testing.assert_allclose(
                np.asarray(prob_best(mu[i], sigma[i], mask[i]))[np.asarray(eager.order)],
                np.asarray(eager.cost),
                rtol=p_rtol(6), atol=P_ATOL,
            )


def test_batch_wrappers_match_loop(rng):
    mu = rng.normal(size=(4, 6))
    sigma = 10 ** rng.uniform(-2, 0, (4, 6))
    mask = np.ones((4, 6), bool)
    mask[2, 3] = False
    loop_p = np.stack([np.asarray(prob_best(mu[i], sigma[i], mask[i])) for i in range(4)])
    loop_c = np.stack(
        [np.asarray(confidence_curve(mu[i], sigma[i], mask[i]).curve) for i in range(4)]
    )
    bs = _quadrature.block_size(6)  # one block: three temporaries and the kept exponents
    three = 3 * ((3 * bs + bs) * 13 * 16 * 8 + 64 * 6)  # bytes for three problems at a time
    assert _batch._batch_size(4, 6, jnp.float64, three) == 2  # a divisor of 4: 2 x 2 problems
    assert _batch._batch_size(7, 6, jnp.float64, three) == 1  # 7 is prime
    two = three
    np.testing.assert_allclose(
        np.asarray(prob_best_batch(mu, sigma, mask, max_bytes=two)), loop_p, rtol=p_rtol(6), atol=P_ATOL
    )  # the batch wrapper and single calls are different programs: up to rounding
    curve, order = confidence_curve_batch(mu, sigma, mask, max_bytes=two)
    np.testing.assert_allclose(np.asarray(curve), loop_c, rtol=p_rtol(6), atol=P_ATOL)
    assert order.shape == (4, 6)
    assert 1 <= _batch._batch_size(1000, 10_000, jnp.float64, 256 * 2**20) < 1000
    assert _batch._batch_size(1000, 100, jnp.float64, None) >= 1


def test_relevant_candidates_in_several_blocks_match_quad(monkeypatch, rng):
    """Relevant candidates scattered among far-off ones, evaluated 8 at a time."""
    near = rng.normal(size=19) * 0.3
    far = 5.0 + rng.uniform(0, 3, 21)
    mu = np.concatenate([near, far])
    sigma = np.concatenate([10 ** rng.uniform(-2, -0.5, 19), 10 ** rng.uniform(-2, -1, 21)])
    perm = rng.permutation(40)
    mu, sigma = mu[perm], sigma[perm]
    mask = np.ones(40, bool)
    mask[perm[3]] = False  # a masked candidate among the relevant ones
    hi = np.min(np.where(mask, mu + 9 * sigma, np.inf))
    relevant = mask & (mu - 9 * sigma < hi)
    assert 8 < relevant.sum() < 24  # several blocks, and some candidates skipped
    oracle = np.zeros(40)
    oracle[mask] = quad_prob_best(mu[mask], sigma[mask])

    def run(mu, sigma, mask):
        valid = _validate.valid_mask(mu, sigma, mask)
        return _curves.normalise(_quadrature.prob_best_kernel(mu, sigma, valid))

    monkeypatch.setattr(_quadrature, "block_size", lambda n: 8)
    p = np.asarray(jax.jit(run)(jnp.asarray(mu), jnp.asarray(sigma), jnp.asarray(mask)))
    np.testing.assert_allclose(p, oracle, rtol=0, atol=1e-12)
    assert np.all(p[~relevant] == 0.0)


# ----------------------------------------------------------------------------
# prob_better


def test_prob_better_direction_and_limits(rng):
    mu_a, s_a, mu_b, s_b = 0.20, 0.03, 0.25, 0.04
    draws = 1_000_000
    xa = mu_a + s_a * rng.standard_normal(draws)
    xb = mu_b + s_b * rng.standard_normal(draws)
    freq = np.mean(xb >= xa)
    p = float(prob_better(mu_a, s_a, mu_b, s_b))
    assert abs(p - freq) <= 4 * np.sqrt(p * (1 - p) / draws)
    assert p > 0.5  # a has the lower mean: a is the likely winner
    # deterministic limit and broadcasting
    got = prob_better(np.array([[0.1], [0.3]]), 0.0, np.array([0.1, 0.2, 0.4]), 0.0)
    np.testing.assert_array_equal(np.asarray(got), [[1, 1, 1], [0, 0, 1]])
    # inside jit an invalid pair gives 0, not NaN
    bad = jax.jit(prob_better)(jnp.array([jnp.nan, 0.0]), jnp.array([0.1, -1.0]), 0.5, 0.1)
    np.testing.assert_array_equal(np.asarray(bad), [0.0, 0.0])


# ----------------------------------------------------------------------------
# windowed uncertainty


def test_window_std_and_delta_match_reference(rng):
    losses = rng.normal(size=(9, 15))
    losses[2, 4] = np.nan
    losses[3, 13] = np.inf
    epochs = np.array([0, 1, 2, 5, 10, 11, 14, 15, 3])
    for window, ddof in ((10, 1), (4, 0)):
        got = np.asarray(window_std(losses, epochs, window, ddof=ddof))
        np.testing.assert_allclose(got, ref_window_std(losses, epochs, window, ddof), atol=1e-13)
        if window == 4:
            continue  # the delta kinds are checked at the default window
        now = ref_window_std(losses, epochs, window, ddof)
        prev = ref_window_std(losses, np.maximum(epochs - 1, 0), window, ddof)
        ok = (
            ref_window_count_ok(losses, epochs, window, ddof)
            & ref_window_count_ok(losses, epochs - 1, window, ddof)
            & (epochs >= 1)
        )
        for kind, ref in (("std", prev - now), ("variance", prev**2 - now**2)):
            got = np.asarray(window_delta_sigma(losses, epochs, window, ddof=ddof, kind=kind))
            np.testing.assert_allclose(got, np.where(ok, ref, 0.0), atol=1e-13)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_window_std_of_equal_losses_is_exactly_zero(dtype):
    # A window of equal losses (a diverged configuration stuck at 0.999, say) has standard
    # deviation 0 exactly. The sum of w equal values divided by w can round an ulp away
    # from the value, and the deviations from that rounded mean were then +-1 ulp: a std of
    # ~1.2e-7 relative in float32 for 128 of 200 random values at window 10.
    rng = np.random.default_rng(3)
    values = rng.uniform(-2.0, 2.0, 200).astype(dtype)
    for window in (2, 3, 9, 10, 11):
        losses = jnp.asarray(np.repeat(values[:, None], window + 2, axis=1), dtype)
        for epochs in (window, window + 2):
            got = window_std(losses, jnp.full((200,), epochs), window)
            assert not np.any(np.asarray(got)), (window, epochs)
        delta = window_delta_sigma(losses, jnp.full((200,), window + 2), window)
        assert not np.any(np.asarray(delta)), window


# ----------------------------------------------------------------------------
# bad inputs


def test_bad_inputs_raise_with_argument_names():
    mu, sigma = np.array([0.1, 0.2, 0.3]), np.array([0.1, 0.1, 0.1])
    with pytest.raises(ValueError, match="mu and sigma"):
        prob_best(mu, sigma[:2])
    with pytest.raises(ValueError, match="mu"):
        prob_best(mu.reshape(1, 3), sigma.reshape(1, 3))
    with pytest.raises(ValueError, match="at least one"):
        prob_best(np.zeros(0), np.zeros(0))
    with pytest.raises(ValueError, match=r"mu\[1\]"):
        prob_best(np.array([0.1, np.nan, 0.3]), sigma)
    with pytest.raises(ValueError, match=r"sigma\[2\]"):
        confidence_curve(mu, np.array([0.1, 0.1, 0.0]))
    with pytest.raises(ValueError, match="sigma"):
        keep_count(mu, np.array([0.1, -0.1, 0.1]), 0.01, 1.0)
    with pytest.raises(TypeError, match="mask"):
        prob_best(mu, sigma, np.array([1, 0, 1]))
    with pytest.raises(ValueError, match="mask"):
        prob_best(mu, sigma, np.array([True, False]))
    with pytest.raises(TypeError, match="mu"):
        prob_best(mu + 1j, sigma)
    with pytest.raises(ValueError, match="rule"):
        keep_count(mu, sigma, 0.01, 1.0, rule="median")
    with pytest.raises(ValueError, match="delta_sigma"):
        keep_count(mu, sigma, np.array([0.01, 0.01]), 1.0)
    with pytest.raises(ValueError, match="delta_sigma"):
        zeta(mu, sigma, np.array([0.01, np.nan, 0.0]))
    with pytest.raises(ValueError, match="round_budget"):
        keep_count(mu, sigma, 0.01, -1.0)
    with pytest.raises(ValueError, match="round_budget"):
        keep_count(mu, sigma, 0.01, np.ones(3))
    with pytest.raises(ValueError, match="sigma_b"):
        prob_better(0.1, 0.1, 0.2, -0.1)
    with pytest.raises(ValueError, match="broadcast"):
        prob_better(np.zeros(2), 0.1, np.zeros(3), 0.1)
    with pytest.raises(ValueError, match="mu"):
        prob_best_batch(mu, sigma)
    losses = np.ones((3, 5))
    with pytest.raises(ValueError, match="epochs"):
        window_std(losses, np.array([1, 6, 2]))
    with pytest.raises(TypeError, match="epochs"):
        window_std(losses, np.array([1.0, 2.0, 2.0]))
    with pytest.raises(ValueError, match="losses"):
        window_std(np.ones(5), np.array([1]))
    with pytest.raises(ValueError, match="window"):
        window_std(losses, np.array([1, 2, 2]), window=0)
    with pytest.raises(ValueError, match="ddof"):
        window_std(losses, np.array([1, 2, 2]), window=3, ddof=3)
    with pytest.raises(ValueError, match="kind"):
        window_delta_sigma(losses, np.array([1, 2, 2]), kind="range")


def test_invalid_values_inside_jit_are_masked_and_reported():
    mu = np.array([0.1, np.nan, 0.2, 0.15, 0.3, 0.12])
    sigma = np.array([0.05, 0.05, 0.0, 0.02, 0.04, 0.03])
    delta = np.array([0.01, 0.01, 0.01, np.inf, 0.01, 0.0])
    used = np.array([True, False, False, True, True, True])
    np.testing.assert_array_equal(np.asarray(effective_mask(mu, sigma)), used)
    mu4, sigma4, delta4 = (np.tile(a, (4, 1)) for a in (mu, sigma, delta))
    batch = keep_count_vmapped(mu4, sigma4, delta4, 5.0, np.ones((4, 6), bool))
    res = jax.tree.map(lambda f: f[0], batch)
    ref = keep_count(
        np.where(used, mu, 0.0),
        np.where(used, sigma, 1.0),
        np.where(np.isfinite(delta), delta, 0.0),  # a non-finite delta counts as 0
        5.0,
        used,
    )
    # (a vmapped batch against one eager call: different programs, equal up to rounding)
    assert_keep_counts_agree(ref, res._replace(num_invalid=ref.num_invalid, num_bad_delta=ref.num_bad_delta), 5.0, 6)
    assert int(res.num_invalid) == 2 and int(res.num_valid) == 4 and int(res.num_bad_delta) == 1
    assert np.all(np.isfinite(np.asarray(res.curve))) and np.all(np.isfinite(np.asarray(res.gain)))
    assert not np.asarray(res.keep)[~used].any()
    np.testing.assert_array_equal(np.asarray(res.order)[4:], [1, 2])
    sd = jax.jit(window_std)(jnp.ones((9, 15)), jnp.array([99, -3, 0, 1, 2, 3, 4, 5, 6]))
    np.testing.assert_array_equal(np.asarray(sd), 0.0)  # epochs clipped, not an error


def test_nested_vmap_with_shared_arguments_equals_loop(rng):
    """vmap(vmap(prob_best)) with sigma shared by the outer batch: the rows rule flattens."""
    mu = rng.normal(size=(3, 2, 40)) * 0.5
    sigma = 10 ** rng.uniform(-2, -0.5, (2, 40))
    mask = rng.uniform(size=(3, 2, 40)) < 0.9
    f = jax.jit(jax.vmap(jax.vmap(prob_best), in_axes=(0, None, 0)))
    got = np.asarray(f(mu, sigma, mask))
    for i in range(3):
        for j in range(2):
            np.testing.assert_allclose(got[i, j], np.asarray(prob_best(mu[i, j], sigma[j], mask[i, j])),
                                       rtol=p_rtol(40), atol=P_ATOL)  # vmap vs one call: rounding
    hlo = f.lower(mu, sigma, mask).as_text()
    one = jax.jit(prob_best).lower(mu[0, 0], sigma[0], mask[0, 0]).as_text()
    # the loops of one problem, run once for all six problems (not six loops)
    assert hlo.count("stablehlo.while") == one.count("stablehlo.while") > 0


def test_vmap_in_row_groups_equals_loop(monkeypatch, rng):
    """A vmapped batch larger than a group of rows (the CPU's tile budget) is integrated
    group after group, the last padded with empty rows: the numbers of one call per problem,
    and of the quadrature oracle."""
    n, rows = 29, 7
    mu = rng.normal(size=(rows, n)) * 0.3
    mu[:3] = 0.1 + 0.01 * rng.uniform(size=(3, n))  # close candidates: the dense pass
    sigma = 10 ** rng.uniform(-2, -0.5, (rows, n))
    mask = rng.uniform(size=(rows, n)) < 0.9
    levels, order = _quadrature.rule(jnp.float64)
    # one problem's tile: the whole rule (16 x 13 nodes, below 1,024 values per panel) on a
    # block of 32 columns, 8 bytes each; a budget of three problems gives groups of 3, 3, 3
    # for 7 rows (two of them padding)
    per_row = (levels + 1) * order * 32 * 8
    monkeypatch.setattr(_quadrature, "_TILE_BYTES", 3 * per_row + 8)
    assert _quadrature.rows_per_group(rows, n, jnp.float64) == 3
    assert _quadrature.rows_per_group(6, n, jnp.float64) == 3
    assert _quadrature.rows_per_group(4, n, jnp.float64) == 2  # two groups of 2, not 3 + 1
    jax.clear_caches()  # the budget is read when the program is traced
    f = jax.jit(jax.vmap(prob_best))
    got = np.asarray(f(mu, sigma, mask))
    hlo = f.lower(mu, sigma, mask).as_text()
    jax.clear_caches()
    for i in range(rows):
        np.testing.assert_allclose(got[i], np.asarray(prob_best(mu[i], sigma[i], mask[i])),
                                   rtol=p_rtol(n), atol=P_ATOL)  # grouped rows vs one call: rounding
    oracle = quad_prob_best(mu[5][mask[5]], sigma[5][mask[5]])
    np.testing.assert_allclose(got[5][mask[5]], oracle, rtol=0, atol=1e-9)
    assert np.all(got[5][~mask[5]] == 0)
    one = jax.jit(prob_best).lower(mu[0], sigma[0], mask[0]).as_text()
    # the loops of one problem inside one more loop, over the groups
    assert hlo.count("stablehlo.while") == one.count("stablehlo.while") + 1


def test_derivatives_match_central_differences():
    """Forward and reverse mode against central differences, with a masked and a skipped candidate."""
    mu = jnp.array([0.0, 0.1, 0.3, 5.0, 0.05])
    sigma = jnp.array([0.1, 0.2, 0.1, 0.1, 0.3])
    mask = jnp.array([True, True, True, True, False])

    def f(v):
        return prob_best(v[:5], v[5:], mask)

    v = jnp.concatenate([mu, sigma])
    h = 1e-6
    fd = np.stack([(f(v + h * e) - f(v - h * e)) / (2 * h) for e in jnp.eye(10)], axis=1)
    rev = np.asarray(jax.jacrev(f)(v))
    np.testing.assert_allclose(rev, fd, rtol=0, atol=1e-7)
    # forward and reverse mode sum the same terms in other orders: up to rounding, relative
    # to the derivatives' size
    np.testing.assert_allclose(np.asarray(jax.jacfwd(f)(v)), rev, rtol=0, atol=p_rtol(5) * np.abs(rev).max())
    assert np.all(rev[:, [3, 4, 8, 9]] == 0) and np.all(rev[[3, 4]] == 0)


def test_skipped_panels_change_nothing(monkeypatch, rng):
    """Crowded candidates: the panel loop stops early, and the panels it leaves out carry
    nothing (against the full sum over every panel, and against the tail bound worked out
    in float64 with scipy's log-survival)."""
    levels, order = _quadrature.rule(jnp.float64)
    close = (0.1 + 0.01 * rng.uniform(size=(4, 1500)), 10 ** rng.uniform(-3, -1, (4, 1500)))
    # relevant candidates in several blocks of 256, a quarter of them far off
    spread = (rng.uniform(0.1, 1.0, (3, 3000)), 10 ** rng.uniform(-3, -1, (3, 3000)))
    mask = np.ones((3, 3000), bool)
    mask[1, ::3] = False

    def run(mu, sigma, mask):
        mu, sigma = jnp.asarray(mu), jnp.asarray(sigma)
        # a new function each time: the constants are read when it is traced
        return jax.jit(lambda *a: _quadrature._rows_sums(*a))(mu, sigma, _validate.valid_mask(mu, sigma, jnp.asarray(mask)))

    cases = [(close, np.ones((4, 1500), bool)), (spread, mask)]
    cut = [run(*c, m) for c, m in cases]
    mu, sigma = close[0][0], close[1][0]
    x, _, _, scale, _, log_cut = _quadrature._prob_best_prep(jnp.asarray(mu), jnp.asarray(sigma), jnp.ones(1500, bool))
    monkeypatch.setattr(_quadrature, "_TAIL", 0.0)  # log_cut = -inf: every panel
    full = [run(*c, m) for c, m in cases]
    for (p_cut, steps_cut), (p_full, steps_full) in zip(cut, full):
        assert int(steps_full) == levels + 1
        assert int(steps_cut) < levels + 1
        np.testing.assert_allclose(np.asarray(p_cut), np.asarray(p_full), rtol=0, atol=1e-18)
    assert int(cut[0][1]) <= 9  # about half the panels for crowded candidates

    # The bound itself: L at the first skipped node, from scipy, against the cut.
    first_skipped = np.asarray(x)[int(cut[0][1]) * order] + float(np.min(mu + 9 * sigma))
    L = special.log_ndtr(-(first_skipped - mu) / sigma).sum()
    assert L < float(log_cut)
    b, a = np.min(mu + 9 * sigma), np.min(mu - 9 * sigma)
    assert np.exp(L) * (b - a) * 10 / float(scale) < 1e-4 * np.finfo(np.float64).eps


def test_dense_and_blocked_paths_agree(monkeypatch, rng):
    """Close candidates (all relevant) take the dense pass; forcing the block loop gives the same p."""
    mu = 0.1 + 0.01 * rng.uniform(size=(3, 70))
    sigma = 10 ** rng.uniform(-3, -1, (3, 70))
    mask = np.ones((3, 70), bool)
    mask[1, ::7] = False

    def run(mu, sigma, mask):
        return jax.vmap(lambda m, s, k: _curves.normalise(_quadrature.prob_best_kernel(m, s, _validate.valid_mask(m, s, k))))(mu, sigma, mask)

    args = (jnp.asarray(mu), jnp.asarray(sigma), jnp.asarray(mask))
    p_dense = np.asarray(jax.jit(run)(*args))
    monkeypatch.setattr(_quadrature, "_DENSE_FRACTION", np.inf)
    p_blocked = np.asarray(jax.jit(run)(*args))
    # two programs (one dense pass, a loop over blocks) summing in other orders: rounding
    np.testing.assert_allclose(p_blocked, p_dense, rtol=p_rtol(70), atol=P_ATOL)
    np.testing.assert_allclose(p_dense[0], quad_prob_best(mu[0], sigma[0]), rtol=0, atol=1e-9)


def test_accelerator_block_and_batch_sizes_give_the_same_numbers(monkeypatch, rng):
    """The sizes chosen off the CPU (blocks of up to 2,048 candidates, 256 MiB batch steps)
    give the CPU's numbers: spread problems (skipped candidates; the relevant ones fill several
    CPU blocks of 256 and part of one block of 2,048) and close ones (dense pass), one
    problem and a batch."""
    spread = (rng.uniform(0.1, 1.0, (2, 3000)), 10 ** rng.uniform(-3, -1, (2, 3000)))
    close = (rng.uniform(0.1, 0.11, (3, 200)), 10 ** rng.uniform(-3, -1, (3, 200)))
    mask = np.ones((2, 3000), bool)
    mask[0, ::5] = False

    def results():
        jax.clear_caches()
        out = [np.asarray(prob_best(spread[0][0], spread[1][0], mask[0])),
               np.asarray(prob_best_batch(*spread, mask)),
               np.asarray(confidence_curve_batch(*close).curve)]
        return out, _quadrature.block_size(3000), _batch._batch_size(1000, 200, jnp.float64, None)

    cpu, cpu_block, cpu_batch = results()
    monkeypatch.setattr(_quadrature, "on_cpu", lambda: False)
    acc, acc_block, acc_batch = results()
    jax.clear_caches()
    assert cpu_block == 256 and acc_block == 2048
    assert acc_batch > cpu_batch
    mu0, sigma0 = spread[0][0], spread[1][0]
    hi = np.min(np.where(mask[0], mu0 + 9 * sigma0, np.inf))
    assert 256 * 2 < np.sum(mask[0] & (mu0 - 9 * sigma0 < hi)) < 2048
    # other block and batch sizes are other programs: up to rounding (n = 3,000 or 200)
    for a, b, n in zip(acc, cpu, (3000, 3000, 200)):
        np.testing.assert_allclose(a, b, rtol=p_rtol(n), atol=P_ATOL)


# ------------------------------------------------------------ one API style: KeepCount.ok
def test_keep_count_ok_is_the_status():
    """KeepCount.ok: False exactly when a value had to be masked out or replaced (num_invalid,
    num_bad_delta, a non-finite round budget inside jit; reason BAD_INPUT); the other fields as before
    (k, tau, k_star recorded from the release without ok)."""
    mu = np.array([0.30, 0.31, 0.33, 0.40, 0.55, 0.70])
    sigma = np.full(6, 0.03)
    good = keep_count(mu, sigma, 0.003, 20.0)
    assert bool(good.ok) and int(good.num_invalid) == 0 and int(good.num_bad_delta) == 0
    assert int(good.reason) == Reason.OK
    assert (int(good.k), int(good.k_star)) == (3, 3)
    assert float(good.tau) == pytest.approx(0.9990108612100476, rel=1e-12)
    kc = jax.jit(keep_count)  # value checks are eager only: inside jit values are reported
    assert bool(kc(mu, sigma, 0.003, 20.0).ok)
    nan_mu = kc(np.where(np.arange(6) == 1, np.nan, mu), sigma, 0.003, 20.0)
    assert not bool(nan_mu.ok) and int(nan_mu.num_invalid) == 1 and int(nan_mu.reason) == Reason.BAD_INPUT
    bad_delta = kc(mu, sigma, np.where(np.arange(6) == 2, np.inf, 0.003), 20.0)
    assert not bool(bad_delta.ok) and int(bad_delta.num_invalid) == 0 and int(bad_delta.num_bad_delta) == 1
    assert not bool(kc(mu, sigma, 0.003, jnp.inf).ok)
    # a NaN on a padded row is not a value: ok stays True
    padded = kc(np.where(np.arange(6) == 5, np.nan, mu), sigma, 0.003, 20.0, np.arange(6) < 5)
    assert bool(padded.ok) and int(padded.num_invalid) == 0


def test_keep_count_buckets_equal_the_compact_problem():
    """keep_count integrates over the smallest bucket (8, 22, 64 here) holding the valid
    candidates. On both sides of each edge (8 | 9, 22 | 23),
    a masked problem of 64 slots (valid ones scattered) equals the compact problem of its
    valid candidates, one at a time and in one vmapped batch whose members need different
    buckets (each takes its own gated branch). Different programs: floats up to rounding
    (p_rtol), the decisions exactly where F(k*) leads the next k by far more than rounding
    (checked on the compact problem)."""
    assert _keep.bucket_sizes(64) == (8, 22, 64) and _keep.bucket_sizes(6) == (6,)
    assert _keep.bucket_sizes(12) == (8, 12) and _keep.bucket_sizes(256) == (29, 86, 256)
    rng = np.random.default_rng(11)
    counts = (2, 8, 9, 22, 23, 64)
    cases = []
    for nv in counts:
        pos = np.sort(rng.choice(64, nv, replace=False))
        mask = np.zeros(64, bool)
        mask[pos] = True
        mu = rng.uniform(0.2, 0.6, 64)
        sigma = rng.uniform(0.01, 0.06, 64)
        cases.append((mu, sigma, 0.1 * sigma, mask, pos))
    many = jax.jit(jax.vmap(keep_count, in_axes=(0, 0, 0, None, 0)))
    batched = many(*(np.stack([c[i] for c in cases]) for i in range(3)), 20.0, np.stack([c[3] for c in cases]))
    for j, (mu, sigma, delta, mask, pos) in enumerate(cases):
        nv = len(pos)
        compact = keep_count(mu[pos], sigma[pos], delta[pos], 20.0)
        tol = p_rtol(nv)
        net = (np.asarray(compact.gain) - np.asarray(compact.cost))[1:]
        f = np.sort([np.sum(net[k:]) for k in range(nv)])
        assert nv < 3 or f[-1] - f[-2] > 1e3 * tol
        for res in (keep_count(mu, sigma, delta, 20.0, mask), jax.tree.map(lambda f, j=j: f[j], batched)):
            assert int(res.num_valid) == nv
            np.testing.assert_array_equal(np.asarray(res.order)[:nv], pos[np.asarray(compact.order)])
            for name in ("cost", "curve"):
                np.testing.assert_allclose(np.asarray(getattr(res, name))[:nv], np.asarray(getattr(compact, name)),
                                           rtol=tol, atol=P_ATOL, err_msg=name)
            np.testing.assert_allclose(np.asarray(res.zeta)[:nv], np.asarray(compact.zeta), rtol=0, atol=2 * tol)
            np.testing.assert_array_equal(np.asarray(res.cost)[nv:], 0.0)
            np.testing.assert_array_equal(np.asarray(res.zeta)[nv:], 0.0)
            assert int(res.k) == int(compact.k) and int(res.k_star) == int(compact.k_star)
            np.testing.assert_array_equal(np.asarray(res.keep)[pos], np.asarray(compact.keep))
            assert not np.asarray(res.keep)[~mask].any() and bool(res.ok)
    # a member with no valid candidate takes no bucket: zero terms, EMPTY, as one at a time
    empty = np.zeros(64, bool)
    both = many(*(np.stack([c[i] for c in cases[-2:]] + [cases[0][i]]) for i in range(3)), 20.0,
                np.stack([cases[-2][3], cases[-1][3], empty]))
    for res in (keep_count(*cases[0][:3], 20.0, empty), jax.tree.map(lambda f: f[2], both)):
        assert int(res.num_valid) == 0 and int(res.k) == 0 and not np.asarray(res.keep).any()
        assert int(res.reason) == int(Reason.EMPTY)
        for name in ("cost", "gain", "zeta", "curve"):
            np.testing.assert_array_equal(np.asarray(getattr(res, name)), 0.0, err_msg=name)
