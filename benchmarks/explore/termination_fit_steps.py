"""How far the bounded-cost GP fit is from a converged one: regret bound against fit steps.

:func:`jaxstop.regret.fit_regret_bound` fits the GP with at most ``fit_steps``
quasi-Newton steps (default 20), stopping earlier once converged (``fit_tol``), so
that no study in a batch costs more than ``fit_steps`` evaluations. This script
measures what that costs in accuracy, on the synthetic studies of
``bench_termination.py`` (``_common.termination_study``): for each study the bound from at most ``fit_steps`` in
{5, 12, 16, 20, 40} steps (cold start, gp's default hyperparameters) and from at
most 5 steps warm-started at the same study's fit one trial earlier (what a
running study or a replay uses), against a reference fit of 200 steps taken in
full, with the steps each fit took. The candidates (512 random points, refined)
are drawn with the same key in every fit, so the differences come from the fit
alone.

Usage::

    python benchmarks/explore/termination_fit_steps.py            # 16 studies per (n, d)
    python benchmarks/explore/termination_fit_steps.py --quick    # 4 studies, n = 100 only
    python benchmarks/explore/termination_fit_steps.py --fit-tol 1e-4   # a tighter stop
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for _common

import _common  # noqa: E402

_common.setup_environment()

import argparse  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxstop import regret  # noqa: E402

KEY = jax.random.key(3)
REFERENCE = 200
COLD = (5, 12, 16, 20, 40)
WARM = 5


def _bound(X, y, init=None, **options):
    fb = regret.fit_regret_bound(KEY, X, y, init=init, options=regret.FitOptions(**options))
    return float(fb.bound.bound), int(fb.fit_info.steps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--studies", type=int, default=None)
    ap.add_argument("--fit-tol", type=float, default=None, help="fit_tol of the fits (default: the library's)")
    ap.add_argument("--out", default=str(HERE.parent / "out" / "termination_fit_steps.md"))
    args = ap.parse_args(argv)
    tol = {} if args.fit_tol is None else {"fit_tol": args.fit_tol}
    tol_text = "the default fit_tol" if args.fit_tol is None else f"fit_tol = {args.fit_tol:g}"
    studies = args.studies or (4 if args.quick else 16)
    cases = [(100, 3)] if args.quick else [(100, 3), (200, 3), (200, 9)]
    rng = np.random.default_rng(7)
    rows = []
    for n, d in cases:
        keys = [*(f"cold {s}" for s in COLD), f"warm {WARM}"]
        rel = {k: [] for k in keys}
        used = {k: [] for k in keys}
        for _ in range(studies):
            X, y = map(jnp.asarray, _common.termination_study(rng, n, d))
            ref, _ = _bound(X, y, fit_steps=REFERENCE, fit_tol=0.0)
            prev = regret.fit_regret_bound(KEY, X, y, jnp.arange(n) < n - 1,
                                           options=regret.FitOptions(**tol)).params
            runs = {f"cold {s}": _bound(X, y, fit_steps=s, **tol) for s in COLD}
            runs[f"warm {WARM}"] = _bound(X, y, init=prev, fit_steps=WARM, **tol)
            for k, (b, steps) in runs.items():
                rel[k].append(abs(b / ref - 1))
                used[k].append(steps)
        for k in keys:
            r, u = np.asarray(rel[k]), np.asarray(used[k])
            rows.append((n, d, k, np.median(r), np.quantile(r, 0.9), r.max(), np.median(u), u.max()))
            print(f"n={n} d={d} {k}: |bound / bound_{REFERENCE} - 1| median {np.median(r):.3f}, "
                  f"90% {np.quantile(r, 0.9):.3f}, max {r.max():.3f}; steps taken median {np.median(u):g}, "
                  f"max {u.max()}", flush=True)
    lines = [
        "# Regret bound against GP fit steps", "",
        (f"Machine: {_common.cpu()}; "
         f"jax {jax.__version__}; float64; {studies} synthetic studies per (n, d) "
         f"(_common.termination_study); reference: {REFERENCE} steps; "
         f"candidates: 512 random points (same key), refined; fits stop early at {tol_text}, "
         "the reference takes all its steps."),
        "",
        "| n | d | fit (most steps) | median rel. diff | 90% | max | steps taken, median | max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    lines += [f"| {n} | {d} | {k} | {a:.3f} | {b:.3f} | {c:.3f} | {e:g} | {f} |"
              for n, d, k, a, b, c, e, f in rows]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
