"""Gaussian-process surrogate: masked posterior and ML-II fit, batched by ``vmap``.

The model is ``y = f(x) + eps`` with ``f ~ GP(mean, amplitude * Matern52_ARD)``
(the kernel comes from :mod:`tinygp`), ``eps ~ N(0, noise)``, inputs in the
unit cube ``[0, 1]^d``. Every function is written for one study with a fixed
capacity of ``n`` rows and a boolean ``mask`` marking the real ones: padded
rows have exactly no effect, and a study that grows from 1 to ``n``
observations never recompiles. ``jax.vmap`` gives many studies at once.

``fit`` and ``posterior`` use ``y`` exactly as given; call :func:`standardize`
first when the data are not already on a unit scale (the default priors of
:func:`fit` assume standardised ``y``).

Example:
    >>> import jax.numpy as jnp
    >>> from jaxstop import gp
    >>> X = jnp.array([[0.1, 0.2], [0.5, 0.5], [0.9, 0.7]])
    >>> y = jnp.array([1.0, -0.5, 0.3])
    >>> post = gp.posterior(gp.params(1.0, [0.3, 0.3], 1e-4), X, y)
    >>> mean, var = gp.predict(post, X)
    >>> bool(jnp.allclose(mean, y, atol=1e-3))
    True
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax
from jax.typing import ArrayLike
from tinygp import kernels, transforms
from tinygp.kernels.distance import L2Distance

from jaxstop._src import checks as _checks, linalg as _linalg

__all__ = [
    "GPParams",
    "Posterior",
    "FitInfo",
    "params",
    "kernel",
    "standardize",
    "posterior",
    "predict",
    "log_marginal_likelihood",
    "log_prior",
    "fit",
]

_LOG_2PI = float(np.log(2.0 * np.pi))
_MAX_JITTER_TRIES = 6


class GPParams(NamedTuple):
    """GP hyperparameters, stored in log space so they are unconstrained.

    Build one from natural units with :func:`params`.

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


class FitInfo(NamedTuple):
    """What :func:`fit` reports.

    Attributes:
        objective: Final negative log marginal likelihood minus log prior, shape ().
        finite: Whether the objective and every parameter are finite, shape () bool.
        restart: Index of the start that won, shape () int32.
        num_valid: Number of real rows used, shape () int32.
        steps: Objective evaluations the winning start used, shape () int32: at most
            :func:`fit`'s ``steps``, fewer once converged (``tol`` of :func:`fit`,
            ``fit_tol`` of :func:`jaxstop.regret.fit_regret_bound`).
    """

    objective: jax.Array
    finite: jax.Array
    restart: jax.Array
    num_valid: jax.Array
    steps: jax.Array


def params(
    amplitude: ArrayLike,
    lengthscales: ArrayLike,
    noise: ArrayLike,
    mean: ArrayLike = 0.0,
    *,
    dtype=None,
) -> GPParams:
    """Builds :class:`GPParams` from natural-unit values.

    Args:
        amplitude: Kernel variance, > 0.
        lengthscales: One lengthscale per input dimension, each > 0, shape (d,).
        noise: Observation-noise variance, > 0.
        mean: Constant prior mean.
        dtype: Floating dtype of the result; by default the promoted input dtype.

    Returns:
        The parameters in log space.

    Example:
        >>> from jaxstop import gp
        >>> p = gp.params(2.0, [0.5, 0.25], 1e-3)
        >>> p.lengthscales.shape
        (2,)
    """
    amplitude = _checks.float_array(amplitude, "amplitude", dtype)
    lengthscales = _checks.float_array(lengthscales, "lengthscales", dtype)
    noise = _checks.float_array(noise, "noise", dtype)
    mean = _checks.float_array(mean, "mean", dtype)
    _checks.check_rank(amplitude, 0, "amplitude", "(a scalar)")
    _checks.check_rank(lengthscales, 1, "lengthscales", "(one per input dimension)")
    _checks.check_rank(noise, 0, "noise", "(a scalar)")
    _checks.check_rank(mean, 0, "mean", "(a scalar)")
    _checks.positive_scalar(amplitude, "amplitude")
    _checks.positive_scalar(lengthscales, "lengthscales")
    _checks.positive_scalar(noise, "noise")
    dt = dtype or _checks.common_float_dtype(amplitude, lengthscales, noise, mean)
    return GPParams(
        jnp.log(amplitude).astype(dt),
        jnp.log(lengthscales).astype(dt),
        jnp.log(noise).astype(dt),
        mean.astype(dt),
    )


def kernel(p: GPParams) -> kernels.Kernel:
    """The tinygp kernel ``amplitude * Matern52`` with ARD lengthscales."""
    base = kernels.Matern52(distance=L2Distance())
    return jnp.exp(p.log_amplitude) * transforms.Linear(jnp.exp(-p.log_lengthscales), base)


