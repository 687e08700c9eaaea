"""XLA compile options recommended for programs that call jaxstop.

On CPU, ``xla_cpu_prefer_vector_width=512`` lets XLA use 512-bit vectors where the CPU
has them (AVX-512). LLVM, and with it XLA:CPU, prefers 256-bit vectors by default
(512-bit instructions lowered the clock of early AVX-512 CPUs), while the quadrature of
:mod:`jaxstop.confidence` is bound by arithmetic (exponentials, a polynomial,
divisions) and ran 8-23% faster in float64 with 512-bit vectors on an AVX-512 CPU
(``benchmarks/RESULTS.md``). On a CPU without AVX-512 the option changes nothing.

jaxstop does not apply the options itself: XLA takes them per compiled program, so a
jaxstop function called directly and the same function inside your ``jax.jit`` would be
compiled differently, and rounding-level differences can flip discrete decisions (a
keep count at a tie). Pass them to your top-level ``jit``::

    f = jax.jit(my_fn, compiler_options=jaxstop.compiler_options())
"""

from __future__ import annotations

from typing import Any

import jax

# Options per backend (none on accelerators).
OPTIONS: dict[str, dict[str, Any]] = {"cpu": {"xla_cpu_prefer_vector_width": 512}}


def compiler_options(backend: str | None = None) -> dict[str, Any]:
    """XLA compile options recommended for jaxstop's kernels on ``backend``.

    Pass them to a top-level ``jax.jit`` (``jax.jit(f, compiler_options=...)``, or
    ``f.lower(...).compile(compiler_options=...)``); nested ``jit`` calls take no options.

    Args:
        backend: ``"cpu"``, ``"gpu"``, ...; the default backend when None.

    Returns:
        A new dict: 512-bit vectors on CPU, empty on accelerators.

    Example:
        >>> import jax, jax.numpy as jnp, jaxstop
        >>> jaxstop.compiler_options("cpu"), jaxstop.compiler_options("gpu")
        ({'xla_cpu_prefer_vector_width': 512}, {})
        >>> f = jax.jit(jaxstop.confidence.prob_best, compiler_options=jaxstop.compiler_options())
        >>> [round(float(v), 4) for v in f(jnp.array([0.0, 1.0]), jnp.ones(2))]
        [0.7602, 0.2398]
    """
    return dict(OPTIONS.get(backend or jax.default_backend(), {}))
