"""Argument checks of :mod:`jaxstop.bos`.

Structure (ranks, shapes, dtypes, static configuration) is checked eagerly and raises
``ValueError`` / ``TypeError`` naming the argument. Numeric values go through one
mechanism, :func:`screen`: a table of ``(name, value, predicate, expected)`` rows whose
predicates are evaluated on concrete values (a failing one raises ``ValueError`` naming
the argument) and, for traced values, folded into a boolean ``bad`` flag that the
kernels turn into ``ok=False`` with ``reason = Reason.BAD_INPUT`` on their result.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks


def float_dtype(x: jax.Array):
    return x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(float)


def _unit_open(v):
    return (v > 0) & (v < 1)  # False for NaN


def _positive_finite(v):
    return jnp.isfinite(v) & (v > 0)


def _nonneg_finite(v):
    return jnp.isfinite(v) & (v >= 0)


# What each numeric argument must satisfy: (predicate, expected). Elementwise, traceable.
RULES: dict[str, tuple[Callable, str]] = {
    "prefix": (_unit_open, "inside (0, 1) (validation errors)"),
    "prefix_finite": (jnp.isfinite, "finite"),
    "best_error": (lambda v: (v >= 0) & (v <= 1), "in [0, 1]"),
    "k1": (lambda v: v > 0, "> 0 (+inf allowed in corrected mode)"),
    "k1_compat": (_positive_finite, "> 0 and finite in compat mode"),
    "k2": (_positive_finite, "> 0 and finite"),
    "cost": (_nonneg_finite, ">= 0 and finite"),
    "xi": (_nonneg_finite, ">= 0 and finite"),
    "noise_var": (_positive_finite, "> 0 and finite in the dtype of the prefix"),
    "learning_rate": (_positive_finite, "> 0 and finite in the dtype of the prefix"),
    "curve_gp": (
        lambda alpha, beta, mean, noise_var: _positive_finite(alpha) & _positive_finite(beta)
        & jnp.isfinite(mean) & _positive_finite(noise_var),
        "a CurveGP with finite alpha, beta, noise_var > 0 and a finite mean",
    ),
}


def _describe(args, ok) -> str:
    """``", got ..."`` for an error message: the value, or the first failing one of many."""
    if len(args) > 1 and all(np.size(x) == 1 for x in args):
        return f", got {tuple(np.asarray(x).reshape(()).item() for x in args)!r}"
    a = np.asarray(args[0])
    ok = np.broadcast_to(np.asarray(ok), a.shape) if a.ndim else np.asarray(ok)
    if a.size == 1:
        return f", got {a.reshape(()).item()!r}"
    failing = a[~ok] if ok.shape == a.shape else a.reshape(-1)
    return f", got {failing.size} failing value(s) out of {a.size}, e.g. {failing.reshape(-1)[0].item()!r}"


def screen(rows: Sequence[tuple], batch_shape: tuple[int, ...] = ()) -> jax.Array:
    """Checks numeric arguments that may be traced; the one value check of :mod:`jaxstop.bos`.

    Args:
        rows: ``(name, value, predicate, expected)``; ``value`` an array or a tuple of
            arrays (the predicate's arguments), ``predicate`` elementwise and traceable.
            Axes of the predicate's result beyond ``batch_shape`` are reduced with ``all``.
        batch_shape: Shape of the flag (``(num_trials,)`` for a batch, else ``()``).

    Returns:
        ``bad``, bool of ``batch_shape``: where a traced value fails its predicate.

    Raises:
        ValueError: naming the argument, when a concrete value fails its predicate.
    """
    bad = jnp.zeros(batch_shape, bool)
    for name, value, predicate, expected in rows:
        args = value if isinstance(value, tuple) else (value,)
        if checks.is_concrete(*args):
            with jax.ensure_compile_time_eval():
                ok = np.asarray(predicate(*args))
            if not ok.all():
                raise ValueError(f"{name} must be {expected}{_describe(args, ok)}")
            continue
        ok = jnp.asarray(predicate(*args))
        ok = jnp.all(ok, axis=tuple(range(len(batch_shape), ok.ndim)))
        bad = bad | ~jnp.broadcast_to(ok, batch_shape)
    return bad


def int32_epoch(epoch):
    """A concrete integer ``epoch`` read on the host and clipped into int32's range (every
    epoch beyond it is past any table or curve: the answer is the same), so that JAX without
    x64 cannot wrap an int64 of ``2**32 + 9`` to 9; anything else is returned as it is."""
    if isinstance(epoch, (bool, np.bool_, str, bytes)) or not checks.is_concrete(epoch):
        return epoch
    try:
        e = np.asarray(epoch)
    except (TypeError, ValueError):
        return epoch
    if e.dtype.kind not in "iu" or e.size == 0:
        return epoch
    lo, hi = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    if e.dtype.kind == "u":
        return np.where(e > hi, hi, e).astype(np.int64)
    return np.clip(e.astype(np.int64), lo, hi)


def rule(name: str, value, key: str | None = None) -> tuple:
    """The :func:`screen` row of argument ``name`` under rule ``key`` (default: ``name``)."""
    predicate, expected = RULES[key or name]
    return (name, value, predicate, expected)


def check_in_dtype(dtype, **values) -> None:
    """Raises ``ValueError`` naming the argument when a static float setting (``noise_var``,
    ``learning_rate``) is not positive and finite once cast to the computation's ``dtype``
    (``1e300`` is finite in Python and ``inf`` in float32)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the overflow reported below
        cast = {name: np.asarray(value, dtype) for name, value in values.items()}
    screen([rule(name, v) for name, v in cast.items()])


