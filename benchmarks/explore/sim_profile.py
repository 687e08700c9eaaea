"""Where a batched simulated study spends its time: a profile of one compiled block of studies.

Compiles ``jax.vmap(sim.run)`` of ``--runs`` studies (outcome only, ``record="final"``) of SH or
SH+ on the embedded AlexNet table (float32), runs it ``--repeats`` times under
``jax.profiler.trace`` and adds up the time of each compiled operation (XLA:CPU's thunks,
outermost loops and branches left out: their time is that of the operations inside them). It
prints, per study, the total of those operations, the part inside the keep rule of UQ halving
(operations whose name path holds ``_keep_count_impl``) and inside the fit of the profile
(``_profile_impl``), and the ``--top`` operations with their shapes, execution counts per call
and name paths. The profiler adds overhead per operation, so the total is above the
benchmark's time per study; the shares are what it is for.

Usage (from the repository root; the other core idle)::

    python benchmarks/explore/sim_profile.py --policy sh+ --pin 1
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: E402

_common.setup_environment()

import argparse  # noqa: E402
import collections  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402

import jax  # noqa: E402

import bench_sim_anchors as anchors  # noqa: E402
from jaxstop import policies, sim  # noqa: E402

_CONTROL = ("cond", "while", "call")


def _operations(hlo: str) -> dict:
    """name -> (result shape, op_name path) of every instruction of the compiled module."""
    ops = {}
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (.*)$", line)
        if not m:
            continue
        rest = m.group(2)
        shape = rest.split(" ")[0]
        path = re.search(r'op_name="([^"]+)"', rest)
        ops[m.group(1)] = (shape, path.group(1) if path else "")
    return ops


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", choices=("sh", "sh+"), default="sh+")
    ap.add_argument("--runs", type=int, default=128, help="studies in the vmapped block")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--pin", type=int, default=None, help="core to pin the process to")
    args = ap.parse_args(argv)
    if args.pin is not None:
        _common.pin(args.pin)

    values, _, table = anchors.alexnet_table()
    n, t = values.shape
    policy = policies.sh(n, t, eta=3, uq=args.policy == "sh+")
    keys = jax.random.split(jax.random.key(0), args.runs)
    compiled = jax.jit(jax.vmap(lambda k: sim.run(policy, table, k, record="final"))).lower(keys).compile()
    ops = _operations(compiled.as_text())
    jax.block_until_ready(compiled(keys))
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            for _ in range(args.repeats):
                jax.block_until_ready(compiled(keys))
        trace = next(Path(tmp).rglob("*.trace.json.gz"))
        events = json.load(gzip.open(trace))["traceEvents"]

    scale = 1.0 / (args.repeats * args.runs)  # the trace counts microseconds: us per study
    time_of = collections.Counter()
    count = collections.Counter()
    for e in events:
        name = e.get("name", "")
        if e.get("ph") != "X" or name not in ops or name.startswith(_CONTROL):
            continue
        time_of[name] += e["dur"] * scale
        count[name] += 1 / args.repeats
    total = sum(time_of.values())
    part = {label: sum(d for k, d in time_of.items() if key in ops[k][1])
            for label, key in (("keep rule", "_keep_count_impl"), ("profile fit", "_profile_impl"))}
    print(f"{_common.describe()}; {args.policy}, {args.runs} studies, {args.repeats} calls")
    print(f"operations in all: {total:.1f} us per study")
    for label, d in part.items():
        print(f"  {label}: {d:.1f} us ({d / total:.0%})")
    print(f"\n{'us/study':>8} {'runs':>5}  {'operation':28s} {'shape':34s} path")
    for k, d in time_of.most_common(args.top):
        shape, path = ops[k]
        print(f"{d:8.2f} {count[k]:5.0f}  {k[:28]:28s} {shape[:34]:34s} {path[-110:]}")


if __name__ == "__main__":
    main()
