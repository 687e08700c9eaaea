"""The kernel-agnostic masked GP: Gram conditioning, likelihood, gradient, posterior.

Everything here takes matrices, not kernels: the Gram matrix of the real rows, the
derivatives of the Gram matrix with respect to the hyperparameters, the cross-covariance
to query points. Each GP of jaxstop brings its own kernel and kernel derivatives and
calls these functions: the Matérn-5/2 GP of :mod:`jaxstop._src.gp_core` /
:mod:`jaxstop._src.gp_fit` (behind :mod:`jaxstop.gp`, :mod:`jaxstop.regret` and the
policies) and the learning-curve GP of :mod:`jaxstop.bos` (exponential-decay kernel).

``mask`` marks the real rows of a fixed-capacity matrix (padded rows and columns have
exactly no effect: the padded block of the conditioned matrix is the identity) or is
``None`` when every row is real; the number of real rows is then a Python int. Padded
rows are made inert before any arithmetic (:func:`inert`, the one mechanism: a NaN, inf
or 1e30 on a padded row of a Gram matrix, of ``y`` or of the inputs a caller builds them
from never reaches a sum, a factor or a gradient).
Where the two GPs compute the same quantity in two ways (the jitter policy, a whitened
or a solved posterior mean, the matmul precision) the choice is a parameter, so that
each keeps its numbers. Nothing here validates its arguments.

The formulas are those of Rasmussen & Williams (2006): the log marginal likelihood of
Eq. 2.30, its gradient of Eq. 5.9,
``d lml / d theta_j = 0.5 tr((a a^T - K^-1) dK/dtheta_j)`` with ``a = K^-1 (y - m)``
(the trace term ``-0.5 tr(K^-1 dK)`` and the quadratic term ``0.5 a^T dK a``), and the
predictive moments of Eqs. 2.23-2.24.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks, linalg

__all__ = [
    "LOG_2PI",
    "MAX_JITTER_TRIES",
    "ACCURACY",
    "inert",
    "real_block",
    "real_finite",
    "pivot_floor",
    "factor_accurate",
    "conditioned",
    "factor",
    "masked_solve",
    "log_marginal",
    "lml_weights",
    "lml_grad",
    "lml_grad_log",
    "lml_grad_diag",
    "solve_from_inverse",
    "posterior_from_factor",
]

LOG_2PI = float(np.log(2.0 * np.pi))
MAX_JITTER_TRIES = 6
#: A factor is accurate when ``kappa eps <= ACCURACY`` for the condition estimate
#: ``kappa = ||K||_inf / min_i L_ii^2`` (see :func:`factor_accurate`).
ACCURACY = 1.0 / 64.0


def inert(mask, *arrays):
    """``arrays`` with their padded rows (``mask`` False) replaced by 0 before any arithmetic
    (:func:`jaxstop._src.checks.inert_rows`); unchanged when ``mask`` is ``None``. Returns
    one array for one argument, else a tuple."""
    out = tuple(a if mask is None else checks.inert_rows(a, mask, 0) for a in arrays)
    return out[0] if len(out) == 1 else out


def real_block(mask):
    """The real block of an (n, n) matrix, ``mask[:, None] & mask[None, :]``; a noise-free
    Gram matrix ``Kf`` is ``jnp.where(real_block(mask), k(X, X), 0)``."""
    return mask[:, None] & mask[None, :]


def real_finite(x, mask):
    """Whether every entry of ``x`` on the real rows (``mask``; ``None``: all) is finite, shape ()."""
    ok = jnp.isfinite(x)
    if mask is not None:
        ok = ok | ~jnp.asarray(mask, bool).reshape(mask.shape + (1,) * (x.ndim - mask.ndim))
    return jnp.all(ok)


def conditioned(Kf, mask, diag):
    """The matrix a GP is conditioned on: ``K = Kf + diag(d)`` with ``d = diag`` on the real
    rows and 1 on the padded ones (their block is then the identity).

    Args:
        Kf: Noise-free Gram matrix, shape (n, n); whatever it holds off the real block
            (:func:`real_block`), NaN included, is replaced by 0 first.
        mask: Real rows, shape (n,) bool, or ``None`` (all real).
        diag: What the real rows add on the diagonal (noise, jitter), scalar or (n,).
    """
    if mask is None:
        return Kf + jnp.diag(jnp.broadcast_to(diag, Kf.shape[:1]).astype(Kf.dtype))
    Kf = jnp.where(real_block(mask), Kf, 0)
    return Kf + jnp.diag(jnp.where(mask, diag, 1))


def pivot_floor(K, mask):
    """The smallest pivot ``L_ii^2`` an accurate factor of ``K`` may have:
    ``eps ||K||_inf / ACCURACY`` over the real block (``||K||_inf``, the largest absolute
    row sum, bounds the largest eigenvalue)."""
    A = jnp.abs(K) if mask is None else jnp.where(real_block(mask), jnp.abs(K), 0)
    return jnp.finfo(K.dtype).eps * jnp.max(jnp.sum(A, axis=1), initial=0) / ACCURACY


def factor_accurate(L, K, mask):
    """Whether the Cholesky factor ``L`` of ``K`` carries the solution to useful accuracy.

    The pivots ``L_ii^2`` are the conditional variances of the rows given the earlier
    ones; the smallest bounds the smallest eigenvalue from above, and ``||K||_inf`` the
    largest from above, so ``kappa = ||K||_inf / min L_ii^2`` estimates the condition
    number (exact for repeated inputs). A backward-stable factorisation loses about
    ``kappa eps`` in relative accuracy; the factor is accurate when that is at most
    :data:`ACCURACY`, i.e. every real pivot is at least :func:`pivot_floor`. A factor
    that is not finite is not accurate.
    """
    piv = jnp.square(jnp.diagonal(L))
    if mask is not None:
        piv = jnp.where(mask, piv, jnp.inf)
    return jnp.all(jnp.isfinite(L)) & (jnp.min(piv, initial=jnp.inf) >= pivot_floor(K, mask))


def factor(K, mask, jitter0, *, max_tries: int = MAX_JITTER_TRIES):
    """Jittered Cholesky factor of ``K``: ``(L, extra, ok)``.

    A first try without extra jitter; then, up to ``max_tries`` more, extra diagonal
    jitter on the real rows until the factor is finite and accurate
    (:func:`factor_accurate`): after a factorisation that failed (not finite)
    ``jitter0 * 100**k`` at try ``k``, after a finite but inaccurate one the jitter so far
    plus ``2 pivot_floor(K)`` (adding ``t`` to the diagonal raises every pivot by at least
    ``t``, so one such step is usually enough and the jitter stays the least the dtype
    needs). ``extra`` is the jitter that was added, ``ok`` whether the last factor is
    finite and accurate. ``max_tries=0`` (static) is a single plain factorisation, no loop.
    Differentiable in forward and reverse mode: ``L`` has the derivative of the Cholesky
    factor of ``K + extra I`` with ``extra`` held fixed (the loop itself is not differentiated).
    """
    if max_tries == 0:
        L = linalg.cholesky(K)
        return L, jnp.zeros((), K.dtype), factor_accurate(L, K, mask)
    K_in, K, jitter0 = K, jax.lax.stop_gradient(K), jax.lax.stop_gradient(jitter0)
    real = jnp.ones(K.shape[:1], bool) if mask is None else mask
    floor = pivot_floor(K, mask)

    def cond(c):
        return (~c[2]) & (c[3] <= max_tries)

    def body(c):
        L_prev, extra_prev, _, k = c
        ladder = jitter0 * jnp.asarray(100.0, K.dtype) ** k.astype(K.dtype)
        finite_prev = jnp.all(jnp.isfinite(L_prev))
        grown = jnp.where(finite_prev, extra_prev + 2 * floor, jnp.maximum(ladder, 100 * extra_prev))
        extra = jnp.where(k == 0, 0, grown)
        Kj = K + jnp.diag(jnp.where(real, extra, 0))
        L = linalg.cholesky(Kj)
        return L, extra, factor_accurate(L, Kj, mask), k + 1

    init = (jnp.full_like(K, jnp.nan), jnp.zeros((), K.dtype), jnp.asarray(False), jnp.asarray(0, jnp.int32))
    L, extra, ok, _ = jax.lax.while_loop(cond, body, init)
    return linalg.cholesky_of(K_in + jnp.diag(jnp.where(real, extra, 0)), L), extra, ok


def masked_solve(S, y, mask, mean, profile_mean: bool = False, *, precision=None):
    """One factorisation of the conditioned matrix ``S`` (see :func:`conditioned`) and what
    the likelihood needs from it.

    Returns ``(S^-1, mean, r, v, logdet, n, (L, L^-1, accurate))``: ``r = y - mean`` and
    ``v = S^-1 r`` (zero on padded rows), ``logdet = log|S|^(1/2)`` over the real
    rows, ``n`` their number (a Python int when ``mask`` is ``None``). With
    ``profile_mean`` the mean is not ``mean`` but its maximiser, the generalised
    least-squares estimate ``1' S^-1 y / 1' S^-1 1`` (Rasmussen & Williams, Eq. 2.42
    with a flat prior on the mean); with no real rows it stays ``mean``. No jitter:
    a failed factorisation gives non-finite values. ``S`` is built by :func:`conditioned`
    (padded block: the identity); ``y`` on padded rows is never read (:func:`inert`);
    ``accurate`` is :func:`factor_accurate` of ``L``.
    """
    dt = S.dtype
    y = inert(mask, y)
    L = linalg.cholesky(S)
    Linv, Sinv = linalg.inv_from_cholesky(L)
    mm = lambda a, b: jnp.matmul(a, b, precision=precision)  # noqa: E731
    if mask is None:
        if profile_mean:
            ones = jnp.ones(y.shape, dt)
            s1 = mm(Sinv, ones)
            den = jnp.dot(s1, ones, precision=precision)
            mean = jnp.where(den > 0, jnp.dot(s1, y, precision=precision) / jnp.where(den > 0, den, 1), mean)
        r = y - mean
        v = mm(Sinv, r)
        logdet = jnp.sum(jnp.log(jnp.diagonal(L)))
        return Sinv, mean, r, v, logdet, y.shape[0], (L, Linv, factor_accurate(L, S, None))
    if profile_mean:
        ones = mask.astype(dt)
        s1 = mm(Sinv, ones)
        den = jnp.dot(s1, ones, precision=precision)
        mean = jnp.where(den > 0, jnp.dot(s1, jnp.where(mask, y, 0), precision=precision)
                         / jnp.where(den > 0, den, 1), mean)
    r = jnp.where(mask, y - mean, 0)
    v = jnp.where(mask, mm(Sinv, r), 0)
    logdet = jnp.sum(jnp.where(mask, jnp.log(jnp.diagonal(L)), 0))
    return Sinv, mean, r, v, logdet, jnp.sum(mask).astype(dt), (L, Linv, factor_accurate(L, S, mask))


def log_marginal(r, v, logdet, n, *, precision=None):
    """``log N(r | 0, S) = -r' S^-1 r / 2 - log|S|^(1/2) - (n/2) log 2 pi`` from
    :func:`masked_solve`'s ``r``, ``v = S^-1 r``, ``logdet`` and ``n``."""
    return -0.5 * jnp.dot(r, v, precision=precision) - logdet - 0.5 * n * LOG_2PI


