"""Where the time of one regret bound goes: fit steps, candidates, refinement, linear algebra.

Times :func:`jaxstop.regret.fit_regret_bound` on one synthetic study of
``bench_termination.py`` (``_common.termination_study``) with parts of the work
switched off or the fit's early stop disabled (each row names the fit steps taken),
and the GP log-marginal-likelihood value and gradient (one quasi-Newton step's work)
on its own, at the top-set size ``m = n / 2``. Compile and run are timed separately;
run times are medians after ``block_until_ready``, the rows of one n timed
round-robin (``_common.round_robin_seconds``). One thread (OpenBLAS / XLA's
single-threaded Eigen), float64.

Usage (from the repository root)::

    python benchmarks/explore/termination_profile.py --pin 1            # n in {200, 500}, d = 3
    python benchmarks/explore/termination_profile.py --n 200 --d 9
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

from jaxstop import gp, regret  # noqa: E402

VARIANTS = (
    ("defaults (at most 20 fit steps, stops at fit_tol = 1e-2; 512 candidates, refinement)", {}),
    ("stops at fit_tol = 1e-4 instead of the default 1e-2", {"fit_tol": 1e-4}),
    ("always 20 fit steps (fit_tol = 0)", {"fit_tol": 0.0}),
    ("no refinement", {"refine_steps": 0}),
    ("20 fit steps, 16 candidates, no refinement", {"fit_tol": 0.0, "candidates": 16, "refine_steps": 0}),
    ("1 fit step, 16 candidates, no refinement", {"fit_steps": 1, "candidates": 16, "refine_steps": 0}),
)


def _options(kw):
    """The keywords of fit_regret_bound: its own ones, the rest as FitOptions."""
    own = {k: v for k, v in kw.items() if k == "candidates"}
    rest = {k: v for k, v in kw.items() if k != "candidates"}
    return dict(own, options=regret.FitOptions(**rest)) if rest else own


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[200, 500])
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--pin", type=int, default=None, help="pin the process to this CPU core")
    ap.add_argument("--out", default=str(HERE.parent / "out" / "termination_profile.md"))
    args = ap.parse_args(argv)
    _common.pin(args.pin)
    rng = np.random.default_rng(0)
    key = jax.random.key(0)
    rows = []
    for n in args.n:
        X, y = (jnp.asarray(a) for a in _common.termination_study(rng, n, args.d))
        names, calls = [], []
        for name, kw in VARIANTS:
            kw = _options(kw)
            fn = jax.jit(lambda k, X, y, kw=kw: regret.fit_regret_bound(k, X, y, **kw).bound.bound)
            steps = int(regret.fit_regret_bound(key, X, y, **kw).fit_info.steps)
            names.append(f"{name} [{steps} steps taken]")
            calls.append((fn, (key, X, y)))
        m = n // 2
        Xm, ym = X[:m], (y[:m] - y[:m].mean()) / y[:m].std()
        p = gp.params(1.0, [0.3] * args.d, 1e-3)
        vg = jax.jit(jax.value_and_grad(lambda p, Xm=Xm, ym=ym: gp.log_marginal_likelihood(p, Xm, ym)))
        names.append(f"GP log marginal likelihood, value and gradient, m = {m}")
        calls.append((vg, (p,)))
        rows += [(n, w, 1e3 * t) for w, t in zip(names, _common.round_robin_seconds(calls, args.repeats))]
        print(f"n={n} done", file=sys.stderr, flush=True)
    cpu_text = _common.cpu()
    pin = f", pinned to core {args.pin}" if args.pin is not None else ""
    text = (
        f"Machine: {cpu_text}{pin}; jax {jax.__version__}; float64; d = {args.d}; "
        f"median of {args.repeats} calls after a warm-up call, the rows of one n timed round-robin.\n\n"
        "| n | what | ms |\n|---|---|---|\n" + "".join(f"| {n} | {w} | {t:.2f} |\n" for n, w, t in rows)
    )
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
