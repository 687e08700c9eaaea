"""Shared test configuration.

* ``jax_numpy_rank_promotion="raise"`` catches silent broadcasting bugs.
* float64 is enabled for the test session so oracles can be compared at
  1e-9; float32 behaviour is tested explicitly by casting inputs.
"""

import os

# jaxlib's CPU LAPACK calls run on OpenBLAS; its thread pool stalls for ~16 ms
# per call under contention, which dominates small linear algebra. One thread
# is faster for the matrix sizes used here. Must be set before numpy / jax load.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# XLA:CPU's multithreaded Eigen pool can wedge (block_until_ready never returns)
# on vmapped while-loop graphs; single-threaded Eigen avoids it. Tests are small.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_rank_promotion", "raise")
# Synchronous CPU dispatch: avoids a known hang of asynchronous CPU dispatch.
jax.config.update("jax_cpu_enable_async_dispatch", False)


@pytest.fixture
def key():
    return jax.random.key(0)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def _memory_maps() -> int:
    """Memory mappings of this process (Linux), -1 where unknown."""
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:
        return -1


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Drops JAX's compiled programs after each test module.

    Every XLA:CPU executable holds several memory mappings of its own. The whole suite
    compiles thousands of programs, and one process that keeps them all reaches Linux's
    per-process limit (``vm.max_map_count``, 65,530 by default): the next compilation then
    fails inside LLVM with a segmentation fault. No test relies on a program compiled by
    another module, so each module starts from empty caches.
    """
    yield
    jax.clear_caches()
    if os.environ.get("JAXSTOP_TEST_MAPS"):
        with open(os.environ["JAXSTOP_TEST_MAPS"], "a") as f:
            f.write(f"{_memory_maps()}\n")
