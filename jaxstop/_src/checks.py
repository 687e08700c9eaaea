"""Eager input validation shared by the public functions.

Structure (ranks, shapes, dtypes, configuration values) is checked in Python
before tracing and raises ``ValueError`` / ``TypeError`` naming the argument.
Value checks (NaN, ranges) run only on concrete arrays: inside ``jit`` or
``vmap`` the caller's array is a tracer and data problems are handled by masks.
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings

import jax
import jax.numpy as jnp
import numpy as np


def is_concrete(*xs) -> bool:
    """True when every one of ``xs`` holds values (none is a tracer inside jit / vmap / grad)."""
    return not any(isinstance(x, jax.core.Tracer) for x in xs)


SUPPORTED_FLOATS = ("float32", "float64")


def check_float_dtype(dtype, name: str) -> None:
    """Raises ``TypeError`` naming ``name`` unless ``dtype`` is float32 or float64.

    float16 / bfloat16 are rejected everywhere: their 3-4 significant digits cannot
    carry a GP factorisation, a tail probability or a regret bound, and XLA's CPU
    linear algebra does not implement them.
    """
    dt = jnp.dtype(dtype)
    if jnp.issubdtype(dt, jnp.floating) and dt.name not in SUPPORTED_FLOATS:
        raise TypeError(
            f"{name} has unsupported dtype {dt.name}; jaxstop computes in float32 or float64 "
            f"(convert with {name}.astype(jnp.float32))"
        )


def compute_dtype(dtype, name: str = "dtype"):
    """The floating dtype a factory computes in: ``dtype`` (float32 or float64), or JAX's
    default float for ``None``. ``TypeError`` naming ``name`` for anything else (integer,
    boolean, complex, float16 / bfloat16, a non-dtype)."""
    if dtype is None:
        return jnp.dtype(jnp.result_type(float))
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be a floating dtype (float32 or float64), got {dtype!r}") from None
    if not jnp.issubdtype(dt, jnp.floating) or dt.name not in SUPPORTED_FLOATS:
        raise TypeError(f"{name} must be a floating dtype (float32 or float64), got {dt.name}")
    return dt


def float_array(x, name: str, dtype=None) -> jax.Array:
    """Converts ``x`` to a floating JAX array, keeping a floating input dtype.

    Integer and boolean inputs become the default float dtype. Complex input and
    floating dtypes other than float32 / float64 are rejected (``TypeError`` naming
    ``name``).
    """
    if isinstance(x, jax.Array) and x.dtype.name in SUPPORTED_FLOATS:
        # already a JAX float array: no conversion to dispatch (an eager jnp.asarray or a
        # same-dtype astype costs tens of microseconds, which latency-bound callers notice)
        if x.weak_type:  # jnp.array(0.2): strongly typed, as every other input (one jit signature)
            return jnp.asarray(x, dtype=x.dtype if dtype is None else dtype)
        return x if dtype is None or x.dtype == jnp.dtype(dtype) else x.astype(dtype)
    if x is None:
        raise TypeError(f"{name} must be array-like of numbers, got None")
    try:
        arr = jnp.asarray(x)
    except OverflowError:  # a Python int beyond JAX's integer type (int32 without x64): as a float
        arr = jnp.asarray(np.asarray(x, dtype=np.float64))
    except TypeError as err:  # e.g. strings, objects
        raise TypeError(f"{name} must be array-like of numbers, got {type(x).__name__}") from err
    except ValueError as err:  # e.g. ragged nested lists
        raise ValueError(f"{name} must be a rectangular array of numbers: {err}") from err
    if jnp.issubdtype(arr.dtype, jnp.complexfloating):
        raise TypeError(f"{name} must be real, got dtype {arr.dtype}")
    check_float_dtype(arr.dtype, name)
    if dtype is not None:
        return arr.astype(dtype)
    if not jnp.issubdtype(arr.dtype, jnp.floating):
        arr = arr.astype(jnp.result_type(float))
    return arr


def strong(x, like=None):
    """``x`` strongly typed where JAX would type it weakly: a Python scalar (``0.5``, ``3``,
    ``True``) as a NumPy 0-d array, a concrete weakly typed JAX array (``jnp.asarray(0.5)``,
    ``jnp.full(n, 0.5)``) cast to a strong type; anything else (NumPy values, strong arrays,
    tracers) as it is. A jitted function compiles one program for a weakly typed argument and
    another for the strong one of the same dtype; inputs made strong share one. The type is
    ``like``'s dtype (a default value of the same kind: a float for a float) where it is of the
    same kind, else the one JAX would give ``x``, so the values compute as they would have; a
    weakly typed ``like`` (a default that is itself weak) leaves ``x`` as it is."""
    py = type(x) in (bool, int, float)
    if not (py or (isinstance(x, jax.Array) and x.weak_type and is_concrete(x))) or getattr(like, "weak_type", False):
        return x
    own = jax.dtypes.canonicalize_dtype(type(x) if py else x.dtype)
    dtype = getattr(like, "dtype", None)
    dtype = dtype if dtype is not None and np.can_cast(own, dtype, casting="same_kind") else own
    return np.asarray(x, dtype) if py else jax.lax.convert_element_type(x, dtype)


def strong_like(tree, like):
    """:func:`strong` on every leaf of ``tree``, typed as the matching leaf of ``like`` (a
    pytree of the same structure up to ``None`` fields of ``tree``, e.g. a policy's default
    params; else, or with ``like`` None, untyped)."""
    if like is not None:
        try:
            return jax.tree_util.tree_map(strong, tree, like, is_leaf=lambda x: x is None)
        except (ValueError, TypeError):  # another structure: the caller's check names it
            pass
    return jax.tree_util.tree_map(strong, tree)


def common_float_dtype(*arrays) -> jnp.dtype:
    """The floating dtype all ``arrays`` promote to (at least the default float)."""
    dt = jnp.result_type(*[a.dtype for a in arrays])
    if not jnp.issubdtype(dt, jnp.floating):
        dt = jnp.result_type(float)
    return dt


def inert_rows(x, mask, fill=0.0) -> jax.Array:
    """``x`` with the rows ``mask`` marks padded replaced by ``fill`` (traceable).

    The one mechanism that makes padded rows inert: applied before any arithmetic,
    so a NaN, inf or 1e30 on a padded row cannot reach a sum, a Gram matrix or a
    gradient (``0 * nan`` is ``nan``, so multiplying by the mask afterwards is not
    enough). ``mask`` has the leading shape of ``x``; trailing axes broadcast.
    """
    x = jnp.asarray(x)
    m = jnp.asarray(mask, dtype=bool)
    m = m.reshape(m.shape + (1,) * (x.ndim - m.ndim))
    return jnp.where(m, x, jnp.asarray(fill, dtype=x.dtype))


def check_rank(x, rank: int, name: str, what: str = "") -> None:
    if jnp.ndim(x) != rank:
        extra = f" {what}" if what else ""
        raise ValueError(f"{name} must be {rank}-D{extra}, got shape {jnp.shape(x)}")


def data_arrays(X, y) -> tuple[jax.Array, jax.Array]:
    """``X`` (n, d) and ``y`` (n,) as floating arrays, checked for rank and matching rows."""
    X = float_array(X, "X")
    y = float_array(y, "y")
    check_rank(X, 2, "X", "with shape (n, d)")
    check_rank(y, 1, "y", "with shape (n,)")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y must have the same number of rows, got {X.shape[0]} and {y.shape[0]}")
    return X, y


def mask_array(mask, shape: tuple[int, ...], name: str = "mask") -> jax.Array:
    """Validates a boolean validity mask of ``shape``; ``None`` means all valid."""
    if mask is None:
        return jnp.ones(shape, dtype=bool)
    try:
        m = mask if isinstance(mask, jax.Array) else jnp.asarray(mask)
    except (TypeError, ValueError) as err:  # a string, a ragged list
        raise TypeError(f"{name} must be a bool array of shape {tuple(shape)}, got {type(mask).__name__}") from err
    if m.dtype != jnp.bool_:
        raise TypeError(f"{name} must have dtype bool, got {m.dtype}")
    if m.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {m.shape}")
    return m


def check_unit_cube(X, name: str, mask=None) -> None:
    """Raises if a concrete ``X`` has (unmasked) entries outside [0, 1] or non-finite."""
    if not is_concrete(X) or (mask is not None and not is_concrete(mask)):
        return
    x = np.asarray(X)
    if mask is not None:
        x = x[np.asarray(mask)]
    if x.size == 0:
        return
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} must be finite")
    lo, hi = float(x.min()), float(x.max())
    if lo < 0.0 or hi > 1.0:
        raise ValueError(f"{name} must lie in the unit cube [0, 1]; got values in [{lo:.6g}, {hi:.6g}]")


def check_finite_where(y, mask, name: str) -> None:
    """Raises if a concrete ``y`` is non-finite where ``mask`` marks it valid."""
    if not (is_concrete(y) and is_concrete(mask)):
        return
    yy = np.asarray(y)
    mm = np.broadcast_to(np.asarray(mask), yy.shape)
    bad = mm & ~np.isfinite(yy)
    if bad.any():
        # float32 input may have been float64 data beyond float32's range, made inf on conversion
        hint = (" (NaN or inf; in float32, JAX's float dtype unless jax_enable_x64 is set, a value beyond "
                "about 3.4e38 is inf too)" if yy.dtype == np.float32 else "")
        raise ValueError(
            f"{name} has {int(bad.sum())} non-finite value(s) where the mask marks it valid{hint}; "
            "mask them out (mask=False) or remove them"
        )


def boolean(value, name: str) -> bool:
    """``value`` as a Python bool; ``TypeError`` naming ``name`` unless it is one (a string such
    as ``"no"`` would otherwise count as True)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def _real_scalar(value):
    """``value`` as a Python float if it is a real scalar (Python, NumPy or 0-d array), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (np.ndarray, jax.Array)) and value.ndim == 0 and is_concrete(value):
        if jnp.issubdtype(value.dtype, jnp.floating) or jnp.issubdtype(value.dtype, jnp.integer):
            return float(value)
    return None


def nonneg_float(value, name: str, *, positive: bool = False, high: float | None = None) -> float:
    if _real_scalar(value) is None:
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {value!r}")
    return value


def positive_scalar(value, name: str, allow_zero: bool = False) -> None:
    """Raises if a concrete scalar/array ``value`` is not (strictly) positive."""
    if not is_concrete(value):
        return
    v = np.asarray(value)
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite, got {value}")
    if allow_zero:
        if np.any(v < 0):
            raise ValueError(f"{name} must be >= 0, got {value}")
    elif np.any(v <= 0):
        raise ValueError(f"{name} must be > 0, got {value}")


def is_prng_key(x) -> bool:
    """True for a PRNG key: a typed key (``jax.random.key``) or a raw ``uint32`` key of
    shape (2,) (``jax.random.PRNGKey``); tracers included (checks dtype and shape only)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return False
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return True
    return dtype == jnp.uint32 and jnp.shape(x) == (2,)


