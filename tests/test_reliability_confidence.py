"""Reliability of jaxstop.confidence: float32 against float64, units, status, dtypes, padding.

Oracles: the float64 computation of the same (float32-rounded) problem, with tolerances
derived from float32 rounding; scipy.integrate.quad on the defining integral in centred
units; closed forms; Monte Carlo with 4-standard-error tolerances.
"""

import itertools

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from scipy import special, stats

from _compiles import count_compilations
from jaxstop import confidence
from jaxstop._src.status import Reason
from jaxstop.confidence import _keep, _quadrature
from test_confidence import quad_leader, quad_prob_best  # the scipy oracles

EPS32 = float(np.finfo(np.float32).eps)
TAIL_CUT = 1e-4 * EPS32 + 2 * special.ndtr(-9.0)  # skipped panels and candidates, per integral
keep_count_jit = jax.jit(confidence.keep_count)
problem_status_jit = jax.jit(confidence.problem_status)


# ----------------------------------------------------------------------------
# float32 against float64


def float32_error_bounds(mu, sigma, shrunk, n):
    """Bounds on the float32 errors of one problem's integrals, against float64 on the same
    (float32) input. Returns ``(rho, tau)``: an integral ``I`` (a probability, a leader value)
    is off by at most ``rho * I`` plus a share of ``tau``, where ``tau`` bounds the total over
    all integrals of one problem.

    * ``rho``, the forward rounding of the node sums: an integrand is ``w_k exp(L_k) h_ki``
      with ``L_k`` a sum of n log-survivals ``log S(z_j)``. Nodes where some ``z > 5`` carry
      less than ``S(5) = 2.9e-7`` of any integral (``tau`` takes them); at the others each
      ``log S`` is within 50 eps: the degree-10 ``erfcx`` polynomial (1e-6 = 8.4 eps, as
      test_confidence checks), three roundings (exp, division, log), the rounded exponent
      ``z^2 / 2`` (``eps z^2 / 2 <= 12.5 eps``) and the rounded ``z = (x - m) / s``
      (``lam(z) |z| eps <= 26 eps``, the hazard ``lam(5) = 5.2``). The hazard ``h_i`` has
      the same budget, and the normalisation by the total doubles: ``100 (n + 1) eps``.
    * ``tau``, the rounding of positions: in standard units (``mu' = (mu - c) / s``,
      ``sigma' = sigma / s``) candidate j sits at ``mu'_j - b'`` relative to the rule, with
      three roundings of magnitude at most ``|mu'_j| + |b'|``: float32 integrates the
      problem with ``X_j`` shifted by ``d_j <= eps (|mu'_j| + |b'|)`` and scaled by ``1 + eps``.
      Any probability of the problem (each ``p_i``, each leader value) then moves by at most
      the total variation of the shifts, ``sum_j d_j / (sigma'_j sqrt(2 pi)) + 0.5 eps``
      (``TV(N(0, s^2), N(d, s^2)) <= d / (s sqrt(2 pi))``; a relative scale change r adds
      at most ``0.5 r``), over the candidates that enter an integral. Plus, per integral,
      the cuts of the rule (``TAIL_CUT``) and the nodes beyond ``z = 5``: they carry at most
      ``2 S(5)`` (one factor of the integrand is below ``S(5)``, or ``phi_i`` is beyond 5),
      off by at most ``rho`` with the budget at ``z = 9`` (the nodes stop at ``z_j = 9``:
      ``11.4 + 40.5 + 82`` eps per log-survival). Both the ``sigma`` and the shrunk problem
      count.
    """
    tau = 0.0
    for s_ in (sigma, shrunk):
        scale = s_.max()
        mu_s, s_s = (mu - mu.min()) / scale, s_ / scale
        b = np.min(mu_s + 9 * s_s)
        lead = np.argmin(mu_s)
        near = mu_s - 9 * s_s < max(b, 9 * s_s[lead])
        d = EPS32 * (np.abs(mu_s) + abs(b))
        tv = np.sum((d / (s_s * np.sqrt(2 * np.pi)) + 0.5 * EPS32)[near])
        rho9 = 2 * (n + 1) * 134 * EPS32
        tau = max(tau, tv + n * (TAIL_CUT + 2 * special.ndtr(-5.0) * rho9))
    return 100 * (n + 1) * EPS32, tau


def decision_is_robust(cost, gain, zeta_err, rho, tau, n, budget):
    """Whether float64's keep decision (rule "argmax") is decided by more than float32
    rounding, given float64's per-k ``cost`` and ``gain`` and the bound ``zeta_err`` on each
    float32 zeta (see ``float32_error_bounds``). Returns ``(robust, k)``.

    k* maximises ``F(k) = sum_{j > k} (gain_j - cost_j)``. ``F(k*) - F(k)`` sums the terms
    between k and k*, and the float32 program's difference sums the same float32 terms, so
    it is off by at most ``sum_between (rho cost_j + budget zeta_err_j / (j (j - 1))) + tau``
    plus the rounding of the two cumulative sums (``n eps sum_j |net_j|``). Every k whose F
    is that close to the maximum could be float32's k*; the decision is robust when all of
    them keep the same number of candidates.

    k = 1 + #{k' < k* : 1 - P_k' > 1 - P_k*}, the tail sums of the costs summed from the far
    end. float32's tail sums are sums of non-negative float32 costs, so a gap ``g`` between
    two of them (the costs ranked between) survives unless float32 loses it: each cost is
    within ``rho cost + tau``, and each cumulative sum rounds by at most ``n eps / 2`` of
    itself. A gap of exactly 0 (costs exactly 0) is 0 in float32 too.
    """
    j = np.arange(1, n + 1)
    net = np.where(j >= 2, gain - cost, 0.0)
    # sums from the far end, one term at a time: the tail sums are monotone by construction
    f = np.append(np.cumsum(net[::-1])[::-1][1:], 0.0)
    after = np.append(np.cumsum(cost[::-1])[::-1][1:], 0.0)  # 1 - P_k
    d_net = np.where(j >= 2, rho * cost + budget * zeta_err / np.maximum(j * (j - 1), 1), 0.0)
    sums = n * EPS32 * np.abs(net).sum()
    k_star = max(k for k in range(1, n + 1) if f[k - 1] == f.max())

    def err(k1, k2):
        lo, hi = sorted((k1, k2))
        return d_net[lo:hi].sum() + tau + sums

    near = [k for k in range(1, n + 1) if f[k_star - 1] - f[k - 1] <= err(k_star, k)]
    kept = set()
    for ks in near:
        gap = after - after[ks - 1]
        lost = (j < ks) & (gap > 0) & ((1 - rho) * gap - tau <= n * EPS32 * (after + after[ks - 1]))
        if lost.any():
            return False, None
        kept.add(1 + int(np.sum(after > after[ks - 1])))
    return len(kept) == 1, kept.pop() if len(kept) == 1 else None


