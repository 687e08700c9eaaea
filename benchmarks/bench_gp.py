"""GP benchmark: fit + posterior + predict on 2,048 query points.

One study and a batch of studies (n = 100 observations, d = 9), float32 and
float64. Compile time is measured separately from run time; run times are the
median of several calls after ``block_until_ready``. The batch is processed
with ``lax.map(..., batch_size=...)`` over vmapped chunks so memory stays bounded.
One BLAS thread and XLA's single-threaded Eigen (``_common.setup_environment``).

Usage:
    python benchmarks/bench_gp.py            # full: batch of 1,000 studies
    python benchmarks/bench_gp.py --quick    # smoke run: batch of 20
"""

from __future__ import annotations

import _common

_common.setup_environment()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)  # float64 available; each case picks its dtype

import jax.numpy as jnp  # noqa: E402

from jaxstop import gp  # noqa: E402

N, D, M = _common.GP_N, _common.GP_D, _common.GP_QUERIES


def one_study(X, y, Xq, steps, tol):
    z, _, _ = gp.standardize(y)
    params, info = gp.fit(X, z, steps=steps, tol=tol)
    post = gp.posterior(params, X, z)
    mean, var = gp.predict(post, Xq)
    return mean, var, info.finite, info.steps


def timed(fn, *args, repeats):
    """Compile time, median run time (after one warm-up call) and the output of ``fn(*args)``."""
    compiled, compile_s = _common.compile_timed(fn, *args)
    run_s, out = _common.median_seconds(lambda: compiled(*args), repeats)
    return compile_s, run_s, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small batch, few repeats")
    ap.add_argument("--batch", type=int, default=None, help="number of studies in the batch case")
    ap.add_argument("--steps", type=int, default=30, help="objective evaluations per fit (at most; see --tol)")
    ap.add_argument("--tol", type=float, default=1e-4, help="gp.fit's convergence tolerance (0: every step)")
    ap.add_argument("--chunk", type=int, default=50, help="studies per vmapped chunk")
    ap.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    ap.add_argument("--repeats-batch", type=int, default=None, help="timed calls of the batch case")
    ap.add_argument("--out", default=str(Path(__file__).parent / "out" / "bench_gp.md"))
    args = ap.parse_args(argv)
    batch = args.batch or (20 if args.quick else 1000)
    chunk = min(args.chunk, batch)
    repeats_one, repeats_batch = (3, 1) if args.quick else (7, 3)
    repeats_batch = args.repeats_batch or repeats_batch
    dtypes = {"float32": (jnp.float32,), "float64": (jnp.float64,), "both": (jnp.float32, jnp.float64)}[args.dtype]

    device = jax.devices()[0]
    machine = f"{_common.cpu()}, {device.platform}: {device.device_kind}"
    rows = []
    for dtype in dtypes:
        X, y, Xq = _common.gp_studies(jax.random.key(0), batch, dtype)
        single = lambda X, y, Xq: one_study(X, y, Xq, args.steps, args.tol)  # noqa: E731
        c1, r1, out1 = timed(single, X[0], y[0], Xq[0], repeats=repeats_one)

        def batched(X, y, Xq):
            return jax.lax.map(lambda a: single(*a), (X, y, Xq), batch_size=chunk)

        cb, rb, outb = timed(batched, X, y, Xq, repeats=repeats_batch)
        ok = float(jnp.mean(outb[2]))
        used = float(jnp.median(outb[3]))
        rows.append((jnp.dtype(dtype).name, c1, r1, cb, rb, rb / batch, ok, used))
        print(f"{jnp.dtype(dtype).name}: single compile {c1:.2f}s run {r1 * 1e3:.1f}ms | "
              f"batch {batch}: compile {cb:.2f}s run {rb:.2f}s ({rb / batch * 1e3:.2f} ms/study), finite {ok:.3f}, "
              f"evaluations used (median) {used:g}",
              flush=True)

    lines = [
        f"### GP: fit (at most {args.steps} evaluations, tol {args.tol:g}) + posterior + predict at {M} points, "
        f"n = {N}, d = {D}",
        "",
        f"Machine: {machine}. Command: `python benchmarks/bench_gp.py {' '.join(sys.argv[1:])}`"
        f" (OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}, "
        f"jax {jax.__version__}).",
        "",
        f"| dtype | 1 study: compile (s) | 1 study: run (ms) | {batch} studies: compile (s) | {batch} studies: run (s) "
        "| per study in batch (ms) | fits finite | evaluations used, median |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, c1, r1, cb, rb, per, ok, used in rows:
        lines.append(f"| {name} | {c1:.2f} | {r1 * 1e3:.1f} | {cb:.2f} | {rb:.2f} | {per * 1e3:.2f} | {ok:.3f} "
                     f"| {used:g} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    print()
    print(text)


if __name__ == "__main__":
    sys.exit(main())
