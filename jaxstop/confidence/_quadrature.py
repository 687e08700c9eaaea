"""The quadrature of :mod:`jaxstop.confidence`: a graded Gauss-Legendre rule and its kernels.

:func:`prob_best_kernel` (the unnormalised probabilities of :func:`~jaxstop.confidence.prob_best`:
relevant candidates in blocks, the rule one panel at a time, stopping once the minimum
can no longer lie further on; a ``custom_vmap`` that makes a batch of problems rows of one
loop, in groups of rows on CPU, and a ``custom_jvp`` that differentiates the loop-free
form) and :func:`leader_kernel` (``P_1`` among the top ``k``, one scan over the ranked
candidates). The design is described in
the ``Quadrature`` section of the package docstring; the Gaussian tail numerics come from
``jaxstop._src.numerics``.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching, lax

from jaxstop._src import checks, numerics
from jaxstop.confidence._standardise import C as _C  # window half-width: 2 Phi(-9) ~ 2e-19
from jaxstop.confidence._standardise import standardise

# Candidates per block of prob_best, which evaluates (nodes, block) tiles block by
# block over the relevant candidates only. On CPU about n / 8, between 32 and 256
# (little wasted work in the last block, tiles stay in cache); 2,048 on accelerators.
_BLOCK_BEST = 32
_BLOCK_BEST_MAX = 256
_BLOCK_BEST_ACCEL = 2048
# One block of all candidates when the relevant blocks cover more than this fraction of them.
_DENSE_FRACTION = 0.75
# prob_best takes the rule one panel at a time when a panel's tile holds at least this
# many values per problem, else the whole rule at once (loop overhead).
_MIN_TILE = 1024
# On CPU a batch of problems (rows) is integrated in groups of rows whose tile, the
# (rows, nodes of a step, block) values of one step, stays within this many bytes. The
# temporaries of a larger tile are memory fresh from the operating system at every call,
# each page of it a fault when first written: a vmapped batch of 1,024 problems of 22
# candidates took 11,000 faults and 3x the time per problem of a batch of 128, one of 64
# candidates 30,000 and 4x (benchmarks/explore/vmap_rows.py; RESULTS, "Confidence curves").
_TILE_BYTES = 4 * 2**20
# prob_best keeps the hazards of all blocks between its two passes over a step's nodes
# up to this size (a batch of problems together); beyond, the second pass recomputes them.
_KEEP_BYTES = 64 * 2**20
# Nodes beyond the point where the minimum exceeds x with a probability below a cut
# are skipped; together they add at most _TAIL * eps to any probability.
_TAIL = 1e-4
# Bound on the hazard phi(z) / S(z) for z <= _C (below (z + sqrt(z^2 + 4)) / 2: 9.11 at 9).
_HAZARD_MAX = 10.0
# Width of the finest panel of the graded rule, in units of the smallest relevant sigma.
_FINEST = 4.0
# Smallest relevant sigma, as a fraction of prob_best's window b - a, that its graded rule
# resolves: below it the panel next to the finest is so much wider than the narrowest
# density that the rule misses part of that candidate's mass (see rule_unresolved).
RESOLVABLE = 2.0**-20


def probability_resolution(dtype) -> float:
    """The most the rule's cuts can drop from one ``p_i`` (``2 Phi(-9)`` outside the window,
    ``_TAIL * eps`` at the skipped nodes): 2.5e-19 in float64, 1.2e-11 in float32. Below it
    probabilities are not resolved: two programs may give them different values, or 0."""
    return float(2.0 * 0.5 * math.erfc(_C / math.sqrt(2.0)) + _TAIL * float(jnp.finfo(dtype).eps))


def rule(dtype) -> tuple[int, int]:
    """(geometric levels, Gauss-Legendre order) for a dtype."""
    if jnp.dtype(dtype) == jnp.float64:
        return 12, 16
    return 12, 12


def leader_rule(dtype) -> tuple[int, int]:
    """(geometric levels, Gauss-Legendre order) of :func:`leader_kernel`'s rule on each side
    of ``b*``: :func:`rule` in float64; in float32 the same 12 levels with 8 nodes per panel
    (104 nodes a side instead of 156).

    The leader's integrand is one density times a product of survival functions, smooth
    on the graded panels, and 8 nodes per panel leave its truncation far below float32's
    rounding (``benchmarks/explore/leader_rule.py``, RESULTS "Confidence curves"): in float64
    arithmetic on 200 ordinary problems of 30 candidates a ``zeta`` moved by at most 0.021
    of float32's eps, against a float32 rounding bound of thousands of eps
    (tests/test_reliability_confidence.py); on harder problems the float32 leader values
    were within 8.9e-7 of float64's (4.8e-7 with 12 nodes). :func:`prob_best`'s one-sided
    rule over the wider window ``[a, b]`` keeps 12 nodes: with 8 its float32 error there
    was 2.7e-4 (2.7e-6 with 12). The leader scans were about a third of a batched SH+
    study (``benchmarks/explore/sim_profile.py``), so the smaller rule pays there.
    """
    if jnp.dtype(dtype) == jnp.float64:
        return rule(dtype)
    return 12, 8


@functools.cache
def _gauss_legendre(order: int) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.legendre.leggauss(order)
    return (x + 1.0) / 2.0, w / 2.0


def _graded(length, h, levels: int, order: int, descending: bool = False):
    """Graded Gauss-Legendre rule on [0, length], panels shrinking towards 0.

    Panel boundaries are ``length * r**l`` for ``l = 0..levels`` and 0, with
    ``r = (_FINEST * h / length)**(1 / levels)``: the panel next to 0 has width
    ``_FINEST * h`` (or less when ``length`` is already that small).
    Returns distances from 0 and weights, each of shape (levels + 1) * order,
    panel by panel from the far end; within a panel ascending, or with
    ``descending`` descending (all distances then descend).

    Every weight is ``>= 0`` by construction, whatever the rounding: a panel's width
    is ``hi_l (1 - r)`` (the last one ``hi_levels``), a product of non-negative
    factors, never a difference of two boundaries. (A difference ``hi_l - hi_{l+1}``
    is exactly 0 for the empty panels of a short ``length``, but XLA may evaluate the
    two boundaries in different fused kernels, where they can round apart by an ulp:
    in float32 under ``vmap`` that gave widths of ``-4e-9``, whose logarithm in
    :func:`leader_kernel` was NaN.) A boundary and a width may still round apart by an
    ulp; that moves a node by an ulp, not the sign of a weight.
    """
    dtype = length.dtype
    t, w = _gauss_legendre(order)
    if descending:
        t, w = t[::-1], w[::-1]
    t = jnp.asarray(t, dtype)
    w = jnp.asarray(w, dtype)
    tiny = jnp.finfo(dtype).tiny
    length = jnp.maximum(length, 0.0)
    # r^levels = finest / length where the window is longer than the finest panel, else 1
    # (one panel); the division only where it is taken, so derivatives stay finite
    finest = _FINEST * h
    graded = length > finest
    ratio = jnp.where(graded, finest / jnp.where(graded, length, 1.0), 1.0)
    log_r = jnp.log(jnp.maximum(ratio, tiny)) / levels
    r = jnp.minimum(jnp.exp(log_r), 1.0)
    ell = jnp.arange(levels + 1, dtype=dtype)
    hi = length * jnp.exp(ell * log_r)
    lo = jnp.concatenate([hi[1:], jnp.zeros((1,), dtype)])
    width = hi * jnp.concatenate([jnp.broadcast_to(1.0 - r, (levels,)), jnp.ones((1,), dtype)])
    # lo + width * t as a matrix product: XLA:CPU fuses the elementwise form into the
    # (nodes x candidates) work that consumes the nodes and rebuilds the rule at every
    # element there (twice the time of the whole quadrature at n = 10).
    basis = jnp.stack([jnp.ones_like(t), t])
    nodes = jnp.matmul(jnp.stack([lo, width], axis=1), basis, precision=lax.Precision.HIGHEST)
    weights = width[:, None] * w[None, :]
    return nodes.reshape(-1), weights.reshape(-1)


def on_cpu() -> bool:
    """Whether jax's default backend is the CPU (block and batch sizes depend on it)."""
    return jax.default_backend() == "cpu"


