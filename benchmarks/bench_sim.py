"""Benchmark: simulation studies of the halving policies, batch protocol against one job per step.

Measures ``jax.vmap(sim.run)`` over many keys for SH and SH+ (and Hyperband / HB+) on a
real table of learning curves, with the batch protocol (a whole rung per loop iteration:
the default) against the one-job protocol (the anchor, same run, same compiled-size
problem): under ``vmap`` every ``lax.cond`` computes both branches, so the one-job
protocol pays the round's keep decision at every job. A second pair measures what a
``max_jobs`` far above the policy's bound costs (the loop ends with its studies).

    .venv/bin/python benchmarks/bench_sim.py              # 1,000 studies per call
    .venv/bin/python benchmarks/bench_sim.py --runs 200 --repeats 3

Compile and run are timed separately; each figure is the median of ``--repeats`` calls
after a warm-up, each waited on with ``block_until_ready``.
"""

from __future__ import annotations

import _common

_common.setup_environment()

import argparse  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxstop  # noqa: E402
from jaxstop import policies, sim  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=1000, help="studies per call (vmapped keys)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--pin", type=int, default=None, help="pin the process to this CPU core")
    args = ap.parse_args()
    _common.pin(args.pin)
    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)

    curves = jaxstop.data.alexnet_curves()  # the 64 embedded real ImageNet curves
    table = sim.CurveTable(jnp.asarray(curves.values, args.dtype), jnp.asarray(curves.mask))
    n, epochs = table.values.shape
    keys = jax.random.split(jax.random.key(0), args.runs)
    print(f"# sim.run under vmap: {args.runs} studies on AlexNet ({n} curves x {epochs} epochs), {args.dtype}")
    print(f"# machine: {_common.describe()}; jax {jax.__version__}")
    print("| policy | protocol | max_jobs | compile s | run ms (all studies) | per study ms | ratio vs one-job |")
    print("|---|---|---|---|---|---|---|")
    cases = [("SH", policies.sh(n, epochs, eta=3)), ("SH+", policies.sh(n, epochs, eta=3, uq=True)),
             ("HB", policies.hyperband(n, epochs, eta=3)), ("HB+", policies.hyperband(n, epochs, eta=3, uq=True))]
    for name, policy in cases:
        bound = policy.limits.max_jobs
        rows = [("one-job", False, bound), ("one-job", False, 4 * bound), ("batch", True, bound),
                ("batch", True, 4 * bound)]
        anchor = None
        for label, batched, max_jobs in rows:
            fn = lambda k, b=batched, m=max_jobs, p=policy: jax.vmap(  # noqa: E731
                lambda kk: sim.run(p, table, kk, max_jobs=m, batched=b).incumbent_value)(k)
            compiled, seconds = _common.compile_timed(fn, keys)
            t, _ = _common.median_seconds(lambda: compiled(keys), args.repeats)
            anchor = t if anchor is None else anchor
            print(f"| {name} | {label} | {max_jobs} | {seconds:.1f} | {t * 1e3:.1f} | "
                  f"{t * 1e3 / args.runs:.3f} | {anchor / t:.1f}x |")


if __name__ == "__main__":
    main()
