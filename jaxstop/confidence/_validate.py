"""Eager validation of the arguments of :mod:`jaxstop.confidence`.

Structure (ranks, shapes, dtypes) raises ``ValueError`` / ``TypeError``; values (NaN
``mu``, ``sigma <= 0``, out-of-range ``epochs``) raise only when the arrays are concrete.
Inside ``jax.jit`` invalid candidates are masked by :func:`valid_mask`. Floating dtypes
other than float32 / float64 (float16, bfloat16) are rejected with a ``TypeError`` naming
the argument (``checks.check_float_dtype``, the package-wide rule).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src.checks import check_float_dtype, is_concrete


def real_array(x, name: str) -> jax.Array | np.ndarray:
    """``x`` as an array of real numbers (float32, float64 or integer), else ``TypeError``
    naming ``name``: booleans, complex numbers and float16 / bfloat16 are rejected."""
    # NumPy arrays stay on the host: checking them there and letting the jitted call
    # transfer them costs a few microseconds, a round of eager jnp dispatches ~100.
    # jax arrays pass as they are (jnp.asarray of one costs ~15 us, and np.asarray of the
    # caller's array reuses its cached host copy).
    if isinstance(x, (jax.core.Tracer, jax.Array, np.ndarray)):
        # a weakly typed array (jnp.full(n, 0.03), jnp.asarray(0.5)) made strong, as every
        # other input: one compiled program whichever way the caller built the array
        arr = jnp.asarray(x, x.dtype) if getattr(x, "weak_type", False) else x
    else:
        try:
            arr = jnp.asarray(x)
        except (TypeError, ValueError) as err:  # None, strings, ragged lists
            raise TypeError(f"{name} must be an array of real numbers, got {type(x).__name__}: {err}") from err
    if arr.dtype == jnp.bool_ or not (
        jnp.issubdtype(arr.dtype, jnp.floating) or jnp.issubdtype(arr.dtype, jnp.integer)
    ):
        raise TypeError(f"{name} must be a real (float or integer) array, got dtype {arr.dtype}")
    check_float_dtype(arr.dtype, name)
    return arr


def first_bad(bad: np.ndarray) -> int:
    return int(np.flatnonzero(bad.ravel())[0])


def _at(i: int, shape) -> str:
    """``[i]`` of a flat index, as ``[row, column]`` for a batch of problems of ``shape``."""
    return str([int(j) for j in np.unravel_index(i, shape)]) if shape is not None else f"[{i}]"


def _beyond_range(given, i: int, dtype) -> str:
    """A note for an error about entry ``i`` when the value as given was finite and the cast
    to ``dtype`` (float32 unless JAX's x64 mode is on) made it inf or flushed it to 0."""
    if not is_concrete(given):
        return ""
    value = np.asarray(given).ravel()[i]
    with np.errstate(over="ignore", under="ignore"):
        if not np.isfinite(value) or np.asarray(value, dtype) == value:
            return ""
    return (f" (given as {float(value):.6g} in {np.asarray(given).dtype}, which {np.dtype(dtype).name} cannot hold: "
            "set jax_enable_x64, or rescale the values)")


def prepare(mu, sigma, mask, *, batch_shape=None):
    """Validate (mu, sigma, mask) of one problem; returns float arrays and a bool mask.

    ``batch_shape``: the shape of a batch flattened into ``mu`` (error messages index it)."""
    mu = real_array(mu, "mu")
    sigma = real_array(sigma, "sigma")
    if mu.ndim != 1:
        raise ValueError(f"mu must have shape (n,), got shape {mu.shape}")
    if sigma.shape != mu.shape:
        raise ValueError(f"mu and sigma must have the same shape, got {mu.shape} and {sigma.shape}")
    if mu.shape[0] == 0:
        raise ValueError("mu must hold at least one candidate, got shape (0,)")
    if mu.dtype == sigma.dtype and jnp.issubdtype(mu.dtype, jnp.floating):
        dtype = jax.dtypes.canonicalize_dtype(mu.dtype)  # jnp.result_type costs ~5 us
    else:
        dtype = jnp.result_type(mu, sigma, 1.0)
    given = {"mu": mu, "sigma": sigma}  # before the cast: a float64 value beyond float32's range becomes inf
    with np.errstate(over="ignore", under="ignore"):  # such values are named below, where they matter
        mu = mu if mu.dtype == dtype else mu.astype(dtype)
        sigma = sigma if sigma.dtype == dtype else sigma.astype(dtype)
    if mask is None:
        mask = np.ones(mu.shape, bool)
    else:
        if not isinstance(mask, (jax.core.Tracer, np.ndarray)):
            mask = jnp.asarray(mask)
        if mask.dtype != jnp.bool_:
            raise TypeError(f"mask must be a boolean array, got dtype {mask.dtype}")
        if mask.shape != mu.shape:
            raise ValueError(f"mask must have the same shape as mu {mu.shape}, got {mask.shape}")
    if is_concrete(mu, sigma, mask):
        m = np.asarray(mask)
        mu_np = np.asarray(mu)
        s_np = np.asarray(sigma)
        bad_mu = m & ~np.isfinite(mu_np)
        if bad_mu.any():
            i = first_bad(bad_mu)
            raise ValueError(f"mu must be finite where mask is True, got mu{_at(i, batch_shape)} = {mu_np[i]}"
                             + _beyond_range(given["mu"], i, dtype))
        bad_s = m & ~(np.isfinite(s_np) & (s_np >= np.finfo(s_np.dtype).tiny))
        if bad_s.any():
            i = first_bad(bad_s)
            raise ValueError(
                f"sigma must be positive and finite where mask is True, got sigma{_at(i, batch_shape)} = {s_np[i]} "
                f"(a subnormal sigma, below {np.finfo(s_np.dtype).tiny:.3g}, counts as 0: the CPU flushes it to 0)"
                + _beyond_range(given["sigma"], i, dtype)
            )
    return mu, sigma, mask


def valid_mask(mu, sigma, mask):
    # a subnormal sigma counts as 0: XLA:CPU flushes subnormal numbers to zero in arithmetic
    tiny = jnp.finfo(sigma.dtype).tiny
    return mask & jnp.isfinite(mu) & jnp.isfinite(sigma) & (sigma >= tiny)


def prepare_batch(mu, sigma, mask):
    mu = real_array(mu, "mu")
    sigma = real_array(sigma, "sigma")
    if mu.ndim != 2:
        raise ValueError(f"mu must have shape (batch, n), got shape {mu.shape}")
    if sigma.shape != mu.shape:
        raise ValueError(f"mu and sigma must have the same shape, got {mu.shape} and {sigma.shape}")
    if 0 in mu.shape:
        raise ValueError(f"mu must hold at least one problem of at least one candidate, got shape {mu.shape}")
    if mask is not None:
        mask = mask if isinstance(mask, (jax.core.Tracer, np.ndarray)) else jnp.asarray(mask)
        if mask.shape != mu.shape:
            raise ValueError(f"mask must have the same shape as mu {mu.shape}, got {mask.shape}")
    flat = prepare(mu.reshape(-1), sigma.reshape(-1), None if mask is None else mask.reshape(-1),
                   batch_shape=mu.shape)
    return tuple(a.reshape(mu.shape) for a in flat)


def prepare_delta(delta_sigma, mu, mask):
    delta = real_array(delta_sigma, "delta_sigma").astype(mu.dtype)
    if delta.shape not in ((), mu.shape):
        raise ValueError(
            f"delta_sigma must be a scalar or have the shape of mu {mu.shape}, got {delta.shape}"
        )
    if is_concrete(delta, mask):
        d = np.broadcast_to(np.asarray(delta), mu.shape)
        bad = np.asarray(mask) & ~np.isfinite(d)
        if bad.any():
            i = first_bad(bad)
            raise ValueError(f"delta_sigma must be finite, got delta_sigma[{i}] = {d[i]}")
    return delta


def prepare_window(losses, epochs, window, ddof):
    losses = real_array(losses, "losses")
    if losses.ndim != 2:
        raise ValueError(f"losses must have shape (n, max_epochs), got shape {losses.shape}")
    if isinstance(epochs, jax.core.Tracer):
        ep = epochs
    else:
        # checked on the host first: jnp.asarray would wrap int64 values beyond int32 without x64
        ep = np.asarray(epochs)
    if not jnp.issubdtype(ep.dtype, jnp.integer):
        raise TypeError(f"epochs must be an integer array, got dtype {ep.dtype}")
    if ep.shape != losses.shape[:1]:
        raise ValueError(f"epochs must have shape ({losses.shape[0]},), got {ep.shape}")
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
        raise ValueError(f"window must be a Python int >= 1, got {window!r}")
    if isinstance(ddof, bool) or not isinstance(ddof, (int, np.integer)) or not 0 <= ddof < window:
        raise ValueError(f"ddof must be a Python int in [0, window), got {ddof!r}")
    if is_concrete(ep):
        e = np.asarray(ep)
        bad = (e < 0) | (e > losses.shape[1])
        if bad.any():
            i = first_bad(bad)
            raise ValueError(
                f"epochs must lie in [0, {losses.shape[1]}] (the max_epochs of losses), "
                f"got epochs[{i}] = {e[i]}"
            )
    else:
        # clipped in its own dtype: a cast to int32 first would wrap an int64 beyond 2**31 around
        ep = jnp.clip(ep, 0, losses.shape[1])
    dtype = jnp.result_type(losses, 1.0)
    return losses.astype(dtype), ep.astype(jnp.int32), int(window), int(ddof)
