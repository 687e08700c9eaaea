"""Argument checks that several files of :mod:`jaxstop.regret` share."""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop import gp
from jaxstop._src import checks as _checks, gp_priors


def float_param(value, name: str, *, low=0.0, high=None, inclusive_high=True) -> float:
    """A finite Python float ``> low`` (and ``<= high``), or raises naming the argument. A
    concrete 0-d real NumPy or JAX array counts as its value."""
    if (isinstance(value, (np.ndarray, jax.Array)) and value.shape == () and _checks.is_concrete(value)
            and (np.issubdtype(value.dtype, np.floating) or np.issubdtype(value.dtype, np.integer))):
        value = value.item()
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
    """Raises unless ``post`` is a :class:`jaxstop.gp.Posterior` of a supported float dtype."""
    if not isinstance(post, gp.Posterior):
        raise TypeError(f"posterior must be a jaxstop.gp.Posterior (see gp.posterior), got {type(post).__name__}")
    _checks.check_float_dtype(jnp.result_type(post.X), "posterior.X")


def finite_scalar(value, name: str, dtype) -> jax.Array:
    """A scalar argument as a 0-d array of ``dtype``; a concrete one must be finite
    (``ValueError`` naming it), a traced one is left to the computation (NaN out)."""
    value = _checks.float_array(value, name, dtype)
    _checks.check_rank(value, 0, name, "(a scalar)")
    if _checks.is_concrete(value) and not bool(jnp.isfinite(value)):
        raise ValueError(f"{name} must be finite, got {float(value)!r}")
    return value


def rows(X, name: str) -> None:
    """Raises ``ValueError`` naming ``name`` when ``X`` has no row: a shape, so checked
    before tracing (a capacity of real rows needs at least one, padded or not)."""
    if jnp.shape(X)[0] == 0:
        raise ValueError(f"{name} must have at least one row (pad with mask=False for a study without "
                         f"evaluations), got shape {jnp.shape(X)}")


def rtol(value, name: str) -> float:
    """A relative tolerance: a finite Python float ``>= 0``, or raises naming the argument."""
    return _checks.nonneg_float(value, name)


def key(value, name: str = "key") -> None:
    """Raises ``TypeError`` naming ``name`` unless ``value`` is a PRNG key."""
    _checks.check_key(value, name)


def points(X, name: str, d: int, dtype) -> jax.Array:
    """Query points as an (m, d) floating array of ``dtype``, or raises naming the argument."""
    X = _checks.float_array(X, name, dtype)
    _checks.check_rank(X, 2, name, "with shape (m, d)")
    if X.shape[1] != d:
        raise ValueError(f"{name} must have {d} columns like the posterior's X, got shape {X.shape}")
    return X


def no_nan_where(x, mask, name: str) -> None:
    """Raises ``ValueError`` naming ``name`` if a concrete ``x`` is NaN on a row ``mask``
    marks real (``inf`` is a value: a bound not computed, an incumbent not yet found)."""
    if _checks.is_concrete(x, mask):
        bad = int(np.sum(np.isnan(np.asarray(x)) & np.asarray(mask)))
        if bad:
            raise ValueError(f"{name} has {bad} NaN value(s) on real rows (mask); mask them out or remove them")


def prior(value) -> str:
    """The ``prior`` option, one of :data:`jaxstop._src.gp_priors.PRIORS`, or raises ``ValueError``."""
    if isinstance(value, str) and value in gp_priors.PRIORS:
        return value
    raise ValueError(f"prior must be one of {gp_priors.PRIORS}, got {value!r}")


def flag(value, name: str) -> bool:
    """A bool option, or raises ``TypeError`` naming it."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {value!r}")


def dim_mask(value, d: int) -> jax.Array:
    """The ``dim_mask`` argument as a (d,) bool array (default all)."""
    return _checks.mask_array(value, (d,), "dim_mask")


def real_columns(X, dims):
    """A concrete ``X`` without the columns ``dims`` marks padded (inert: the eager checks skip
    them), or ``X`` itself."""
    if _checks.is_concrete(X, dims) and not np.all(np.asarray(dims)):
        return np.asarray(X)[:, np.asarray(dims)]
    return X


def beta_size(value, dims, dt):
    """``|Gamma|`` of :func:`jaxstop.regret.beta`: ``value``, or the number of real dimensions ``dims``."""
    if value is None:
        if not _checks.is_concrete(dims):
            return jnp.sum(dims).astype(dt)
        count = int(np.sum(np.asarray(dims)))  # on the host: no eager device dispatch
        if count == 0:
            raise ValueError("dim_mask marks no real dimension: |Gamma| of beta would be 0 (pass beta_size)")
        return np.asarray(count, dt)
    return np.asarray(float_param(value, "beta_size"), dt)