def standardize(y: ArrayLike, mask: ArrayLike | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Standardises ``y`` by its masked mean and standard deviation.

    Args:
        y: Values, shape (n,).
        mask: Which entries are real, shape (n,) bool; default all.

    Returns:
        ``(z, mean, std)`` with ``z = (y - mean) / std`` on real entries and 0 on
        padded ones. ``std`` is the population standard deviation (ddof 0); it is
        1 when the real values are constant or fewer than two.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> z, m, s = gp.standardize(jnp.array([1.0, 3.0, 99.0]), jnp.array([True, True, False]))
        >>> z.tolist(), float(m), float(s)
        ([-1.0, 1.0, 0.0], 2.0, 1.0)
    """
    y = _checks.float_array(y, "y")
    _checks.check_rank(y, 1, "y")
    mask = _checks.mask_array(mask, y.shape)
    _checks.check_finite_where(y, mask, "y")
    return _standardize(y, mask)


@jax.jit
def _standardize(y, mask):
    w = mask.astype(y.dtype)
    count = jnp.sum(w)
    mean = jnp.sum(jnp.where(mask, y, 0)) / jnp.maximum(count, 1)
    var = jnp.sum(jnp.where(mask, (y - mean) ** 2, 0)) / jnp.maximum(count, 1)
    tiny = jnp.finfo(y.dtype).tiny
    std = jnp.where((count >= 2) & (var > tiny), jnp.sqrt(var), jnp.ones_like(var))
    z = jnp.where(mask, (y - mean) / std, 0)
    return z, mean, std


def _check_data(X, y, mask):
    X = _checks.float_array(X, "X")
    y = _checks.float_array(y, "y")
    _checks.check_rank(X, 2, "X", "with shape (n, d)")
    _checks.check_rank(y, 1, "y", "with shape (n,)")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y must have the same number of rows, got {X.shape[0]} and {y.shape[0]}")
    if X.shape[1] < 1:
        raise ValueError(f"X must have at least one column, got shape {X.shape}")
    mask = _checks.mask_array(mask, y.shape)
    _checks.check_unit_cube(X, "X", mask)
    _checks.check_finite_where(y, mask, "y")
    dt = _checks.common_float_dtype(X, y)
    return X.astype(dt), y.astype(dt), mask


def _check_params(p: GPParams, d: int, dtype):
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


_SQRT5 = float(np.sqrt(5.0))


def _sq_dist(A, B):
    """Squared Euclidean distances, shape (len(A), len(B)), by the dot-product form.

    Exact zeros are not guaranteed on the diagonal; results are clipped at 0.
    """
    a2 = jnp.sum(A * A, axis=1)
    b2 = jnp.sum(B * B, axis=1)
    return jnp.maximum(a2[:, None] + b2[None, :] - 2 * (A @ B.T), 0)


def _matern52(p: GPParams, X1, X2):
    """``amplitude * Matern52`` between scaled inputs; equals ``kernel(p)(X1, X2)``.

    The fused form (one matrix product) is what the hot paths use; tinygp's
    per-pair evaluation gives the same values (tested) at a higher cost.
    """
    inv_ls = jnp.exp(-p.log_lengthscales)
    r2 = _sq_dist(X1 * inv_ls[None, :], X2 * inv_ls[None, :])
    r = jnp.sqrt(r2 + jnp.finfo(r2.dtype).tiny)
    return jnp.exp(p.log_amplitude) * (1 + _SQRT5 * r + (5.0 / 3.0) * r2) * jnp.exp(-_SQRT5 * r)


def _gram(p: GPParams, X, mask):
    """Masked noise-free Gram matrix (zero on padded rows / columns) and the full
    ``K + (noise + jitter) I`` with ones on the padded diagonal."""
    Kf = jnp.where(mask[:, None] & mask[None, :], _matern52(p, X, X), 0)
    diag = jnp.where(mask, jnp.exp(p.log_noise) + _base_jitter(p, X.dtype), 1)
    return Kf, Kf + jnp.diag(diag)


def _base_jitter(p: GPParams, dtype):
    return 10 * jnp.finfo(dtype).eps * jnp.exp(p.log_amplitude)


_tri_inv = _linalg.tri_inv


def _factor(K, mask, base_jitter):
    """Cholesky (and its inverse) with a jitter that grows 100x per try until finite."""
    ok0 = jnp.asarray(False)
    L0 = jnp.zeros_like(K)

    def cond(c):
        return (~c[2]) & (c[3] <= _MAX_JITTER_TRIES)

    def body(c):
        extra = jnp.where(c[3] == 0, 0, base_jitter * jnp.asarray(100.0, K.dtype) ** c[3].astype(K.dtype))
        L = _linalg.cholesky(K + jnp.diag(jnp.where(mask, extra, 0)))
        return L, extra, jnp.all(jnp.isfinite(L)), c[3] + 1

    L, extra, ok, _ = jax.lax.while_loop(cond, body, (L0, jnp.zeros((), K.dtype), ok0, jnp.asarray(0, jnp.int32)))
    return L, extra, ok


def _posterior(p: GPParams, X, y, mask) -> Posterior:
    _, K = _gram(p, X, mask)
    L, extra, ok = _factor(K, mask, _base_jitter(p, X.dtype))
    Linv = _tri_inv(L)
    r = jnp.where(mask, y - p.mean, 0)
    alpha = jnp.where(mask, Linv.T @ (Linv @ r), 0)
    return Posterior(p, X, mask, L, Linv, alpha, _base_jitter(p, X.dtype) + extra, ok)


def _posterior_from_scaled_factor(p: GPParams, X, y, mask, factor) -> Posterior:
    """:func:`_posterior` from the factor ``(L, L^-1)`` of ``K / a`` (``a`` the amplitude) that
    :func:`_scale_parts` computed for the same hyperparameters: ``K = a (C + g I)`` plus the
    base jitter ``10 eps a``, so ``chol(K) = sqrt(a) L`` on the real rows; no factorisation."""
    L_s, Linv_s = factor
    root = jnp.exp(0.5 * p.log_amplitude)
    real = mask[:, None]
    L = jnp.where(real, root * L_s, L_s)
    Linv = jnp.where(real, Linv_s / root, Linv_s)
    r = jnp.where(mask, y - p.mean, 0)
    alpha = jnp.where(mask, Linv.T @ (Linv @ r), 0)
    ok = jnp.all(jnp.isfinite(L)) & jnp.all(jnp.isfinite(Linv))
    return Posterior(p, X, mask, L, Linv, alpha, _base_jitter(p, X.dtype), ok)


def posterior(p: GPParams, X: ArrayLike, y: ArrayLike, mask: ArrayLike | None = None) -> Posterior:
    """Conditions the GP on the real rows of ``(X, y)``.

    Args:
        p: Hyperparameters (see :func:`params`).
        X: Inputs in the unit cube, shape (n, d).
        y: Observations, shape (n,), used as given.
        mask: Which rows are real, shape (n,) bool; default all. Padded rows have
            exactly no effect on anything computed from the posterior.

    Returns:
        A :class:`Posterior` holding the Cholesky factor. If the Gram matrix is
        numerically singular a growing jitter is added (``jitter``); ``ok`` is
        False only if even that failed.

    Raises:
        ValueError: On shape mismatches, X outside [0, 1], or non-finite ``y`` on a
            real row (checked when the arrays are concrete).
    """
    X, y, mask = _check_data(X, y, mask)
    p = _check_params(p, X.shape[1], X.dtype)
    return _posterior_jit(p, X, y, mask)


_posterior_jit = jax.jit(_posterior)


def predict(post: Posterior, Xq: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Latent (noise-free) posterior mean and variance at query points.

    Args:
        post: From :func:`posterior`.
        Xq: Query points, shape (m, d).

    Returns:
        ``(mean, var)``, each shape (m,); ``var`` is clipped at 0.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> post = gp.posterior(gp.params(1.0, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))
        >>> mean, var = gp.predict(post, jnp.array([[0.3]]))   # no data: the prior
        >>> float(mean[0]), float(var[0])
        (0.0, 1.0)
    """
    if not isinstance(post, Posterior):
        raise TypeError(f"post must be a Posterior (see jaxstop.gp.posterior), got {type(post).__name__}")
    Xq = _checks.float_array(Xq, "Xq", post.X.dtype)
    _checks.check_rank(Xq, 2, "Xq", "with shape (m, d)")
    if Xq.shape[1] != post.X.shape[1]:
        raise ValueError(f"Xq must have {post.X.shape[1]} columns like the training X, got shape {Xq.shape}")
    return _predict_jit(post, Xq)


def _predict(post: Posterior, Xq):
    p = post.params
    Kq = jnp.where(post.mask[None, :], _matern52(p, Xq, post.X), 0)
    mean = p.mean + Kq @ post.alpha
    # |L^-1 k*|^2 for every query row, skipping the zero triangle of L^-1
    var = jnp.exp(p.log_amplitude) - _linalg.row_sq_norms_lower(Kq, post.chol_inv)
    return mean, jnp.maximum(var, 0)


def _predict_train(post: Posterior, y):
    """Latent mean and variance at the GP's own rows ``post.X``, from the factor in O(n^2).

    With ``K = K_f + s I`` (``s`` the noise plus jitter, ``K_f`` noise-free), the
    posterior at training row ``i`` is ``mean_i = y_i - s alpha_i`` and
    ``var_i = s - s^2 (K^-1)_ii`` with ``(K^-1)_ii`` the squared norm of column ``i`` of
    ``L^-1`` (Rasmussen & Williams, Eq. 2.23-2.24 with ``K_* = K_f``): the values of
    :func:`_predict` at ``post.X`` without its ``n x n`` kernel block and product, and
    without its cancellation ``amplitude - |L^-1 k*|^2`` for small variances. ``y`` are the
    values the GP was conditioned on; padded rows give 0.
    """
    p = post.params
    s = jnp.exp(p.log_noise) + post.jitter
    kinv_diag = jnp.sum(jnp.square(post.chol_inv), axis=0)
    mean = jnp.where(post.mask, y - s * post.alpha, 0)
    var = jnp.where(post.mask, s - s * s * kinv_diag, 0)
    return mean, jnp.maximum(var, 0)


_predict_jit = jax.jit(_predict)


def _correlation_parts(log_lengthscales, X, both):
    """Unit-amplitude Matern-5/2 correlation ``C`` of the real rows and
    ``H = (1 + sqrt5 r) exp(-sqrt5 r)`` (``dC/dr^2 = -(5/6) H``), zero off the real block."""
    inv_ls = jnp.exp(-log_lengthscales)
    Xs = X * inv_ls[None, :]
    r2 = _sq_dist(Xs, Xs)
    dist = jnp.sqrt(r2 + jnp.finfo(r2.dtype).tiny)
    e = jnp.exp(-_SQRT5 * dist)
    H = jnp.where(both, (1 + _SQRT5 * dist) * e, 0)
    return jnp.where(both, H + (5.0 / 3.0) * r2 * e, 0), H


def _masked_solve(S, y, mask, mean, profile_mean: bool):
    """``S^-1``, the mean, ``r = y - mean``, ``S^-1 r``, ``log|S|^(1/2)``, ``n`` and the factor
    ``(L, L^-1)`` over the real rows of a masked SPD matrix. With ``profile_mean`` the mean is not ``mean`` but its
    maximiser, the generalised-least-squares estimate ``1' S^-1 y / 1' S^-1 1``
    (Rasmussen & Williams, Eq. 2.42 with a flat prior on the mean); with no real rows it
    stays ``mean``."""
    dt = S.dtype
    L = _linalg.cholesky(S)
    Linv, Sinv = _linalg.inv_from_cholesky(L)
    if profile_mean:
        ones = mask.astype(dt)
        s1 = Sinv @ ones
        den = jnp.dot(s1, ones)
        mean = jnp.where(den > 0, jnp.dot(s1, jnp.where(mask, y, 0)) / jnp.where(den > 0, den, 1), mean)
    r = jnp.where(mask, y - mean, 0)
    v = jnp.where(mask, Sinv @ r, 0)
    logdet = jnp.sum(jnp.where(mask, jnp.log(jnp.diagonal(L)), 0))
    return Sinv, mean, r, v, logdet, jnp.sum(mask).astype(dt), (L, Linv)


def _lml_parts(p: GPParams, X, y, mask):
    """Log marginal likelihood and the pieces its gradient needs (one factorisation)."""
    dt = X.dtype
    both = mask[:, None] & mask[None, :]
    # The Matern-5/2 Gram matrix and dK/dr^2 = -(5/6) amp H, H = (1 + sqrt5 r) exp(-sqrt5 r),
    # from one distance matrix and one exp.
    C, H = _correlation_parts(p.log_lengthscales, X, both)
    Kf = jnp.exp(p.log_amplitude) * C
    diag = jnp.where(mask, jnp.exp(p.log_noise) + _base_jitter(p, dt), 1)
    Kinv, _, r, alpha, logdet, n, _ = _masked_solve(Kf + jnp.diag(diag), y, mask, p.mean, False)
    value = -0.5 * jnp.dot(r, alpha) - logdet - 0.5 * n * _LOG_2PI
    W = jnp.where(both, alpha[:, None] * alpha[None, :] - Kinv, 0)
    return value, (Kf, H, W, alpha)


@jax.custom_vjp
def _lml(p: GPParams, X, y, mask):
    """Log marginal likelihood with an analytic gradient (no autodiff through the
    Cholesky, whose transposed triangular solves are slow on CPU)."""
    return _lml_parts(p, X, y, mask)[0]


def _lml_fwd(p, X, y, mask):
    value, (Kf, H, W, alpha) = _lml_parts(p, X, y, mask)
    return value, (p, X, Kf, H, W, alpha)


def _lml_bwd(res, g):
    # d lml / d theta = 0.5 tr(W dK/dtheta), W = alpha alpha^T - K^-1 (real block).
    p, X, Kf, H, W, alpha = res
    amp = jnp.exp(p.log_amplitude)
    inv_ls2 = jnp.exp(-2 * p.log_lengthscales)
    d_amp = 0.5 * jnp.sum(W * Kf)
    d_noise = 0.5 * jnp.exp(p.log_noise) * jnp.trace(W)
    d_mean = jnp.sum(alpha)
    # Matern-5/2: dK/dr^2 = -(5/6) amp H (H from the forward pass, zero off the real block).
    M = W * H  # symmetric
    rowsum = jnp.sum(M, axis=1)
    MX = M @ X  # (n, d)
    # sum_ij M_ij (x_ik - x_jk)^2 = 2 sum_i x_ik^2 rowsum_i - 2 x_k^T M x_k
    quad = 2 * (rowsum @ (X * X)) - 2 * jnp.sum(X * MX, axis=0)
    d_log_ls = 0.5 * (5.0 / 3.0) * amp * inv_ls2 * quad
    # d lml / d x_ik = -(5/3) amp / l_k^2 (x_ik rowsum_i - (M X)_ik)
    d_X = -(5.0 / 3.0) * amp * inv_ls2[None, :] * (X * rowsum[:, None] - MX)
    d_y = -alpha
    dp = GPParams(g * d_amp, g * d_log_ls, g * d_noise, g * d_mean)
    # A failed factorisation (NaN value) is turned into a large objective by the
    # caller; its cotangent is then 0 and must not become 0 * NaN.
    finite = lambda a: jnp.where(jnp.isfinite(a), a, 0)  # noqa: E731
    return jax.tree_util.tree_map(finite, dp), finite(g * d_X), finite(g * d_y), None


_lml.defvjp(_lml_fwd, _lml_bwd)


def _scale_parts(p: GPParams, X, y, mask, fit_mean: bool, use_prior: bool):
    """Log marginal likelihood (plus the amplitude and noise priors) profiled over the amplitude.

    The covariance is written ``a (C + g I)`` with ``C`` the unit-amplitude Matern-5/2
    correlation and ``g = noise / a``; ``p.log_noise`` holds ``log g`` and
    ``p.log_amplitude`` is ignored. With ``r = y - m`` and ``q = r' (C + g I)^-1 r``, the
    log likelihood is ``-q / (2a) - (n/2) log a - log|C + g I|^(1/2) - (n/2) log 2 pi``;
    its maximiser over ``a`` is ``q / n`` and, with the priors of :func:`log_prior`
    (``log a - a + 0.1 log(a g) - 30 a g``), the positive root of
    ``(1 + 30 g) a^2 + (n/2 - 1.1) a - q/2 = 0``. The mean ``m`` is ``p.mean`` or, with
    ``fit_mean``, its generalised-least-squares estimate (the same for every ``a``).
    ``log a`` is kept in gp's box ``[-12, 12]`` (``q = 0`` for constant ``y``).

    Returns ``(value, log_a, mean, pieces, factor)``, ``pieces`` as :func:`_lml_parts` gives
    them for the covariance at ``a`` and ``factor`` the Cholesky factor of ``C + g I`` (plus
    the base jitter at unit amplitude) and its inverse (:func:`_posterior_from_scaled_factor`).
    """
    dt = X.dtype
    both = mask[:, None] & mask[None, :]
    Cf, H = _correlation_parts(p.log_lengthscales, X, both)
    ratio = jnp.exp(p.log_noise)
    diag = jnp.where(mask, ratio + _base_jitter(p._replace(log_amplitude=jnp.zeros_like(ratio)), dt), 1)
    Cinv, mean, r, beta, logdet, n, factor = _masked_solve(Cf + jnp.diag(diag), y, mask, p.mean, fit_mean)
    q = jnp.dot(r, beta)
    if use_prior:
        c = 1 + 30 * ratio
        b = 0.5 * n - 1.1
        root = jnp.sqrt(b * b + 2 * c * q)
        # the two algebraically equal forms of the positive root, each free of cancellation
        a = jnp.where(b > 0, q / (root + jnp.where(b > 0, b, 1)), (root - b) / (2 * c))
    else:
        a = q / n
    log_a = jnp.clip(jnp.log(a), -_LOG_BOX, _LOG_BOX)
    a = jnp.exp(log_a)
    value = -0.5 * q / a - 0.5 * n * log_a - logdet - 0.5 * n * _LOG_2PI
    if use_prior:
        value = value + _log_prior_scale(log_a, log_a + p.log_noise)
    alpha = beta / a
    W = jnp.where(both, (alpha[:, None] * beta[None, :] - Cinv) / a, 0)
    return value, log_a, mean, (a * Cf, H, W, alpha), factor


@partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _lml_profiled_scale(p: GPParams, X, y, mask, fit_mean: bool, use_prior: bool):
    """``(value, log a*, m, factor)`` of :func:`_scale_parts`, differentiable in ``p``
    (lengthscales, ``log g``, and the mean unless profiled), ``X`` and ``y``.

    ``value`` is the maximum over ``a`` (and ``m`` with ``fit_mean``), so its total
    derivative is the partial one at ``a*`` (envelope theorem): :func:`_lml_bwd` for the
    covariance at ``a*``, where ``d/d log g`` at fixed ``a`` is ``d/d log noise``, plus the
    noise prior's ``0.1 - 30 a g``. ``log a*``, ``m`` and ``factor`` are returned for
    reading only (no derivative flows through them).
    """
    value, log_a, mean, _, factor = _scale_parts(p, X, y, mask, fit_mean, use_prior)
    return value, log_a, mean, factor


def _lml_profiled_scale_fwd(p, X, y, mask, fit_mean, use_prior):
    value, log_a, mean, (Kf, H, W, alpha), factor = _scale_parts(p, X, y, mask, fit_mean, use_prior)
    p_cov = GPParams(log_a, p.log_lengthscales, log_a + p.log_noise, mean)
    return (value, log_a, mean, factor), (p_cov, X, Kf, H, W, alpha)


def _lml_profiled_scale_bwd(fit_mean, use_prior, res, g):
    dp, d_X, d_y, _ = _lml_bwd(res, g[0])
    d_log_ratio = dp.log_noise
    if use_prior:
        p_cov = res[0]
        d_log_ratio = d_log_ratio + g[0] * (0.1 - 30.0 * jnp.exp(p_cov.log_noise))
    zero = jnp.zeros_like(dp.log_amplitude)
    d_mean = zero if fit_mean else dp.mean
    return GPParams(zero, dp.log_lengthscales, d_log_ratio, d_mean), d_X, d_y, None


_lml_profiled_scale.defvjp(_lml_profiled_scale_fwd, _lml_profiled_scale_bwd)


def log_marginal_likelihood(p: GPParams, X: ArrayLike, y: ArrayLike, mask: ArrayLike | None = None) -> jax.Array:
    """Log marginal likelihood ``log N(y | mean, K + noise I)`` of the real rows.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> p = gp.params(1.0, [0.5], 0.5)
        >>> lml = gp.log_marginal_likelihood(p, jnp.array([[0.2]]), jnp.array([0.0]))
        >>> round(float(lml), 6)   # log N(0 | 0, 1.5) = -log(3 pi) / 2
        -1.121671
    """
    X, y, mask = _check_data(X, y, mask)
    p = _check_params(p, X.shape[1], X.dtype)
    return _lml_jit(p, X, y, mask)


_lml_jit = jax.jit(_lml)


def log_prior(p: GPParams) -> jax.Array:
    """Weak log-prior on the hyperparameters (for standardised ``y``).

    With ``lam = 1 / lengthscale**2`` per dimension:
    ``-sum(0.1 / lam + 0.1 * lam) + Gamma(amplitude | 2, 1) + Gamma(noise | 1.1, 30)``
    (unnormalised), the priors Optuna's GP sampler uses. They keep 1-5 points
    and constant ``y`` finite; the mean is unpenalised (flat prior).
    """
    return _log_prior_lengthscales(p) + _log_prior_scale(p.log_amplitude, p.log_noise)


def _log_prior_lengthscales(p: GPParams) -> jax.Array:
    lam = jnp.exp(-2 * p.log_lengthscales)
    return -jnp.sum(0.1 / lam + 0.1 * lam)


def _log_prior_scale(log_amplitude, log_noise) -> jax.Array:
    """Gamma(amplitude | 2, 1) + Gamma(noise | 1.1, 30), unnormalised."""
    amp_term = (2.0 - 1.0) * log_amplitude - 1.0 * jnp.exp(log_amplitude)
    noise_term = (1.1 - 1.0) * log_noise - 30.0 * jnp.exp(log_noise)
    return amp_term + noise_term


def _default_init(d: int, dtype) -> GPParams:
    return GPParams(
        jnp.zeros((), dtype),
        jnp.full((d,), jnp.log(0.5), dtype),
        jnp.asarray(jnp.log(1e-2), dtype),
        jnp.zeros((), dtype),
    )


def _to_raw(p: GPParams, min_noise):
    # noise = min_noise + exp(raw_noise): a smooth floor keeps the Cholesky stable.
    excess = jnp.maximum(jnp.exp(p.log_noise) - min_noise, min_noise * 1e-3)
    return p._replace(log_noise=jnp.log(excess))


def _from_raw(raw: GPParams, min_noise):
    return raw._replace(log_noise=jnp.logaddexp(raw.log_noise, jnp.log(min_noise)))


_LOG_BOX = 12.0  # |log amplitude|, |log lengthscale|, |log noise| stay within e^12


def _clip_raw(raw: GPParams) -> GPParams:
    return raw._replace(
        log_amplitude=jnp.clip(raw.log_amplitude, -_LOG_BOX, _LOG_BOX),
        log_lengthscales=jnp.clip(raw.log_lengthscales, -_LOG_BOX, _LOG_BOX),
        log_noise=jnp.clip(raw.log_noise, -3 * _LOG_BOX, _LOG_BOX),
    )


def _objective_profiled_scale(raw, X, y, mask, min_noise, use_prior, fit_mean, mean0):
    """``(objective, (params, factor))`` with the amplitude profiled out (:func:`_lml_profiled_scale`).

    ``raw.log_noise`` is the raw noise-to-amplitude ratio ``g`` (floored at ``min_noise``
    like the noise of :func:`_objective`), ``raw.log_amplitude`` is ignored, and the mean
    is profiled (``fit_mean``) or ``mean0``. ``params`` are the hyperparameters in gp's
    usual form (amplitude ``a*``, noise ``a* g``); ``factor`` conditions the GP on them
    without another factorisation (:func:`_posterior_from_scaled_factor`). The minimiser is
    that of :func:`_objective` when the floor is not active.
    """
    raw = _clip_raw(raw)
    p = _from_raw(raw, min_noise)._replace(mean=jnp.asarray(mean0, X.dtype))
    value, log_a, mean, factor = _lml_profiled_scale(p, X, y, mask, fit_mean, use_prior)
    if use_prior:
        value = value + _log_prior_lengthscales(p)
    val = -value
    big = jnp.asarray(1e10, val.dtype)
    out = GPParams(log_a, p.log_lengthscales, log_a + p.log_noise, mean)
    return jnp.where(jnp.isfinite(val), val, big), jax.lax.stop_gradient((out, factor))


def _objective(raw, X, y, mask, min_noise, use_prior, fit_mean, mean0):
    raw = _clip_raw(raw)
    p = _from_raw(raw, min_noise)
    if not fit_mean:
        p = p._replace(mean=mean0)
    val = -_lml(p, X, y, mask)
    if use_prior:
        val = val - log_prior(p)
    big = jnp.asarray(1e10, val.dtype)
    return jnp.where(jnp.isfinite(val), val, big)


def _fit_profiled(X, z, mask, init: GPParams, min_noise, *, steps: int, fit_mean: bool,
                  use_prior: bool = True, tol: float = 0.0, max_step: float = 1.0, inv_hessian=None):
    """ML-II fit with a bounded cost: at most ``steps`` objective evaluations (the first at ``init``).

    Dense BFGS on the inverse Hessian of the objective (negative log
    marginal likelihood minus the log prior, with its analytic gradient) in gp's raw
    parameters. Each step evaluates one trial point ``theta + t p`` (``p`` the quasi-Newton
    direction, capped at ``max_step`` per coordinate in log space) and accepts it under the
    Armijo condition; the scale ``t`` doubles after an acceptance (up to 1) and shrinks
    4x after a rejection. There is no inner line-search loop: a step is one evaluation.
    The fit stops early once the largest component of the objective's gradient at the
    accepted point is at most ``tol`` (``0``: always ``steps``); under ``vmap`` a batch runs
    until its slowest study stops. ``FitInfo.steps`` reports the evaluations used.

    The amplitude and, with ``fit_mean``, the constant mean are profiled out in closed
    form for the current lengthscales and noise-to-amplitude ratio
    (:func:`_lml_profiled_scale`: the mean's generalised-least-squares
    estimate, the amplitude's maximiser under its Gamma prior), so the steps move the
    lengthscales and that ratio only; without ``fit_mean`` the mean stays ``init.mean``.
    ``min_noise`` floors the ratio (on the standardised scale the amplitude is of order
    1). The minimiser is that of the joint objective where the floor is not active; the
    steps see fewer dimensions and no amplitude-lengthscale coupling, and reach a given
    objective gap in fewer steps, far more reliably from a cold start.

    ``inv_hessian`` warm-starts the steps' curvature: the inverse-Hessian approximation a
    previous fit returned (in the coordinates of ``ravel_pytree`` of gp's raw parameters,
    shape ``(d + 3, d + 3)``). Its first step is then a quasi-Newton step on that curvature
    instead of a gradient step; a matrix that is not finite, not symmetric or has a
    non-positive diagonal (zeros: no curvature yet) means a cold start (the identity,
    scaled at the first update).

    Returns ``(params, info, post, inv_hessian)``: ``post`` is the GP conditioned at
    ``params``, built from the accepted evaluation's Cholesky factor (no factorisation
    after the fit); ``inv_hessian`` the final BFGS approximation, a warm start for the
    next fit of the same study.
    """
    dt = X.dtype
    min_noise = jnp.asarray(min_noise, dt)
    mean0 = jnp.asarray(init.mean, dt)
    start = init._replace(log_noise=init.log_noise - init.log_amplitude)
    objective = partial(_objective_profiled_scale, X=X, y=z, mask=mask, min_noise=min_noise,
                        use_prior=use_prior, fit_mean=fit_mean, mean0=mean0)
    raw0 = _to_raw(start, min_noise)
    theta0, unravel = jax.flatten_util.ravel_pytree(raw0)

    def value_and_grad(theta):
        (f, q), g = jax.value_and_grad(lambda v: objective(unravel(v)), has_aux=True)(theta)
        return f, q, jnp.where(jnp.isfinite(g), g, 0)

    num = theta0.shape[0]
    eye = jnp.eye(num, dtype=dt)
    eps = jnp.finfo(dt).eps
    if inv_hessian is None:
        H0, scaled0 = eye, jnp.asarray(False)
    else:
        Hw = jnp.asarray(inv_hessian, dt)  # shape checked by the public callers
        usable = (jnp.all(jnp.isfinite(Hw)) & jnp.all(jnp.diagonal(Hw) > 0)
                  & jnp.all(jnp.abs(Hw - Hw.T) <= 1e-8 * jnp.max(jnp.abs(Hw))))
        H0, scaled0 = jnp.where(usable, Hw, eye), usable

    def step(carry):
        theta, params, f, g, H, t, scaled, i = carry
        p = -H @ g
        slope = jnp.dot(g, p)
        descent = slope < 0
        p = jnp.where(descent, p, -g)
        cap = jnp.minimum(1, max_step / jnp.maximum(jnp.max(jnp.abs(p)), eps))
        s = t * cap * p
        cand = theta + s
        fc, qc, gc = value_and_grad(cand)
        accept = jnp.isfinite(fc) & ((fc <= f + 1e-4 * jnp.dot(g, s)) | ~jnp.isfinite(f))
        y = gc - g
        sy = jnp.dot(s, y)
        good = accept & (sy > eps * jnp.sqrt(jnp.dot(s, s) * jnp.dot(y, y))) & (sy > 0)
        sy_safe = jnp.where(good, sy, 1)
        # first update: scale the initial inverse Hessian (Nocedal & Wright, Eq. 6.20)
        H0 = jnp.where(scaled, H, eye * sy_safe / jnp.maximum(jnp.dot(y, y), eps))
        rho = 1 / sy_safe
        A = eye - rho * jnp.outer(s, y)
        H_new = A @ H0 @ A.T + rho * jnp.outer(s, s)
        H = jnp.where(good, H_new, H)
        scaled = scaled | good
        theta = jnp.where(accept, cand, theta)
        params = jax.tree_util.tree_map(lambda a, b: jnp.where(accept, a, b), qc, params)
        f = jnp.where(accept, fc, f)
        g = jnp.where(accept, gc, g)
        t = jnp.where(accept, jnp.minimum(1, 2 * t), t / 4)
        return theta, params, f, g, H, t, scaled, i + 1

    def go_on(carry):
        *_, f, g, _, _, _, i = carry
        converged = jnp.isfinite(f) & (jnp.max(jnp.abs(g)) <= tol)
        return (i < steps) & ~converged

    # The first step evaluates the start itself (f = inf, g = 0: a zero step that is
    # always accepted), so the objective is traced once. Profiled-out coordinates of
    # theta (the mean, the amplitude) have gradient 0 and never move; the objective
    # returns the full hyperparameters and their Cholesky factor, carried beside theta.
    m = X.shape[0]
    params0 = (jax.tree_util.tree_map(lambda a: jnp.asarray(a, dt), init),
               (jnp.full((m, m), jnp.nan, dt), jnp.full((m, m), jnp.nan, dt)))
    carry0 = (theta0, params0, jnp.asarray(jnp.inf, dt), jnp.zeros_like(theta0), H0,
              jnp.ones((), dt), scaled0, jnp.zeros((), jnp.int32))
    _, (p, factor), f, _, H, _, _, used = jax.lax.while_loop(go_on, step, carry0)
    finite = jnp.isfinite(f) & (f < 1e10) & jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(p)]))
    info = FitInfo(f, finite, jnp.zeros((), jnp.int32), jnp.sum(mask).astype(jnp.int32), used)
    post = _posterior_from_scaled_factor(p, X, z, mask, factor)
    return p, info, post._replace(ok=post.ok & finite), H


