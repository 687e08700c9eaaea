"""Stopping rules along a trace (ours, Conv-i, EI, PI) and the metrics RYC and RTC."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import checks as _checks, termination
from jaxstop.regret import _args


class Stops(NamedTuple):
    """Stopping iterations of every rule, as numbers of evaluations.

    ``stop`` is the number of evaluations made when the rule fires; where a rule never
    fires it is the number of evaluations of the last row (the full budget) and the
    matching ``*_fired`` entry is False.

    Attributes:
        ours: Regret bound below the rule's threshold, one entry per rule, shape (S + V,):
            first the ``ours_scales`` rules (``scale * threshold``), then the
            ``ours_variances`` rules (``sqrt(v * variance)``), see :func:`stop_iterations`.
        conv: Conv-i (incumbent unchanged for ``i`` rows), one per patience, shape (C,).
        ei: Expected improvement below a threshold, one per threshold, shape (E,).
        pi: Probability of improvement below a threshold, shape (P,).
        ours_fired, conv_fired, ei_fired, pi_fired: Whether each rule fired, bool.
    """

    ours: jax.Array
    conv: jax.Array
    ei: jax.Array
    pi: jax.Array
    ours_fired: jax.Array
    conv_fired: jax.Array
    ei_fired: jax.Array
    pi_fired: jax.Array


def _first_row(cond, fallback):
    """First index where ``cond`` (last axis) holds, else ``fallback``; and whether it held."""
    fired = jnp.any(cond, axis=-1)
    return jnp.where(fired, jnp.argmax(cond, axis=-1), fallback).astype(jnp.int32), fired


def _last_row(valid):
    n = valid.shape[0]
    return (n - 1 - jnp.argmax(valid[::-1])).astype(jnp.int32)


def _conv_counts(best, allowed, rtol):
    """Rows since the last improvement of ``best``, counted over ``allowed`` rows only and
    starting at the first of them (which counts as an improvement: count 0)."""
    dt = best.dtype
    inf = jnp.asarray(jnp.inf, dt)
    best = jnp.where(allowed & ~jnp.isnan(best), best, inf)  # padded rows inert; NaN: no improvement
    running = jax.lax.cummin(best)
    before = jnp.concatenate([inf[None], running[:-1]])
    # no value yet (+inf): any real value improves; after -inf nothing can
    level = jnp.where(jnp.isfinite(before), before - rtol * jnp.abs(before), before)
    improved = allowed & (best < level)
    first = allowed & (jnp.cumsum(allowed) == 1)
    pos = jnp.cumsum(allowed).astype(jnp.int32)
    last = jax.lax.cummax(jnp.where(improved | first, pos, 0))
    return pos - last


def convergence_stop(
    best_so_far: ArrayLike,
    patience: int | ArrayLike,
    *,
    start: int = 0,
    mask: ArrayLike | None = None,
    rtol: float = 0.0,
) -> tuple[jax.Array, jax.Array]:
    """Conv-i baseline: stop once the incumbent has not improved for ``patience`` rows.

    Counting starts at row ``start`` (which counts as an improvement, count 0); each
    later real row either improves on the best value seen since ``start`` (strictly, by
    more than ``rtol`` relative) and resets the count, or adds one. The rule fires at
    the first row whose count equals ``patience``. This is the rule of the authors'
    code with ``start = 20`` (Makarova et al., 2022, Sec. 4: "Conv-i").

    Args:
        best_so_far: Incumbent value after each row, shape (T,).
        patience: ``i``, a positive int or an int array of shape (C,).
        start: First row that may count (and stop).
        mask: Which rows are real, shape (T,) bool; default all.
        rtol: Relative tolerance of an improvement (0: any strict decrease).

    Returns:
        ``(stop, fired)``: the row at which the rule fires (the last real row if it never
        does) and whether it fired; int32 / bool, shape () or (C,).

    Padded rows (``mask`` False) are inert. A NaN on a real row raises ``ValueError``
    naming ``best_so_far`` (concrete input); traced, it counts as a row without
    improvement. ``+inf`` (no incumbent yet) is a value. float16 / bfloat16 raise
    ``TypeError``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import regret
        >>> best = jnp.array([5.0, 4.0, 4.0, 4.0, 3.0, 3.0, 3.0, 3.0])
        >>> stop, fired = regret.convergence_stop(best, 3)
        >>> int(stop), bool(fired)
        (7, True)
    """
    best = _checks.float_array(best_so_far, "best_so_far")
    _checks.check_rank(best, 1, "best_so_far", "with shape (T,)")
    _args.rows(best, "best_so_far")
    mask = _checks.mask_array(mask, best.shape)
    _args.no_nan_where(best, mask, "best_so_far")
    try:
        patience = jnp.asarray(patience)
    except (TypeError, ValueError) as err:  # None, a string, a ragged list
        raise TypeError(f"patience must be an int or a 1-D int array, got {type(patience).__name__}") from err
    if not jnp.issubdtype(patience.dtype, jnp.integer) or patience.ndim > 1:
        raise TypeError(f"patience must be an int or a 1-D int array, got {patience.dtype} of shape {patience.shape}")
    if _checks.is_concrete(patience) and np.any(np.asarray(patience) < 1):
        raise ValueError(f"patience must be >= 1, got {patience}")
    start = _args.nonneg_int(start, "start")
    rtol = _args.rtol(rtol, "rtol")
    return _convergence_stop_jit(best, patience.astype(jnp.int32), mask, start, rtol)


@jax.jit
def _convergence_stop_jit(best, patience, mask, start, rtol):
    allowed = mask & (jnp.arange(best.shape[0]) >= start)
    count = _conv_counts(best, allowed, rtol)
    lead = (1,) * patience.ndim
    cond = allowed.reshape(lead + allowed.shape) & (count.reshape(lead + count.shape) == patience[..., None])
    return _first_row(cond, _last_row(mask))


def stop_rules(bound, threshold, std, best, num_eval, valid, ei, pi, ours_scales, ours_variances, conv_patience,
               ei_thr, pi_thr, *, min_evaluations: int, fixed_threshold: bool, conv_rtol):
    allowed = valid & (num_eval >= min_evaluations)
    last = _last_row(valid)
    first = jnp.argmax(allowed)
    if fixed_threshold:
        threshold = jnp.broadcast_to(threshold[first], threshold.shape)
        std = jnp.broadcast_to(std[first], std.shape)

    def stops(cond):
        row, fired = _first_row(cond & allowed[None, :], last)
        return num_eval[row], fired

    # One rule per scale, then one per variance factor (the other factor 0).
    dt = threshold.dtype
    n_s, n_v = ours_scales.shape[0], ours_variances.shape[0]
    scale = jnp.concatenate([ours_scales, jnp.zeros((n_v,), dt)])
    factor = jnp.concatenate([jnp.zeros((n_s,), dt), ours_variances])
    rule_thr = termination.scaled_threshold(threshold[None, :], std[None, :], scale[:, None], factor[:, None])
    ours, ours_f = stops(bound[None, :] < rule_thr)
    count = _conv_counts(best, allowed, conv_rtol)
    conv, conv_f = stops(count[None, :] == conv_patience[:, None])
    if ei is None:
        ei_s, ei_f = jnp.zeros((0,), jnp.int32), jnp.zeros((0,), bool)
    else:
        ei_s, ei_f = stops(ei[None, :] < ei_thr[:, None])
    if pi is None:
        pi_s, pi_f = jnp.zeros((0,), jnp.int32), jnp.zeros((0,), bool)
    else:
        pi_s, pi_f = stops(pi[None, :] < pi_thr[:, None])
    return Stops(ours, conv, ei_s, pi_s, ours_f, conv_f, ei_f, pi_f)


DEFAULT_SCALES = (1.0, 0.5 / 0.21)
"""``ours_scales`` of the authors' code: ``Ours_0.21`` and ``Ours_0.5`` as ``c / 0.21`` times
the Nadeau-Bengio standard deviation (``src/stop_methods.py``, line 17)."""


DEFAULT_PATIENCE = (10, 30, 50)


DEFAULT_ACQ = (1e-8,)


def rule_arrays(ours_scales, ours_variances, conv_patience, ei_thresholds, pi_thresholds, dt):
    scales = _checks.float_array(ours_scales, "ours_scales", dt)
    _checks.check_rank(scales, 1, "ours_scales", "(one scale per rule)")
    variances = _checks.float_array(ours_variances, "ours_variances", dt)
    _checks.check_rank(variances, 1, "ours_variances", "(one variance factor per rule)")
    for name, a in (("ours_scales", scales), ("ours_variances", variances)):
        if _checks.is_concrete(a) and not np.all(np.isfinite(np.asarray(a)) & (np.asarray(a) >= 0)):
            raise ValueError(f"{name} must be finite and >= 0, got {np.asarray(a).tolist()}")
    patience = jnp.asarray(conv_patience)
    if patience.shape == (0,):  # no Conv-i rule (an empty sequence has no integer dtype of its own)
        patience = jnp.zeros((0,), jnp.int32)
    if patience.ndim != 1 or not jnp.issubdtype(patience.dtype, jnp.integer):
        raise TypeError(f"conv_patience must be a 1-D sequence of ints, got {patience.dtype} of shape {patience.shape}")
    if _checks.is_concrete(patience) and np.any(np.asarray(patience) < 1):
        raise ValueError(f"conv_patience must be >= 1, got {patience}")
    ei_t = _checks.float_array(ei_thresholds, "ei_thresholds", dt)
    pi_t = _checks.float_array(pi_thresholds, "pi_thresholds", dt)
    _checks.check_rank(ei_t, 1, "ei_thresholds")
    _checks.check_rank(pi_t, 1, "pi_thresholds")
    for name, a in (("ei_thresholds", ei_t), ("pi_thresholds", pi_t)):
        if _checks.is_concrete(a) and not np.all(np.isfinite(np.asarray(a)) & (np.asarray(a) >= 0)):
            raise ValueError(f"{name} must be finite and >= 0, got {np.asarray(a).tolist()}")
    return scales, variances, patience.astype(jnp.int32), ei_t, pi_t


def stop_iterations(
    bound: ArrayLike,
    threshold: ArrayLike,
    best_so_far: ArrayLike,
    num_evaluations: ArrayLike,
    *,
    ei: ArrayLike | None = None,
    pi: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    min_evaluations: int = 20,
    ours_scales=DEFAULT_SCALES,
    fixed_threshold: bool = False,
    conv_patience=DEFAULT_PATIENCE,
    ei_thresholds=DEFAULT_ACQ,
    pi_thresholds=DEFAULT_ACQ,
    conv_rtol: float = 0.0,
    variance: ArrayLike | None = None,
    ours_variances=(),
) -> Stops:
    """Stopping iteration of every rule of Makarova et al. (2022) along a trace.

    Row ``t`` describes the search after ``num_evaluations[t]`` evaluations. A rule
    may fire only on real rows with at least ``min_evaluations`` evaluations (Sec. 4.1:
    "the termination is triggered only after the first 20 iterations"):

    * ours (Eq. 10), two forms of the rule's threshold, every rule of either form one
      entry of ``Stops.ours`` (the ``ours_scales`` rules first):

      - ``bound[t] < scale * threshold[t]`` for each of ``ours_scales``: a multiple of
        the standard deviation of Eq. (9). ``scale = 1`` with the Nadeau-Bengio
        threshold is the paper's ``Ours_0.21`` (Eq. 9 itself); ``scale = c / 0.21`` is
        the authors' code's ``Ours_c`` (``src/stop_methods.py``, line 17), the default
        ``(1, 0.5 / 0.21)``.
      - ``bound[t] < sqrt(v * variance[t])`` for each ``v`` of ``ours_variances``, with
        ``variance`` the fold variance ``s^2`` behind ``threshold``: the threshold of the
        paper's text, Sec. 4.1 ("empirical scaling 0.5 s^2": ``Ours_0.5`` is ``v = 0.5``).
        For k folds and the ratio ``r`` of Eq. (9) this is ``sqrt(v / (1/k + r))`` times
        the Eq. (9) threshold: ``sqrt(0.5 / 0.2111) = 1.54`` for k = 10, where the code
        multiplies by ``0.5 / 0.21 = 2.38``.

      With ``fixed_threshold`` the threshold (and variance) of the first row that may
      stop is used throughout, as in the authors' code (``src/stop_methods.py``, lines
      16-17); otherwise each row's own (Algorithm 1, lines 9-12: the incumbent's).
    * Conv-i: :func:`convergence_stop` counted from the first row that may stop.
    * EI / PI: ``ei[t] < threshold`` (resp. ``pi``).

    Args:
        bound: Regret bound per row, shape (T,).
        threshold: Stopping threshold per row (e.g. :func:`cv_threshold` of the
            incumbent), shape (T,).
        best_so_far: Incumbent value per row, shape (T,).
        num_evaluations: Evaluations behind each row, shape (T,) int.
        ei: Expected improvement per row, shape (T,); ``None`` skips the EI rules.
        pi: Probability of improvement per row, shape (T,); ``None`` skips the PI rules.
        mask: Which rows are real, shape (T,) bool; default all.
        min_evaluations: No rule fires with fewer evaluations.
        ours_scales: Multipliers of ``threshold``, shape (S,), finite and >= 0.
        fixed_threshold: Freeze the threshold at the first row that may stop.
        conv_patience: Patiences ``i`` of Conv-i, shape (C,) ints.
        ei_thresholds: Thresholds of the EI rule, shape (E,).
        pi_thresholds: Thresholds of the PI rule, shape (P,).
        conv_rtol: Relative tolerance of an improvement in Conv-i.
        variance: Fold variance ``s^2`` of the incumbent per row, shape (T,) (e.g.
            :attr:`ReplayResult.variance`); required when ``ours_variances`` is not empty.
        ours_variances: Variance factors ``v`` of the ``sqrt(v s^2)`` rules, shape (V,),
            finite and >= 0; default none.

    Returns:
        :class:`Stops`, as numbers of evaluations.

    Padded rows (``mask`` False) are inert. A NaN on a real row of ``bound``,
    ``threshold``, ``variance``, ``best_so_far``, ``ei`` or ``pi`` raises ``ValueError``
    naming it (concrete input); traced, a NaN never satisfies a rule (``bound < NaN`` is
    False; for Conv-i the row does not improve). ``+inf`` is a value (a bound not
    computed). float16 / bfloat16 raise ``TypeError``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import regret
        >>> n = jnp.arange(1, 31)
        >>> bound = 1.0 / n                       # falls below 0.04 after 25 evaluations
        >>> s = regret.stop_iterations(bound, jnp.full(30, 0.04), jnp.ones(30), n,
        ...                            ours_scales=(1.0,), conv_patience=(5,),
        ...                            variance=jnp.full(30, 0.00405), ours_variances=(0.5,))
        >>> s.ours.tolist(), s.conv.tolist()        # sqrt(0.5 * 0.00405) = 0.045
        ([26, 23], [25])
    """
    bound = _checks.float_array(bound, "bound")
    _checks.check_rank(bound, 1, "bound", "with shape (T,)")
    _args.rows(bound, "bound")
    dt = bound.dtype
    shape = bound.shape
    arrays = {"threshold": threshold, "best_so_far": best_so_far}
    for name, a in (("ei", ei), ("pi", pi), ("variance", variance)):
        if a is not None:
            arrays[name] = a
    conv = {}
    for name, a in arrays.items():
        a = _checks.float_array(a, name, dt)
        if a.shape != shape:
            raise ValueError(f"{name} must have shape {shape} like bound, got {a.shape}")
        conv[name] = a
    num_evaluations = jnp.asarray(num_evaluations)
    if num_evaluations.shape != shape or not jnp.issubdtype(num_evaluations.dtype, jnp.integer):
        raise ValueError(f"num_evaluations must be ints of shape {shape}, got {num_evaluations.dtype} {num_evaluations.shape}")
    mask = _checks.mask_array(mask, shape)
    _args.no_nan_where(bound, mask, "bound")
    for name, a in conv.items():
        _args.no_nan_where(a, mask, name)
    if "variance" in conv and _checks.is_concrete(conv["variance"], mask):
        negative = np.asarray(mask) & (np.asarray(conv["variance"]) < 0)
        if negative.any():
            shown = np.asarray(conv["variance"])[negative][:5].tolist()
            raise ValueError(f"variance must be >= 0 (a fold variance s^2), got {shown}")
    min_evaluations = _args.nonneg_int(min_evaluations, "min_evaluations")
    conv_rtol = _args.rtol(conv_rtol, "conv_rtol")
    scales, variances, patience, ei_t, pi_t = rule_arrays(ours_scales, ours_variances, conv_patience, ei_thresholds,
                                                          pi_thresholds, dt)
    if variances.shape[0] and variance is None:
        raise ValueError("ours_variances needs variance, the fold variance s^2 of the incumbent per row")
    std = jnp.sqrt(conv.get("variance", jnp.zeros(shape, dt)))  # the rules take s
    return _stop_rules_jit(bound, conv["threshold"], std, conv["best_so_far"], num_evaluations.astype(jnp.int32),
                           mask, conv.get("ei"), conv.get("pi"), scales, variances, patience, ei_t, pi_t,
                           jnp.asarray(conv_rtol, dt), min_evaluations=min_evaluations,
                           fixed_threshold=bool(fixed_threshold))


@partial(jax.jit, static_argnames=("min_evaluations", "fixed_threshold"))
def _stop_rules_jit(bound, threshold, std, best, num_eval, valid, ei, pi, scales, variances, patience, ei_t,
                    pi_t, rtol, *, min_evaluations, fixed_threshold):
    return stop_rules(bound, threshold, std, best, num_eval, valid, ei, pi, scales, variances, patience, ei_t,
                      pi_t, min_evaluations=min_evaluations, fixed_threshold=fixed_threshold, conv_rtol=rtol)


def _broadcastable(a, b, name_a: str, name_b: str) -> None:
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{name_a} and {name_b} must have broadcastable shapes, got {a.shape} and {b.shape}") from None


def ryc(y_final: ArrayLike, y_stop: ArrayLike) -> jax.Array:
    """Relative test-error change, Eq. (11): ``(y_T - y_es) / max(y_T, y_es)``.

    Positive when stopping early gave a better (lower) test error than running to the
    end. Assumes positive errors, as the paper's metrics are.

    Example:
        >>> from jaxstop import regret
        >>> round(float(regret.ryc(0.20, 0.25)), 6)
        -0.2
    """
    y_final = _checks.float_array(y_final, "y_final")
    y_stop = _checks.float_array(y_stop, "y_stop")
    _broadcastable(y_final, y_stop, "y_final", "y_stop")
    return (y_final - y_stop) / jnp.maximum(y_final, y_stop)


def rtc(t_final: ArrayLike, t_stop: ArrayLike) -> jax.Array:
    """Relative time change, Eq. (12): ``(t_T - t_es) / t_T`` (time or iterations saved).

    Example:
        >>> from jaxstop import regret
        >>> float(regret.rtc(200, 50))
        0.75
    """
    t_final = _checks.float_array(t_final, "t_final")
    t_stop = _checks.float_array(t_stop, "t_stop")
    _broadcastable(t_final, t_stop, "t_final", "t_stop")
    return (t_final - t_stop) / t_final
