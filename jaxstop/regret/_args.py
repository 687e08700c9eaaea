"""Argument checks that several files of :mod:`jaxstop.regret` share."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp

from jaxstop import gp
from jaxstop._src import checks as _checks


def float_param(value, name: str, *, low=0.0, high=None, inclusive_high=True) -> float:
    """A finite Python float ``> low`` (and ``<= high``), or raises naming the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= low:
        raise ValueError(f"{name} must be a finite number > {low}, got {value!r}")
    if high is not None and (value > high if inclusive_high else value >= high):
        raise ValueError(f"{name} must be <= {high}, got {value!r}")
    return value


def nonneg_int(value, name: str) -> int:
    """A Python int ``>= 0``, or raises naming the argument."""
    return _checks.positive_int(value, name, minimum=0)


def check_posterior(post) -> None:
    """Raises unless ``post`` is a :class:`jaxstop.gp.Posterior`."""
    if not isinstance(post, gp.Posterior):
        raise TypeError(f"posterior must be a jaxstop.gp.Posterior (see gp.posterior), got {type(post).__name__}")


def points(X, name: str, d: int, dtype) -> jax.Array:
    """Query points as an (m, d) floating array of ``dtype``, or raises naming the argument."""
    X = _checks.float_array(X, name, dtype)
    _checks.check_rank(X, 2, name, "with shape (m, d)")
    if X.shape[1] != d:
        raise ValueError(f"{name} must have {d} columns like the posterior's X, got shape {X.shape}")
    return X


def dim_mask(value, d: int) -> jax.Array:
    """The ``dim_mask`` argument as a (d,) bool array (default all)."""
    return _checks.mask_array(value, (d,), "dim_mask")


def beta_size(value, dims, dt):
    """``|Gamma|`` of :func:`jaxstop.regret.beta`: ``value``, or the number of real dimensions ``dims``."""
    if value is None:
        return jnp.sum(dims).astype(dt)
    return jnp.asarray(float_param(value, "beta_size"), dt)
