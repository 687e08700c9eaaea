"""How close is ``gp.fit``'s bounded-cost fit to a converged one?

On the studies of ``bench_gp.py`` (``_common.gp_studies``: n = 100, d = 9; float64)
the default fit (at most ``--steps`` evaluations, stopping once converged) is compared with a
fit of 200 evaluations that takes every step, by the MAP objective (negative log
marginal likelihood minus the log prior) at the returned hyperparameters:
``objective(fit) - objective(reference)`` as median / 90% / max over studies,
and the evaluations the fit used.

Usage:
    python benchmarks/explore/gp_fit_quality.py              # 200 studies
    python benchmarks/explore/gp_fit_quality.py --studies 50
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for _common

import _common  # noqa: E402

_common.setup_environment()

import argparse  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxstop import gp  # noqa: E402


def objective(p, X, z):
    return -gp.log_marginal_likelihood(p, X, z) - gp.log_prior(p)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=200)
    ap.add_argument("--steps", type=int, nargs="*", default=[10, 20, 30])
    args = ap.parse_args(argv)
    X, y, _ = _common.gp_studies(jax.random.key(0), args.studies, jnp.float64)
    z = jax.vmap(lambda y: gp.standardize(y)[0])(y)

    def fit_all(steps, tol):
        fit = jax.jit(jax.vmap(lambda X, z: gp.fit(X, z, steps=steps, tol=tol)))
        p, info = fit(X, z)
        return np.asarray(jax.vmap(objective)(p, X, z)), np.asarray(info.steps), np.asarray(info.finite)

    ref, _, ref_ok = fit_all(200, 0.0)
    print(f"{args.studies} studies of _common.gp_studies (n = {_common.GP_N}, d = {_common.GP_D}), float64; "
          f"reference: 200 evaluations, every step taken ({int(ref_ok.sum())} finite)\n")
    print("| at most | tol | objective - reference: median | 90% | max | evaluations used: median | max |")
    print("|---|---|---|---|---|---|---|")
    for steps in args.steps:
        for tol in (1e-4, 0.0):
            val, used, _ = fit_all(steps, tol)
            gap = val - ref
            print(f"| {steps} | {tol:g} | {np.median(gap):.1e} | {np.quantile(gap, 0.9):.1e} | {gap.max():.1e} "
                  f"| {np.median(used):g} | {used.max()} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
