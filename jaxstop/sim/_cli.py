"""The command line ``python -m jaxstop simulate``: a simulation study from a table file."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import os
import sys
from typing import Sequence

import jax
import numpy as np

from jaxstop import data as _data
from jaxstop import policies
from jaxstop._src import io as _io
from jaxstop.sim._many import run_many
from jaxstop.sim._table import CurveTable, curve_lengths
from jaxstop.sim._summary import DEFAULT_GRID_POINTS, Summary, summarize

__all__ = ["cli", "build_parser", "POLICIES", "format_summary", "criterion_share"]

HALVING = ("sh", "hyperband", "bohb", "subsampling")
BO = ("bo_bos", "gp_ucb", "auto_termination_bo")
POLICIES = HALVING + ("random_search",) + BO
_RUNG = ("sh", "hyperband", "bohb")

#: Options that only some policies take: option destination -> those policies.
APPLIES = {
    "uq": HALVING, "eta": HALVING, "min_budget": HALVING, "window": HALVING,
    "num_start": ("sh", "subsampling"), "keep_rule": _RUNG, "delta_estimate": _RUNG, "num_profile": _RUNG,
    "num_samples": ("bohb",), "total_budget": ("subsampling",), "step": ("subsampling",),
    "replace": ("random_search",), "max_evals": BO, "num_init": BO, "n0": ("bo_bos",), "num_paths": ("bo_bos",),
    "threshold": ("auto_termination_bo",), "acquisition": ("auto_termination_bo",),
    "min_iterations": ("auto_termination_bo",),
}

_DESCRIPTION = """\
Runs RUNS independent simulated studies of one policy against a table of real
learning curves (jaxstop.sim.run_many: chunked, sharded over the local devices,
resumable with --checkpoint), prints a summary and writes the summary and the
traces to --out with jaxstop.save (compact=True: small integers and flags
stored narrowly, restored bit for bit).

Run i uses the key fold_in(key(SEED), i): the results do not depend on
--chunk-size or on interruptions. Losses are read as fractions (error rates):
regrets are printed x100, in percentage points."""

_EPILOG = """\
table FILE:
  alexnet        the embedded 64 AlexNet curves (jaxstop.data.alexnet_curves,
                 with configuration vectors)
  *.csv          a long table with a header and the columns config, epoch, value
                 and optionally test (one record per configuration and epoch,
                 epochs counted from 1, any order, ragged curves), read with
                 Python's csv module (commas, quoted fields)
  other          a CurveTable written by CurveTable.save

--out FILE holds the tree {"summary": jaxstop.sim.Summary, "traces": jaxstop.sim.Trace};
read it with jaxstop.load(FILE, like=...) (see the simulation docs).

