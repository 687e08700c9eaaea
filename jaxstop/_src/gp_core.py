"""The masked GP model that jaxstop's GP code shares: kernel, posterior, prediction.

``y = f(x) + eps`` with ``f ~ GP(mean, amplitude * Matern52_ARD)`` and
``eps ~ N(0, noise)``, written for one study with a fixed capacity of ``n`` rows and a
boolean ``mask`` marking the real ones (padded rows have exactly no effect; ``vmap``
gives many studies). This is the one place of the Matern-5/2 kernel (:func:`matern52`,
:func:`correlation_parts`); the kernel-agnostic pieces (masked Gram conditioning, the
jittered factor, predictive moments from a factor) are those of
:mod:`jaxstop._src.gp_likelihood`, which the learning-curve GP of :mod:`jaxstop.bos`
shares. Nothing here validates
its arguments: :mod:`jaxstop.gp` is the public, validating layer over this file and
:mod:`jaxstop._src.gp_fit` (likelihood, priors and the ML-II fit).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import gp_likelihood, linalg

__all__ = [
    "GPParams",
    "Posterior",
    "SQRT5",
    "sq_dist",
    "matern52",
    "correlation_parts",
    "gram",
    "base_jitter",
    "posterior",
    "posterior_from_scaled_factor",
    "predict",
    "predict_train",
    "predict_chunked",
    "standardize",
    "default_init",
    "check_params",
]

class GPParams(NamedTuple):
    """GP hyperparameters, stored in log space so they are unconstrained.

    Build one from natural units with :func:`jaxstop.gp.params`.

    Attributes:
        log_amplitude: Log of the kernel variance, shape ().
        log_lengthscales: Log of the ARD lengthscales, shape (d,).
        log_noise: Log of the observation-noise variance, shape ().
        mean: Constant prior mean, shape ().
    """

    log_amplitude: jax.Array
    log_lengthscales: jax.Array
    log_noise: jax.Array
    mean: jax.Array

    @property
    def amplitude(self) -> jax.Array:
        """Kernel variance."""
        return jnp.exp(self.log_amplitude)

    @property
    def lengthscales(self) -> jax.Array:
        """ARD lengthscales, shape (d,)."""
        return jnp.exp(self.log_lengthscales)

    @property
    def noise(self) -> jax.Array:
        """Observation-noise variance."""
        return jnp.exp(self.log_noise)


class Posterior(NamedTuple):
    """A GP conditioned on masked data; the Cholesky factor is cached.

    Attributes:
        params: The hyperparameters used.
        X: Training inputs, shape (n, d).
        mask: Which rows are real, shape (n,).
        chol: Lower Cholesky factor of the masked Gram matrix, shape (n, n); padded
            rows and columns are those of the identity.
        chol_inv: Its inverse, shape (n, n): predictions are then matrix products.
        alpha: ``K^-1 (y - mean)`` with zeros on padded rows, shape (n,).
        jitter: Diagonal jitter that was needed on top of the noise, shape ().
        ok: Whether the factorisation is finite, shape () bool.
    """

    params: GPParams
    X: jax.Array
    mask: jax.Array
    chol: jax.Array
    chol_inv: jax.Array
    alpha: jax.Array
    jitter: jax.Array
    ok: jax.Array


SQRT5 = float(np.sqrt(5.0))


def sq_dist(A, B):
    """Squared Euclidean distances, shape (len(A), len(B)), by the dot-product form.

    Exact zeros are not guaranteed on the diagonal; results are clipped at 0.
    """
    a2 = jnp.sum(A * A, axis=1)
    b2 = jnp.sum(B * B, axis=1)
    return jnp.maximum(a2[:, None] + b2[None, :] - 2 * (A @ B.T), 0)


def matern52(p: GPParams, X1, X2):
    """``amplitude * Matern52`` between scaled inputs; equals ``kernel(p)(X1, X2)``.

    The fused form (one matrix product) is what the hot paths use; tinygp's
    per-pair evaluation gives the same values (tested) at a higher cost.
    """
    inv_ls = jnp.exp(-p.log_lengthscales)
    r2 = sq_dist(X1 * inv_ls[None, :], X2 * inv_ls[None, :])
    r = jnp.sqrt(r2 + jnp.finfo(r2.dtype).tiny)
    return jnp.exp(p.log_amplitude) * (1 + SQRT5 * r + (5.0 / 3.0) * r2) * jnp.exp(-SQRT5 * r)


def correlation_parts(log_lengthscales, X, both):
    """Unit-amplitude Matern-5/2 correlation ``C`` of the real rows and
    ``H = (1 + sqrt5 r) exp(-sqrt5 r)`` (``dC/dr^2 = -(5/6) H``), zero off the real block."""
    inv_ls = jnp.exp(-log_lengthscales)
    Xs = X * inv_ls[None, :]
    r2 = sq_dist(Xs, Xs)
    dist = jnp.sqrt(r2 + jnp.finfo(r2.dtype).tiny)
    e = jnp.exp(-SQRT5 * dist)
    H = jnp.where(both, (1 + SQRT5 * dist) * e, 0)
    return jnp.where(both, H + (5.0 / 3.0) * r2 * e, 0), H


def gram(p: GPParams, X, mask):
    """Masked noise-free Gram matrix (zero on padded rows / columns) and the full
    ``K + (noise + jitter) I`` with ones on the padded diagonal."""
    Kf = jnp.where(gp_likelihood.real_block(mask), matern52(p, X, X), 0)
    return Kf, gp_likelihood.conditioned(Kf, mask, jnp.exp(p.log_noise) + base_jitter(p, X.dtype))


def base_jitter(p: GPParams, dtype):
    """Diagonal jitter always added on top of the noise: ``10 eps amplitude``."""
    return 10 * jnp.finfo(dtype).eps * jnp.exp(p.log_amplitude)


def posterior(p: GPParams, X, y, mask) -> Posterior:
    """Conditions the GP on the real rows of ``(X, y)`` (see :func:`jaxstop.gp.posterior`)."""
    _, K = gram(p, X, mask)
    L, extra, ok = gp_likelihood.factor(K, mask, base_jitter(p, X.dtype))
    Linv = linalg.tri_inv(L)
    alpha = gp_likelihood.solve_from_inverse(Linv, jnp.where(mask, y - p.mean, 0), mask)
    return Posterior(p, X, mask, L, Linv, alpha, base_jitter(p, X.dtype) + extra, ok)


def posterior_from_scaled_factor(p: GPParams, X, y, mask, factor) -> Posterior:
    """:func:`posterior` from the factor ``(L, L^-1)`` of ``K / a`` (``a`` the amplitude) that
    :func:`jaxstop._src.gp_fit.scale_parts` computed for the same hyperparameters: ``K = a (C + g I)`` plus the
    base jitter ``10 eps a``, so ``chol(K) = sqrt(a) L`` on the real rows; no factorisation."""
    L_s, Linv_s = factor
    root = jnp.exp(0.5 * p.log_amplitude)
    real = mask[:, None]
    L = jnp.where(real, root * L_s, L_s)
    Linv = jnp.where(real, Linv_s / root, Linv_s)
    alpha = gp_likelihood.solve_from_inverse(Linv, jnp.where(mask, y - p.mean, 0), mask)
    ok = jnp.all(jnp.isfinite(L)) & jnp.all(jnp.isfinite(Linv))
    return Posterior(p, X, mask, L, Linv, alpha, base_jitter(p, X.dtype), ok)


def predict(post: Posterior, Xq):
    """Latent mean and variance (clipped at 0) at the rows of ``Xq`` (see :func:`jaxstop.gp.predict`)."""
    p = post.params
    Kq = jnp.where(post.mask[None, :], matern52(p, Xq, post.X), 0)
    # mean from alpha = K^-1 (y - mean); variance amplitude - |L^-1 k*|^2 per query row
    return gp_likelihood.posterior_from_factor(post.chol_inv, Kq.T, jnp.exp(p.log_amplitude), p.mean,
                                               alpha=post.alpha, full_cov=False)


def predict_train(post: Posterior, y):
    """Latent mean and variance at the GP's own rows ``post.X``, from the factor in O(n^2).

    With ``K = K_f + s I`` (``s`` the noise plus jitter, ``K_f`` noise-free), the
    posterior at training row ``i`` is ``mean_i = y_i - s alpha_i`` and
    ``var_i = s - s^2 (K^-1)_ii`` with ``(K^-1)_ii`` the squared norm of column ``i`` of
    ``L^-1`` (Rasmussen & Williams, Eq. 2.23-2.24 with ``K_* = K_f``): the values of
    :func:`predict` at ``post.X`` without its ``n x n`` kernel block and product, and
    without its cancellation ``amplitude - |L^-1 k*|^2`` for small variances. ``y`` are the
    values the GP was conditioned on; padded rows give 0.
    """
    p = post.params
    s = jnp.exp(p.log_noise) + post.jitter
    kinv_diag = jnp.sum(jnp.square(post.chol_inv), axis=0)
    mean = jnp.where(post.mask, y - s * post.alpha, 0)
    var = jnp.where(post.mask, s - s * s * kinv_diag, 0)
    return mean, jnp.maximum(var, 0)


def predict_chunked(post, Xq, chunk_size: int):
    """Latent mean and variance at many points, ``chunk_size`` rows at a time."""
    m, d = Xq.shape
    if m <= chunk_size:
        return predict(post, Xq)
    num = -(-m // chunk_size)
    pad = num * chunk_size - m
    Xp = jnp.concatenate([Xq, jnp.zeros((pad, d), Xq.dtype)]) if pad else Xq
    mean, var = jax.lax.map(partial(predict, post), Xp.reshape(num, chunk_size, d))
    return mean.reshape(-1)[:m], var.reshape(-1)[:m]


@jax.jit
def standardize(y, mask):
    """``(z, mean, std)`` of the masked values (see :func:`jaxstop.gp.standardize`)."""
    w = mask.astype(y.dtype)
    count = jnp.sum(w)
    mean = jnp.sum(jnp.where(mask, y, 0)) / jnp.maximum(count, 1)
    var = jnp.sum(jnp.where(mask, (y - mean) ** 2, 0)) / jnp.maximum(count, 1)
    tiny = jnp.finfo(y.dtype).tiny
    std = jnp.where((count >= 2) & (var > tiny), jnp.sqrt(var), jnp.ones_like(var))
    z = jnp.where(mask, (y - mean) / std, 0)
    return z, mean, std


def default_init(d: int, dtype) -> GPParams:
    """The fit's default start: amplitude 1, lengthscales 0.5, noise 1e-2, mean 0."""
    return GPParams(
        jnp.zeros((), dtype),
        jnp.full((d,), jnp.log(0.5), dtype),
        jnp.asarray(jnp.log(1e-2), dtype),
        jnp.zeros((), dtype),
    )


def check_params(p: GPParams, d: int, dtype):
    """Checks that ``p`` is a :class:`GPParams` for ``d`` inputs; returns it in ``dtype``."""
    if not isinstance(p, GPParams):
        raise TypeError(f"params must be a GPParams (see jaxstop.gp.params), got {type(p).__name__}")
    if jnp.shape(p.log_lengthscales) != (d,):
        raise ValueError(
            f"params.log_lengthscales must have shape ({d},) to match X with {d} columns, "
            f"got {jnp.shape(p.log_lengthscales)}"
        )
    for name in ("log_amplitude", "log_noise", "mean"):
        if jnp.ndim(getattr(p, name)) != 0:
            raise ValueError(f"params.{name} must be a scalar, got shape {jnp.shape(getattr(p, name))}")
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype), p)
