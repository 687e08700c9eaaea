"""Benchmark: jaxstop's simulator -- batched against one at a time for every policy, memory, overhead.

All sections play studies on the 64 embedded AlexNet curves (``jaxstop.data.alexnet_curves()``,
float32, 100 epochs, ragged), eta = 3 for the halving family; the external anchors (a NumPy
loop, Optuna's pruner) are in ``bench_sim_anchors.py``.

* ``policies``: runs/s of every policy three ways in one run: ``sim.run_batch`` of the keys
  (on CPU in blocks of ``CPU_BLOCK`` studies) with the batch protocol (a whole round per loop
  iteration), the same with the one-job protocol (``batched=False``), and one ``sim.run`` at a
  time in a Python loop (the default
  protocol; results waited on once at the end, the loop's most favourable case). Policies
  without a batch protocol (random search, sub-sampling, BOHB, BO-BOS, GP-UCB, automatic
  termination) run the one-job protocol either way: the same program, so one column.
  ``--record`` sets what every call's trace keeps (``full`` by default; ``final``: each
  study's outcome alone, in all three).
* ``max_jobs``: the batch protocol with ``max_jobs`` at the policy's bound and at 4x it
  (the loop ends with its studies, so the extra capacity should cost nothing).
* ``memory``: peak RSS of a fresh process running ``sim.run_many`` with a fixed chunk and
  ``num_runs`` = 1x, 4x, 16x the chunk (expected flat apart from the returned trace).
* ``overhead``: ``sim.run_many`` (chunk = num_runs / 4) with progress and checkpoints against
  one monolithic ``sim.run_batch`` of all runs (goal: under 10%), results checked equal; and the
  chunks' program run chunk by chunk without ``run_many`` (separates the program's shape from
  ``run_many``'s machinery).

    .venv/bin/python benchmarks/bench_sim.py                          # every section
    .venv/bin/python benchmarks/bench_sim.py --sections policies --quick
    .venv/bin/python benchmarks/bench_sim.py --sections policies --only sh,sh+ --record final

Compile and run are timed separately; each figure is the median of ``--repeats`` calls after a
warm-up call, each waited on with ``block_until_ready``. The tables are printed and written to
``--out`` (Markdown) with the machine, the command and the versions.
"""

from __future__ import annotations

import _common

_common.setup_environment()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxstop  # noqa: E402
from jaxstop import policies, sim  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "bench_sim.md"
SECTIONS = ("policies", "max_jobs", "memory", "overhead")


def alexnet():
    """``(table, configs)``: the AlexNet curves as a float32 table (masked entries zero) and
    their configurations in the unit cube."""
    curves = jaxstop.data.alexnet_curves()
    mask = np.asarray(curves.mask, bool)
    values = np.where(mask, np.asarray(curves.values, np.float32), 0.0).astype(np.float32)
    configs = np.clip(np.asarray(curves.configs, np.float32), 0.0, 1.0)
    return sim.CurveTable(jnp.asarray(values), jnp.asarray(mask)), jnp.asarray(configs)


def make_policy(name, table, configs):
    """The policy ``name`` on the table, with the settings the tables print."""
    n, t = table.values.shape
    uq = name.endswith("+")
    base = name.rstrip("+")
    if base == "sh":
        return policies.sh(n, t, eta=3, uq=uq)
    if base == "hyperband":
        return policies.hyperband(n, t, eta=3, uq=uq)
    if base == "bohb":
        return policies.bohb(n, t, eta=3, uq=uq, candidates=configs)
    if base == "subsampling":
        return policies.subsampling(n, t, eta=3, uq=uq)
    if base == "random_search":
        return policies.random_search(n, max_budget=t)
    if base == "bo_bos":
        return policies.bo_bos(configs, max_budget=t, max_evals=20, num_paths=2000)
    if base == "gp_ucb":
        return policies.gp_ucb(configs, max_budget=t, max_evals=20)
    if base == "auto_termination_bo":
        return policies.auto_termination_bo(n, max_budget=t, max_evals=30, candidates=configs, threshold=0.01)
    raise ValueError(name)