def check_step_args(step: str, args, keyed: bool, num_configs: int | None = None) -> tuple:
    """The arguments a protocol step checks itself: the key of a ``keyed`` step, and the
    per-job numbers of ``tell`` / ``report``, 0-d (a loss of shape (1,) changed the shape of
    a state's incumbent, or failed inside a step without naming it); a concrete
    ``job.config`` of ``tell`` is a row of the policy's table (``num_configs`` rows) or -1
    (a row beyond the table became random search's incumbent, and was clipped to another
    candidate by the model-based policies). Returns ``args`` (strongly typed after the state in
    an eager call, below)."""
    if keyed:
        check_key(args[0])
        return args
    if step == "tell":
        named = {"result.value": getattr(args[2], "value", None), "result.epoch": getattr(args[2], "epoch", None)}
    elif step == "report":
        named = {"epoch": args[2], "value": args[3]}
    else:
        named = {}
    for arg, v in named.items():
        if jnp.ndim(v) != 0:
            raise ValueError(f"{step}(): {arg} must be a scalar (shape ()), got shape {jnp.shape(v)}")
    config = getattr(args[1], "config", None)
    if step == "tell" and num_configs is not None and jnp.ndim(config) == 0 and is_concrete(config):
        c = int(config)
        if not -1 <= c < num_configs:
            raise ValueError(f"tell(): job.config must be a row of the policy's table, 0..{num_configs - 1} "
                             f"(or -1), got {c}")
    # the eager call of a loop driven by hand: its Python numbers and weakly typed arrays
    # (make_result(0.3, ...), report's epoch) made strong, so that a loss from a jitted training
    # step (strong) reuses the compiled step; traced calls (jaxstop.sim) are left as they are
    if not is_concrete(*jax.tree_util.tree_leaves(args[1:])):
        return args
    return (args[0],) + tuple(strong_like(a, None) for a in args[1:])


