"""Benchmark: BO-BOS vs GP-UCB vs Hyperband on real learning curves.

For each data set, many seeded HPO runs of :func:`jaxstop.policies.bo_bos.bo_bos`,
:func:`jaxstop.policies.bo_bos.gp_ucb` and :func:`jaxstop.policies.halving.hyperband`
are simulated with :func:`jaxstop.sim.run` vmapped over keys, against tables of
real learning curves (rows = candidate configurations, the unit-cube
configurations are the BO candidates):

* ``alexnet``: OPDA ImageNet AlexNet, 365 configurations x up to 100 epochs
  (the number of epochs is itself a hyperparameter, so curves end at 20..100;
  N = 100, intermediate GP observations after epochs 1, 20, 40, 60, 80 as the
  paper's N = 100 setting);
* ``lcbench-<task>``: the YAHPO Gym LCBench surrogate (needs onnxruntime), 1,000
  uniformly drawn configurations x 50 epochs of validation error (N = 50,
  intermediate epochs 1, 10, 20, 30, 40 as the paper).

BO-BOS and GP-UCB share the GP, the acquisition, ``num_init`` random start
points and ``max_evals`` evaluations (same seeds give the same start points); BO-BOS
uses N0 = 8, kappa = 2, K1 = 100 / 0.95^(t-1), K2 = 99, c = 1 (the paper's
defaults). Hyperband uses eta = 3 and max budget N, and runs its full schedule.

The paper's main method is the default of every choice: GP-UCB's width
``--beta paper`` (Theorem 1's beta_t, unscaled, |D| = candidates x N, delta = 0.1),
the incumbent over all evaluations ``--incumbent all`` (early-stopped ones included)
and BOS's summary statistic over epochs 1..n (``--mode corrected``, whose statistic
is ``all_epochs``). The released code's choices: ``--beta authors`` (0.2 d log(2t)
on sigma), ``--mode compat`` (its rules and its statistic over epochs N0+1..n),
``--k1-gamma 0.99``; ``--incumbent completed`` and ``--statistic after_n0`` are the
remaining options.

Measured: the best validation error (the incumbent's fully-trained error) against
the total epochs spent, averaged over seeds on a grid of epochs; per policy the
final regret (incumbent error minus the table's best, percentage points), the
epochs spent, the share of BO-BOS evaluations stopped early; and the *epoch
fraction*: the smallest number of epochs, relative to GP-UCB's mean total, from
which BO-BOS's mean best error stays at or below GP-UCB's final mean best error
("n/r" if it never does within its run). The paper's claim (Dai et al., 2019,
Section 5, Figs. 2-4) is that BO-BOS reaches GP-UCB's quality with far fewer
epochs; its benchmarks (LR on MNIST, CNNs on CIFAR-10 / SVHN, ...) differ from these
tables, so the comparison is of direction and size, not a replication.
With the same number of evaluations BO-BOS spends fewer epochs; ``--bobos-max-evals``
gives it more evaluations to compare at about GP-UCB's epochs.

    .venv/bin/python benchmarks/bobos_real.py            # alexnet + 3 LCBench tasks, 64 seeds
    .venv/bin/python benchmarks/bobos_real.py --quick    # AlexNet only, 8 seeds, small sizes
    .venv/bin/python benchmarks/bobos_real.py --beta authors --mode compat --k1-gamma 0.99  # the code's

Writes ``benchmarks/out/bobos_real.md``, ``.json`` and ``.png``.

The LCBench tables sample their configurations from one generator in the order
the data sets run, so a run of a subset (``--datasets``) samples other
configurations than the full run; compare a subset with the full run's tables
only for the data sets that run first in both.
"""

from __future__ import annotations

import _common

_common.setup_environment()

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import jax  # noqa: E402

from _common import CurveData, anytime_error, fraction_to_match, load_curves, se  # noqa: E402

