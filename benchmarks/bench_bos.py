"""Benchmark: one BO-BOS stopping problem (fit + 100,000 paths + induction) and a batch.

Measures ``jaxstop.bos.solve`` / ``solve_batch`` (float32 and float64) against a
vectorised NumPy implementation of the same rules, written below, in the same
run. The published BO-BOS code (``bos_function.run_BOS`` of Dai et al.) is the
reference figure: 89.6 s per solve on this class of machine (99.7% of it in the
Python induction loop), measured separately and quoted, not rerun here.

Problem: N = 50 epochs, N0 = 8 observed, 100,000 paths, 99 bins, K1 = 100,
K2 = 99, c = 1 (the paper's settings). Batch: 1,000 trials with different
prefixes, incumbents and K1 values, 10,000 paths each (a smaller count so that
the batch fits a minute; per-trial cost scales about linearly in paths).

    .venv/bin/python benchmarks/bench_bos.py            # full run
    .venv/bin/python benchmarks/bench_bos.py --quick    # small batch, 3 repeats (minutes, mostly compiling)

Writes a Markdown table to ``benchmarks/out/bench_bos.md``.
"""

from __future__ import annotations

# As the project's tests and Makefile do (see README): one OpenBLAS thread for small
# LAPACK calls, single-threaded Eigen in XLA:CPU. Set before numpy / jax load.
import _common

_common.setup_environment()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from datetime import datetime, timezone  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402

from jaxstop import bos  # noqa: E402
from jaxstop.bos import _curve_gp  # noqa: E402  (the fit's starts and bounds, internal)

jax.config.update("jax_enable_x64", True)  # float64 runs need it; float32 inputs stay float32

PUBLISHED_SECONDS = 89.6
N, N0, NUM_PATHS, NUM_BINS = 50, 8, 100_000, 99
K1, K2, COST, BEST = 100.0, 99.0, 1.0, 0.30
PREFIX = np.array([0.62, 0.48, 0.41, 0.37, 0.345, 0.33, 0.32, 0.312])

# --------------------------------------------------------------------------------------
# Vectorised NumPy version of the same rules (fit, draws, counts, induction)
# --------------------------------------------------------------------------------------

STARTS = np.array(_curve_gp.STARTS)  # the same 12 starting points (log rate, log alpha)
LO = np.array([_curve_gp.LOG_RATE_BOUNDS[0], _curve_gp.LOG_ALPHA_BOUNDS[0]])
HI = np.array([_curve_gp.LOG_RATE_BOUNDS[1], _curve_gp.LOG_ALPHA_BOUNDS[1]])


def np_nll_grad(U, y, noise):
    """NLL and gradient for all starts at once; U has shape (S, 2)."""
    n = y.shape[0]
    x = np.arange(1.0, n + 1)
    s = (x[:, None] + x[None, :])[None]
    alpha = np.exp(U[:, 1])[:, None, None]
    beta = np.exp(U[:, 1] - U[:, 0])[:, None, None]
    log1p = np.log1p(s / beta)
    K0 = np.exp(-alpha * log1p)
    K = K0 + noise * np.eye(n)
    L = np.linalg.cholesky(K)
    Kinv = np.linalg.inv(K)
    a = Kinv @ y
    val = 0.5 * a @ y + np.log(np.diagonal(L, axis1=1, axis2=2)).sum(1) + 0.5 * n * np.log(2 * np.pi)
    W = Kinv - a[:, :, None] * a[:, None, :]
    q = s / (s + beta)
    g_rate = 0.5 * np.sum(W * K0 * (-alpha * q), axis=(1, 2))
    g_alpha = 0.5 * np.sum(W * K0 * (-alpha * log1p + alpha * q), axis=(1, 2))
    return val, np.stack([g_rate, g_alpha], axis=1)