# (policy, vmapped runs, runs of the one-at-a-time loop, settings)
POLICIES = [
    ("sh", 400, 40, ""), ("sh+", 200, 20, "profile of 3 curves"),
    ("hyperband", 200, 20, ""), ("hyperband+", 100, 10, "profile of 3 curves"),
    ("random_search", 400, 40, "every row once"), ("subsampling", 100, 10, ""), ("subsampling+", 50, 5, ""),
    ("bohb", 50, 5, ""), ("bohb+", 50, 5, "profile of 3 curves"),
    ("gp_ucb", 8, 4, "max_evals 20"), ("bo_bos", 8, 4, "max_evals 20, 2,000 paths"),
    ("auto_termination_bo", 8, 4, "max_evals 30, threshold 0.01"),
]


def first_call(fn):
    """``(fn, seconds)``: ``fn`` after its first call (waited on), and that call's time."""
    start = time.perf_counter()
    jax.block_until_ready(fn())
    return fn, time.perf_counter() - start


def vmapped(policy, table, num_runs, batched, max_jobs=None, record="full"):
    """``(call, compile s)``: ``sim.run_batch`` of ``num_runs`` keys, compiled ahead of time
    and called once."""
    keys = jax.random.split(jax.random.key(0), num_runs)
    fn = lambda k: sim.run_batch(policy, table, k, batched=batched, max_jobs=max_jobs, record=record)  # noqa: E731
    compiled, seconds = _common.compile_timed(fn, keys)
    return first_call(lambda: compiled(keys))[0], seconds


def one_at_a_time(policy, table, num_runs, record="full"):
    """``(call, first call s)``: ``num_runs`` calls of ``sim.run`` in a Python loop (waited on
    once at the end), called once; the first call compiles ``sim.run``'s program."""
    keys = list(jax.random.split(jax.random.key(0), num_runs))
    _, first = first_call(lambda: sim.run(policy, table, keys[0], record=record))
    return first_call(lambda: [sim.run(policy, table, k, record=record) for k in keys])[0], first


def policies_section(table, configs, args):
    rows = []
    for name, runs, loop_runs, note in POLICIES:
        if args.only and name not in args.only:
            continue
        runs, loop_runs = max(1, int(runs * args.scale)), max(1, int(loop_runs * args.scale))
        policy = make_policy(name, table, configs)
        has_batch = policy.ask_batch is not None
        rec = args.record
        calls = [vmapped(policy, table, runs, False, record=rec), one_at_a_time(policy, table, loop_runs, rec)]
        if has_batch:
            calls.append(vmapped(policy, table, runs, True, record=rec))
        times, _ = _common.interleaved_seconds([fn for fn, _ in calls], args.repeats)
        (t_one, t_loop), (c_one, c_loop) = times[:2], (calls[0][1], calls[1][1])
        t_batch, c_batch = (times[2], calls[2][1]) if has_batch else (t_one, c_one)
        cells = [name, policy.limits.max_jobs, runs,
                 f"{runs / t_batch:,.1f} ({c_batch:.1f} s)" if has_batch else "= one-job (no batch protocol)",
                 f"{runs / t_one:,.1f} ({c_one:.1f} s)", f"{loop_runs / t_loop:,.1f} ({c_loop:.1f} s)",
                 f"{t_one / t_batch:,.1f}x" if has_batch else "1x (same program)",
                 f"{(t_loop / loop_runs) / (t_batch / runs):,.1f}x", note]
        rows.append(cells)
        print("# " + " | ".join(map(str, cells)), flush=True)
    head = ["policy", "max_jobs", "vmapped runs", "batched runs/s (compile s)", "one-job runs/s (compile s)",
            "one at a time runs/s (first call s)", "batch / one-job", "batched / one at a time", "settings"]
    kept = "the whole trace returned" if args.record == "full" else f"`record={args.record!r}` in every call"
    return ("## Batched against one at a time, every policy\n\nruns/s = studies per second. Batched and one-job columns: "
            f"`sim.run_batch` of the keys, compiled ahead of time, {kept}; one at a time: "
            "`sim.run` per key in a Python loop (default protocol, its own number of runs, waited on once at the "
            "end), its first call (compile) apart. The three calls of a policy are timed in turn, so they see the "
            "same machine load. Ratios per run; 'batched' is the batch protocol where the policy has one.\n\n"
            + _common.markdown_table(head, rows))


