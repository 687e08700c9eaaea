"""The stopping threshold of Eq. (9)-(10) from k-fold CV scores (:func:`cv_threshold`)."""

from __future__ import annotations

import jax
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import checks as _checks, termination
from jaxstop.regret import _args


def cv_threshold(
    fold_scores: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    test_train_ratio: float | None = None,
    ddof: int = 0,
) -> jax.Array:
    """Stopping threshold from k-fold CV scores, Eq. (9)-(10) of Makarova et al. (2022).

    ``sqrt((1/k + n_test/n_train) * s^2)``: the standard deviation of the CV estimate
    with the correction of Nadeau and Bengio (2003); for k-fold CV
    ``n_test/n_train = 1/(k-1)`` (0.21 s^2 for k = 10). ``s^2`` is the variance of the
    k fold scores with ``1 / (k - ddof)``: ``ddof = 0`` (the default) is the paper's
    ``s_cv^2 = (1/k) sum_i (y_t - y_t^i)^2`` (Algorithm 1, line 11), also the authors'
    code (``np.std``, ``bin/start_gap_estimation.py``, line 102) and Optuna
    (``np.var``, ``optuna/terminator/erroreval.py``); ``ddof = 1`` is the unbiased
    sample variance.

    The paper's other threshold, ``sqrt(0.5 s^2)`` (Sec. 4.1, ``Ours_0.5``), is
    ``cv_threshold(...) * sqrt(0.5 / (1/k + n_test/n_train))`` (see
    :func:`stop_iterations`'s ``ours_variances``).

    Args:
        fold_scores: Fold scores, shape (..., k); the last axis holds the folds.
        mask: Which folds are real, same shape, bool; default all. ``k`` counts the
            real folds; padded folds are inert (whatever they hold, NaN included,
            changes nothing).
        test_train_ratio: ``|D_i| / |D_-i|``; default ``1/(k-1)``.
        ddof: Delta degrees of freedom of ``s^2`` (0, the paper's, or 1).

    Returns:
        Threshold, shape (...). Where fewer than 2 folds are real (or ``k <= ddof``)
        it is 0, so a rule ``bound < threshold`` never fires; with concrete input that
        case raises instead. Where a real fold score is not finite (traced input: inside
        ``jit`` / ``vmap``) or the threshold itself overflows the dtype, it is NaN: the
        data define no threshold, and ``bound < NaN`` never fires either. ``jnp.isfinite``
        of the result is its status. The sums run on the folds scaled by a power of two
        (exact), so folds whose squares overflow or underflow the dtype (spreads beyond
        about 1e19 or below 1e-19 in float32) get their threshold, which scales with them.

    Raises:
        ValueError: Fewer than 2 folds, non-finite real scores (concrete input; the
            message names ``fold_scores``), or bad options.
        TypeError: float16 / bfloat16 ``fold_scores``, a ``mask`` that is not bool.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import regret
        >>> s = jnp.array([0.1, 0.2, 0.3, 0.4])           # s^2 = (1/4) sum (s - 0.25)^2 = 1/80
        >>> round(float(regret.cv_threshold(s)), 6)      # sqrt((1/4 + 1/3) / 80)
        0.085391
    """
    fold_scores = _checks.float_array(fold_scores, "fold_scores")
    if fold_scores.ndim < 1:
        raise ValueError(f"fold_scores must have a fold axis (shape (..., k)), got shape {fold_scores.shape}")
    if fold_scores.shape[-1] < 2:
        raise ValueError(f"fold_scores must have at least 2 folds on its last axis, got shape {fold_scores.shape}")
    mask = _checks.mask_array(mask, fold_scores.shape)
    if isinstance(ddof, bool) or ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof!r}")
    if test_train_ratio is not None:
        test_train_ratio = _args.float_param(test_train_ratio, "test_train_ratio", low=-1e-300)
    _checks.check_finite_where(fold_scores, mask, "fold_scores")
    if _checks.is_concrete(mask):
        k = np.asarray(mask).sum(-1)
        if np.any(k < 2):
            raise ValueError("fold_scores must have at least 2 real folds per entry (mask), "
                             f"got {int(k.min())}")
    return termination.cv_threshold(fold_scores, mask, test_train_ratio, ddof)