def lml_weights(v, Sinv, mask):
    """``W = v v^T - S^-1`` on the real block (zero elsewhere): ``d lml / d theta =
    0.5 tr(W dS/dtheta)`` for every hyperparameter ``theta`` of ``S``."""
    W = v[:, None] * v[None, :] - Sinv
    return W if mask is None else jnp.where(real_block(mask), W, 0)


def lml_grad(W, dK):
    """``d lml / d theta = 0.5 tr(W dK)`` for a symmetric ``dK = dS/dtheta``, shape (n, n)."""
    return 0.5 * jnp.sum(W * dK)


def lml_grad_log(W, K, dlogK: Sequence[jax.Array]):
    """Gradients for kernels with derivatives ``dK/dtheta_j = K * dlogK_j`` (elementwise),
    e.g. ``K = exp(g(theta))``: ``0.5 sum((W * K) * dlogK_j)`` for each ``j``, a list."""
    WK = W * K
    return [0.5 * jnp.sum(WK * d) for d in dlogK]


def lml_grad_diag(W, scale):
    """Gradient for ``dS/dtheta = scale * I`` on the real rows (a noise variance in log
    space: ``scale`` the variance): ``0.5 scale tr(W)``."""
    return 0.5 * scale * jnp.trace(W)


def solve_from_inverse(Linv, r, mask):
    """``K^-1 r = L^-T (L^-1 r)`` from the inverse factor, zero on padded rows."""
    a = Linv.T @ (Linv @ r)
    return a if mask is None else jnp.where(mask, a, 0)


