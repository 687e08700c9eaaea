"""Approximate backward induction of BOS on the (epoch, running-mean bin) grid -- the
kernel behind :func:`jaxstop.bos.backward_induction` and :func:`jaxstop.bos.solve` --
and its :class:`DecisionTable` (looked up by :func:`jaxstop.bos.decide`).

The paths enter only through transition counts between running-mean bins
(:func:`transition_counts`); the recursion runs over those counts (see the package
docstring of :mod:`jaxstop.bos`)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxstop._src import checks, status
from jaxstop._src.status import Reason
from jaxstop.bos import _statistic
from jaxstop.bos._simulate import inside

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
            >>> from jaxstop.bos import backward_induction
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
    # edge i is float(i) * (1 / num_bins) in dtype, the last 1: np.linspace(0, 1, num_bins + 1) in
    # float64; in float32 an edge may be one ulp from linspace's rounded to float32
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


def transition_counts(values_tm, mask, threshold, *, num_bins: int, compat: bool, s0=0.0, c0: int = 0):
    """Transition counts of all steps from time-major paths.

    Args:
        values_tm: Paths, shape (T, P) (time-major).
        mask: Which paths are real, shape (P,); padded paths are replaced by 0 before any
            arithmetic (so NaN or inf there has no effect), and paths outside (0, 1) are
            dropped here too.
        threshold: Best error (compat) or best error + xi (corrected).
        s0, c0: The summary statistic's part before the first simulated epoch
            (:func:`jaxstop.bos._statistic.prefix_part`): the statistic at step ``k``
            (0-based) is ``(s0 + v_0 + ... + v_k) / (c0 + k + 1)``, summed left to right.

    Returns:
        ``trans`` (T-1, B, B) int32 -- valid paths in bin i at step k and bin j at
        step k+1; ``per_step`` (T, 2, B) int32 -- valid paths per (step, event,
        bin), where the event is "final error > threshold" (compat) or
        "final error < threshold" (corrected).

    The running sum is accumulated left to right (as ``np.cumsum`` of the observed
    errors followed by the path) in a scan over steps; each step scatters its paths' combined index
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
        return _statistic.running(acc, c0 + k + 1)

    acc0 = jnp.asarray(s0, dtype) + values_tm[0]
    b0 = bin_index(stat(acc0, 0), B)
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
