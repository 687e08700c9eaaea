"""Small dense linear algebra that is safe to ``vmap`` on CPU.

Under ``vmap``, ``jnp.linalg.cholesky`` and ``solve_triangular`` become *batched*
LAPACK FFI calls whose CPU kernels fan the batch out over XLA's intra-op thread
pool and block a pool thread until the pieces finish. Inside loops (a batch of
GP fits is a ``while_loop`` in a ``scan`` under ``vmap``) this nested
parallelism can deadlock: every worker waits and ``block_until_ready`` never
returns (seen with jaxlib 0.10 on a 2-core machine). The functions here give
the batched case a rule that, on CPU, maps the unbatched call over the batch
with ``lax.map``; other platforms keep the batched kernels. Derivatives are
defined by custom JVPs, so ``grad`` and ``vmap`` compose in any order.

Inverses are blocked: :func:`tri_inv` splits a triangular matrix 2 x 2 and
recurses, so all but the small diagonal leaves are matrix products, and
:func:`inv_from_cholesky` forms ``L^-T L^-1`` the same way (the order of
LAPACK's ``trtri`` and ``lauum``). Together with the Cholesky factor that is
``n^3`` flops for ``K^-1`` instead of the ``10/3 n^3`` of a triangular solve
against the identity and a dense product, and matrix products are what XLA
runs fastest on every platform.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import custom_batching

__all__ = ["cholesky", "cholesky_of", "eigh", "inv_from_cholesky", "inv_from_tri_inv", "row_sq_norms_lower", "tri_inv"]

# Blocks of at most this size are inverted by a triangular solve; larger ones recurse.
_LEAF = 32
# Blocks of at most this size of ``K^-1 = L^-T L^-1`` are one dense product (fastest on CPU, n <= 500).
_GRAM_LEAF = 64
# Lower-triangular factors of at most this size are applied as one dense product.
_ROWS_LEAF = 64
_HIGHEST = jax.lax.Precision.HIGHEST


def _cpu_sequential(custom_fn, raw_fn):
    """Batched over the leading axis: on CPU a ``lax.map`` of the unbatched
    ``custom_fn`` (so an enclosing ``vmap`` hits this rule again instead of a
    batched kernel), elsewhere the vectorised ``raw_fn``."""

    def batched(x):
        return jax.lax.platform_dependent(x, cpu=lambda a: jax.lax.map(custom_fn, a), default=jax.vmap(raw_fn))

    return batched


def _chol_raw(K):
    return jnp.linalg.cholesky(K)


def _tri_inv_raw(L):
    n = L.shape[-1]
    Linv = jax.scipy.linalg.solve_triangular(L, jnp.eye(n, dtype=L.dtype), lower=True)
    # Keeps XLA from folding solve(L, I) @ v back into a solve with a slow CPU layout.
    return jax.lax.optimization_barrier(Linv)


@custom_batching.custom_vmap
def _chol_batched(K):
    return _chol_raw(K)


@_chol_batched.def_vmap
def _chol_vmap_rule(axis_size, in_batched, K):
    (batched,) = in_batched
    if not batched:
        return _chol_batched(K), False
    return _cpu_sequential(_chol_batched, _chol_raw)(K), True


@custom_batching.custom_vmap
def eigh(A: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Eigenvalues (ascending) and eigenvectors of a symmetric matrix; vmap-safe on CPU.

    Not differentiable (its users only draw samples with the factor).
    """
    return _eigh_raw(A)


def _eigh_raw(A):
    evals, evecs = jnp.linalg.eigh(A)
    return evals, evecs


@eigh.def_vmap
def _eigh_vmap_rule(axis_size, in_batched, A):
    (batched,) = in_batched
    if not batched:
        return eigh(A), (False, False)
    return _cpu_sequential(eigh, _eigh_raw)(A), (True, True)


@custom_batching.custom_vmap
def _tri_inv_batched(L):
    return _tri_inv_raw(L)


@_tri_inv_batched.def_vmap
def _tri_inv_vmap_rule(axis_size, in_batched, L):
    (batched,) = in_batched
    if not batched:
        return _tri_inv_batched(L), False
    return _cpu_sequential(_tri_inv_batched, _tri_inv_raw)(L), True


@jax.custom_jvp
def cholesky(K: jax.Array) -> jax.Array:
    """Lower Cholesky factor of a symmetric positive-definite ``K``, shape (n, n).

    Non-finite (NaN) output signals a failed factorisation, as with ``jnp.linalg.cholesky``.
    """
    return _chol_batched(K)


@cholesky.defjvp
def _cholesky_jvp(primals, tangents):
    (K,), (dK,) = primals, tangents
    L = _chol_batched(K)
    return L, _cholesky_tangent(L, dK)


