"""The vmap-safe Cholesky / triangular inverse against jnp.linalg."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import linalg as _linalg


def spd(key, batch, n):
    A = jax.random.normal(key, (batch, n, n))
    return A @ jnp.swapaxes(A, 1, 2) + n * jnp.eye(n)[None]


def test_values_match_numpy(key):
    K = spd(key, 3, 7)
    L = jax.vmap(_linalg.cholesky)(K)
    np.testing.assert_allclose(L, np.linalg.cholesky(np.asarray(K)), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(jax.vmap(_linalg.tri_inv)(L), np.linalg.inv(np.asarray(L)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_linalg.cholesky(K[0]), np.linalg.cholesky(np.asarray(K[0])), rtol=1e-12)


def test_gradients_match_jax_linalg_under_vmap(key):
    K = spd(key, 4, 6)

    def ours(K):
        L = _linalg.cholesky(K)
        return jnp.sum(jnp.sin(L)) + jnp.sum(jnp.cos(_linalg.tri_inv(L)))

    def ref(K):
        L = jnp.linalg.cholesky(K)
        return jnp.sum(jnp.sin(L)) + jnp.sum(jnp.cos(jnp.linalg.inv(L)))

    def sym(g):
        return 0.5 * (g + jnp.swapaxes(g, -1, -2))

    np.testing.assert_allclose(sym(jax.vmap(jax.grad(ours))(K)), sym(jax.vmap(jax.grad(ref))(K)), rtol=1e-9, atol=1e-12)
    # Forward mode against a central difference.
    t = jnp.eye(6) + jnp.full((6, 6), 0.1)
    h = 1e-6
    fd = (ours(K[0] + h * t) - ours(K[0] - h * t)) / (2 * h)
    np.testing.assert_allclose(jax.jvp(ours, (K[0],), (t,))[1], fd, rtol=1e-6)


def test_batched_calls_are_not_batched_lapack_on_cpu(key):
    """On CPU the batch is mapped over unbatched LAPACK calls (no batched FFI kernel)."""
    K = spd(key, 3, 5)
    hlo = jax.jit(jax.vmap(lambda K: _linalg.tri_inv(_linalg.cholesky(K)))).lower(K).as_text()
    assert 'num_batch_dims = "1"' not in hlo
    assert "potrf" in hlo and "trsm" in hlo
    # Nested vmaps (e.g. studies x restarts) as well.
    K2 = jnp.stack([K, K])
    hlo2 = jax.jit(jax.vmap(jax.vmap(_linalg.cholesky))).lower(K2).as_text()
    assert 'num_batch_dims = "1"' not in hlo2 and 'num_batch_dims = "2"' not in hlo2
    np.testing.assert_allclose(jax.vmap(jax.vmap(_linalg.cholesky))(K2)[1], np.linalg.cholesky(np.asarray(K)), rtol=1e-12)


def test_eigh_vmap_matches_loop_and_reconstructs(rng):
    A = rng.normal(size=(5, 6, 6))
    A = A @ np.swapaxes(A, 1, 2) + np.eye(6)
    evals, evecs = jax.jit(jax.vmap(_linalg.eigh))(jnp.asarray(A))
    for i in range(len(A)):
        w, v = np.linalg.eigh(A[i])
        np.testing.assert_allclose(np.asarray(evals[i]), w, rtol=1e-10)
        recon = np.asarray(evecs[i]) @ np.diag(np.asarray(evals[i])) @ np.asarray(evecs[i]).T
        np.testing.assert_allclose(recon, A[i], rtol=1e-10, atol=1e-10)


def test_blocked_inverses_match_numpy_above_the_leaf_size(rng):
    """Sizes that split unevenly, several times, including an ill-conditioned K."""
    for n in (33, 97, 130, 250):
        A = rng.normal(size=(n, n))
        for K in (A @ A.T / n + np.eye(n), A[:, :3] @ A[:, :3].T + 1e-6 * np.eye(n)):
            L = np.linalg.cholesky(K)
            Linv, Kinv = _linalg.inv_from_cholesky(jnp.asarray(L))
            ref_Linv = np.linalg.inv(L)
            scale = np.abs(ref_Linv).max()
            np.testing.assert_allclose(Linv, ref_Linv, rtol=0, atol=1e-9 * scale)
            assert np.all(np.triu(np.asarray(Linv), 1) == 0)
            np.testing.assert_array_equal(Kinv, np.asarray(Kinv).T)
            ref_Kinv = ref_Linv.T @ ref_Linv
            np.testing.assert_allclose(Kinv, ref_Kinv, rtol=0, atol=1e-9 * np.abs(ref_Kinv).max())
            # The identity itself, independently of numpy's inverse: backward-stable size.
            resid = np.abs(np.asarray(Kinv) @ K - np.eye(n)).max()
            assert resid < n * np.linalg.cond(K) * np.finfo(float).eps


def test_blocked_inverse_gradients_and_vmap_above_the_leaf_size(key):
    K = spd(key, 3, 70)  # above both leaf sizes (32, 64)

    def ours(K):
        L = _linalg.cholesky(K)
        Linv, Kinv = _linalg.inv_from_cholesky(L)
        return jnp.sum(jnp.cos(Linv)) + jnp.sum(jnp.sin(Kinv) * K)

    def ref(K):
        L = jnp.linalg.cholesky(K)
        Linv = jnp.linalg.inv(L)
        return jnp.sum(jnp.cos(Linv)) + jnp.sum(jnp.sin(Linv.T @ Linv) * K)

    def sym(g):
        return 0.5 * (g + jnp.swapaxes(g, -1, -2))

    np.testing.assert_allclose(sym(jax.vmap(jax.grad(ours))(K)), sym(jax.vmap(jax.grad(ref))(K)), rtol=1e-8, atol=1e-12)
    looped = np.stack([_linalg.inv_from_cholesky(jnp.linalg.cholesky(k))[1] for k in K])
    vmapped = np.asarray(jax.vmap(lambda k: _linalg.inv_from_cholesky(_linalg.cholesky(k))[1])(K))
    # Two programs (vmapped vs single calls, and two Cholesky routines) that round differently:
    # each inverse through a backward-stable factor is within ~c n kappa eps ||K^-1|| of the
    # exact one (c = 4 for the constants of the bound); kappa(K) ~ 5 here.
    for k, got, ref in zip(np.asarray(K), vmapped, looped):
        atol = 2 * 4 * 70 * np.linalg.cond(k) * np.finfo(float).eps * np.abs(ref).max()
        np.testing.assert_allclose(got, ref, rtol=0, atol=atol)


def test_row_sq_norms_lower_match_dense_numpy(rng):
    """Row norms of ``A T^T`` skipping part of T's zero triangle: sizes below, at and
    above the leaf, split unevenly, and under vmap."""
    for n in (7, 64, 65, 97, 250):
        T = np.tril(rng.normal(size=(n, n)))
        A = rng.normal(size=(13, n))
        ref = np.sum((A @ T.T) ** 2, axis=1)
        got = _linalg.row_sq_norms_lower(jnp.asarray(A), jnp.asarray(T))
        np.testing.assert_allclose(got, ref, rtol=1e-12)
    Ts = np.tril(rng.normal(size=(3, 100, 100)))
    As = rng.normal(size=(3, 5, 100))
    got = jax.vmap(_linalg.row_sq_norms_lower)(jnp.asarray(As), jnp.asarray(Ts))
    np.testing.assert_allclose(got, np.sum(np.einsum("bij,bkj->bik", As, Ts) ** 2, axis=2), rtol=1e-12)
