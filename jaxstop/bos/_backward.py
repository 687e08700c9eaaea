"""The public approximate backward induction of BOS on given paths (:func:`backward_induction`):
argument checks, the summary statistic's observed part, and the jitted kernel built from
:mod:`jaxstop.bos._induction` (transition counts, the recursion, the table's status)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import checks
from jaxstop.bos import _statistic
from jaxstop.bos._induction import DecisionTable, decision_table, transition_counts, with_status
from jaxstop.bos._validate import check_config, check_costs, check_prefix, rule, screen


@partial(jax.jit, static_argnames=("num_bins", "compat", "c0"))
def _backward_induction(values, mask, best_error, k1, k2, cost, xi_, min_count, n0, s0, bad, *, num_bins, compat,
                        c0):
    dtype = values.dtype
    threshold = best_error if compat else best_error + xi_
    trans, per_step = transition_counts(values.T, mask, threshold, num_bins=num_bins, compat=compat, s0=s0, c0=c0)
    table = decision_table(
        trans,
        per_step,
        k1,
        k2,
        cost,
        min_count,
        n0,
        jnp.zeros((), dtype),
        compat=compat,
        num_bins=num_bins,
        dtype=dtype,
    )
    return with_status(table, bad)


def backward_induction(
    values: ArrayLike,
    mask: ArrayLike | None = None,
    best_error: ArrayLike | None = None,
    k1: ArrayLike | None = None,
    k2: ArrayLike | None = None,
    cost: ArrayLike | None = None,
    *,
    num_bins: int = 99,
    mode: str = "corrected",
    min_count: float = 30,
    xi: ArrayLike = 0.0,
    n0: ArrayLike | None = None,
    valid: ArrayLike | None = checks.UNSET,
    statistic: str | None = None,
    prefix: ArrayLike | None = None,
) -> DecisionTable:
    """Approximate backward induction for the BOS problem (Dai et al., 2019).

    Solves the stopping problem of Eq. (2) with the 0-K loss of Eqs. (3)-(4) on
    sample paths (Appendix B; Mueller et al., 2007). The summary statistic at
    step ``k`` (epoch ``N0 + k``) is a running mean (``statistic``):

    * ``"all_epochs"`` (the default of ``mode="corrected"``; Section 3.2 and
      Appendix B: ``sum_{n'=1}^{n} y_{t,n'} / n``, "the average validation error up
      to the current epoch n"): the mean of the observed errors of epochs
      ``1..N0`` (``prefix``) and the simulated ones of ``N0+1..N0+k``;
    * ``"after_n0"`` (the default of ``mode="compat"``; the released code's ``St``):
      the mean of the simulated errors of epochs ``N0+1..N0+k`` only.

    (:func:`summary_statistic` computes either on an observed curve, for
    :func:`decide`.) It is discretised into ``num_bins`` right-closed bins
    of equal width over [0, 1] (edges ``i * (1 / num_bins)`` in the working dtype, the
    last 1: ``np.linspace(0, 1, num_bins + 1)`` in float64, while in float32 an edge
    may lie one ulp from the float32 rounding of linspace's, which moves only a value
    within that ulp of an edge; the bin of ``v`` is the largest ``i`` with ``v > edges[i]``,
    as ``table.edges`` holds them). A path counts when
    ``mask`` is set and it stays strictly inside (0, 1); other paths have no
    effect at all.

    ``mode="compat"`` reproduces the released code of the authors
    (``bos_function.py``, ``run_BOS``) decision for decision on the same paths
    (with its statistic, ``"after_n0"``), each rule checked against that code:

    * ``P`` = fraction of the bin's paths whose final error is ``> best_error``
      (strict); ``loss_d2 = k2 P + cost k`` and ``loss_d1 = k1 (1 - P) + cost k``
      at step ``k`` (the observation cost enters as the cumulative ``cost * k``
      in the stopping losses, not as ``+cost`` in the continuation loss); an
      empty bin gets 1e4 for both.
    * Continuation loss = mean over the bin's paths of the next step's minimum
      loss -- of ``[d2, d1]`` when the next step is the last, else of all three
      -- when the bin holds more than ``min_count`` paths, else 0. A 0 there
      enters its predecessors' minima, so sparse bins pull their neighbours'
      continuation losses towards 0.
    * Last step: ``argmin([d2, d1]) + 1`` in every bin, empty bins included
      (their 1e4 tie gives d2). Earlier steps: ``argmin([d2, d1, d0]) + 1``
      where the continuation loss is non-zero, else 0 (forced continue); ties go
      to the first of ``[d2, d1, d0]``.

    Where the code differs from the summary in the project design notes, the
    code is followed: the forced continue is keyed on the continuation loss
    being exactly 0 (``losses[step, i, 2] != 0``), not on the count; so a bin
    with more than ``min_count`` paths is also forced to continue when every
    one of its paths moves into a bin whose minimum loss is 0. ``xi`` is
    ignored in compat mode (the code has no ``xi``). One limit: the code sums
    the next-step losses path by path, so at an *exact* tie between the
    continuation loss and a stopping loss its choice is decided by the rounding
    of that sum; here the sum is ``sum_j C[i, j] rho[j]`` over transition
    counts and may round the other way. Such ties need bins of a few paths and
    rational coincidences; ties between the two stopping losses, and ties whose
    sums are exact, resolve identically.

    ``mode="corrected"`` (default) follows the paper's formulation:

    * The statistic averages every epoch observed so far, ``1..n``
      (``statistic="all_epochs"``, above); ``statistic="after_n0"`` keeps the
      released code's statistic with the rules below.
    * ``theta_1`` = "the final error is ``< best_error + xi``" (Section 3.2 in
      error terms: ``f([x, N]) > y* - xi_t``); ``prob = Pr(theta_1 | bin)``;
      ``loss_d1 = k1 prob`` (stop, concluding it will lose);
      ``loss_d2 = k2 (1 - prob)``; ``loss_d0 = cost + E[rho_{k+1} | bin]`` where
      ``rho`` is the next step's loss (Eq. (2)); ``rho_N = min(d1, d2)``.
      (This equals compat's cumulative-cost form up to a per-step constant, so
      it does not change decisions by itself.)
    * A bin is *sparse* when it holds no more than
      ``min_count * num_valid / 100_000`` valid paths -- ``min_count`` per
      100,000 paths, the released code's 30 at the paper's 100,000 paths -- so
      the sparse region has the same probability mass whatever ``num_paths``.
    * A sparse bin is still forced to continue, but its loss is the estimated
      loss of continuing (``cost + E[rho_{k+1} | bin]`` over its own paths)
      rather than 0, so sparse bins do not leak a zero continuation loss into
      their neighbours.
    * Empty bins (no paths) hold infinite losses and action 0; the continuation
      loss at the last step is infinite (there is no next epoch). A sparse bin
      at the last step is decided by ``argmin([d2, d1])`` like a dense one.
    * ``k1 = inf`` is allowed: ``d1`` is then never taken (Section 3.2).

    Invalid numbers. ``values`` may hold anything on padded paths (``mask`` False):
    they are replaced before any arithmetic and have no effect. On real paths a
    value outside (0, 1) drops the path (above), but NaN or inf is an error, as is a
    NaN, inf or out-of-range loss parameter: with concrete arguments a
    ``ValueError`` names the argument; inside ``jit`` the table comes back void
    with ``ok`` False and ``reason == Reason.BAD_INPUT`` (every action a forced
    continue, so nothing stops on it). float16 / bfloat16 arguments raise
    ``TypeError``.

    Args:
        values: Simulated errors of epochs ``N0+1..N``, shape (num_paths, T),
            float32 or float64.
        mask: Which paths are real, shape (num_paths,), bool (e.g. ``Paths.valid``
            of :func:`simulate`); required (the ``None`` default only lets the
            deprecated ``valid=`` keyword stand in for it).
        best_error: Incumbent (best) final validation error, scalar in [0, 1]
            (1 for the paper's ``y*_0 = 0``).
        k1: Cost of a wrong d1 (false early stop), ``K_{1,t}`` (see
            :func:`k1_schedule`), positive.
        k2: Cost of a wrong d2, ``K_2`` (99 in the paper), positive.
        cost: Cost of one more epoch ``c_{d_0}`` (1 in the paper), >= 0.
        num_bins: Number of bins over [0, 1] (static, >= 2; 99: the code's grid
            ``np.linspace(0, 1, 100)``, Appendix D's "grid size ... 100").
        mode: ``"corrected"`` or ``"compat"``.
        min_count: Sparsity cut (see above).
        xi: ``xi_t`` of Theorem 1 (see :func:`xi`); corrected mode only.
        n0: Number of observed epochs ``N0`` before the first simulated one, an
            integer ``>= 0`` (default: ``len(prefix)``, or 0 without a prefix); inside
            ``jit`` a negative or fractional one, or with a prefix one other than
            ``len(prefix)``, voids the table (``BAD_INPUT``).
        valid: Deprecated name of ``mask`` (a :class:`DeprecationWarning`; removed in
            the next release). Positional calls are unchanged.
        statistic: ``"all_epochs"``, ``"after_n0"`` or ``None`` (the mode's default).
        prefix: The observed errors of epochs ``1..N0``, shape (N0,), inside (0, 1):
            the part of the ``"all_epochs"`` statistic before the simulated epochs
            (ignored by ``"after_n0"``). Required for ``"all_epochs"`` when ``n0 > 0``.

    Returns:
        :class:`DecisionTable` with ``T`` rows, in the dtype of ``values``;
        ``table.ok`` says whether it is usable and ``table.reason`` why not.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> values = 0.3 + 0.05 * jax.random.uniform(jax.random.key(0), (500, 5))
        >>> mask = jnp.ones(500, bool)
        >>> prefix = jnp.linspace(0.6, 0.35, 8)  # observed errors of epochs 1..N0
        >>> table = backward_induction(values, mask, 0.32, 100.0, 99.0, 1.0, prefix=prefix)
        >>> table.actions.shape, int(table.first_epoch), int(table.num_valid)
        ((5, 99), 9, 500)
        >>> compat = backward_induction(values, mask, 0.32, 100.0, 99.0, 1.0, mode="compat", n0=8)
        >>> int(compat.first_epoch)   # the released code's statistic needs no prefix
        9
    """
    mask = checks.renamed("backward_induction", "mask", mask, "valid", valid)
    missing = [n for n, v in (("mask", mask), ("best_error", best_error), ("k1", k1), ("k2", k2), ("cost", cost))
               if v is None]
    if missing:
        raise TypeError(f"backward_induction() missing required argument(s): {missing}")
    try:
        values = jnp.asarray(values)
    except (TypeError, ValueError) as err:  # None, a string, a ragged list
        raise TypeError(f"values must be a floating array of shape (num_paths, T), got {type(values).__name__}") from err
    if not jnp.issubdtype(values.dtype, jnp.floating):
        raise TypeError(f"values must be floating point, got dtype {values.dtype}")
    values = checks.float_array(values, "values")
    if values.ndim != 2:
        raise ValueError(f"values must have shape (num_paths, T), got shape {values.shape}")
    if values.shape[1] < 1:
        raise ValueError(f"values must hold at least one simulated epoch (T >= 1), got shape {values.shape}")
    try:
        mask = jnp.asarray(mask)
    except (TypeError, ValueError) as err:
        raise TypeError(f"mask must be a boolean array of shape (num_paths,), got {type(mask).__name__}") from err
    if mask.shape != values.shape[:1]:
        raise ValueError(f"mask must have shape (num_paths,) = {values.shape[:1]}, got {mask.shape}")
    if mask.dtype != jnp.bool_:
        raise TypeError(f"mask must be boolean, got dtype {mask.dtype}")
    compat = check_config(mode, num_bins, min_count)
    statistic = _statistic.resolve_statistic(statistic, mode)
    dtype = values.dtype
    *costs, bad = check_costs(best_error, k1, k2, cost, xi, dtype, compat)
    best_error, k1, k2, cost, xi_ = costs
    bad = bad | screen([("values", (values, mask), lambda v, m: jnp.isfinite(v) | ~m[:, None],
                         "finite on the real paths (mask=True)")])
    n0, s0, c0, bad_prefix = _observed_part(prefix, n0, statistic, dtype)
    return _backward_induction(
        values,
        mask,
        best_error,
        k1,
        k2,
        cost,
        xi_,
        jnp.asarray(min_count, dtype),
        jnp.asarray(n0, jnp.int32),
        s0,
        bad | bad_prefix,
        num_bins=num_bins,
        compat=compat,
        c0=c0,
    )


def _observed_part(prefix, n0, statistic: str, dtype):
    """``(n0, s0, c0, bad)`` of :func:`backward_induction`: ``N0``, the statistic's part
    before the simulated epochs (:func:`jaxstop.bos._statistic.prefix_part`) and the
    prefix's ``bad`` flag (its errors must lie inside (0, 1), ``n0`` must be an integer
    ``>= 0``)."""
    if prefix is None:
        if n0 is None:
            n0 = 0
        bad_n0 = _check_n0(n0)
        if statistic == "all_epochs" and not (checks.is_concrete(n0) and int(np.asarray(n0)) == 0):
            raise ValueError(
                "statistic='all_epochs' (the paper's; the default of mode='corrected') averages the observed "
                f"errors of epochs 1..N0 too: pass them as prefix=... (got n0={n0!r} and no prefix), or use "
                "statistic='after_n0' (the released code's mean of epochs N0+1..n)"
            )
        return n0, jnp.zeros((), dtype), 0, bad_n0
    prefix = check_prefix(prefix).astype(dtype)
    if n0 is None:
        n0 = prefix.shape[0]
    bad_n0 = _check_n0(n0)
    if checks.is_concrete(n0) and int(np.asarray(n0)) != prefix.shape[0]:
        raise ValueError(f"n0 must equal len(prefix) = {prefix.shape[0]}, got {n0!r}")
    # traced: another n0 would label the rows with epochs the statistic was not binned for
    bad = screen([rule("prefix", prefix), ("n0", n0, lambda v: v == prefix.shape[0], "len(prefix)")])
    s0, c0 = _statistic.prefix_part(prefix, statistic)
    return n0, s0, c0, bad | bad_n0


def _check_n0(n0):
    """``n0``'s :func:`screen` flag: a scalar integer in ``[0, 2^31 - 1)`` (concrete:
    ``ValueError`` naming it; traced: ``bad``, a void table)."""
    if checks.is_concrete(n0):
        v = np.asarray(n0)
        if v.shape != () or not (np.issubdtype(v.dtype, np.integer) or np.issubdtype(v.dtype, np.floating)) \
                or v.dtype == np.bool_:
            raise ValueError(f"n0 must be an integer scalar >= 0, got {n0!r}")
        if not (np.isfinite(v) and v == np.floor(v) and 0 <= v < 2**31 - 1):
            raise ValueError(f"n0 must be an integer >= 0 (below 2**31 - 1), got {n0!r}")
        return jnp.asarray(False)
    if jnp.shape(n0) != ():
        raise ValueError(f"n0 must be a scalar, got shape {jnp.shape(n0)}")
    return screen([("n0", n0, lambda v: jnp.isfinite(v) & (jnp.floor(v) == v) & (v >= 0), "an integer >= 0")])
