"""What a checkpoint costs ``sim.run_many``, counted instead of read off two noisy timings.

``bench_sim.py --sections overhead`` compares whole calls with and without ``checkpoint``; on a
noisy machine calls doing the same work differ by up to about 10% there. This script counts
the writer's own cost: it wraps the function that writes one chunk file (compact encoding,
``np.savez``, ``fsync``, rename) and records its wall time and its thread's CPU time
(``time.thread_time``), while ``run_many`` runs SH+ studies on the embedded AlexNet table
(float32, the whole trace). On one core the writer's CPU time is taken from the study; the last
chunk's write overlaps nothing. Each round also times the same call without a checkpoint.

Usage (from the repository root; the other core idle)::

    python benchmarks/explore/checkpoint_cost.py --pin 1
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: E402

_common.setup_environment()

import argparse  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402

from jaxstop import sim  # noqa: E402
from jaxstop.sim import _many  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2048)
    ap.add_argument("--chunk-size", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pin", type=int, default=None)
    args = ap.parse_args(argv)
    _common.pin(args.pin)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench_sim import alexnet, make_policy

    table, configs = alexnet()
    policy = make_policy("sh+", table, configs)
    key = jax.random.key(0)
    writes = []
    write = _many._write_atomic

    def counted(tree, path):
        wall, cpu = time.perf_counter(), time.thread_time()
        write(tree, path)
        writes.append((time.perf_counter() - wall, time.thread_time() - cpu, os.path.getsize(path)))

    _many._write_atomic = counted
    call = lambda **kw: sim.run_many(policy, table, key, args.runs, chunk_size=args.chunk_size,  # noqa: E731
                                     progress=False, **kw)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        call(checkpoint=os.path.join(tmp, "warm"))  # compile
        for r in range(args.rounds):
            writes.clear()
            start = time.perf_counter()
            call()
            plain = time.perf_counter() - start
            start = time.perf_counter()
            call(checkpoint=os.path.join(tmp, f"c{r}"))
            ckpt = time.perf_counter() - start
            cpu, wall = sum(w[1] for w in writes), sum(w[0] for w in writes)
            rows.append([plain, ckpt, cpu, wall, writes[-1][0], statistics.median(w[2] for w in writes)])
    table_rows = [[f"{p:.3f}", f"{c:.3f}", f"{(c / p - 1) * 100:+.1f}%", f"{cpu * 1e3:.0f}",
                   f"{cpu / p * 100:.1f}%", f"{wall * 1e3:.0f}", f"{last * 1e3:.0f}", f"{size / 1e6:.2f}"]
                  for p, c, cpu, wall, last, size in rows]
    head = ["run s, no checkpoint", "run s, checkpoint", "difference", "writer CPU ms", "writer CPU / run",
            "writer wall ms", "last write wall ms", "MB per chunk file"]
    print("\n\n".join([
        _common.report_header("What a checkpoint costs run_many, counted"),
        f"SH+ on the AlexNet table, {args.runs} studies in chunks of {args.chunk_size}, the whole trace; "
        f"{args.rounds} rounds, each timing the call without and with a checkpoint (a new directory).",
        _common.markdown_table(head, table_rows),
    ]))


if __name__ == "__main__":
    main()
