"""The cold GP fit of a regret bound at large n: step counts, the cost of one step, and three
alternatives measured against the fit as it is.

For ``--studies`` synthetic studies of ``bench_termination.py`` (``_common.termination_study``)
at each ``n`` (top set of ``m = n / 2`` points), this times:

1. the fit as :func:`jaxstop.regret.fit_regret_bound` runs it cold (gp's default start, at
   most 20 quasi-Newton steps, ``fit_tol`` = 1e-2), with its step counts and its objective
   gap to a 200-step fit;
2. the parts of one step at ``m``: the Matern correlation, the Cholesky factor, ``L^-1`` and
   ``K^-1`` from it, the whole objective with its gradient; and LAPACK's ``dpotrf`` / ``dpotri``
   through SciPy (OpenBLAS) on the same matrix, for reference;
3. alternatives to the cold start, none of which jaxstop uses: a coarse-to-fine start (fit
   every second point of the top set first, ``levels`` times, and warm-start the finer fit
   with its hyperparameters and inverse Hessian scaled by the size ratio), and a float32
   fit followed by float64 steps from its optimum and curvature;
4. ``K^-1`` and ``log det K`` by a recursive Schur-complement inverse (dense products only)
   against Cholesky plus the blocked inverse: time and error against ``numpy.linalg.inv``.

One thread, float64 unless marked; medians after a warm-up call (the parts timed
round-robin, ``_common.round_robin_seconds``).

Usage (from the repository root)::

    python benchmarks/explore/termination_cold_fit.py --pin 1                 # n = 500, d in {3, 9}
    python benchmarks/explore/termination_cold_fit.py --n 200 --d 3 --studies 10
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/, for _common

import _common  # noqa: E402

_common.setup_environment()

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from functools import partial  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

jax.config.update("jax_enable_x64", True)

from jaxstop import gp, regret  # noqa: E402
from jaxstop._src import gp_core, gp_fit, termination  # noqa: E402
from jaxstop._src import linalg as _linalg  # noqa: E402

MIN_NOISE = 1e-6


def _top(X, y, n):
    cap = termination.top_capacity(n, 0.5, 20)
    _, tmask, _, Xt, z, _, _ = termination.standardized_top(X, y, jnp.ones(n, bool), cap, 0.5, 20)
    return Xt, z, tmask


def _fit(X, z, mask, init, *, steps, tol, inv_hessian=None):
    p, info, _, H = gp_fit.fit_profiled(X, z, mask, init, MIN_NOISE, steps=steps, fit_mean=True, tol=tol,
                                     inv_hessian=inv_hessian)
    return p, info, H


def cold_fit(n, d):
    init = gp_core.default_init(d, jnp.float64)

    @jax.jit
    def f(X, y):
        _, info, _ = _fit(*_top(X, y, n), init, steps=20, tol=1e-2)
        return info.objective, info.steps, jnp.full((), -1)  # no coarse or float32 phase
    return f


def reference_fit(n, d):
    init = gp_core.default_init(d, jnp.float64)

    @jax.jit
    def f(X, y):
        return _fit(*_top(X, y, n), init, steps=200, tol=0.0)[1].objective
    return f


def coarse_to_fine_fit(n, d, levels):
    """Fit every 2^k-th point of the top set (sorted by value), k = levels .. 1, then all."""
    init = gp_core.default_init(d, jnp.float64)

    @jax.jit
    def f(X, y):
        sets = [_top(X, y, n)]
        for _ in range(levels):
            sets.append(tuple(a[::2] for a in sets[-1]))
        p, H, coarse_steps = init, None, 0
        for level in range(levels, -1, -1):
            if H is not None:  # the Hessian of the objective grows with the number of points
                H = H * (sets[level + 1][0].shape[0] / sets[level][0].shape[0])
            p, info, H = _fit(*sets[level], p, steps=20, tol=1e-1 if level else 1e-2, inv_hessian=H)
            if level:
                coarse_steps = coarse_steps + info.steps
        return info.objective, info.steps, coarse_steps
    return f


def float32_first_fit(n, d):
    init = gp_core.default_init(d, jnp.float64)
    f32 = partial(jax.tree_util.tree_map, lambda a: jnp.asarray(a, jnp.float32))

    @jax.jit
    def f(X, y):
        Xt, z, mask = _top(X, y, n)
        p32, info32, H32 = _fit(f32(Xt), f32(z), mask, f32(init), steps=20, tol=1e-1)
        ok = info32.finite
        p = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, jnp.asarray(a, jnp.float64), b), p32, init)
        H = jnp.where(ok, jnp.asarray(H32, jnp.float64), 0)
        _, info, _ = _fit(Xt, z, mask, p, steps=20, tol=1e-2, inv_hessian=H)
        return info.objective, info.steps, info32.steps
    return f


def schur_inverse(K, leaf=64):
    """``(K^-1, log det K / 2)`` by the block formula on ``[[A, B^T], [B, D]]`` with the Schur
    complement ``S = D - B A^-1 B^T``, recursively; leaves by Cholesky."""
    n = K.shape[-1]
    if n <= leaf:
        L = _linalg.cholesky(K)
        return _linalg.inv_from_cholesky(L)[1], jnp.sum(jnp.log(jnp.diagonal(L)))
    h = n // 2
    A, B, D = K[:h, :h], K[h:, :h], K[h:, h:]
    Ai, half_logdet_a = schur_inverse(A, leaf)
    X = B @ Ai
    S = D - X @ B.T
    Si, half_logdet_s = schur_inverse(0.5 * (S + S.T), leaf)
    Y = Si @ X
    return jnp.block([[Ai + X.T @ Y, -Y.T], [-Y, Si]]), half_logdet_a + half_logdet_s


def cholesky_inverse(K):
    L = _linalg.cholesky(K)
    return _linalg.inv_from_cholesky(L)[1], jnp.sum(jnp.log(jnp.diagonal(L)))


def run(n, d, num, repeats, rng):
    lines = []
    studies = [tuple(jnp.asarray(a) for a in _common.termination_study(rng, n, d)) for _ in range(num)]
    ref = reference_fit(n, d)
    best = np.array([float(ref(X, y)) for X, y in studies])
    base_ms = None
    variants = [("cold fit as in fit_regret_bound", cold_fit(n, d))]
    variants += [(f"coarse-to-fine, {k} level{'s' * (k > 1)}", coarse_to_fine_fit(n, d, k)) for k in (1, 2)]
    variants += [("float32 steps, then float64", float32_first_fit(n, d))]
    for name, fn in variants:
        outs = jax.block_until_ready([fn(X, y) for X, y in studies])
        passes = []
        for _ in range(repeats):
            t = time.perf_counter()
            for X, y in studies:
                jax.block_until_ready(fn(X, y))
            passes.append((time.perf_counter() - t) / num)
        ms = 1e3 * statistics.median(passes)
        base_ms = base_ms or ms
        gap = np.array([float(o[0]) for o in outs]) - best
        steps = np.array([int(o[1]) for o in outs])
        first = np.array([int(o[2]) for o in outs])
        first_txt = "-" if first.min() < 0 else f"{first.mean():.1f}"
        lines.append(f"| {n} | {d} | {name} | {ms:.2f} | x{base_ms / ms:.2f} | {first_txt} | "
                     f"{steps.mean():.1f} / {steps.max()} | {np.median(gap):.1e} / {gap.max():.1e} |")
    return lines


def parts(n, d, repeats, rng):
    import scipy.linalg.lapack as lapack

    m = n // 2
    X = jnp.asarray(rng.uniform(size=(m, d)))
    z = jnp.asarray(rng.normal(size=m))
    mask = jnp.ones(m, bool)
    p = gp.params(1.0, [0.5] * d, 1e-2)
    both = mask[:, None] & mask[None, :]
    C, _ = gp_core.correlation_parts(p.log_lengthscales, X, both)
    K = C + 1e-2 * jnp.eye(m)
    L = jnp.linalg.cholesky(K)
    raw = gp_fit.to_raw(p._replace(log_noise=p.log_noise - p.log_amplitude), MIN_NOISE)
    theta, unravel = jax.flatten_util.ravel_pytree(raw)
    objective = partial(gp_fit.objective_profiled_scale, X=X, y=z, mask=mask, min_noise=jnp.asarray(MIN_NOISE),
                        use_prior=True, fit_mean=True, mean0=jnp.asarray(0.0))
    rows = [
        ("Matern correlation and its derivative factor", jax.jit(lambda ll: gp_core.correlation_parts(ll, X, both)),
         (p.log_lengthscales,)),
        ("Cholesky factor (jaxlib LAPACK)", jax.jit(_linalg.cholesky), (K,)),
        ("L^-1 and K^-1 from it (blocked)", jax.jit(_linalg.inv_from_cholesky), (L,)),
        ("dense product K K^T", jax.jit(lambda a: a @ a.T), (K,)),
        ("objective and gradient (one step)",
         jax.jit(lambda t: jax.value_and_grad(lambda v: objective(unravel(v)), has_aux=True)(t)), (theta,)),
    ]
    Kn = np.asarray(K)
    Ln, _ = lapack.dpotrf(Kn, lower=1)
    rows += [("dpotrf (SciPy, OpenBLAS)", lambda: lapack.dpotrf(Kn, lower=1), ()),
             ("dpotri (SciPy, OpenBLAS)", lambda: lapack.dpotri(Ln, lower=1), ())]
    times = _common.round_robin_seconds([(fn, args) for _, fn, args in rows], repeats)
    out = [f"| {m} | {d} | {name} | {1e6 * t:.0f} |" for (name, _, _), t in zip(rows, times)]
    return out


def inverses(n, repeats, rng):
    m = n // 2
    out = []
    for noise in (1e-2, 1e-6):
        X = jnp.asarray(rng.uniform(size=(m, 3)))
        K = gp_core.matern52(gp.params(1.0, [0.5] * 3, 1e-2), X, X) + noise * jnp.eye(m)
        exact = np.linalg.inv(np.asarray(K))
        exact = 0.5 * (exact + exact.T)
        for name, fn in (("Cholesky + blocked inverse", cholesky_inverse), ("recursive Schur complement", schur_inverse)):
            f = jax.jit(fn)
            Ki = np.asarray(f(K)[0])
            err = np.abs(Ki - exact).max() / np.abs(exact).max()
            out.append(f"| {m} | {noise:g} | {name} | {1e6 * _common.round_robin_seconds([(f, (K,))], repeats)[0]:.0f} | {err:.1e} |")
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="*", default=[500])
    ap.add_argument("--d", type=int, nargs="*", default=[3, 9])
    ap.add_argument("--studies", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pin", type=int, default=None, help="pin the process to this CPU core")
    ap.add_argument("--out", default=str(HERE.parent / "out" / "termination_cold_fit.md"))
    args = ap.parse_args(argv)
    _common.pin(args.pin)
    rng = np.random.default_rng(0)
    fits, costs, invs = [], [], []
    for n in args.n:
        for d in args.d:
            fits += run(n, d, args.studies, args.repeats, rng)
            costs += parts(n, d, 5 * args.repeats, rng)
            print(f"n={n} d={d} done", file=sys.stderr, flush=True)
        invs += inverses(n, 5 * args.repeats, rng)
    cpu_text = _common.cpu()
    pin = f", pinned to core {args.pin}" if args.pin is not None else ""
    text = (
        f"Machine: {cpu_text}{pin}; jax {jax.__version__}; one thread; float64 unless marked; "
        f"{args.studies} studies per (n, d), medians of {args.repeats} (fits) / {5 * args.repeats} (parts) runs.\n\n"
        "Fits (objective gap: to a 200-step fit, nats, median / worst; a negative gap is a better optimum):\n\n"
        "| n | d | fit | ms per study | speed-up | coarse / float32 steps (mean) | final steps mean / max | "
        "objective gap |\n|---|---|---|---|---|---|---|---|\n" + "\n".join(fits) + "\n\n"
        "One step's parts:\n\n| m | d | part | us |\n|---|---|---|---|\n" + "\n".join(costs) + "\n\n"
        "K^-1 (Matern-5/2 Gram matrix, lengthscale 0.5, d = 3; error: largest entry difference to numpy.linalg.inv "
        "over its largest entry):\n\n| m | noise | method | us | error |\n|---|---|---|---|---|\n" + "\n".join(invs) + "\n"
    )
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