def block_size(n: int) -> int:
    """Candidates per block of prob_best: a multiple of 8, at most n rounded up."""
    if on_cpu():
        cap = min(_BLOCK_BEST_MAX, max(_BLOCK_BEST, -(-n // 64) * 8))
    else:
        cap = _BLOCK_BEST_ACCEL
    return max(8, min(-(-n // 8) * 8, cap))


def _safe_params(mu, sigma, valid):
    """Padded rows inert before any arithmetic: ``mu = 0``, ``sigma = 1`` there."""
    return checks.inert_rows(mu, valid, 0.0), checks.inert_rows(sigma, valid, 1.0)


# --------------------------------------------------------------------------
# kernels (one problem, traced)


def _window(mu, sigma, valid):
    """``(a, b, relevant, h)`` of :func:`prob_best`'s rule on inert parameters: the window
    ``[a, b]`` where the minimum lies, the candidates with ``mu - c sigma < b`` and the
    smallest relevant ``sigma`` (``b = 0``, ``a = -1``, ``h = 1`` when none is valid)."""
    dtype = mu.dtype
    c = jnp.asarray(_C, dtype)
    big = jnp.asarray(jnp.finfo(dtype).max, dtype)
    any_valid = jnp.any(valid)
    lo = jnp.where(valid, mu - c * sigma, big)
    hi = jnp.where(valid, mu + c * sigma, big)
    b = jnp.where(any_valid, jnp.min(hi), jnp.zeros((), dtype))
    a = jnp.where(any_valid, jnp.min(lo), -jnp.ones((), dtype))
    relevant = valid & (lo < b)
    h = jnp.where(any_valid, jnp.min(jnp.where(relevant, sigma, big)), jnp.ones((), dtype))
    return a, b, relevant, h


def rule_unresolved(mu, sigma, valid):
    """Whether :func:`prob_best`'s graded rule cannot resolve a problem in standard units: the
    smallest relevant ``sigma`` is below ``RESOLVABLE`` (``2^-20``) of the window ``b - a``.
    The finest panel spans ``4 h`` next to ``b``, but a relevant candidate's density lies
    up to ``18 h`` from ``b``, partly in the next panel, which is ``1 / r`` times wider
    (``r^12 = 4 h / (b - a)``). Past ``2^-20`` that panel is over 100 ``h`` wide and its
    Gauss-Legendre nodes miss part of the narrow density: against ``scipy.integrate.quad``
    the error grew from ~3e-8 (float64) and ~3e-6 (float32) at ``2^-20`` to above 1e-3
    at ``1e-10`` and to 0.3 beyond. :func:`leader_curve`'s rule integrates only the
    leader's density, over its own window, and stays accurate there."""
    mu, sigma = _safe_params(mu, sigma, valid)
    a, b, _, h = _window(mu, sigma, valid)
    return jnp.any(valid) & (h < RESOLVABLE * (b - a))


def _prob_best_prep(mu, sigma, valid, far=jnp.inf):
    """One problem's rule and its relevant candidates.

    Only candidates with ``mu - c sigma < b`` enter: the others have
    ``p <= 2 Phi(-9)`` and ``|log S| <= Phi(-9)`` at every node, and get exactly 0.
    Returns node positions (relative to ``b``, ascending) and weights,
    ``(mu - b, 1 / sigma)`` with the other candidates at ``far`` and ``1`` (with
    ``far = inf``, ``S = 1`` and ``phi = 0`` exactly), the smallest relevant ``sigma``
    (the unit of the sums, see :func:`_dense_sums`), which candidates are relevant,
    and the cut on ``L`` beyond which nodes are skipped (:func:`_panel_sums`).
    """
    dtype = mu.dtype
    levels, order = rule(dtype)
    mu, sigma = _safe_params(mu, sigma, valid)
    a, b, relevant, h = _window(mu, sigma, valid)
    dist, weight = _graded(b - a, h, levels, order, descending=True)
    x = -dist  # ascending
    cols = (jnp.where(relevant, mu - b, far), jnp.where(relevant, 1.0 / sigma, 1.0))
    # Beyond a node where L = sum_j log S_j < log_cut the nodes add less than
    # _TAIL * eps to any probability (see _panel_sums).
    tiny = jnp.finfo(dtype).tiny
    tail = _TAIL * jnp.finfo(dtype).eps
    log_cut = jnp.log(tail * h / (_HAZARD_MAX * jnp.maximum(b - a, tiny)))
    return x, weight, cols, h, relevant, log_cut


def _node_weights(weight, total, scale):
    """``w_k exp(L_k) / (sqrt(2 pi) scale)``: the nodes' factor of every integrand.

    Measured in units of ``scale`` (the smallest relevant ``sigma``) and multiplied back
    by ``scale / sigma_i`` per candidate (:func:`_integrals`), so a node whose
    ``exp(L_k)`` underflows carries at most ``~1e-308 x 12`` of any integral.
    """
    return weight * jnp.exp(total - numerics.LOG_SQRT_2PI) / scale[:, None]


def _node_sums(w, h):
    """``sum_k w_k h_ki``; (P, nodes), (P, nodes, c) -> (P, c)."""
    return jnp.einsum("pk,pkb->pb", w, h, precision=lax.Precision.HIGHEST)


def _integrals(w, h, inv_s, scale):
    """``p_i = sum_k w_k h_ki scale / sigma_i``; (P, nodes), (P, nodes, c) -> (P, c)."""
    return _node_sums(w, h) * (inv_s * scale[:, None])


def _pad_columns(v, width: int, fill):
    """``v`` (..., n) padded with ``fill`` to (..., width)."""
    n = v.shape[-1]
    if width == n:
        return v
    return jnp.concatenate([v, jnp.full(v.shape[:-1] + (width - n,), fill, v.dtype)], axis=-1)


def _dense_sums(x, weight, m, inv_s, scale):
    """The integrals of all given candidates in one pass; rows of problems.

    ``x`` and ``weight``: (P, nodes); ``m = mu - b`` and ``1 / sigma``: (P, c), ``c`` a
    multiple of :func:`numerics.sf_group`; ``scale``: (P,), the smallest relevant ``sigma``.
    """
    z = (x[:, :, None] - m[:, None, :]) * inv_s[:, None, :]
    h, total = numerics.hazard_and_log_sf_sum(z)
    return _integrals(_node_weights(weight, total, scale), h, inv_s, scale)


def rows_per_group(rows: int, n: int, dtype) -> int:
    """Rows of problems integrated together by :func:`_prob_best_rows_impl`: all of them off
    the CPU; on the CPU as many as keep a step's tile (rows x nodes of a step x the widest
    block) within ``_TILE_BYTES``, shared out evenly between the fewest groups."""
    if not on_cpu():
        return rows
    _, order = rule(dtype)
    tile = max(order * panels_per_step(c, dtype) * c for c in (block_size(n), dense_width(n, dtype)))
    most = max(1, int(_TILE_BYTES // (tile * jnp.dtype(dtype).itemsize)))
    groups = -(-rows // most)
    return -(-rows // groups)


def _prob_best_rows_impl(mu, sigma, valid):
    """:func:`prob_best_kernel` for problems stacked in rows, shape (P, n): in groups of
    :func:`rows_per_group` rows, one after another (``lax.map``), padded with rows of no
    valid candidate (which take no panel and no block)."""
    rows, n = mu.shape
    size = rows_per_group(rows, n, mu.dtype)
    if size >= rows:
        return _rows_sums(mu, sigma, valid)[0]
    groups = -(-rows // size)
    pad = groups * size - rows

    def grouped(v, fill):
        v = jnp.concatenate([v, jnp.full((pad, n), fill, v.dtype)]) if pad else v
        return v.reshape(groups, size, n)

    args = (grouped(mu, 0), grouped(sigma, 1), grouped(valid, False))
    out = lax.map(lambda a: _rows_sums(*a)[0], args)
    return out.reshape(groups * size, n)[:rows]


def _rows_sums(mu, sigma, valid):
    """``(p, panels)``: the unnormalised ``p`` of problems stacked in rows, shape (P, n), and
    the number of panels of the rule evaluated (:func:`_panel_sums`).

    The relevant candidates (:func:`_prob_best_prep`) are moved to the front and taken
    in blocks of :func:`block_size`, as many as the row with the most relevant
    candidates fills; when those blocks would cover more than ``_DENSE_FRACTION`` of
    the candidates, one block of all ``n`` in place is cheaper and is taken instead
    (no reordering).
    """
    dtype = mu.dtype
    P, n = mu.shape
    x, weight, (m, inv_s), scale, relevant, log_cut = jax.vmap(_prob_best_prep)(mu, sigma, valid)
    num_rel = jnp.sum(relevant, axis=1)
    bs = block_size(n)
    size = -(-n // bs) * bs
    c = dense_width(n, dtype)

    def dense(x, weight, m, inv_s, *rest):
        # every candidate in place (the others at +inf add exactly nothing)
        p, panels = _panel_sums(x, weight, _pad_columns(m, c, jnp.inf), _pad_columns(inv_s, c, 1.0), *rest, bs=c,
                                panels=panels_per_step(c, dtype))
        return p[:, :n], panels

    def blocked(x, weight, m, inv_s, *rest):
        # the relevant candidates moved to the front, in order, as many blocks as the fullest
        # row needs: each candidate's new column from a running count (a sort costs more)
        rel = relevant.astype(jnp.int32)
        before = jnp.cumsum(rel, axis=1) - rel
        dest = jnp.where(relevant, before, num_rel[:, None] + jnp.arange(n)[None, :] - before)
        rows = jnp.arange(P)[:, None]

        def put(v, fill):
            return jnp.full((P, size), fill, dtype).at[rows, dest].set(v, unique_indices=True)

        p, panels = _panel_sums(x, weight, put(m, jnp.inf), put(inv_s, 1.0), *rest, bs=bs,
                                panels=panels_per_step(bs, dtype))
        return jnp.take_along_axis(p, dest, axis=1), panels

    args = (x, weight, m, inv_s, scale, num_rel, log_cut)
    if size <= bs:
        p, panels = dense(*args)
    else:
        num = jnp.max((num_rel + bs - 1) // bs)
        p, panels = lax.cond(num * bs > _DENSE_FRACTION * n, dense, blocked, *args)
    return jnp.where(valid, p, jnp.zeros((), dtype)), panels


def dense_width(n: int, dtype) -> int:
    """Columns of the one block of all ``n`` candidates: whole vectors of 8 unless that
    adds more than a quarter of ``n`` (then whole groups of survival values)."""
    g = numerics.sf_group(dtype)
    c8 = -(-n // 8) * 8
    return c8 if c8 % g == 0 and 4 * c8 <= 5 * n else -(-n // g) * g


def panels_per_step(bs: int, dtype) -> int:
    """Panels per step of :func:`_panel_sums`: one, unless a panel's tile would hold fewer
    than ``_MIN_TILE`` values per problem (then the whole rule in one step)."""
    levels, order = rule(dtype)
    return 1 if order * bs >= _MIN_TILE else levels + 1


def _panel_sums(x, weight, m, inv_s, scale, num_rel, log_cut, *, bs: int, panels: int):
    """``(p, evaluated)``: the integrals of every row's relevant candidates, shape (P, size),
    and the number of panels evaluated.

    ``x`` and ``weight``: (P, nodes), nodes in ascending ``x``; ``m = mu - b`` and
    ``1 / sigma``: (P, size), relevant candidates first, ``size`` a multiple of ``bs``;
    ``scale``: (P,), the smallest relevant ``sigma``; ``num_rel``: (P,), relevant
    candidates; ``log_cut``: (P,), see below.

    Each step takes the next ``panels`` panels of the rule (in ascending ``x``). For
    these nodes a first pass over the candidate blocks sums ``log S`` and keeps each
    block's scaled hazards (up to ``_KEEP_BYTES``, recomputed beyond); a second adds
    ``w_k exp(L_k) h_ki`` to the integrals (:func:`numerics.hazard_and_log_sf_sum`). Tiles are
    (P, panels x order, bs); both reductions are dot products (on CPU faster than
    reduce ops). A ``vmap`` over problems adds rows, so one loop serves the batch.

    The loop stops once ``L`` at the last node of a step is below ``log_cut`` in every
    row with a relevant candidate. ``exp(L(x)) = prod_j S_j(x)``, the probability that
    every candidate exceeds ``x``, is nonincreasing in ``x``; at the nodes (``x <= b``)
    every relevant ``phi(z_i) / S(z_i)`` is below ``_HAZARD_MAX``; so the nodes left
    out add at most ``exp(log_cut) (b - a) _HAZARD_MAX / sigma_i <= _TAIL * eps`` to
    any ``p_i``. Once many candidates crowd together, ``exp(L)`` vanishes well
    before ``b``, and the fine panels next to ``b`` are never evaluated.
    """
    dtype = x.dtype
    P, size = m.shape
    levels, order = rule(dtype)
    chunk = panels * order
    steps = (levels + 1) // panels
    nb = size // bs
    keep = nb * P * chunk * bs * jnp.dtype(dtype).itemsize <= _KEEP_BYTES
    num_blocks = (num_rel + bs - 1) // bs
    num = jnp.max(num_blocks)
    active = num_blocks > 0

    def tile(xk, i):
        mb, ib = (lax.dynamic_slice_in_dim(v, i * bs, bs, axis=1) for v in (m, inv_s))
        return numerics.hazard_and_log_sf_sum((xk[:, :, None] - mb[:, None, :]) * ib[:, None, :])

    def step(carry):
        k, acc, _ = carry
        xk = lax.dynamic_slice_in_dim(x, k * chunk, chunk, axis=1)
        wk = lax.dynamic_slice_in_dim(weight, k * chunk, chunk, axis=1)
        if nb == 1:
            h, total = tile(xk, 0)
            acc = acc + _node_sums(_node_weights(wk, total, scale), h)
        else:

            def first(i, c):
                total, part = c
                h, total_i = tile(xk, i)
                if keep:
                    part = lax.dynamic_update_index_in_dim(part, h, i, 0)
                return total + total_i, part

            part0 = jnp.zeros((nb if keep else 0, P, chunk, bs), dtype)
            total, part = lax.fori_loop(0, num, first, (jnp.zeros((P, chunk), dtype), part0))
            w = _node_weights(wk, total, scale)

            def second(i, a):
                h = lax.dynamic_index_in_dim(part, i, 0, keepdims=False) if keep else tile(xk, i)[0]
                s = lax.dynamic_slice_in_dim(a, i * bs, bs, axis=1) + _node_sums(w, h)
                return lax.dynamic_update_slice_in_dim(a, s, i * bs, axis=1)

            acc = lax.fori_loop(0, num, second, acc)
        go = jnp.any(active & (total[:, -1] >= log_cut))
        return k + 1, acc, go

    def more(carry):
        k, _, go = carry
        return go & (k < steps)

    carry = (jnp.zeros((), jnp.int32), jnp.zeros(m.shape, dtype), jnp.any(active))
    if steps == 1:  # the whole rule in one step: no loop
        taken, acc, _ = step(carry)
    else:
        taken, acc, _ = lax.while_loop(more, step, carry)
    return acc * (inv_s * scale[:, None]), taken * panels


@custom_batching.custom_vmap
def _prob_best_rows(mu, sigma, valid):
    return _prob_best_rows_impl(mu, sigma, valid)


@_prob_best_rows.def_vmap
def _prob_best_rows_vmap(axis_size, in_batched, mu, sigma, valid):
    # A vmap over problems adds rows: one loop for the whole batch, whose counter stays
    # unbatched (a vmapped data-dependent loop would turn every block access into a
    # gather or scatter). Nested vmaps flatten through this rule again.
    args = [a if bat else jnp.broadcast_to(a, (axis_size,) + a.shape) for a, bat in zip((mu, sigma, valid), in_batched)]
    rows = args[0].shape[1]
    out = _prob_best_rows(*(a.reshape((axis_size * rows,) + a.shape[2:]) for a in args))
    return out.reshape((axis_size, rows) + out.shape[1:]), True


_C_NEGLIGIBLE = 12.0  # Phi(-12) ~ 2e-33: the left tail a negligible candidate may have (_negligible)


def _negligible(std):
    """``(valid, drop)``: the valid rows without ``U``, the candidates no rule in the dtype
    resolves (rows :func:`standardise` suspects; relevant ones narrower than ``RESOLVABLE`` of
    the window), where they cannot matter. With ``W`` the other valid ones and
    ``x* = min_U (mu_j - 12 sigma_j)``, the best is in ``U`` only if some ``j`` falls below
    ``mu_j - 12 sigma_j`` or every ``W`` exceeds ``x*`` (one event for all of ``U``), so with
    probability at most ``B = |U| Phi(-12) + prod_W S_i(x*)``; leaving ``U`` out moves any
    ``P_k`` by at most ``2 B``. Where ``B <= eps / 4`` (5.6e-17 in float64, 3.0e-8 in float32;
    ``2 B`` below half an ulp of 1) ``U`` get exactly 0, as the candidates outside the window
    do (e.g. runs plateaued at 0.999 with ``sigma`` at a 1e-6 floor far behind the leaders);
    otherwise the problem stays as it is, unrepresentable."""
    m, s, valid = std.mu, std.sigma, std.valid
    dtype = m.dtype
    a, b, relevant, _ = _window(m, s, valid)
    narrow = relevant & (s < RESOLVABLE * (b - a))
    u = valid & (std.suspect | narrow)
    w = valid & ~u
    big = jnp.asarray(jnp.finfo(dtype).max, dtype)
    x_star = jnp.min(jnp.where(u, m - _C_NEGLIGIBLE * s, big))
    z = jnp.where(w, (x_star - m) / s, -1.0)
    log_mass = jnp.sum(jnp.where(w, numerics.log_sf(z), 0.0))
    tail = 0.5 * math.erfc(_C_NEGLIGIBLE / math.sqrt(2.0))
    bound = jnp.sum(u).astype(dtype) * tail + jnp.exp(log_mass)
    drop = jnp.any(u) & jnp.any(w) & (bound <= 0.25 * jnp.finfo(dtype).eps)
    return jnp.where(drop, w, valid), drop


def _resolved(mu, sigma, valid):
    """The standardised problem :func:`prob_best_kernel` integrates (without the candidates
    :func:`_negligible` leaves out) and whether it is unrepresentable."""
    full = standardise(mu, sigma, valid)
    kept, drop = _negligible(full)
    std = jax.tree_util.tree_map(lambda x, y: jnp.where(drop, y, x), full, standardise(mu, sigma, kept))
    # a row that left the problem (full.lost) stays a reason when the others are dropped
    return std, std.unrepresentable | full.lost | rule_unresolved(std.mu, std.sigma, std.valid)


def prob_best_kernel(mu, sigma, valid):
    """p_i for every candidate, shape (n,), unnormalised; exact zeros for invalid ones and those
    :func:`_negligible` leaves out. Integrated in standard units: the units do not matter."""
    std, _ = _resolved(mu, sigma, valid)
    return _prob_best_standard(std.mu, std.sigma, std.valid)


def prob_best_unrepresentable(mu, sigma, valid):
    """Whether :func:`prob_best_kernel` cannot answer the problem as given (:func:`_resolved`)."""
    return _resolved(mu, sigma, valid)[1]


@jax.custom_jvp
def _prob_best_standard(mu, sigma, valid):
    """:func:`prob_best_kernel` of a problem already in standard units."""
    return _prob_best_rows(mu[None], sigma[None], valid[None])[0]


def _prob_best_dense(mu, sigma, valid):
    """The same sums over all candidates at once, loop-free: the derivative of the kernel.

    Skipped candidates sit at a large finite distance with unit scale (no ``inf``, so
    their tangents are exactly 0 rather than ``0 * inf``).
    """
    dtype = mu.dtype
    far = jnp.sqrt(jnp.asarray(jnp.finfo(dtype).max, dtype)) / 2
    x, weight, (m, inv_s), scale, _, _ = _prob_best_prep(mu, sigma, valid, far)
    n = mu.shape[0]
    c = dense_width(n, dtype)
    m, inv_s = _pad_columns(m, c, far), _pad_columns(inv_s, c, 1.0)
    p = _dense_sums(x[None], weight[None], m[None], inv_s[None], scale[None])[0, :n]
    return jnp.where(valid, p, jnp.zeros((), dtype))


@_prob_best_standard.defjvp
def _prob_best_standard_jvp(primals, tangents):
    # Derivatives (forward and reverse mode) come from the loop-free form, O(n x nodes)
    # memory; values from the blocked kernel.
    mu, sigma, valid = primals
    dmu, dsigma, _ = tangents
    _, dp = jax.jvp(lambda m, s: _prob_best_dense(m, s, valid), (mu, sigma), (dmu, dsigma))
    return _prob_best_standard(mu, sigma, valid), dp


def leader_kernel(mu, sigma, valid):
    """``(P_1 among the top k for k = 1..n, unrepresentable)`` for candidates already sorted
    by mu (valid first); ``unrepresentable`` is :func:`standardise`'s verdict on the problem
    (``leader=True``: ``P_1`` depends on the pairs with the leader only).

    One sequential pass over the candidates carries the running product of the
    survival functions at every node (O(nodes) memory), which on CPU is faster than
    blocked cumulative sums and compiles faster too; a product rather than a sum of
    logarithms, it costs one ``exp`` per candidate and node and no ``log`` (0.63 of the
    time of the sum of ``log S`` and ``exp`` of it at each step in float32, 0.41 in
    float64, for 128 vmapped problems of 22 candidates). Underflow costs nothing
    representable: the nodes' factors ``w_k phi(z0_k) / s0`` (the leader's density) sum
    to about 1, so the nodes whose product falls below the dtype's smallest normal add
    less than about ``tiny`` to any ``P_1`` together.
    The problem is integrated in standard units (:func:`standardise`); panels of zero
    width carry weight 0 (:func:`_graded`'s widths are non-negative).
    """
    std = standardise(mu, sigma, valid, leader=True)
    mu, sigma, valid = std.mu, std.sigma, std.valid
    dtype = mu.dtype
    n = mu.shape[0]
    levels, order = leader_rule(dtype)
    c = jnp.asarray(_C, dtype)
    big = jnp.asarray(jnp.finfo(dtype).max, dtype)
    any_valid = valid[0]
    mu, sigma = _safe_params(mu, sigma, valid)
    mu0, s0 = mu[0], sigma[0]
    a1 = mu0 - c * s0
    b1 = mu0 + c * s0
    hi = jnp.where(valid, mu + c * sigma, big)
    bstar = jnp.clip(jnp.min(hi), mu0, b1)
    relevant = valid & (mu - c * sigma < b1)
    h = jnp.where(any_valid, jnp.min(jnp.where(relevant, sigma, big)), s0)
    dl, wl = _graded(bstar - a1, h, levels, order)
    dr, wr = _graded(b1 - bstar, h, levels, order)
    x = jnp.concatenate([-dl, dr])  # relative to bstar
    w = jnp.concatenate([wl, wr])
    z0 = (x - (mu0 - bstar)) / s0
    use = valid & (jnp.arange(n) > 0)
    # the leader itself and padding at a finite far distance with unit scale: S = 1
    # exactly, and (unlike +inf) no 0 * inf in derivatives (as in _prob_best_dense)
    far = jnp.sqrt(jnp.asarray(jnp.finfo(dtype).max, dtype)) / 2
    m = jnp.where(use, mu - bstar, far)
    inv_s = jnp.where(use, 1.0 / sigma, 1.0)

    # w_k phi(z0_k) / s0 at every node: the rule's weights of the leader's density (they
    # sum to about 1; w_k <= 2 c s0, the window's width, so w_k / s0 cannot overflow)
    lead = (w / s0) * jnp.exp(-0.5 * z0 * z0 - numerics.LOG_SQRT_2PI)

    def step(surv, cand):
        mj, ij = cand
        surv = surv * numerics.gauss_and_sf((x - mj) * ij)[1]
        return surv, jnp.sum(lead * surv)

    _, out = lax.scan(step, jnp.ones(x.shape, dtype), (m, inv_s))
    return jnp.where(any_valid, out, jnp.zeros_like(out)), std.unrepresentable