def np_fit(prefix, noise=1e-3, steps=300, lr=0.1, b1=0.9, b2=0.999, eps=1e-8):
    """Projected Adam from the same starts, best iterate (as bos.fit_curve_gp)."""
    U = STARTS.astype(prefix.dtype).copy()
    m, v = np.zeros_like(U), np.zeros_like(U)
    best_u, best_v = U.copy(), np.full(len(U), np.inf)
    for t in range(1, steps + 1):
        val, g = np_nll_grad(U, prefix, noise)
        better = val < best_v
        best_u[better], best_v[better] = U[better], val[better]
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        U = np.clip(U - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps), LO, HI)
    val, _ = np_nll_grad(U, prefix, noise)
    better = val < best_v
    best_u[better], best_v[better] = U[better], val[better]
    u = best_u[np.argmin(best_v)]
    return np.exp(u[1]), np.exp(u[1] - u[0])


def np_factor(alpha, beta, prefix, horizon, rank, noise=1e-3):
    n0 = len(prefix)
    x, xs = np.arange(1.0, n0 + 1), np.arange(n0 + 1.0, horizon + 1)

    def k(a, b):
        return np.exp(-alpha * np.log1p((a[:, None] + b[None, :]) / beta))

    K = k(x, x) + noise * np.eye(n0)
    A = np.linalg.solve(K, k(x, xs))
    mean = A.T @ prefix
    cov = k(xs, xs) - k(xs, x) @ A
    w, V = np.linalg.eigh(0.5 * (cov + cov.T))
    w = np.clip(w, 0, None)
    T = len(mean)
    r = T if rank is None else min(rank, T)
    return mean, V[:, T - r :] * np.sqrt(w[T - r :])


def np_counts(values, threshold, B, prefix):
    """Transition counts of the paths binned by the paper's statistic (Section 3.2): the
    mean of the observed ``prefix`` and the path up to each epoch (corrected mode's default)."""
    T = values.shape[1]
    valid = np.all((values > 0) & (values < 1), axis=1)
    v = values[valid]
    n0 = len(prefix)
    S = (prefix.sum() + np.cumsum(v, axis=1)) / np.arange(n0 + 1, n0 + T + 1, dtype=v.dtype)
    c = np.clip(np.floor(S * B), 0, B - 1).astype(np.int64)
    step = v.dtype.type(1.0 / B)
    lo = c.astype(v.dtype) * step
    hi = np.where(c + 1 == B, v.dtype.type(1.0), (c + 1).astype(v.dtype) * step)
    b = np.clip(c - (S <= lo) + (S > hi), 0, B - 1)
    event = v[:, -1] < threshold
    keys = ((np.arange(T - 1)[None, :] * 2 + event[:, None]) * B + b[:, :-1]) * B + b[:, 1:]
    h = np.bincount(keys.ravel(), minlength=(T - 1) * 2 * B * B).reshape(T - 1, 2, B, B)
    return h.sum(1), np.concatenate([h.sum(3), h[-1:].sum(2)], 0)


def np_induction(trans, per_step, k1, k2, cost, min_count, dtype):
    T = per_step.shape[0]
    n = per_step.sum(1)
    nonempty = n > 0
    nf = np.where(nonempty, n, 1).astype(dtype)
    prob = np.where(nonempty, per_step[:, 1] / nf, 0)
    d1 = np.where(nonempty, k1 * prob, np.inf)
    d2 = np.where(nonempty, k2 * (1 - prob), np.inf)
    dense = n > min_count * n[0].sum() / 100_000
    cont = np.full(n.shape, np.inf, dtype)
    rho = np.where(nonempty[-1], np.minimum(d1[-1], d2[-1]), 0)
    actions = np.zeros(n.shape, np.int32)
    actions[-1] = np.where(nonempty[-1], np.where(d1[-1] < d2[-1], 2, 1), 0)
    for k in range(T - 2, -1, -1):
        cont[k] = np.where(nonempty[k], cost + (trans[k] @ rho) / nf[k], np.inf)
        opts = np.stack([d2[k], d1[k], cont[k]])
        actions[k] = np.where(dense[k], np.argmin(opts, axis=0) + 1, 0)
        rho = np.where(dense[k], opts.min(0), cont[k])
        rho = np.where(nonempty[k], rho, 0)
    return actions


