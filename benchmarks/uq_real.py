"""Benchmark: plain vs UQ-guided halving policies on real learning curves, at equal budget.

For each data set and each family SH / SH+, HB / HB+, BOHB / BOHB+, SS / SS+ of
:mod:`jaxstop.policies.halving` / :mod:`jaxstop.policies.subsampling`, the arms play
the same seeded studies through :func:`jaxstop.sim.compare` against tables of real
learning curves (rows = candidate configurations):

* ``alexnet``: OPDA ImageNet AlexNet, 365 configurations x up to 100 epochs;
* ``deberta``: OPDA DeBERTa-base MultiNLI, 1,024 configurations x up to 98
  evaluations (every 1,000 steps);
* ``lcbench-<task>``: the YAHPO Gym LCBench surrogate (needs onnxruntime), 1,000
  uniformly drawn configurations x 52 epochs of validation error.

Every arm of a family gets the same budget, the UQ version's schedule budget (its
brackets plus the profile of App. C, ``halving_schedule(..., uq=True).total_budget``;
for SS / SS+ the common budget): an arm that ends before it restarts with a fresh key
and keeps its best answer (``sim.compare``'s rule), so the plain version spends what the
UQ version may. The arms:

* the plain version;
* the UQ version with its default, App. C's profile, charged to the budget (the paper's
  main method as a user runs it);
* the same with ``profile_incumbent=False``: the profiled candidates cannot be the
  answer, so it differs from the plain version only in the keep rule (and the profile's
  cost);
* the UQ version with an offline constant ``delta_sigma`` from 10 fully trained curves
  of the table, *not charged* (labelled "uncharged" in every table);
* random search, full budget per configuration, at the same budget.

Measured per arm: the spend, the final regret (the returned configuration's fully
trained error minus the table's best, percentage points) with its 95% interval, the
paired difference to the plain version with its interval (marked significant when it
excludes 0), the "fraction" -- the smallest budget, relative to the plain arm's spend,
from which the arm's mean regret stays at or below the plain arm's final mean regret --
and ``discarded_best`` (the share of first runs that discarded the best configuration
they sampled before its full budget).

The paper (Liu et al. 2024) claims 21-55% lower regret "at the same exploration cost",
and the Table 1 fractions (NAS-Bench-201 / LCBench): SH+ 50.78 / 43, HB+ 75 / 60,
BOHB+ 68.4 / 53.34, SS+ 47.84 / 30.93 (%). The paper's own benchmarks differ from these
tables; the comparison is of direction and size, not a replication.

    .venv/bin/python benchmarks/uq_real.py                      # all data sets, 256 seeds
    .venv/bin/python benchmarks/uq_real.py --quick              # AlexNet only, 32 seeds
    .venv/bin/python benchmarks/uq_real.py --datasets alexnet deberta --families sh hyperband subsampling

Writes ``benchmarks/out/uq_real.md`` and ``benchmarks/out/uq_real.png``.

The LCBench tables sample their configurations from one generator in the order
the data sets run, so a run of a subset (``--datasets``) samples other
configurations than the full run; compare a subset with the full run's tables
only for the data sets that run first in both.
"""

from __future__ import annotations

import _common

_common.setup_environment()

import argparse  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from _common import CurveData, fraction_to_match, load_curves  # noqa: E402

from jaxstop import policies, sim  # noqa: E402
from jaxstop.policies.halving import bohb, halving_schedule, hyperband, sh  # noqa: E402
from jaxstop.policies.subsampling import subsampling  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
FAMILIES = ("sh", "hyperband", "bohb", "subsampling")
LABEL = {"sh": "SH", "hyperband": "HB", "bohb": "BOHB", "subsampling": "SS"}
# Liu et al. (2024), Table 1: % of the budget the UQ version needs to match the plain one.
PAPER_FRACTION = {"sh": (50.78, 43.0), "hyperband": (75.0, 60.0), "bohb": (68.4, 53.34),
                  "subsampling": (47.84, 30.93)}
PAPER_REDUCTION = "21-55%"
UNCHARGED = "offline const, uncharged"
LCBENCH_TASKS = ("3945", "7593", "126025")


def make(kind: str, uq: bool, data: CurveData, **options):
    """The policy; ``options`` (e.g. ``delta_estimate``) go to the UQ halving factories."""
    n, t = data.shape
    if kind == "sh":
        return sh(n, t, 3, uq, **options)
    if kind == "hyperband":
        return hyperband(n, t, 3, uq, **options)
    if kind == "bohb":
        return bohb(n, t, 3, uq, candidates=data.configs, **options)
    return subsampling(n, t, 3, uq, **options)


