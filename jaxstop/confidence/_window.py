"""The on-the-fly uncertainty of Eq. (1) and its per-epoch change (Appendix C):
:func:`window_std` and :func:`window_delta_sigma`."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxstop._src.numerics import masked_std
from jaxstop.confidence._validate import prepare_window

_DELTA_KINDS = ("std", "variance")


def _window_stats(losses, epochs, window: int, ddof: int):
    """Std and count of the finite losses in losses[i, epochs[i]-window : epochs[i]]."""
    t = losses.shape[1]
    e = jnp.clip(epochs, 0, t)
    idx = e[:, None] - window + jnp.arange(window)[None, :]
    inside = idx >= 0
    vals = jnp.take_along_axis(losses, jnp.clip(idx, 0, t - 1), axis=1)
    std, cnt = masked_std(vals, inside & jnp.isfinite(vals), ddof)
    return std, cnt > ddof


@functools.partial(jax.jit, static_argnames=("window", "ddof"))
def _window_std_impl(losses, epochs, window, ddof):
    return _window_stats(losses, epochs, window, ddof)[0]


@functools.partial(jax.jit, static_argnames=("window", "ddof", "kind"))
def _window_delta_impl(losses, epochs, window, ddof, kind):
    s_now, ok_now = _window_stats(losses, epochs, window, ddof)
    s_prev, ok_prev = _window_stats(losses, epochs - 1, window, ddof)
    if kind == "std":
        d = s_prev - s_now
    else:
        d = s_prev * s_prev - s_now * s_now
    return jnp.where(ok_now & ok_prev & (epochs >= 1), d, jnp.zeros_like(d))


def window_std(
    losses: ArrayLike, epochs: ArrayLike, window: int = 10, *, ddof: int = 1
) -> jax.Array:
    """Uncertainty of each candidate from its recent losses (Eq. 1 of Liu et al., 2024).

    Candidate ``i`` has observed ``losses[i, :epochs[i]]`` (one per unit of
    budget, oldest first; later columns are padding and ignored). Its
    uncertainty is the standard deviation of the last ``window`` observed losses,
    ``losses[i, max(0, epochs[i] - window) : epochs[i]]``, with ``ddof = 1``
    (the "unbiased estimation" of Appendix C) by default. Eq. (1) divides by
    ``delta`` a sum over ``D_t = [t - delta, t]``, i.e. ``delta + 1`` losses with
    ``ddof = 1``: ``window=11`` reproduces the paper's ``delta = 10`` literally,
    ``window=10`` (the default) is the common reading "std of the last 10".
    Fewer than ``window`` losses use those available; non-finite losses are
    left out of the window statistics. Where at most ``ddof`` losses are
    available the result is 0 -- not a valid ``sigma`` for :func:`prob_best`,
    so such candidates raise (eager) or are masked (jit) downstream. NaN / inf
    losses, and the padding beyond ``epochs``, never enter the arithmetic; the
    result is finite for finite window values whose standard deviation is within the
    dtype's range (float32 losses alternating ``+-3e38`` have a std of ``3.5e38``, which
    is ``inf``; :func:`window_delta_sigma` is then ``inf`` or NaN). float16 / bfloat16
    losses raise ``TypeError`` naming the argument.

    Args:
        losses: Loss curves, shape (n, max_epochs).
        epochs: Observed epochs per candidate, shape (n,), integer in
            ``[0, max_epochs]`` (clipped inside ``jax.jit``).
        window: Number of trailing losses, a Python int >= 1.
        ddof: Delta degrees of freedom, a Python int in ``[0, window)``.

    Returns:
        Standard deviations, shape (n,).

    Raises:
        ValueError: on shapes, ``window`` / ``ddof`` out of range, or (concrete
            inputs) ``epochs`` outside ``[0, max_epochs]``.
        TypeError: on non-real ``losses`` (float16 / bfloat16 included) or
            non-integer ``epochs``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import window_std
        >>> losses = jnp.array([[5.0, 1.0, 2.0, 3.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0]])
        >>> window_std(losses, jnp.array([4, 2]), window=3).tolist()
        [1.0, 0.0]
    """
    losses, ep, window, ddof = prepare_window(losses, epochs, window, ddof)
    return _window_std_impl(losses, ep, window=window, ddof=ddof)


def window_delta_sigma(
    losses: ArrayLike,
    epochs: ArrayLike,
    window: int = 10,
    *,
    ddof: int = 1,
    kind: str = "std",
) -> jax.Array:
    """Per-epoch reduction of the uncertainty from two consecutive windows (Appendix C).

    Appendix C of Liu et al. (2024) estimates ``Delta_t sigma`` -- how much one
    more unit of training lowers ``sigma`` (Eq. 6) -- from the difference of
    the windowed statistic one step ago and now: ``s_{t-1} - s_t`` where ``s_t``
    is :func:`window_std` at ``epochs`` and ``s_{t-1}`` at ``epochs - 1``.
    Positive when the uncertainty is falling.

    The appendix writes this alternative as a difference of windowed
    *variances*, while its main definition is ``Delta_t sigma = sigma(t) -
    sigma(t + 1)``, a difference of standard deviations that is then subtracted
    from ``sigma`` in Eq. (6). ``kind="std"`` (default) follows the definition
    and keeps the units of ``sigma``; ``kind="variance"`` returns the literal
    ``s_{t-1}^2 - s_t^2``. Bad values, padding and dtypes as in :func:`window_std`.

    Args:
        losses: Loss curves, shape (n, max_epochs).
        epochs: Observed epochs per candidate, shape (n,), integer.
        window: Number of trailing losses, a Python int >= 1.
        ddof: Delta degrees of freedom, a Python int in ``[0, window)``.
        kind: ``"std"`` or ``"variance"``.

    Returns:
        ``delta_sigma``, shape (n,); 0 where either window holds at most ``ddof``
        losses.

    Raises:
        ValueError, TypeError: as :func:`window_std`, and on an unknown ``kind``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import window_delta_sigma
        >>> losses = jnp.array([[4.0, 0.0, 2.0, 2.0]])
        >>> window_delta_sigma(losses, jnp.array([4]), window=2, ddof=0).tolist()
        [1.0]
    """
    if kind not in _DELTA_KINDS:
        raise ValueError(f"kind must be one of {_DELTA_KINDS}, got {kind!r}")
    losses, ep, window, ddof = prepare_window(losses, epochs, window, ddof)
    return _window_delta_impl(losses, ep, window=window, ddof=ddof, kind=kind)
