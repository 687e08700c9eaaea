"""The lookup of a BOS decision during training (:func:`decide`) in a :class:`DecisionTable`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxstop._src import checks
from jaxstop.bos._backward import backward_induction  # noqa: F401
from jaxstop.bos._induction import ACTION_FORCED_CONTINUE, DecisionTable, bin_index
from jaxstop.bos._statistic import summary_statistic  # noqa: F401
from jaxstop.bos._validate import int32_epoch, screen


def _integral(e):
    return jnp.isfinite(e) & (jnp.floor(e) == e)


def decide(table: DecisionTable, epoch: ArrayLike, running_mean: ArrayLike) -> jax.Array:
    """Look up the decision for a trial after ``epoch`` epochs.

    ``running_mean`` is the summary statistic the table was solved for, on the
    observed errors (:func:`summary_statistic`): the mean of epochs ``1..epoch``
    for ``statistic="all_epochs"`` (the paper's, the default of
    ``mode="corrected"``) or of epochs ``N0+1..epoch`` for ``"after_n0"`` (the
    released code's, the default of ``mode="compat"``). Its bin is the largest ``i`` with
    ``running_mean > edges[i]``; values ``<= 0`` fall in the first bin and
    values ``> 1`` in the last (the code would raise there). Epochs outside
    ``N0+1..N`` give ``ACTION_FORCED_CONTINUE``, and so does a table that is not
    :attr:`DecisionTable.ok` (e.g. solved from a NaN ``best_error`` inside ``jit``):
    a table that cannot be trusted never stops a run. Stop training when the result
    equals ``ACTION_STOP``.

    Invalid numbers: a NaN or inf ``running_mean`` or a non-integral ``epoch``
    raises ``ValueError`` naming it when concrete and gives
    ``ACTION_FORCED_CONTINUE`` inside ``jit``; float16 / bfloat16 raise
    ``TypeError``. ``table`` is one trial's table: for the tables of
    :func:`solve_batch` (a leading trial axis) use
    ``jax.vmap(decide)(tables, epochs, running_means)``; a batched table raises
    ``ValueError``, anything but a :class:`DecisionTable` ``TypeError``.

    Args:
        table: A :class:`DecisionTable` of one trial (``actions`` of shape (T, num_bins)).
        epoch: Current epoch (1-based), integer scalar (or an array of queries).
        running_mean: The statistic (see :func:`summary_statistic`), scalar (or an array
            broadcastable with ``epoch``).

    Returns:
        Action code(s), int32, the broadcast shape of ``epoch`` and ``running_mean``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> values = 0.3 + 0.05 * jax.random.uniform(jax.random.key(0), (500, 5))
        >>> prefix = jnp.full(8, 0.4)  # the observed errors of epochs 1..N0
        >>> table = backward_induction(values, jnp.ones(500, bool), 0.32, 100.0, 99.0, 1.0, prefix=prefix)
        >>> stat = summary_statistic(jnp.append(prefix, 0.31), 9, 8)  # (8 x 0.4 + 0.31) / 9
        >>> int(decide(table, 9, stat)) == int(table.actions[0, 38])  # 0.39 is in (38/99, 39/99]
        True
    """
    if not isinstance(table, DecisionTable):
        raise TypeError(f"table must be a DecisionTable (from solve or backward_induction), got {type(table).__name__}")
    if jnp.ndim(table.actions) != 2:
        raise ValueError(
            f"table must be one trial's DecisionTable (actions of shape (T, num_bins)), got actions of "
            f"shape {jnp.shape(table.actions)}; for a batch of tables use "
            "jax.vmap(decide)(tables, epochs, running_means)"
        )
    T, B = table.actions.shape
    running_mean = checks.float_array(running_mean, "running_mean").astype(table.edges.dtype)
    if isinstance(epoch, (str, bytes)):
        raise TypeError(f"epoch must be an integer, got {type(epoch).__name__}")
    try:
        epoch = jnp.asarray(int32_epoch(epoch))
    except (TypeError, ValueError) as err:
        raise TypeError(f"epoch must be an integer, got {type(epoch).__name__}") from err
    if jnp.issubdtype(epoch.dtype, jnp.floating):
        checks.check_float_dtype(epoch.dtype, "epoch")
    elif not jnp.issubdtype(epoch.dtype, jnp.integer):
        raise TypeError(f"epoch must be an integer, got dtype {epoch.dtype}")
    try:
        epoch, running_mean = jnp.broadcast_arrays(epoch, running_mean)
    except ValueError as err:
        raise ValueError(f"epoch and running_mean must broadcast together, got shapes {jnp.shape(epoch)} "
                         f"and {jnp.shape(running_mean)}") from err
    # Concrete: raises naming the argument. Traced: the same predicates, per query, below.
    screen([("epoch", epoch, _integral, "an integer"), ("running_mean", running_mean, jnp.isfinite, "finite")])
    return _decide(table, epoch, running_mean)


@jax.jit
def _decide(table, epoch, running_mean):
    T, B = table.actions.shape
    bad = ~_integral(epoch) | ~jnp.isfinite(running_mean)
    # the row is found in the epoch's own dtype: an int64 epoch of 2**32 + 9 must not wrap to 9
    first = table.first_epoch.astype(epoch.dtype)  # strong: a weakly typed epoch would follow int32
    in_rows = ~bad & (epoch >= first) & (epoch - first < T)
    row = jnp.where(in_rows, epoch - first, 0).astype(jnp.int32)
    b = bin_index(jnp.where(bad, 0.5, running_mean), B)
    usable = in_rows & table.ok
    action = table.actions[jnp.clip(row, 0, T - 1), b]
    return jnp.where(usable, action, ACTION_FORCED_CONTINUE).astype(jnp.int32)