def ordinary_problems(seed):
    """A stream of ordinary float32 problems: 30 candidates, mu in [0.2, 0.4], sigma in
    [0.005, 0.05], delta_sigma in [0, 0.003], a round budget of 1, 5, 20 or 100."""
    rng = np.random.default_rng(seed)
    while True:
        mu, sigma, delta = (rng.uniform(lo, hi, 30).astype(np.float32)
                            for lo, hi in ((0.2, 0.4), (0.005, 0.05), (0.0, 0.003)))
        yield mu, sigma, delta, np.float32(rng.choice([1.0, 5.0, 20.0, 100.0]))


def ordinary_problem(seed, t):
    """The t-th problem (0-based) of ``ordinary_problems(seed)``."""
    return next(itertools.islice(ordinary_problems(seed), t, None))


def test_float32_keep_count_agrees_with_float64():
    """100 ordinary float32 problems (30 candidates, mu in [0.2, 0.4], sigma in [0.005, 0.05],
    delta_sigma in [0, 0.003]): every float32 result is finite and ok, its costs and zetas lie
    within the derived rounding bounds of float64's on the same input, and its k equals
    float64's wherever float64's decision margin exceeds float32 rounding (the majority)."""
    n, num = 30, 100
    kc = confidence.keep_count
    decided = 0
    for t, (mu, sigma, delta, budget) in enumerate(itertools.islice(ordinary_problems(2), num)):
        r32 = kc(mu, sigma, delta, budget)
        mu64, s64, d64 = (a.astype(np.float64) for a in (mu, sigma, delta))
        budget = float(budget)
        r64 = kc(mu64, s64, d64, budget)
        fields = (r32.tau, r32.curve, r32.cost, r32.gain, r32.zeta)
        assert all(np.all(np.isfinite(np.asarray(v))) for v in fields), t
        assert bool(r32.ok) and int(r32.reason) == Reason.OK and bool(r64.ok), t
        np.testing.assert_array_equal(np.asarray(r32.order), np.asarray(r64.order))
        shrunk = np.maximum(s64 - d64, 1e-3 * s64)
        rho, tau = float32_error_bounds(mu64, s64, shrunk, n)
        cost = np.asarray(r64.cost)
        assert np.all(np.abs(np.asarray(r32.cost, float) - cost) <= rho * cost + tau), t
        # zeta = P_1(shrunk) - P_1(sigma): two leader values, each off by rho P_1 + tau, P_1 <= 1
        zeta_err = 2 * rho + 2 * tau
        assert np.all(np.abs(np.asarray(r32.zeta, float) - np.asarray(r64.zeta)) <= zeta_err), t
        robust, k = decision_is_robust(cost, np.asarray(r64.gain), zeta_err, rho, tau, n, budget)
        if robust:
            decided += 1
            assert k == int(r64.k), t  # the oracle's own reading of its numbers
            assert int(r32.k) == int(r64.k), (t, int(r32.k), int(r64.k))
    assert decided >= 0.5 * num  # the comparison is not vacuous


def test_float32_zeta_with_a_short_leader_window_matches_quad():
    """An ordinary problem whose shrunk leader window beyond b* is shorter than the finest
    panel, so the graded rule there is all empty panels but one (zero widths that must stay
    exactly 0, not -1 ulp, under the vmap over (sigma, shrunk sigma)): float32 zeta against
    scipy.integrate.quad of the leader probabilities of the same float32 input. Tolerance:
    the float32 bound of test_float32_keep_count_agrees_with_float64 (``rho P_1 + tau``
    per leader value), plus 1e-10 for quad's own error."""
    mu, sigma, delta, _ = ordinary_problem(0, 10)
    order = np.argsort(mu, kind="stable")
    m, s, d = (a[order].astype(np.float64) for a in (mu, sigma, delta))
    shrunk = np.maximum(s - d, 1e-3 * s)
    b1, bstar = m[0] + 9 * shrunk[0], np.min(m + 9 * shrunk)
    assert 0 < b1 - bstar < 4 * np.min(shrunk[m - 9 * shrunk < b1])  # shorter than the finest panel
    z = np.asarray(confidence.keep_count(mu, sigma, delta, np.float32(1.0)).zeta, float)
    assert np.all(np.isfinite(z))
    ks = (2, 3, 5, 10, 20, 30)
    before = np.array([quad_leader(m, s, k) for k in ks])
    after = np.array([quad_leader(m, shrunk, k) for k in ks])
    rho, tau = float32_error_bounds(m, s, shrunk, 30)
    err = np.abs(z[np.array(ks) - 1] - (after - before))
    np.testing.assert_array_less(err, rho * (before + after) + 2 * tau + 1e-10)


def test_float32_rule_truncation_is_below_float32_rounding(monkeypatch):
    """The float32 rules (prob_best: 12 Gauss-Legendre nodes per panel; the leader values of
    zeta: 8) against the float64 one (16), all in float64 arithmetic on ordinary problems of
    30 candidates. prob_best's differ by less than 1e-4 eps32; zeta's by less than 1e-4 of
    the float32 rounding bound ``rho = 100 (n + 1) eps32`` of float32_error_bounds (0.31 eps32
    at n = 30), so the float32 / float64 comparisons above measure rounding only."""

    def kernels(mu, sigma, delta):  # prob_best and zeta, as keep_count computes them
        valid = jnp.ones(mu.shape, bool)
        order = jnp.argsort(mu, stable=True)
        p = _quadrature.prob_best_kernel(mu, sigma, valid)
        return p / jnp.sum(p), _keep._zeta_sorted(mu[order], sigma[order], valid, delta[order])[0]

    probs = [[a.astype(np.float64) for a in ordinary_problem(7, t)[:3]] for t in range(2)]
    ref = jax.jit(lambda *a: kernels(*a))  # a new function: traced with the rule of the moment
    ref = [ref(*p) for p in probs]
    assert _quadrature.rule(jnp.float32) == (12, 12) and _quadrature.leader_rule(jnp.float32) == (12, 8)
    monkeypatch.setattr(_quadrature, "rule", lambda dtype: (12, 12))
    monkeypatch.setattr(_quadrature, "leader_rule", lambda dtype: (12, 8))
    low = jax.jit(lambda *a: kernels(*a))
    low = [low(*p) for p in probs]
    rho = 100 * (30 + 1) * EPS32
    for (p_ref, z_ref), (p_low, z_low) in zip(ref, low):
        np.testing.assert_allclose(np.asarray(p_low), np.asarray(p_ref), rtol=0, atol=1e-4 * EPS32)
        np.testing.assert_allclose(np.asarray(z_low), np.asarray(z_ref), rtol=0, atol=1e-4 * rho)


