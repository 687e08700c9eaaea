"""Speed of the regret bound, GP fit included: jaxstop against Optuna 5.0.

The anchor is Optuna 5.0's ``RegretBoundEvaluator.evaluate`` (top 50% of the trials,
standardised, GP fitted by scipy's L-BFGS-B on torch, UCB over 2,048 Sobol points; CPU
torch, one thread). jaxstop runs :func:`jaxstop.regret.fit_regret_bound` on the same
synthetic studies, cold (gp's default start, no warm start) like Optuna:

* ``jaxstop`` -- the defaults: top set gathered into a fixed capacity, a quasi-Newton
  fit on the analytic gradient (amplitude and mean profiled out; at most 20 steps,
  fewer once converged), 512 random points plus 10 batched
  projected gradient steps on the LCB from the 8 best of them;
* ``jaxstop (Optuna settings)`` -- 2,048 random points, no refinement, zero GP mean;
* ``jaxstop warm`` -- as in a running study: the fit starts from the hyperparameters and
  the quasi-Newton inverse Hessian of the fit one trial earlier (on the first n - 1
  trials, not timed) and takes at most 5 steps.
  Optuna 5.0's evaluator has no warm start (``gpr_cache=None``);
* ``jaxstop float32`` -- the defaults, cold, on the same study cast to float32 (jaxstop
  computes in the dtype of its inputs); the table gives its bound's relative difference
  from the float64 one.

Per study: n in {20, 50, 100, 200, 500} trials, d in {3, 9}; compile time is reported
separately; run times are medians after ``block_until_ready``. Batch: 1,000 studies at
n = 200, vmapped, against 1,000 x Optuna's time per study: cold, warm, and cold
in float32. Both libraries get
one thread (OMP / OpenBLAS / MKL / torch threads = 1 and XLA's single-threaded Eigen),
measured in the same process, optionally pinned to one core (``--pin``), which avoids
thread hand-off stalls when other processes share the machine.

Usage (from the repository root)::

    python benchmarks/bench_termination.py            # full
    python benchmarks/bench_termination.py --quick    # n in {20, 200}, batch of 100

Output: ``benchmarks/out/bench_termination.md``, and Optuna's medians per (n, d) in
``benchmarks/out/optuna_times.json``. On a machine without Optuna and torch (an
accelerator host, say), ``--optuna-from`` takes those medians from a CPU run of the same
script instead of timing Optuna; the studies are the same (one seeded generator), and the
table then says where the anchor was measured. The medians of a full CPU run are kept in
``benchmarks/data/anchors/`` (the file names the machine)::

    python benchmarks/bench_termination.py --optuna-from benchmarks/data/anchors/optuna_termination_xeon_f6m207.json

The batch is one vmapped call unless ``--chunk`` splits it (on CPU, jaxstop maps a
vmapped batch of fits in small groups).
"""

from __future__ import annotations

import _common

_common.setup_environment()  # one thread each: OpenMP / OpenBLAS / MKL (torch), XLA's Eigen

import argparse  # noqa: E402
import datetime  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

from jaxstop import regret  # noqa: E402

SETTINGS = {
    "jaxstop": {},
    "jaxstop (Optuna settings)": {"candidates": 2048, "options": regret.FitOptions(refine_steps=0, fit_mean=False)},
    "jaxstop warm": {"options": regret.FitOptions(fit_steps=5)},
    "jaxstop float32": {},
}
WARM = "jaxstop warm"
F32 = "jaxstop float32"


def optuna_evaluator():
    import optuna
    import torch
    from optuna.terminator import RegretBoundEvaluator

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore")
    return RegretBoundEvaluator(seed=0)


def optuna_trials(X, y):
    from optuna.distributions import FloatDistribution
    from optuna.trial import create_trial

    d = X.shape[1]
    dists = {f"x{i}": FloatDistribution(0.0, 1.0) for i in range(d)}
    return [create_trial(params={f"x{i}": float(X[j, i]) for i in range(d)}, distributions=dists, value=float(y[j]))
            for j in range(len(y))]


class OptunaAnchor:
    """Optuna's median time and bound per study, timed here or read from an earlier run's JSON."""

    def __init__(self, path, repeats):
        self.repeats, self.times = repeats, {}
        if path is None:
            import optuna
            import torch

            self.evaluator = optuna_evaluator()
            self.loaded = None
            self.versions = f"optuna {optuna.__version__}, torch {torch.__version__}"
        else:
            self.evaluator = None
            self.loaded = json.loads(Path(path).read_text())
            self.versions = (f"Optuna's times from `{Path(path).name}` ({self.loaded['versions']}, "
                             f"on {self.loaded['machine']}, {self.loaded['date']})")

    def warm_up(self, X, y):
        if self.evaluator is not None:
            time_optuna(self.evaluator, optuna_trials(X, y), 1)

    def time(self, X, y):
        n, d = X.shape
        digest = study_digest(X, y)
        if self.evaluator is None:
            entry = self.loaded["studies"].get(f"{n},{d}")
            if entry is None or len(entry) < 3 or entry[2] != digest:
                raise SystemExit(f"--optuna-from has no timing of this study with n = {n}, d = {d}: "
                                 "time Optuna with the same options (--quick or not) first")
            t, b = entry[:2]
        else:
            t, b = time_optuna(self.evaluator, optuna_trials(X, y), self.repeats)
            t, b = float(t), float(b)
        self.times[f"{n},{d}"] = (t, b, digest)
        return t, b

    def save(self, path, machine):
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"machine": machine, "versions": self.versions,
                                    "date": datetime.date.today().isoformat(), "studies": self.times}, indent=1))


