"""Reproduce Table 3 of Makarova et al. (2022) on the authors' own 380 CV traces.

Every trace (19 datasets x {RF, XGB} x 10 seeds, 200 BO evaluations with 10-fold CV
scores, vendored in ``benchmarks/data/bo_early_stopping``) is replayed with
:func:`jaxstop.regret.replay`: for every iteration the GP is fitted on the top half of
the evaluations so far, the regret bound (Eq. 8) and the CV threshold (Eq. 9-10) are
computed, and every stopping rule's iteration is read off. From the stops we compute
RYC (Eq. 11, held-out test error of the incumbent) and RTC (Eq. 12, iterations), per
method and algorithm, mean +- std over the 190 traces of each algorithm, side by side
with Table 3 of the paper. Our per-iteration bound is also compared with the authors'
own bound traces (``authors_regrets``).

Conventions (see ``jaxstop.regret.CONVENTIONS``, which cites the line of the paper or of
the code behind each setting):

* ``authors`` -- the released code's choices (row i after i evaluations, threshold frozen
  at iteration 20, s^2 with 1/k, beta from the fitted points, 2,000 random candidates,
  ``Ours_0.5`` as 0.5 / 0.21 times the Nadeau-Bengio standard deviation, the recorded EI /
  PI values of the authors' BO for the EI / PI baselines);
* ``paper`` -- the paper as written (row t after t + 1 evaluations, the incumbent's
  threshold at every iteration, the newest of tied incumbents, s^2 with 1/k (Algorithm 1,
  line 11), beta from the number of evaluations, candidates refined by gradient steps,
  ``Ours_0.5`` as sqrt(0.5 s^2) (Sec. 4.1), EI / PI of the BO's own GP fitted on every
  evaluation so far (``acq_gp="all"``; ``--acq-gp top`` reads the bound's top-half GP
  instead)).

Both conventions report ``Ours_0.21`` and ``Ours_0.5`` in that order (``Stops.ours``).

The GP fit of every row is the convention's unless an option overrides it. ``authors`` fits
as the code does: AutoGluon 0.1's priors, every row afresh from AutoGluon's start with 5
starts, the amplitude and the mean fitted jointly with the noise variance floored at 1e-9, at
most 60 quasi-Newton steps per start to a gradient of 1e-3, and the same 2,000 random
candidates at every row. ``paper`` uses jaxstop's fit (Optuna's priors, rows warm-started
along the trace, the amplitude and the mean profiled out). The options: ``--prior``,
``--rows warm|cold`` (``ReplayOptions.warm_start``), ``--starts``, ``--joint`` /
``--no-joint``, ``--min-noise``, ``--first-fit-steps``, ``--fit-steps``, ``--fit-tol``,
``--redraw`` / ``--no-redraw`` (new candidates at every row or one set). The ``authors``
replay takes the code's own candidates (``--candidates authors``, its default: its 2,000
points, RF's ``max_depth`` on its integer grid, the search space's; ``--candidates uniform``
draws the convention's uniform points instead); with them it computes the authors' bound
(``benchmarks/explore/authors_bound.py`` checks it row by row against an independent
transcription of their code), up to the optimiser (their L-BFGS-B to ``tol`` 1e-6).

Input warping (``--warping``): App. A.1.1 lists "2 input warping parameters" in the authors'
GP, but their code fits the bound without one (AutoGluon 0.1's ``default_gpmodel``); no
convention fits jaxstop's warping by default (it reproduces the authors' bound less well, see
RESULTS.md); ``--warping on`` fits it in both GPs (the bound's and the BO's).

Usage (from the repository root)::

    python benchmarks/termination_cv.py             # all 380 traces
    python benchmarks/termination_cv.py --quick     # 8 traces, smoke run
    python benchmarks/termination_cv.py --jobs 2 --conventions authors,paper
    python benchmarks/termination_cv.py --quick --evaluations 40 --conventions paper   # seconds
    python benchmarks/termination_cv.py --conventions authors --warping off --out benchmarks/out/tcv_off.md

Output: ``benchmarks/out/termination_cv.md``.
"""

