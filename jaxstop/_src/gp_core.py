"""The masked GP model that jaxstop's GP code shares: kernel, posterior, prediction.

``y = f(x) + eps`` with ``f ~ GP(mean, amplitude * Matern52_ARD)`` and
``eps ~ N(0, noise)``, written for one study with a fixed capacity of ``n`` rows and a
boolean ``mask`` marking the real ones (padded rows have exactly no effect; ``vmap``
gives many studies). This is the one place of the Matern-5/2 kernel (:func:`matern52`,
:func:`correlation_parts`). Parameters that carry a Kumaraswamy input warping
(:class:`GPParams` ``log_warp_a`` / ``log_warp_b``, :mod:`jaxstop._src.warping`) make the
kernel act on ``w(x)``: the functions that take inputs (:func:`posterior`,
:func:`posterior_from_scaled_factor`, :func:`predict` and what calls it) warp them
(:func:`warp_inputs`), the kernel functions (:func:`matern52`, :func:`correlation_parts`,
:func:`gram`, :func:`predict_warped`) take points in the kernel's coordinates. The
kernel-agnostic pieces (masked Gram conditioning, the jittered factor, predictive
moments from a factor) are those of
:mod:`jaxstop._src.gp_likelihood`, which the learning-curve GP of :mod:`jaxstop.bos`
shares. Padded rows are made inert (:func:`jaxstop._src.gp_likelihood.inert`) before any
arithmetic, so whatever they hold (NaN, inf, 1e30) has no effect; data problems on real
rows are status fields (``ok``, ``reason``) of the results. Nothing here validates
its arguments: :mod:`jaxstop.gp` is the public, validating layer over this file and
:mod:`jaxstop._src.gp_fit` (likelihood, priors and the ML-II fit).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks, gp_likelihood, linalg, status, warping
from jaxstop._src.status import Reason

__all__ = [
    "GPParams",
    "Posterior",
    "Prediction",
    "Standardized",
    "SQRT5",
    "warp_inputs",
    "unwarped",
    "with_warping",
    "sq_dist",
    "matern_parts",
    "matern52",
    "correlation_parts",
    "gram",
    "base_jitter",
    "posterior",
    "posterior_from_scaled_factor",
    "predict",
    "predict_warped",
    "predict_checked",
    "predict_train",
    "predict_chunked",
    "in_unit_cube",
    "real_inputs_valid",
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
        log_warp_a: Logs of the Kumaraswamy input-warping parameters ``a``, shape (d,),
            or ``None`` (default): no warping (:mod:`jaxstop._src.warping`). The kernel
            is then evaluated on ``w(x) = 1 - (1 - x^a)^b`` per dimension.
        log_warp_b: Logs of the warping parameters ``b``, shape (d,), or ``None``; set
            together with ``log_warp_a``.

    Without warping the two last fields are ``None``, which is no leaf: the pytree has
    the same four leaves (and the same ``ravel_pytree`` vector) as a four-field
    ``GPParams(log_amplitude, log_lengthscales, log_noise, mean)``.
    """

    log_amplitude: jax.Array
    log_lengthscales: jax.Array
    log_noise: jax.Array
    mean: jax.Array
    log_warp_a: jax.Array | None = None
    log_warp_b: jax.Array | None = None

    @property
    def warped(self) -> bool:
        """Whether the parameters carry an input warping (a static, Python bool)."""
        return self.log_warp_a is not None

    @property
    def warp_a(self) -> jax.Array | None:
        """Warping parameters ``a``, shape (d,), or ``None``."""
        return None if self.log_warp_a is None else jnp.exp(self.log_warp_a)

    @property
    def warp_b(self) -> jax.Array | None:
        """Warping parameters ``b``, shape (d,), or ``None``."""
        return None if self.log_warp_b is None else jnp.exp(self.log_warp_b)

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
        X: Training inputs in the kernel's coordinates, shape (n, d): the inputs
            themselves, or their warping ``w(X)`` when ``params`` carry one
            (:func:`jaxstop.gp.warp`); padded rows hold 0 (made inert), or ``w(0)``.
        mask: Which rows are real, shape (n,).
        chol: Lower Cholesky factor of the masked Gram matrix, shape (n, n); padded
            rows and columns are those of the identity.
        chol_inv: Its inverse, shape (n, n): predictions are then matrix products.
        alpha: ``K^-1 (y - mean)`` with zeros on padded rows, shape (n,).
        jitter: Diagonal jitter that was needed on top of the noise, shape ().
        ok: Whether the posterior is usable, shape () bool: the real rows of ``X`` and
            ``y`` and the parameters are finite, and the factor is finite and accurate
            (:func:`jaxstop._src.gp_likelihood.factor_accurate`).
        reason: Why not, an int32 :class:`jaxstop.Reason` code, shape ():
            ``BAD_INPUT`` (a non-finite value on a real row or in the parameters, a real
            row of ``X`` outside the unit cube),
            ``NOT_FINITE`` (the factor or ``alpha`` is not finite), ``ILL_CONDITIONED``
            (finite but inaccurate even after the jitter), ``OK``.
    """

    params: GPParams
    X: jax.Array
    mask: jax.Array
    chol: jax.Array
    chol_inv: jax.Array
    alpha: jax.Array
    jitter: jax.Array
    ok: jax.Array
    reason: jax.Array


class Prediction(NamedTuple):
    """Latent posterior moments at query points; unpacks as ``mean, var = ...``.

    Attributes:
        mean: Posterior means, shape (m,); NaN on rows that are not :attr:`ok`.
        var: Posterior variances (clipped at 0), shape (m,); NaN where ``mean`` is.
    """

    mean: jax.Array
    var: jax.Array

    @property
    def ok(self) -> jax.Array:
        """Per query row, whether its mean and variance are usable, shape (m,) bool: the
        row was finite and in the unit cube, the posterior ``ok``, the values finite."""
        return jnp.isfinite(self.mean) & jnp.isfinite(self.var)


class Standardized(NamedTuple):
    """What :func:`standardize` returns; unpacks as ``z, mean, std = ...``.

    Attributes:
        z: ``(y - mean) / std`` on real entries, 0 on padded ones, shape (n,).
        mean: Mean of the real entries, shape ().
        std: Their population standard deviation (ddof 0), or 1 (constant or fewer than
            two values), shape (). It is at most half the values' range (Popoviciu's
            inequality), so it never overflows; it is 0 only where it underflows.
    """

    z: jax.Array
    mean: jax.Array
    std: jax.Array

    @property
    def ok(self) -> jax.Array:
        """Whether ``z``, ``mean`` and ``std`` hold the standardisation, shape () bool."""
        return self.reason == int(Reason.OK)

    @property
    def reason(self) -> jax.Array:
        """``BAD_INPUT`` (a real entry of ``y`` was not finite), ``UNREPRESENTABLE`` (the
        standard deviation is below the dtype's range: 0) or ``OK``; int32."""
        bad = ~(jnp.isfinite(self.mean) & jnp.all(jnp.isfinite(self.z), axis=-1))
        unrepresentable = ~(jnp.isfinite(self.std) & (self.std > 0))
        return status.first_reason((bad, Reason.BAD_INPUT), (unrepresentable, Reason.UNREPRESENTABLE))


SQRT5 = float(np.sqrt(5.0))


def warp_inputs(p: GPParams, X):
    """``X`` in the kernel's coordinates: the Kumaraswamy warping ``w(X)`` of
    :func:`jaxstop._src.warping.warp` when ``p`` carries one, else ``X`` itself (the same
    array: nothing is computed). ``X`` has shape (..., d)."""
    if not p.warped:
        return X
    return warping.warp(X, p.log_warp_a, p.log_warp_b)


def unwarped(p: GPParams) -> GPParams:
    """``p`` without its warping fields: the kernel's own parameters (four leaves)."""
    return p._replace(log_warp_a=None, log_warp_b=None)


def with_warping(p: GPParams, warp: bool) -> GPParams:
    """``p`` with a warping (the identity ``a = b = 1`` where ``p`` has none) when ``warp``,
    else :func:`unwarped`. ``warp`` is a Python bool (static)."""
    if not warp:
        return unwarped(p)
    if p.warped:
        return p
    zero = jnp.zeros_like(p.log_lengthscales)
    return p._replace(log_warp_a=zero, log_warp_b=zero)


def sq_dist(A, B):
    """Squared Euclidean distances, shape (len(A), len(B)), by the dot-product form.

    Exact zeros are not guaranteed on the diagonal; results are clipped at 0.
    """
    a2 = jnp.sum(A * A, axis=1)
    b2 = jnp.sum(B * B, axis=1)
    return jnp.maximum(a2[:, None] + b2[None, :] - 2 * (A @ B.T), 0)


@jax.custom_jvp
def matern_parts(r2):
    """``(C, H)`` of the squared scaled distance ``r2``: the unit Matern-5/2 correlation
    ``C = (1 + sqrt5 r + 5/3 r^2) exp(-sqrt5 r)`` and ``H = (1 + sqrt5 r) exp(-sqrt5 r)``.

    Their derivatives in ``r2`` are written out, ``dC = -(5/6) H`` and ``dH = -(5/2)
    exp(-sqrt5 r)``, finite at ``r = 0`` (the same rule again for second derivatives).
    Autodiff through ``r = sqrt(r2 + tiny)`` would multiply ``1 / (2 r)`` (3e153 at ``r = 0``
    in float64) by a difference that is 0 only when rounded exactly: under ``jit`` XLA's
    fused arithmetic leaves ~1e-16 of it, and the gradient in the inputs came out wrong.
    """
    r = jnp.sqrt(r2 + jnp.finfo(r2.dtype).tiny)
    e = jnp.exp(-SQRT5 * r)
    H = (1 + SQRT5 * r) * e
    return H + (5.0 / 3.0) * r2 * e, H


@matern_parts.defjvp
def _matern_parts_jvp(primals, tangents):
    (r2,), (dr2,) = primals, tangents
    C, H = matern_parts(r2)
    e = jnp.exp(-SQRT5 * jnp.sqrt(r2 + jnp.finfo(r2.dtype).tiny))
    return (C, H), (-(5.0 / 6.0) * H * dr2, -2.5 * e * dr2)


def matern52(p: GPParams, X1, X2):
    """``amplitude * Matern52`` between scaled inputs; equals ``kernel(p)(X1, X2)``.

    The fused form (one matrix product) is what the hot paths use; tinygp's
    per-pair evaluation gives the same values (tested) at a higher cost.
    """
    inv_ls = jnp.exp(-p.log_lengthscales)
    r2 = sq_dist(X1 * inv_ls[None, :], X2 * inv_ls[None, :])
    return jnp.exp(p.log_amplitude) * matern_parts(r2)[0]


def correlation_parts(log_lengthscales, X, both):
    """Unit-amplitude Matern-5/2 correlation ``C`` of the real rows and
    ``H = (1 + sqrt5 r) exp(-sqrt5 r)`` (``dC/dr^2 = -(5/6) H``), zero off the real block."""
    inv_ls = jnp.exp(-log_lengthscales)
    Xs = X * inv_ls[None, :]
    C, H = matern_parts(sq_dist(Xs, Xs))
    return jnp.where(both, C, 0), jnp.where(both, H, 0)


def gram(p: GPParams, X, mask):
    """Masked noise-free Gram matrix (zero on padded rows / columns) and the full
    ``K + (noise + jitter) I`` with ones on the padded diagonal."""
    Kf = jnp.where(gp_likelihood.real_block(mask), matern52(p, X, X), 0)
    return Kf, gp_likelihood.conditioned(Kf, mask, jnp.exp(p.log_noise) + base_jitter(p, X.dtype))


def base_jitter(p: GPParams, dtype):
    """Diagonal jitter always added on top of the noise: ``10 eps amplitude``."""
    return 10 * jnp.finfo(dtype).eps * jnp.exp(p.log_amplitude)


def in_unit_cube(X):
    """Per row of ``X`` (shape (..., d)), whether every entry is finite and in ``[0, 1]``:
    the domain of every input of the GP (traceable). The one test of an input row that the
    posterior, the fit, the predictions and the regret bound apply inside ``jit``, where the
    public functions' eager check (:func:`jaxstop._src.checks.check_unit_cube`) cannot run."""
    return jnp.all(jnp.isfinite(X) & (X >= 0) & (X <= 1), axis=-1)


def real_inputs_valid(X, mask):
    """Whether every real row (``mask``) of ``X`` is :func:`in_unit_cube`, shape ()."""
    return jnp.all(in_unit_cube(X) | ~jnp.asarray(mask, bool))


def _bad_input(p: GPParams, X, y, mask):
    """Whether a real row of ``X`` is not finite or leaves the unit cube, a real ``y`` is not
    finite, or a parameter is not finite (shape ())."""
    return ~(real_inputs_valid(X, mask) & gp_likelihood.real_finite(y, mask) & status.all_finite(p))


def _with_status(post: Posterior, bad_input, accurate) -> Posterior:
    finite = status.all_finite(post.chol, post.chol_inv, post.alpha)
    reason = status.first_reason((bad_input, Reason.BAD_INPUT), (~finite, Reason.NOT_FINITE),
                                 (~accurate, Reason.ILL_CONDITIONED))
    return post._replace(ok=reason == int(Reason.OK), reason=reason)


def posterior(p: GPParams, X, y, mask) -> Posterior:
    """Conditions the GP on the real rows of ``(X, y)`` (see :func:`jaxstop.gp.posterior`).

    Padded rows are made inert first (``Posterior.X`` holds 0 there, or its warping);
    the inputs are warped when ``p`` carries a warping (:func:`warp_inputs`); the factor
    is jittered until finite and accurate (:func:`jaxstop._src.gp_likelihood.factor`)."""
    bad = _bad_input(p, X, y, mask)
    X, y = gp_likelihood.inert(mask, X, y)
    X = warp_inputs(p, X)
    _, K = gram(p, X, mask)
    L, extra, accurate = gp_likelihood.factor(K, mask, base_jitter(p, X.dtype))
    Linv = linalg.tri_inv(L)
    alpha = gp_likelihood.solve_from_inverse(Linv, jnp.where(mask, y - p.mean, 0), mask)
    post = Posterior(p, X, mask, L, Linv, alpha, base_jitter(p, X.dtype) + extra, jnp.asarray(True),
                     jnp.asarray(0, jnp.int32))
    return _with_status(post, bad, accurate)


def posterior_from_scaled_factor(p: GPParams, X, y, mask, factor) -> Posterior:
    """:func:`posterior` from the factor ``(L, L^-1[, accurate])`` of ``K / a`` (``a`` the
    amplitude) that :func:`jaxstop._src.gp_fit.scale_parts` computed for the same
    hyperparameters: ``K = a (C + g I)`` plus the base jitter ``10 eps a``, so
    ``chol(K) = sqrt(a) L`` on the real rows; no factorisation. When that factor is not
    finite or not accurate (``accurate`` False) the posterior is :func:`posterior`'s, with
    its jitter (one factorisation, only then). ``X`` are the inputs (warped here, like
    :func:`posterior` does, when ``p`` carries a warping)."""
    L_s, Linv_s, *rest = factor
    accurate = rest[0] if rest else jnp.asarray(True)
    bad = _bad_input(p, X, y, mask)
    X_in, y = gp_likelihood.inert(mask, X, y)
    X = warp_inputs(p, X_in)
    root = jnp.exp(0.5 * p.log_amplitude)
    real = mask[:, None]
    L = jnp.where(real, root * L_s, L_s)
    Linv = jnp.where(real, Linv_s / root, Linv_s)
    alpha = gp_likelihood.solve_from_inverse(Linv, jnp.where(mask, y - p.mean, 0), mask)
    post = _with_status(Posterior(p, X, mask, L, Linv, alpha, base_jitter(p, X.dtype), jnp.asarray(True),
                                  jnp.asarray(0, jnp.int32)), bad, accurate)
    return jax.lax.cond(post.ok | bad, lambda: post, lambda: posterior(p, X_in, y, mask))


def predict(post: Posterior, Xq):
    """Latent mean and variance (clipped at 0) at the rows of ``Xq`` (see :func:`jaxstop.gp.predict`).

    ``Xq`` are inputs: warped like the training inputs when the posterior's parameters
    carry a warping (:func:`warp_inputs`), then :func:`predict_warped`."""
    return predict_warped(post, warp_inputs(post.params, Xq))


def predict_warped(post: Posterior, Uq):
    """:func:`predict` at points ``Uq`` already in the kernel's coordinates (those of
    ``post.X``: ``Uq = warp_inputs(post.params, Xq)``); the same as :func:`predict` without
    a warping."""
    p = post.params
    Kq = jnp.where(post.mask[None, :], matern52(p, Uq, post.X), 0)
    # mean from alpha = K^-1 (y - mean); variance amplitude - |L^-1 k*|^2 per query row
    return gp_likelihood.posterior_from_factor(post.chol_inv, Kq.T, jnp.exp(p.log_amplitude), p.mean,
                                               alpha=post.alpha, full_cov=False)


def predict_checked(post: Posterior, Xq) -> Prediction:
    """:func:`predict` with a status: rows of ``Xq`` that are not finite or leave the unit
    cube, and every row when ``post.ok`` is False, are NaN (``Prediction.ok`` False there);
    they are made inert before any arithmetic."""
    valid = in_unit_cube(Xq) & post.ok
    mean, var = predict(post, checks.inert_rows(Xq, valid, 0))
    nan = jnp.asarray(jnp.nan, mean.dtype)
    return Prediction(jnp.where(valid, mean, nan), jnp.where(valid, var, nan))


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


#: Real values whose deviations from their mean are all within ``CONSTANT_ULPS * eps``
#: of their largest magnitude are constant up to rounding (:func:`standardize`).
CONSTANT_ULPS = 4


def _pow2_scale(x):
    """A power of two ``2^(e-1)`` with ``2^(e-1) <= x < 2^e`` for a finite normal ``x > 0``
    (1 for 0 and subnormal ``x``): dividing by it is exact, and it is representable
    whenever ``x`` is."""
    _, e = jnp.frexp(x)
    s = jnp.ldexp(jnp.ones_like(x), e - 1)
    return jnp.where(x >= jnp.finfo(x.dtype).tiny, s, 1)


@jax.jit
def standardize(y, mask) -> Standardized:
    """``(z, mean, std)`` of the masked values (see :func:`jaxstop.gp.standardize`).

    Overflow- and underflow-free: the values are divided by a power of two near their
    largest magnitude (exact), shifted by the first real value (so constant data give
    exactly zero deviations), and the deviations divided by a power of two near their
    largest magnitude before they are squared; the standard deviation is the product of
    the scales and the root mean square. Neither the mean nor the standard deviation can
    exceed the largest magnitude, so nothing overflows.
    """
    dt = y.dtype
    if y.shape[0] == 0:
        return Standardized(y, jnp.zeros((), dt), jnp.ones((), dt))
    y = checks.inert_rows(y, mask, 0)
    count = jnp.sum(mask)
    n = jnp.maximum(count, 1).astype(dt)
    s1 = _pow2_scale(jnp.max(jnp.abs(y)))
    ys = y / s1
    y0 = ys[jnp.argmax(mask)]
    d = jnp.where(mask, ys - y0, 0)
    dm = jnp.sum(d) / n
    dev = jnp.where(mask, d - dm, 0)
    spread = jnp.max(jnp.abs(dev))
    s2 = _pow2_scale(spread)
    w = dev / s2
    rms = jnp.sqrt(jnp.sum(w * w) / n)
    constant = (count < 2) | (spread <= CONSTANT_ULPS * jnp.finfo(dt).eps * jnp.max(jnp.abs(ys)))
    mean = jnp.where(count > 0, s1 * (y0 + dm), 0)
    std = jnp.where(constant, jnp.ones((), dt), s1 * (s2 * rms))
    z = jnp.where(mask & ~constant, w / jnp.where(constant, 1, rms), 0)
    return Standardized(z, mean, std)


def default_init(d: int, dtype, warping: bool = False) -> GPParams:
    """The fit's default start: amplitude 1, lengthscales 0.5, noise 1e-2, mean 0; with
    ``warping`` (static) the identity warping ``a = b = 1``."""
    p = GPParams(
        jnp.zeros((), dtype),
        jnp.full((d,), jnp.log(0.5), dtype),
        jnp.asarray(jnp.log(1e-2), dtype),
        jnp.zeros((), dtype),
    )
    return with_warping(p, warping)


def check_params(p: GPParams, d: int | None, dtype, name: str = "params"):
    """Checks that ``p`` (the argument ``name``) is a :class:`GPParams` for ``d`` inputs
    (``None``: any) of a supported float dtype; returns it in ``dtype`` (``None``: as is).
    Raises ``TypeError`` / ``ValueError`` naming the argument and field."""
    if not isinstance(p, GPParams):
        raise TypeError(f"{name} must be a GPParams (see jaxstop.gp.params), got {type(p).__name__}")
    if (p.log_warp_a is None) != (p.log_warp_b is None):
        raise ValueError(f"{name}.log_warp_a and {name}.log_warp_b must both be arrays (a warping) or both "
                         f"None (none), got one of each")
    p = GPParams(*(None if a is None else checks.float_array(a, f"{name}.{field}")
                   for field, a in zip(GPParams._fields, p)))
    if jnp.ndim(p.log_lengthscales) != 1 or (d is not None and jnp.shape(p.log_lengthscales) != (d,)):
        want = "(d,)" if d is None else f"({d},) to match X with {d} columns"
        raise ValueError(f"{name}.log_lengthscales must have shape {want}, got {jnp.shape(p.log_lengthscales)}")
    for field in ("log_warp_a", "log_warp_b"):
        if p.warped and jnp.shape(getattr(p, field)) != jnp.shape(p.log_lengthscales):
            raise ValueError(f"{name}.{field} must have the shape of {name}.log_lengthscales, "
                             f"{jnp.shape(p.log_lengthscales)}, got {jnp.shape(getattr(p, field))}")
    for field in ("log_amplitude", "log_noise", "mean"):
        if jnp.ndim(getattr(p, field)) != 0:
            raise ValueError(f"{name}.{field} must be a scalar, got shape {jnp.shape(getattr(p, field))}")
    return p if dtype is None else jax.tree_util.tree_map(lambda a: checks.float_array(a, name, dtype), p)