def study_digest(X, y):
    """A fingerprint of one study's data: --optuna-from only reuses a timing of the same study."""
    return hashlib.sha256(np.ascontiguousarray(X, np.float64).tobytes()
                          + np.ascontiguousarray(y, np.float64).tobytes()).hexdigest()[:16]


def time_optuna(evaluator, trials, repeats):
    """Median seconds of Optuna's evaluation (no warm-up call) and its last value."""
    from optuna.study import StudyDirection

    return _common.median_seconds(lambda: evaluator.evaluate(trials, StudyDirection.MINIMIZE), repeats, warmup=0)


def time_jaxstop(fn, args, repeats):
    compiled, compile_s = _common.compile_timed(fn, *args)
    run_s, out = _common.median_seconds(lambda: compiled(*args), repeats)
    return compile_s, run_s, out, compiled


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n in {20, 200}, batch of 100 studies, few repeats")
    ap.add_argument("--batch", type=int, default=None, help="studies in the batch case (default 1,000)")
    ap.add_argument("--chunk", type=int, default=None,
                    help="studies per vmapped call in the batch case (default: the whole batch)")
    ap.add_argument("--optuna-from", default=None,
                    help="JSON of Optuna's medians written by an earlier run (--optuna-out); Optuna is not timed")
    ap.add_argument("--optuna-out", default=str(HERE / "out" / "optuna_times.json"),
                    help="where a run that times Optuna writes its medians")
    ap.add_argument("--pin", type=int, default=None, help="pin the process to this CPU core")
    ap.add_argument("--out", default=str(HERE / "out" / "bench_termination.md"))
    args = ap.parse_args(argv)
    _common.pin(args.pin)
    ns = (20, 200) if args.quick else (20, 50, 100, 200, 500)
    dims = (3, 9)
    rep_j, rep_o = (3, 2) if args.quick else (7, 5)
    batch = args.batch or (100 if args.quick else 1000)
    backend = jax.default_backend()
    chunk = min(args.chunk or batch, batch)

    anchor = OptunaAnchor(args.optuna_from, rep_o)
    rng = np.random.default_rng(0)
    anchor.warm_up(*_common.termination_study(rng, 30, 3))  # lazy imports of torch / scipy
    rows, per_study_optuna = [], {}
    for d in dims:
        for n in ns:
            X, y = _common.termination_study(rng, n, d)
            t_opt, b_opt = anchor.time(X, y)
            per_study_optuna[(n, d)] = t_opt
            row = {"n": n, "d": d, "optuna": t_opt, "b_optuna": b_opt}
            Xj, yj = jnp.asarray(X), jnp.asarray(y)
            prev = regret.fit_regret_bound(jax.random.key(0), Xj, yj, jnp.arange(n) < n - 1)
            for name, kw in SETTINGS.items():
                if name == WARM:
                    kw = dict(kw, init=prev.params, init_inv_hessian=prev.inv_hessian)
                fn = (lambda kw: lambda key, X, y: regret.fit_regret_bound(key, X, y, **kw))(kw)
                data = (Xj.astype(jnp.float32), yj.astype(jnp.float32)) if name == F32 else (Xj, yj)
                c, t, out, _ = time_jaxstop(fn, (jax.random.key(1), *data), rep_j)
                row[name] = (c, t, float(out.bound.bound))
            rows.append(row)
            print(f"n={n} d={d}: optuna {t_opt * 1e3:.1f} ms; " + "; ".join(
                f"{k} {row[k][1] * 1e3:.2f} ms (x{t_opt / row[k][1]:.1f})" for k in SETTINGS), flush=True)

    batch_rows = []
    n_b = 200
    for d in dims:
        if (n_b, d) not in per_study_optuna:
            X, y = _common.termination_study(rng, n_b, d)
            per_study_optuna[(n_b, d)] = anchor.time(X, y)[0]
        data = [_common.termination_study(rng, n_b, d) for _ in range(batch)]
        Xb = jnp.asarray(np.stack([a for a, _ in data]))
        yb = jnp.asarray(np.stack([b for _, b in data]))
        keys = jax.random.split(jax.random.key(2), batch)
        done = batch - batch % chunk
        prev_mask = jnp.broadcast_to(jnp.arange(n_b) < n_b - 1, (chunk, n_b))
        cold = jax.jit(jax.vmap(lambda key, X, y, m: (lambda fb: (fb.params, fb.inv_hessian))(
            regret.fit_regret_bound(key, X, y, m, options=regret.FitOptions(chunk_size=256)))))
        inits = [cold(keys[i:i + chunk], Xb[i:i + chunk], yb[i:i + chunk], prev_mask) for i in range(0, done, chunk)]
        for mode in ("cold", "warm", "cold float32"):
            if mode == "warm":
                fn = jax.vmap(lambda key, X, y, init: regret.fit_regret_bound(
                    key, X, y, init=init[0], init_inv_hessian=init[1],
                    options=regret.FitOptions(fit_steps=5, chunk_size=256)))
            else:
                fn = jax.vmap(lambda key, X, y, init: regret.fit_regret_bound(key, X, y, options=regret.FitOptions(chunk_size=256)))
            Xm, ym = (Xb.astype(jnp.float32), yb.astype(jnp.float32)) if mode == "cold float32" else (Xb, yb)
            c, _, _, compiled = time_jaxstop(fn, (keys[:chunk], Xm[:chunk], ym[:chunk], inits[0]), 1)
            runs = []
            for _ in range(1 if args.quick else 3):
                start = time.perf_counter()
                ok = 0
                for j, i in enumerate(range(0, done, chunk)):
                    out = jax.block_until_ready(compiled(keys[i:i + chunk], Xm[i:i + chunk], ym[i:i + chunk], inits[j]))
                    ok += int(np.sum(np.asarray(out.bound.ok)))
                runs.append(time.perf_counter() - start)
            t = statistics.median(runs)
            batch_rows.append({"d": d, "mode": mode, "studies": done, "compile": c, "total": t, "per": t / done,
                               "ok": ok, "optuna": per_study_optuna[(n_b, d)]})
            print(f"batch d={d} {mode}: {done} studies in {t:.2f} s ({t / done * 1e3:.2f} ms each); "
                  f"throughput x{per_study_optuna[(n_b, d)] / (t / done):.1f}", flush=True)

    cpu_text = _common.cpu()
    dev = jax.devices()[0]
    where = "" if backend == "cpu" else f"; jaxstop on {backend} ({dev.device_kind})"
    if args.optuna_from is None:
        anchor.save(args.optuna_out, machine=f"{cpu_text}")
    lines = ["# Regret bound with GP fit: jaxstop vs Optuna 5.0 `RegretBoundEvaluator`", "",
             f"Machine: {cpu_text}{f', pinned to core {args.pin}' if args.pin is not None else ''}"
             f"{where}; jax {jax.__version__}, {anchor.versions}; one thread each on CPU; "
             f"float64 unless marked float32; synthetic studies (sum of squares + sine + noise); "
             f"median of {rep_j} (jaxstop) / {rep_o} (Optuna) runs{' (--quick)' if args.quick else ''}.", "",
             "## One study (cold fit, as Optuna)", "",
             "| n | d | Optuna ms | " + " | ".join(f"{k} ms | speed-up" for k in SETTINGS)
             + " | compile s | bound Optuna / jaxstop | float32 bound / float64 bound - 1 |",
             "|---|---|---|" + "---|---|" * len(SETTINGS) + "---|---|---|"]
    for r in rows:
        cells = [f"{r[k][1] * 1e3:.2f} | x{r['optuna'] / r[k][1]:.1f}" for k in SETTINGS]
        lines.append(f"| {r['n']} | {r['d']} | {r['optuna'] * 1e3:.1f} | " + " | ".join(cells)
                     + f" | {r['jaxstop'][0]:.1f} | {r['b_optuna']:.3g} / {r['jaxstop'][2]:.3g} | "
                     f"{r[F32][2] / r['jaxstop'][2] - 1:+.1e} |")
    lines += ["", f"## Batch of studies at n = {n_b} (jaxstop defaults, vmapped chunks of {chunk})", "",
              "| d | fit | studies | jaxstop total s | per study ms | Optuna per study ms | throughput ratio |"
              " compile s | usable bounds |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in batch_rows:
        lines.append(f"| {r['d']} | {r['mode']} | {r['studies']} | {r['total']:.2f} | {r['per'] * 1e3:.2f} | "
                     f"{r['optuna'] * 1e3:.1f} | x{r['optuna'] / r['per']:.1f} | {r['compile']:.1f} | "
                     f"{r['ok']}/{r['studies']} |")
    lines += ["", "`cold`: at most 20 quasi-Newton steps (fewer once converged; on CPU each study of the vmapped "
              "batch stops on its own, on accelerators the batch runs until its slowest study stops) from gp's default start (like Optuna, which has no warm "
              "start); `warm`: at most 5 steps from the hyperparameters and inverse Hessian of the same study "
              "fitted one trial earlier, "
              "as a running study or a simulation replay evaluates the bound; `cold float32`: `cold` on the "
              "studies cast to float32 (the candidate points differ: uniform draws in float32).",
              "", "Bounds differ between the libraries because the GP fits and the candidate sets differ "
              "(Optuna: zero mean, L-BFGS-B to a gradient tolerance of 1e-2, 2,048 Sobol points; jaxstop: bounded-cost fit, "
              "random points refined by gradient steps)."]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
