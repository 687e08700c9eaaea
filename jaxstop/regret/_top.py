"""The top set the regret bound's GP is fitted on (:func:`top_mask`)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxstop._src import checks as _checks, termination
from jaxstop.regret import _args


def top_mask(y: ArrayLike, mask: ArrayLike | None = None, fraction: float = 0.5, min_points: int = 20) -> jax.Array:
    """The evaluations the regret bound's GP is fitted on: the best ``fraction``.

    ``top = max(min_points, floor(fraction * n))`` of the lowest values among the ``n``
    real entries (all of them when ``n <= min_points``). Makarova et al. (2022, Sec. 4,
    "Selecting the data for the bound estimate", Fig. 2) fit on the top 50% and give no
    minimum; ``min_points = 20`` comes from the authors' code
    (``bin/start_gap_estimation.py``, line 79: ``max(20, int(i * topq))``) and Optuna
    (``DEFAULT_MIN_N_TRIALS``). Ties are broken by position (earlier first), so exactly
    ``top`` entries are selected (Optuna keeps every entry tied with the last one).

    Args:
        y: Values (minimised), shape (n,).
        mask: Which entries are real, shape (n,) bool; default all. Padded entries are
            inert; non-finite values (NaN, inf) count as not real, never selected.
        fraction: ``q`` in (0, 1].
        min_points: Minimum number of points, >= 1.

    Returns:
        Boolean mask of the selected entries, shape (n,).

    Raises:
        TypeError: float16 / bfloat16 ``y``, a ``mask`` that is not bool.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import regret
        >>> regret.top_mask(jnp.array([5.0, 1.0, 4.0, 2.0, 3.0]), fraction=0.5, min_points=2).tolist()
        [False, True, False, True, False]
    """
    y = _checks.float_array(y, "y")
    _checks.check_rank(y, 1, "y")
    mask = _checks.mask_array(mask, y.shape)
    fraction = _args.float_param(fraction, "fraction", high=1.0)
    min_points = _checks.positive_int(min_points, "min_points")
    return _top_mask_jit(y, mask, fraction=fraction, min_points=min_points)


@partial(jax.jit, static_argnames=("fraction", "min_points"))
def _top_mask_jit(y, mask, *, fraction, min_points):
    n = y.shape[0]
    order, sel, _ = termination.top_order(y, mask & jnp.isfinite(y), n, fraction, min_points)
    return jnp.zeros(n, bool).at[order].set(sel)
