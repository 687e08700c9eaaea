"""How fast can any vmapped JAX program replay successive halving here? A floor for the goal
of batched SH at 10x the NumPy loop (``bench_sim_anchors.py``).

Times, in turn in one process on one pinned core, on the embedded AlexNet table (64 curves,
float32, eta = 3, one bracket: 64 rows at 1, 4, 11, 33, 100 epochs):

* the NumPy loop of ``bench_sim_anchors.py`` (the same synchronous SH rules, one run at a time);
* jaxstop SH, ``jax.vmap(sim.run)`` over the keys, the whole trace returned, and the same keys
  through ``sim.run_batch`` (blocks of 128 studies on CPU, the benchmark's row);
* the same, returning only each study's incumbent and budget (XLA drops the per-step trace);
* ``sim.run_batch`` with ``record="final"`` (the outcome only, through ``tell_batch_last``);
* a minimal straight-line kernel, vmapped: draw 64 rows (``lax.top_k`` of uniforms, as
  ``sim.run`` does), then per rung look up each kept row's loss at ``min(r_i, curve length)``,
  rank by pairwise comparisons and keep the best ``n_{i+1}``. It leaves out what jaxstop's
  rules add (the round budget carried over when a curve ends, complete members that compete
  without training, the incumbent across rungs, the trace), so it does *less* work than the
  other three: a floor, not a contender. The same kernel with the row draw replaced by a
  rotation of the rows (one random offset) shows what the draw costs.

Usage (from the repository root; the other core idle)::

    python benchmarks/explore/sh_floor.py --pin 1
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: E402

_common.setup_environment()

import argparse  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import bench_sim_anchors as anchors  # noqa: E402
from jaxstop import policies, sim  # noqa: E402


def floor_kernel(values, lengths, sizes, budgets, draw: bool):
    """One study of the minimal kernel: ``(row kept last, epochs spent)``."""

    def one(key):
        n = values.shape[0]
        if draw:
            rows = jax.lax.top_k(jax.random.uniform(key, (n,)), sizes[0])[1]
        else:
            shift = jax.random.randint(key, (), 0, n)
            rows = (jnp.arange(sizes[0]) + shift) % n
        spent, prev = jnp.zeros((), jnp.int32), 0
        for i, (k, r) in enumerate(zip(sizes, budgets)):
            rows = rows[:k]
            end = jnp.minimum(r, lengths[rows])
            loss = values[rows, end - 1]
            spent = spent + jnp.sum(jnp.maximum(end - prev, 0))
            prev = r
            if i + 1 < len(sizes):
                idx = jnp.arange(k)
                before = (loss[None, :] < loss[:, None]) | ((loss[None, :] == loss[:, None])
                                                            & (idx[None, :] < idx[:, None]))
                rank = jnp.sum(before, axis=1)
                rows = rows[jnp.zeros((k,), jnp.int32).at[rank].set(idx)]
        return rows[0], spent

    return one


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5000, help="vmapped studies per call")
    ap.add_argument("--numpy-runs", type=int, default=2000, help="NumPy loop runs per call")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--pin", type=int, default=None)
    args = ap.parse_args(argv)
    _common.pin(args.pin)

    values, lengths, table = anchors.alexnet_table()
    n, max_budget = values.shape
    b = policies.halving_schedule("sh", n, max_budget, anchors.ETA).brackets[0]
    bracket = (b.sizes, b.budgets, b.round_budgets)
    policy = policies.sh(n, max_budget, eta=anchors.ETA)
    keys = jax.random.split(jax.random.key(0), args.runs)

    def compiled(fn):
        c, seconds = _common.compile_timed(fn, keys)
        jax.block_until_ready(c(keys))
        return (lambda: c(keys)), seconds

    full, c_full = compiled(lambda k: jax.vmap(lambda kk: sim.run(policy, table, kk))(k))
    blocks, c_blocks = compiled(lambda k: sim.run_batch(policy, table, k))
    final, c_final = compiled(lambda k: sim.run_batch(policy, table, k, record="final"))
    small, c_small = compiled(lambda k: jax.vmap(
        lambda kk: (lambda t: (t.incumbent, t.budget))(sim.run(policy, table, kk)))(k))
    vals, lens = jnp.asarray(values), jnp.asarray(lengths.astype(np.int32))
    floor, c_floor = compiled(jax.vmap(floor_kernel(vals, lens, b.sizes, b.budgets, True)))
    rot, c_rot = compiled(jax.vmap(floor_kernel(vals, lens, b.sizes, b.budgets, False)))
    numpy_loop = anchors.numpy_call(values, lengths, bracket, max_budget, args.numpy_runs)[0]
    rows = [("NumPy loop, plain SH, one run at a time", args.numpy_runs, numpy_loop, None),
            ("jaxstop SH, one vmapped batch, whole trace", args.runs, full, c_full),
            ("jaxstop SH, `sim.run_batch` (blocks of 128), whole trace", args.runs, blocks, c_blocks),
            ("jaxstop SH, one vmapped batch, incumbent and budget only", args.runs, small, c_small),
            ("jaxstop SH, `sim.run_batch`, outcome only (`record=\"final\"`)", args.runs, final, c_final),
            ("minimal kernel (less work: a floor)", args.runs, floor, c_floor),
            ("minimal kernel, rows rotated instead of drawn", args.runs, rot, c_rot)]
    times, _ = _common.interleaved_seconds([r[2] for r in rows], args.repeats)
    base = rows[0][1] / times[0]
    table_rows = []
    for (what, runs, _, comp), t in zip(rows, times):
        rate = runs / t
        table_rows.append([what, f"{rate:,.0f}", f"{1e6 / rate:.1f}", f"{rate / base:.1f}x",
                           "" if comp is None else f"{comp:.1f}"])
    text = "\n\n".join([
        _common.report_header("How fast a vmapped SH can be: a floor against the NumPy loop"),
        f"AlexNet table ({n} curves x {max_budget} epochs, float32), eta = {anchors.ETA}, one bracket "
        f"({', '.join(map(str, b.sizes))} rows at {', '.join(map(str, b.budgets))} epochs); vmapped calls over "
        f"{args.runs} keys; median of {args.repeats} calls, the rows timed in turn.",
        _common.markdown_table(["what", "runs/s", "us per run", "/ NumPy loop", "compile s"], table_rows),
    ])
    print(text)


if __name__ == "__main__":
    main()
