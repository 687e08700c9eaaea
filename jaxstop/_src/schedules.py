"""The ``K_{1,t}`` and ``xi_t`` schedules of BO-BOS (Dai et al., 2019) as traceable kernels.

One copy of each formula and of its domain, shared by :mod:`jaxstop.bos` (whose
:func:`jaxstop.bos.k1_schedule` and :func:`jaxstop.bos.xi` raise for concrete arguments
outside the domain and call these under ``jit``) and by :mod:`jaxstop.policies.bo_bos`
(which calls them inside its traced steps on the ``params`` pytree). No validation
here: the arguments may be tracers. Outside the domain the result is NaN (a NaN ``K1``
or ``xi`` makes :func:`jaxstop.bos.solve` return a table with ``ok=False``).

The domain of each schedule is a table ``{argument: predicate}`` (:data:`K1_DOMAIN`,
:data:`XI_DOMAIN`): the public wrappers name the first argument whose concrete value
fails its predicate, and the kernels mask the result with the same predicates.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _iteration(t):
    """A BO iteration is a whole number, 1-based (Theorems 1-2 start at ``t = 1``): finite,
    whole and ``>= 1`` (``xi`` of a fractional ``t`` near 1 has no real value)."""
    return jnp.isfinite(t) & (t >= 1) & (t == jnp.floor(t))


K1_DOMAIN = {
    "t": _iteration,
    "k1_init": lambda v: jnp.isfinite(v) & (v > 0),
    "gamma": lambda v: (v > 0) & (v <= 1),
}
"""``k1``'s arguments and what each must satisfy (elementwise, traceable)."""

XI_DOMAIN = {
    "t": _iteration,
    "noise_var": lambda v: jnp.isfinite(v) & (v >= 0),
    "delta": lambda v: (v > 0) & (v < 1),
}
"""``xi``'s arguments and what each must satisfy (elementwise, traceable)."""


def _in_domain(domain, **args) -> jax.Array:
    ok = jnp.asarray(True)
    for name, pred in domain.items():
        ok = ok & pred(args[name])
    return ok


def k1(t, k1_init, gamma) -> jax.Array:
    """``K_{1,t} = k1_init / gamma**(t - 1)`` (Theorem 2), for a floating ``t``.

    NaN where an argument is outside :data:`K1_DOMAIN` (``t < 1``, a fractional or non-finite ``t`` or
    ``k1_init``, ``k1_init <= 0``, ``gamma`` outside (0, 1]).
    """
    value = k1_init / gamma ** (t - 1)
    return jnp.where(_in_domain(K1_DOMAIN, t=t, k1_init=k1_init, gamma=gamma), value, jnp.nan)


def xi(t, noise_var, delta) -> jax.Array:
    """``xi_t`` of Theorem 1: 0 for ``t = 1``, else ``sqrt(2 noise_var log(pi^2 t^2 (t - 1) / (6 delta)))``.

    NaN where an argument is outside :data:`XI_DOMAIN` (``t < 1``, a fractional or non-finite ``t`` or
    ``noise_var``, ``noise_var < 0``, ``delta`` outside (0, 1)).
    """
    safe_t = jnp.maximum(t, 2)
    # the logarithm as a sum and the root of each factor: pi^2 t^2 (t - 1) and
    # 2 noise_var log(...) overflow float32 for finite inputs whose xi it represents
    log_arg = jnp.log(jnp.pi**2 / (6 * delta)) + 2 * jnp.log(safe_t) + jnp.log(safe_t - 1)
    value = jnp.where(t > 1, jnp.sqrt(noise_var) * jnp.sqrt(2 * log_arg), 0)
    return jnp.where(_in_domain(XI_DOMAIN, t=t, noise_var=noise_var, delta=delta), value, jnp.nan)
