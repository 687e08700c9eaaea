"""Eq. (8) of Makarova et al. (2022) on one GP posterior: the regret bound's core.

``rbar = min_{x in G_t} ucb(x) - min_{x in Gamma} lcb(x)`` with ``ucb/lcb = mu -+
sqrt(beta) sigma`` of the latent GP (:func:`bound_core`), the confidence parameter
``beta`` (:func:`beta`), expected improvement and probability of improvement
(:func:`ei`, :func:`pi`), and the refinement of the LCB's domain minimum by projected
descent (:func:`refine`, with the LCB's analytic gradient :func:`lcb_value_and_grad`; on a
posterior with an input warping the descent runs in the warped coordinates, where the
kernel is stationary, and its points are mapped back to inputs).
Shared by :mod:`jaxstop.regret` (its public, validating layer) and
:mod:`jaxstop.policies.auto_termination` (through :mod:`jaxstop._src.termination`).

Data problems are values, never exceptions: an argument outside its domain (``t <= 0``,
a negative ``beta``, a non-finite ``best``, a query row not finite or outside the unit
cube) gives NaN in a bare array
and ``ok = False`` with a :class:`jaxstop._src.status.Reason` in a :class:`RegretBound`
(:func:`jaxstop._src.status.first_reason` combines the checks); padded rows are made inert
(:func:`jaxstop._src.checks.inert_rows`) before any arithmetic.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxstop._src import checks, gp_core, linalg, status, warping
from jaxstop._src.status import Reason

__all__ = [
    "RegretBound",
    "BoundCore",

    "beta",
    "moments",
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
        ok: Whether every field is finite and computed from valid inputs, shape () bool:
            ``beta >= 0``, the real rows of the evaluated points and the candidates
            finite, the posterior usable, at least one evaluated point real.
        reason: Why not, an int32 :class:`jaxstop.Reason` code, shape (): ``BAD_INPUT``
            (a negative, infinite or NaN ``beta``, a real evaluated point or a candidate
            not finite or outside the unit cube),
            the posterior's own reason when it is not ``ok``, ``EMPTY`` (no real evaluated
            point), ``NOT_FINITE`` (a field overflowed or is NaN), ``UNREPRESENTABLE``
            (:func:`jaxstop.regret.fit_regret_bound`: finite on the standardised scale but
            beyond the dtype's range in the units of ``y``), ``OK``.
    """

    bound: jax.Array
    ucb_min: jax.Array
    lcb_min: jax.Array
    lcb_min_grid: jax.Array
    x_lcb: jax.Array
    x_ucb: jax.Array
    ok: jax.Array
    reason: jax.Array


def own_reason(ok, reason):
    """``reason`` of a result that is not ``ok``, ``NOT_FINITE`` where that result said
    ``OK`` (a status combined from outside it), for :func:`~jaxstop._src.status.first_reason`."""
    return jnp.where(ok | (reason != int(Reason.OK)), reason, jnp.int32(int(Reason.NOT_FINITE)))


def beta(t, size, delta, scale):
    """``scale * 2 log(size t^2 pi^2 / (6 delta))`` (see :func:`jaxstop.regret.beta`).

    NaN wherever an argument is outside its domain (``t`` or ``size`` not finite and
    ``> 0``, ``delta`` not in (0, 1], ``scale`` not finite and ``> 0``; NaN fails every
    comparison), so that nothing computed from it can look valid: a ``t <= 0`` would
    otherwise give ``-inf`` (``t = 0``) or the beta of ``|t|``.
    """
    valid = (jnp.isfinite(t) & (t > 0) & jnp.isfinite(size) & (size > 0) & (delta > 0) & (delta <= 1)
             & jnp.isfinite(scale) & (scale > 0))
    t, size = jnp.where(valid, t, 1), jnp.where(valid, size, 1)
    delta, scale = jnp.where(valid, delta, 1), jnp.where(valid, scale, 1)
    # the log of the product as a sum of logs: t^2 would overflow for t above the square
    # root of the dtype's range (1e154 in float64, 1.8e19 in float32) and underflow below it
    log_arg = jnp.log(size) + 2.0 * jnp.log(t) + (math.log(math.pi**2 / 6.0) - jnp.log(delta))
    return jnp.where(valid, scale * 2.0 * log_arg, jnp.nan)


def moments(post, X):
    """Latent mean and variance at the rows of ``X`` (shape (m, d)): NaN on rows that are
    not finite or leave the unit cube (made inert before the kernel) and everywhere when
    ``post.ok`` is False (:func:`jaxstop._src.gp_core.predict_checked`); the one prediction
    of the public EI, PI and confidence bounds."""
    return tuple(gp_core.predict_checked(post, X))


def confidence_bounds(post, X, beta):
    """``(mu - sqrt(beta) sd, mu + sqrt(beta) sd)`` of the latent GP at the rows of ``X``;
    NaN where :func:`moments` is, and everywhere for a negative or NaN ``beta``."""
    mean, var = moments(post, X)
    w = jnp.sqrt(jnp.where(beta >= 0, beta, jnp.nan) * var)
    return mean - w, mean + w