from __future__ import annotations

import _common

_common.setup_environment()  # each worker process: one XLA / BLAS thread

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import datasets  # noqa: E402

# Table 3 of the paper: method -> (RTC RF, RTC XGB, RYC RF, RYC XGB)
TABLE3 = {
    "Conv_10": (0.840, 0.841, -0.031, -0.051),
    "Conv_30": (0.686, 0.666, -0.022, -0.026),
    "Conv_50": (0.498, 0.504, -0.015, -0.021),
    "EI_1e-08": (0.896, 0.850, -0.057, -0.052),
    "PI_1e-08": (0.895, 0.814, -0.055, -0.052),
    "Ours_0.21": (0.318, 0.144, -0.004, -0.003),
    "Ours_0.5": (0.580, 0.224, -0.013, -0.006),
}
METHODS = list(TABLE3)
CONV = (10, 30, 50)
WARPING = {"on": True, "off": False, "convention": None}  # --warping -> ReplayOptions.warping
ROWS = {"warm": True, "cold": False, "convention": None}  # --rows -> ReplayOptions.warm_start


def authors_candidates(tr, idx, num=2000):
    """The candidates of the authors' code for traces ``idx``, shape (len(idx), num, d_max): the
    same ``num`` points at every iteration, ``RandomCandidateGenerator(hp_ranges, seed)``
    (``src/enhanced_gp.py``, ``min_lcb``): ``RandomState(seed)`` uniforms over the
    hyperparameters in name order (the unit cube's column order), RF's integer ``max_depth``
    (1-5, the one hyperparameter their internal space keeps on an integer grid) rounded to its
    grid as AutoGluon's integer range does (``[0.5, 5.5]``); padded dimensions 0."""
    out = np.zeros((len(idx), num, tr.configs.shape[2]))
    for r, t in enumerate(idx):
        dm = tr.dim_mask[t]
        u = np.random.RandomState(int(tr.seed[t])).uniform(size=(num, int(dm.sum())))
        names = list(tr.names[t][dm])
        if tr.algo[t] == "RF":
            j = names.index("max_depth")
            v = np.round(0.5 + 1e-6 + u[:, j] * (5 - 2e-6))  # AutoGluon's integer range, EPS inside
            u[:, j] = (v - 1) / 4  # the stored encoding of max_depth (1..5 -> [0, 1])
        out[r][:, dm] = u
    return out


def _worker(payload):
    """Replays a list of chunks of traces in one process (pinned to one core)."""
    core, convention, chunks, opts = payload
    _common.pin(core)
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_enable_x64", True)
    from jaxstop import regret

    tr = datasets.load_bo_cv()
    recorded = convention == "authors"
    n = opts["evaluations"]

    def one(c, v, f, dm, key, ei, pi, cand):
        # ours_scales / ours_variances: the convention's Ours_0.21 and Ours_0.5
        options = regret.ReplayOptions(conv_patience=CONV, ei_thresholds=(1e-8,), pi_thresholds=(1e-8,),
                                       fit_steps=opts["fit_steps"], first_fit_steps=opts["first_fit_steps"],
                                       num_segments=opts["segments"], acq_gp=opts["acq_gp"],
                                       warping=opts["warping"], prior=opts["prior"],
                                       warm_start=opts["warm_start"], num_starts=opts["num_starts"],
                                       fit_tol=opts["fit_tol"], joint=opts["joint"], min_noise=opts["min_noise"],
                                       redraw=opts["redraw"])
        return regret.replay(key, c, v, f, dim_mask=dm, ei=ei if recorded else None, pi=pi if recorded else None,
                             convention=convention,
                             candidates=cand if space_candidates(convention, opts["candidates"]) else None,
                             options=options)

    fn = jax.jit(jax.vmap(one))
    out, compile_s, run_s = [], 0.0, 0.0
    for idx in chunks:
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(opts["seed"]), i))(jnp.asarray(idx))
        args = (tr.configs[idx, :n], tr.values[idx, :n], tr.fold_scores[idx, :n], tr.dim_mask[idx], keys,
                tr.ei[idx, :n], tr.pi[idx, :n], authors_candidates(tr, idx))
        start = time.perf_counter()
        if compile_s == 0.0:
            fn = fn.lower(*args).compile()
            compile_s = time.perf_counter() - start
            start = time.perf_counter()
        res = jax.block_until_ready(fn(*args))
        run_s += time.perf_counter() - start
        res = jax.tree_util.tree_map(np.asarray, res)
        out.append((idx, res))
    return out, compile_s, run_s


