"""jaxstop's Optuna integration against Optuna's own: the terminator.

Arms, on the same studies (one mixed search space: a linear float, a log float, an int, a
log int, a stepped float, a categorical and a conditional float; a noisy quadratic
objective whose 5 cross-validation folds are reported with each trial):

* ``jaxstop``: :class:`jaxstop.integrations.optuna.TerminatorCallback` (defaults: 20
  trials, top half in the fit, 2,048 candidates, warm-started fits);
* ``optuna``: Optuna's ``optuna.terminator.TerminatorCallback`` (defaults). It needs
  torch; where torch is not importable its rows say "not measured".

Measured:

1. ``latency`` (run first: its first calls compile): time of one callback
   (``should_terminate(study)``, reading the study included) on a study of n in ``--n``
   trials (random sampler, in-memory storage): ``first`` (a new terminator in this process
   at a capacity not compiled yet: compile included), ``cold`` (a new terminator, program
   compiled: no warm start) and ``steady`` (the median over ``--steady`` further trials,
   one trial added before each call, warm start carried).
2. ``stop``: a study per sampler seed (TPE) with each callback, up to ``--max-trials``
   trials: the trial at which each stops and the best value then.
3. ``fresh``: a new Python process that loads an SQLite study of n trials and makes its
   first decision, with JAX's persistent compilation cache empty, then warm (the same
   command again): the time from process start to the decision, and of the call alone.

Usage (from the repository root)::

    python benchmarks/bench_optuna.py --n 50 200 500          # everything
    python benchmarks/bench_optuna.py --n 50 200 --seeds 2 --pin 0

Output: a Markdown table on stdout and in ``benchmarks/out/bench_optuna.md``.
"""

from __future__ import annotations

import _common

_common.setup_environment()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from jaxstop.integrations import optuna as jso  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)
warnings.filterwarnings("ignore", category=FutureWarning)  # optuna.terminator's deprecation
warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

CHOICES = ["adam", "sgd", "rmsprop"]


NOISE = 0.2  # standard deviation of a fold score around the objective (--noise)


def objective(trial):
    """Noisy quadratic over the mixed space; 5 folds reported to both terminators."""
    x = trial.suggest_float("x", -2.0, 2.0)
    lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    layers = trial.suggest_int("layers", 1, 4)
    width = trial.suggest_int("width", 8, 256, log=True)
    drop = trial.suggest_float("drop", 0.0, 0.5, step=0.1)
    opt = trial.suggest_categorical("opt", CHOICES)
    f = (x - 0.5) ** 2 + 0.1 * (np.log10(lr) + 2.5) ** 2 + 0.05 * (layers - 2) ** 2
    f += 0.02 * np.log2(width / 32) ** 2 + drop + 0.1 * (opt == "rmsprop")
    if opt == "sgd":
        f += (trial.suggest_float("mom", 0.0, 0.9) - 0.6) ** 2
    folds = (f + NOISE * np.random.default_rng(trial.number).normal(size=5)).tolist()
    jso.report_cross_validation_scores(trial, folds)
    if torch_available():
        from optuna.terminator import report_cross_validation_scores

        report_cross_validation_scores(trial, folds)
    return float(np.mean(folds))


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def optuna_terminator():
    import torch
    from optuna.terminator import Terminator

    torch.set_num_threads(1)
    return Terminator()


# ----------------------------------------------------------------------------- 1. stop
def stop_rows(seeds, max_trials):
    rows = []
    arms = [("jaxstop", lambda: jso.TerminatorCallback())]
    if torch_available():
        from optuna.terminator import TerminatorCallback

        arms.append(("optuna", lambda: TerminatorCallback(optuna_terminator())))
    for seed in seeds:
        for name, make in arms:
            study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
            start = time.perf_counter()
            study.optimize(objective, n_trials=max_trials, callbacks=[make()])
            n = len(study.trials)
            rows.append((seed, name, n if n < max_trials else f"none (ran {max_trials})", study.best_value,
                         time.perf_counter() - start))
        if not torch_available():
            rows.append((seed, "optuna", "not measured (no torch)", float("nan"), float("nan")))
    return rows


# ----------------------------------------------------------------------------- 2. latency
def study_of(n, seed=0, storage=None, name=None):
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed), storage=storage, study_name=name)
    study.enqueue_trial({"opt": "sgd"})
    study.optimize(objective, n_trials=n)
    return study


def time_calls(make, study, steady):
    """(first, cold, steady median) seconds of should_terminate on ``study``."""
    term = make()
    start = time.perf_counter()
    term.should_terminate(study)
    first = time.perf_counter() - start
    start = time.perf_counter()
    make().should_terminate(study)
    cold = time.perf_counter() - start
    times = []
    for _ in range(steady):
        study.optimize(objective, n_trials=1)
        start = time.perf_counter()
        term.should_terminate(study)
        times.append(time.perf_counter() - start)
    return first, cold, statistics.median(times)


