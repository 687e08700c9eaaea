"""Optimiser loops shared by jaxstop's GP fits: several starts (:func:`multistart`) and a
projected first-order loop that keeps the best iterate (:func:`projected_first_order`).

The Matérn GP of :mod:`jaxstop._src.gp_fit` runs its profiled BFGS (or a plain optax
loop) from each start; the learning-curve GP of :mod:`jaxstop.bos` runs
:func:`projected_first_order` with Adam from a fixed grid of starts. Both pick the best
start with :func:`multistart`. Everything is traceable and ``vmap``-safe.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from jax import lax

__all__ = ["multistart", "projected_first_order"]


def multistart(run: Callable, starts, *, max_value: float = float("inf"), fallback=None):
    """Runs ``run`` from every start (``vmap``) and keeps the best usable result.

    Args:
        run: ``start -> (params, value, aux)`` with ``value`` the scalar objective
            (smaller is better); ``aux`` any pytree (``None`` for none).
        starts: Pytree of starts with a leading (num_starts,) axis.
        max_value: A start is usable when its ``params`` are finite and its ``value``
            is finite and below ``max_value`` (e.g. a caller's "failed" sentinel).
        fallback: Pytree like ``params`` with a leading axis: when no start is usable,
            ``fallback[0]`` is returned as ``params`` (default: the first start's result).

    Returns:
        ``(params, value, aux, index, any_usable)`` of the winning start (the first
        one among equal values); ``index`` int (start 0 when none is usable).
    """
    ps, values, aux = jax.vmap(run)(starts)
    leaves = jax.tree_util.tree_leaves(ps)
    finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a), axis=tuple(range(1, a.ndim))) for a in leaves]), axis=0)
    usable = finite & jnp.isfinite(values) & (values < max_value)
    best = jnp.argmin(jnp.where(usable, values, jnp.inf))
    any_usable = jnp.any(usable)
    if fallback is None:
        params = jax.tree_util.tree_map(lambda a: a[best], ps)
    else:
        params = jax.tree_util.tree_map(lambda a, s: jnp.where(any_usable, a[best], s[0]), ps, fallback)
    best = jnp.where(any_usable, best, 0)
    return params, values[best], jax.tree_util.tree_map(lambda a: a[best], aux), best, any_usable


def projected_first_order(value_and_grad: Callable, optimizer: optax.GradientTransformation, u0, lo, hi, *,
                          num_steps: int):
    """``num_steps`` steps of an optax optimiser projected onto the box ``[lo, hi]``.

    A step whose value or gradient is not finite is skipped (the iterate stays, the
    optimiser sees a zero gradient). The best iterate seen wins, the last one included;
    a start that never gives a finite value comes back with the largest finite value of
    the dtype.

    Args:
        value_and_grad: ``u -> (value, grad)`` of the objective to minimise.
        optimizer: An optax transformation (e.g. ``optax.adam(0.1)``).
        u0: Start, shape (p,), inside the box.
        lo, hi: Box bounds, shape (p,).
        num_steps: Number of steps (static).

    Returns:
        ``(u, value)`` of the best iterate.
    """
    big = jnp.asarray(jnp.finfo(u0.dtype).max, u0.dtype)

    def step(carry, _):
        u, state, best_u, best_v = carry
        v, g = value_and_grad(u)
        ok = jnp.isfinite(v) & jnp.all(jnp.isfinite(g))
        better = ok & (v < best_v)
        best_u = jnp.where(better, u, best_u)
        best_v = jnp.where(better, v, best_v)
        updates, new_state = optimizer.update(jnp.where(ok, g, 0), state, u)
        new_u = jnp.clip(optax.apply_updates(u, updates), lo, hi)
        u = jnp.where(ok, new_u, u)
        return (u, new_state, best_u, best_v), None

    init = (u0, optimizer.init(u0), u0, big)
    (u, _, best_u, best_v), _ = lax.scan(step, init, None, length=num_steps)
    v, _ = value_and_grad(u)
    last_better = jnp.isfinite(v) & (v < best_v)
    return jnp.where(last_better, u, best_u), jnp.where(last_better, v, best_v)