def np_solve(rng, prefix, best, horizon, k1, k2, cost, num_paths, dtype, rank=12, B=NUM_BINS, min_count=30):
    prefix = prefix.astype(dtype)
    alpha, beta = np_fit(prefix.astype(np.float64))
    mean, F = np_factor(alpha, beta, prefix.astype(np.float64), horizon, rank)
    z = rng.standard_normal((num_paths, F.shape[1]), dtype=dtype)
    values = z @ F.T.astype(dtype) + mean.astype(dtype)
    trans, per_step = np_counts(values, best, B, prefix)
    return np_induction(trans, per_step, k1, k2, cost, min_count, dtype)


# --------------------------------------------------------------------------------------
# Timing helpers
# --------------------------------------------------------------------------------------


def timed(fn, repeats):
    """Median seconds of ``repeats`` calls of ``fn`` (no warm-up call)."""
    return _common.median_seconds(fn, repeats, warmup=0)


def first_call(fn):
    """Seconds of one call of ``fn``: the first one compiles."""
    return _common.median_seconds(fn, 1, warmup=0)[0]


def batch_problems(num_trials, seed=0):
    rng = np.random.default_rng(seed)
    n = np.arange(1, N0 + 1)
    level = rng.uniform(0.05, 0.5, num_trials)
    amp = rng.uniform(0.1, 0.5, num_trials)
    rate = rng.uniform(0.1, 0.8, num_trials)
    prefixes = (
        level[:, None] + amp[:, None] * np.exp(-rate[:, None] * n) + rng.normal(0, 0.01, (num_trials, N0))
    )
    prefixes = np.clip(prefixes, 0.01, 0.99)
    best = rng.uniform(0.1, 0.5, num_trials)
    k1 = np.asarray(bos.k1_schedule(1 + np.arange(num_trials) % 50, 100.0, 0.95))
    return prefixes, best, k1


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batch, 3 repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "out", "bench_bos.md"))
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 9)
    num_trials = 50 if args.quick else 1000
    batch_paths = 2_000 if args.quick else 10_000
    np_trials = 5 if args.quick else 50
    key = jax.random.key(0)
    rows = []

    def row(what, dtype, compile_s, run_s, numpy_s, note=""):
        speedup = f"{numpy_s / run_s:.1f}x" if numpy_s else ""
        rows.append((what, dtype, compile_s, run_s, numpy_s, speedup, note))
        print(
            f"{what:48s} {dtype:8s} compile {compile_s:6.2f}s  run {run_s * 1e3:9.1f} ms"
            + (f"  numpy {numpy_s * 1e3:9.1f} ms  ({speedup})" if numpy_s else ""),
            flush=True,
        )

    # One solve ------------------------------------------------------------------------
    for dtype in (np.float32, np.float64):
        prefix = PREFIX.astype(dtype)
        name = np.dtype(dtype).name
        for mode, rank in (("corrected", 12), ("compat", 12), ("corrected", None)):

            def jax_solve(prefix=prefix, mode=mode, rank=rank):
                return bos.solve(key, prefix, BEST, N, K1, K2, COST, mode=mode, rank=rank)

            first = first_call(jax_solve)
            run, _ = timed(jax_solve, repeats)
            numpy_run = 0.0
            if mode == "corrected":
                rng = np.random.default_rng(0)

                def numpy_solve(dtype=dtype, rank=rank, rng=rng):
                    return np_solve(rng, PREFIX, BEST, N, K1, K2, COST, NUM_PATHS, dtype, rank=rank)

                numpy_solve()
                numpy_run, _ = timed(numpy_solve, repeats)
            draws = "rank-12 draws" if rank else "full-rank draws"
            row(
                f"solve, {NUM_PATHS:,} paths, N={N}, N0={N0}, {mode}, {draws}",
                name,
                first - run,
                run,
                numpy_run,
            )

        # The fit alone, to see where the time goes.
        def jax_fit(prefix=prefix):
            return bos.fit_curve_gp(prefix)

        first = first_call(jax_fit)
        run, _ = timed(jax_fit, repeats)
        np_fit_run, _ = timed(lambda: np_fit(PREFIX), max(1, repeats // 3))
        row(
            "  part: fit_curve_gp (12 starts x 300 Adam steps)",
            name,
            first - run,
            run,
            np_fit_run,
            "compiled already by solve (same function)",
        )

    # Decisions agree with the NumPy version (different random draws) --------------------
    table = bos.solve(key, PREFIX, BEST, N, K1, K2, COST)
    np_actions = np_solve(np.random.default_rng(1), PREFIX, BEST, N, K1, K2, COST, NUM_PATHS, np.float64)
    busy = np.asarray(table.counts) >= 100
    agree = float(np.mean(np.asarray(table.actions)[busy] == np_actions[busy]))

    # Batch ------------------------------------------------------------------------------
    prefixes, best, k1 = batch_problems(num_trials)
    for dtype in (np.float32, np.float64):
        name = np.dtype(dtype).name
        p = prefixes.astype(dtype)

        def jax_batch(p=p):
            return bos.solve_batch(key, p, best, N, k1, K2, COST, num_paths=batch_paths)

        first = first_call(jax_batch)
        run, _ = timed(jax_batch, max(1, repeats // 3))
        rng = np.random.default_rng(0)
        t = time.perf_counter()
        for i in range(np_trials):
            np_solve(rng, prefixes[i], best[i], N, k1[i], K2, COST, batch_paths, dtype)
        numpy_total = (time.perf_counter() - t) / np_trials * num_trials
        row(
            f"solve_batch, {num_trials} trials x {batch_paths:,} paths",
            name,
            first - run,
            run,
            numpy_total,
            f"NumPy: {np_trials} trials timed, scaled to {num_trials}",
        )

    # Report -----------------------------------------------------------------------------
    command = "python " + " ".join([os.path.relpath(__file__)] + (argv if argv is not None else sys.argv[1:]))
    lines = [
        "# BO-BOS solve benchmark (`jaxstop.bos`)",
        "",
        f"- Date: {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- Machine: {_common.describe()}; JAX {jax.__version__} on {jax.devices()[0].platform}",
        f"- Command: `{command}`",
        f"- Median of {repeats} runs after a first (compiling) call; compile = first call - median run.",
        (
            f"- Environment: OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
            f"XLA_FLAGS={os.environ.get('XLA_FLAGS')!r}."
        ),
        (
            "- Reference: the published BO-BOS code (`bos_function.run_BOS`, 100,000 paths, N = 50): "
            f"**{PUBLISHED_SECONDS} s per solve** (quoted, not rerun)."
        ),
        (
            "- NumPy = the same rules vectorised in NumPy in this file (same fit, same draws' rank, "
            "bincount transition counts, matrix-vector induction), same run; its fit runs in float64."
        ),
        (
            "- Decisions of the float64 solve vs NumPy (independent draws), bins with >= 100 paths: "
            f"{agree:.1%} equal."
        ),
        "",
        "| what | dtype | compile (s) | run (ms) | NumPy (ms) | speed-up vs NumPy | vs published code | note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for what, dtype, compile_s, run_s, numpy_s, speedup, note in rows:
        per_solve = run_s / (num_trials if what.startswith("solve_batch") else 1)
        vs_pub = f"{PUBLISHED_SECONDS / per_solve:,.0f}x" if what.startswith("solve") else ""
        numpy_ms = f"{numpy_s * 1e3:,.1f}" if numpy_s else ""
        lines.append(
            f"| {what} | {dtype} | {compile_s:.2f} | {run_s * 1e3:,.1f} | {numpy_ms} | {speedup} "
            f"| {vs_pub} | {note} |"
        )
    lines.append("")
    lines.append(
        "Batch rows: run = the whole batch; 'vs published code' compares the per-trial time "
        "(with fewer paths per trial, see the row)."
    )
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