def run_convention(convention, traces, args):
    """Replays ``traces`` (indices) with ``convention``; returns per-trace arrays and timings."""
    chunk = max(1, min(args.chunk, len(traces)))
    padded = list(traces) + [traces[0]] * (-len(traces) % chunk)
    chunks = [np.asarray(padded[i:i + chunk]) for i in range(0, len(padded), chunk)]
    jobs = max(1, min(args.jobs, len(chunks)))
    ncpu = os.cpu_count() or 1
    opts = {"fit_steps": args.fit_steps, "first_fit_steps": args.first_fit_steps, "segments": args.segments,
            "seed": args.seed, "evaluations": args.evaluations, "acq_gp": args.acq_gp,
            "warping": WARPING[args.warping], "prior": None if args.prior == "convention" else args.prior,
            "warm_start": ROWS[args.rows], "num_starts": args.starts, "fit_tol": args.fit_tol,
            "joint": args.joint, "min_noise": args.min_noise, "redraw": args.redraw, "candidates": args.candidates}
    payloads = [((j % ncpu) if args.pin else None, convention, chunks[j::jobs], opts) for j in range(jobs)]
    start = time.perf_counter()
    if jobs == 1:
        results = [_worker(payloads[0])]
    else:
        with mp.get_context("spawn").Pool(jobs) as pool:
            results = pool.map(_worker, payloads)
    wall = time.perf_counter() - start
    per_trace = {}
    for out, _, _ in results:
        for idx, res in out:
            for j, t in enumerate(idx):
                if int(t) not in per_trace:
                    per_trace[int(t)] = {k: getattr(res, k)[j] for k in
                                         ("bound", "threshold", "incumbent", "num_evaluations", "ok", "computed")}
                    per_trace[int(t)]["stops"] = {k: getattr(res.stops, k)[j] for k in res.stops._fields}
    timing = {"wall_s": wall, "compile_s": max(r[1] for r in results), "run_s": sum(r[2] for r in results),
              "jobs": jobs, "chunk": chunk}
    return per_trace, timing


def scores(per_trace, traces, tr, lag):
    """RTC and RYC of every method on every trace (Eq. 11-12)."""
    out = {m: {"rtc": [], "ryc": [], "stop": []} for m in METHODS}
    for t in traces:
        r = per_trace[t]
        n_eval, inc, s = r["num_evaluations"], r["incumbent"], r["stops"]
        last = len(n_eval) - 1
        y_final = tr.test[t, inc[last]]
        stops = {"Ours_0.21": s["ours"][0], "Ours_0.5": s["ours"][1], "EI_1e-08": s["ei"][0], "PI_1e-08": s["pi"][0]}
        stops.update({f"Conv_{k}": s["conv"][j] for j, k in enumerate(CONV)})
        for m in METHODS:
            stop = int(stops[m])
            row = stop - 1 + lag
            y_stop = tr.test[t, inc[row]]
            out[m]["stop"].append(stop)
            out[m]["rtc"].append((n_eval[last] - stop) / n_eval[last])
            out[m]["ryc"].append((y_final - y_stop) / max(y_final, y_stop))
    return {m: {k: np.asarray(v) for k, v in d.items()} for m, d in out.items()}


