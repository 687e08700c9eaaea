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
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import custom_batching

__all__ = ["cholesky", "eigh", "tri_inv"]


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
    Linv = _tri_inv_batched(L)
    dK = 0.5 * (dK + dK.T)
    tmp = Linv @ dK @ Linv.T
    phi = jnp.tril(tmp) - 0.5 * jnp.diag(jnp.diagonal(tmp))
    return L, L @ phi


@jax.custom_jvp
def tri_inv(L: jax.Array) -> jax.Array:
    """Inverse of a lower-triangular ``L``, shape (n, n)."""
    return _tri_inv_batched(L)


@tri_inv.defjvp
def _tri_inv_jvp(primals, tangents):
    (L,), (dL,) = primals, tangents
    Linv = _tri_inv_batched(L)
    return Linv, -Linv @ jnp.tril(dL) @ Linv
