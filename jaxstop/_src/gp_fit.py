"""ML-II fit of the masked GP of :mod:`jaxstop._src.gp_core`: likelihood, priors, BFGS.

The log marginal likelihood with its analytic gradient (:func:`lml`, a custom VJP: no
autodiff through the Cholesky), the same profiled over the amplitude and the constant
mean (:func:`lml_profiled_scale`) with the priors of :mod:`jaxstop._src.gp_priors`, the raw
parametrisation (log space, in a box: :func:`raw_box`), and the fits: :func:`fit_profiled`
(dense BFGS projected onto the box, one objective evaluation per step) and
:func:`fit_restarts` (several starts, the best wins; optionally an optax optimiser). The
kernel-agnostic pieces (masked solve, likelihood, the trace-and-quadratic gradient
``0.5 tr(W dK)``) come from :mod:`jaxstop._src.gp_likelihood` and the multistart loop from
:mod:`jaxstop._src.optim`, shared with the learning-curve GP of :mod:`jaxstop.bos`; what is
here is the Matérn-5/2 part (its Gram derivatives) and the fits. With an input warping
(:mod:`jaxstop._src.warping`) the likelihoods take the warped inputs; the warping's gradient
flows through their inputs' cotangent. Nothing here validates its arguments:
:mod:`jaxstop.gp` is the public layer.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import optax

from jaxstop._src import gp_core, gp_likelihood, gp_starts, optim, status, warping
from jaxstop._src.gp_priors import (log_prior, log_prior_autogluon, log_prior_lengthscales, log_prior_scale,
                                    log_prior_scale_autogluon, log_prior_warping, prior_kind)
from jaxstop._src.gp_core import GPParams
from jaxstop._src.status import Reason

__all__ = [
    "FitInfo",
    "fit_info",
    "bad_input",
    "lml_parts",
    "lml",
    "log_likelihood",
    "scale_parts",
    "lml_profiled_scale",
    "raw_size",
    "to_raw",
    "from_raw",
    "raw_box",
    "clip_raw",
    "objective_profiled_scale",
    "objective",
    "fit_profiled",
    "fit_restarts",
]

LOG_2PI = gp_likelihood.LOG_2PI
LOG_BOX = 12.0  # |log amplitude|, |log lengthscale|, |log noise| stay within e^12
# fit_profiled with tol > 0 also stops at a rejected step whose predicted decrease (the
# gradient times the step) is at most STALL_EPS * eps * max(|f|, 1) (eps of the dtype):
# the change such a step can make is the objective's rounding. In float32 the gradient's
# own rounding (sums over n points through a Cholesky factor) can exceed a useful tol near
# the optimum, and every later trial would be a rejected step along a rounding direction
STALL_EPS = 16.0


class FitInfo(NamedTuple):
    """What :func:`jaxstop.gp.fit` reports.

    Attributes:
        objective: Final negative log marginal likelihood minus log prior, shape ().
        finite: Whether the objective and every parameter are finite, shape () bool.
        restart: Index of the start that won, shape () int32.
        num_valid: Number of real rows used, shape () int32.
        steps: Objective evaluations the winning start used, shape () int32: at most
            :func:`jaxstop.gp.fit`'s ``steps``, fewer once converged (``tol`` of :func:`jaxstop.gp.fit`,
            ``fit_tol`` of :func:`jaxstop.regret.fit_regret_bound`).
        ok: Whether the fit is usable, shape () bool: the same as ``finite`` (the status
            field every fallible result has; ``finite`` is kept as its old name).
        reason: Why not, an int32 :class:`jaxstop.Reason` code, shape ():
            ``BAD_INPUT`` (a real row of ``X`` or ``y``, or the start, is not finite, or a
            real row of ``X`` leaves the unit cube),
            ``EMPTY`` (no real rows and nothing else identifies the parameters),
            ``NOT_FINITE`` (no start reached a finite objective), ``OK``.
    """

    objective: jax.Array
    finite: jax.Array
    restart: jax.Array
    num_valid: jax.Array
    steps: jax.Array
    ok: jax.Array
    reason: jax.Array


def fit_info(objective, finite, restart, mask, steps, bad_input) -> FitInfo:
    """:class:`FitInfo` with its status: ``ok`` (= ``finite``) is False on bad input."""
    finite = finite & ~bad_input
    empty = ~jnp.any(mask)
    reason = status.first_reason((bad_input, Reason.BAD_INPUT), (empty & ~finite, Reason.EMPTY),
                                 (~finite, Reason.NOT_FINITE))
    return FitInfo(objective, finite, jnp.asarray(restart, jnp.int32), jnp.sum(mask).astype(jnp.int32),
                   jnp.asarray(steps, jnp.int32), finite, reason)


def bad_input(X, y, mask, *params) -> jax.Array:
    """Whether a real row of ``X`` is not finite or leaves the unit cube
    (:func:`jaxstop._src.gp_core.in_unit_cube`), a real ``y`` or a leaf of ``params`` is not
    finite, shape ()."""
    return ~(gp_core.real_inputs_valid(X, mask) & gp_likelihood.real_finite(y, mask) & status.all_finite(params))


def lml_parts(p: GPParams, X, y, mask):
    """Log marginal likelihood and the pieces its gradient needs (one factorisation).
    Padded rows of ``X`` and ``y`` are made inert first."""
    dt = X.dtype
    X, y = gp_likelihood.inert(mask, X, y)
    both = gp_likelihood.real_block(mask)
    # The Matern-5/2 Gram matrix and dK/dr^2 = -(5/6) amp H, H = (1 + sqrt5 r) exp(-sqrt5 r),
    # from one distance matrix and one exp.
    C, H = gp_core.correlation_parts(p.log_lengthscales, X, both)
    Kf = jnp.exp(p.log_amplitude) * C
    K = gp_likelihood.conditioned(Kf, mask, jnp.exp(p.log_noise) + gp_core.base_jitter(p, dt))
    Kinv, _, r, alpha, logdet, n, _ = gp_likelihood.masked_solve(K, y, mask, p.mean)
    value = gp_likelihood.log_marginal(r, alpha, logdet, n)
    W = gp_likelihood.lml_weights(alpha, Kinv, mask)
    return value, (Kf, H, W, alpha)


@jax.custom_vjp
def lml(p: GPParams, X, y, mask):
    """Log marginal likelihood with an analytic gradient (no autodiff through the
    Cholesky, whose transposed triangular solves are slow on CPU)."""
    return lml_parts(p, X, y, mask)[0]


def lml_fwd(p, X, y, mask):
    X, y = gp_likelihood.inert(mask, X, y)  # the backward pass reads X: inert padded rows
    value, (Kf, H, W, alpha) = lml_parts(p, X, y, mask)
    return value, (p, X, Kf, H, W, alpha)


def lml_bwd(res, g):
    # d lml / d theta = 0.5 tr(W dK/dtheta), W = alpha alpha^T - K^-1 (real block):
    # dK/d log amplitude = Kf, dK/d log noise = noise I, d lml / d mean = sum(alpha).
    p, X, Kf, H, W, alpha = res
    amp = jnp.exp(p.log_amplitude)
    inv_ls2 = jnp.exp(-2 * p.log_lengthscales)
    d_amp = gp_likelihood.lml_grad(W, Kf)
    d_noise = gp_likelihood.lml_grad_diag(W, jnp.exp(p.log_noise))
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


lml.defvjp(lml_fwd, lml_bwd)


def log_likelihood(p: GPParams, X, y, mask):
    """:func:`lml` of the inputs ``X`` (see :func:`jaxstop.gp.log_marginal_likelihood`):
    padded rows made inert, then warped when ``p`` carries a warping
    (:func:`gp_core.warp_inputs`; the warping parameters' gradient flows through the
    inputs' cotangent of :func:`lml`)."""
    X = gp_core.warp_inputs(p, gp_likelihood.inert(mask, X))
    return lml(gp_core.unwarped(p), X, y, mask)


def scale_parts(p: GPParams, X, y, mask, fit_mean: bool, use_prior: bool):
    """Log marginal likelihood (plus the amplitude and noise priors) profiled over the amplitude.

    The covariance is written ``a (C + g I)`` with ``C`` the unit-amplitude Matern-5/2
    correlation and ``g = noise / a``; ``p.log_noise`` holds ``log g`` and
    ``p.log_amplitude`` is ignored. With ``r = y - m`` and ``q = r' (C + g I)^-1 r``, the
    log likelihood is ``-q / (2a) - (n/2) log a - log|C + g I|^(1/2) - (n/2) log 2 pi``;
    its maximiser over ``a`` is ``q / n`` and, with the priors of
    :func:`~jaxstop._src.gp_priors.log_prior`
    (``log a - a + 0.1 log(a g) - 30 a g``), the positive root of
    ``(1 + 30 g) a^2 + (n/2 - 1.1) a - q/2 = 0``; with AutoGluon's priors
    (``use_prior="autogluon"``, :func:`~jaxstop._src.gp_priors.log_prior_autogluon`) the root of
    ``q / (2a) - n/2 - 1.9 - log a - a g = 0``, by Newton steps in ``log a``. ``use_prior``
    is False, True (``"optuna"``) or one of :data:`jaxstop._src.gp_priors.PRIORS`. The mean ``m`` is ``p.mean`` or, with
    ``fit_mean``, its generalised-least-squares estimate (the same for every ``a``); with
    AutoGluon's priors, which put Normal(0, 1) on it (``- m^2 / 2`` in the value), its
    maximiser ``1' S^-1 y / (1' S^-1 1 + a)`` jointly with ``a`` (alternating steps).
    ``log a`` is kept in gp's box ``[-12, 12]`` (``q = 0`` for constant ``y``).

    Returns ``(value, log_a, mean, pieces, factor)``, ``pieces`` as :func:`lml_parts` gives
    them for the covariance at ``a`` and ``factor`` the Cholesky factor of ``C + g I`` (plus
    the base jitter at unit amplitude) and its inverse (:func:`gp_core.posterior_from_scaled_factor`).
    """
    dt = X.dtype
    X, y = gp_likelihood.inert(mask, X, y)
    both = gp_likelihood.real_block(mask)
    Cf, H = gp_core.correlation_parts(p.log_lengthscales, X, both)
    ratio = jnp.exp(p.log_noise)
    jitter = gp_core.base_jitter(p._replace(log_amplitude=jnp.zeros_like(ratio)), dt)
    S = gp_likelihood.conditioned(Cf, mask, ratio + jitter)
    kind = prior_kind(use_prior)
    Cinv, mean, r, beta, logdet, n, factor = gp_likelihood.masked_solve(S, y, mask, p.mean, fit_mean)
    q = jnp.dot(r, beta)
    if kind == "autogluon":
        # the maximiser over u = log a of -q / (2a) - (n/2) u - u - u^2/2 - 0.9 (u + log g) - a g:
        # its derivative q / (2a) - n/2 - 1.9 - u - a g decreases strictly in u (second
        # derivative -q / (2a) - 1 - a g < 0), so Newton's method from the no-prior
        # maximiser log(q / n) converges to the one root; 16 steps reach it to rounding
        def newton(u, q, steps):
            for _ in range(steps):
                e = jnp.exp(u)
                u = u - (0.5 * q / e - 0.5 * n - 1.9 - u - e * ratio) / (-0.5 * q / e - 1.0 - e * ratio)
            return u

        u = newton(jnp.log(jnp.maximum(q / jnp.maximum(n, 1), jnp.finfo(dt).tiny)), q, 16)
        if fit_mean:
            # with AutoGluon's Normal(0, 1) on the mean, its maximiser for amplitude a is
            # m(a) = b / (c + a) (b = 1' S^-1 y, c = 1' S^-1 1; the GLS estimate b / c as a -> 0),
            # where q(m) = y' S^-1 y - 2 m b + m^2 c: ascent in turn over m and u (each concave
            # with the other fixed) from the GLS mean and its amplitude
            ones = jnp.ones_like(y) if mask is None else mask.astype(dt)
            s1 = jnp.where(ones > 0, Cinv @ ones, 0)
            c1, b1 = jnp.dot(s1, ones), jnp.dot(s1, y)
            q0 = jnp.dot(y, Cinv @ y)
            for _ in range(12):
                mean = b1 / (c1 + jnp.exp(u))
                u = newton(u, jnp.maximum(q0 - 2 * mean * b1 + mean * mean * c1, 0), 4)
            r = jnp.where(ones > 0, y - mean, 0)
            beta = jnp.where(ones > 0, Cinv @ r, 0)
            q = jnp.dot(r, beta)
        a = jnp.exp(u)
    elif kind == "optuna":
        c = 1 + 30 * ratio
        b = 0.5 * n - 1.1
        root = jnp.sqrt(b * b + 2 * c * q)
        # the two algebraically equal forms of the positive root, each free of cancellation
        a = jnp.where(b > 0, q / (root + jnp.where(b > 0, b, 1)), (root - b) / (2 * c))
    else:
        a = q / n
    log_a = jnp.clip(jnp.log(a), -LOG_BOX, LOG_BOX)
    a = jnp.exp(log_a)
    value = -0.5 * q / a - 0.5 * n * log_a - logdet - 0.5 * n * LOG_2PI
    if kind == "optuna":
        value = value + log_prior_scale(log_a, log_a + p.log_noise)
    elif kind == "autogluon":
        value = value + log_prior_scale_autogluon(log_a, log_a + p.log_noise) - 0.5 * mean * mean
    alpha = beta / a
    W = jnp.where(both, (alpha[:, None] * beta[None, :] - Cinv) / a, 0)
    return value, log_a, mean, (a * Cf, H, W, alpha), factor


@partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def lml_profiled_scale(p: GPParams, X, y, mask, fit_mean: bool, use_prior: bool):
    """``(value, log a*, m, factor)`` of :func:`scale_parts`, differentiable in ``p``
    (lengthscales, ``log g``, and the mean unless profiled), ``X`` and ``y``.

    ``value`` is the maximum over ``a`` (and ``m`` with ``fit_mean``), so its total
    derivative is the partial one at ``a*`` (envelope theorem): :func:`lml_bwd` for the
    covariance at ``a*``, where ``d/d log g`` at fixed ``a`` is ``d/d log noise``, plus the
    noise prior's ``0.1 - 30 a g``. ``log a*``, ``m`` and ``factor`` are returned for
    reading only (no derivative flows through them).
    """
    value, log_a, mean, _, factor = scale_parts(p, X, y, mask, fit_mean, use_prior)
    return value, log_a, mean, factor


def lml_profiled_scale_fwd(p, X, y, mask, fit_mean, use_prior):
    X, y = gp_likelihood.inert(mask, X, y)  # the backward pass reads X: inert padded rows
    value, log_a, mean, (Kf, H, W, alpha), factor = scale_parts(p, X, y, mask, fit_mean, use_prior)
    p_cov = GPParams(log_a, p.log_lengthscales, log_a + p.log_noise, mean)
    return (value, log_a, mean, factor), (p_cov, X, Kf, H, W, alpha)


def lml_profiled_scale_bwd(fit_mean, use_prior, res, g):
    dp, d_X, d_y, _ = lml_bwd(res, g[0])
    d_log_ratio = dp.log_noise
    kind = prior_kind(use_prior)
    if kind == "optuna":
        p_cov = res[0]
        d_log_ratio = d_log_ratio + g[0] * (0.1 - 30.0 * jnp.exp(p_cov.log_noise))
    elif kind == "autogluon":
        p_cov = res[0]
        d_log_ratio = d_log_ratio + g[0] * (-0.9 - jnp.exp(p_cov.log_noise))
    zero = jnp.zeros_like(dp.log_amplitude)
    d_mean = dp.mean
    if kind == "autogluon":  # Normal(0, 1) on the mean
        d_mean = d_mean - g[0] * res[0].mean
    d_mean = zero if fit_mean else d_mean
    return GPParams(zero, dp.log_lengthscales, d_log_ratio, d_mean), d_X, d_y, None


lml_profiled_scale.defvjp(lml_profiled_scale_fwd, lml_profiled_scale_bwd)


def raw_size(d: int, warping: bool = False) -> int:
    """Length of the fit's raw parameter vector (``ravel_pytree`` order: log amplitude,
    ``d`` log lengthscales, log noise, mean, then ``d`` log a and ``d`` log b with
    ``warping``): the side of :func:`fit_profiled`'s ``inv_hessian``."""
    return d + 3 + (2 * d if warping else 0)


def to_raw(p: GPParams, min_noise):
    # noise = min_noise + exp(raw_noise): a smooth floor keeps the Cholesky stable.
    excess = jnp.maximum(jnp.exp(p.log_noise) - min_noise, min_noise * 1e-3)
    return p._replace(log_noise=jnp.log(excess))


def from_raw(raw: GPParams, min_noise):
    return raw._replace(log_noise=jnp.logaddexp(raw.log_noise, jnp.log(min_noise)))


def raw_box(raw: GPParams) -> tuple[GPParams, GPParams]:
    """Lower and upper bounds of the raw parameters, pytrees shaped like ``raw``: log amplitude
    and log lengthscales in ``[-12, 12]``, raw log noise in ``[-36, 12]``, the warping's ``log a``
    and ``log b`` in ``[-log 4, log 4]`` (:data:`jaxstop._src.warping.LOG_BOX`), the mean
    unbounded. The one place the box is written: :func:`clip_raw` and the fits' projections."""
    def side(sign):
        def full(a, v):
            return None if a is None else jnp.full(jnp.shape(a), sign * v, jnp.result_type(a))
        w = warping.LOG_BOX
        return GPParams(full(raw.log_amplitude, LOG_BOX), full(raw.log_lengthscales, LOG_BOX),
                        full(raw.log_noise, 3 * LOG_BOX if sign < 0 else LOG_BOX), full(raw.mean, float("inf")),
                        full(raw.log_warp_a, w), full(raw.log_warp_b, w))
    return side(-1.0), side(1.0)


def clip_raw(raw: GPParams) -> GPParams:
    """``raw`` clipped to :func:`raw_box`; differentiable as the identity on the closed box
    (its faces included: an iterate on a face sees the one-sided gradient from inside), 0 outside."""
    def clip(x, lo, hi):
        return jnp.where((x >= lo) & (x <= hi), x, jnp.clip(x, lo, hi))
    return jax.tree_util.tree_map(clip, raw, *raw_box(raw))


def objective_profiled_scale(raw, X, y, mask, min_noise, use_prior, fit_mean, mean0):
    """``(objective, (params, factor))`` with the amplitude profiled out (:func:`lml_profiled_scale`).

    ``raw.log_noise`` is the raw noise-to-amplitude ratio ``g`` (floored at ``min_noise``
    like the noise of :func:`objective`), ``raw.log_amplitude`` is ignored, and the mean
    is profiled (``fit_mean``) or ``mean0``. ``params`` are the hyperparameters in gp's
    usual form (amplitude ``a*``, noise ``a* g``); ``factor`` conditions the GP on them
    without another factorisation (:func:`gp_core.posterior_from_scaled_factor`). The minimiser is
    that of :func:`objective` when the floor is not active. With a warping in ``raw``
    the inputs ``X`` (inert) are warped first and its parameters' gradient flows through
    the inputs' cotangent of :func:`lml_profiled_scale`.
    """
    raw = clip_raw(raw)
    p = from_raw(raw, min_noise)._replace(mean=jnp.asarray(mean0, X.dtype))
    U = gp_core.warp_inputs(p, X)
    value, log_a, mean, factor = lml_profiled_scale(gp_core.unwarped(p), U, y, mask, fit_mean, use_prior)
    kind = prior_kind(use_prior)
    if kind == "optuna":
        value = value + log_prior_lengthscales(p) + log_prior_warping(p)
    elif kind == "autogluon":
        value = value + log_prior_warping(p)  # flat on the lengthscales
    val = -value
    big = jnp.asarray(1e10, val.dtype)
    out = p._replace(log_amplitude=log_a, log_noise=log_a + p.log_noise, mean=mean)
    return jnp.where(jnp.isfinite(val), val, big), jax.lax.stop_gradient((out, factor))


def objective(raw, X, y, mask, min_noise, use_prior, fit_mean, mean0):
    raw = clip_raw(raw)
    p = from_raw(raw, min_noise)
    if not fit_mean:
        p = p._replace(mean=mean0)
    val = -log_likelihood(p, X, y, mask)
    kind = prior_kind(use_prior)
    if kind == "optuna":
        val = val - log_prior(p)
    elif kind == "autogluon":
        val = val - log_prior_autogluon(p)
    big = jnp.asarray(1e10, val.dtype)
    return jnp.where(jnp.isfinite(val), val, big)


def fit_profiled(X, z, mask, init: GPParams, min_noise, *, steps: int, fit_mean: bool,
                 use_prior: bool = True, tol: float = 0.0, max_step: float = 1.0, inv_hessian=None,
                 warping: bool = False, joint: bool = False):
    """ML-II fit with a bounded cost: at most ``steps`` objective evaluations (the first at ``init``).

    Dense BFGS on the inverse Hessian of the objective (negative log
    marginal likelihood minus the log prior, with its analytic gradient) in gp's raw
    parameters, projected onto their box (:func:`raw_box`): the iterate, the start
    included, stays in the box, where :func:`clip_raw` leaves the objective's gradient whole.
    Each step evaluates one trial point, ``theta + t p`` (``p`` the quasi-Newton direction,
    capped at ``max_step`` per coordinate in log space) projected onto the box, and accepts
    it under the Armijo condition on the step actually taken, which the BFGS update uses
    too. A coordinate on a face of the box with its gradient pointing out is held there
    (out of ``p``, whose free part uses the inverse Hessian's free block: Kim, Sra & Dhillon,
    2010); a step the projection turns uphill becomes the projected gradient step. The
    scale ``t`` doubles after an acceptance (up to 1) and shrinks 4x after a rejection.
    There is no inner line-search loop: a step is one evaluation. The fit stops early once
    the largest component of the projected gradient at the accepted point (the objective's
    gradient, 0 for held coordinates) is at most ``tol`` (``0``: always ``steps``), or at a
    rejected step whose predicted decrease is within the objective's rounding
    (:data:`STALL_EPS`); under
    ``vmap`` a batch runs until its slowest study stops. ``FitInfo.steps`` reports the
    evaluations used.

    The amplitude and, with ``fit_mean``, the constant mean are profiled out in closed
    form for the current lengthscales and noise-to-amplitude ratio
    (:func:`lml_profiled_scale`: the mean's generalised-least-squares
    estimate, the amplitude's maximiser under its Gamma prior), so the steps move the
    lengthscales and that ratio only; without ``fit_mean`` the mean stays ``init.mean``.
    ``min_noise`` floors the ratio (on the standardised scale the amplitude is of order
    1). The minimiser is that of the joint objective where the floor is not active; the
    steps see fewer dimensions and no amplitude-lengthscale coupling, and reach a given
    objective gap in fewer steps, far more reliably from a cold start.

    ``joint`` (static) fits the amplitude and the mean (``fit_mean``) with the rest instead (:func:`objective`,
    as AutoGluon 0.1 does), ``min_noise`` flooring the noise variance itself, not its ratio to the amplitude:
    where a prior pushes the noise onto the floor (AutoGluon's Gamma(0.1, 1)) the optima differ, the ratio
    floor trading amplitude for lower noise. ``post`` is then conditioned afresh.

    ``warping`` (static) fits an input warping with the rest (:mod:`jaxstop._src.warping`: ``log a``,
    ``log b`` per dimension in ``[-log 4, log 4]``, their prior with ``use_prior``), from ``init``'s
    or the identity (:func:`gp_core.with_warping`).

    ``inv_hessian`` warm-starts the steps' curvature: the inverse-Hessian approximation a
    previous fit returned (in the coordinates of ``ravel_pytree`` of gp's raw parameters,
    shape ``(d + 3, d + 3)``, or ``(3 d + 3, 3 d + 3)`` with ``warping``: ``log a`` and
    ``log b`` come last). Its first step is then a quasi-Newton step on that curvature
    instead of a gradient step; a matrix that is not finite, not symmetric or has a
    non-positive diagonal (zeros: no curvature yet) means a cold start (the identity,
    scaled at the first update).

    Returns ``(params, info, post, inv_hessian)``: ``post`` is the GP conditioned at
    ``params``, built from the accepted evaluation's Cholesky factor (no factorisation
    after the fit); ``inv_hessian`` the final BFGS approximation, a warm start for the
    next fit of the same study. When the accepted factor is not accurate for the dtype
    (:func:`jaxstop._src.gp_likelihood.factor_accurate`) ``post`` is conditioned afresh with
    jitter (:func:`gp_core.posterior_from_scaled_factor`).

    Padded rows of ``X`` and ``z`` are made inert first; a non-finite value on a real row
    or in ``init`` gives ``info.ok`` False with ``Reason.BAD_INPUT``.
    """
    dt = X.dtype
    init = gp_core.with_warping(init, warping)
    bad = bad_input(X, z, mask, init)
    X, z = gp_likelihood.inert(mask, X, z)
    min_noise = jnp.asarray(min_noise, dt)
    mean0 = jnp.asarray(init.mean, dt)
    m = 0 if joint else X.shape[0]  # the joint fit carries no factor (its posterior is built afresh)
    no_factor = (jnp.full((m, m), jnp.nan, dt), jnp.full((m, m), jnp.nan, dt), jnp.asarray(False))
    if joint:
        start = init

        def obj(raw):  # the full hyperparameters ride along, as the profiled objective's do
            p = from_raw(clip_raw(raw), min_noise)
            p = p if fit_mean else p._replace(mean=mean0)
            value = objective(raw, X, z, mask, min_noise, use_prior, fit_mean, mean0)
            return value, jax.lax.stop_gradient((p, no_factor))
    else:
        start = init._replace(log_noise=init.log_noise - init.log_amplitude)
        obj = partial(objective_profiled_scale, X=X, y=z, mask=mask, min_noise=min_noise,
                      use_prior=use_prior, fit_mean=fit_mean, mean0=mean0)
    raw0 = to_raw(start, min_noise)
    theta0, unravel = jax.flatten_util.ravel_pytree(raw0)

    def value_and_grad(theta):
        (f, q), g = jax.value_and_grad(lambda v: obj(unravel(v)), has_aux=True)(theta)
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

    lo, hi = (jax.flatten_util.ravel_pytree(b)[0] for b in raw_box(raw0))

    def held(theta, g):  # on a face of the box with the objective falling outwards
        return ((theta <= lo) & (g > 0)) | ((theta >= hi) & (g < 0))

    def step(carry):
        theta, params, f, g, H, t, scaled, _, i = carry
        gf = jnp.where(held(theta, g), 0, g)
        p = jnp.where(held(theta, g), 0, -H @ gf)
        p = jnp.where(jnp.dot(g, p) < 0, p, -gf)

        def trial(p):  # theta + s projected onto the box, and the step actually taken
            cap = jnp.minimum(1, max_step / jnp.maximum(jnp.max(jnp.abs(p)), eps))
            s = t * cap * p
            cand = jnp.clip(theta + s, lo, hi)
            return cand, jnp.where(cand == theta + s, s, cand - theta)

        # a projection that bends the step uphill: the projected gradient step instead
        (cand, s), (cand_g, s_g) = trial(p), trial(-gf)
        bent = jnp.dot(g, s) >= 0
        cand, s = jnp.where(bent, cand_g, cand), jnp.where(bent, s_g, s)
        fc, qc, gc = value_and_grad(cand)
        accept = jnp.isfinite(fc) & ((fc <= f + 1e-4 * jnp.dot(g, s)) | ~jnp.isfinite(f))
        # a rejected step whose predicted decrease was already below the objective's
        # rounding: no shorter trial can be accepted on its merits, so the fit is done
        stalled = (tol > 0) & ~accept & jnp.isfinite(f) & (
            jnp.abs(jnp.dot(g, s)) <= STALL_EPS * eps * jnp.maximum(jnp.abs(f), 1))
        y = gc - g
        sy = jnp.dot(s, y)
        # no update from the first step (no gradient yet; s is the start's projection)
        good = accept & jnp.isfinite(f) & (sy > eps * jnp.sqrt(jnp.dot(s, s) * jnp.dot(y, y))) & (sy > 0)
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
        return theta, params, f, g, H, t, scaled, stalled, i + 1

    def go_on(carry):
        theta, _, f, g, _, _, _, stalled, i = carry
        converged = jnp.isfinite(f) & (jnp.max(jnp.abs(jnp.where(held(theta, g), 0, g))) <= tol)
        return (i < steps) & ~converged & ~stalled

    # The first step evaluates the start itself, projected onto the box (f = inf, g = 0:
    # always accepted), so the objective is traced once. Profiled-out coordinates of
    # theta (the mean, the amplitude) have gradient 0 and never move; the objective
    # returns the full hyperparameters and their Cholesky factor, carried beside theta.
    params0 = (jax.tree_util.tree_map(lambda a: jnp.asarray(a, dt), init), no_factor)
    carry0 = (theta0, params0, jnp.asarray(jnp.inf, dt), jnp.zeros_like(theta0), H0,
              jnp.ones((), dt), scaled0, jnp.asarray(False), jnp.zeros((), jnp.int32))
    _, (p, factor), f, _, H, _, _, _, used = jax.lax.while_loop(go_on, step, carry0)
    finite = jnp.isfinite(f) & (f < 1e10) & jnp.all(
        jnp.stack([jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves(p)]))
    info = fit_info(f, finite, 0, mask, used, bad)
    if joint:
        post = gp_core.posterior(p, X, z, mask)
    else:
        post = gp_core.posterior_from_scaled_factor(p, X, z, mask, factor)
    reason = jnp.where(post.ok & ~info.ok, info.reason, post.reason)
    return p, info, post._replace(ok=post.ok & info.ok, reason=reason), H


def first_order(obj, optimizer, theta, *, steps):
    """Fixed-step loop for a user-given optax transformation (e.g. ``optax.adam``) on the raw
    parameters ``theta``, each iterate (the start included) projected onto their box by
    :func:`clip_raw` (:func:`raw_box`). Returns the last iterate and its objective."""
    vg = jax.value_and_grad(obj)
    theta = clip_raw(theta)
    state = optimizer.init(theta)

    def step(carry, _):
        theta, state = carry
        _, grad = vg(theta)
        updates, state = optimizer.update(grad, state, theta)
        return (clip_raw(optax.apply_updates(theta, updates)), state), None

    (theta, _), _ = jax.lax.scan(step, (theta, state), None, length=steps)
    return theta, obj(theta)


def fit_restarts(key, X, y, mask, init, min_noise, tol, *, steps, num_restarts, fit_mean, use_prior, optimizer,
                 warping: bool = False):
    """:func:`jaxstop.gp.fit` without the argument checks: the best of ``num_restarts`` starts
    (:func:`jaxstop._src.gp_starts.uniform_starts`; the start ``init`` with its own warping,
    or the identity)."""
    dtype = X.dtype
    init = gp_core.with_warping(init, warping)
    bad = bad_input(X, y, mask, init)
    X, y = gp_likelihood.inert(mask, X, y)
    min_noise = jnp.asarray(min_noise, dtype)
    starts = gp_starts.uniform_starts(key, init, num_restarts, X.shape[1], dtype)

    def run_one(start):
        if optimizer is None:
            p, info, _, _ = fit_profiled(X, y, mask, start, min_noise, steps=steps, fit_mean=fit_mean,
                                         use_prior=use_prior, tol=tol, warping=warping)
            return p, info.objective, info.steps
        obj = partial(objective, X=X, y=y, mask=mask, min_noise=min_noise,
                      use_prior=use_prior, fit_mean=fit_mean, mean0=start.mean)
        theta, value = first_order(obj, optimizer, to_raw(start, min_noise), steps=steps)
        p = from_raw(theta, min_noise)
        if not fit_mean:
            p = p._replace(mean=start.mean)
        return p, value, jnp.asarray(steps, jnp.int32)

    # If no start gives a usable fit (objective below the 1e10 of a failed one), the first
    # start comes back (finite by construction), marked not finite.
    p, value, used, best, any_good = optim.multistart(run_one, starts, max_value=1e10, fallback=starts)
    finite = any_good & jnp.isfinite(value) & (value < 1e10)
    return p, fit_info(value, finite, best, mask, used, bad)
