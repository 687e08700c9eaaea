"""Kumaraswamy input warping of the unit cube (Snoek et al., 2014, Sec. 3.1).

Each input dimension ``k`` is mapped by the cumulative distribution function of a
Kumaraswamy distribution,

    ``w_k(x) = 1 - (1 - x^a_k)^b_k``,  ``a_k, b_k > 0``,

a monotone bijection of ``[0, 1]`` onto itself (the identity for ``a = b = 1``), and the
GP's kernel is evaluated on ``w(x)``: a stationary kernel on the warped inputs is a
non-stationary one on the inputs (Snoek et al., 2014, Eq. 4 with the CDF of their Eq. 5 in
its closed Kumaraswamy form). The warping parameters are fitted with the other
hyperparameters by type-II maximum likelihood (MAP with the prior below).

Conventions, as in the warped GP of AutoGluon's / Syne Tune's ``gpautograd`` (``warping.py``
and ``constants.py`` of ``bayesopt/gpautograd``), the open-source GP that Makarova et al.
(2022, App. A.1.1) name as the closest to theirs:

* **Squeeze.** Before warping, ``x`` is mapped linearly into ``[eps, 1 - eps]``,
  ``x' = eps + (1 - 2 eps) x`` (AutoGluon: ``NUMERICAL_JITTER = 1e-9``), so that ``x'^a``
  and ``(1 - x'^a)^b`` and their derivatives are finite at ``x = 0`` and ``x = 1``. Here
  ``eps`` is a power of two close to that: ``2^-30`` (about ``9.3e-10``) in float64 and
  ``2^-20`` (about ``9.5e-7``) in float32, where ``1 - 1e-9`` would round to 1 (16 units
  in the last place of 1 in float32: ``1 - eps`` and ``1 - 2 eps`` are exact). The
  squeezed value is also clipped to ``[eps, 1 - eps]``, so an input outside the unit
  cube (only possible inside ``jit``) cannot give NaN.
* **Box.** In a fit, ``a`` and ``b`` stay in ``[0.25, 4]`` (AutoGluon's
  ``WARPING_LOWER_BOUND`` / ``WARPING_UPPER_BOUND``): their logs are clipped to
  ``[-log 4, log 4]`` (:data:`LOG_BOX`). The start is the identity, ``a = b = 1``
  (AutoGluon's ``INITIAL_WARPING``).
* **Prior.** Each ``a_k`` and ``b_k`` has a LogNormal(0, 0.75) prior on its value
  (AutoGluon's ``LogNormal(0.0, 0.75)``), i.e. ``log p(a) = -log a - (log a)^2 /
  (2 * 0.75^2)`` up to a constant (:func:`log_prior`); its maximiser in ``log a`` is
  ``-0.75^2`` (:data:`PRIOR_MODE`, ``a`` about 0.57).

The warping is evaluated without cancellation: with ``u = a log x'`` (``< 0``),
``log(1 - x'^a)`` is ``log1mexp(u)`` (Mächler, 2012: ``log(-expm1(u))`` for
``u > -log 2``, else ``log1p(-exp(u))``) and ``w = -expm1(b log1mexp(u))``: ``w`` to a
few units of ``2^-52`` (float64) absolute, with its derivatives.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

__all__ = [
    "LOG_BOX",
    "PRIOR_SIGMA",
    "PRIOR_MODE",
    "eps",
    "squeeze",
    "warp",
    "unwarp",
    "log_prior",
]

#: ``|log a|``, ``|log b|`` stay within ``log 4`` in a fit (a, b in [0.25, 4]).
LOG_BOX = math.log(4.0)
#: Standard deviation of the LogNormal prior on each warping parameter.
PRIOR_SIGMA = 0.75
#: The log-prior's maximiser in ``log a`` (and ``log b``): ``-PRIOR_SIGMA**2``.
PRIOR_MODE = -(PRIOR_SIGMA**2)

_LOG2 = math.log(2.0)


def eps(dtype) -> float:
    """The squeeze margin of ``dtype``: ``2^-30`` (float64) or ``2^-20`` (float32)."""
    return 2.0**-30 if jnp.dtype(dtype) == jnp.float64 else 2.0**-20


def squeeze(x):
    """``clip(eps + (1 - 2 eps) x, eps, 1 - eps)``: the unit interval into ``[eps, 1 - eps]``."""
    e = eps(x.dtype)
    return jnp.clip(e + (1 - 2 * e) * x, e, 1 - e)


def _per_column(v, x):
    """``v`` (shape (d,)) shaped to broadcast over the last axis of ``x`` without rank promotion."""
    v = jnp.asarray(v, x.dtype)
    return jnp.reshape(v, (1,) * (x.ndim - v.ndim) + v.shape)


def _log1mexp(u):
    """``log(1 - exp(u))`` for ``u < 0``, accurate everywhere; each branch only ever sees
    arguments where it and its derivative are finite (no NaN through ``where``).

    ``u > -log 2``: ``log(-expm1(u))``. Else, with ``e = exp(u) <= 1/2``: ``log1p(-e)`` for
    ``e <= 1/4`` and ``log(1 - e)`` above (``1 - e`` is then exact to half an ulp; XLA's
    float64 ``log1p`` loses about 100 ulps for arguments in ``(-1/2, -0.3)``)."""
    near = u > -_LOG2
    u_near = jnp.where(near, u, -_LOG2)
    e = jnp.exp(jnp.where(near, -2 * _LOG2, u))
    mid = e > 0.25
    far = jnp.where(mid, jnp.log(1 - jnp.where(mid, e, 0.5)), jnp.log1p(-jnp.where(mid, 0.25, e)))
    return jnp.where(near, jnp.log(-jnp.expm1(u_near)), far)


def warp(x, log_a, log_b):
    """Kumaraswamy CDF ``1 - (1 - x'^a)^b`` of the squeezed inputs, per column.

    Args:
        x: Inputs in the unit cube, shape (..., d).
        log_a, log_b: Logs of the warping parameters, shape (d,) (or scalars).

    Returns:
        ``w(x)``, the shape of ``x``, in ``[0, 1]``; finite with finite derivatives in
        ``x``, ``log_a`` and ``log_b`` for every finite input.
    """
    xs = squeeze(x)
    a = jnp.exp(_per_column(log_a, x))
    b = jnp.exp(_per_column(log_b, x))
    u = a * jnp.log(xs)
    return -jnp.expm1(b * _log1mexp(u))


def unwarp(w, log_a, log_b):
    """The inverse of :func:`warp`: ``x`` with ``warp(x) = w`` (clipped to [0, 1]).

    ``x' = (1 - (1 - w)^(1/b))^(1/a)``, then the squeeze undone. For reading warped
    coordinates back (e.g. where a minimum found in them lies); not differentiated.
    """
    a = jnp.exp(_per_column(log_a, w))
    b = jnp.exp(_per_column(log_b, w))
    w = jnp.clip(w, 0, 1)
    one_minus_xa = jnp.exp(jnp.log1p(-w) / b)  # (1 - w)^(1/b) = 1 - x'^a
    xs = jnp.exp(jnp.log(-jnp.expm1(jnp.log(one_minus_xa))) / a)
    e = eps(w.dtype)
    return jnp.clip((xs - e) / (1 - 2 * e), 0, 1)


def log_prior(log_a, log_b):
    """LogNormal(0, PRIOR_SIGMA) log density of every ``a_k`` and ``b_k``, summed, up to a
    constant: ``-sum(t + t^2 / (2 PRIOR_SIGMA^2))`` over ``t`` in ``log_a`` and ``log_b``."""
    t = jnp.concatenate([jnp.ravel(log_a), jnp.ravel(log_b)])
    return -jnp.sum(t + jnp.square(t) / (2 * PRIOR_SIGMA**2))