def check_key(key, name: str = "key", batched: bool = False) -> None:
    """Raises ``TypeError`` naming ``name`` unless ``key`` is a PRNG key (a batch of them
    with ``batched``), saying how to make one from an integer seed."""
    dtype = getattr(key, "dtype", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == jnp.uint32 and jnp.shape(key)[-1:] == (2,)
    lead = jnp.ndim(key) - (0 if typed else 1) if (typed or raw) else -1
    if not (typed or raw) or lead != (1 if batched else 0):
        if batched:
            what = "a 1-D array of PRNG keys (jax.random.split(jax.random.key(seed), n))"
        elif typed or raw:
            what = "one PRNG key (a single key, not a batch of keys)"
        else:
            what = "a PRNG key: pass jax.random.key(seed), not an integer seed"
        got = type(key).__name__ if dtype is None else f"{type(key).__name__} of dtype {dtype} shape {jnp.shape(key)}"
        raise TypeError(f"{name} must be {what}; got {got}")


class _Unset:
    """Type of :data:`UNSET`."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()
"""Default of a deprecated keyword argument: tells "not passed" from any value, ``None`` included."""


@functools.lru_cache(maxsize=None)
def _refusing_identity(message: str):
    @jax.custom_jvp
    def identity(*xs):
        return xs

    @identity.defjvp
    def _jvp(primals, tangents):
        raise TypeError(message)

    return identity


def not_differentiable(message: str, *xs) -> tuple:
    """``xs`` unchanged; differentiating through them raises ``TypeError(message)`` when the
    derivative is traced (instead of an error from deep inside JAX, e.g. "Linearization
    failed" behind a ``custom_vmap``). Costs nothing when no derivative is taken; arrays
    whose tangents are zero (not differentiated) never raise.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> f = lambda x: not_differentiable("f: no derivative", x)[0] * 2.0
        >>> float(f(jnp.float32(1.5)))
        3.0
        >>> try:
        ...     jax.grad(f)(1.5)
        ... except TypeError as e:
        ...     print(e)
        f: no derivative
    """
    return _refusing_identity(message)(*xs)


def deprecated(message: str, stacklevel: int = 3) -> None:
    """Emits a :class:`DeprecationWarning`; ``stacklevel=3`` points at the caller of the
    public function that calls this."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)


def renamed(fn: str, new: str, value, old: str, old_value, stacklevel: int = 4):
    """The value of ``fn``'s argument ``new``, also accepted under its deprecated name ``old``
    (with a :class:`DeprecationWarning`; ``old_value`` is :data:`UNSET` when not passed).
    Raises ``TypeError`` when both are given."""
    if old_value is UNSET:
        return value
    if value is not None:
        raise TypeError(f"{fn}() got both {new} and its deprecated name {old}; pass {new} only")
    deprecated(f"{fn}({old}=...) is deprecated and will be removed in the next release; pass {new}=...",
               stacklevel=stacklevel)
    return old_value


def options_with(options, cls, fn: str, old_keywords: dict, stacklevel: int = 4):
    """The ``options`` argument of ``fn`` as a ``cls`` (a NamedTuple of settings with
    defaults; ``None`` means ``cls()``), with the deprecated keywords ``old_keywords``
    (names of ``cls``'s fields) applied on top and a :class:`DeprecationWarning`.

    Raises ``TypeError`` for an ``options`` of another type or a keyword that is not a
    field of ``cls`` (what Python raises for an unexpected keyword argument).
    """
    if options is None:
        options = cls()
    elif not isinstance(options, cls):
        raise TypeError(f"options must be a {cls.__name__}, got {type(options).__name__}")
    if old_keywords:
        unknown = sorted(set(old_keywords) - set(cls._fields))
        if unknown:
            raise TypeError(f"{fn}() got unexpected keyword argument(s) {unknown}")
        names = sorted(old_keywords)
        example = ", ".join(f"{k}=..." for k in names)
        deprecated(f"{fn}(): passing {names} as keyword arguments is deprecated and will be removed in the next "
                   f"release; pass options={cls.__name__}({example}) instead", stacklevel)
        options = options._replace(**old_keywords)
    return options
