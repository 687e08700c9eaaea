"""Eq. (8) of Makarova et al. (2022) on one GP posterior: the regret bound's core.

``rbar = min_{x in G_t} ucb(x) - min_{x in Gamma} lcb(x)`` with ``ucb/lcb = mu -+
sqrt(beta) sigma`` of the latent GP (:func:`bound_core`), the confidence parameter
``beta`` (:func:`beta`), expected improvement and probability of improvement
(:func:`ei`, :func:`pi`), and the refinement of the LCB's domain minimum by projected
descent (:func:`refine`, with the LCB's analytic gradient :func:`lcb_value_and_grad`).
Shared by :mod:`jaxstop.regret` (its public, validating layer) and
:mod:`jaxstop.policies.auto_termination` (through :mod:`jaxstop._src.termination`).
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxstop._src import gp_core, linalg

__all__ = [
    "RegretBound",
    "BoundCore",
    "beta",
    "confidence_bounds",
    "ei",
    "pi",
    "lcb_value_and_grad",
    "refine",
    "smallest",
    "bound_core",
]

_SQRT2 = math.sqrt(2.0)
_SQRT_HALF_PI = math.sqrt(math.pi / 2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class RegretBound(NamedTuple):
    """Regret upper bound of Eq. (8) and its parts.

    Attributes:
        bound: ``ucb_min - lcb_min``, shape (); ``+inf`` when ``ok`` is False.
        ucb_min: Minimum of the UCB over the evaluated points ``G_t``, shape ().
        lcb_min: Minimum of the LCB over the domain: candidates, evaluated points and
            (if enabled) gradient refinement, shape ().
        lcb_min_grid: The same minimum before refinement, shape (); ``>= lcb_min``.
        x_lcb: Where ``lcb_min`` is attained, shape (d,).
        x_ucb: The evaluated point where ``ucb_min`` is attained, shape (d,).
        ok: Whether the posterior factorised, at least one evaluated point is real and
            the bound is finite, shape () bool.
    """

    bound: jax.Array
    ucb_min: jax.Array
    lcb_min: jax.Array
    lcb_min_grid: jax.Array
    x_lcb: jax.Array
    x_ucb: jax.Array
    ok: jax.Array


def beta(t, size, delta, scale):
    """``scale * 2 log(size t^2 pi^2 / (6 delta))`` (see :func:`jaxstop.regret.beta`)."""
    return scale * 2.0 * jnp.log(size * jnp.square(t) * (math.pi**2 / 6.0) / delta)


def confidence_bounds(post, X, beta):
    """``(mu - sqrt(beta) sd, mu + sqrt(beta) sd)`` of the latent GP at the rows of ``X``."""
    mean, var = gp_core.predict(post, X)
    w = jnp.sqrt(jnp.maximum(beta, 0) * var)
    return mean - w, mean + w


def ei(mu, sd, best):
    """Expected improvement ``E[max(best - f, 0)]`` for ``f ~ N(mu, sd^2)``, stable in the tail."""
    pos = sd > 0
    s = jnp.where(pos, sd, 1)
    z = (best - mu) / s
    phi = _INV_SQRT_2PI * jnp.exp(-0.5 * z * z)
    direct = phi + z * jax.scipy.special.ndtr(z)
    # z Phi(z) = -phi(z) (1 - 1/z^2 + ...) cancels for z << 0: use the scaled erfc.
    tail = phi * (1 + z * _SQRT_HALF_PI * jax.scipy.special.erfcx(-z / _SQRT2))
    h = jnp.maximum(jnp.where(z > -1, direct, tail), 0)
    return jnp.where(pos, s * h, jnp.maximum(best - mu, 0))


def pi(mu, sd, best):
    """Probability of improvement ``P(f < best)`` for ``f ~ N(mu, sd^2)``."""
    pos = sd > 0
    s = jnp.where(pos, sd, 1)
    return jnp.where(pos, jax.scipy.special.ndtr((best - mu) / s), (mu < best).astype(mu.dtype))


def lcb_value_and_grad(post, Kinv, sqrt_beta, x):
    """LCB ``mean - sqrt(beta) sd`` at the rows of ``x`` (shape (s, d)) and its gradient in ``x``,
    from ``K^-1`` (``Kinv``, the inverse of the posterior's covariance).

    With ``u = K^-1 k(x)``, ``var = a - k . u`` and
    ``grad LCB = sum_i (alpha_i + sqrt(beta) u_i / sd) grad k_i``, where for Matern-5/2
    ``grad k_i = -(5/3) a (1 + sqrt5 r_i) exp(-sqrt5 r_i) (x - x_i) / lengthscale^2``
    (``r_i`` the scaled distance to training row ``i``, ``a`` the amplitude): one product
    with ``K^-1``, where the value and a reverse pass through :func:`jaxstop.gp.predict`
    take two with ``L^-1``. Below a variance of ``tiny`` the sd is ``sqrt(tiny)`` with no
    gradient, as in ``sqrt(maximum(var, tiny))``.
    """
    p = post.params
    dt = x.dtype
    tiny = jnp.finfo(dt).tiny
    inv_ls = jnp.exp(-p.log_lengthscales)
    amp = jnp.exp(p.log_amplitude)
    r2 = gp_core.sq_dist(x * inv_ls[None, :], post.X * inv_ls[None, :])
    r = jnp.sqrt(r2 + tiny)
    e = jnp.exp(-gp_core.SQRT5 * r)
    real = post.mask[None, :]
    H = jnp.where(real, (1 + gp_core.SQRT5 * r) * e, 0)
    k = jnp.where(real, amp * (H + (5.0 / 3.0) * r2 * e), 0)
    u = k @ Kinv
    var = amp - jnp.sum(k * u, axis=1)
    pos = var > tiny
    sd = jnp.sqrt(jnp.where(pos, var, tiny))
    f = p.mean + k @ post.alpha - sqrt_beta * sd
    w = (post.alpha[None, :] + jnp.where(pos, sqrt_beta / sd, 0)[:, None] * u) * H
    g = (x * jnp.sum(w, axis=1)[:, None] - w @ post.X) * (-(5.0 / 3.0) * amp * inv_ls * inv_ls)[None, :]
    return f, g


def refine(post, sqrt_beta, x0, dim_mask, steps: int):
    """Projected descent on the LCB from several starts at once.

    Each step moves a start by ``step`` lengthscales along the normalised negative
    gradient (in lengthscale-scaled coordinates), projects onto the unit cube, and
    keeps the move only if the LCB went down; the step doubles after a success and
    halves after a failure. The LCB of every start is therefore non-increasing.

    The steps use :func:`lcb_value_and_grad` (``K^-1`` formed once, one product per
    step). The LCB values returned are evaluated again in :func:`jaxstop.gp.predict`'s
    form (``a - |L^-1 k|^2``, free of ``K^-1``'s larger rounding for small variances).
    """
    dt = x0.dtype
    ls = jnp.exp(post.params.log_lengthscales) * dim_mask.astype(dt)
    tiny = jnp.finfo(dt).tiny
    value_and_grad = partial(lcb_value_and_grad, post, linalg.inv_from_tri_inv(post.chol_inv), sqrt_beta)

    def step(carry, _):
        x, f, g, size = carry
        gu = jnp.where(jnp.isfinite(g), g, 0) * ls[None, :]
        norm = jnp.sqrt(jnp.sum(gu * gu, axis=1))
        direction = -gu * ls[None, :] / jnp.maximum(norm, tiny)[:, None]
        xn = jnp.clip(x + size[:, None] * direction, 0, 1)
        fn, gn = value_and_grad(xn)
        accept = jnp.isfinite(fn) & (fn < f)
        f_prev = f
        x = jnp.where(accept[:, None], xn, x)
        f = jnp.where(accept, fn, f)
        g = jnp.where(accept[:, None], gn, g)
        size = jnp.where(accept & jnp.isfinite(f_prev), 2 * size, jnp.where(accept, size, 0.5 * size))
        return (x, f, g, size), None

    # Step 0 evaluates the starts themselves (g = 0: a zero move, accepted against
    # f = inf), so the LCB and its gradient are traced once.
    size0 = jnp.full(x0.shape[:1], 0.1, dt)
    f0 = jnp.full(x0.shape[:1], jnp.inf, dt)
    (x, _, _, _), _ = jax.lax.scan(step, (x0, f0, jnp.zeros_like(x0), size0), None, length=steps + 1)
    mean, var = gp_core.predict(post, x)
    return x, mean - sqrt_beta * jnp.sqrt(jnp.maximum(var, tiny))


def smallest(v, k: int):
    """Indices of the ``k`` smallest entries of ``v``, ascending, ties to the lower index
    (``lax.top_k(-v, k)``'s order) by ``k`` rounds of min reductions, which XLA:CPU runs
    vectorised (``top_k`` and ``argmin`` it does not: 2.6x slower for 8 of 612)."""
    n = v.shape[0]
    iota = jnp.arange(n)
    taken = jnp.zeros(n, bool)
    out = []
    for _ in range(k):
        m = jnp.min(jnp.where(taken, jnp.inf, v))
        i = jnp.minimum(jnp.min(jnp.where((v == m) & ~taken, iota, n)), n - 1)
        out.append(i)
        taken = taken | (iota == i)
    return jnp.stack(out)


class BoundCore(NamedTuple):
    """What :func:`bound_core` returns: Eq. (8) and the maxima of EI and PI."""

    bound: RegretBound
    ei_max: jax.Array
    pi_max: jax.Array


def bound_core(post, X_eval, mask, cand, beta, dim_mask, best, *,
               refine_steps: int, refine_starts: int, chunk_size: int, train_y=None) -> BoundCore:
    """Eq. (8) on one posterior; also the maxima of EI and PI over the same points.

    ``train_y``: the evaluated points are the posterior's own rows (``X_eval = post.X``,
    ``mask = post.mask``) conditioned on these values; their predictions then come
    from the factor (:func:`jaxstop._src.gp_core.predict_train`), not from the kernel."""
    dt = X_eval.dtype
    inf = jnp.asarray(jnp.inf, dt)
    sb = jnp.sqrt(jnp.maximum(beta, 0)).astype(dt)
    m = cand.shape[0]
    cand = jnp.where(dim_mask[None, :], cand, 0)
    X_all = jnp.concatenate([cand, X_eval])
    real = jnp.concatenate([jnp.ones(m, bool), mask])
    if train_y is None:
        mu, var = gp_core.predict_chunked(post, X_all, chunk_size)
    else:
        mu_c, var_c = gp_core.predict_chunked(post, cand, chunk_size)
        mu_e, var_e = gp_core.predict_train(post, train_y)
        mu, var = jnp.concatenate([mu_c, mu_e]), jnp.concatenate([var_c, var_e])
    sd = jnp.sqrt(var)
    ucb_e = jnp.where(mask, mu[m:] + sb * sd[m:], inf)
    i_u = jnp.argmin(ucb_e)
    ucb_min = ucb_e[i_u]
    lcb_all = jnp.where(real, mu - sb * sd, inf)
    i_l = jnp.argmin(lcb_all)
    grid_min = lcb_all[i_l]
    lcb_min, x_l = grid_min, X_all[i_l]
    if refine_steps > 0:
        idx = smallest(lcb_all, min(refine_starts, lcb_all.shape[0]))
        xr, fr = refine(post, sb, X_all[idx], dim_mask, refine_steps)
        j = jnp.argmin(fr)
        better = fr[j] < grid_min
        lcb_min = jnp.where(better, fr[j], grid_min)
        x_l = jnp.where(better, xr[j], x_l)
    bound = ucb_min - lcb_min
    ok = post.ok & jnp.any(mask) & jnp.isfinite(bound)
    rb = RegretBound(jnp.where(ok, bound, inf), ucb_min, lcb_min, grid_min, x_l, X_eval[i_u], ok)
    ei_all = jnp.where(real, ei(mu, sd, best), 0)
    pi_all = jnp.where(real, pi(mu, sd, best), 0)
    return BoundCore(rb, jnp.max(ei_all), jnp.max(pi_all))