from jaxstop import sim  # noqa: E402
from jaxstop.policies.bo_bos import bo_bos, default_intermediate_epochs, gp_ucb  # noqa: E402
from jaxstop.policies.halving import halving_schedule, hyperband  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
LCBENCH_TASKS = ("3945", "7593", "126025")
POLICIES = ("bobos", "gpucb", "hyperband")
LABEL = {"bobos": "BO-BOS", "gpucb": "GP-UCB", "hyperband": "Hyperband"}


def make(kind: str, data: CurveData, args):
    n, t = data.shape
    common = dict(max_budget=t, max_evals=args.max_evals, num_init=args.num_init,
                  gp_fit_steps=args.gp_fit_steps, dtype=np.float32, beta=args.beta)
    if kind == "bobos":
        common["max_evals"] = args.bobos_max_evals
        return bo_bos(data.configs, n0=args.n0, num_paths=args.num_paths, mode=args.mode, statistic=args.statistic,
                      incumbent=args.incumbent, k1_gamma=args.k1_gamma, **common), args.bobos_max_evals
    if kind == "gpucb":
        return gp_ucb(data.configs, **common), args.max_evals
    return hyperband(n, t, 3), halving_schedule("hyperband", n, t, 3).max_jobs


def simulate(kind, data, keys, args):
    """All runs of one policy (in batches of seeds); NumPy arrays and (compile, run) seconds."""
    policy, max_jobs = make(kind, data, args)
    fn = jax.jit(jax.vmap(lambda k: sim.run(policy, data.table, k, max_jobs=max_jobs)))
    batch = min(args.batch, keys.shape[0])
    t0 = time.perf_counter()
    compiled = fn.lower(keys[:batch]).compile()
    t1 = time.perf_counter()
    parts = []
    for start in range(0, keys.shape[0], batch):
        k = keys[start:start + batch]
        pad = batch - k.shape[0]
        if pad:
            k = jax.numpy.concatenate([k, keys[:pad]])
        tr = jax.block_until_ready(compiled(k))
        n = batch - pad
        part = dict(
            incumbent=np.asarray(tr.incumbent)[:n],
            budget=np.asarray(tr.budget)[:n],
            spent=np.asarray(tr.spent)[:n],
            incumbents=np.asarray(tr.incumbents)[:n],
            active=np.asarray(tr.active)[:n],
        )
        if kind != "hyperband":
            part["stopped"] = np.asarray(tr.results.stopped)[:n] & part["active"]
        parts.append(part)
    t2 = time.perf_counter()
    out = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    return out, (t1 - t0, t2 - t1)


