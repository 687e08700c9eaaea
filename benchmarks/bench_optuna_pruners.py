"""Benchmark: latency of the Optuna pruners (BOSPruner, UQSuccessiveHalvingPruner).

Real studies (``optuna.create_study``, random sampler) whose objective replays AlexNet
learning curves from the embedded data; every ``trial.should_prune()`` call is timed as
the user sees it (Optuna's storage read of the trial included) and classified:

* BOSPruner (N = 50 epochs, N0 = 8, 100,000 paths, 99 bins: the paper's settings): the
  first solve in the process (compilation included), a steady-state solve (the call at
  step N0 - 1 of a later trial: curve-GP fit, paths, induction), and a steady-state
  decision (a table lookup, steps N0..N-2).
* UQSuccessiveHalvingPruner (min_resource=2, eta=3, N = 50): a rung decision that
  compiles (a new capacity), a steady-state UQ rung decision, a call between rungs;
  anchors in the same run: the plain rule (``uq=False``) and Optuna's own
  ``SuccessiveHalvingPruner`` on the same study.
* A fresh Python process: the first decision of each pruner with JAX's persistent
  compilation cache cold (it compiles and writes the cache) and warm (it loads).

    .venv/bin/python benchmarks/bench_optuna_pruners.py            # 60 BOS / 200 SH trials
    .venv/bin/python benchmarks/bench_optuna_pruners.py --quick    # 12 / 60 trials

Writes a Markdown table to ``benchmarks/out/bench_optuna_pruners.md``.
"""

from __future__ import annotations

import _common

_common.setup_environment()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optuna  # noqa: E402

from jaxstop.data import alexnet_curves  # noqa: E402
from jaxstop.integrations.optuna import BOSPruner, UQSuccessiveHalvingPruner  # noqa: E402

jax.config.update("jax_enable_x64", True)
optuna.logging.set_verbosity(optuna.logging.WARNING)

N, N0 = 50, 8
_DATA = alexnet_curves()
CURVES = _DATA.values[_DATA.epochs >= N][:, :N].astype(np.float64)


def timed_objective(log):
    """Replays curve ``curve``; appends ``(trial number, step, seconds of should_prune)``."""

    def objective(trial):
        c = trial.suggest_int("curve", 0, CURVES.shape[0] - 1)
        for step, v in enumerate(CURVES[c]):
            trial.report(float(v), step)
            start = time.perf_counter()
            prune = trial.should_prune()
            log.append((trial.number, step, time.perf_counter() - start))
            if prune:
                raise optuna.TrialPruned()
        return float(CURVES[c, -1])

    return objective


def run_study(pruner, n_trials, seed=0):
    log = []
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed), pruner=pruner)
    study.optimize(timed_objective(log), n_trials=n_trials)
    return study, log


def ms(xs):
    return f"{1e3 * statistics.median(xs):.2f} ms (n={len(xs)})" if xs else "-"


def bos_rows(n_trials):
    pruner = BOSPruner(N0, max_steps=N, n_startup_trials=3)
    study, log = run_study(pruner, n_trials)
    active = sorted(n for n, r in pruner.records.items() if r.active)
    solves = [s for n, step, s in log if step == N0 - 1 and n in active]
    decisions = [s for n, step, s in log if N0 <= step < N - 1 and n in active]
    pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
    return [
        ("BOSPruner", "first solve (compiles)", f"{solves[0]:.2f} s"),
        ("BOSPruner", "steady-state solve (fit + 100,000 paths + induction)", ms(solves[1:])),
        ("BOSPruner", "steady-state decision (table lookup)", ms(decisions)),
        ("BOSPruner", "trials pruned", f"{pruned} of {n_trials}"),
    ]


