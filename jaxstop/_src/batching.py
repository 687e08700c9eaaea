"""Batching of per-study kernels that is fast on CPU.

``jax.vmap`` of a whole GP fit runs every study of the batch in lockstep, one operation
at a time over all of them: on CPU each operation then streams a batch of ``m x m``
matrices through the caches, and every loop runs until its slowest study stops. Mapping
the studies in small groups instead (``lax.map`` with a ``batch_size``) keeps one group's
matrices in cache and lets each study stop on its own: 1.5-2x the throughput of a batch
of regret bounds at n = 200-500 trials (m = 100-250) in ``benchmarks/RESULTS.md``.
:func:`grouped_on_cpu` wraps a per-study function so that ``vmap`` of it maps in groups on
CPU and vectorises on other platforms; callers (and users) keep writing ``jax.vmap``.
"""

from __future__ import annotations

from typing import Callable

import jax
from jax import custom_batching


def group_size(m: int) -> int:
    """Studies per group on CPU for per-study matrices of size ``m x m``: about 32 KiB of
    float64 per group (8 for ``m <= 22``, 2 from ``m = 37``), at least 2 and at most 64."""
    return max(2, min(64, 4096 // max(1, m * m)))


def grouped_on_cpu(fn: Callable, size: int) -> Callable:
    """``fn`` (a function of pytrees of arrays) whose ``vmap`` maps the batch in groups of
    at most ``size`` on CPU (``lax.map(..., batch_size=g)``, ``g`` the largest divisor of the
    batch size up to ``size``, so no remainder is compiled) and vmaps it elsewhere.

    Values are those of ``fn`` (the same per-study program). ``fn`` is traced once per
    call into a jaxpr whose constants become explicit operands, so the rule also holds
    where JAX batches every operand (a ``cond`` on a batched predicate, say). Not
    differentiable (``custom_vmap``); nested ``vmap`` composes.
    """

    def wrapped(*args):
        leaves, treedef = jax.tree_util.tree_flatten(args)
        closed, out_shape = jax.make_jaxpr(lambda *a: fn(*jax.tree_util.tree_unflatten(treedef, a)),
                                           return_shape=True)(*leaves)
        consts = list(closed.consts)
        num_consts = len(consts)

        def run(*operands):
            return jax.core.eval_jaxpr(closed.jaxpr, operands[:num_consts], *operands[num_consts:])

        @custom_batching.custom_vmap
        def call(*operands):
            return run(*operands)

        @call.def_vmap
        def rule(axis_size, in_batched, *operands):
            which = [i for i, b in enumerate(in_batched) if b]

            def one(batched):
                full = list(operands)
                for i, a in zip(which, batched):
                    full[i] = a
                return run(*full)

            # A group size that divides the batch: lax.map compiles its remainder separately.
            group = max(g for g in range(1, min(size, axis_size) + 1) if axis_size % g == 0)

            def grouped(*batched):
                return jax.lax.map(one, batched, batch_size=group)

            def vectorised(*batched):
                return jax.vmap(one)(batched)

            out = jax.lax.platform_dependent(*[operands[i] for i in which], cpu=grouped, default=vectorised)
            return out, [True] * len(out)

        out = call(*consts, *leaves)
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), out)

    return wrapped
