"""Probabilities of being best and the curves built from them.

:func:`prob_best`, :func:`confidence_curve` (``P_k``, Definition 3.5), :func:`leader_curve`
(``P_1`` among the top ``k``), :func:`effective_mask`, :func:`problem_status` (the status
these bare-array results leave out), and the pairwise :func:`prob_better` of SS+; the
ranking by ``mu`` (:func:`sort_order`) they share.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxstop._src import checks, numerics
from jaxstop.confidence._quadrature import leader_kernel, prob_best_kernel, prob_best_unrepresentable
from jaxstop.confidence._standardise import ProblemStatus, standardise, status_of
from jaxstop.confidence._validate import first_bad, is_concrete, prepare, real_array, valid_mask


class ConfidenceCurve(NamedTuple):
    """A curve over candidates ranked by ``mu``.

    Attributes:
        curve: Values for ``k = 1..n`` at index ``k - 1``, shape (n,).
        order: Candidate indices sorted by ``mu`` ascending (stable for ties,
            invalid / masked candidates last), shape (n,), int32.
    """

    curve: jax.Array
    order: jax.Array


def normalise(p):
    s = jnp.sum(p)
    return jnp.where(s > 0, p / jnp.where(s > 0, s, 1.0), jnp.zeros_like(p))


def sort_order(mu, valid):
    key = jnp.where(valid, mu, jnp.inf)
    return numerics.stable_argsort(key)


def curve_from_sorted(p_sorted, num_valid):
    n = p_sorted.shape[0]
    dtype = p_sorted.dtype
    one = jnp.ones((), dtype)
    cum = jnp.minimum(jnp.cumsum(p_sorted), one)
    idx = jnp.arange(n)
    cum = jnp.where(idx >= num_valid - 1, one, cum)
    cum = lax.cummax(cum)
    return jnp.where(num_valid > 0, cum, jnp.zeros_like(cum))


@jax.jit
def prob_best_impl(mu, sigma, mask):
    valid = valid_mask(mu, sigma, mask)
    return normalise(prob_best_kernel(mu, sigma, valid))


@jax.jit
def confidence_curve_impl(mu, sigma, mask):
    valid = valid_mask(mu, sigma, mask)
    p = normalise(prob_best_kernel(mu, sigma, valid))
    order = sort_order(mu, valid)
    num_valid = jnp.sum(valid)
    return ConfidenceCurve(curve_from_sorted(p[order], num_valid), order)


@jax.jit
def _leader_curve_impl(mu, sigma, mask):
    valid = valid_mask(mu, sigma, mask)
    order = sort_order(mu, valid)
    out, _ = leader_kernel(mu[order], sigma[order], valid[order])
    # a probability: the rule's rounding put curve[0] up to a few float32 ulps above 1
    return ConfidenceCurve(jnp.clip(out, 0, 1), order)


def effective_mask(mu: ArrayLike, sigma: ArrayLike, mask: ArrayLike | None = None) -> jax.Array:
    """Candidates that enter the computations of this module.

    A candidate is used when ``mask`` selects it, its ``mu`` is finite and its
    ``sigma`` is finite and positive (a normal number: a subnormal one, which
    the CPU flushes to 0, counts as 0). Outside ``jax.jit`` the other functions
    raise on such entries; inside ``jax.jit`` they silently mask them, and
    ``mask & ~effective_mask(mu, sigma, mask)`` reports which were dropped
    (:func:`problem_status` counts them). Unlike the other functions it never
    raises on values: it is the check itself.

    Args:
        mu: Means of the converged losses, shape (n,).
        sigma: Standard deviations, shape (n,).
        mask: Candidates to consider, shape (n,), bool; all when None.

    Returns:
        Boolean array, shape (n,).

    Raises:
        ValueError: on shape mismatches or a mask of the wrong dtype or shape.
        TypeError: on non-real dtypes and on float16 / bfloat16 (naming the argument).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import effective_mask
        >>> effective_mask(jnp.array([0.1, jnp.nan, 0.3]), jnp.array([0.1, 0.1, 0.0])).tolist()
        [True, False, False]
    """
    mu = real_array(mu, "mu")
    sigma = real_array(sigma, "sigma")
    if mu.ndim != 1 or sigma.shape != mu.shape:
        raise ValueError(
            f"mu and sigma must have the same shape (n,), got {mu.shape} and {sigma.shape}"
        )
    dtype = jnp.result_type(mu, sigma, 1.0)  # integer inputs as prob_best reads them
    mu, sigma = mu.astype(dtype), sigma.astype(dtype)
    if mask is None:
        mask = jnp.ones(mu.shape, bool)
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_ or mask.shape != mu.shape:
        raise ValueError(
            f"mask must be a boolean array of shape {mu.shape}, got {mask.dtype} {mask.shape}"
        )
    return valid_mask(mu, sigma, mask)


@jax.jit
def _problem_status_impl(mu, sigma, mask):
    valid = valid_mask(mu, sigma, mask)
    return status_of(mask, standardise(mu, sigma, valid).valid, prob_best_unrepresentable(mu, sigma, valid))


def problem_status(mu: ArrayLike, sigma: ArrayLike, mask: ArrayLike | None = None) -> ProblemStatus:
    """Whether :func:`prob_best`, :func:`confidence_curve` and :func:`leader_curve` compute
    the problem as given: the status their bare-array results cannot carry.

    The same test :func:`keep_count` reports in ``KeepCount.ok`` / ``reason`` (which adds
    the checks of ``delta_sigma`` and ``round_budget``). ``ok`` is False, with the first
    reason that applies (an int32 code of ``jaxstop._src.status.Reason``), when

    * ``BAD_INPUT``: an entry the mask selects has a NaN / inf ``mu`` or a non-finite or
      non-positive ``sigma`` (inside ``jax.jit``; on concrete inputs this raises, as
      everywhere in the module); the computations leave such candidates out;
    * ``EMPTY``: no candidate is valid (the results are all zeros);
    * ``UNREPRESENTABLE``: the dtype cannot carry the problem: the float spacing of a
      candidate's ``mu`` that can enter the integrals exceeds ``2^-10`` of its spread against
      the narrowest other such candidate, ``hypot(sigma_j, sigma_l)`` (means closer than
      the spacing are already one number: ``1e6`` and ``1e6 + 0.003`` in float32; a lone
      such candidate is exact whatever its rounding), or a ``sigma`` lies below the dtype's
      range relative to the largest, or below ``2^-20`` of the window
      ``[min (mu - 9 sigma), min (mu + 9 sigma)]`` that :func:`prob_best` integrates over
      (spreads of ``sigma`` its rule cannot resolve). Such candidates are left out
      instead (``p`` exactly 0, the problem represented) where together their chance of
      being the best is below a quarter of the dtype's ``eps`` (the package docstring).
      The results are then finite and sum to 1, but are not to be trusted for the
      intended problem.

    Scale alone is never a reason: every problem is integrated in standard units
    (shifted by the lowest ``mu``, scaled by the largest ``sigma``), so ``mu`` near 1e6
    or ``sigma = 3e38`` in float32 are computed as accurately as ``mu`` near 0.

    Args:
        mu: Means of the converged losses, shape (n,).
        sigma: Standard deviations, shape (n,).
        mask: Candidates to consider, shape (n,), bool; all when None.

    Returns:
        :class:`ProblemStatus` ``(ok, reason, num_valid, num_invalid)``, scalars.

    Raises:
        ValueError: as :func:`prob_best` (shapes; invalid values on concrete inputs).
        TypeError: as :func:`prob_best` (dtypes, float16 / bfloat16 included).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import problem_status
        >>> mu = jnp.array([1e6, 1e6 + 0.003, 1e6 + 0.006], jnp.float32)  # one float32 value
        >>> st = problem_status(mu, jnp.full(3, 1e-3, jnp.float32))
        >>> bool(st.ok), int(st.reason)   # Reason.UNREPRESENTABLE
        (False, 3)
        >>> bool(problem_status(mu, jnp.full(3, 1e3, jnp.float32)).ok)   # spacing 0.06 << sigma
        True
    """
    mu, sigma, mask = prepare(mu, sigma, mask)
    return _problem_status_impl(mu, sigma, mask)


def prob_best(mu: ArrayLike, sigma: ArrayLike, mask: ArrayLike | None = None) -> jax.Array:
    """Probability that each candidate has the lowest converged loss.

    ``p_i = int phi(z_i(x)) / sigma_i * prod_{j != i} (1 - Phi(z_j(x))) dx`` with
    ``z_j(x) = (x - mu_j) / sigma_j``
    for independent ``X_j ~ N(mu_j, sigma_j^2)`` (Assumption 3.3 of Liu et al.,
    2024). With equal ``sigma`` these are the summands of Eq. (3) (written there
    for ``Y = max(-X_j)``); heterogeneous ``sigma`` is handled exactly. The
    quadrature is described in the package docstring; the result is normalised
    to sum to 1 over the valid candidates (the raw sum is 1 to ~1e-13 in
    float64).

    Accuracy against ``scipy.integrate.quad`` (max abs error over 48 problems
    with n <= 50: ``sigma`` log-uniform over 3 decades, ties in ``mu``,
    ``sigma`` 1e-3 of the others, ``mu`` up to 1e4 apart): 5.7e-11 in float64
    (below 1e-12 except with ``sigma`` 1e-3 of the others) and 6.7e-7 in
    float32, the latter including the rounding of the inputs to float32. With
    ``sigma`` over 6 decades the float64 error is ~1e-8 (float32 ~3e-6). A
    smallest relevant ``sigma`` below ``2^-20`` of the window
    ``min (mu + 9 sigma) - min (mu - 9 sigma)`` is beyond the rule's resolution
    (errors grow to 1e-3 and more): :func:`problem_status` reports it
    (``Reason.UNREPRESENTABLE``), unless such candidates together have a chance of
    being the best below a quarter of the dtype's ``eps``: they then get exactly 0 (the
    package docstring, "Status"). The integral is taken in standard units (shifted
    by the lowest valid ``mu``, scaled by the largest valid ``sigma``; the
    probabilities do not change),
    so the units of the input do not matter: ``mu`` near 1e6 with ``sigma = 1e-3``
    (float64) or ``sigma = 3e38`` (float32) are as accurate as ``mu`` near 0.

    Bad values, padding, dtypes: entries where ``mask`` is False are padding and
    may hold anything (NaN, inf, junk): they get exactly 0 and have exactly no effect.
    A NaN / inf ``mu`` or a non-finite or non-positive ``sigma`` where ``mask`` is
    True raises on concrete inputs; inside ``jax.jit`` the candidate is treated as
    padding. The result is finite and sums to 1 over the valid candidates (all zeros
    when there is none). It is a bare array without a status:
    :func:`problem_status` says whether the problem was computed as given
    (``keep_count`` reports the same in ``KeepCount.ok`` / ``reason``), in particular
    whether the dtype could represent it at all (``Reason.UNREPRESENTABLE``, e.g.
    float32 ``mu = [1e6, 1e6 + 0.003]``, one float32 number, with ``sigma = 1e-3``).

    Args:
        mu: Means of the converged losses, shape (n,).
        sigma: Standard deviations, shape (n,), positive.
        mask: Candidates to consider, shape (n,), bool; all when None. Masked
            candidates get exactly 0 and have exactly no effect on the others.

    Returns:
        Probabilities, shape (n,), dtype of the promoted inputs (float32 or float64).

    Raises:
        ValueError: on shape mismatches, or (concrete inputs only) a non-finite
            ``mu`` or a non-positive / non-finite ``sigma`` under the mask.
        TypeError: on non-real dtypes, float16 / bfloat16 (naming the argument) or a
            non-boolean mask.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import prob_best
        >>> p = prob_best(jnp.array([0.0, 0.0, 1.0]), jnp.array([1.0, 1.0, 1.0]))
        >>> [round(float(v), 4) for v in p]
        [0.4434, 0.4434, 0.1132]
    """
    mu, sigma, mask = prepare(mu, sigma, mask)
    return prob_best_impl(mu, sigma, mask)


def confidence_curve(
    mu: ArrayLike, sigma: ArrayLike, mask: ArrayLike | None = None
) -> ConfidenceCurve:
    """Confidence curve ``P_k`` (Definition 3.5 and Eq. 3 of Liu et al., 2024).

    Candidates are ranked by ``mu`` ascending (``order``: a stable sort, so ties
    keep their input order; invalid and masked candidates last) and ``P_k`` is
    the probability that the best converged loss is among the first ``k``:
    ``curve[k - 1] = sum(prob_best(mu, sigma, mask)[order[:k]])``. The curve is
    nondecreasing, ``P_{n_valid} = 1`` exactly and stays at 1 over the masked
    tail; it is all zeros when no candidate is valid. Bad values, padding, units
    and dtypes as in :func:`prob_best` (padding has no effect and ranks last;
    float16 / bfloat16 raise ``TypeError``); the status is :func:`problem_status`.

    Args:
        mu: Means of the converged losses, shape (n,).
        sigma: Standard deviations, shape (n,), positive.
        mask: Candidates to consider, shape (n,), bool; all when None.

    Returns:
        ``ConfidenceCurve(curve, order)``, each of shape (n,); ``order`` int32.

    Raises:
        ValueError, TypeError: as :func:`prob_best`.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import confidence_curve
        >>> mu, sigma = jnp.array([0.3, 0.1, 0.2]), jnp.array([0.05, 0.05, 0.05])
        >>> curve, order = confidence_curve(mu, sigma)
        >>> order.tolist(), [round(float(v), 3) for v in curve]
        ([1, 2, 0], [0.92, 0.999, 1.0])
    """
    mu, sigma, mask = prepare(mu, sigma, mask)
    return confidence_curve_impl(mu, sigma, mask)


def leader_curve(mu: ArrayLike, sigma: ArrayLike, mask: ArrayLike | None = None) -> ConfidenceCurve:
    """Probability that the top-ranked candidate is the best among the top ``k``.

    ``curve[k - 1] = int phi_(1)(x) prod_{j=2..k} S_(j)(x) dx`` over candidates
    ranked by ``mu`` (``order`` as in :func:`confidence_curve`): the ``P_1`` of
    a round that keeps the top ``k``, the quantity whose change defines ``zeta``
    (Eq. 6 and Eq. 11 of Liu et al., 2024). It is nonincreasing in ``k`` and
    ``curve[0] = 1`` (to the rule's error; values are clipped to ``[0, 1]``, where the
    rounding of the quadrature in float32 could leave ``curve[0]`` a few ulps above 1).
    All ``k`` share one rule graded on both sides towards
    ``b* = min_j (mu_j + 9 sigma_j)``: each top-``k`` subproblem's cut-off
    ``b_k = min_{j <= k} (mu_j + 9 sigma_j)`` is within ``9 sigma_j`` of ``b*``
    for every ``j <= k`` (as ``b* >= mu_j`` when ranked by ``mu``), so all its
    features lie within ``27 sigma_j`` of ``b*``, and one ``O(n * nodes)``
    pass gives every ``k``.
    Max abs error against ``scipy.integrate.quad`` on the problems of
    :func:`prob_best` with n <= 20: 4.0e-13 in float64; in float32 (8 nodes per
    panel, ``_quadrature.leader_rule``) 2.0e-7 against quad of the float32-rounded
    problems, n <= 50.
    Bad values, padding, units and dtypes as in :func:`prob_best`; the status
    is :func:`problem_status`.

    Args:
        mu: Means of the converged losses, shape (n,).
        sigma: Standard deviations, shape (n,), positive.
        mask: Candidates to consider, shape (n,), bool; all when None. Entries
            beyond the valid candidates repeat the last valid value.

    Returns:
        ``ConfidenceCurve(curve, order)``.

    Raises:
        ValueError, TypeError: as :func:`prob_best`.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import leader_curve
        >>> curve, order = leader_curve(jnp.array([0.0, 0.0, 0.0]), jnp.array([1.0, 1.0, 1.0]))
        >>> [round(float(v), 4) for v in curve]
        [1.0, 0.5, 0.3333]
    """
    mu, sigma, mask = prepare(mu, sigma, mask)
    return _leader_curve_impl(mu, sigma, mask)


def prob_better(
    mu_a: ArrayLike, sigma_a: ArrayLike, mu_b: ArrayLike, sigma_b: ArrayLike
) -> jax.Array:
    """Probability that candidate ``a`` converges to a loss no higher than ``b``.

    ``Pr(X_b >= X_a) = Phi((mu_b - mu_a) / sqrt(sigma_a^2 + sigma_b^2))`` for
    independent Gaussians (Definition 3.4 of Liu et al., 2024). SS+ (Section
    3.5) trains candidate ``c_i`` when ``Pr(l(c_m) >= l(c_i)) >= 0.9`` against
    the most-trained ``c_m``: ``prob_better(mu_i, sigma_i, mu_m, sigma_m) >= 0.9``.
    (The worked example after Definition 3.4 writes
    ``Pr(l_j > l_k) = Phi((mu_k - mu_j) / ...)``, which is ``Pr(l_j < l_k)``; the
    direction here is the one the SS+ rule needs.) When both ``sigma`` are 0 the
    comparison is deterministic: 1 if ``mu_b >= mu_a`` else 0. Arguments
    broadcast. A non-finite ``mu`` or a negative or non-finite ``sigma`` raises
    ``ValueError`` on concrete inputs; inside ``jax.jit`` such a pair gives 0 (its
    values are made inert before any arithmetic, so derivatives stay finite too).
    The result is a bare array: ``jnp.isfinite(mu_a) & ...`` is its status.
    float16 / bfloat16 raise ``TypeError`` naming the argument.

    Args:
        mu_a: Mean of ``a``'s converged loss, any shape.
        sigma_a: Its standard deviation, >= 0.
        mu_b: Mean of ``b``'s converged loss.
        sigma_b: Its standard deviation, >= 0.

    Returns:
        Probabilities with the broadcast shape of the arguments.

    Example:
        >>> from jaxstop.confidence import prob_better
        >>> round(float(prob_better(0.20, 0.03, 0.25, 0.04)), 4)   # Phi(0.05 / 0.05)
        0.8413
    """
    args = [
        real_array(v, name)
        for v, name in ((mu_a, "mu_a"), (sigma_a, "sigma_a"), (mu_b, "mu_b"), (sigma_b, "sigma_b"))
    ]
    try:
        shape = jnp.broadcast_shapes(*(a.shape for a in args))
    except ValueError as err:
        raise ValueError(
            "mu_a, sigma_a, mu_b and sigma_b must broadcast to a common shape, got "
            + ", ".join(str(a.shape) for a in args)
        ) from err
    dtype = jnp.result_type(*args, 1.0)
    ma, sa, mb, sb = (jnp.broadcast_to(a.astype(dtype), shape) for a in args)
    if is_concrete(ma, sa, mb, sb):
        for name, v, is_sigma in (
            ("mu_a", ma, False),
            ("sigma_a", sa, True),
            ("mu_b", mb, False),
            ("sigma_b", sb, True),
        ):
            v = np.asarray(v)
            bad = ~np.isfinite(v) | ((v < 0) if is_sigma else False)
            if np.any(bad):
                what = "finite and >= 0" if is_sigma else "finite"
                raise ValueError(f"{name} must be {what}, got {v.ravel()[first_bad(bad)]}")
    return _prob_better_impl(ma, sa, mb, sb)


@jax.jit
def _prob_better_impl(ma, sa, mb, sb):
    ok = jnp.isfinite(ma) & jnp.isfinite(mb) & jnp.isfinite(sa) & jnp.isfinite(sb)
    ok = ok & (sa >= 0) & (sb >= 0)
    ma, mb, sa, sb = (checks.inert_rows(v, ok, 0.0) for v in (ma, mb, sa, sb))
    # Near the top of the dtype's range mu_b - mu_a and hypot(sigma_a, sigma_b) can
    # overflow (inf / inf = NaN): z is then taken on the halved values, exactly (a
    # halving is exact there) and both halves are below the largest float.
    big = jnp.maximum(jnp.maximum(jnp.abs(ma), jnp.abs(mb)), jnp.maximum(sa, sb))
    half = jnp.where(big > jnp.finfo(ma.dtype).max / 4, 0.5, 1.0).astype(ma.dtype)
    ma, mb, sa, sb = ma * half, mb * half, sa * half, sb * half
    s = jnp.hypot(sa, sb)
    pos = s > 0
    z = (mb - ma) / jnp.where(pos, s, 1.0)
    p = jnp.where(pos, jax.scipy.special.ndtr(z), (mb >= ma).astype(ma.dtype))
    return jnp.where(ok, p, jnp.zeros_like(p))
