"""Call-to-call spread of the accelerator suite's BOS row: ``bos.solve_batch`` of 1,000 trials at
100,000 paths (N = 50, N0 = 8, float32), the inputs of ``benchmarks/device_suite.py``, compiled
once and then timed call by call (``block_until_ready`` after each).

Run it in two processes to tell the spread between calls from the spread between processes::

    python benchmarks/explore/bos_spread.py --calls 7; python benchmarks/explore/bos_spread.py --calls 7
"""

from __future__ import annotations

import argparse
import os
import time

import jax
import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--paths", type=int, default=100_000)
    ap.add_argument("--calls", type=int, default=7)
    args = ap.parse_args()
    from jaxstop import bos

    rng = np.random.default_rng(0)  # the suite's inputs
    prefix = np.sort(rng.uniform(0.3, 0.7, (args.trials, 8)), axis=1)[:, ::-1].astype(np.float32)
    best = rng.uniform(0.2, 0.35, args.trials).astype(np.float32)
    k1 = rng.uniform(80, 120, args.trials).astype(np.float32)
    fn = jax.jit(lambda p, b, k: bos.solve_batch(jax.random.key(1), p, b, 50, k, 99.0, 1.0,
                                                 num_paths=args.paths).actions)
    dev = jax.devices()[0]
    p, b, k = jax.device_put((prefix, best, k1), dev)
    t0 = time.perf_counter()
    compiled = fn.lower(p, b, k).compile()
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        compiled(p, b, k).block_until_ready()
        times.append(time.perf_counter() - t0)
    print(f"{dev.device_kind}: {args.trials} trials x {args.paths:,} paths, compile {compile_s:.1f} s, "
          f"calls (s): {' '.join(f'{t:.3f}' for t in times)}, median {np.median(times):.3f}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    main()
