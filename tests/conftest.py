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