def latency_rows(ns, steady):
    rows = []
    for n in ns:
        study = study_of(n)
        rows.append((n, "jaxstop") + time_calls(jso.RegretBoundTerminator, study, steady))
        if torch_available():
            rows.append((n, "optuna") + time_calls(optuna_terminator, study_of(n), steady))
        else:
            rows.append((n, "optuna", None, None, None))
    return rows


# ----------------------------------------------------------------------------- 3. fresh process
FRESH = textwrap.dedent("""
    import time
    start = time.perf_counter()
    import os, sys, json
    sys.path.insert(0, {bench!r})
    import _common
    _common.setup_environment()
    from jaxstop.integrations.optuna import RegretBoundTerminator, enable_compilation_cache
    enable_compilation_cache({cache!r})
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="bench", storage={url!r})
    imported = time.perf_counter()
    decision = RegretBoundTerminator().should_terminate(study)
    done = time.perf_counter()
    print(json.dumps(dict(imports=imported - start, call=done - imported, total=done - start)))
""")


def fresh_rows(ns, pin):
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in ns:
            url = f"sqlite:///{os.path.join(tmp, f'study{n}.db')}"
            study_of(n, storage=url, name="bench")
            cache = os.path.join(tmp, f"cache{n}")
            script = os.path.join(tmp, "fresh.py")
            with open(script, "w") as f:
                f.write(FRESH.format(bench=os.path.dirname(os.path.abspath(__file__)), cache=cache, url=url))
            cmd = ([] if pin is None else ["taskset", "-c", str(pin)]) + [sys.executable, script]
            for label in ("empty cache", "warm cache"):
                start = time.perf_counter()
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                wall = time.perf_counter() - start
                rec = json.loads(out.strip().splitlines()[-1])
                rows.append((n, label, rec["imports"], rec["call"], rec["total"], wall))
            shutil.rmtree(cache, ignore_errors=True)
    return rows


# ----------------------------------------------------------------------------- report
def fmt(seconds):
    return "not measured (no torch)" if seconds is None else f"{1e3 * seconds:,.1f} ms"


def main():
    global NOISE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[50, 200, 500], help="trials of the latency studies")
    ap.add_argument("--seeds", type=int, default=3, help="TPE seeds of the stop comparison")
    ap.add_argument("--max-trials", type=int, default=200)
    ap.add_argument("--noise", type=float, default=NOISE, help="standard deviation of the fold scores")
    ap.add_argument("--steady", type=int, default=10, help="calls in the steady-state median")
    ap.add_argument("--parts", nargs="+", default=["latency", "stop", "fresh"],
                    help="latency runs first: its first calls compile")
    ap.add_argument("--pin", type=int, default=None, help="pin to this core (the fresh processes too)")
    ap.add_argument("--out", default=str(_common.BENCHMARKS / "out" / "bench_optuna.md"))
    args = ap.parse_args()
    NOISE = args.noise
    _common.pin(args.pin)
    import jax

    lines = ["# Optuna terminator: jaxstop against optuna.terminator", "",
             f"Machine: {_common.describe()}; jax {jax.__version__}, optuna {optuna.__version__}, torch "
             f"{'available' if torch_available() else 'not installed'}; "
             f"command: `python benchmarks/bench_optuna.py {' '.join(sys.argv[1:])}`", ""]
    if "latency" in args.parts:
        lines += ["## Time per callback (should_terminate on a study of n trials)", "",
                  "| n | terminator | first call (compile incl.) | cold (compiled, no warm start) | steady state |",
                  "|---|---|---|---|---|"]
        for n, name, first, cold, steady in latency_rows(args.n, args.steady):
            lines.append(f"| {n} | {name} | {fmt(first)} | {fmt(cold)} | {fmt(steady)} |")
        lines.append("")
    if "stop" in args.parts:
        lines += ["## Where each stops (TPE, mixed space, 5 folds)", "",
                  "| seed | terminator | stops at trial | best value | study time |", "|---|---|---|---|---|"]
        for seed, name, n, best, secs in stop_rows(range(args.seeds), args.max_trials):
            lines.append(f"| {seed} | {name} | {n} | {best:.4f} | {secs:.1f} s |")
        lines.append("")
    if "fresh" in args.parts:
        lines += ["## First decision in a new process (SQLite study, persistent compilation cache)", "",
                  "| n | cache | imports + load study | first call | process start to decision | wall incl. "
                  "interpreter |", "|---|---|---|---|---|---|"]
        for n, label, imports, call, total, wall in fresh_rows(args.n, args.pin):
            lines.append(f"| {n} | {label} | {imports:.2f} s | {call:.2f} s | {total:.2f} s | {wall:.2f} s |")
        lines.append("")
    text = "\n".join(lines)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