def check_prefix(prefix, *, name: str = "prefix") -> jax.Array:
    """``prefix`` as a float32 / float64 array of rank 1 (``prefixes``: rank 2), at least one epoch."""
    prefix = checks.float_array(prefix, name)
    expected = 2 if name == "prefixes" else 1
    if prefix.ndim != expected:
        raise ValueError(f"{name} must be {expected}-D, got shape {prefix.shape}")
    if prefix.shape[-1] < 1:
        raise ValueError(f"{name} must hold at least one epoch, got shape {prefix.shape}")
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
    checks.nonneg_float(min_count, "min_count")
    return mode == "compat"


def solve_config(horizon, num_paths, num_bins, mode, min_count, noise_var, mean, fit_steps, rank, chunk_size):
    compat = check_config(mode, num_bins, min_count)
    checks.positive_int(num_paths, "num_paths", 1)
    checks.positive_int(fit_steps, "fit_steps", 1)
    checks.positive_int(chunk_size, "chunk_size", 1)
    if rank is not None:
        checks.positive_int(rank, "rank", 1)
    if mean not in ("zero", "constant"):
        raise ValueError(f"mean must be 'zero' or 'constant', got {mean!r}")
    return {
        "horizon": horizon,
        "num_paths": num_paths,
        "num_bins": num_bins,
        "compat": compat,
        "min_count": checks.nonneg_float(min_count, "min_count"),
        "constant_mean": mean == "constant",
        "noise_var": checks.nonneg_float(noise_var, "noise_var", positive=True),
        "fit_steps": fit_steps,
        "rank": rank,
        "chunk_size": chunk_size,
    }


COST_NAMES = ("best_error", "k1", "k2", "cost", "xi")


def check_costs(best_error, k1, k2, cost, xi_, dtype, compat: bool, batch: int | None = None,
                names: Sequence[str] = COST_NAMES):
    """The loss parameters as arrays of ``dtype`` (shape ``()`` or ``(batch,)``) and their ``bad`` flag.

    Each must be a scalar (or, with ``batch``, a scalar or of shape ``(batch,)``) of a
    supported dtype; its value is checked in ``dtype`` (so ``k1 = 1e40`` is ``inf`` in
    float32) by :func:`screen` against :data:`RULES`. ``names`` are the names the
    caller's signature gives the five arguments.
    """
    shape = () if batch is None else (batch,)
    out = []
    for name, value in zip(names, (best_error, k1, k2, cost, xi_)):
        arr = checks.float_array(value, name)
        if arr.ndim > len(shape) or (arr.ndim == 1 and arr.shape != shape):
            expected = "a scalar" if batch is None else f"a scalar or shape {shape}"
            raise ValueError(f"{name} must be {expected}, got shape {arr.shape}")
        out.append(jnp.broadcast_to(arr.astype(dtype), shape))
    keys = ("best_error", "k1_compat" if compat else "k1", "k2", "cost", "xi")
    bad = screen([rule(n, a, k) for n, a, k in zip(names, out, keys)], shape)
    return (*out, bad)