# ----------------------------------------------------------------------------
# units: shift and scale, unrepresentable problems
#
# Small problems are padded to PAD candidates with NaN junk on the padded rows, so that the
# tests below share one compilation per function and dtype (and check inert padding).

PAD = 8


def padded(mu, sigma, dtype):
    """``(mu, sigma, mask)`` of PAD rows: the problem first, NaN / inf junk after it."""
    k = len(mu)
    junk_mu = np.array([np.nan, np.inf, -np.inf, 1e30, 0.0, np.nan, -1.0, 5.0][: PAD - k])
    junk_sigma = np.array([np.nan, -1.0, np.inf, 0.0, 1e30, np.nan, 1.0, -np.inf][: PAD - k])
    mask = np.arange(PAD) < k
    mu_p = np.concatenate([np.asarray(mu, float), junk_mu])
    sigma_p = np.concatenate([np.asarray(sigma, float), junk_sigma])
    with np.errstate(over="ignore", invalid="ignore"):
        return mu_p.astype(dtype), sigma_p.astype(dtype), mask


def test_large_offsets_and_scales_are_integrated_in_standard_units():
    """mu near 1e6 with sigma 1e-3 (float64), and float32 problems scaled by 1e30 / 1e-30,
    against scipy.integrate.quad of the centred problem."""
    mu0 = np.array([0.0, 0.003, 0.006, 0.002])
    s0 = np.array([1e-3, 2e-3, 1e-3, 4e-3])
    oracle = quad_prob_best(mu0, s0)
    args = padded(1e6 + mu0, s0, np.float64)
    p = np.asarray(confidence.prob_best(*args))
    assert bool(confidence.problem_status(*args).ok)
    # the rounding of 1e6 + mu0 to float64 (~1.2e-10) over sigma 1e-3 moves p by ~5e-8
    np.testing.assert_allclose(p[:4], oracle, rtol=0, atol=2e-7)
    assert abs(p.sum() - 1) < 1e-12 and np.all(p[4:] == 0)
    unit_mu, unit_sigma = (mu0 - 0.003) / 1e-3, s0 / 1e-3
    for a in (1e30, 1e-30):
        args = padded(unit_mu * a, unit_sigma * a, np.float32)
        p32 = np.asarray(confidence.prob_best(*args), float)
        assert bool(confidence.problem_status(*args).ok)
        # float32 inputs and arithmetic: within the float32 accuracy of test_confidence (2e-6)
        np.testing.assert_allclose(p32[:4], oracle, rtol=0, atol=2e-6)


def test_float32_below_resolution_and_overflow():
    """float32 mu = 1e6 + [0, .003, .006] is one number: with sigma 1e-3 the problem is
    unrepresentable (ok False, reason UNREPRESENTABLE; the probabilities are those of the
    rounded input: 1/3 each, finite, summing to 1); with sigma = 3e38, where mu + 9 sigma
    overflows, it is fine (1/3 each, closed form). keep_count says the same."""
    mu = np.array([1e6, 1e6 + 0.003, 1e6 + 0.006], np.float32)
    assert np.all(mu == mu[0])
    for sigma, ok in ((1e-3, False), (3e38, True)):
        args = padded(mu, np.full(3, sigma), np.float32)
        p = np.asarray(confidence.prob_best(*args), float)
        np.testing.assert_allclose(p, [1 / 3] * 3 + [0] * 5, rtol=0, atol=2e-7)
        st = confidence.problem_status(*args)
        assert bool(st.ok) == ok
        assert int(st.reason) == (Reason.OK if ok else Reason.UNREPRESENTABLE)
        res = keep_count_jit(args[0], args[1], np.float32(0.0), np.float32(1.0), args[2])
        assert bool(res.ok) == ok and int(res.reason) == int(st.reason)
        assert int(res.k) == 3  # no gain: every candidate with probability > 0 is kept
    # the same problem in float64 is representable: quad of the centred problem
    args = padded(1e6 + np.array([0.0, 0.003, 0.006]), np.full(3, 1e-3), np.float64)
    assert bool(confidence.problem_status(*args).ok)
    p64 = np.asarray(confidence.prob_best(*args))[:3]
    np.testing.assert_allclose(p64, quad_prob_best([0.0, 0.003, 0.006], np.full(3, 1e-3)), rtol=0, atol=2e-7)
    # means whose difference overflows float32: the far one is beyond every window (p = 0)
    args = padded([-3e38, 3e38], [1e36, 1e36], np.float32)
    np.testing.assert_array_equal(np.asarray(confidence.prob_best(*args))[:2], [1.0, 0.0])
    assert bool(confidence.problem_status(*args).ok)
    # a mean whose float32 spacing (2e31) dwarfs its sigma, but nothing competes with it:
    # p = [1, 0] whatever the rounding, so the problem is as given
    args = padded([-3e38, 3e38], [1.0, 1.0], np.float32)
    np.testing.assert_array_equal(np.asarray(confidence.prob_best(*args))[:2], [1.0, 0.0])
    assert bool(confidence.problem_status(*args).ok)
    # two such means within each other's window: merged by the rounding, unrepresentable
    args = padded([-3e38, -3e38 + 1.0], [1.0, 1.0], np.float32)
    np.testing.assert_array_equal(np.asarray(confidence.prob_best(*args))[:2], [0.5, 0.5])
    assert int(confidence.problem_status(*args).reason) == Reason.UNREPRESENTABLE
    # spreads 60 decades apart: sigma / max(sigma) underflows float32
    args = padded([0.0, 0.0], [1e-30, 1e30], np.float32)
    st = confidence.problem_status(*args)
    assert not bool(st.ok) and int(st.reason) == Reason.UNREPRESENTABLE
    p = np.asarray(confidence.prob_best(*args), float)
    assert np.all(np.isfinite(p)) and abs(p.sum() - 1) < 1e-6


