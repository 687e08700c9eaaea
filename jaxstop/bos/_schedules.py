"""The ``K_{1,t}`` and ``xi_t`` schedules of Theorems 1-2 of Dai et al. (2019), validated
(the traceable formulas and their domains live in :mod:`jaxstop._src.schedules`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import checks, schedules
from jaxstop.bos._validate import float_dtype, screen

_EXPECTED = {
    "t": "a finite whole BO iteration >= 1 (iterations are 1-based)",
    "k1_init": "finite and > 0",
    "gamma": "in (0, 1]",
    "noise_var": "finite and >= 0",
    "delta": "in (0, 1)",
}


def _arguments(domain, **args):
    """The arguments as arrays of ``t``'s floating dtype, each checked by :func:`screen`
    against its predicate in ``domain`` (concrete: ``ValueError`` naming it)."""
    if isinstance(args["t"], (bool, np.bool_)) or getattr(args["t"], "dtype", None) == bool:
        raise TypeError("t must be a BO iteration (a whole number >= 1), got a bool")
    t = checks.float_array(args["t"], "t")
    dtype = float_dtype(t)
    out = {"t": t.astype(dtype)}
    for name, value in args.items():
        if name != "t":
            out[name] = checks.float_array(value, name).astype(dtype)
    try:
        jnp.broadcast_shapes(*(a.shape for a in out.values()))
    except ValueError as err:
        shapes = ", ".join(f"{k} {a.shape}" for k, a in out.items())
        raise ValueError(f"the arguments must broadcast to one shape, got {shapes}") from err
    screen([(name, out[name], domain[name], _EXPECTED[name]) for name in domain])
    return out


def k1_schedule(t: ArrayLike, k1_init: ArrayLike = 100.0, gamma: ArrayLike = 0.95) -> jax.Array:
    """``K_{1,t} = K_{1,t-1} / gamma`` with ``K_{1,1} = k1_init``: ``k1_init / gamma**(t-1)``.

    The increasing sequence of Theorem 2 of Dai et al. (2019), used in their
    experiments with ``K_{1,1} = 100`` and ``gamma`` in {0.89, 0.95, 0.99, 1}
    (Fig. 1; 0.95 is the paper's default, the released code uses 0.99). ``t`` is
    the 1-based BO iteration; the code's 0-based ``bo_iteration`` is ``t - 1``.

    Outside the domain -- ``t < 1`` (``K_{1,0}`` does not exist: ``t = 0`` would
    silently give ``k1_init * gamma``), a fractional, NaN or inf ``t``, ``k1_init <= 0``,
    ``gamma`` outside (0, 1] -- a concrete argument raises ``ValueError`` naming
    it; inside ``jit`` the result is NaN where the domain is left (not clamped), and
    a NaN ``k1`` given to :func:`solve` voids its table (``ok`` False,
    ``reason == Reason.BAD_INPUT``). float16 / bfloat16 raise ``TypeError``.

    Args:
        t: BO iteration(s), whole numbers ``>= 1``.
        k1_init: ``K_{1,1}``, positive.
        gamma: Growth factor in (0, 1].

    Returns:
        ``K_{1,t}``, same shape as ``t``, floating dtype of ``t`` (default float for ints).

    Example:
        >>> float(k1_schedule(3, 100.0, 0.5))
        400.0
        >>> import jax
        >>> float(jax.jit(k1_schedule)(0.0))
        nan
    """
    a = _arguments(schedules.K1_DOMAIN, t=t, k1_init=k1_init, gamma=gamma)
    return _k1(a["t"], a["k1_init"], a["gamma"])


_k1 = jax.jit(schedules.k1)
_xi = jax.jit(schedules.xi)


def xi(t: ArrayLike, noise_var: ArrayLike, delta: ArrayLike) -> jax.Array:
    """``xi_t`` of Theorem 1 / Lemma 7 (Appendix C.3) of Dai et al. (2019).

    ``xi_1 = 0`` and ``xi_t = sqrt(2 sigma^2 log(pi^2 t^2 (t - 1) / (6 delta)))``
    for ``t > 1``, where ``sigma^2`` is the noise variance of the observed final
    validation accuracy (equivalently error) and ``delta`` is the paper's
    ``delta''``. With it, ``y*_{t-1} - xi_t <= f*_{t-1}`` for all ``t`` with
    probability ``>= 1 - delta``. It enters the BOS event as
    ``error < best_error + xi_t`` (:func:`backward_induction`, corrected mode).

    Outside the domain (``t < 1``, a fractional, NaN or inf ``t``, NaN or inf ``noise_var``,
    ``noise_var < 0``, ``delta`` outside (0, 1)) a concrete argument raises
    ``ValueError`` naming it and a traced one gives NaN, as in :func:`k1_schedule`.

    Args:
        t: BO iteration(s), whole numbers ``>= 1``.
        noise_var: ``sigma^2``, ``>= 0``.
        delta: Confidence parameter in (0, 1).

    Returns:
        ``xi_t``, same shape as ``t``.

    Example:
        >>> float(xi(1, 1e-4, 0.1))
        0.0
    """
    a = _arguments(schedules.XI_DOMAIN, t=t, noise_var=noise_var, delta=delta)
    return _xi(a["t"], a["noise_var"], a["delta"])
