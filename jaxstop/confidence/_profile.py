"""The offline uncertainty profile of Appendix C (Liu et al., 2024): ``Delta_t sigma`` from
a few fully trained learning curves, :func:`delta_sigma_profile` and its result :class:`Profile`.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import checks
from jaxstop._src.status import Reason, all_finite, first_reason
from jaxstop._src.numerics import masked_std

__all__ = ["PHASE_FRACTIONS", "Profile", "default_breakpoints", "delta_sigma_profile"]

#: Where the phases of Appendix C begin, as fractions of the curve length: epochs 6, 50
#: and 180 of NAS-Bench-201's 200.
PHASE_FRACTIONS = (Fraction(6, 200), Fraction(50, 200), Fraction(180, 200))

# phase index -> fitted in log space (Appendix C's exponential phase)
_EXPONENTIAL = (False, True, False, False)


class Profile(NamedTuple):
    """Result of :func:`delta_sigma_profile` (``m`` candidates, ``T`` epochs; per-epoch
    arrays hold epoch ``t = 1..T`` at index ``t - 1``).

    Attributes:
        sigma: ``sigma_c(t)``, the std (``ddof = 1``) of candidate ``c``'s last ``window``
            losses up to epoch ``t`` (:func:`window_std`); 0 where undefined (a padded
            candidate, an epoch it did not reach, fewer than two losses), shape (m, T).
        count: Candidates whose ``sigma_c(t)`` is defined, shape (T,) int32.
        aggregate: Their mean ``sigma(t)`` (0 where ``count`` is 0), shape (T,).
        breakpoints: First epochs of phases 2, 3 and 4, shape (3,) int32.
        coef: ``(slope, intercept)`` of each phase's least-squares line, shape (4, 2):
            ``sigma(t) = slope t + intercept`` in phases 1, 3 and 4, ``log sigma(t) =
            slope t + intercept`` in phase 2 (the exponential decay ``a e^{-b t}`` with
            ``a = e^intercept``, ``b = -slope``); (0, 0) for an empty phase.
        fit: The fitted ``sigma(t)``, shape (T,).
        delta: ``Delta_t sigma = fit(t) - fit(t + 1)``, and ``delta[T - 1] = delta[T - 2]``
            for the last epoch, shape (T,). Positive where the uncertainty falls.
        ok: The profile was fitted: every non-empty phase had data and every value is
            finite, bool (). When False, ``coef``, ``fit`` and ``delta`` are 0.
        reason: Why ``ok`` is False, an int32 code of ``jaxstop._src.status.Reason``:
            ``BAD_INPUT`` (breakpoints not non-decreasing in ``[1, T + 1]``, inside
            ``jax.jit``), ``EMPTY`` (no real candidate, or a non-empty phase without a
            usable epoch), ``NOT_FINITE`` (the fit overflowed); ``OK`` (0) otherwise.
    """

    sigma: jax.Array
    count: jax.Array
    aggregate: jax.Array
    breakpoints: jax.Array
    coef: jax.Array
    fit: jax.Array
    delta: jax.Array
    ok: jax.Array
    reason: jax.Array


def default_breakpoints(num_epochs: int) -> tuple:
    """Appendix C's breakpoints 6, 50, 180 of 200 epochs scaled to ``num_epochs``.

    Each is ``floor(f T + 1/2)`` (half up) for ``f`` in :data:`PHASE_FRACTIONS`, then
    clipped to ``[3, T + 1]``: phase 1 always holds epochs 1 and 2, so the first epoch
    with a defined ``sigma`` (two losses) is never a phase of its own without data.

    Example:
        >>> from jaxstop.confidence import default_breakpoints
        >>> default_breakpoints(200), default_breakpoints(52), default_breakpoints(9)
        ((6, 50, 180), (3, 13, 47), (3, 3, 8))
    """
    t = checks.positive_int(num_epochs, "num_epochs")
    return tuple(min(max(math.floor(f * t + Fraction(1, 2)), 3), t + 1) for f in PHASE_FRACTIONS)


def _candidate_sigma(curves, real, window: int):
    """``sigma_c(t)`` for every candidate and epoch, and where it is defined, (m, T)."""
    m, t_max = curves.shape
    observed = real[:, None] & jnp.isfinite(curves)
    t = jnp.arange(1, t_max + 1)
    idx = t[:, None] - window + jnp.arange(window)[None, :]  # (T, w): epochs t-w+1..t, 0-based
    inside = idx >= 0
    pos = jnp.clip(idx, 0, t_max - 1)
    vals = curves[:, pos]  # (m, T, w)
    ok = inside[None, :, :] & observed[:, pos]
    std, cnt = masked_std(vals, ok, 1)
    defined = observed & (cnt >= 2)
    return jnp.where(defined, std, jnp.zeros((), curves.dtype)), defined


def _line(t, y, w):
    """Least-squares ``y = slope t + intercept`` over the points ``w`` marks: the line
    through two or more points, the flat line through one, (0, 0) through none."""
    zero = jnp.zeros((), y.dtype)
    n = jnp.sum(w).astype(y.dtype)
    tw = jnp.where(w, t, zero)
    yw = jnp.where(w, y, zero)
    tbar = jnp.sum(tw) / jnp.maximum(n, 1)
    ybar = jnp.sum(yw) / jnp.maximum(n, 1)
    dt = jnp.where(w, t - tbar, zero)
    dy = jnp.where(w, y - ybar, zero)
    sxx = jnp.sum(dt * dt)
    slope = jnp.where(n >= 2, jnp.sum(dt * dy) / jnp.where(sxx > 0, sxx, 1), zero)
    return slope, jnp.where(n >= 1, ybar - slope * tbar, zero)


@functools.partial(jax.jit, static_argnames=("window",))
def _profile_impl(curves, mask, breakpoints, window):
    m, t_max = curves.shape
    dtype = curves.dtype
    zero = jnp.zeros((), dtype)
    curves = checks.inert_rows(curves, mask, jnp.nan)
    sig, defined = _candidate_sigma(curves, mask, window)
    count = jnp.sum(defined, axis=0).astype(jnp.int32)
    aggregate = jnp.sum(sig, axis=0) / jnp.maximum(count, 1).astype(dtype)
    has = count > 0
    t = jnp.arange(1, t_max + 1)
    tf = t.astype(dtype)
    b = breakpoints.astype(jnp.int32)
    bounds_ok = (b[0] >= 1) & jnp.all(b[1:] >= b[:-1]) & (b[2] <= t_max + 1)
    phase = jnp.sum(t[:, None] >= b[None, :], axis=1)  # 0..3
    pos = has & (aggregate > 0)
    log_agg = jnp.log(jnp.where(pos, aggregate, 1))
    coefs, fit, starved = [], jnp.zeros((t_max,), dtype), jnp.asarray(False)
    for p in range(4):
        in_p = phase == p
        usable = in_p & (pos if _EXPONENTIAL[p] else has)
        slope, icpt = _line(tf, log_agg if _EXPONENTIAL[p] else aggregate, usable)
        line = slope * tf + icpt
        fit = jnp.where(in_p, jnp.exp(line) if _EXPONENTIAL[p] else line, fit)
        starved = starved | (jnp.any(in_p) & ~jnp.any(usable))
        coefs.append(jnp.stack([slope, icpt]))
    coef = jnp.stack(coefs)
    step = fit[:-1] - fit[1:]
    delta = jnp.concatenate([step, step[-1:]]) if t_max >= 2 else jnp.zeros((t_max,), dtype)
    real = jnp.any(mask)
    reason = first_reason(
        (~bounds_ok, Reason.BAD_INPUT),
        (~real | ~jnp.any(has) | starved, Reason.EMPTY),
        (~all_finite(sig, aggregate, coef, fit, delta), Reason.NOT_FINITE),
    )
    ok = reason == Reason.OK
    clear = lambda x: jnp.where(ok, x, zero)  # noqa: E731
    return Profile(sig, count, aggregate, b, clear(coef), clear(fit), clear(delta), ok, reason)


def _check_breakpoints(breakpoints, num_epochs: int):
    if breakpoints is None:
        return jnp.asarray(default_breakpoints(num_epochs), jnp.int32)
    b = jnp.asarray(breakpoints) if not isinstance(breakpoints, jax.core.Tracer) else breakpoints
    if not jnp.issubdtype(b.dtype, jnp.integer):
        raise TypeError(f"breakpoints must be integers, got dtype {b.dtype}")
    if b.shape != (3,):
        raise ValueError(f"breakpoints must have shape (3,) (first epochs of phases 2, 3, 4), got {b.shape}")
    if checks.is_concrete(b):
        v = np.asarray(b)
        if v[0] < 1 or np.any(np.diff(v) < 0) or v[2] > num_epochs + 1:
            raise ValueError(f"breakpoints must be non-decreasing in [1, {num_epochs + 1}], got {v.tolist()}")
    return b.astype(jnp.int32)


def delta_sigma_profile(
    curves: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    window: int = 10,
    breakpoints: ArrayLike | None = None,
) -> Profile:
    """``Delta_t sigma`` from fully trained curves: the profile of Appendix C.

    Appendix C of Liu et al. (2024) ("Approximating Delta sigma for Candidates", the
    paper's main method) trains a few sampled candidates to convergence, follows each
    one's uncertainty ``sigma_c(t)`` (Eq. 1: the unbiased std of its last losses) over
    the epochs, and models the aggregate ``sigma(t)`` by phases -- on NAS-Bench-201's
    200 epochs: linear for ``t < 6`` (rising), exponential decay ``a e^{-b t}`` for
    ``6 <= t < 50``, linear for ``50 <= t < 180`` and linear for ``t >= 180``. The
    reduction per extra epoch used by the keep rule (Eq. 6) is then
    ``Delta_t sigma = sigma(t) - sigma(t + 1)``, negative where the model rises.

    Here ``sigma_c(t)`` is :func:`window_std` of ``curves[c]`` at ``epochs = t``
    (``ddof = 1``, the last ``window`` losses or those available), defined where
    candidate ``c`` reached epoch ``t`` (``curves[c, t - 1]`` finite) with at least
    two finite losses in the window; ``sigma(t)`` is the mean over the candidates
    where it is defined. Phase ``p`` holds epochs ``[b_{p-1}, b_p)`` with ``b_0 = 1``,
    ``b_4 = T + 1`` and ``(b_1, b_2, b_3)`` = ``breakpoints``; each phase is fitted by
    least squares to its epochs with a defined ``sigma(t)`` (phase 2 to ``log
    sigma(t)``, over the epochs with ``sigma(t) > 0``). A phase with one usable epoch
    gets the flat line through it; a non-empty phase with none makes the profile fail
    (``ok`` False, ``reason`` EMPTY: too few epochs or candidates; the caller falls
    back to another estimate). Each phase is fitted on its own, as in the paper, so
    ``delta`` jumps at a breakpoint where the fitted pieces do not meet.

    Non-finite losses (e.g. NaN after a curve that ended early) count as not
    observed; ``mask`` marks the real candidates (padded rows may hold anything).
    Jittable and vmappable (``window`` static).

    Args:
        curves: Learning curves of the profiled candidates, shape (m, T), epoch ``t``
            in column ``t - 1``.
        mask: Real candidates, shape (m,) bool (default: all).
        window: Losses in the uncertainty window, a Python int >= 2.
        breakpoints: First epochs of phases 2, 3 and 4, shape (3,) integers,
            non-decreasing in ``[1, T + 1]`` (equal ones give empty phases). Default
            :func:`default_breakpoints` ``(T)``: Appendix C's 6, 50, 180 of 200 scaled
            to ``T``.

    Returns:
        A :class:`Profile`.

    Raises:
        ValueError: on shapes, ``window`` < 2, or (concrete) breakpoints out of order
            or range.
        TypeError: on non-real ``curves`` (float16 / bfloat16 included), a non-boolean
            ``mask`` or non-integer ``breakpoints``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import delta_sigma_profile
        >>> t = jnp.arange(1.0, 41.0)
        >>> curves = jnp.stack([1.0 / t, 1.2 / t, 0.8 / t])
        >>> prof = delta_sigma_profile(curves, window=5)
        >>> bool(prof.ok), prof.delta.shape, prof.breakpoints.tolist()
        (True, (40,), [3, 10, 36])
        >>> bool(prof.delta[20] > 0)   # the spread of the last losses shrinks
        True
    """
    curves = checks.float_array(curves, "curves")
    checks.check_rank(curves, 2, "curves", "with shape (num_candidates, num_epochs)")
    m, t_max = curves.shape
    if m < 1 or t_max < 1:
        raise ValueError(f"curves must hold at least one candidate and one epoch, got shape {curves.shape}")
    mask = checks.mask_array(mask, (m,), "mask")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 2:
        raise ValueError(f"window must be a Python int >= 2, got {window!r}")
    b = _check_breakpoints(breakpoints, t_max)
    return _profile_impl(curves, mask, b, window=int(window))