def profiled_delta_sigma(data: CurveData, rng: np.random.Generator, num: int = 10, window: int = 10) -> float:
    """Offline profiling of the uncertainty's decline (Liu et al., App. C): the mean
    windowed std of ``num`` fully trained curves, sigma(t), and its average decrease
    per epoch from its peak to the end, ``(sigma(t_peak) - sigma(T)) / (T - t_peak)``."""
    rows = rng.choice(data.shape[0], size=num, replace=False)
    t_max = data.shape[1]
    sig = np.full((num, t_max), np.nan)
    for i, r in enumerate(rows):
        curve = data.values[r, : data.mask[r].sum()]
        for t in range(2, len(curve) + 1):
            sig[i, t - 1] = np.std(curve[max(0, t - window): t], ddof=1)
    counts = np.isfinite(sig).sum(0)
    mean = np.where(counts > 0, np.nansum(sig, axis=0) / np.maximum(counts, 1), np.nan)
    ok = np.flatnonzero(np.isfinite(mean))
    peak = ok[np.argmax(mean[ok])]
    end = ok[-1]
    return float(max(0.0, (mean[peak] - mean[end]) / max(end - peak, 1)))


def arms(kind: str, data: CurveData, delta: float):
    """The arms of one family (name -> policy), their params, and the common budget."""
    n, t = data.shape
    plain, plus = LABEL[kind], LABEL[kind] + "+"
    out = {plain: make(kind, False, data)}
    params = {}
    if kind == "subsampling":
        out[plus] = make(kind, True, data)
        budget = int(halving_schedule("sh", n, t, 3).total_budget)
    else:
        out[plus] = make(kind, True, data)
        out[f"{plus} (profile not in answer)"] = make(kind, True, data, profile_incumbent=False)
        off = make(kind, True, data, delta_estimate="window")
        out[f"{plus} ({UNCHARGED})"] = off
        params[f"{plus} ({UNCHARGED})"] = off.default_params()._replace(delta_sigma=jnp.float32(delta))
        budget = int(halving_schedule(kind, n, t, 3, True).total_budget)
    out["random"] = policies.random_search(n, max_budget=t)
    return out, params, budget


def rows_of(name: str, kind: str, c: sim.Comparison):
    """One row per arm: spend, final regret, paired difference to the plain arm, fraction."""
    plain = c.names[0]
    rows = []
    for i, arm in enumerate(c.names):
        d, ci = c.paired_final(arm, plain) if i else (np.nan, np.array([np.nan, np.nan]))
        frac = fraction_to_match(c.mean[i], c.final[0], c.budgets, c.spend[0]) if i else np.nan
        rows.append(dict(data=name, kind=kind, arm=arm, budget=c.budget, spend=c.spend[i], runs=c.runs[i],
                         reg=100 * c.final[i], ci=100 * c.final_ci[i], diff=100 * d, dci=100 * ci,
                         rel=d / c.final[0] if i and c.final[0] > 0 else np.nan,
                         sig=bool(i) and (ci[0] > 0 or ci[1] < 0), frac=frac,
                         disc=c.discarded_best[i], dci_disc=c.discarded_best_ci[i]))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="AlexNet only, 32 seeds")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--datasets", nargs="*", default=None,
                        help="alexnet, deberta, lcbench-<task> (default: all; --quick: alexnet)")
    parser.add_argument("--families", nargs="*", default=list(FAMILIES), choices=FAMILIES)
    parser.add_argument("--out", default=str(OUT / "uq_real.md"))
    args = parser.parse_args(argv)
    seeds = args.seeds or (32 if args.quick else 256)
    names = args.datasets
    if names is None:
        names = ["alexnet"] if args.quick else ["alexnet", "deberta"] + [f"lcbench-{t}" for t in LCBENCH_TASKS]
    have_ort = True
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        have_ort = False
    skipped = [n for n in names if n.startswith("lcbench") and not have_ort]
    names = [n for n in names if n not in skipped]

    rng = np.random.default_rng(0)
    key = jax.random.key(2024)
    rows, comparisons = [], {}
    t_start = time.perf_counter()
    for name in names:
        data = load_curves(name, rng, lcbench_epochs=52)
        print(f"{name}: {data.shape[0]} configs x {data.shape[1]} epochs, best final error {data.best:.4f}",
              flush=True)
        delta = profiled_delta_sigma(data, rng)
        print(f"  offline delta_sigma = {delta:.2e} per epoch (uncharged arm)", flush=True)
        for kind in args.families:
            t0 = time.perf_counter()
            policies_, params, budget = arms(kind, data, delta)
            c = sim.compare(policies_, data.table, key, seeds, budget=budget, params=params, progress=False)
            comparisons[(name, kind)] = c
            rows += rows_of(name, kind, c)
            print(f"  {LABEL[kind]} family at a budget of {budget} ({time.perf_counter() - t0:.0f} s):", flush=True)
            print(c.to_markdown(scale=100, unit="pp"), flush=True)
            # no later comparison reuses these programs: each XLA:CPU executable holds memory
            # mappings of its own, and a process that keeps them all reaches vm.max_map_count
            jax.clear_caches()
    total = time.perf_counter() - t_start
    write(args, rows, comparisons, seeds, total, skipped)