def authors_scores(traces, tr):
    res = datasets.load_authors_results()
    index = {(a, d, int(s)): t for t, (a, d, s) in enumerate(zip(tr.algo, tr.dataset, tr.seed))}
    out = {m: {"rtc": {}, "ryc": {}, "stop": {}} for m in METHODS}
    for a, d, s, m, it, ri, rt in zip(res.algo, res.dataset, res.seed, res.method, res.stop_iter, res.rel_iter,
                                      res.rel_test):
        if m in out:
            t = index[(a, d, int(s))]
            out[m]["rtc"][t], out[m]["ryc"][t], out[m]["stop"][t] = ri, rt, it
    return {m: {k: np.asarray([v[t] for t in traces]) for k, v in d.items()} for m, d in out.items()}


def space_candidates(conv, choice):
    """Whether ``conv``'s replay takes the authors' candidates (``--candidates choice``)."""
    return choice == "authors" or (choice == "convention" and conv == "authors")


def fit_description(conv, args):
    """The GP fit of ``conv``'s rows with the command line's overrides, in words."""
    c = dict(regret_conventions()[conv])
    given = {"warm_start": ROWS[args.rows], "num_starts": args.starts, "fit_tol": args.fit_tol, "joint": args.joint,
             "min_noise": args.min_noise, "redraw": args.redraw, "first_fit_steps": args.first_fit_steps}
    c.update({k: v for k, v in given.items() if v is not None})
    first = c["first_fit_steps"] or (60 if c["warping"] else 30)
    if c["warm_start"]:
        later = args.fit_steps or (12 if c["warping"] else 6)
        words = f"rows warm-started, fits of {first} then {later} steps"
    else:
        words = f"every row fitted afresh from the prior's start, up to {first} steps per start"
    words += f", {c['num_starts']} start(s), fit_tol {c['fit_tol']:g}"
    floor = "noise variance" if c["joint"] else "noise-to-amplitude ratio"
    words += f", {'joint' if c['joint'] else 'profiled'} fits ({floor} >= {c['min_noise']:g})"
    if space_candidates(conv, args.candidates):
        words += ", the authors' candidates (RF's max_depth on its grid)"
    else:
        words += f", {c['candidates']} random candidates {'per row' if c['redraw'] else 'shared by every row'}"
    return words


def regret_conventions():
    """jaxstop.regret.CONVENTIONS (imported here: the main process sets no JAX options)."""
    from jaxstop import regret

    return regret.CONVENTIONS


def fmt(x):
    return f"{np.mean(x):.3f} ± {np.std(x):.3f}" if len(x) else "—"


def table(sc, algo_of, title):
    lines = [f"#### {title}", "",
             "| method | RTC RF | RTC XGB | RYC RF | RYC XGB | paper RTC RF / XGB | paper RYC RF / XGB |",
             "|---|---|---|---|---|---|---|"]
    for m in METHODS:
        cells = []
        for stat in ("rtc", "ryc"):
            for a in ("RF", "XGB"):
                cells.append(fmt(sc[m][stat][algo_of == a]))
        p = TABLE3[m]
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {p[0]:.3f} / {p[1]:.3f} | {p[2]:.3f} / {p[3]:.3f} |")
    return lines + [""]


def bound_comparison(per_trace, traces, tr, lag, auth):
    """Our bound vs the authors' bound traces: correlation, ratio, stopping agreement."""
    rg = datasets.load_authors_regrets()
    corr, ratio, spear = [], [], []
    for t in traces:
        b = per_trace[t]["bound"]
        # authors' row i = first i evaluations; our row r = first r + 1 - lag evaluations
        rows = np.arange(20, min(rg.regret_bound.shape[1], len(b) + 1 - lag))
        ours = b[rows - 1 + lag]
        a = rg.regret_bound[t, rows]
        ok = np.isfinite(ours) & np.isfinite(a)
        if ok.sum() > 2:
            corr.append(np.corrcoef(ours[ok], a[ok])[0, 1])
            ra = np.argsort(np.argsort(ours[ok]))
            rb = np.argsort(np.argsort(a[ok]))
            spear.append(np.corrcoef(ra, rb)[0, 1])
            ratio.append(np.median(ours[ok] / a[ok]))
    lines = ["| statistic (over traces) | value |", "|---|---|",
             f"| Pearson correlation of the bound traces, median [10%, 90%] | {np.median(corr):.3f} "
             f"[{np.quantile(corr, 0.1):.3f}, {np.quantile(corr, 0.9):.3f}] |",
             f"| Spearman correlation, median | {np.median(spear):.3f} |",
             f"| median of (our bound / authors' bound), median [10%, 90%] | {np.median(ratio):.3f} "
             f"[{np.quantile(ratio, 0.1):.3f}, {np.quantile(ratio, 0.9):.3f}] |"]
    return lines, np.asarray(ratio)