example:
  python -m jaxstop simulate --table alexnet --policy sh --uq --runs 1000 --seed 0 \\
      --out sh_plus.npz --checkpoint sh_plus.ckpt"""


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of ``python -m jaxstop simulate``."""
    p = argparse.ArgumentParser(prog=prog, description=_DESCRIPTION, epilog=_EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_argument_group("study")
    g.add_argument("--table", required=True, metavar="FILE",
                   help="the curves: 'alexnet', a CSV long table (*.csv) or a CurveTable.save file")
    g.add_argument("--policy", required=True, choices=POLICIES, help="the policy to simulate")
    g.add_argument("--runs", type=int, default=100, metavar="N", help="number of independent studies (default 100)")
    g.add_argument("--seed", type=int, default=0, metavar="S",
                   help="seed of the study's PRNG key, a 64-bit signed integer (default 0); the key is "
                        "jax.random.key(S) as JAX makes it with 64-bit integers (x64), whatever --dtype")
    g.add_argument("--out", required=True, metavar="FILE", help="where to write the summary and traces (.npz)")
    g.add_argument("--checkpoint", metavar="DIR",
                   help="directory of resumable chunk files: run again with the same arguments to resume")
    g.add_argument("--chunk-size", type=int, metavar="C",
                   help="studies per compiled call (bounds memory; default min(N, 1024))")
    g.add_argument("--max-jobs", type=int, metavar="J",
                   help="most jobs of one study (default: the policy's own bound); fewer cuts studies short")
    g.add_argument("--max-budget", type=int, metavar="E",
                   help="epochs of a full evaluation (default: the table's longest curve)")
    g.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="floating dtype of the simulation (default float32; float64 runs in JAX's x64 mode, "
                        "for this call only)")
    g.add_argument("--grid-points", type=int, default=DEFAULT_GRID_POINTS, metavar="G",
                   help=f"points of the summary's budget grid (default {DEFAULT_GRID_POINTS})")
    g.add_argument("--no-progress", action="store_true", help="do not print progress to stderr")
    g.add_argument("--record", choices=("full", "jobs"), default="full",
                   help="what --out keeps of every study: full (default) every step's job, result and policy "
                        "info; jobs the same without the infos (a smaller file, the same summary)")

    h = p.add_argument_group("halving policies (sh, hyperband, bohb, subsampling)")
    h.add_argument("--uq", action="store_true", default=None,
                   help="the UQ-guided version (SH+, Hyperband+, BOHB+, SS+ of Liu et al. 2024)")
    h.add_argument("--eta", type=int, metavar="ETA", help="halving rate, >= 2 (default 3)")
    h.add_argument("--min-budget", type=int, metavar="R", help="fewest epochs of the first rung (default 1)")
    h.add_argument("--window", type=int, metavar="W", help="losses in the uncertainty window with --uq (default 10)")
    h.add_argument("--num-start", type=int, metavar="K",
                   help="sh, subsampling: configurations of the first rung / kept in play")
    h.add_argument("--keep-rule", choices=("argmax", "crossing"),
                   help="sh, hyperband, bohb with --uq: the UQ keep rule (default argmax)")
    h.add_argument("--delta-estimate", choices=("profile", "window", "window_var"),
                   help="sh, hyperband, bohb with --uq: how Delta_t sigma is estimated (default profile)")
    h.add_argument("--num-profile", type=int, metavar="P",
                   help="sh, hyperband, bohb with --delta-estimate profile: candidates profiled (default 3)")
    h.add_argument("--num-samples", type=int, metavar="M", help="bohb: candidates scored by the density ratio")
    h.add_argument("--total-budget", type=int, metavar="B",
                   help="subsampling: total epochs (default: SH's total budget)")
    h.add_argument("--step", type=int, metavar="S", help="subsampling: epochs per job (default: SH's first rung)")

    r = p.add_argument_group("random search")
    r.add_argument("--replace", action="store_true", default=None, help="random_search: draw rows with replacement")

    b = p.add_argument_group("Bayesian optimisation (bo_bos, gp_ucb, auto_termination_bo; need configuration vectors)")
    b.add_argument("--max-evals", type=int, metavar="T",
                   help="most evaluations of one study (default min(rows, 50))")
    b.add_argument("--num-init", type=int, metavar="I",
                   help="random evaluations before the GP drives the search (default: the policy's; "
                        "auto_termination_bo: min(10, --max-evals))")
    b.add_argument("--n0", type=int, metavar="N0", help="bo_bos: epochs observed before the stopping decision")
    b.add_argument("--num-paths", type=int, metavar="P", help="bo_bos: simulated paths per BOS solve (default 100000)")
    b.add_argument("--threshold", type=float, metavar="EPS",
                   help="auto_termination_bo: fixed stopping threshold in loss units (required: tables carry "
                        "no cross-validation fold scores)")
    b.add_argument("--acquisition", choices=("ei", "ucb"), help="auto_termination_bo: acquisition (default ei)")
    b.add_argument("--min-iterations", type=int, metavar="M",
                   help="auto_termination_bo: no termination with fewer evaluations (default 20)")
    return p


#: auto_termination_bo's own default num_init, the CLI's default where --max-evals allows it.
_AT_NUM_INIT = inspect.signature(policies.auto_termination_bo).parameters["num_init"].default


class UsageError(ValueError):
    """A command-line input that cannot run (printed as ``error: ...``)."""


def read_table(spec: str, dtype) -> tuple[CurveTable, str]:
    """The table named by ``--table`` in ``dtype`` and a description of it."""
    if spec == "alexnet":
        a = _data.alexnet_curves()
        table = CurveTable(np.asarray(a.values, dtype), np.asarray(a.mask), None, np.asarray(a.configs, dtype))
        return table, "the embedded AlexNet curves"
    if not os.path.exists(spec):
        raise UsageError(f"--table {spec}: no such file (give 'alexnet', a .csv long table or a CurveTable file)")
    table = CurveTable.from_csv(spec) if spec.lower().endswith(".csv") else CurveTable.load(spec)
    cast = lambda a: None if a is None else np.asarray(a, dtype)  # noqa: E731
    return CurveTable(cast(table.values), np.asarray(table.mask), cast(table.test), cast(table.configs)), spec


