"""The ``K_{1,t}`` and ``xi_t`` schedules of BO-BOS (Dai et al., 2019) as traceable kernels.

One copy of each formula, shared by :mod:`jaxstop.bos` (whose :func:`jaxstop.bos.k1_schedule`
and :func:`jaxstop.bos.xi` validate their arguments and call these under ``jit``) and by
:mod:`jaxstop.policies.bo_bos` (which calls them inside its traced steps on the
``params`` pytree). No validation here: the arguments may be tracers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def k1(t, k1_init, gamma) -> jax.Array:
    """``K_{1,t} = k1_init / gamma**(t - 1)`` (Theorem 2), for a floating ``t``."""
    return k1_init / gamma ** (t - 1)


def xi(t, noise_var, delta) -> jax.Array:
    """``xi_t`` of Theorem 1: 0 for ``t <= 1``, else ``sqrt(2 noise_var log(pi^2 t^2 (t - 1) / (6 delta)))``."""
    safe_t = jnp.maximum(t, 2)
    arg = jnp.pi**2 * safe_t**2 * (safe_t - 1) / (6 * delta)
    return jnp.where(t > 1, jnp.sqrt(2 * noise_var * jnp.log(arg)), 0)
