"""The ``K_{1,t}`` and ``xi_t`` schedules of Theorems 1-2 of Dai et al. (2019), validated
(the traceable formulas live in :mod:`jaxstop._src.schedules`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import checks, schedules
from jaxstop.bos._validate import float_dtype


def k1_schedule(t: ArrayLike, k1_init: float = 100.0, gamma: float = 0.95) -> jax.Array:
    """``K_{1,t} = K_{1,t-1} / gamma`` with ``K_{1,1} = k1_init``: ``k1_init / gamma**(t-1)``.

    The increasing sequence of Theorem 2 of Dai et al. (2019), used in their
    experiments with ``K_{1,1} = 100`` and ``gamma`` in {0.89, 0.95, 0.99, 1}
    (Fig. 1; 0.95 is the paper's default, the released code uses 0.99). ``t`` is
    the 1-based BO iteration; the code's 0-based ``bo_iteration`` is ``t - 1``.

    Args:
        t: BO iteration(s), ``>= 1``.
        k1_init: ``K_{1,1}``, positive.
        gamma: Growth factor in (0, 1].

    Returns:
        ``K_{1,t}``, same shape as ``t``.

    Example:
        >>> float(k1_schedule(3, 100.0, 0.5))
        400.0
    """
    if not k1_init > 0:
        raise ValueError(f"k1_init must be positive, got {k1_init}")
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    t = _as_float(t)
    return _k1(t, jnp.asarray(k1_init, t.dtype), jnp.asarray(gamma, t.dtype))


def _as_float(t) -> jax.Array:
    t = jnp.asarray(t)
    return t.astype(float_dtype(t))


_k1 = jax.jit(schedules.k1)
_xi = jax.jit(schedules.xi)


def xi(t: ArrayLike, noise_var: ArrayLike, delta: float) -> jax.Array:
    """``xi_t`` of Theorem 1 / Lemma 7 (Appendix C.3) of Dai et al. (2019).

    ``xi_1 = 0`` and ``xi_t = sqrt(2 sigma^2 log(pi^2 t^2 (t - 1) / (6 delta)))``
    for ``t > 1``, where ``sigma^2`` is the noise variance of the observed final
    validation accuracy (equivalently error) and ``delta`` is the paper's
    ``delta''``. With it, ``y*_{t-1} - xi_t <= f*_{t-1}`` for all ``t`` with
    probability ``>= 1 - delta``. It enters the BOS event as
    ``error < best_error + xi_t`` (:func:`backward_induction`, corrected mode).

    Args:
        t: BO iteration(s), ``>= 1``.
        noise_var: ``sigma^2``, ``>= 0``.
        delta: Confidence parameter in (0, 1).

    Returns:
        ``xi_t``, same shape as ``t``.

    Example:
        >>> float(xi(1, 1e-4, 0.1))
        0.0
    """
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if checks.is_concrete(noise_var) and np.any(np.asarray(noise_var) < 0):
        raise ValueError(f"noise_var must be >= 0, got {noise_var}")
    t = _as_float(t)
    return _xi(t, jnp.asarray(noise_var, t.dtype), jnp.asarray(delta, t.dtype))