def _cholesky_tangent(L, dK):
    """``dL = L Phi(L^-1 dK L^-T)`` (``Phi``: the lower triangle, half the diagonal)."""
    Linv = _tri_inv_blocked(L)
    dK = 0.5 * (dK + dK.T)
    tmp = _mm(_mm(Linv, dK), Linv.T)
    phi = jnp.tril(tmp) - 0.5 * jnp.diag(jnp.diagonal(tmp))
    return L @ phi


@jax.custom_jvp
def cholesky_of(K: jax.Array, L: jax.Array) -> jax.Array:
    """``L``, the lower Cholesky factor of ``K`` computed elsewhere (in a loop, which
    reverse mode cannot differentiate), with :func:`cholesky`'s derivative in ``K``; ``L``
    itself carries none."""
    return L


@cholesky_of.defjvp
def _cholesky_of_jvp(primals, tangents):
    (K, L), (dK, _) = primals, tangents
    return L, _cholesky_tangent(L, dK)


def _mm(a, b):
    return jnp.matmul(a, b, precision=_HIGHEST)


def _tri_inv_blocked(L):
    """``L^-1`` for lower-triangular ``L``: with ``L = [[A, 0], [B, C]]``,
    ``L^-1 = [[A^-1, 0], [-C^-1 B A^-1, C^-1]]``; leaves by a triangular solve."""
    n = L.shape[-1]
    if n <= _LEAF:
        return _tri_inv_batched(L)
    h = n // 2
    Ai = _tri_inv_blocked(L[:h, :h])
    Ci = _tri_inv_blocked(L[h:, h:])
    Bi = -_mm(Ci, _mm(L[h:, :h], Ai))
    return jnp.block([[Ai, jnp.zeros((h, n - h), L.dtype)], [Bi, Ci]])


def _upper_gram(U):
    """``U U^T`` for upper-triangular ``U``: with ``U = [[P, Q], [0, R]]``,
    ``U U^T = [[P P^T + Q Q^T, Q R^T], [R Q^T, R R^T]]`` (LAPACK's ``lauum`` order).

    Every product is ``A @ B^T``: on CPU XLA runs a product contracting the lhs's
    leading axis (``A^T @ B``) 2-3x slower than these at n >= 100.
    """
    n = U.shape[-1]
    if n <= _GRAM_LEAF:
        return _mm(U, U.T)
    h = n // 2
    P, Q, R = U[:h, :h], U[:h, h:], U[h:, h:]
    top_left = _upper_gram(P) + _mm(Q, Q.T)
    top_right = _mm(Q, R.T)
    return jnp.block([[top_left, top_right], [top_right.T, _upper_gram(R)]])


@jax.custom_jvp
def tri_inv(L: jax.Array) -> jax.Array:
    """Inverse of a lower-triangular ``L``, shape (n, n) (blocked; see the module doc)."""
    return _tri_inv_blocked(L)


@tri_inv.defjvp
def _tri_inv_jvp(primals, tangents):
    (L,), (dL,) = primals, tangents
    Linv = _tri_inv_blocked(L)
    return Linv, -_mm(_mm(Linv, jnp.tril(dL)), Linv)


def inv_from_cholesky(L: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(L^-1, K^-1)`` for the lower Cholesky factor ``L`` of ``K = L L^T``.

    ``K^-1 = L^-T L^-1`` is formed blockwise from the triangular structure (half the
    flops of a dense product) and is exactly symmetric. Differentiable (through
    :func:`tri_inv` and matrix products).
    """
    Linv = tri_inv(L)
    return Linv, inv_from_tri_inv(Linv)


def inv_from_tri_inv(Linv: jax.Array) -> jax.Array:
    """``K^-1 = L^-T L^-1`` from the inverse ``L^-1`` of the lower Cholesky factor of ``K``;
    exactly symmetric, half the flops of a dense product (:func:`inv_from_cholesky`)."""
    # L^-T materialised, so that XLA does not fold the transpose back into the products.
    return _upper_gram(jax.lax.optimization_barrier(Linv.T))


def row_sq_norms_lower(A: jax.Array, T: jax.Array) -> jax.Array:
    """Squared row norms of ``A @ T.T`` for lower-triangular ``T``, shape ``(len(A),)``.

    With ``T = [[P, 0], [Q, R]]`` the columns of ``A T^T`` split into ``A[:, :h] P^T`` and
    ``A [Q, R]^T``; the first recurses, so the zero block is skipped at every level down
    to leaves of ``_ROWS_LEAF`` (about 2/3 of a dense product's flops). The upper
    triangle of ``T`` must be zero (it is partly read). Used for the
    posterior variance ``k** - |L^-1 k*|^2`` of many points at once.
    """
    m = T.shape[-1]
    if m <= _ROWS_LEAF or A.shape[0] < _ROWS_LEAF:  # few rows: one product is cheaper
        return jnp.sum(jnp.square(A @ T.T), axis=-1)
    h = m // 2
    return row_sq_norms_lower(A[:, :h], T[:h, :h]) + jnp.sum(jnp.square(A @ T[h:].T), axis=-1)
