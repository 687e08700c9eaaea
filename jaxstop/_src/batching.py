"""Batching of per-study kernels that is fast on CPU.

``jax.vmap`` of a whole GP fit runs every study of the batch in lockstep, one operation
at a time over all of them: on CPU each operation then streams a batch of ``m x m``
matrices through the caches, and every loop runs until its slowest study stops. Mapping
the studies in small groups instead (``lax.map`` with a ``batch_size``) keeps one group's
matrices in cache and lets each study stop on its own: 1.5-2x the throughput of a batch
of regret bounds at n = 200-500 trials (m = 100-250) in ``benchmarks/RESULTS.md``.
:func:`grouped_on_cpu` wraps a per-study function so that ``vmap`` of it maps in groups on
CPU and vectorises on other platforms; callers (and users) keep writing ``jax.vmap``.
:func:`map_in_blocks` is the same idea for a batch the caller holds: the simulator's
studies in blocks of :data:`CPU_BLOCK`.

:func:`gated_cond` is the branch that stays a branch under ``vmap``: a policy's expensive
step (a round's keep decision, a proposal, a BOS solve) then runs at the steps where some
study of the batch needs it, not at every step of every study.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax import custom_batching


def _closed(fn: Callable, leaves, treedef):
    """``fn`` of the pytree ``treedef`` as a jaxpr over ``leaves``: ``(run, consts, out_tree)``
    with ``run(*consts, *leaves)`` its flat outputs. The values ``fn`` closes over (tracers
    of an enclosing transformation included) become the explicit operands ``consts``."""
    closed, out_shape = jax.make_jaxpr(lambda *a: fn(*jax.tree_util.tree_unflatten(treedef, a)),
                                       return_shape=True)(*leaves)
    consts = list(closed.consts)
    num_consts = len(consts)

    def run(*operands):
        return jax.core.eval_jaxpr(closed.jaxpr, operands[:num_consts], *operands[num_consts:])

    return run, consts, jax.tree_util.tree_structure(out_shape)


def gated_cond(pred, true_fn: Callable, false_fn: Callable, *operands, sparse: bool = False):
    """``lax.cond(pred, true_fn, false_fn, *operands)`` that stays a branch under ``vmap``.

    Under ``jax.vmap`` a ``lax.cond`` on a batched predicate becomes a ``select`` that
    evaluates both branches for every member at every call. Here the batching rule
    evaluates ``false_fn`` for the whole batch and ``true_fn`` only when *some* member's
    predicate holds (a ``lax.cond`` on ``any(pred)``, gated the same way again under an
    enclosing ``vmap``): vmapped over the whole batch and then selected per member, or,
    with ``sparse=True``, once per member whose predicate holds (a loop over those
    members, each run unbatched). Give the rare, expensive work to ``true_fn``; choose
    ``sparse`` when few members take it at the same step (a round's end in a one-job
    protocol, a solve at one epoch of a job): the batch then costs what its members need,
    as running them one at a time would, instead of the whole batch's cost at every step
    where any member needs it. ``sparse`` applies on CPU only: on an accelerator the loop
    launches each member's kernels one after another, and the vectorised branch is the
    faster one (SH+ in the one-job protocol: 0.19 against 1.07 ms per study on an NVIDIA
    H200, ``benchmarks/RESULTS.md``). Values are those of ``lax.cond`` (each member gets its own
    branch's outputs, the same per-member program) either way. The branches may close
    over traced values. Not differentiable (``custom_vmap``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> f = lambda x: gated_cond(x > 1.0, lambda v: v * 10.0, lambda v: -v, x)
        >>> jax.vmap(f)(jnp.array([0.5, 2.0])).tolist()
        [-0.5, 20.0]
        >>> g = lambda x: gated_cond(x > 1.0, lambda v: v * 10.0, lambda v: -v, x, sparse=True)
        >>> jax.vmap(g)(jnp.array([0.5, 2.0, 3.0])).tolist()
        [-0.5, 20.0, 30.0]
    """
    # lax.cond's predicate: a scalar bool, or an int / float read as ``pred != 0`` (the
    # sparse rule counts the members that take the branch, so it needs the bool)
    if jnp.ndim(pred) != 0:
        raise TypeError(f"gated_cond: pred must be a scalar, got shape {jnp.shape(pred)}")
    pred = jnp.asarray(pred)
    if pred.dtype != jnp.bool_:
        if pred.dtype.kind not in "iuf":
            raise TypeError(f"gated_cond: pred must be a bool, int or float scalar, got {pred.dtype}")
        pred = pred != 0
    leaves, treedef = jax.tree_util.tree_flatten(operands)
    run_t, consts_t, out_tree = _closed(true_fn, leaves, treedef)
    run_f, consts_f, out_tree_f = _closed(false_fn, leaves, treedef)
    if out_tree != out_tree_f:
        raise TypeError(f"gated_cond: the branches return different structures, {out_tree} and {out_tree_f}")
    nt, nf = len(consts_t), len(consts_f)

    def split(args):
        return args[:nt], args[nt:nt + nf], args[nt + nf:]

    @custom_batching.custom_vmap
    def call(p, *args):
        ct, cf, xs = split(args)
        return jax.lax.cond(p, lambda: run_t(*ct, *xs), lambda: run_f(*cf, *xs))

    @call.def_vmap
    def rule(axis_size, in_batched, p, *args):
        def bcast(a, batched):
            return a if batched else jnp.broadcast_to(a, (axis_size,) + jnp.shape(a))

        p = bcast(p, in_batched[0])
        # unbatched operands stay unbatched (in_axes None): a branch's constants may feed
        # a custom_vmap of their own, whose rule requires them unbatched
        ct, cf, xs = split(args)
        at, af, ax = split([0 if b else None for b in in_batched[1:]])
        fallback = jax.vmap(run_f, in_axes=(*af, *ax), axis_size=axis_size)(*cf, *xs)

        def vectorised(ct, xs, fallback):
            out = jax.vmap(run_t, in_axes=(*at, *ax), axis_size=axis_size)(*ct, *xs)
            return [jnp.where(jnp.reshape(p, p.shape + (1,) * (o.ndim - 1)), o, f)
                    for o, f in zip(out, fallback)]

        def taken(ct, xs, fallback):
            if not sparse:
                return vectorised(ct, xs, fallback)
            # the loop over members pays on CPU; on an accelerator each member's run is a
            # chain of small kernels launched one after another, so it stays vectorised
            return jax.lax.platform_dependent(
                ct, xs, fallback, cpu=lambda ct, xs, fallback: _each_member(p, run_t, ct, xs, at, ax, fallback),
                default=vectorised)

        out = gated_cond(jnp.any(p), taken, lambda ct, xs, fallback: list(fallback), ct, xs, fallback)
        return out, [True] * len(out)

    out = call(pred, *consts_t, *consts_f, *leaves)
    return jax.tree_util.tree_unflatten(out_tree, out)


def _each_member(p, run, consts, xs, const_axes, x_axes, fallback):
    """``fallback`` (batched outputs) with the members where ``p`` holds replaced by
    ``run`` of that member's operands: a loop over those members only (their indices
    first, by ``nonzero``), each sliced out of the batched operands and run unbatched."""
    size = p.shape[0]
    members = jnp.nonzero(p, size=size, fill_value=0)[0]

    def body(j, outs):
        i = members[j]
        pick = lambda a, axis: a if axis is None else jax.lax.dynamic_index_in_dim(a, i, 0, keepdims=False)  # noqa: E731
        one = run(*[pick(a, b) for a, b in zip(consts, const_axes)], *[pick(a, b) for a, b in zip(xs, x_axes)])
        return [jax.lax.dynamic_update_index_in_dim(o, jnp.asarray(v, o.dtype), i, 0) for o, v in zip(outs, one)]

    return jax.lax.fori_loop(0, jnp.sum(p.astype(jnp.int32)), body, list(fallback))


@custom_batching.custom_vmap
def any_in_batch(pred):
    """``pred`` (a bool scalar) for one study; under ``vmap``, whether it holds for *some*
    study of the batch, an unbatched value (nested ``vmap``: over all of them).

    A loop whose condition is ``any_in_batch(running)`` stays one loop with an unbatched
    counter under ``vmap`` (a ``while_loop`` on a batched predicate batches its whole
    carry, counters included, so writes at the counter become scatters); its body keeps
    finished studies unchanged itself. A study's values never depend on the others'.

    Example (the value comes back broadcast over the batch):
        >>> import jax, jax.numpy as jnp
        >>> jax.vmap(any_in_batch)(jnp.array([False, True])).tolist()
        [True, True]
    """
    return pred


@any_in_batch.def_vmap
def _any_in_batch_rule(axis_size, in_batched, pred):
    (batched,) = in_batched
    return (any_in_batch(jnp.any(pred)) if batched else pred), False


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
        run, consts, out_tree = _closed(fn, leaves, treedef)

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
                # groups of one: a plain map, each study unbatched (lax.map's batch_size
                # would vmap a group of one, and a loop inside then selects its carry)
                return jax.lax.map(one, batched, batch_size=None if group == 1 else group)

            def vectorised(*batched):
                return jax.vmap(one)(batched)

            out = jax.lax.platform_dependent(*[operands[i] for i in which], cpu=grouped, default=vectorised)
            return out, [True] * len(out)

        out = call(*consts, *leaves)
        return jax.tree_util.tree_unflatten(out_tree, out)

    return wrapped


#: Studies per block when the simulator runs a batch on CPU (:func:`map_in_blocks`). A
#: simulated study's step is a few hundred small operations over its job slots; vmapped
#: over thousands of studies each of them streams the whole batch through memory, while
#: blocks of about a hundred keep it in cache (much smaller blocks would pay each
#: operation's launch cost for little work). Blocks of 100-250 were fastest for SH,
#: Hyperband and SH+ on the AlexNet table; against one vmapped batch, SH gains 1.5x at
#: 5,000 studies and SH+ 1.1x at 1,000 (``benchmarks/bench_sim_anchors.py``).
CPU_BLOCK = 128


def map_in_blocks(fn: Callable, xs, block: int | None):
    """``jax.vmap(fn)(xs)`` computed in blocks of at most ``block`` rows of the leading
    axis (``lax.map`` over vmapped blocks; the whole batch at once for ``None`` or a
    batch that fits one block).

    The blocks are of equal size (``ceil(n / ceil(n / block))`` rows), the last padded
    with copies of the first row, whose results are dropped. Values are those of
    ``vmap`` wherever ``fn``'s values do not depend on the batch size it is vmapped at.
    Unlike ``lax.map(fn, xs, batch_size=block)`` (as :func:`grouped_on_cpu` uses with a
    divisor of the batch), a batch that is not a multiple of ``block`` compiles no second
    program for the remainder, and typed PRNG key arrays are accepted.

    Example:
        >>> import jax.numpy as jnp
        >>> map_in_blocks(lambda x: x * 2, jnp.arange(7), 3).tolist()
        [0, 2, 4, 6, 8, 10, 12]
    """
    n = jax.tree_util.tree_leaves(xs)[0].shape[0]
    if block is None or n <= block:
        return jax.vmap(fn)(xs)
    num = -(-n // block)
    size = -(-n // num)
    pad = num * size - n

    def blocks(a):
        if pad:
            a = jnp.concatenate([a, jnp.repeat(a[:1], pad, axis=0)])
        return a.reshape((num, size) + a.shape[1:])

    out = jax.lax.map(jax.vmap(fn), jax.tree_util.tree_map(blocks, xs))
    return jax.tree_util.tree_map(lambda a: a.reshape((num * size,) + a.shape[2:])[:n], out)