def agreement(sc, auth, methods):
    lines = ["| method | same stop as the authors | mean abs. difference (iterations) | mean signed (ours - authors) |",
             "|---|---|---|---|"]
    for m in methods:
        a, b = auth[m]["stop"], sc[m]["stop"]
        lines.append(f"| {m} | {np.mean(a == b):.1%} ({int(np.sum(a == b))}/{len(a)}) | "
                     f"{np.mean(np.abs(a - b)):.1f} | {np.mean(b - a):+.1f} |")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="8 traces (seed 0 of 4 datasets, RF and XGB)")
    ap.add_argument("--conventions", default="authors,paper")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1), help="worker processes")
    ap.add_argument("--chunk", type=int, default=10, help="traces per vmapped call")
    ap.add_argument("--fit-steps", type=int, default=None,
                    help="quasi-Newton steps per warm-started fit (default: replay's, 6, or 12 with warping)")
    ap.add_argument("--first-fit-steps", type=int, default=None,
                    help="quasi-Newton steps of the first (cold) fit (default: replay's, 30, or 60 with warping)")
    ap.add_argument("--warping", choices=tuple(WARPING), default="convention",
                    help="Kumaraswamy input warping of the GPs: on, off, or the convention's (authors: on; "
                         "paper: off)")
    ap.add_argument("--prior", choices=("convention", "optuna", "autogluon"), default="convention",
                    help="the GPs' hyperparameter priors (ReplayOptions.prior): the convention's (optuna), "
                         "or AutoGluon's (the GP of the authors' code)")
    ap.add_argument("--rows", choices=tuple(ROWS), default="convention",
                    help="warm: each row's fits start from the previous row's (ReplayOptions.warm_start); cold: "
                         "every row fitted afresh from the prior's start with --first-fit-steps steps, as the "
                         "authors' code does; default: the convention's (authors: cold; paper: warm)")
    ap.add_argument("--starts", type=int, default=None,
                    help="starts of every fit (ReplayOptions.num_starts; default: the convention's, authors: 5)")
    ap.add_argument("--fit-tol", type=float, default=None,
                    help="every fit stops once no gradient component exceeds this (ReplayOptions.fit_tol; "
                         "default: the convention's, authors 1e-3, paper 1e-2; the authors' L-BFGS-B: 1e-6, at "
                         "most 500 iterations)")
    ap.add_argument("--joint", action=argparse.BooleanOptionalAction, default=None,
                    help="fit the amplitude and the mean jointly, min_noise flooring the noise variance itself "
                         "(ReplayOptions.joint: AutoGluon 0.1's fit, that of the authors' code), or profile "
                         "them out; default: the convention's (authors: joint)")
    ap.add_argument("--min-noise", type=float, default=None,
                    help="floor of the noise-to-amplitude ratio, or with joint fits of the noise variance "
                         "(ReplayOptions.min_noise; default: the convention's, authors 1e-9, paper 1e-6)")
    ap.add_argument("--redraw", action=argparse.BooleanOptionalAction, default=None,
                    help="new random candidates at every row, or one set for every row (ReplayOptions.redraw; "
                         "default: the convention's, authors: one set)")
    ap.add_argument("--candidates", choices=("convention", "uniform", "authors"), default="convention",
                    help="the LCB's candidates: the convention's uniform draws (uniform), or those of the authors' "
                         "code (authors: the same 2,000 points at every iteration, RF's max_depth on its integer "
                         "grid); default: the authors' for the authors convention, uniform for the others")
    ap.add_argument("--segments", type=int, default=None,
                    help="capacity segments of the replay scan (default 4; 1 with --quick: less compilation)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--evaluations", type=int, default=None,
                    help="replay only the first N evaluations of each trace (smoke runs; the authors' "
                         "columns stay those of the full traces)")
    ap.add_argument("--acq-gp", choices=("all", "top"), default=None,
                    help="GP of the EI / PI baselines without recorded values (default: the convention's, "
                         "'all': the BO's GP on every evaluation)")
    ap.add_argument("--no-pin", dest="pin", action="store_false", help="do not pin workers to cores")
    ap.add_argument("--out", default=str(HERE / "out" / "termination_cv.md"))
    args = ap.parse_args(argv)
    if args.segments is None:
        args.segments = 1 if args.quick else 4

    tr = datasets.load_bo_cv()
    if args.quick:
        names = sorted(set(tr.dataset))[:4]
        traces = [t for t in range(len(tr.run)) if tr.seed[t] == 0 and tr.dataset[t] in names]
    else:
        traces = list(range(len(tr.run)))
    algo_of = tr.algo[traces]
    auth = authors_scores(traces, tr)

    machine = _common.cpu()
    lines = ["# Automatic termination on the authors' CV traces (Makarova et al., 2022, Table 3)", "",
             f"{len(traces)} traces ({int(np.sum(algo_of == 'RF'))} RF, {int(np.sum(algo_of == 'XGB'))} XGB)"
             f"{' (--quick subset)' if args.quick else ''}; machine: {machine}; "
             f"{args.jobs} worker process(es), one XLA thread each; {args.segments} capacity segment(s); "
             f"input warping: {args.warping}.", "",
             "RTC = (t_T - t_es) / t_T in iterations, RYC = (y_T - y_es) / max(y_T, y_es) on the held-out test "
             "error of the incumbent; mean ± std over traces. `paper` columns: Table 3 as printed.", ""]
    lines += table(auth, algo_of, "The authors' own results file (their bound; the source of Table 3)")
    for conv in [c.strip() for c in args.conventions.split(",") if c.strip()]:
        lag = 1 if conv == "authors" else 0
        print(f"[{conv}] replaying {len(traces)} traces ...", flush=True)
        per_trace, timing = run_convention(conv, traces, args)
        sc = scores(per_trace, traces, tr, lag)
        acq = "recorded values of the authors' BO" if conv == "authors" else (
            f"acq_gp=\"{args.acq_gp or regret_conventions()[conv]['acq_gp']}\"")
        warp = WARPING[args.warping]
        warp = regret_conventions()[conv]["warping"] if warp is None else warp
        steps = fit_description(conv, args)
        prior = regret_conventions()[conv]["prior"] if args.prior == "convention" else args.prior
        lines += table(sc, algo_of, f"jaxstop, convention `{conv}`, input warping {'on' if warp else 'off'}, "
                                    f"priors `{prior}` (EI / PI: {acq}; {steps})")
        lines += [f"Timing: {timing['wall_s']:.1f} s wall for {len(traces)} traces "
                  f"({timing['wall_s'] / len(traces):.2f} s per trace; {timing['jobs']} process(es), "
                  f"vmapped chunks of {timing['chunk']}); compile {timing['compile_s']:.1f} s per process, "
                  f"run {timing['run_s']:.1f} s summed over processes.", ""]
        comp, _ = bound_comparison(per_trace, traces, tr, lag, auth)
        lines += ["Our per-iteration bound against the authors' bound (rows aligned on the number of "
                  "evaluations):", ""] + comp + [""]
        lines += [f"Stopping iterations against the authors' (convention `{conv}`):", ""]
        lines += agreement(sc, auth, METHODS) + [""]
        ok = np.mean([np.all(per_trace[t]["ok"][per_trace[t]["computed"]]) for t in traces])
        lines += [f"GP fit and posterior usable on every computed row: {ok:.1%} of traces.", ""]
        print(f"[{conv}] {timing['wall_s']:.1f} s", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {out}")


if __name__ == "__main__":
    main()
