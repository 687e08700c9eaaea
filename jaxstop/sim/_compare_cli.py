"""The command line ``python -m jaxstop compare``: policies compared at equal budget on one table."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import Sequence

import jax
import numpy as np

from jaxstop.sim._cli import build_parser as _simulate_parser
from jaxstop.sim._cli import build_policy, read_table, seed_key
from jaxstop.sim._compare import INTERVALS, compare
from jaxstop.sim._summary import DEFAULT_GRID_POINTS

__all__ = ["compare_cli", "build_compare_parser", "ARMS"]

#: Policy names of ``--policies``: name -> (policy of ``simulate``, UQ-guided).
ARMS = {
    "sh": ("sh", False), "sh+": ("sh", True),
    "hyperband": ("hyperband", False), "hyperband+": ("hyperband", True),
    "hb": ("hyperband", False), "hb+": ("hyperband", True),
    "bohb": ("bohb", False), "bohb+": ("bohb", True),
    "ss": ("subsampling", False), "ss+": ("subsampling", True),
    "random": ("random_search", False),
}

_DESCRIPTION = """\
Compares policies on one table of learning curves at an equal budget
(jaxstop.sim.compare): every policy plays RUNS studies on the same keys, a
policy that ends before --budget is restarted with a fresh key (unless
--no-restart), and the final regret of each is printed with its interval and the
paired difference to the first policy. Writes the table (Markdown) to --out and,
unless --no-plot, the regret against budget to the same name with .png."""

_EPILOG = """\
policies: """ + ", ".join(ARMS) + """ (hb = hyperband, ss = subsampling; "+" the
UQ-guided version of Liu et al. 2024, with its default profile estimate).

example:
  python -m jaxstop compare --table alexnet --policies sh,sh+,random --runs 1000 \\
      --budget 600 --out cmp.md"""


def build_compare_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``python -m jaxstop compare``."""
    p = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION, epilog=_EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", required=True, metavar="FILE",
                   help="the curves: 'alexnet', a CSV long table (*.csv) or a CurveTable.save file")
    p.add_argument("--policies", required=True, metavar="A,B,...", help="comma-separated policy names (see below)")
    p.add_argument("--runs", type=int, default=100, metavar="N", help="studies per policy (default 100)")
    p.add_argument("--budget", type=int, metavar="B", help="budget units per study (default: each policy runs once)")
    p.add_argument("--no-restart", action="store_true", help="run each policy once, cut at --budget")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the comparison's key (default 0)")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the Markdown table")
    p.add_argument("--no-plot", action="store_true", help="do not write the figure (FILE with .png)")
    p.add_argument("--level", type=float, default=0.95, metavar="L", help="confidence level (default 0.95)")
    p.add_argument("--interval", choices=INTERVALS, default="normal", help="interval method (default normal)")
    p.add_argument("--grid-points", type=int, default=DEFAULT_GRID_POINTS, metavar="G",
                   help=f"points of the budget grid of the figure (default {DEFAULT_GRID_POINTS})")
    p.add_argument("--eta", type=int, default=3, metavar="ETA", help="halving rate of the halving policies")
    p.add_argument("--max-budget", type=int, metavar="E",
                   help="epochs of a full evaluation (default: the table's longest curve)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="simulation dtype")
    p.add_argument("--checkpoint", metavar="DIR", help="directory of resumable chunk files")
    p.add_argument("--chunk-size", type=int, metavar="C", help="studies per compiled call")
    p.add_argument("--no-progress", action="store_true", help="do not print progress to stderr")
    p.add_argument("--scale", type=float, default=100.0, metavar="K",
                   help="regrets are printed x K (default 100: percentage points of an error rate)")
    return p


def compare_cli(argv: Sequence[str] | None = None, prog: str | None = "python -m jaxstop compare") -> int:
    """Runs ``python -m jaxstop compare`` with the arguments ``argv``; returns the exit status
    (0 on success, 2 for an input that cannot run, the message on stderr)."""
    parser = build_compare_parser(prog)
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    names = [n.strip() for n in args.policies.split(",") if n.strip()]

    def fail(message: str) -> int:
        print(f"{parser.prog}: error: {message}", file=sys.stderr)
        return 2

    unknown = [n for n in names if n not in ARMS]
    if unknown:
        return fail(f"unknown policy {unknown[0]!r} in --policies (choose from: {', '.join(ARMS)})")
    if not names or len(set(names)) != len(names):
        return fail("--policies must name at least one policy, each once")
    for dest in ("runs", "budget", "chunk_size", "max_budget"):
        v = getattr(args, dest)
        if v is not None and v < 1:
            return fail(f"--{dest.replace('_', '-')} must be >= 1, got {v}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if os.path.isdir(args.out) or not os.path.isdir(out_dir):
        return fail(f"--out {args.out}: name a file in an existing directory")
    x64 = jax.enable_x64(True) if args.dtype == "float64" else contextlib.nullcontext()
    try:
        with x64:
            table, where = read_table(args.table, np.dtype(args.dtype))
            arms = {}
            for name in names:
                kind, uq = ARMS[name]
                ns = _simulate_parser().parse_args(["--table", args.table, "--policy", kind, "--out", args.out])
                ns.uq, ns.eta, ns.max_budget = uq, args.eta, args.max_budget
                arms[name] = build_policy(ns, table)
            c = compare(arms, table, seed_key(args.seed), args.runs, budget=args.budget,
                        budgets=args.grid_points, restart=not args.no_restart, level=args.level,
                        interval=args.interval, chunk_size=args.chunk_size, checkpoint=args.checkpoint,
                        progress=not args.no_progress)
    except (ValueError, TypeError, OSError) as err:
        return fail(str(err))
    text = (f"{', '.join(names)} on {where} ({table.values.shape[0]} configurations), seed {args.seed}; "
            f"regrets x {args.scale:g}.\n\n" + c.to_markdown(scale=args.scale) + "\n")
    with open(args.out, "w") as fh:
        fh.write(text)
    print(text)
    if not args.no_plot:
        from matplotlib.figure import Figure  # a figure without pyplot: the caller's backend stays

        fig = Figure(figsize=(6, 4))
        c.plot(fig.subplots(), scale=args.scale, ylabel=f"regret (x {args.scale:g})")
        png = os.path.splitext(args.out)[0] + ".png"
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        print(f"wrote {args.out} and {png}")
    else:
        print(f"wrote {args.out}")
    return 0