def sh_rows(n_trials):
    rows = []
    for name, pruner, uq in [
        ("UQSuccessiveHalvingPruner", UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3), True),
        ("UQSuccessiveHalvingPruner(uq=False)",
         UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3, uq=False), False),
        ("optuna SuccessiveHalvingPruner",
         optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=3), False),
    ]:
        study, log = run_study(pruner, n_trials)
        rungs = {2 * 3**r for r in range(4)}
        seconds = {(n, step): s for n, step, s in log}
        between = [s for n, step, s in log if step not in rungs]
        pruned = sum(t.state == optuna.trial.TrialState.PRUNED for t in study.trials)
        if uq:
            # every trial reports every step: a decision at rung step S_r is the call at step S_r
            compiling, steady, cap = [], [], 0
            for d in pruner.decisions:
                if d.uq:  # the first decision at a new capacity compiles
                    new_cap = max(cap, _capacity(len(d.members)))
                    (compiling if new_cap > cap else steady).append(seconds[d.number, d.step])
                    cap = new_cap
            rows.append((name, "rung decisions that compile a capacity (32, 64, ...)",
                         ", ".join(f"{c:.2f} s" for c in compiling)))
            rows.append((name, "steady-state UQ rung decision", ms(steady)))
            rows.append((name, "UQ decisions / plain fallbacks",
                         f"{len(compiling) + len(steady)} / {sum(not d.uq for d in pruner.decisions)}"))
        else:
            rows.append((name, "rung decision", ms([s for (n, step), s in seconds.items() if step in rungs])))
        rows.append((name, "call between rungs", ms(between)))
        rows.append((name, "trials pruned", f"{pruned} of {n_trials}"))
    return rows


def _capacity(n):
    """The pruner's padded capacity for ``n`` members (32, doubled as needed)."""
    cap = 32
    while cap < n:
        cap *= 2
    return cap


FRESH = """
import json, sys, time
start = time.perf_counter()
import jax
jax.config.update("jax_enable_x64", True)
import optuna
from jaxstop.integrations.optuna import enable_compilation_cache
enable_compilation_cache(sys.argv[2])
sys.path.insert(0, {bench!r})
from bench_optuna_pruners import run_study, BOSPruner, UQSuccessiveHalvingPruner, N, N0
imported = time.perf_counter() - start
if sys.argv[1] == "bos":
    pruner = BOSPruner(N0, max_steps=N, n_startup_trials=1)
    _, log = run_study(pruner, 3)
    first = max(s for n, step, s in log if step == N0 - 1 and pruner.records[n].active)
else:
    pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    _, log = run_study(pruner, 6)
    uq = {{(d.number, d.step) for d in pruner.decisions if d.uq}}
    first = max(s for n, step, s in log if (n, step) in uq)
print(json.dumps([imported, first]))
"""


def fresh_rows():
    rows = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_common.REPO), str(_common.BENCHMARKS)])}
    for which, name in [("bos", "BOSPruner"), ("uq", "UQSuccessiveHalvingPruner")]:
        with tempfile.TemporaryDirectory() as cache:
            out = []
            for _ in range(2):
                res = subprocess.run([sys.executable, "-c", FRESH.format(bench=str(_common.BENCHMARKS)), which, cache],
                                     capture_output=True, text=True, env=env, check=True)
                out.append(json.loads(res.stdout.strip().splitlines()[-1]))
        for (imported, first), state in zip(out, ("cold", "warm")):
            rows.append((name, f"new process, first solve / UQ decision, {state} persistent cache",
                         f"{first:.2f} s (imports {imported:.1f} s)"))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out", "bench_optuna_pruners.md"))
    args = parser.parse_args()
    n_bos, n_sh = (12, 60) if args.quick else (60, 200)
    rows = bos_rows(n_bos) + sh_rows(n_sh) + fresh_rows()
    lines = [
        "# Optuna pruner latency (`should_prune()`, median)",
        "",
        f"Machine: {_common.describe()}; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; "
        f"jax {jax.__version__}, optuna {optuna.__version__}, float64.",
        f"Command: `.venv/bin/python benchmarks/bench_optuna_pruners.py{' --quick' if args.quick else ''}`; "
        f"{n_bos} BOS trials, {n_sh} halving trials, AlexNet curves (N = {N}).",
        "",
        "| pruner | what | time |",
        "|---|---|---|",
    ] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