def test_a_coarse_mean_without_a_close_competitor_is_represented():
    """The spacing of a mean counts against the spread it competes over (that of X_j - X_l
    for the other candidates l in its window), not its own sigma alone: one float32 candidate
    at 1e6 with sigma 1e-3 has p = [1] whatever its rounding, and a leader with a tiny sigma
    against a wide competitor (a zeta's shrunk sigma) moves p by ~spacing / spread ~1e-6.
    keep_count agrees with float64 on such a problem (the UQ pruner's fallback hinged on it)."""
    for mu, sigma in (([1e6], [1e-3]), ([1e6, 2e6], [1e-3, 1.0]), ([0.1299, 0.1684], [3.8e-6, 0.014])):
        args = padded(mu, sigma, np.float32)
        st = confidence.problem_status(*args)
        assert bool(st.ok) and int(st.reason) == Reason.OK
        p = np.asarray(confidence.prob_best(*args), float)[: len(mu)]
        # against quad of the float64 problem: float32 accuracy (2e-6) plus the rounding of mu
        # (<= 1.2e-8 at 0.13) over the pair's spread (0.014), ~1e-6
        np.testing.assert_allclose(p, quad_prob_best(np.subtract(mu, mu[0]), sigma), rtol=0, atol=4e-6)
    # the leader's shrunk sigma (delta > sigma: 1e-3 of it, 3.8e-6) against members 0.006-0.014 wide
    mu = [0.7146012, 0.3901596, 0.17377406, 0.12986314, 0.16842067]
    sigma = [0.0089656, 0.00620254, 0.0060482, 0.00379101, 0.01431776]
    delta = [0.00018135, 0.00542729, 0.001623, 0.01330229, 0.00029806]
    args = padded(mu, sigma, np.float32)
    d = np.zeros(PAD, np.float32)
    d[:5] = delta
    res = keep_count_jit(args[0], args[1], d, np.float32(54.0), args[2])
    ref = confidence.keep_count(np.array(mu), np.array(sigma), np.array(delta), 54.0)  # float64
    assert bool(res.ok) and int(res.k) == int(ref.k)
    np.testing.assert_array_equal(np.asarray(res.keep)[:5], np.asarray(ref.keep))
    # two members shrunk to ~1.5e-5 (delta > sigma), 0.13 apart: they never compete, and the
    # leader's P_1 (zeta) depends on the pairs with the leader (0.033 wide) only
    mu = [0.1951, 0.2424, 0.2592, 0.3901, 0.4569]
    sigma = [0.0329, 0.0255, 0.0139, 0.0165, 0.021]
    delta = [-0.0045, 0.0098, 0.0203, 0.0204, 0.0111]
    args = padded(mu, sigma, np.float32)
    d[:5] = delta
    res = keep_count_jit(args[0], args[1], d, np.float32(90.0), args[2])
    ref = confidence.keep_count(np.array(mu), np.array(sigma), np.array(delta), 90.0)
    assert bool(res.ok) and int(res.k) == int(ref.k)
    # two float32 leader values (2e-7 each, package docstring) and the inputs' rounding
    np.testing.assert_allclose(np.asarray(res.zeta, float)[:5], np.asarray(ref.zeta), rtol=0, atol=1e-6)


def test_shifted_float32_problem_monte_carlo(rng):
    """float32 losses near 100 (spacing 7.6e-6, below 2^-10 of the smallest sigma): ok, and
    the probabilities match Monte Carlo of the rounded input within 4 standard errors plus
    the float32 accuracy (2e-6)."""
    mu = (100.0 + np.array([0.0, 0.01, 0.02, 0.05, 0.03])).astype(np.float32)
    sigma = np.array([0.02, 0.025, 0.03, 0.02, 0.05], np.float32)
    args = padded(mu, sigma, np.float32)
    assert bool(confidence.problem_status(*args).ok)
    p = np.asarray(confidence.prob_best(*args), float)[:5]
    draws = 1_000_000
    x = (mu.astype(float) - 100.0) + sigma.astype(float) * rng.standard_normal((draws, 5))
    freq = np.bincount(np.argmin(x, axis=1), minlength=5) / draws
    assert np.all(np.abs(freq - p) <= 4 * np.sqrt(p * (1 - p) / draws) + 2e-6)


def test_status_inside_jit():
    """Inside jit: a NaN on a selected row is BAD_INPUT, nothing selected is EMPTY, in
    problem_status and KeepCount alike; a shrunk sigma that overflows is UNREPRESENTABLE;
    every field stays finite."""
    mu, sigma, mask = padded([0.3, 0.31, 0.35, 0.4], np.full(4, 0.02), np.float32)
    d, r = np.float32(0.001), np.float32(10.0)
    good = keep_count_jit(mu, sigma, d, r, mask)
    assert bool(good.ok) and int(good.reason) == Reason.OK
    assert bool(problem_status_jit(mu, sigma, mask).ok)
    nan_mu = np.where(np.arange(PAD) == 2, np.nan, mu).astype(np.float32)
    st = problem_status_jit(nan_mu, sigma, mask)
    assert not bool(st.ok) and int(st.reason) == Reason.BAD_INPUT and int(st.num_invalid) == 1
    res = keep_count_jit(nan_mu, sigma, d, r, mask)
    assert not bool(res.ok) and int(res.reason) == Reason.BAD_INPUT
    none = np.zeros(PAD, bool)
    assert int(problem_status_jit(mu, sigma, none).reason) == Reason.EMPTY
    res = keep_count_jit(mu, sigma, d, r, none)
    assert not bool(res.ok) and int(res.reason) == Reason.EMPTY and int(res.k) == 0
    big = np.where(mask, np.float32(3e38), sigma).astype(np.float32)
    res = keep_count_jit(mu, big, np.float32(-3e38), r, mask)  # sigma - delta = inf
    assert not bool(res.ok) and int(res.reason) == Reason.UNREPRESENTABLE
    for v in (res, good, st):
        assert all(np.all(np.isfinite(np.asarray(x))) for x in jax.tree.leaves(v))


# ----------------------------------------------------------------------------
# unsupported dtypes