def build_policy(args: argparse.Namespace, table: CurveTable) -> policies.Policy:
    """The policy ``args`` describe, sized by ``table``."""
    rows = table.values.shape[0]
    name = args.policy
    # the longest curve, as --help says (a saved table may be wider than every curve in it)
    max_budget = int(np.max(curve_lengths(table))) if args.max_budget is None else args.max_budget
    dtype = table.values.dtype

    def given(*names):
        return {n: getattr(args, n) for n in names if getattr(args, n) is not None}

    def configs():
        if table.configs is None:
            raise UsageError(f"--policy {name} needs configuration vectors in the unit cube (CurveTable.configs) "
                             f"and the table {args.table} has none: a CSV long table carries none; use a table "
                             "written by CurveTable.save with configs, or --table alexnet")
        return table.configs

    halving = dict(eta=3 if args.eta is None else args.eta, uq=bool(args.uq), dtype=dtype,
                   **given("min_budget", "window"))
    rung = given("keep_rule", "delta_estimate", "num_profile")
    if name == "sh":
        return policies.sh(rows, max_budget, **halving, **rung, **given("num_start"))
    if name == "hyperband":
        return policies.hyperband(rows, max_budget, **halving, **rung)
    if name == "bohb":
        return policies.bohb(rows, max_budget, candidates=configs(), **halving, **rung, **given("num_samples"))
    if name == "subsampling":
        extra = given("num_start", "step")
        if args.total_budget is not None:
            extra["budget"] = args.total_budget
        return policies.subsampling(rows, max_budget, **halving, **extra)
    if name == "random_search":
        return policies.random_search(rows, max_budget=max_budget, replace=bool(args.replace), dtype=dtype)
    max_evals = min(rows, 50) if args.max_evals is None else args.max_evals
    if name == "bo_bos":
        return policies.bo_bos(configs(), max_budget=max_budget, max_evals=max_evals, dtype=dtype,
                               **given("n0", "num_paths", "num_init"))
    if name == "gp_ucb":
        return policies.gp_ucb(configs(), max_budget=max_budget, max_evals=max_evals, dtype=dtype,
                               **given("num_init"))
    if args.threshold is None:
        raise UsageError("--policy auto_termination_bo needs --threshold (a fixed threshold in loss units): "
                         "curve tables carry no cross-validation fold scores for the CV threshold")
    # the policy's default num_init (10), at most max_evals: a table of fewer rows (or a smaller
    # --max-evals) ran into an error about a --num-init the user never gave
    extra = {} if args.num_init is not None else {"num_init": min(_AT_NUM_INIT, max(max_evals, 1))}
    return policies.auto_termination_bo(rows, max_budget=max_budget, max_evals=max_evals, candidates=configs(),
                                        **given("threshold", "acquisition", "num_init", "min_iterations"), **extra)


def seed_key(seed: int) -> jax.Array:
    """The study's key for ``--seed``: ``jax.random.key(seed)`` with 64-bit integers. Without
    x64 JAX keeps a seed's low 32 bits only (``2**32`` gave the key of 0) and reads a negative
    seed otherwise than with it (``--dtype float32`` and ``float64`` drew other runs); the
    two agree for seeds in ``[0, 2**32)``."""
    with jax.enable_x64(True):
        return jax.random.key(seed)


def format_summary(summary: Summary, has_test: bool) -> str:
    """The printed table: one line per measure, mean, standard error and quantiles."""
    levels = np.asarray(summary.levels).tolist()
    head = ["mean", "std. error"] + [f"q{100 * q:g}" for q in levels]
    rows = [("final regret (percentage points)", "final_regret", 100.0, None)]
    if has_test:
        rows.append(("final test regret (percentage points)", "final_test_regret", 100.0, None))
    rows += [("best-so-far regret at the end (percentage points)", "regret", 100.0, -1),
             ("budget spent (epochs)", "budget", 1.0, None),
             ("stop step (job index)", "stop_step", 1.0, None),
             ("terminated by the policy (share of runs)", "terminated", 1.0, None)]
    width = max(len(r[0]) for r in rows)
    lines = [" " * width + "".join(f"{h:>12}" for h in head)]
    for label, field, scale, at in rows:
        pick = lambda m: np.asarray(getattr(m, field), dtype=float)[..., at] if at is not None \
            else np.asarray(getattr(m, field), dtype=float)  # noqa: E731
        cells = [pick(summary.mean), pick(summary.se)] + list(pick(summary.quantiles))
        if field == "terminated":
            cells = cells[:1] + [np.nan] * (len(cells) - 1)
        lines.append(f"{label:<{width}}" + "".join(
            f"{'-':>12}" if not np.isfinite(c) else f"{scale * c:>12.4g}" for c in cells))
    return "\n".join(lines)


def criterion_share(traces) -> float | None:
    """The share of studies whose stopping criterion fired (``infos.criterion`` at an active
    step: ``auto_termination_bo``'s regret bound below its threshold), or None for a policy
    without one. "Terminated by the policy" also counts studies that ended at ``max_evals``
    or ran out of candidates; this is the share the paper's rule decided."""
    criterion = getattr(traces.infos, "criterion", None)
    if criterion is None:
        return None
    fired = np.any(np.asarray(criterion, bool) & np.asarray(traces.active, bool), axis=-1)
    return float(np.mean(fired))