def max_jobs_section(table, configs, args):
    rows = []
    for name in ("sh+",):
        policy = make_policy(name, table, configs)
        runs = max(1, int(200 * args.scale))
        bound = policy.limits.max_jobs
        (f1, c1), (f4, c4) = vmapped(policy, table, runs, True, bound), vmapped(policy, table, runs, True, 4 * bound)
        (t1, t4), _ = _common.interleaved_seconds([f1, f4], args.repeats)
        rows.append([name, runs, f"{bound} / {4 * bound}", f"{c1:.1f} / {c4:.1f}", f"{t1 * 1e3:,.1f} / {t4 * 1e3:,.1f}",
                     f"{t4 / t1:.2f}"])
        print("# " + " | ".join(map(str, rows[-1])), flush=True)
    head = ["policy", "vmapped runs", "max_jobs", "compile s", "run ms", "4x / 1x"]
    return "## max_jobs beyond the policy's bound (batch protocol)\n\n" + _common.markdown_table(head, rows)


def _status_kb(field):
    """A ``Vm...`` field of ``/proc/self/status`` in KiB (None where there is none)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def memory_child(name, num_runs, chunk):
    """In a fresh process: the peak resident memory of one ``sim.run_many``; prints one JSON line.

    ``ru_maxrss`` of a process started from this script carries the parent's peak over the
    ``exec`` (Linux keeps the larger of the two), so the peak is also read as ``VmHWM`` after
    resetting it (``/proc/self/clear_refs``, Linux >= 4.0) just before the call.
    """
    import resource

    table, configs = alexnet()
    policy = make_policy(name, table, configs)
    try:
        Path("/proc/self/clear_refs").write_text("5")
        reset = True
    except OSError:
        reset = False
    before = _status_kb("VmRSS")
    start = time.perf_counter()
    traces = sim.run_many(policy, table, jax.random.key(0), num_runs, chunk_size=chunk, progress=False)
    seconds = time.perf_counter() - start
    nbytes = sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(traces))
    print(json.dumps(dict(before_kb=before, hwm_kb=_status_kb("VmHWM") if reset else None,
                          maxrss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, trace_bytes=nbytes,
                          seconds=seconds)))


def memory_section(table, configs, args):
    chunk = max(jax.device_count(), int(args.chunk * args.scale))
    rows = []
    for mult in (1, 4, 16):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", args.memory_policy,
               str(mult * chunk), str(chunk)]
        res = subprocess.run(cmd, capture_output=True, text=True, check=True, env=dict(os.environ))
        m = json.loads(res.stdout.strip().splitlines()[-1])
        mib = lambda kb: "n/a" if kb is None else f"{kb / 1024:,.0f}"  # noqa: E731  (KiB on Linux)
        peak = m["hwm_kb"] if m["hwm_kb"] is not None else m["maxrss_kb"]
        before = m["before_kb"] or 0
        trace_kb = m["trace_bytes"] / 1024
        rows.append([f"{mult}x", mult * chunk, chunk, mib(m["maxrss_kb"]), mib(m["before_kb"]), mib(peak),
                     mib(peak - before), f"{trace_kb / 1024:,.1f}", mib(peak - before - 2 * trace_kb),
                     f"{m['seconds']:.1f}"])
        print("# " + " | ".join(map(str, rows[-1])), flush=True)
    head = ["num_runs", "runs", "chunk", "ru_maxrss MiB", "RSS before MiB", "peak RSS MiB", "peak - before MiB",
            "returned trace MiB", "peak - before - 2 x trace MiB", "run_many s (compile included)"]
    return (f"## Peak memory against num_runs at a fixed chunk ({args.memory_policy})\n\nEach row is a fresh "
            "process running one `sim.run_many` (compile included). `ru_maxrss` "
            "(`resource.getrusage(RUSAGE_SELF)`) is printed but carries the parent's peak over `exec`; the peak "
            "RSS is `VmHWM` reset just before the call (`/proc/self/clear_refs`), the RSS before is `VmRSS`. The "
            "returned trace grows with `num_runs` by design; at the end `run_many` holds the chunks and their "
            "concatenation, so the last column (peak less two traces) is the working memory, expected flat.\n\n"
            + _common.markdown_table(head, rows))


def overhead_section(table, configs, args):
    policy = make_policy(args.overhead_policy, table, configs)
    n = max(4 * jax.device_count(), int(args.overhead_runs * args.scale) // 4 * 4)
    chunk = n // 4
    key = jax.random.key(0)
    keys = sim.run_keys(key, 0, n)
    fresh = iter(range(10**6))
    with tempfile.TemporaryDirectory() as tmp:
        many = lambda **kw: lambda: sim.run_many(policy, table, key, n, chunk_size=chunk, **kw)  # noqa: E731
        chunk_keys = [keys[c * chunk:(c + 1) * chunk] for c in range(n // chunk)]
        labels_fns = [
            (f"monolithic `sim.run_batch`, {n} runs", lambda: jax.device_get(sim.run_batch(policy, table, keys))),
            (f"`sim.run_batch` per chunk of {chunk} (the program of a chunk, no `run_many`)",
             lambda: jax.tree_util.tree_map(lambda *xs: np.concatenate(xs), *[
                 jax.device_get(sim.run_batch(policy, table, k)) for k in chunk_keys])),
            (f"`run_many`, chunk {chunk}, no progress, no checkpoint", many(progress=False)),
            (f"`run_many`, chunk {chunk}, progress", many(progress=True)),
            (f"`run_many`, chunk {chunk}, progress, checkpoint (a new directory per call)",
             lambda: sim.run_many(policy, table, key, n, chunk_size=chunk, progress=True,
                                  checkpoint=os.path.join(tmp, f"c{next(fresh)}"))),
        ]
        firsts = [first_call(fn)[1] for _, fn in labels_fns]
        times, outs = _common.interleaved_seconds([fn for _, fn in labels_fns], args.repeats)
    rows = []
    for (label, _), first, t, out in zip(labels_fns, firsts, times, outs):
        same = jax.tree_util.tree_all(jax.tree_util.tree_map(
            lambda a, b: np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True), outs[0], out))
        assert same, f"{label}: results differ from the monolithic call"  # the same work
        rows.append([label, f"{t:.3f}", f"{max(first - t, 0.0):.1f}", f"{n / t:,.1f}",
                     f"{(t / times[0] - 1) * 100:+.1f}%"])
        print("# " + " | ".join(rows[-1]), flush=True)
    head = ["call", "run s", "compile s", "runs/s", "overhead vs monolithic"]
    return (f"## Overhead of chunking, progress and checkpoints ({args.overhead_policy}, {n} runs)\n\nEvery call "
            "returns the whole trace on the host (`jax.device_get` for the monolithic one) and equals the "
            "monolithic result bit for bit (asserted). The calls are timed in turn (same machine load). Compile: "
            "the first call's time less a steady call's (the later rows reuse the chunk program). The second row "
            "runs the chunks' program without `run_many`: its difference from the first is the program's shape, "
            "not `run_many`'s machinery. Goal: overhead under 10%.\n\n" + _common.markdown_table(head, rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated, of {', '.join(SECTIONS)}")
    ap.add_argument("--only", default="", help="policies section: comma-separated policy names (default all)")
    ap.add_argument("--record", default="full", choices=sim._run.RECORDS,
                    help="policies section: what every call's trace keeps (sim.run's record)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every number of runs")
    ap.add_argument("--quick", action="store_true", help="--scale 0.25 --repeats 1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=256, help="memory section: the fixed chunk")
    ap.add_argument("--memory-policy", default="sh+")
    ap.add_argument("--overhead-policy", default="sh+")
    ap.add_argument("--overhead-runs", type=int, default=2048)
    ap.add_argument("--pin", type=int, default=None, help="pin the process to this CPU core")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    _common.pin(args.pin)
    if args.memory_child:
        name, num_runs, chunk = args.memory_child
        return memory_child(name, int(num_runs), int(chunk))
    if args.quick:
        args.scale, args.repeats = args.scale * 0.25, 1
    args.only = [s for s in args.only.split(",") if s]
    sections = [s for s in args.sections.split(",") if s]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    table, configs = alexnet()
    run = dict(policies=policies_section, max_jobs=max_jobs_section, memory=memory_section,
               overhead=overhead_section)
    parts = [_common.report_header("Simulation studies: batched, one at a time, memory, overhead"),
             f"AlexNet table ({table.values.shape[0]} curves x {table.values.shape[1]} epochs, ragged, float32); "
             f"median of {args.repeats} timed calls after a warm-up."]
    for s in SECTIONS:
        if s in sections:
            parts.append(run[s](table, configs, args))
    text = "\n\n".join(parts)
    print(text)
    _common.write_report(args.out, text)


if __name__ == "__main__":
    main()