MU, SIGMA = np.array([0.3, 0.31, 0.35]), np.array([0.02, 0.03, 0.02])
LOSSES, EPOCHS = np.linspace(1, 0.5, 30).reshape(3, 10), np.array([10, 8, 9])
CALLS = {  # function, float64 arguments, their names
    "prob_best": (confidence.prob_best, (MU, SIGMA), ("mu", "sigma")),
    "confidence_curve": (confidence.confidence_curve, (MU, SIGMA), ("mu", "sigma")),
    "leader_curve": (confidence.leader_curve, (MU, SIGMA), ("mu", "sigma")),
    "effective_mask": (confidence.effective_mask, (MU, SIGMA), ("mu", "sigma")),
    "problem_status": (confidence.problem_status, (MU, SIGMA), ("mu", "sigma")),
    "zeta": (confidence.zeta, (MU, SIGMA, 0.1 * SIGMA), ("mu", "sigma", "delta_sigma")),
    "keep_count": (confidence.keep_count, (MU, SIGMA, 0.1 * SIGMA, np.float64(5.0)),
                   ("mu", "sigma", "delta_sigma", "round_budget")),
    "prob_best_batch": (confidence.prob_best_batch, (MU[None], SIGMA[None]), ("mu", "sigma")),
    "confidence_curve_batch": (confidence.confidence_curve_batch, (MU[None], SIGMA[None]), ("mu", "sigma")),
    "prob_better": (confidence.prob_better, (MU, SIGMA, MU[::-1], SIGMA), ("mu_a", "sigma_a", "mu_b", "sigma_b")),
    "window_std": (confidence.window_std, (LOSSES, EPOCHS), ("losses",)),
    "window_delta_sigma": (confidence.window_delta_sigma, (LOSSES, EPOCHS), ("losses",)),
}


def test_every_public_function_is_covered():
    """CALLS lists every public function of the quadrature, keep-rule, batch and window files."""
    files = {f"jaxstop.confidence.{m}" for m in ("_curves", "_keep", "_batch", "_window")}
    public = {name for name in confidence.__all__
              if callable(obj := getattr(confidence, name)) and not isinstance(obj, type) and obj.__module__ in files}
    assert public == set(CALLS)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", list(CALLS))
def test_half_precision_is_rejected_naming_the_argument(name, dtype):
    fn, args, names = CALLS[name]
    for i, arg in enumerate(names):
        bad = list(args)
        bad[i] = np.asarray(args[i]).astype(dtype)
        with pytest.raises(TypeError, match=rf"^{arg} has unsupported dtype"):
            fn(*bad)


# ----------------------------------------------------------------------------
# padding and invalid entries are inert


@jax.jit
def _prob_best_grad(mu, sigma, mask):
    return jax.grad(lambda m, s: confidence.prob_best(m, s, mask)[0], argnums=(0, 1))(mu, sigma)


@pytest.mark.parametrize("junk", [np.nan, np.inf, -np.inf, 3e38, -1.0, 0.0])
def test_junk_on_padded_and_invalid_rows_is_inert(junk):
    """NaN / inf / huge / non-positive values on padded rows of mu, sigma and delta_sigma:
    prob_best, keep_count (which runs every kernel: probabilities, curves, zeta) and the
    derivative equal their values with other junk there -- the same program, so exactly -- and
    derivatives stay finite and equal; inside jit the same values on selected rows are left
    out exactly like padding (BAD_INPUT where the value is invalid)."""
    mu, sigma, mask = padded([0.30, 0.31, 0.33, 0.36, 0.32], [0.02, 0.03, 0.02, 0.04, 0.01], np.float32)
    delta = np.where(mask, 0.1 * sigma, np.nan).astype(np.float32)

    def junked(a):
        return np.where(mask, a, np.float32(junk)).astype(np.float32)

    def everything(mu, sigma, delta, mask):  # keep_count runs every kernel (probabilities, curves, zeta)
        kc = keep_count_jit(mu, sigma, delta, np.float32(5.0), mask)
        return confidence.prob_best(mu, sigma, mask), kc, _prob_best_grad(mu, sigma, mask)

    ref = everything(mu, sigma, delta, mask)
    dirty = everything(junked(mu), junked(sigma), junked(delta), mask)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), ref, dirty)
    assert all(np.all(np.isfinite(np.asarray(v))) for v in jax.tree.leaves(dirty))
    assert bool(dirty[1].ok)
    if np.isfinite(junk) and junk > 0:
        return  # a valid (if odd) candidate when selected: nothing more to check
    everywhere = np.ones(PAD, bool)
    selected = keep_count_jit(junked(mu), junked(sigma), junked(delta), np.float32(5.0), everywhere)
    assert not bool(selected.ok) and int(selected.reason) == Reason.BAD_INPUT
    left_out = keep_count_jit(junked(mu), junked(sigma), junked(delta), np.float32(5.0), mask)
    np.testing.assert_array_equal(np.asarray(selected.cost), np.asarray(left_out.cost))
    np.testing.assert_array_equal(np.asarray(selected.zeta), np.asarray(left_out.zeta))


def test_float32_derivatives_are_finite_and_match_float64():
    """d p_0 / d(mu, sigma) in float32 against float64 on the same (float32) input: finite, and
    within float32 rounding. The derivative sums the node terms of p (``w exp(L) h``) times
    factors below ``(lam + |z|) / sigma <= 20 / sigma`` at the nodes (hazard <= 10, z <= 9),
    each term off by ``rho`` relative (see ``float32_error_bounds``): an absolute error below
    ``20 rho / min(sigma)``; a NaN or a dropped term is off by far more."""
    mu, sigma, mask = padded([0.30, 0.31, 0.33, 0.36, 0.32], [0.02, 0.03, 0.02, 0.04, 0.01], np.float32)
    g32 = [np.asarray(g, float) for g in _prob_best_grad(mu, sigma, mask)]
    g64 = [np.asarray(g) for g in _prob_best_grad(mu.astype(float), sigma.astype(float), mask)]
    rho = 32 * 6 * EPS32
    for a, b in zip(g32, g64):
        assert np.all(np.isfinite(a)) and np.all(a[~mask] == 0)
        np.testing.assert_allclose(a, b, rtol=0, atol=20 * rho / 0.01)
    assert np.abs(g64[0]).max() > 1.0  # derivatives of order 1 / sigma: the check is not vacuous


