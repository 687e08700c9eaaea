"""Approximate backward induction of BOS on the (epoch, running-mean bin) grid
(:func:`backward_induction`) and its :class:`DecisionTable` (looked up by
:func:`jaxstop.bos.decide`).

The paths enter only through transition counts between running-mean bins
(:func:`transition_counts`); the recursion runs over those counts (see the package
docstring of :mod:`jaxstop.bos`)."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxstop._src import checks, status
from jaxstop._src.status import Reason
from jaxstop.bos._simulate import inside
from jaxstop.bos._validate import check_config, check_costs, screen

ACTION_FORCED_CONTINUE = 0
ACTION_D2 = 1
ACTION_STOP = 2
ACTION_CONTINUE = 3

_HIGHEST = lax.Precision.HIGHEST
# Loss the released code gives both terminal decisions in a bin no path visits.
_COMPAT_EMPTY_LOSS = 1e4
# Number of paths at which ``min_count`` is stated in corrected mode (the paper's 100,000).
_REFERENCE_PATHS = 100_000


class DecisionTable(NamedTuple):
    """Bayes decision rules on the (epoch, running-mean bin) grid.

    Row ``k`` (0-based) describes epoch ``first_epoch + k``, i.e. ``N0 + 1 + k``;
    column ``i`` the running mean in ``(edges[i], edges[i + 1]]``.

    Attributes:
        actions: Action codes (``ACTION_*``), shape (T, num_bins), int32.
        losses: Expected losses of ``[d2, d1, d0]`` (in this order, so that
            ``action = argmin + 1``), shape (T, num_bins, 3).
        prob: Estimated ``Pr(theta_1 | bin)``, the probability that the final
            error beats the incumbent (corrected: fraction of the bin's paths
            with final error ``< best_error + xi``; compat: one minus the
            fraction with final error ``> best_error``), shape (T, num_bins);
            0 in empty bins.
        counts: Number of valid paths in each bin, shape (T, num_bins), int32.
        edges: Bin edges, shape (num_bins + 1,).
        first_epoch: Epoch of row 0 (``N0 + 1``), int32 scalar.
        num_valid: Number of valid paths, int32 scalar (0 means every entry is a
            forced continue).
        dropped_variance: Share of the posterior variance not represented by the
            simulated paths (``rank`` truncation; 0 for paths given directly).
        reason: Why the table is not usable, an int32 :class:`jaxstop.Reason`
            code (shape of ``num_valid``): ``OK`` (0); ``BAD_INPUT`` (1) -- an argument
            checked inside ``jit`` was invalid (a NaN, inf or out-of-range ``best_error``,
            ``k1``, ``k2``, ``cost``, ``xi``, prefix error or real path); ``NOT_FINITE`` (2)
            -- the curve-GP fit found no finite likelihood, or a loss or probability came
            out NaN; ``EMPTY`` (5) -- no valid path. With ``BAD_INPUT`` or a failed fit the
            table is void: every action is ``ACTION_FORCED_CONTINUE``, ``losses``,
            ``prob`` and ``dropped_variance`` are NaN and the counts 0. Defaults to
            ``OK`` for a table built by hand (then :attr:`ok` still checks the fields).

    The status of the table is the boolean property :attr:`ok`.
    """

    actions: jax.Array
    losses: jax.Array
    prob: jax.Array
    counts: jax.Array
    edges: jax.Array
    first_epoch: jax.Array
    num_valid: jax.Array
    dropped_variance: jax.Array
    reason: jax.Array = np.int32(Reason.OK)

    @property
    def ok(self) -> jax.Array:
        """Whether the table is usable, bool (shape of ``num_valid``: per trial for
        :func:`solve_batch`): ``reason`` is ``OK``, at least one valid path
        (``num_valid > 0``; otherwise every entry is a forced continue), no NaN loss
        (losses may be ``+inf``: empty bins, ``k1 = inf``), finite ``prob`` and
        ``dropped_variance``. For the tables of this module ``ok`` is
        ``reason == Reason.OK``.

        Example:
            >>> import jax, jax.numpy as jnp
            >>> values = 0.3 + 0.05 * jax.random.uniform(jax.random.key(0), (200, 4))
            >>> table = backward_induction(values, jnp.ones(200, bool), 0.32, 100.0, 99.0, 1.0)
            >>> bool(table.ok), bool(table._replace(num_valid=jnp.int32(0)).ok)
            (True, False)
        """
        return (jnp.asarray(self.reason) == Reason.OK) & (self.num_valid > 0) & _finite_fields(self)


def _finite_fields(table: DecisionTable) -> jax.Array:
    """No NaN loss (``+inf`` is allowed), finite ``prob`` and ``dropped_variance``."""
    no_nan = ~jnp.any(jnp.isnan(table.losses), axis=(-3, -2, -1))
    prob_finite = jnp.all(jnp.isfinite(table.prob), axis=(-2, -1))
    return no_nan & prob_finite & jnp.isfinite(table.dropped_variance)


def with_status(table: DecisionTable, bad_input, fit_failed=False) -> DecisionTable:
    """``table`` with its ``reason`` set, void (all forced continues, NaN losses) when
    ``bad_input`` (an argument failed its check inside ``jit``) or ``fit_failed``.

    The one place where the status of a table is decided, for :func:`backward_induction`
    and :func:`jaxstop.bos.solve` alike; one trial (scalar flags).
    """
    reason = status.first_reason(
        (bad_input, Reason.BAD_INPUT),
        (fit_failed, Reason.NOT_FINITE),
        (table.num_valid == 0, Reason.EMPTY),
        (~_finite_fields(table), Reason.NOT_FINITE),
    )
    void = jnp.asarray(bad_input) | jnp.asarray(fit_failed)
    nan = jnp.asarray(jnp.nan, table.losses.dtype)
    return table._replace(
        actions=jnp.where(void, jnp.int32(ACTION_FORCED_CONTINUE), table.actions),
        losses=jnp.where(void, nan, table.losses),
        prob=jnp.where(void, nan, table.prob),
        counts=jnp.where(void, jnp.int32(0), table.counts),
        num_valid=jnp.where(void, jnp.int32(0), table.num_valid),
        dropped_variance=jnp.where(void, nan, table.dropped_variance),
        reason=reason,
    )


def edges(num_bins: int, dtype) -> jax.Array:
    # np.linspace(0, 1, num_bins + 1): edge i is float(i) * (1 / num_bins), the last 1.
    i = jnp.arange(num_bins + 1, dtype=dtype)
    e = i * jnp.asarray(1.0 / num_bins, dtype)
    return e.at[-1].set(1.0)


def bin_index(v: jax.Array, num_bins: int) -> jax.Array:
    """Largest ``i`` with ``v > edges[i]`` for ``v`` in (0, 1]; clipped outside.

    Exact for the edges of :func:`edges`: a first guess ``floor(v * num_bins)``
    is off by at most one and is corrected by comparing with the two edges
    around it, computed arithmetically (no table lookup).
    """
    dtype = v.dtype
    step = jnp.asarray(1.0 / num_bins, dtype)
    c = jnp.clip(jnp.floor(v * num_bins), 0, num_bins - 1).astype(jnp.int32)
    lo = c.astype(dtype) * step
    hi = jnp.where(c + 1 == num_bins, jnp.asarray(1.0, dtype), (c + 1).astype(dtype) * step)
    c = c - (v <= lo).astype(jnp.int32) + (v > hi).astype(jnp.int32)
    return jnp.clip(c, 0, num_bins - 1)


def transition_counts(values_tm, mask, threshold, *, num_bins: int, compat: bool):
    """Transition counts of all steps from time-major paths.

    Args:
        values_tm: Paths, shape (T, P) (time-major).
        mask: Which paths are real, shape (P,); padded paths are replaced by 0 before any
            arithmetic (so NaN or inf there has no effect), and paths outside (0, 1) are
            dropped here too.
        threshold: Best error (compat) or best error + xi (corrected).

    Returns:
        ``trans`` (T-1, B, B) int32 -- valid paths in bin i at step k and bin j at
        step k+1; ``per_step`` (T, 2, B) int32 -- valid paths per (step, event,
        bin), where the event is "final error > threshold" (compat) or
        "final error < threshold" (corrected).

    The running mean is accumulated left to right (as ``np.cumsum``) in a scan
    over steps; each step scatters its paths' combined index
    ``(step, event, bin_k, bin_{k+1})`` into one histogram. (A single scatter of
    all steps' indices is several times slower on XLA:CPU: the index fusion is
    then emitted over a flattened shape.)
    """
    T = values_tm.shape[0]
    B = num_bins
    dtype = values_tm.dtype
    values_tm = checks.inert_rows(values_tm.T, mask).T  # padded paths: 0, outside (0, 1)
    valid = mask & inside(values_tm, axis=0)
    final = values_tm[-1]
    event = (final > threshold) if compat else (final < threshold)
    base = jnp.where(valid, event.astype(jnp.int32) * B, -1)
    nseg = 2 * B * B

    def stat(acc, k):
        return acc / (k + 1).astype(dtype)

    acc0 = values_tm[0]
    b0 = bin_index(acc0, B)
    if T == 1:
        keys = jnp.where(base >= 0, base + b0, 2 * B)
        per_step = jnp.zeros(2 * B, jnp.int32).at[keys].add(1, mode="drop")
        return jnp.zeros((0, B, B), jnp.int32), per_step.reshape(1, 2, B)

    def body(carry, k):
        hist, acc, b_prev = carry
        acc = acc + values_tm[k]
        b = bin_index(stat(acc, k), B)
        keys = jnp.where(base >= 0, ((k - 1) * 2 * B + base + b_prev) * B + b, (T - 1) * nseg)
        hist = hist.at[keys].add(1, mode="drop")
        return (hist, acc, b), None

    hist0 = jnp.zeros((T - 1) * nseg, jnp.int32)
    (hist, _, _), _ = lax.scan(body, (hist0, acc0, b0), jnp.arange(1, T))
    hist = hist.reshape(T - 1, 2, B, B)
    i32 = jnp.int32
    trans = hist.sum(axis=1, dtype=i32)
    per_step = jnp.concatenate([hist.sum(axis=3, dtype=i32), hist[-1:].sum(axis=2, dtype=i32)], axis=0)
    return trans, per_step


def _argmin3(a, b, c):
    """Index of the first minimum of (a, b, c), like ``np.argmin``."""
    i = jnp.where(b < a, 1, 0)
    m = jnp.minimum(a, b)
    return jnp.where(c < m, 2, i).astype(jnp.int32)


def _induction(trans, per_step, k1, k2, cost, min_count, *, compat: bool, dtype):
    """Backward induction over the counts (see :func:`backward_induction`)."""
    T = per_step.shape[0]
    n = per_step.sum(axis=1, dtype=jnp.int32)
    n_event = per_step[:, 1]
    nonempty = n > 0
    nf = n.astype(dtype)
    safe_n = jnp.where(nonempty, nf, 1)
    frac = jnp.where(nonempty, n_event.astype(dtype) / safe_n, 0)
    step = jnp.arange(1, T + 1, dtype=dtype)[:, None]
    inf = jnp.asarray(jnp.inf, dtype)
    num_valid = n[0].sum(dtype=jnp.int32)
    if compat:
        # frac = Pr(final error > best error): the released code's Pr_z_star.
        d2 = k2 * frac + cost * step
        d1 = k1 * (1 - frac) + cost * step
        d2 = jnp.where(nonempty, d2, _COMPAT_EMPTY_LOSS)
        d1 = jnp.where(nonempty, d1, _COMPAT_EMPTY_LOSS)
        prob = jnp.where(nonempty, 1 - frac, 0)
        dense = nf > min_count
    else:
        # frac = Pr(theta_1 | bin) = Pr(final error < best error + xi).
        d1 = jnp.where(jnp.isinf(k1), inf, k1 * frac)
        d2 = k2 * (1 - frac)
        d1 = jnp.where(nonempty, d1, inf)
        d2 = jnp.where(nonempty, d2, inf)
        prob = frac
        cut = min_count * num_valid.astype(dtype) / _REFERENCE_PATHS
        dense = nf > cut

    rho_last = jnp.minimum(d2[-1], d1[-1])
    if not compat:
        rho_last = jnp.where(nonempty[-1], rho_last, 0)

    def body(rho_next, k):
        tot = jnp.matmul(trans[k].astype(dtype), rho_next, precision=_HIGHEST)
        mean = tot / safe_n[k]
        if compat:
            cont = jnp.where(dense[k], mean, 0)
            rho = jnp.minimum(jnp.minimum(d2[k], d1[k]), cont)
        else:
            cont = jnp.where(nonempty[k], cost + mean, inf)
            best = jnp.minimum(jnp.minimum(d2[k], d1[k]), cont)
            rho = jnp.where(dense[k], best, cont)
            rho = jnp.where(nonempty[k], rho, 0)
        return rho, cont

    if T > 1:
        _, cont = lax.scan(body, rho_last, jnp.arange(T - 1), reverse=True)
    else:
        cont = jnp.zeros((0, n.shape[1]), dtype)
    last_cont = jnp.zeros_like(rho_last) if compat else jnp.full_like(rho_last, inf)
    cont = jnp.concatenate([cont, last_cont[None]], axis=0)

    last = jnp.where(d1[-1] < d2[-1], ACTION_STOP, ACTION_D2).astype(jnp.int32)
    if compat:
        earlier = jnp.where(cont[:-1] != 0, _argmin3(d2[:-1], d1[:-1], cont[:-1]) + 1, 0)
    else:
        last = jnp.where(nonempty[-1], last, ACTION_FORCED_CONTINUE)
        earlier = jnp.where(dense[:-1], _argmin3(d2[:-1], d1[:-1], cont[:-1]) + 1, 0)
    actions = jnp.concatenate([earlier.astype(jnp.int32), last[None]], axis=0)
    losses = jnp.stack([d2, d1, cont], axis=-1)
    return actions, losses, prob, n.astype(jnp.int32), num_valid.astype(jnp.int32)


def decision_table(trans, per_step, k1, k2, cost, min_count, n0, dropped, *, compat, num_bins, dtype):
    actions, losses, prob, counts, num_valid = _induction(
        trans, per_step, k1, k2, cost, min_count, compat=compat, dtype=dtype
    )
    return DecisionTable(
        actions=actions,
        losses=losses,
        prob=prob,
        counts=counts,
        edges=edges(num_bins, dtype),
        first_epoch=jnp.asarray(n0, jnp.int32) + 1,
        num_valid=num_valid,
        dropped_variance=jnp.asarray(dropped, dtype),
    )


@partial(jax.jit, static_argnames=("num_bins", "compat"))
def _backward_induction(values, mask, best_error, k1, k2, cost, xi_, min_count, n0, bad, *, num_bins, compat):
    dtype = values.dtype
    threshold = best_error if compat else best_error + xi_
    trans, per_step = transition_counts(values.T, mask, threshold, num_bins=num_bins, compat=compat)
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
    n0: ArrayLike = 0,
    valid: ArrayLike | None = checks.UNSET,
) -> DecisionTable:
    """Approximate backward induction for the BOS problem (Dai et al., 2019).

    Solves the stopping problem of Eq. (2) with the 0-K loss of Eqs. (3)-(4) on
    sample paths (Appendix B; Mueller et al., 2007). The summary statistic at
    step ``k`` (epoch ``N0 + k``) is the running mean of the simulated errors of
    epochs ``N0+1..N0+k``; it is discretised into ``num_bins`` right-closed bins
    of equal width over [0, 1] (edges ``np.linspace(0, 1, num_bins + 1)``; the
    bin of ``v`` is the largest ``i`` with ``v > edges[i]``). A path counts when
    ``mask`` is set and it stays strictly inside (0, 1); other paths have no
    effect at all.

    ``mode="compat"`` reproduces the released code of the authors
    (``bos_function.py``, ``run_BOS``) decision for decision on the same paths,
    each rule checked against that code:

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
        num_bins: Number of bins over [0, 1] (static, >= 2; 99 in the code).
        mode: ``"corrected"`` or ``"compat"``.
        min_count: Sparsity cut (see above).
        xi: ``xi_t`` of Theorem 1 (see :func:`xi`); corrected mode only.
        n0: Number of observed epochs ``N0`` before the first simulated one.
        valid: Deprecated name of ``mask`` (a :class:`DeprecationWarning`; removed in
            the next release). Positional calls are unchanged.

    Returns:
        :class:`DecisionTable` with ``T`` rows, in the dtype of ``values``;
        ``table.ok`` says whether it is usable and ``table.reason`` why not.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> values = 0.3 + 0.05 * jax.random.uniform(jax.random.key(0), (500, 5))
        >>> mask = jnp.ones(500, bool)
        >>> table = backward_induction(values, mask, 0.32, 100.0, 99.0, 1.0, n0=8)
        >>> table.actions.shape, int(table.first_epoch), int(table.num_valid)
        ((5, 99), 9, 500)
    """
    mask = checks.renamed("backward_induction", "mask", mask, "valid", valid)
    missing = [n for n, v in (("mask", mask), ("best_error", best_error), ("k1", k1), ("k2", k2), ("cost", cost))
               if v is None]
    if missing:
        raise TypeError(f"backward_induction() missing required argument(s): {missing}")
    values = jnp.asarray(values)
    if not jnp.issubdtype(values.dtype, jnp.floating):
        raise TypeError(f"values must be floating point, got dtype {values.dtype}")
    values = checks.float_array(values, "values")
    if values.ndim != 2:
        raise ValueError(f"values must have shape (num_paths, T), got shape {values.shape}")
    mask = jnp.asarray(mask)
    if mask.shape != values.shape[:1]:
        raise ValueError(f"mask must have shape (num_paths,) = {values.shape[:1]}, got {mask.shape}")
    if mask.dtype != jnp.bool_:
        raise TypeError(f"mask must be boolean, got dtype {mask.dtype}")
    compat = check_config(mode, num_bins, min_count)
    dtype = values.dtype
    *costs, bad = check_costs(best_error, k1, k2, cost, xi, dtype, compat)
    best_error, k1, k2, cost, xi_ = costs
    bad = bad | screen([("values", (values, mask), lambda v, m: jnp.isfinite(v) | ~m[:, None],
                         "finite on the real paths (mask=True)")])
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
        bad,
        num_bins=num_bins,
        compat=compat,
    )