#: Policy arguments that a flag of another name sets: argument -> option destination.
_ARGUMENT_FLAGS = {"budget": "total_budget", "num_runs": "runs"}


def _as_flag(message: str, options: dict) -> str:
    """``message`` with a leading argument name that is also an option of the command line
    (``max_evals must be >= 1``) written as its flag (``--max-evals must be >= 1``); a policy
    argument set by a flag of another name (subsampling's ``budget``) as that flag, where given."""
    name = message.split(" ", 1)[0]
    if options.get(_ARGUMENT_FLAGS.get(name)) is not None:
        return "--" + _ARGUMENT_FLAGS[name].replace("_", "-") + message[len(name):]
    if name in options and name.isidentifier():
        return "--" + name.replace("_", "-") + message[len(name):]
    return message


def cli(argv: Sequence[str] | None = None, prog: str | None = "python -m jaxstop simulate") -> int:
    """Runs ``python -m jaxstop simulate`` with the arguments ``argv`` (default ``sys.argv[1:]``).

    Returns the exit status: 0 on success, 2 for an input that cannot run (the message on
    stderr). ``--help`` and malformed options exit through ``argparse`` (``SystemExit``).
    See ``python -m jaxstop simulate --help`` and the simulation docs.
    """
    parser = build_parser(prog)
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    for dest, names in APPLIES.items():
        if getattr(args, dest) is not None and args.policy not in names:
            flag = "--" + dest.replace("_", "-")
            parser.error(f"{flag} does not apply to --policy {args.policy} (it applies to {', '.join(names)})")
    for dest in ("window", "keep_rule", "delta_estimate", "num_profile"):
        if getattr(args, dest) is not None and not args.uq:
            parser.error(f"--{dest.replace('_', '-')} applies with --uq only")
    for dest in ("runs", "chunk_size", "max_jobs", "max_budget", "grid_points"):
        value = getattr(args, dest)
        if value is not None and value < (2 if dest == "grid_points" else 1):
            parser.error(f"--{dest.replace('_', '-')} must be >= {2 if dest == 'grid_points' else 1}, got {value}")
    if not -2**63 <= args.seed < 2**63:
        parser.error(f"--seed must be a 64-bit signed integer, got {args.seed}")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if os.path.isdir(args.out):
        parser.error(f"--out {args.out} is a directory: name the file to write")
    if not os.path.isdir(out_dir):
        parser.error(f"--out {args.out}: the directory {out_dir} does not exist")
    if not os.access(out_dir, os.W_OK):
        parser.error(f"--out {args.out}: the directory {out_dir} is not writable")
    if args.table != "alexnet" and os.path.isfile(args.out) and os.path.isfile(args.table) \
            and os.path.samefile(args.out, args.table):
        parser.error(f"--out {args.out} is the --table file: it would be replaced by the study's results")
    if args.checkpoint is not None and os.path.abspath(args.checkpoint) == os.path.abspath(args.out):
        parser.error(f"--out {args.out} and --checkpoint name the same path: --out is a file, --checkpoint a directory")
    if args.checkpoint is not None and os.path.exists(args.checkpoint) and not os.path.isdir(args.checkpoint):
        parser.error(f"--checkpoint {args.checkpoint} exists and is not a directory")
    # float64 in JAX's x64 mode for this call only: a caller of cli() keeps its own setting
    x64 = jax.enable_x64(True) if args.dtype == "float64" else contextlib.nullcontext()
    try:
        with x64:
            table, where = read_table(args.table, np.dtype(args.dtype))
            policy = build_policy(args, table)
            traces = run_many(policy, table, seed_key(args.seed), args.runs, max_jobs=args.max_jobs,
                              chunk_size=args.chunk_size, checkpoint=args.checkpoint, progress=not args.no_progress,
                              record=args.record)
            summary = summarize(traces, table, budget_grid=args.grid_points)
            _io.save({"summary": summary, "traces": traces}, args.out, compact=True)
    except (ValueError, TypeError, OSError) as err:  # OSError: e.g. a disk that filled up while writing
        print(f"{parser.prog}: error: {_as_flag(str(err), vars(args))}", file=sys.stderr)
        return 2
    rows, cols = table.values.shape[0], int(np.max(curve_lengths(table)))
    variant = " (UQ-guided)" if args.uq else ""
    print(f"{args.policy}{variant} on {where}: {rows} configurations, curves of up to {cols} epochs; "
          f"{args.runs} runs, seed {args.seed}")
    print(format_summary(summary, table.test is not None))
    share = criterion_share(traces)
    if share is not None:
        print(f"stopped by the regret-bound criterion before --max-evals: {100 * share:.4g}% of runs")
    print(f"wrote the summary and traces to {args.out}")
    return 0
