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

Measured with :func:`jaxstop.sim.compare` (every policy on the same keys, paired
intervals), each policy run once (``budget=None``), plus random search with GP-UCB's
number of evaluations:

* at equal evaluations: per policy the final regret (incumbent's fully trained error
  minus the table's best, percentage points) with its 95% interval, the paired difference
  to GP-UCB with its interval, the epochs spent, the share of BO-BOS evaluations stopped
  early;
* on cumulative epochs (the paper's axis, Figs. 2-4): the anytime regret of every policy
  on a grid of epochs, and the paired difference of BO-BOS and GP-UCB at BO-BOS's own
  mean spend (GP-UCB has run fewer evaluations by then); the *epoch fraction* is the
  smallest number of epochs, relative to GP-UCB's mean total, from which a policy's mean
  regret stays at or below GP-UCB's final mean regret ("n/r" if it never does).

The paper's claim (Dai et al., 2019, Section 5) is that BO-BOS reaches GP-UCB's quality
with far fewer epochs; its benchmarks (LR on MNIST, CNNs on CIFAR-10 / SVHN, ...) differ
from these tables, so the comparison is of direction and size, not a replication.
``--bobos-max-evals`` gives BO-BOS more evaluations.

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

from _common import CurveData, fraction_to_match, load_curves  # noqa: E402

from jaxstop import policies, sim  # noqa: E402
from jaxstop.policies.bo_bos import bo_bos, default_intermediate_epochs, gp_ucb  # noqa: E402
from jaxstop.policies.halving import halving_schedule, hyperband  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
LCBENCH_TASKS = ("3945", "7593", "126025")
POLICIES = ("gpucb", "bobos", "hyperband", "random")
LABEL = {"bobos": "BO-BOS", "gpucb": "GP-UCB", "hyperband": "Hyperband", "random": "random"}


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
    if kind == "random":
        return policies.random_search(n, max_budget=t), args.max_evals
    return hyperband(n, t, 3), halving_schedule("hyperband", n, t, 3).max_jobs


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
    key = jax.random.key(2019)
    rows, comparisons = [], {}
    t_start = time.perf_counter()
    for name in names:
        data = load_curves(name, rng, lcbench_epochs=50)
        n, t = data.shape
        print(f"{name}: {n} configs x {t} epochs, best final error {data.best:.4f}, "
              f"intermediate epochs {default_intermediate_epochs(t)}", flush=True)
        made = {LABEL[k]: make(k, data, args) for k in POLICIES}
        t0 = time.perf_counter()
        c = sim.compare({k: p for k, (p, _) in made.items()}, data.table, key, args.seeds,
                        max_jobs={k: m for k, (_, m) in made.items()}, chunk_size=args.batch,
                        budgets=401, progress=False)
        comparisons[name] = c
        jax.clear_caches()  # the next table's programs are new; keep the process's memory mappings bounded
        print(f"  {time.perf_counter() - t0:.0f} s", flush=True)
        print(c.to_markdown(baseline="GP-UCB", scale=100, unit="pp"), flush=True)
        ref = c.spend[c.names.index("GP-UCB")]
        i_bos = c.names.index("BO-BOS")
        # the grid point at BO-BOS's own mean spend (the paper's axis)
        at = int(np.searchsorted(c.budgets, c.spend[i_bos], side="right") - 1)
        d_at, ci_at = c.paired("BO-BOS", "GP-UCB")
        for i, arm in enumerate(c.names):
            d, ci = c.paired_final(arm, "GP-UCB")
            rows.append(dict(
                data=name, policy=arm, seeds=int(args.seeds), epochs=float(c.spend[i]),
                regret=100 * float(c.final[i]), regret_ci=(100 * c.final_ci[i]).tolist(),
                diff=100 * float(d), diff_ci=(100 * ci).tolist(), sig=bool(ci[0] > 0 or ci[1] < 0),
                fraction=None if arm == "GP-UCB" else fraction_to_match(c.mean[i], c.final[c.names.index("GP-UCB")],
                                                                        c.budgets, ref),
                discarded_best=float(c.discarded_best[i]),
                at_bobos_epochs=(dict(epochs=float(c.budgets[at]), diff=100 * float(d_at[at]),
                                      ci=(100 * ci_at[at]).tolist()) if arm == "BO-BOS" else None),
            ))
        r = rows[-len(c.names) + i_bos]
        e = r["at_bobos_epochs"]
        print(f"  at BO-BOS's spend ({e['epochs']:.0f} epochs): BO-BOS - GP-UCB = {e['diff']:+.2f} pp "
              f"[{e['ci'][0]:+.2f}, {e['ci'][1]:+.2f}]", flush=True)
    total = time.perf_counter() - t_start
    write(args, rows, comparisons, total, skipped)


def write(args, rows, comparisons, total, skipped):
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# BO-BOS vs GP-UCB vs Hyperband vs random search on real learning curves",
        "",
        f"- Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by `{_common.command_line()}`; "
        f"{args.seeds} paired seeds per policy (`sim.compare`), float32.",
        f"- Machine: {_common.describe()}; JAX {jax.__version__} on {jax.devices()[0].platform}; total {total:.0f} s.",
        f"- BO-BOS / GP-UCB: {args.bobos_max_evals} / {args.max_evals} evaluations, {args.num_init} random start "
        f"points, GP refit of at most {args.gp_fit_steps} objective evaluations per ask; "
        f"BO-BOS: N0 = {args.n0}, {args.num_paths} BOS paths per solve, "
        f"kappa = 2, K1 = 100 / {args.k1_gamma}^(t-1), K2 = 99, c = 1. Hyperband: eta = 3, full schedule. "
        f"Random search: {args.max_evals} full evaluations.",
        f"- Conventions: GP-UCB width `--beta {args.beta}` ("
        + ("Theorem 1's sqrt(beta_t), beta_t = 2 log(|D| t^2 pi^2 / (6 delta)), |D| = candidates x N, delta = 0.1"
           if args.beta == "paper" else "the released code's 0.2 d log(2t) on sigma")
        + f", t = BO iteration after the initial points); BO-BOS incumbent `--incumbent {args.incumbent}`; "
        f"BOS `--mode {args.mode}`, statistic "
        f"`{args.statistic or ('after_n0' if args.mode == 'compat' else 'all_epochs')}`.",
        "- Regret: the returned configuration's fully trained error minus the table's best, percentage points, "
        "mean [95% normal interval]; 'vs GP-UCB' the paired difference [95% interval], 'sig.' when it excludes 0.",
        "- Each policy runs once (its own number of evaluations); 'epochs' is its mean spend. 'at BO-BOS's epochs': "
        "the paired difference BO-BOS - GP-UCB of the anytime regret at BO-BOS's mean spend (the paper's axis).",
        "- Fraction: smallest number of epochs, relative to GP-UCB's mean spend, from which the policy's mean "
        "regret stays at or below GP-UCB's final mean regret; n/r = never within its run.",
        "- Paper (Dai et al., 2019): BO-BOS reaches GP-UCB's quality with far fewer epochs.",
    ]
    if skipped:
        lines.append(f"- Skipped (onnxruntime missing): {', '.join(skipped)}.")
    lines += [
        "",
        "| data | policy | epochs | regret (pp) | vs GP-UCB, equal evaluations (pp) | sig. | at BO-BOS's epochs (pp) "
        "| fraction of GP-UCB epochs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = r["policy"] == "GP-UCB"
        vs = "-" if base else f"{r['diff']:+.2f} [{r['diff_ci'][0]:+.2f}, {r['diff_ci'][1]:+.2f}]"
        sig = "-" if base else ("yes" if r["sig"] else "no")
        e = r["at_bobos_epochs"]
        at = "-" if e is None else f"{e['diff']:+.2f} [{e['ci'][0]:+.2f}, {e['ci'][1]:+.2f}] at {e['epochs']:.0f}"
        lines.append(f"| {r['data']} | {r['policy']} | {r['epochs']:.0f} | {r['regret']:.2f} "
                     f"[{r['regret_ci'][0]:.2f}, {r['regret_ci'][1]:.2f}] | {vs} | {sig} | {at} | "
                     f"{show_fraction(r['fraction'])} |")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    summary = dict(args={k: v for k, v in vars(args).items()}, machine=_common.describe(), jax=jax.__version__,
                   total_seconds=total, skipped=skipped, rows=rows)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=1, default=float))
    print(f"wrote {out.with_suffix('.json')}")
    plot(comparisons, out.with_suffix(".png"))


def plot(comparisons, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(comparisons)
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 3.8), squeeze=False)
    for ax, name in zip(axes[0], names):
        comparisons[name].plot(ax, scale=100, log=True, ylabel="regret (pp)")
        ax.set_xlabel("cumulative epochs")
        ax.set_title(f"{name}: regret against cumulative epochs", fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