def _first_order(obj, optimizer, theta, *, steps):
    """Fixed-step loop for a user-given optax transformation (e.g. ``optax.adam``)."""
    vg = jax.value_and_grad(obj)
    state = optimizer.init(theta)

    def step(carry, _):
        theta, state = carry
        _, grad = vg(theta)
        updates, state = optimizer.update(grad, state, theta)
        return (optax.apply_updates(theta, updates), state), None

    (theta, _), _ = jax.lax.scan(step, (theta, state), None, length=steps)
    return theta, obj(_clip_raw(theta))


@partial(jax.jit, static_argnames=("steps", "num_restarts", "fit_mean", "use_prior", "optimizer"))
def _fit(key, X, y, mask, init, min_noise, tol, *, steps, num_restarts, fit_mean, use_prior, optimizer):
    dtype = X.dtype
    min_noise = jnp.asarray(min_noise, dtype)
    if num_restarts > 1:
        k_ls, k_amp, k_noise = jax.random.split(key, 3)
        r = num_restarts - 1
        d = X.shape[1]
        ls = jax.random.uniform(k_ls, (r, d), dtype, jnp.log(0.05), jnp.log(2.0))
        amp = jax.random.uniform(k_amp, (r,), dtype, jnp.log(0.3), jnp.log(3.0))
        noise = jax.random.uniform(k_noise, (r,), dtype, jnp.log(1e-4), jnp.log(0.3))
        extra = GPParams(amp, ls, noise, jnp.broadcast_to(jnp.asarray(init.mean, dtype), (r,)))
        starts = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([jnp.asarray(a, dtype)[None], b]), init, extra)
    else:
        starts = jax.tree_util.tree_map(lambda a: jnp.asarray(a, dtype)[None], init)

    def run_one(start):
        if optimizer is None:
            p, info, _, _ = _fit_profiled(X, y, mask, start, min_noise, steps=steps, fit_mean=fit_mean,
                                       use_prior=use_prior, tol=tol)
            return p, info.objective, info.steps
        obj = partial(_objective, X=X, y=y, mask=mask, min_noise=min_noise,
                      use_prior=use_prior, fit_mean=fit_mean, mean0=start.mean)
        theta, value = _first_order(obj, optimizer, _to_raw(start, min_noise), steps=steps)
        p = _from_raw(_clip_raw(theta), min_noise)
        if not fit_mean:
            p = p._replace(mean=start.mean)
        return p, value, jnp.asarray(steps, jnp.int32)

    ps, values, used = jax.vmap(run_one)(starts)
    leaves_finite = jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(a), axis=tuple(range(1, a.ndim))) for a in jax.tree_util.tree_leaves(ps)]),
        axis=0,
    )
    good = leaves_finite & jnp.isfinite(values) & (values < 1e10)
    best = jnp.argmin(jnp.where(good, values, jnp.inf))
    # If no start gives a usable fit, return the first start (finite by construction), marked not finite.
    any_good = jnp.any(good)
    p = jax.tree_util.tree_map(lambda a, s: jnp.where(any_good, a[best], s[0]), ps, starts)
    best = jnp.where(any_good, best, 0)
    value = values[best]
    finite = any_good & jnp.isfinite(value) & (value < 1e10)
    info = FitInfo(value, finite, best.astype(jnp.int32), jnp.sum(mask).astype(jnp.int32), used[best])
    return p, info


