"""Eager argument validation of :mod:`jaxstop.bos` (raises naming the argument; value
checks run on concrete arrays only)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks


def float_dtype(x: jax.Array):
    return x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(float)


def check_prefix(prefix, *, check_range: bool, name: str = "prefix") -> jax.Array:
    prefix = jnp.asarray(prefix)
    expected = 2 if name == "prefixes" else 1
    if prefix.ndim != expected:
        raise ValueError(f"{name} must be {expected}-D, got shape {prefix.shape}")
    if prefix.shape[-1] < 1:
        raise ValueError(f"{name} must hold at least one epoch, got shape {prefix.shape}")
    prefix = prefix.astype(float_dtype(prefix))
    if checks.is_concrete(prefix):
        p = np.asarray(prefix)
        if not np.all(np.isfinite(p)):
            raise ValueError(f"{name} must be finite")
        if check_range and not np.all((p > 0) & (p < 1)):
            raise ValueError(
                f"{name} (validation errors) must lie inside (0, 1), got min {p.min()} and max {p.max()}"
            )
    return prefix


def check_horizon(horizon, n0: int) -> None:
    checks.positive_int(horizon, "horizon", 1)
    if horizon <= n0:
        raise ValueError(
            f"horizon (last epoch N) must exceed the prefix length N0 = {n0}: the prefix is "
            f"longer than the horizon or as long, got horizon={horizon}"
        )


def check_config(mode, num_bins, min_count) -> bool:
    if mode not in ("compat", "corrected"):
        raise ValueError(f"mode must be 'compat' or 'corrected', got {mode!r}")
    checks.positive_int(num_bins, "num_bins", 2)
    if isinstance(min_count, bool) or not isinstance(min_count, (int, float)) or min_count < 0:
        raise ValueError(f"min_count must be a number >= 0, got {min_count!r}")
    return mode == "compat"


def solve_config(
    prefix, horizon, num_paths, num_bins, mode, min_count, noise_var, mean, fit_steps, rank, chunk_size
):
    compat = check_config(mode, num_bins, min_count)
    checks.positive_int(num_paths, "num_paths", 1)
    checks.positive_int(fit_steps, "fit_steps", 1)
    checks.positive_int(chunk_size, "chunk_size", 1)
    if rank is not None:
        checks.positive_int(rank, "rank", 1)
    if mean not in ("zero", "constant"):
        raise ValueError(f"mean must be 'zero' or 'constant', got {mean!r}")
    if not (isinstance(noise_var, (int, float)) and noise_var > 0):
        raise ValueError(f"noise_var must be a positive float, got {noise_var!r}")
    return {
        "horizon": horizon,
        "num_paths": num_paths,
        "num_bins": num_bins,
        "compat": compat,
        "min_count": float(min_count),
        "constant_mean": mean == "constant",
        "noise_var": float(noise_var),
        "fit_steps": fit_steps,
        "rank": rank,
        "chunk_size": chunk_size,
    }


def check_costs(best_error, k1, k2, cost, xi_, dtype, compat: bool, batch: int | None = None):
    shape = () if batch is None else (batch,)
    out = []
    for name, value in (("best_error", best_error), ("k1", k1), ("k2", k2), ("cost", cost), ("xi", xi_)):
        arr = jnp.asarray(value)
        if arr.ndim > len(shape) or (arr.ndim == 1 and arr.shape != shape):
            expected = "a scalar" if batch is None else f"a scalar or shape {shape}"
            raise ValueError(f"{name} must be {expected}, got shape {arr.shape}")
        if checks.is_concrete(arr):
            a = np.asarray(arr, dtype=float)
            if name == "best_error" and not np.all((a >= 0) & (a <= 1)):
                raise ValueError(f"best_error must lie in [0, 1], got {value}")
            if name == "k1" and not np.all(a > 0):
                raise ValueError(f"k1 must be positive, got {value}")
            if name == "k1" and compat and not np.all(np.isfinite(a)):
                raise ValueError(f"k1 must be finite in compat mode, got {value}")
            if name == "k2" and not np.all((a > 0) & np.isfinite(a)):
                raise ValueError(f"k2 must be positive and finite, got {value}")
            if name == "cost" and not np.all((a >= 0) & np.isfinite(a)):
                raise ValueError(f"cost must be >= 0 and finite, got {value}")
            if name == "xi" and not np.all((a >= 0) & np.isfinite(a)):
                raise ValueError(f"xi must be >= 0 and finite, got {value}")
            if name == "best_error" and not np.all(np.isfinite(a)):
                raise ValueError(f"best_error must be finite, got {value}")
        out.append(jnp.broadcast_to(arr.astype(dtype), shape))
    return tuple(out)
