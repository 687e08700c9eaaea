"""Counting XLA compilations through JAX's public compile log.

``jax.log_compiles`` makes JAX log one "Compiling jit(NAME) ..." record per program it
compiles; :func:`count_compilations` collects them, so a test can assert that a second call
with new values (same shapes and static arguments) compiles nothing, without reading any
jitted function's private cache.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import re
from typing import Iterator

import jax

_COMPILING = re.compile(r"Compiling (?:jit|pmap)\(([^)]*)\)")


class _Collector(logging.Handler):
    def __init__(self, counts: collections.Counter):
        super().__init__(level=logging.DEBUG)
        self.counts = counts

    def emit(self, record: logging.LogRecord) -> None:
        match = _COMPILING.match(record.getMessage())
        if match:
            self.counts[match.group(1)] += 1


@contextlib.contextmanager
def count_compilations() -> Iterator[collections.Counter]:
    """Counts the programs compiled inside the block, by name.

    Yields a ``collections.Counter`` keyed by the jitted function's name (``"f"`` for
    ``jax.jit(f)``); its ``total()`` is the number of programs compiled. Small helper
    programs JAX compiles for eager operations (``convert_element_type``,
    ``broadcast_in_dim``, ...) are counted too, under their own names.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> f = jax.jit(lambda x: 2 * x)
        >>> x3, y3, x4 = jnp.ones(3), jnp.zeros(3), jnp.ones(4)
        >>> with count_compilations() as first:
        ...     _ = f(x3)
        >>> with count_compilations() as again:
        ...     _ = f(y3)      # same shape: cached
        >>> with count_compilations() as other:
        ...     _ = f(x4)      # new shape: compiles
        >>> first["<lambda>"], again["<lambda>"], other["<lambda>"]
        (1, 0, 1)
    """
    counts: collections.Counter = collections.Counter()
    handler = _Collector(counts)
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    try:
        with jax.log_compiles(True):
            yield counts
    finally:
        logger.removeHandler(handler)