def show_fraction(frac):
    if frac is None:
        return "(reference)"
    return "n/r" if not np.isfinite(frac) else f"{100 * frac:.1f}%"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="AlexNet only, 8 seeds, 30 evaluations, 5,000 BOS paths")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--datasets", nargs="*", default=None,
                        help="alexnet, lcbench-<task> (default: all; --quick: alexnet)")
    parser.add_argument("--max-evals", type=int, default=None, help="evaluations of BO-BOS / GP-UCB")
    parser.add_argument("--bobos-max-evals", type=int, default=None,
                        help="evaluations of BO-BOS (default: --max-evals; more spends about GP-UCB's epochs)")
    parser.add_argument("--num-paths", type=int, default=None, help="BOS paths per solve (paper: 100,000)")
    parser.add_argument("--num-init", type=int, default=6, help="random start points (paper: 6)")
    parser.add_argument("--n0", type=int, default=8, help="epochs before the BOS solve (paper: 8)")
    parser.add_argument("--gp-fit-steps", type=int, default=None,
                        help="objective evaluations (at most) of each GP refit")
    parser.add_argument("--batch", type=int, default=None, help="seeds vmapped together")
    parser.add_argument("--beta", choices=("paper", "authors"), default="paper",
                        help="GP-UCB width: Theorem 1 (paper) or the released code's 0.2 d log(2t) on sigma")
    parser.add_argument("--incumbent", choices=("all", "completed"), default="all",
                        help="BO-BOS incumbent: every evaluation (paper) or completed ones only")
    parser.add_argument("--mode", choices=("corrected", "compat"), default="corrected",
                        help="BOS rules: the paper's (corrected) or the released code's (compat)")
    parser.add_argument("--statistic", choices=("all_epochs", "after_n0"), default=None,
                        help="BOS summary statistic (default: the mode's; corrected: all_epochs)")
    parser.add_argument("--k1-gamma", type=float, default=0.95, help="K1 growth (paper 0.95, code 0.99)")
    parser.add_argument("--out", default=str(OUT / "bobos_real.md"))
    args = parser.parse_args(argv)
    q = args.quick
    args.seeds = args.seeds or (8 if q else 64)
    args.max_evals = args.max_evals or (30 if q else 50)
    args.bobos_max_evals = args.bobos_max_evals or args.max_evals
    args.num_paths = args.num_paths or (5_000 if q else 100_000)
    args.gp_fit_steps = args.gp_fit_steps or (10 if q else 20)
    args.batch = args.batch or (8 if q else 16)
    names = args.datasets
    if names is None:
        names = ["alexnet"] if q else ["alexnet"] + [f"lcbench-{t}" for t in LCBENCH_TASKS]
    try:
        import onnxruntime  # noqa: F401
        have_ort = True
    except ImportError:
        have_ort = False
    skipped = [n for n in names if n.startswith("lcbench") and not have_ort]
    names = [n for n in names if n not in skipped]

    rng = np.random.default_rng(0)
    keys = jax.random.split(jax.random.key(2019), args.seeds)
    rows, curves, timings = [], {}, []
    t_start = time.perf_counter()
    for name in names:
        data = load_curves(name, rng, lcbench_epochs=50)
        n, t = data.shape
        print(f"{name}: {n} configs x {t} epochs, best final error {data.best:.4f}, "
              f"intermediate epochs {default_intermediate_epochs(t)}", flush=True)
        runs = {}
        for kind in POLICIES:
            runs[kind], (tc, tr) = simulate(kind, data, keys, args)
            timings.append((name, kind, tc, tr))
            print(f"  {LABEL[kind]}: compile {tc:.1f} s, runs {tr:.1f} s, "
                  f"mean epochs {runs[kind]['budget'].mean():.0f}", flush=True)
        top = max(float(r["budget"].max()) for r in runs.values())
        grid = np.linspace(0.0, top, 401)
        ref = float(runs["gpucb"]["budget"].mean())
        means = {kind: anytime_error(runs[kind], data, grid) for kind in POLICIES}
        final_ucb = data.final[runs["gpucb"]["incumbent"]].mean()
        for kind in POLICIES:
            run = runs[kind]
            err = data.final[run["incumbent"]]
            reg = 100.0 * (err - data.best)
            row = dict(
                data=name, policy=kind, seeds=int(args.seeds), epochs=float(run["budget"].mean()),
                epochs_se=se(run["budget"]), best_error=float(err.mean()), best_error_se=se(err),
                regret_pp=float(reg.mean()), regret_se=se(reg), hit=float(np.mean(reg == 0)),
                evaluations=float(run["active"].sum(1).mean()),
            )
            if "stopped" in run:
                row["stopped_share"] = float(run["stopped"].sum() / run["active"].sum())
            row["fraction_to_gpucb"] = (None if kind == "gpucb" else
                                        fraction_to_match(means[kind].mean(0), final_ucb, grid, ref))
            rows.append(row)
            curves[(name, kind)] = (grid, means[kind].mean(0), means[kind].std(0, ddof=1) / np.sqrt(args.seeds)
                                    if args.seeds > 1 else np.zeros(grid.size), float(run["budget"].mean()))
            shown = show_fraction(row["fraction_to_gpucb"])
            print(f"  -> {LABEL[kind]}: best error {row['best_error']:.4f} (regret {row['regret_pp']:.2f} pp), "
                  f"{row['epochs']:.0f} epochs, reaches GP-UCB's final error at {shown} of its epochs"
                  + (f", {100 * row['stopped_share']:.0f}% stopped" if "stopped_share" in row else ""),
                  flush=True)
    total = time.perf_counter() - t_start
    write(args, rows, curves, timings, total, skipped)