def test_prob_better_invalid_pairs_are_inert():
    """Inside jit an invalid pair gives 0 and a finite (zero) derivative."""
    f = jax.jit(confidence.prob_better)
    bad = f(jnp.array([jnp.nan, 0.0, 0.1]), jnp.array([0.1, -1.0, jnp.inf]), 0.5, 0.1)
    np.testing.assert_array_equal(np.asarray(bad), 0.0)
    g = jax.grad(lambda m: jnp.sum(confidence.prob_better(m, jnp.array([0.1, jnp.inf]), 0.5, 0.1)))
    d = np.asarray(jax.jit(g)(jnp.array([0.2, 0.2])))
    assert np.all(np.isfinite(d)) and d[1] == 0.0
    # the valid entry's derivative: -phi(z) / s, z = (0.5 - 0.2) / hypot(0.1, 0.1)
    s = np.hypot(0.1, 0.1)
    np.testing.assert_allclose(d[0], -stats.norm.pdf(0.3 / s) / s, rtol=1e-12)


def test_graded_rule_weights_are_never_negative():
    """The graded rule of windows shorter than their finest panel, empty or tiny, in float32
    and float64, vmapped: widths are products of non-negative factors, so weights are >= 0 and
    sum to the length (closed form, up to the rounding of 13 panels)."""
    for dtype in (jnp.float32, jnp.float64):
        lengths = jnp.asarray([7.7e-4, 0.0, 1.0, 3.0, 1e-30, -1e-9], dtype)
        h = jnp.asarray([7.4e-3, 1.0, 1e-3, 1.0, 1.0, 1.0], dtype)
        _, w = jax.jit(jax.vmap(lambda a, b: _quadrature._graded(a, b, 12, 12)))(lengths, h)
        w = np.asarray(w, float)
        assert np.all(w >= 0)
        tol = 64 * float(jnp.finfo(dtype).eps)
        np.testing.assert_allclose(w.sum(axis=1), np.maximum(np.asarray(lengths, float), 0), rtol=tol, atol=0)



def test_sigma_spread_beyond_the_rule_resolution_is_reported():
    """sigma 1e-10 of the others (below 2^-20 of prob_best's window) is UNREPRESENTABLE; 1e-4 is
    resolved, within the documented accuracies at this spread (float64 1e-8, float32 3e-6) of quad."""
    for dtype, tol in ((np.float32, 3e-6), (np.float64, 1e-8)):
        for s0, resolved in ((1e-4, True), (1e-10, False)):
            args = padded([0.0, 0.5, 1.0], [s0, 0.5, 0.5], dtype)
            st = confidence.problem_status(*args)
            kc = keep_count_jit(args[0], args[1], np.float32(0.0), np.float32(1.0), args[2]) if dtype is np.float32 else st
            for st in (st, kc):  # keep_count in float32 only: the program the tests above compiled
                assert bool(st.ok) == resolved
                assert int(st.reason) == (Reason.OK if resolved else Reason.UNREPRESENTABLE)
            if resolved:
                p = np.asarray(confidence.prob_best(*args), float)[:3]
                assert np.max(np.abs(p - quad_prob_best(args[0][:3], args[1][:3]))) <= tol


def test_negative_round_budget_inside_jit_is_bad_input():
    """round_budget < 0 raises eagerly; in jit it counts as 0 with BAD_INPUT (gains of R = 0)."""
    mu, sigma, mask = padded([0.30, 0.31, 0.33, 0.40], np.full(4, 0.03), np.float32)
    d = np.float32(0.003)
    with pytest.raises(ValueError, match="round_budget"):
        confidence.keep_count(mu, sigma, d, np.float32(-1.0), mask)
    neg = keep_count_jit(mu, sigma, d, np.float32(-1.0), mask)
    zero = keep_count_jit(mu, sigma, d, np.float32(0.0), mask)
    assert not bool(neg.ok) and int(neg.reason) == Reason.BAD_INPUT
    assert int(neg.k) == int(zero.k) and np.array_equal(np.asarray(neg.gain), np.asarray(zero.gain))


def test_prob_better_near_the_top_of_the_float32_range():
    """Finite float32 inputs whose difference and spread overflow give Phi(z), not NaN (z = -sqrt(2)
    to a few float32 eps, times phi(z) < 0.4: 1e-6 is ample)."""
    args = [np.float32(v) for v in (3e38, 3e38, -3e38, 3e38)]
    want = stats.norm.cdf(-6e38 / np.hypot(3e38, 3e38))
    for f in (confidence.prob_better, jax.jit(confidence.prob_better)):
        assert abs(float(f(*args)) - want) <= 1e-6


def test_window_std_of_huge_float32_losses_is_finite():
    """float32 losses near 3e38 (squares overflow): window_std and the profile's sigma_c(t) equal
    NumPy's float64 std of the same values (a dozen float32 roundings: rtol 1e-6)."""
    losses = np.array([[1e30, -1e30, 3e38, -3e38, 2e38]], np.float32)
    want = np.std(losses[0, :4].astype(float), ddof=1)
    np.testing.assert_allclose(np.asarray(confidence.window_std(losses, np.array([4]), 4), float), [want], rtol=1e-6)
    prof = confidence.delta_sigma_profile(np.concatenate([losses, losses]), window=4)
    np.testing.assert_allclose(float(prof.sigma[0, 3]), want, rtol=1e-6)


def test_window_epochs_beyond_int32_are_clipped_inside_jit_not_wrapped():
    # the docstring: epochs outside [0, max_epochs] are clipped inside jit; an int64 2**40 cast
    # to int32 first was 0 (no losses). Oracle: NumPy's std of the last 3 losses of the row.
    losses = np.arange(32.0).reshape(4, 8) ** 1.5
    epochs = np.array([2**40, 2**31, -(2**40), 5], np.int64)
    want = [np.std(losses[0, 5:8], ddof=1), np.std(losses[1, 5:8], ddof=1), 0.0, np.std(losses[3, 2:5], ddof=1)]
    got = jax.jit(confidence.window_std, static_argnums=2)(losses, epochs, 3)
    # two-pass std of three values near 10-180: a few roundings of float64
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-13)
    # delta: a difference of two such stds (3.3-7.8, 0.15-0.32 apart): the same roundings,
    # amplified at most about 60x by the cancellation
    delta = jax.jit(confidence.window_delta_sigma, static_argnums=2)(losses, epochs, 3)
    prev = [np.std(losses[0, 4:7], ddof=1), np.std(losses[1, 4:7], ddof=1), 0.0, np.std(losses[3, 1:4], ddof=1)]
    np.testing.assert_allclose(np.asarray(delta)[[0, 1, 3]], (np.array(prev) - np.array(want))[[0, 1, 3]],
                               rtol=1e-12, atol=1e-12)
    # eager, the same epochs are refused, naming the first one out of range
    with pytest.raises(ValueError, match=r"epochs\[0\] = 1099511627776"):
        confidence.window_std(losses, epochs, 3)


