"""JAX's persistent compilation cache, for a fast first decision in a new process.

The bound compiles once per capacity (about 7-12 s on a small CPU). With JAX's persistent
compilation cache the compiled program is written to disk, and a new Python process (a
worker of a distributed study, a restarted script) loads it instead of compiling again:
what is left is tracing the program and loading it (``benchmarks/bench_optuna.py``).

:func:`enable_compilation_cache` sets JAX's options; the same can be done without code,
before Python starts::

    export JAX_COMPILATION_CACHE_DIR=~/.cache/jaxstop/xla
    export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0
    export JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1
"""

from __future__ import annotations

import os

import jax

__all__ = ["DEFAULT_CACHE_DIR", "enable_compilation_cache"]

#: Default directory of the cache (``$JAXSTOP_CACHE_DIR`` overrides it).
DEFAULT_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "jaxstop", "xla")


def enable_compilation_cache(path: str | os.PathLike | None = None, *, min_compile_time_secs: float = 0.0) -> str:
    """Turns on JAX's persistent compilation cache in ``path``.

    Call it once at start-up, before the first JAX computation of the process (JAX sets
    its cache up at the first compilation). Every program compiled in at least
    ``min_compile_time_secs`` is written to ``path``; a later process with the same JAX,
    device and program loads it instead of compiling. The directory may be shared by the
    processes of one machine (entries are written atomically).

    Args:
        path: The cache directory; default ``$JAXSTOP_CACHE_DIR`` or
            :data:`DEFAULT_CACHE_DIR` (``~/.cache/jaxstop/xla``). Created if missing.
        min_compile_time_secs: Cache only programs that took at least this long to
            compile (JAX's default is 1 s; 0 caches every program, the small helper
            programs of eager operations included).

    Returns:
        The cache directory.

    Raises:
        ValueError: A negative ``min_compile_time_secs``.

    Example (not run here: it changes the process's JAX configuration)::

        from jaxstop.integrations.optuna import enable_compilation_cache
        enable_compilation_cache()           # first thing in the script
    """
    if not min_compile_time_secs >= 0:
        raise ValueError(f"min_compile_time_secs must be >= 0, got {min_compile_time_secs!r}")
    path = os.fspath(path or os.environ.get("JAXSTOP_CACHE_DIR") or DEFAULT_CACHE_DIR)
    os.makedirs(path, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_secs))
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return path