def fit(
    X: ArrayLike,
    y: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    init: GPParams | None = None,
    steps: int = 30,
    num_restarts: int = 1,
    key: jax.Array | None = None,
    fit_mean: bool = True,
    prior: bool = True,
    min_noise: float = 1e-6,
    tol: float = 1e-4,
    optimizer: optax.GradientTransformation | None = None,
) -> tuple[GPParams, FitInfo]:
    """Maximises the log marginal likelihood plus the weak log-prior (ML-II / MAP).

    At most ``steps`` objective evaluations run inside ``jit`` from each start; the
    best start wins. The default optimiser profiles the amplitude and (with
    ``fit_mean``) the constant mean out in closed form for the current lengthscales
    and noise-to-amplitude ratio (:func:`_lml_profiled_scale`) and runs dense BFGS on
    the rest, one evaluation per step: a rejected trial shrinks the next step instead
    of starting an inner line search, so under ``vmap`` a batch of fits costs what
    one fit costs (no study waits on another's line search) and stops once every
    study has converged. The maximiser is the joint one over all hyperparameters. The
    noise-to-amplitude ratio is kept above ``min_noise`` by a smooth floor
    (``ratio = min_noise + exp(raw)``; on standardised data the amplitude is of
    order 1). Everything is traceable, so ``fit`` can be ``vmap``-ped over studies
    and does not recompile when the number of real rows changes.

    Args:
        X: Inputs in the unit cube, shape (n, d).
        y: Observations (standardised, see :func:`standardize`), shape (n,).
        mask: Which rows are real, shape (n,) bool; default all.
        init: Warm start (e.g. the previous fit); default amplitude 1,
            lengthscales 0.5, noise 1e-2, mean 0.
        steps: Objective evaluations per start, the first at the start itself (with
            ``optimizer``: that optimiser's steps).
        num_restarts: Number of starts: ``init`` plus ``num_restarts - 1`` random
            ones (log-uniform lengthscales in [0.05, 2], amplitude in [0.3, 3],
            noise in [1e-4, 0.3]; the default optimiser starts from their lengthscales
            and noise-to-amplitude ratio); needs ``key`` when > 1.
        key: PRNG key for the random starts.
        fit_mean: Whether the constant mean is fitted (flat prior) or kept at ``init.mean``.
        prior: Whether to add :func:`log_prior` (recommended: keeps tiny or constant
            data finite).
        min_noise: Lower bound on the noise-to-amplitude ratio, > 0 (with
            ``optimizer``: on the noise variance).
        tol: The fit stops once no component of the objective's gradient exceeds
            ``tol`` (``0``: always ``steps`` evaluations); ``info.steps`` reports the
            evaluations used. Not used with ``optimizer``.
        optimizer: An optax gradient transformation (e.g. ``optax.adam(1e-2)``) run
            for ``steps`` plain steps on all hyperparameters instead of the default.
            It is a static argument: pass the same object to avoid recompiling.

    Returns:
        ``(params, info)``; ``info.finite`` says whether the result is usable. When no
        start gives a finite objective (e.g. no real rows and ``prior=False``: nothing
        is identified) the first start comes back with ``info.finite`` False.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import gp
        >>> X = jax.random.uniform(jax.random.key(0), (30, 2))
        >>> y = jnp.sin(6 * X[:, 0]) + X[:, 1]
        >>> z, _, _ = gp.standardize(y)
        >>> p, info = gp.fit(X, z)
        >>> bool(info.finite)
        True
    """
    X, y, mask = _check_data(X, y, mask)
    steps = _checks.positive_int(steps, "steps")
    num_restarts = _checks.positive_int(num_restarts, "num_restarts")
    if not isinstance(min_noise, (int, float)) or not min_noise > 0:
        raise ValueError(f"min_noise must be a positive float, got {min_noise!r}")
    tol = _checks.nonneg_float(tol, "tol")
    if num_restarts > 1 and key is None:
        raise ValueError("key is required when num_restarts > 1")
    if key is None:
        key = jax.random.key(0)
    init = _default_init(X.shape[1], X.dtype) if init is None else _check_params(init, X.shape[1], X.dtype)
    return _fit(key, X, y, mask, init, min_noise, tol, steps=steps, num_restarts=num_restarts,
                fit_mean=bool(fit_mean), use_prior=bool(prior), optimizer=optimizer)