def write(args, rows, curves, timings, total, skipped):
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# BO-BOS vs GP-UCB vs Hyperband on real learning curves",
        "",
        f"- Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by `benchmarks/bobos_real.py"
        f"{' --quick' if args.quick else ''}`; {args.seeds} seeds per policy, float32.",
        f"- Machine: {_common.describe()}; JAX {jax.__version__} on {jax.devices()[0].platform}; total {total:.0f} s.",
        f"- BO-BOS / GP-UCB: {args.bobos_max_evals} / {args.max_evals} evaluations, {args.num_init} random start "
        f"points, GP refit of at most {args.gp_fit_steps} objective evaluations per ask; "
        f"BO-BOS: N0 = {args.n0}, {args.num_paths} BOS paths per solve, "
        f"kappa = 2, K1 = 100 / {args.k1_gamma}^(t-1), K2 = 99, c = 1. Hyperband: eta = 3, full schedule.",
        f"- Conventions: GP-UCB width `--beta {args.beta}` ("
        + ("Theorem 1's sqrt(beta_t), beta_t = 2 log(|D| t^2 pi^2 / (6 delta)), |D| = candidates x N, delta = 0.1"
           if args.beta == "paper" else "the released code's 0.2 d log(2t) on sigma")
        + f", t = BO iteration after the initial points); BO-BOS incumbent `--incumbent {args.incumbent}`; "
        f"BOS `--mode {args.mode}`, statistic "
        f"`{args.statistic or ('after_n0' if args.mode == 'compat' else 'all_epochs')}`.",
        "- Best error: the returned configuration's fully-trained validation error (mean +- s.e. over seeds); "
        "regret = best error minus the table's best, percentage points; hit = share of runs returning the "
        "table's best.",
        "- Fraction: smallest number of epochs, relative to GP-UCB's mean total, from which the policy's mean "
        "best error stays at or below GP-UCB's final mean best error; n/r = never within its run.",
        "- Paper (Dai et al., 2019): BO-BOS reaches GP-UCB's quality with far fewer epochs.",
    ]
    if skipped:
        lines.append(f"- Skipped (onnxruntime missing): {', '.join(skipped)}.")
    lines += [
        "",
        "| data | policy | evaluations | epochs | best error | regret (pp) | hit | stopped early |"
        " fraction of GP-UCB epochs to match it |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        frac = show_fraction(r["fraction_to_gpucb"])
        stopped = f"{100 * r['stopped_share']:.0f}%" if "stopped_share" in r else "-"
        lines.append(
            f"| {r['data']} | {LABEL[r['policy']]} | {r['evaluations']:.0f} | {r['epochs']:.0f} +- "
            f"{r['epochs_se']:.0f} | {r['best_error']:.4f} +- {r['best_error_se']:.4f} | "
            f"{r['regret_pp']:.2f} +- {r['regret_se']:.2f} | {100 * r['hit']:.0f}% | {stopped} | {frac} |"
        )
    lines += ["", "Timings (seconds): compile / run (all seeds) of the vmapped simulation", "",
              "| data | policy | compile | run |", "|---|---|---|---|"]
    for name, kind, tc, tr in timings:
        lines.append(f"| {name} | {LABEL[kind]} | {tc:.1f} | {tr:.1f} |")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    summary = dict(args={k: v for k, v in vars(args).items()}, machine=_common.describe(), jax=jax.__version__,
                   total_seconds=total, skipped=skipped, rows=rows,
                   timings=[dict(data=a, policy=b, compile=c, run=d) for a, b, c, d in timings])
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1, default=float))
    print(f"wrote {out.with_suffix('.json')}")
    plot(curves, out.with_suffix(".png"))


def plot(curves, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(k[0] for k in curves))
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        for i, kind in enumerate(POLICIES):
            grid, mean, s, end = curves[(name, kind)]
            keep = grid <= end
            ax.plot(grid[keep], mean[keep], label=LABEL[kind], color=f"C{i}")
            ax.fill_between(grid[keep], (mean - s)[keep], (mean + s)[keep], color=f"C{i}", alpha=0.2)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("total epochs")
        ax.set_ylabel("best validation error (mean over seeds)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
