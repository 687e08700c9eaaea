"""The Optuna terminator's regret bound against Optuna's own ``RegretBoundEvaluator``.

Three checks behind ``docs/optuna.md`` (section "From ``optuna.terminator``, name by name"):

1. **Default GP against Optuna's.** On noisy 2-D quadratics (TPE, ``--studies`` seeds, noise std
   0.05 and 0.2), at n = 30, 40, 50, 60 COMPLETE trials: the bound of
   :class:`~jaxstop.integrations.optuna.RegretBoundTerminator` with its defaults (the paper's
   GP: a fitted constant mean, a gradient-refined LCB minimum) over Optuna's bound.
2. **Optuna's GP.** With ``options=regret.FitOptions(fit_mean=False, refine_steps=0)`` (a zero
   mean, the minimum over the random candidates only), Optuna's bound must lie within the range
   of ours over 4 candidate seeds, widened by 3% for the two fits' stopping tolerances (Optuna's
   ``gtol`` 1e-2 is up to 2x looser than jaxstop's ``fit_tol`` 1e-2), and the stop decisions
   of Optuna's ``Terminator`` with a ``StaticErrorEvaluator`` 20% below and above its bound
   must equal ours. The script exits with status 1 where either fails.
3. **float32 on a deterministic objective.** ``x**2`` over [0, 1] after 20 trials of
   ``RandomSampler(seed=0)``: the bound with x64 off and on (two processes), and Optuna's.

Optuna's evaluator needs PyTorch (the ``bench`` extra). Usage (from the repository root)::

    python benchmarks/explore/optuna_gp_parity.py
    python benchmarks/explore/optuna_gp_parity.py --studies 8
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for _common

import _common  # noqa: E402

_common.setup_environment()

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from jaxstop import regret  # noqa: E402
from jaxstop.integrations.optuna import RegretBoundTerminator  # noqa: E402

OPTUNA_GP = regret.FitOptions(fit_mean=False, refine_steps=0)


def _optuna_bound(trials, direction):
    from optuna.terminator import RegretBoundEvaluator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna.terminator is deprecated and experimental
        return RegretBoundEvaluator(seed=0).evaluate(trials, direction)


def _optuna_stops(study, threshold):
    from optuna.terminator import RegretBoundEvaluator, StaticErrorEvaluator, Terminator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Terminator(RegretBoundEvaluator(seed=0), StaticErrorEvaluator(threshold),
                          min_n_trials=20).should_terminate(study)


def _prefix(study, n):
    out = optuna.create_study(direction=study.direction)
    for t in study.trials[:n]:
        out.add_trial(t)
    return out


def _quadratic(noise):
    def objective(trial):
        x, y = trial.suggest_float("x", -2, 2), trial.suggest_float("y", -1, 1)
        return (x - 0.3) ** 2 + y ** 2 + noise * np.random.default_rng(trial.number).normal()
    return objective


def parity(num_studies: int) -> bool:
    ok = True
    print("| noise | seed | n | Optuna's bound | ours, default GP | default / Optuna | ours, Optuna's GP (4 seeds) "
          "| within | decisions agree |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for noise in (0.05, 0.2):
        for seed in range(num_studies):
            study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed))
            study.optimize(_quadratic(noise), n_trials=60)
            for n in (30, 40, 50, 60):
                prefix = _prefix(study, n)
                ref = _optuna_bound(prefix.trials, prefix.direction)
                default = RegretBoundTerminator(threshold=1.0, warm_start=False).evaluate(prefix).bound
                ours = [RegretBoundTerminator(threshold=1.0, warm_start=False, seed=s, options=OPTUNA_GP)
                        .evaluate(prefix).bound for s in range(4)]
                within = min(ours) / 1.03 <= ref <= max(ours) * 1.03
                agree = all(
                    RegretBoundTerminator(threshold=t, warm_start=False, options=OPTUNA_GP).should_terminate(prefix)
                    == _optuna_stops(prefix, t) == (t > ref)
                    for t in (0.8 * ref, 1.25 * ref))
                ok &= within and agree
                ratios.append(default / ref)
                print(f"| {noise} | {seed} | {n} | {ref:.4g} | {default:.4g} | {default / ref:.2f} "
                      f"| {min(ours):.4g}-{max(ours):.4g} | {within} | {agree} |")
    print(f"\ndefault GP / Optuna's bound over {len(ratios)} prefixes: min {min(ratios):.2f}, "
          f"median {np.median(ratios):.2f}, max {max(ratios):.2f}")
    print("Optuna's GP options: " + ("every bound within range, every decision the same" if ok else "MISMATCH"))
    return ok


def _deterministic_bound() -> dict:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=20)
    bound = RegretBoundTerminator(threshold=0.01, warm_start=False).evaluate(study).bound
    return {"bound": float(bound), "optuna": float(_optuna_bound(study.trials, study.direction))}


def float32_effect() -> None:
    out = {}
    for mode in ("float32", "float64"):
        cmd = [sys.executable, __file__, "--deterministic", mode]
        out[mode] = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
    print(f"\nx**2 over [0, 1], 20 random trials: bound {out['float32']['bound']:.4g} in float32, "
          f"{out['float64']['bound']:.4g} in float64; Optuna's {out['float64']['optuna']:.4g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=3, help="TPE seeds per noise level (default 3)")
    parser.add_argument("--deterministic", choices=("float32", "float64"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.deterministic:
        import jax

        jax.config.update("jax_enable_x64", args.deterministic == "float64")
        print(json.dumps(_deterministic_bound()))
        return
    import torch

    print(_common.report_header("Optuna terminator: jaxstop's bound against Optuna's RegretBoundEvaluator",
                                packages=(optuna, torch)) + "\n")
    ok = parity(args.studies)
    float32_effect()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