def write(args, rows, comparisons, seeds, total, skipped):
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "# UQ-guided vs plain halving policies on real learning curves, at equal budget",
        "",
        f"- Generated {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by `{_common.command_line()}`; "
        f"{seeds} paired seeds per arm (`sim.compare`), eta = 3, float32.",
        f"- Machine: {_common.describe()}; JAX {jax.__version__} on {jax.devices()[0].platform}; total {total:.0f} s.",
        "- Budget: every arm of a family gets the UQ version's schedule budget (brackets + App. C's profile; SS: "
        "the common budget), in epochs (evaluations for DeBERTa); an arm that ends first restarts with a fresh "
        "key and keeps its best answer. 'spend' is the mean spent, 'runs' the mean runs per study.",
        "- Regret: the returned configuration's fully trained error minus the table's best, percentage points, "
        "mean [95% normal interval]. 'vs plain': paired difference (arm - plain) [95% interval], 'sig.' when it "
        "excludes 0; 'rel.' = difference / plain regret.",
        "- Arms: the plain version; the UQ version with its default profile (charged); the same with "
        "`profile_incumbent=False` (profiled candidates not in the answer: the keep rule alone, at the profile's "
        f"cost); '{UNCHARGED}': one delta_sigma from 10 fully trained curves of the table, given as "
        "params.delta_sigma, its cost not charged; random search at the same budget.",
        "- Fraction: smallest budget, relative to the plain arm's spend, from which the arm's mean regret stays at "
        "or below the plain arm's final mean regret; n/r = never.",
        f"- Paper (Liu et al. 2024): {PAPER_REDUCTION} lower regret at the same exploration cost; Table 1 "
        "fractions are NAS-Bench-201 / LCBench.",
    ]
    if skipped:
        lines.append(f"- Skipped (onnxruntime missing): {', '.join(skipped)}.")
    lines += [
        "",
        "| data | family | budget | arm | spend | runs | regret (pp) | vs plain (pp) | rel. | sig. | fraction "
        "| fraction (paper) | discarded best |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        first = r["arm"] == LABEL[r["kind"]]
        frac = "-" if first else ("n/r" if not np.isfinite(r["frac"]) else f"{100 * r['frac']:.0f}%")
        paper = PAPER_FRACTION[r["kind"]]
        vs = "-" if first else f"{r['diff']:+.3f} [{r['dci'][0]:+.3f}, {r['dci'][1]:+.3f}]"
        rel = "-" if first or not np.isfinite(r["rel"]) else f"{100 * r['rel']:+.0f}%"
        sig = "-" if first else ("yes" if r["sig"] else "no")
        plus = r["arm"].startswith(LABEL[r["kind"]] + "+")
        lines.append(
            f"| {r['data']} | {LABEL[r['kind']]} | {r['budget']} | {r['arm']} | {r['spend']:.0f} | {r['runs']:.2f} | "
            f"{r['reg']:.3f} [{r['ci'][0]:.3f}, {r['ci'][1]:.3f}] | {vs} | {rel} | {sig} | {frac} | "
            f"{f'{paper[0]}% / {paper[1]}%' if plus else '-'} | {100 * r['disc']:.0f}% |")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    plot(comparisons, out.with_suffix(".png"))


def plot(comparisons, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(k[0] for k in comparisons))
    kinds = list(dict.fromkeys(k[1] for k in comparisons))
    fig, axes = plt.subplots(len(names), len(kinds), figsize=(4.5 * len(kinds), 3.4 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        for j, kind in enumerate(kinds):
            ax = axes[i, j]
            if (name, kind) not in comparisons:
                ax.set_visible(False)
                continue
            comparisons[(name, kind)].plot(ax, scale=100, log=True, ylabel="regret (pp)")
            ax.set_title(f"{name}: {LABEL[kind]} family, equal budget", fontsize=9)
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