def _acquisition_args(mu, sd, best):
    """Whether ``(mu, sd, best)`` is a Gaussian and a finite incumbent (``mu`` finite,
    ``sd`` finite and ``>= 0``, ``best`` finite), and the arguments made inert where not."""
    valid = jnp.isfinite(mu) & jnp.isfinite(sd) & (sd >= 0) & jnp.isfinite(best)
    return valid, jnp.where(valid, mu, 0), jnp.where(valid, sd, 1), jnp.where(valid, best, 0)


# |z| beyond which EI is max(best - mu, 0): phi(40) ~ 1e-348 is 0 in float64 and float32,
# and then z Phi(z) + phi(z) = z to rounding (z > 0) or 0 (z < 0).
_EI_FAR = 40.0


def ei(mu, sd, best):
    """Expected improvement ``E[max(best - f, 0)]`` for ``f ~ N(mu, sd^2)``, stable in the tail;
    NaN where ``mu``, ``sd`` or ``best`` is not finite (or ``sd < 0``)."""
    valid, mu, sd, best = _acquisition_args(mu, sd, best)
    pos = sd > 0
    s = jnp.where(pos, sd, 1)
    z_raw = (best - mu) / s
    # beyond |z| = _EI_FAR (also where the ratio overflows to +-inf) phi(z) underflows in
    # either dtype and EI is max(best - mu, 0) to rounding: taken directly, never 0 * inf
    far = jnp.abs(z_raw) > _EI_FAR
    z = jnp.clip(z_raw, -_EI_FAR, _EI_FAR)
    phi = _INV_SQRT_2PI * jnp.exp(-0.5 * z * z)
    direct = phi + z * jax.scipy.special.ndtr(z)
    # z Phi(z) = -phi(z) (1 - 1/z^2 + ...) cancels for z << 0: use the scaled erfc. Taken
    # for z <= -1 only, and evaluated there only: erfcx(-z / sqrt2) overflows for z above
    # ~13 (float32) or ~38 (float64), and phi * inf, NaN, would reach the gradient
    zt = jnp.minimum(z, -1)
    tail = phi * (1 + zt * _SQRT_HALF_PI * jax.scipy.special.erfcx(-zt / _SQRT2))
    h = jnp.maximum(jnp.where(z > -1, direct, tail), 0)
    out = jnp.where(pos & ~far, s * h, jnp.maximum(best - mu, 0))
    return jnp.where(valid, out, jnp.nan)


def pi(mu, sd, best):
    """Probability of improvement ``P(f < best)`` for ``f ~ N(mu, sd^2)``; NaN where
    ``mu``, ``sd`` or ``best`` is not finite (or ``sd < 0``)."""
    valid, mu, sd, best = _acquisition_args(mu, sd, best)
    pos = sd > 0
    s = jnp.where(pos, sd, 1)
    out = jnp.where(pos, jax.scipy.special.ndtr((best - mu) / s), (mu < best).astype(mu.dtype))
    return jnp.where(valid, out, jnp.nan)