def posterior_from_factor(Linv, Kxq, kqq, prior_mean, *, alpha=None, resid=None, full_cov: bool,
                          precision=None):
    """Predictive moments of the latent function at query points from the inverse factor.

    Rasmussen & Williams, Eqs. 2.23-2.24, with ``L^-1`` the inverse Cholesky factor of
    the conditioned matrix (padded rows: those of the identity, and ``Kxq`` zero there).

    Args:
        Linv: ``L^-1``, shape (n, n).
        Kxq: Cross-covariance between the rows and the queries, shape (n, m).
        kqq: Prior covariance of the queries, shape (m, m) (``full_cov``) or its
            diagonal, shape (m,).
        prior_mean: The prior mean at the queries (scalar or (m,)).
        alpha: ``K^-1 (y - m)``, shape (n,): the mean is then ``m + Kxq^T alpha``.
        resid: ``y - m``, shape (n,), used when ``alpha`` is None: the mean is then
            whitened, ``m + (L^-1 Kxq)^T (L^-1 resid)``.
        full_cov: Whether the full covariance ``kqq - A^T A`` (``A = L^-1 Kxq``,
            symmetrised) is returned, or the variances ``kqq - |columns of A|^2``
            clipped at 0 (blocked, skipping the zero triangle of ``L^-1``).
        precision: Matmul precision of the whitened products (``full_cov`` or no ``alpha``).

    Returns:
        ``(mean, cov)`` of shapes (m,) and (m, m), or ``(mean, var)`` of shapes (m,), (m,).
    """
    mm = lambda a, b: jnp.matmul(a, b, precision=precision)  # noqa: E731
    A = mm(Linv, Kxq) if (full_cov or alpha is None) else None
    if alpha is None:
        mean = prior_mean + mm(A.T, mm(Linv, resid))
    else:
        mean = prior_mean + Kxq.T @ alpha
    if full_cov:
        cov = kqq - mm(A.T, A)
        return mean, 0.5 * (cov + cov.T)
    var = kqq - linalg.row_sq_norms_lower(Kxq.T, Linv)
    return mean, jnp.maximum(var, 0)
