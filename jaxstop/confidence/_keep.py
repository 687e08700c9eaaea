"""The discarding rule of UQ-guided halving (Section 3.3.2 of Liu et al., 2024).

:func:`zeta` (the change of ``P_1`` when the uncertainty shrinks, Eq. 6) and
:func:`keep_count` (cost against gain per ``k``, the balance point ``k*`` and the number
of candidates kept, Eq. 4-7), with its result :class:`KeepCount`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import checks
from jaxstop._src.batching import gated_cond
from jaxstop._src.status import Reason, all_finite, first_reason
from jaxstop.confidence._curves import curve_from_sorted, normalise, sort_order
from jaxstop.confidence._quadrature import (leader_kernel, prob_best_kernel, prob_best_unrepresentable,
                                             probability_resolution)
from jaxstop.confidence._validate import is_concrete, prepare, prepare_delta, real_array, valid_mask

# Shrunk sigma in zeta never goes below this fraction of sigma.
_MIN_SHRINK = 1e-3
_RULES = ("argmax", "crossing")
_NO_DERIVATIVE = ("keep_count is not differentiable (its integrals run behind branches that stay branches "
                  "under vmap): differentiate confidence_curve, prob_best or zeta instead")


class KeepCount(NamedTuple):
    """Result of :func:`keep_count`. Per-k arrays hold ``k = 1..n`` at index ``k - 1``.

    Attributes:
        k: Number of candidates to keep (the smallest ``k`` with ``P_k >= tau``),
            int32 scalar; 0 when no candidate is valid.
        tau: The threshold ``P_{k*}``, scalar.
        k_star: The balance point ``k*`` of Eq. (7), int32 scalar.
        keep: Whether each candidate is kept, in the input order, shape (n,), bool.
        order: Candidates sorted by ``mu`` (stable, invalid last), shape (n,), int32.
        curve: Confidence curve ``P_k``, shape (n,).
        cost: Exploration cost of dropping the k-th candidate,
            ``P_k - P_{k-1}`` (Eq. 5), shape (n,).
        gain: Exploitation gain ``R / (k (k - 1)) * zeta(k)``; 0 at ``k = 1``
            and beyond the valid candidates, shape (n,).
        zeta: ``zeta(k)`` of Eq. (6), shape (n,).
        num_valid: Candidates that entered the computation, int32 scalar.
        num_invalid: Candidates selected by ``mask`` but dropped because of a
            non-finite ``mu`` or a non-finite or non-positive ``sigma``, int32.
        num_bad_delta: Valid candidates whose ``delta_sigma`` was not finite and
            was replaced by 0 (no shrinkage), int32 scalar.
        ok: Whether the result was computed from the problem as given and holds
            finite, representable values (``reason == Reason.OK``), bool scalar.
            Invalid values inside ``jax.jit`` are masked out or replaced (see above),
            so a result with ``ok`` False is still finite and usable; ``ok`` says that
            it had to be.
        reason: Why ``ok`` is False, an int32 code of ``jaxstop._src.status.Reason``
            (the first that applies): ``BAD_INPUT`` (``num_invalid > 0``,
            ``num_bad_delta > 0`` or a negative or non-finite ``round_budget``), ``EMPTY`` (no valid
            candidate), ``UNREPRESENTABLE`` (the dtype cannot carry the problem: the
            float spacing of a relevant ``mu`` above ``2^-10`` of its spread against the
            other relevant candidates, spreads
            beyond the dtype's range or beyond the resolution of :func:`prob_best`'s
            rule, or a shrunk ``sigma`` that overflowed; see the
            package docstring), ``NOT_FINITE`` (a non-finite value in ``tau``, ``curve``,
            ``cost``, ``gain`` or ``zeta``); ``OK`` (0) otherwise.
    """

    k: jax.Array
    tau: jax.Array
    k_star: jax.Array
    keep: jax.Array
    order: jax.Array
    curve: jax.Array
    cost: jax.Array
    gain: jax.Array
    zeta: jax.Array
    num_valid: jax.Array
    num_invalid: jax.Array
    num_bad_delta: jax.Array
    ok: jax.Array
    reason: jax.Array


def _shrunk(sigma, delta):
    return jnp.maximum(sigma - delta, _MIN_SHRINK * sigma)


def _zeta_sorted(mu_s, sigma_s, valid_s, delta_s):
    """``(zeta, unrepresentable)`` for candidates sorted by mu: zeta for k = 1..n, and whether
    the problem before or after the shrinkage could not be represented
    (:func:`~jaxstop.confidence._standardise.standardise`)."""
    n = mu_s.shape[0]
    sigma_s = checks.inert_rows(sigma_s, valid_s, 1.0)
    both = jnp.stack([sigma_s, _shrunk(sigma_s, delta_s)])
    (before, after), unrep = jax.vmap(leader_kernel, in_axes=(None, 0, None))(mu_s, both, valid_s)
    k = jnp.arange(1, n + 1)
    num_valid = jnp.sum(valid_s)
    zeta_k = jnp.where((k >= 2) & (k <= num_valid), after - before, jnp.zeros_like(before))
    return zeta_k, jnp.any(unrep)


def _terms(mu_s, sigma_s, valid_s, delta_s):
    """``(p, zeta, unrepresentable)`` of candidates sorted by mu (valid first): the
    normalised probabilities of being the best, zeta for k = 1..n, and whether the problem
    before or after the shrinkage could not be represented (prob_best integrates the same
    problem as the first, and reports whether its rule resolves it)."""
    p_s = normalise(prob_best_kernel(mu_s, sigma_s, valid_s))
    zeta_k, unrep = _zeta_sorted(mu_s, sigma_s, valid_s, delta_s)
    return p_s, zeta_k, unrep | prob_best_unrepresentable(mu_s, sigma_s, valid_s)


def bucket_sizes(n: int) -> tuple[int, ...]:
    """The sizes :func:`_sorted_terms` integrates at for ``n`` candidates: ``ceil(n / 9)`` and
    ``ceil(n / 3)`` (at least 8, and below ``n``), then ``n``. A round of halving with the
    usual ``eta = 3`` keeps about a third of its members, so its next rounds fit the smaller
    sizes; three sizes at most bound the compiled copies of the kernels (each size is one)."""
    sizes = sorted({max(8, -(-n // 9)), max(8, -(-n // 3))})
    return tuple(b for b in sizes if b < n) + (n,)


def _sorted_terms(mu_s, sigma_s, valid_s, delta_s, num_valid):
    """:func:`_terms` integrated over the smallest bucket (:func:`bucket_sizes`) that holds
    the ``num_valid`` valid candidates, which come first: the rows after them are padding,
    inert in every sum, so the terms beyond the bucket are zeros. The integrals cost O(n)
    to O(n^2) per problem, so a round of 7 members integrated at 8 rather than 64 is about
    8x cheaper. The choice is a switch of branches that stay branches under ``vmap``
    (:func:`jaxstop._src.batching.gated_cond`): a batch integrates at the buckets its
    problems need, and at no other; a problem with no valid candidate takes none (its
    terms are zeros)."""
    n = mu_s.shape[0]

    def at(size):
        def run(args):
            p_s, zeta_k, unrep = _terms(*(a[:size] for a in args))
            pad = lambda a: jnp.concatenate([a, jnp.zeros((n - size,), a.dtype)])  # noqa: E731
            return pad(p_s), pad(zeta_k), unrep
        return run

    def either(below, size, smaller):
        # each problem takes exactly one gated branch, its own bucket
        return lambda args: gated_cond((num_valid > below) & (num_valid <= size), at(size), smaller, args)

    def nothing(args):
        zeros = jnp.zeros((n,), args[0].dtype)
        return zeros, zeros, jnp.zeros((), bool)

    sizes = bucket_sizes(n)
    run = nothing
    # no valid candidate (a round whose members have too few losses for a spread): the
    # terms are zeros, as _terms would return them, without integrating
    for below, size in zip((0,) + sizes[:-1], sizes):
        run = either(below, size, run)
    return run((mu_s, sigma_s, valid_s, delta_s))


def _clean_delta(delta, valid):
    """``delta`` with non-finite entries (and every padded row) inert at 0, and the number
    of valid candidates whose ``delta`` was not finite."""
    ok = jnp.isfinite(delta)
    return checks.inert_rows(delta, valid & ok, 0.0), jnp.sum(valid & ~ok).astype(jnp.int32)


@jax.jit
def _zeta_impl(mu, sigma, delta, mask):
    valid = valid_mask(mu, sigma, mask)
    delta, _ = _clean_delta(jnp.broadcast_to(delta, mu.shape), valid)
    order = sort_order(mu, valid)
    return _zeta_sorted(mu[order], sigma[order], valid[order], delta[order])[0]


def _choose_k(cost, gain, curve, num_valid, rule: str):
    """k*, tau = P_{k*} and k = min {k : P_k >= tau} from the per-k arrays (index k - 1);
    ``cost`` is the sorted probabilities (0 beyond ``num_valid``), ``curve`` their cumulative sum.

    ``P_k >= P_{k*}`` is decided on the tail sums ``1 - P_k = sum_{j > k} cost_j``, summed
    from the far end: near ``P = 1`` the curve saturates at 1 after rounding, and which
    ``k`` first rounds to 1 depends on the last bit of the inputs; the tail sums keep
    full relative precision there. A tail counts as above ``1 - P_{k*}`` only by more than
    the quadrature's resolution, ``num_valid`` times
    :func:`~jaxstop.confidence._quadrature.probability_resolution` (about 1.6e-17 for 64
    candidates in float64): probabilities below it are not resolved, and a batch of problems
    and a single one (which skip different nodes) give them different values, or 0, so
    counting them would make ``k`` depend on the program (ranks 18 or 32 kept of 34 in one
    round of Hyperband+ on real curves).
    """
    n = cost.shape[0]
    dtype = cost.dtype
    k = jnp.arange(1, n + 1, dtype=jnp.int32)
    in_range = k <= num_valid
    droppable = (k >= 2) & in_range
    if rule == "argmax":
        # F(k) = sum_{j > k, j <= n_valid} (gain_j - cost_j): change of P_1 of the next
        # round when keeping k instead of all; k* maximises it (Eq. 4), ties -> larger k.
        net = jnp.where(droppable, gain - cost, jnp.zeros((), dtype))
        tail = jnp.cumsum(net[::-1])[::-1]  # tail[k-1] = sum_{j >= k}
        f = jnp.concatenate([tail[1:], jnp.zeros((1,), dtype)])
        f = jnp.where(in_range, f, -jnp.inf)
        k_star = n - jnp.argmax(f[::-1])
    else:
        # Drop from the bottom while dropping strictly helps: k* is the largest k >= 2
        # with cost(k) >= gain(k) (Eq. 7 reached from above), else 1.
        stop = droppable & (cost >= gain)
        k_star = jnp.max(jnp.where(stop, k, 1))
    has = num_valid > 0
    k_star = jnp.where(has, k_star, 0).astype(jnp.int32)
    tau = jnp.where(has, curve[jnp.maximum(k_star - 1, 0)], jnp.zeros((), dtype))
    after = jnp.concatenate([jnp.cumsum(cost[::-1])[::-1][1:], jnp.zeros((1,), dtype)])  # 1 - P_k
    resolution = num_valid.astype(dtype) * probability_resolution(dtype)
    below = after > after[jnp.maximum(k_star - 1, 0)] + resolution
    k_keep = jnp.where(has, jnp.sum(in_range & below) + 1, 0).astype(jnp.int32)
    return k_keep, k_star, tau


@functools.partial(jax.jit, static_argnames=("rule",))
def _keep_count_impl(mu, sigma, delta, round_budget, mask, rule):
    n = mu.shape[0]
    dtype = mu.dtype
    valid = valid_mask(mu, sigma, mask)
    num_valid = jnp.sum(valid).astype(jnp.int32)
    num_invalid = jnp.sum(mask & ~valid).astype(jnp.int32)
    delta, num_bad_delta = _clean_delta(jnp.broadcast_to(delta, mu.shape), valid)
    order = sort_order(mu, valid)
    p_s, zeta_k, unrep = _sorted_terms(mu[order], sigma[order], valid[order], delta[order], num_valid)
    curve = curve_from_sorted(p_s, num_valid)

    k = jnp.arange(1, n + 1, dtype=jnp.int32)
    in_range = k <= num_valid
    droppable = (k >= 2) & in_range
    kf = k.astype(dtype)
    r = jnp.asarray(round_budget, dtype)
    r_ok = jnp.isfinite(r) & (r >= 0)  # the eager check of keep_count, as data
    r = jnp.where(r_ok, r, jnp.zeros((), dtype))
    gain = jnp.where(droppable, r * zeta_k / jnp.maximum(kf * (kf - 1.0), 1.0), 0.0)
    cost = jnp.where(in_range, p_s, 0.0)

    k_keep, k_star, tau = _choose_k(cost, gain, curve, num_valid, rule)
    keep_sorted = jnp.arange(n) < k_keep
    keep = jnp.zeros((n,), bool).at[order].set(keep_sorted)
    finite = all_finite(tau, curve, cost, gain, zeta_k)
    reason = first_reason(
        ((num_invalid > 0) | (num_bad_delta > 0) | ~r_ok, Reason.BAD_INPUT),
        (num_valid == 0, Reason.EMPTY),
        (unrep, Reason.UNREPRESENTABLE),
        (~finite, Reason.NOT_FINITE),
    )
    return KeepCount(
        k=k_keep,
        tau=tau,
        k_star=k_star,
        keep=keep,
        order=order,
        curve=curve,
        cost=cost,
        gain=gain,
        zeta=zeta_k,
        num_valid=num_valid,
        num_invalid=num_invalid,
        num_bad_delta=num_bad_delta,
        ok=reason == int(Reason.OK),
        reason=reason,
    )


def zeta(
    mu: ArrayLike,
    sigma: ArrayLike,
    delta_sigma: ArrayLike,
    mask: ArrayLike | None = None,
) -> jax.Array:
    """Change of ``P_1`` among the top ``k`` when every ``sigma`` shrinks (Eq. 6).

    ``zeta[k - 1] = P_1^{(k)}(sigma') - P_1^{(k)}(sigma)`` with
    ``sigma' = max(sigma - delta_sigma, 1e-3 * sigma)`` and ``P_1^{(k)}`` from
    :func:`leader_curve` (Eq. 11-12 of Liu et al., 2024, for heterogeneous
    ``sigma``). ``zeta[0] = 0`` and entries beyond the valid candidates are 0.
    A negative ``delta_sigma`` (uncertainty that grows with training) gives a
    negative ``zeta``. Ranks follow ``confidence_curve(mu, sigma, mask).order``.

    Bad values, padding, units and dtypes as in :func:`prob_best` (padding, and inside
    ``jax.jit`` invalid candidates, have exactly no effect); a non-finite
    ``delta_sigma`` raises on concrete inputs and counts as 0 inside ``jax.jit``. Both
    leader curves are integrated in standard units. The result is a bare array:
    :func:`keep_count` reports the status of the same computation (``KeepCount.ok``,
    ``reason``), including a shrunk ``sigma`` that overflowed; the result is finite
    whatever the inputs. float16 / bfloat16 raise ``TypeError`` naming the argument.

    Args:
        mu: Means of the converged losses, shape (n,).
        sigma: Standard deviations, shape (n,), positive.
        delta_sigma: Reduction of ``sigma`` per extra unit of budget, scalar or
            shape (n,) (in the input order), e.g. from :func:`window_delta_sigma`.
            Non-finite entries count as 0 inside ``jax.jit``.
        mask: Candidates to consider, shape (n,), bool; all when None.

    Returns:
        ``zeta`` for ``k = 1..n``, shape (n,).

    Raises:
        ValueError: on shapes, and on concrete inputs on invalid values (as
            :func:`prob_best`; a non-finite ``delta_sigma`` under the mask).
        TypeError: on non-real dtypes and float16 / bfloat16 (naming the argument).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import zeta
        >>> z = zeta(jnp.array([0.0, 1.0]), jnp.array([1.0, 1.0]), 0.1)
        >>> [round(float(v), 4) for v in z]   # Phi(1/sqrt(2)/0.9) - Phi(1/sqrt(2))
        [0.0, 0.0237]
    """
    mu, sigma, mask = prepare(mu, sigma, mask)
    delta = prepare_delta(delta_sigma, mu, mask)
    return _zeta_impl(mu, sigma, delta, mask)


def keep_count(
    mu: ArrayLike,
    sigma: ArrayLike,
    delta_sigma: ArrayLike,
    round_budget: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    rule: str = "argmax",
) -> KeepCount:
    """How many top-ranked candidates a UQ-guided round keeps (Section 3.3.2).

    Liu et al. (2024) rank the candidates by ``mu``, build the confidence curve
    ``P_k`` and keep the smallest ``k`` with ``P_k >= tau``. ``tau`` comes from
    weighing, for each ``k``, what dropping the k-th candidate costs and gains:

    * cost (exploration, Eq. 5): ``P_k - P_{k-1}``, the chance that the dropped
      candidate was the best (``cost[k - 1] = prob_best[order[k - 1]]``);
    * gain (exploitation): with a round budget ``R`` fixed, each of the ``k - 1``
      survivors gets ``R / (k - 1) - R / k = R / (k (k - 1))`` more units, each
      unit raising ``P_1`` of the next round by ``zeta(k)`` (Eq. 6, see
      :func:`zeta`): ``gain[k - 1] = R / (k (k - 1)) * zeta(k)``.

    ``k*`` is where the two balance (Eq. 7), ``tau = P_{k*}``, and the round
    keeps ``k = min {k : P_k >= tau}``. ``k <= k*``, and ``k < k*`` only where
    the candidates ranked between have together a probability below the resolution of
    the quadrature (``num_valid`` times 2.5e-19 in float64, 1.2e-11 in float32: the
    most its cuts can drop from one probability; below it, a batch and a single problem
    may compute different values, or 0): the comparison is
    made on ``1 - P_k``, summed from the far end of the ranking, which keeps full
    precision where ``P_k`` is within rounding of 1 (the curve itself saturates at
    1 there, and where it first does would depend on the inputs' last bits). The
    paper's Algorithm box writes ``P_k > tau``; Section 3.3.2 and Fig. 6 write ``>=``, which is used here (with ``>``,
    ``tau = P_{k*} = 1`` would keep nothing).

    The paper derives ``k*`` from the optimisation of Eq. (4) -- choose ``tau``
    (hence ``k``) to maximise ``P_1`` of the next round -- and states Eq. (7),
    cost = gain, as its balance condition. On a discrete ``k`` the two readings
    differ when cost and gain cross more than once or not at all:

    * ``rule="argmax"`` (default; Eq. 4, the objective the scheme is built to
      maximise): ``k* = argmax_k F(k)`` with
      ``F(k) = sum_{j=k+1}^{n} (gain_j - cost_j)``, the linearised change of
      ``P_1`` when keeping ``k`` instead of all ``n``; ties go to the larger
      ``k`` (drop only when it strictly helps).
    * ``rule="crossing"`` (Eq. 7 reached greedily from the bottom): drop the
      last candidate while ``gain > cost``; ``k*`` is the largest ``k >= 2``
      with ``cost(k) >= gain(k)``, or 1 if there is none.

    Both agree when there is a single crossing. In both, equality counts as
    balance (keep), ``k*`` never exceeds the number of valid candidates, and
    ``k = 1`` cannot be dropped. No crossing: gain above cost everywhere gives
    ``k* = 1`` (keep the top candidate); cost at or above gain everywhere
    (e.g. ``delta_sigma <= 0`` or ``R = 0``) gives ``k* = n``, ``tau = 1``,
    which keeps every candidate whose probability is above the quadrature's resolution.

    Args:
        mu: Current validation losses (means of the converged losses), shape (n,).
        sigma: Uncertainties, shape (n,), positive (e.g. :func:`window_std`).
        delta_sigma: Reduction of ``sigma`` per extra unit of budget, scalar or
            shape (n,) in the input order (e.g. :func:`window_delta_sigma`).
        round_budget: ``R``, the budget of one round in the units of
            ``delta_sigma`` (e.g. epochs), scalar, >= 0 (inside ``jax.jit`` a
            negative or non-finite value counts as 0, with ``reason = BAD_INPUT``).
        mask: Candidates in play, shape (n,), bool; all when None.
        rule: ``"argmax"`` or ``"crossing"``, see above.

    Bad values, padding, units and dtypes: entries where ``mask`` is False are
    padding and may hold anything in ``mu``, ``sigma`` and ``delta_sigma``: they are
    made inert before any arithmetic and have exactly no effect. On concrete inputs a
    NaN / inf ``mu``, a non-finite or non-positive ``sigma`` or a non-finite
    ``delta_sigma`` under the mask, or a negative / non-finite ``round_budget`` raise
    ``ValueError``; inside ``jax.jit`` such candidates are left out (``num_invalid``),
    such ``delta_sigma`` count as 0 (``num_bad_delta``), such a budget as 0, and
    ``ok`` is False with ``reason = BAD_INPUT``. All integrals are taken in standard
    units (see :func:`prob_best`); a problem the dtype cannot represent gives
    ``reason = UNREPRESENTABLE``. Every field is finite whatever the inputs, and
    ``ok`` is never True with a non-finite value. float16 / bfloat16 raise
    ``TypeError`` naming the argument. Not differentiable (JAX cannot differentiate the
    branches the integrals run behind): a derivative with respect to ``mu``, ``sigma``,
    ``delta_sigma`` or ``round_budget`` raises ``TypeError`` saying so; for derivatives of
    ``curve``, ``cost`` or ``zeta`` differentiate :func:`confidence_curve`, :func:`prob_best`
    or :func:`zeta`.

    Returns:
        :class:`KeepCount` with ``k``, ``tau``, ``k_star``, the keep mask,
        the per-k ``cost``, ``gain``, ``zeta`` and ``curve``, and the status ``ok``
        and ``reason``.

    Raises:
        ValueError: on shapes, an unknown ``rule`` and (concrete inputs) invalid values.
        TypeError: on non-real dtypes and float16 / bfloat16 (naming the argument).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import keep_count
        >>> mu = jnp.array([0.30, 0.31, 0.33, 0.40, 0.55, 0.70])
        >>> res = keep_count(mu, jnp.full(6, 0.03), 0.003, 20.0)
        >>> int(res.k), res.keep.tolist(), bool(res.ok)
        (3, [True, True, True, False, False, False], True)
    """
    if rule not in _RULES:
        raise ValueError(f"rule must be one of {_RULES}, got {rule!r}")
    mu, sigma, mask = prepare(mu, sigma, mask)
    delta = prepare_delta(delta_sigma, mu, mask)
    r = real_array(round_budget, "round_budget")
    if r.shape != ():
        raise ValueError(f"round_budget must be a scalar, got shape {r.shape}")
    if is_concrete(r):
        rv = float(r)
        if not (np.isfinite(rv) and rv >= 0):
            raise ValueError(f"round_budget must be finite and >= 0, got {rv}")
    mu, sigma, delta, r = checks.not_differentiable(_NO_DERIVATIVE, mu, sigma, delta, r.astype(mu.dtype))
    return _keep_count_impl(mu, sigma, delta, r, mask, rule=rule)
