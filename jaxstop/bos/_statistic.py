"""The summary statistic of BOS: the running mean of a curve's validation errors.

The one definition of the statistic, used by the backward induction on simulated paths
(:func:`jaxstop.bos._induction.transition_counts`) and, through
:func:`summary_statistic`, by whoever looks a decision up during training (e.g.
:mod:`jaxstop.policies.bo_bos`). Two settings (``statistic=``):

* ``"all_epochs"`` -- Section 3.2 of Dai et al. (2019): after epoch ``n`` the statistic
  is ``sum_{n'=1}^{n} y_{t,n'} / n``, the mean of *every* error observed so far, the
  ``N0`` errors the BOS problem was solved on included (Appendix B: "the average
  validation error up to the current epoch n"). The default of ``mode="corrected"``.
* ``"after_n0"`` -- the released code (``bos_function.run_BOS``: ``St`` is the cumulative
  mean of the simulated errors of epochs ``N0+1..n``; the objective functions look the
  table up with ``np.sum(errors[N0:]) / (epoch - N0)``): the mean of epochs
  ``N0+1..n`` only. The default of ``mode="compat"``.

Both are ``(s0 + acc) / (c0 + k)`` after ``k`` epochs past ``N0``, where ``acc`` sums
those ``k`` errors and ``(s0, c0)`` is the part before them: the sum and number of the
``N0`` observed errors (``"all_epochs"``) or ``(0, 0)`` (``"after_n0"``). Every sum runs
left to right from the first epoch it includes, as the paper's formula is written and
as ``np.cumsum`` computes it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from jaxstop._src import checks
from jaxstop.bos._validate import int32_epoch

STATISTICS = ("all_epochs", "after_n0")


def resolve_statistic(statistic: str | None, mode: str = "corrected") -> str:
    """The summary statistic a solve in ``mode`` uses: ``statistic`` checked, or for
    ``None`` the mode's default (``"all_epochs"`` for ``"corrected"``, the paper's;
    ``"after_n0"`` for ``"compat"``, the released code's).

    Raises:
        ValueError: ``statistic`` is not one of :data:`STATISTICS` or ``None``, or an
            unknown ``mode``.

    Example:
        >>> resolve_statistic(None), resolve_statistic(None, "compat"), resolve_statistic("after_n0")
        ('all_epochs', 'after_n0', 'after_n0')
    """
    if mode not in ("compat", "corrected"):
        raise ValueError(f"mode must be 'compat' or 'corrected', got {mode!r}")
    if statistic is None:
        return "after_n0" if mode == "compat" else "all_epochs"
    if statistic not in STATISTICS:
        raise ValueError(f"statistic must be one of {STATISTICS} (or None: the mode's default), got {statistic!r}")
    return statistic


def left_sum(values, axis: int = -1):
    """Sum along ``axis`` strictly left to right (the order of ``np.cumsum``'s last entry);
    static length, so the loop unrolls into that order."""
    values = jnp.moveaxis(values, axis, 0)
    total = jnp.zeros(values.shape[1:], values.dtype)
    for i in range(values.shape[0]):
        total = total + values[i]
    return total


def prefix_part(prefix, statistic: str):
    """``(s0, c0)``: the sum (left to right) and number of the observed errors of epochs
    ``1..N0`` that the statistic includes (``prefix`` of shape (..., N0))."""
    if statistic == "after_n0":
        return jnp.zeros(prefix.shape[:-1], prefix.dtype), 0
    return left_sum(prefix), prefix.shape[-1]


def running(total, count):
    """The statistic from the running sum ``total = s0 + acc`` and ``count = c0 + k``."""
    return total / jnp.asarray(count).astype(total.dtype)


def summary_statistic(errors: ArrayLike, epoch: ArrayLike, n0: int, *, statistic: str = "all_epochs") -> jax.Array:
    """The BOS summary statistic of an observed curve after ``epoch`` epochs.

    ``"all_epochs"`` (Section 3.2 of Dai et al., 2019, the default of
    ``mode="corrected"``): ``mean(errors[0:epoch])``, the paper's
    ``sum_{n'=1}^{n} y_{t,n'} / n``. ``"after_n0"`` (the released code, the default of
    ``mode="compat"``): ``mean(errors[n0:epoch])``. Look a decision up with the
    statistic the table was solved for: :func:`jaxstop.bos.decide` takes this value.
    The sum runs left to right, as :func:`jaxstop.bos.solve` sums the simulated paths.

    Entries after ``epoch`` are ignored (they may be NaN: not yet observed). Where
    the statistic is undefined (``epoch < 1``, or ``epoch <= n0`` with ``"after_n0"``,
    or ``epoch`` beyond the curve) the result is NaN.

    Args:
        errors: Validation errors of epochs ``1..N``, shape (..., N).
        epoch: Epochs observed (1-based), integer, broadcastable with ``errors.shape[:-1]``.
        n0: ``N0``, the epochs the BOS problem was solved on (static int, ``>= 0``).
        statistic: ``"all_epochs"`` or ``"after_n0"``.

    Returns:
        The statistic, shape ``broadcast(errors.shape[:-1], epoch.shape)``.

    Example:
        >>> import jax.numpy as jnp
        >>> errs = jnp.array([0.5, 0.5, 0.25, 0.25])
        >>> float(summary_statistic(errs, 4, 2)), float(summary_statistic(errs, 4, 2, statistic="after_n0"))
        (0.375, 0.25)
    """
    errors = checks.float_array(errors, "errors")
    if errors.ndim < 1 or errors.shape[-1] < 1:
        raise ValueError(f"errors must have an epochs axis with at least one epoch, got shape {errors.shape}")
    n0 = checks.positive_int(n0, "n0", 0)
    statistic = resolve_statistic(statistic)
    if isinstance(epoch, (str, bytes)):
        raise TypeError(f"epoch must be an integer, got {type(epoch).__name__}")
    try:
        epoch = jnp.asarray(int32_epoch(epoch))
    except (TypeError, ValueError) as err:  # None, a ragged list
        raise TypeError(f"epoch must be an integer, got {type(epoch).__name__}") from err
    if not jnp.issubdtype(epoch.dtype, jnp.integer):
        raise TypeError(f"epoch must be an integer, got dtype {epoch.dtype}")
    try:
        jnp.broadcast_shapes(errors.shape[:-1], epoch.shape)
    except ValueError as err:
        raise ValueError(f"epoch of shape {epoch.shape} must broadcast with errors.shape[:-1] = "
                         f"{errors.shape[:-1]}") from err
    return _summary(errors, epoch, n0=n0, statistic=statistic)


@jax.jit
def _summary_impl(errors, epoch, first):
    N = errors.shape[-1]
    shape = jnp.broadcast_shapes(errors.shape[:-1], epoch.shape)
    errors = jnp.broadcast_to(errors, shape + (N,))
    epoch = jnp.broadcast_to(epoch, shape)
    # out-of-range epochs become 0 before the cast (2**32 + 3 must not wrap to 3)
    epoch = jnp.where((epoch >= 1) & (epoch <= N), epoch, 0).astype(jnp.int32)

    def body(i, total):
        take = (i >= first) & (i < epoch)
        return total + jnp.where(take, errors[..., i], 0)

    total = lax.fori_loop(0, N, body, jnp.zeros(shape, errors.dtype))
    count = epoch - first
    defined = (count >= 1) & (epoch <= N)
    return jnp.where(defined, running(total, jnp.maximum(count, 1)), jnp.nan)


def _summary(errors, epoch, *, n0: int, statistic: str):
    first = jnp.asarray(0 if statistic == "all_epochs" else n0, jnp.int32)
    return _summary_impl(errors, epoch, first)