def lcb_value_and_grad(post, Kinv, sqrt_beta, x):
    """LCB ``mean - sqrt(beta) sd`` at the rows of ``x`` (shape (s, d)) and its gradient in ``x``,
    from ``K^-1`` (``Kinv``, the inverse of the posterior's covariance).

    ``x`` are points in the kernel's coordinates, those of ``post.X``: the inputs
    themselves, or their warping ``w(x)`` (:func:`jaxstop._src.gp_core.warp_inputs`) when
    the posterior's parameters carry one; the gradient is then in ``w``.

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

    The descent runs in the kernel's coordinates ``u = w(x)`` (:func:`jaxstop._src.gp_core.warp_inputs`:
    ``u = x`` without an input warping), where the kernel is stationary and
    :func:`lcb_value_and_grad` is the gradient of the LCB; the points found are mapped
    back to inputs by the inverse warping (:func:`jaxstop._src.warping.unwarp`). Each step
    moves a start by ``step`` lengthscales along the normalised negative gradient (in
    lengthscale-scaled coordinates), projects onto the image of the unit cube
    (``[w(0), w(1)]`` per dimension; ``[0, 1]`` without a warping), and keeps the move
    only if the LCB went down; the step doubles after a success and halves after a
    failure. The LCB of every start is therefore non-increasing in ``u``. Padded
    dimensions (``dim_mask`` False) stay where they start.

    The steps use :func:`lcb_value_and_grad` (``K^-1`` formed once, one product per
    step). The points returned are inputs ``x`` (shape of ``x0``) and their LCB values
    are evaluated again at those inputs in :func:`jaxstop.gp.predict`'s form
    (``a - |L^-1 k|^2``, free of ``K^-1``'s larger rounding for small variances): the
    LCB of the GP on the inputs, whatever the warping.

    Derivatives: the points carry none (the descent runs on ``stop_gradient`` of its
    arguments), so those of the LCB values are its partial derivatives at the points found,
    that of a minimum at its minimiser (the envelope theorem). Differentiating the descent
    itself would follow every accepted step and, through the kernel's ``sqrt(r^2 + tiny)``
    in :func:`lcb_value_and_grad`, give NaN.
    """
    post_in, post, sqrt_beta_in = post, jax.lax.stop_gradient(post), sqrt_beta
    sqrt_beta, x0 = jax.lax.stop_gradient(sqrt_beta), jax.lax.stop_gradient(x0)
    dt = x0.dtype
    p = post.params
    ls = jnp.exp(p.log_lengthscales) * dim_mask.astype(dt)
    tiny = jnp.finfo(dt).tiny
    value_and_grad = partial(lcb_value_and_grad, post, linalg.inv_from_tri_inv(post.chol_inv), sqrt_beta)
    u0 = gp_core.warp_inputs(p, x0)
    if p.warped:  # the image of [0, 1]^d; padded dimensions keep their start exactly
        lo = gp_core.warp_inputs(p, jnp.zeros((1, x0.shape[1]), dt))
        hi = gp_core.warp_inputs(p, jnp.ones((1, x0.shape[1]), dt))
    else:
        lo, hi = 0, 1

    def step(carry, _):
        u, f, g, size = carry
        gu = jnp.where(jnp.isfinite(g), g, 0) * ls[None, :]
        norm = jnp.sqrt(jnp.sum(gu * gu, axis=1))
        direction = -gu * ls[None, :] / jnp.maximum(norm, tiny)[:, None]
        un = jnp.clip(u + size[:, None] * direction, lo, hi)
        fn, gn = value_and_grad(un)
        accept = jnp.isfinite(fn) & (fn < f)
        f_prev = f
        u = jnp.where(accept[:, None], un, u)
        f = jnp.where(accept, fn, f)
        g = jnp.where(accept[:, None], gn, g)
        size = jnp.where(accept & jnp.isfinite(f_prev), 2 * size, jnp.where(accept, size, 0.5 * size))
        return (u, f, g, size), None

    # Step 0 evaluates the starts themselves (g = 0: a zero move, accepted against
    # f = inf), so the LCB and its gradient are traced once.
    size0 = jnp.full(x0.shape[:1], 0.1, dt)
    f0 = jnp.full(x0.shape[:1], jnp.inf, dt)
    (u, _, _, _), _ = jax.lax.scan(step, (u0, f0, jnp.zeros_like(u0), size0), None, length=steps + 1)
    x = u
    if p.warped:
        x = jnp.where(dim_mask[None, :], warping.unwarp(u, p.log_warp_a, p.log_warp_b), x0)
    mean, var = gp_core.predict(post_in, x)
    return x, mean - sqrt_beta_in * jnp.sqrt(jnp.maximum(var, tiny))


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

    ``X_eval`` and ``cand`` are inputs (the posterior warps them, :func:`jaxstop._src.gp_core.predict`,
    when its parameters carry an input warping; ``x_lcb`` and ``x_ucb`` are inputs too).
    ``train_y``: the evaluated points are the posterior's own rows (``X_eval`` the
    inputs behind ``post.X``, ``mask = post.mask``) conditioned on these values; their
    predictions then come from the factor (:func:`jaxstop._src.gp_core.predict_train`),
    not from the kernel.

    Padded rows of ``X_eval`` are made inert first. The status (``RegretBound.ok`` and
    ``reason``) covers every field; ``bound`` is ``+inf`` when it is not ``ok``."""
    dt = X_eval.dtype
    inf = jnp.asarray(jnp.inf, dt)
    bad_input = ~((beta >= 0) & jnp.isfinite(beta) & gp_core.real_inputs_valid(X_eval, mask)
                  & jnp.all(gp_core.in_unit_cube(cand)))
    X_eval = checks.inert_rows(X_eval, mask, 0)
    sb = jnp.sqrt(jnp.where(beta >= 0, beta, jnp.nan)).astype(dt)
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
        # fewer real points than starts: the rest repeat the best start (a padded row, held
        # at 0 by inert_rows, would start a descent from the origin and move the bound)
        idx = jnp.where(real[idx], idx, idx[0])
        xr, fr = refine(post, sb, X_all[idx], dim_mask, refine_steps)
        j = jnp.argmin(fr)
        better = fr[j] < grid_min
        lcb_min = jnp.where(better, fr[j], grid_min)
        x_l = jnp.where(better, xr[j], x_l)
    bound = ucb_min - lcb_min
    x_u = X_eval[i_u]
    reason = status.first_reason(
        (bad_input, Reason.BAD_INPUT),
        (~post.ok, own_reason(post.ok, post.reason)),
        (~jnp.any(mask), Reason.EMPTY),
        (~status.all_finite(bound, ucb_min, lcb_min, grid_min, x_l, x_u), Reason.NOT_FINITE),
    )
    ok = reason == int(Reason.OK)
    rb = RegretBound(jnp.where(ok, bound, inf), ucb_min, lcb_min, grid_min, x_l, x_u, ok, reason)
    ei_all = jnp.where(real, ei(mu, sd, best), 0)
    pi_all = jnp.where(real, pi(mu, sd, best), 0)
    return BoundCore(rb, jnp.max(ei_all), jnp.max(pi_all))