def test_argument_errors_name_the_argument():
    """Non-numeric values, a bad max_bytes, an empty batch and a bad entry of a batch."""
    for bad in (None, "abc", [[1.0], [1.0, 2.0]]):
        with pytest.raises(TypeError, match="^mu "):
            confidence.prob_best(bad, [1.0, 1.0])
    with pytest.raises(TypeError, match="round_budget"):
        confidence.keep_count(MU, SIGMA, 0.1, "R")
    for mb, err in ((0, ValueError), (-5, ValueError), (1.5, TypeError), ("x", TypeError)):
        with pytest.raises(err, match="max_bytes"):
            confidence.prob_best_batch(MU[None], SIGMA[None], max_bytes=mb)
    with pytest.raises(ValueError, match=r"mu\[1, 0\] = nan"):
        confidence.confidence_curve_batch(np.array([[0.1, 0.2], [np.nan, 0.2]]), np.ones((2, 2)))
    with pytest.raises(ValueError, match="at least one problem"):
        confidence.prob_best_batch(np.zeros((0, 3)), np.ones((0, 3)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_subnormal_sigma_counts_as_zero(dtype):
    """XLA:CPU flushes subnormal numbers to 0, so a subnormal sigma is no spread: eagerly a
    ValueError naming sigma (it once passed the check and gave all-zero probabilities with
    every candidate counted valid); inside jit the candidate is dropped and counted invalid,
    and the others' probabilities are those of the problem without it (scipy quad)."""
    tiny = np.finfo(dtype).tiny
    mu = np.array([0.0, 0.3, 0.5], dtype)
    sigma = np.array([0.2, 0.5, tiny / 4], dtype)
    with pytest.raises(ValueError, match="sigma must be positive.*subnormal"):
        confidence.prob_best(mu, sigma)
    p = np.asarray(jax.jit(confidence.prob_best)(mu, sigma))
    status = jax.jit(confidence.problem_status)(mu, sigma)
    assert int(status.num_invalid) == 1 and int(status.reason) == Reason.BAD_INPUT
    want = quad_prob_best(mu[:2].astype(float), sigma[:2].astype(float))
    # float32: the quadrature's float32 bound of test_confidence (2e-6); float64: its 1e-8
    np.testing.assert_allclose(p[:2], want, rtol=0, atol=2e-6 if dtype == np.float32 else 1e-8)
    assert p[2] == 0.0
    np.testing.assert_array_equal(np.asarray(confidence.effective_mask(mu, sigma)), [True, True, False])
    assert np.all(np.asarray(confidence.effective_mask(mu, np.array([0.2, 0.5, tiny], dtype))))


def test_values_float32_cannot_hold_are_named_as_given():
    # With JAX's x64 mode off, float64 NumPy input is cast to float32: 1e39 becomes inf and
    # a sigma of 1e-50 becomes 0. The error named only the cast value ("mu[0] = inf"), as if
    # the caller had passed inf; it now names the value as given and why it was lost.
    with jax.enable_x64(False):
        with pytest.raises(ValueError, match=r"mu\[0\] = inf \(given as 1e\+39 in float64, which float32 cannot"):
            confidence.keep_count(np.array([1e39, 0.0]), np.array([1.0, 1.0]), 5.0, 0.1)
        with pytest.raises(ValueError, match=r"given as 1e-50 in float64"):
            confidence.keep_count(np.array([1.0, 0.0]), np.array([1e-50, 1.0]), 5.0, 0.1)
        with pytest.raises(ValueError, match=r"mu\[1, 0\] = inf \(given as"):
            confidence.prob_best_batch(np.array([[0.0, 1.0], [1e39, 0.0]]), np.ones((2, 2)))
        with pytest.raises(ValueError) as err:  # an inf given as inf gets no such note
            confidence.keep_count(np.array([np.inf, 0.0]), np.array([1.0, 1.0]), 5.0, 0.1)
        assert "given as" not in str(err.value)


def test_leader_curve_and_zeta_derivatives_match_quadrature_and_ignore_padding():
    """leader_curve and zeta (differentiated through their scan, as the package docstring
    says) against central differences of scipy's quad of the leader probability (h = 1e-4;
    with sigma >= 0.1 the truncation h^2 / 6 |f'''| is below 2e-6 for |f'''| <= 2 / sigma^3,
    quad's 1e-12 rounding / h adds 1e-8: atol 1e-5). Padded rows (NaN) get exactly 0 and
    leave the others' derivatives as they are without them."""
    mu = np.array([0.30, 0.42, 0.35, 0.5])
    sigma = np.array([0.10, 0.15, 0.12, 0.2])
    w = np.array([0.0, 0.7, -1.2, 0.4])
    delta = 0.03
    order = np.argsort(mu, kind="stable")

    def leader_np(m, s):
        return sum(w[k - 1] * quad_leader(m[order], s[order], k) for k in range(2, 5))

    def zeta_np(m, s):
        return leader_np(m, np.maximum(s - delta, 1e-3 * s)) - leader_np(m, s)

    mu_p, sigma_p = np.append(mu, np.nan), np.append(sigma, np.nan)
    mask = np.array([True] * 4 + [False])
    wp = np.append(w, 0.0)  # curve[4] repeats curve[3] (the last valid), zeta[4] is 0
    f_lead = lambda m, s: jnp.dot(wp, confidence.leader_curve(m, s, mask).curve)  # noqa: E731
    f_zeta = lambda m, s: jnp.dot(wp, confidence.zeta(m, s, delta, mask))  # noqa: E731
    h = 1e-4
    for f, oracle in ((f_lead, leader_np), (f_zeta, zeta_np)):
        gm, gs = jax.jit(jax.grad(f, argnums=(0, 1)))(mu_p, sigma_p)
        assert gm[4] == 0 and gs[4] == 0
        for g, arg in ((gm, 0), (gs, 1)):
            want = []
            for i in range(4):
                e = np.zeros(4)
                e[i] = h
                args_p = (mu + e, sigma) if arg == 0 else (mu, sigma + e)
                args_m = (mu - e, sigma) if arg == 0 else (mu, sigma - e)
                want.append((oracle(*args_p) - oracle(*args_m)) / (2 * h))
            np.testing.assert_allclose(g[:4], want, atol=1e-5)
        g4 = jax.grad(lambda m, s: jnp.dot(w, confidence.leader_curve(m, s).curve) if f is f_lead
                      else jnp.dot(w, confidence.zeta(m, s, delta)), argnums=(0, 1))(mu, sigma)
        # padded and unpadded are two programs over the same sums (about 2 x 104 nodes x 4
        # candidates, padding exactly inert): they round apart by at most ~800 eps64 ~ 2e-13
        np.testing.assert_allclose(gm[:4], g4[0], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gs[:4], g4[1], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("x64", [False, True])
def test_weakly_typed_inputs_share_the_compiled_program(x64):
    # jnp.full(n, 0.05) (as in keep_count's docstring) and jnp.asarray(0.05) are weakly typed;
    # a jitted kernel compiled one program for them and another for the same values strongly
    # typed (an array computed from data), so a notebook loop mixing the two compiled twice.
    # Inputs are now made strong first: one program, and the same results.
    with jax.enable_x64(x64):
        dtype = jnp.result_type(float)
        mu = jnp.linspace(0.3, 0.7, 7, dtype=dtype)
        strong, weak = jnp.full(7, 0.05, dtype), jnp.full(7, 0.05)
        assert weak.weak_type and not strong.weak_type and weak.dtype == strong.dtype
        with count_compilations() as first:
            k_strong = confidence.keep_count(mu, strong, jnp.asarray(0.01, dtype), jnp.asarray(9.0, dtype))
            p_strong = confidence.prob_best_batch(mu[None], strong[None])
        assert first["_keep_count_impl"] == 1 and first["_prob_best_batch_impl"] == 1  # the count sees them
        with count_compilations() as again:
            k_weak = confidence.keep_count(mu, weak, 0.01, 9.0)
            p_weak = confidence.prob_best_batch(mu[None], weak[None])
            confidence.keep_count(jnp.asarray(mu, dtype), jnp.full(7, 0.06), jnp.asarray(0.02), 8)
        assert again["_keep_count_impl"] == 0 and again["_prob_best_batch_impl"] == 0, again
        for a, b in zip(jax.tree_util.tree_leaves((k_strong, p_strong)), jax.tree_util.tree_leaves((k_weak, p_weak))):
            np.testing.assert_array_equal(a, b)


def test_effective_mask_reads_integer_inputs_as_prob_best_does():
    # an integer sigma failed inside NumPy's finfo ("not inexact"); prob_best takes it
    mu, sigma = jnp.array([1, 2, 3, 4]), jnp.array([1, 0, 2, -1])
    assert confidence.effective_mask(mu, sigma).tolist() == [True, False, True, False]
    assert confidence.effective_mask(mu.astype(jnp.float32), sigma).tolist() == [True, False, True, False]


@pytest.mark.parametrize("wrt", ["mu", "sigma", "delta_sigma", "round_budget"])
def test_a_derivative_of_keep_count_is_refused_with_a_clear_error(wrt):
    # keep_count's integrals run behind gated branches (custom_vmap) that JAX cannot
    # differentiate; the derivative used to fail deep inside JAX ("Linearization failed").
    # It is refused by name, eagerly and under jit; a derivative of something else that
    # only calls keep_count on constants is unaffected.
    args = {"mu": jnp.array([0.30, 0.31, 0.33, 0.40]), "sigma": jnp.full(4, 0.03), "delta_sigma": jnp.float64(0.003),
            "round_budget": jnp.float64(20.0)}

    def tau(x):
        return confidence.keep_count(**{**args, wrt: x}).tau

    for f in (tau, jax.jit(tau)):
        with pytest.raises(TypeError, match="keep_count is not differentiable.*confidence_curve, prob_best or zeta"):
            jax.grad(lambda x: jnp.sum(f(x)))(args[wrt])
    fixed = float(confidence.keep_count(**args).tau)
    assert float(jax.grad(lambda c: c * confidence.keep_count(**args).tau)(2.0)) == fixed


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unresolvable_candidates_without_a_chance_of_being_the_best_get_zero(dtype):
    """Runs whose loss plateaus at 0.999 with sigma at a policy's floor (1e-6 in float32,
    where 0.999's spacing is too coarse for that spread; 1e-9 in float64, below 2^-20 of the
    window), behind 16 leaders between 0.84 and 0.98 whose spreads (up to 0.07) put 0.999
    inside the window: no rule in the dtype resolves them, and the problem used to be
    UNREPRESENTABLE. They are the best only if every leader exceeds 0.999, a chance of about
    3e-40 (scipy: the product of the leaders' normal tails there). Their p is now exactly 0
    and the problem is represented: the other probabilities are those of the problem
    without them, bit for bit (the same program on the same standardised inputs), and
    scipy's quadrature of the leaders within the documented accuracy (float64 1e-8,
    float32 3e-6). A candidate as narrow but level with the leaders can be the best: that
    problem stays unrepresentable."""
    floor, tol = (1e-6, 3e-6) if dtype is np.float32 else (1e-9, 1e-8)
    lead_mu, lead_sigma = np.linspace(0.84, 0.98, 16), np.linspace(0.07, 0.004, 16)
    assert np.sum(stats.norm.logsf((0.999 - lead_mu) / lead_sigma)) < np.log(1e-39)
    mu = np.concatenate([lead_mu, np.full(4, 0.999)]).astype(dtype)
    sigma = np.concatenate([lead_sigma, np.full(4, floor)]).astype(dtype)
    everyone, leaders = np.ones(20, bool), np.arange(20) < 16
    st = confidence.problem_status(mu, sigma, everyone)
    assert bool(st.ok) and int(st.num_valid) == 20
    p = np.asarray(confidence.prob_best(mu, sigma, everyone))
    np.testing.assert_array_equal(p[16:], 0.0)
    np.testing.assert_array_equal(p, np.asarray(confidence.prob_best(mu, sigma, leaders)))
    assert np.max(np.abs(p[:16] - quad_prob_best(lead_mu, lead_sigma))) <= tol
    res = confidence.keep_count(mu, sigma, np.zeros(20, dtype), 10.0)
    alone = confidence.keep_count(mu, sigma, np.zeros(20, dtype), 10.0, mask=leaders)
    assert bool(res.ok) and int(res.k) == int(alone.k) and int(res.num_valid) == 20
    # level with the leaders (0.9) and too narrow for the rule (1e-9): unrepresentable
    near = np.where(np.arange(20) == 16, 0.9, mu).astype(dtype)
    narrow = np.where(np.arange(20) == 16, 1e-9, sigma).astype(dtype)
    st = confidence.problem_status(near, narrow, everyone)
    assert not bool(st.ok) and int(st.reason) == Reason.UNREPRESENTABLE

