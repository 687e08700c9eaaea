"""Benchmark: confidence curve P_k (jaxstop.confidence) against NumPy and scipy quad.

Compares, in one run and on the same inputs,

* ``jaxstop``  -- ``confidence_curve`` (one problem) and ``confidence_curve_batch``
  (a batch of problems), compiled once with ``jaxstop.compiler_options()`` (the
  options jaxstop recommends around its calls; 512-bit vectors on CPU), or with XLA's defaults
  under ``--xla-defaults``; compile time is reported separately;
* ``numpy``    -- a vectorised NumPy / scipy.special implementation of the SAME
  quadrature (same graded Gauss-Legendre rule, same formulas, written below),
  vectorised over candidates, nodes and problems, once over all candidates and
  nodes (the anchor) and once (``numpy, same skipping``) leaving out what jaxstop
  leaves out: the candidates with ``mu - 9 sigma >= min(mu + 9 sigma)`` and the
  panels of the rule beyond the point where the minimum can no longer lie;
* ``scipy quad`` -- ``scipy.integrate.quad`` per candidate on the defining
  integral (the accuracy reference), for small ``n`` only.

Timings are medians of several runs after ``.block_until_ready()``, one thread for
OpenBLAS and XLA's Eigen (``_common.setup_environment``). The table
(Markdown) is printed and written to ``benchmarks/out/bench_confidence.md``.

Usage::

    python benchmarks/bench_confidence.py            # full run (minutes)
    python benchmarks/bench_confidence.py --quick    # smoke run (seconds)
    python benchmarks/bench_confidence.py --dtype float32
    python benchmarks/bench_confidence.py --spread 0.01  # close candidates: most are relevant
    python benchmarks/bench_confidence.py --xla-defaults  # jaxstop compiled with XLA's defaults

The batch of 1,000 problems at n = 10,000 is skipped unless ``--huge-batch`` is
given: it is ~4e9 integrand evaluations per run for jaxstop (minutes on a CPU)
and far longer for NumPy.
"""

from __future__ import annotations

import _common

_common.setup_environment()

import argparse  # noqa: E402
import datetime  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from scipy import integrate, special, stats  # noqa: E402

import jaxstop  # noqa: E402
import jaxstop.confidence as conf  # noqa: E402
from jaxstop.confidence import confidence_curve, confidence_curve_batch  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "bench_confidence.md"

# The rule of jaxstop.confidence, restated for the NumPy implementation.
C = 9.0
ZMAX = 12.0
FINEST = 4.0
RULES = {"float64": (12, 16), "float32": (12, 12)}
LOG_SQRT_2PI = 0.9189385332046727


# --------------------------------------------------------------------------
# NumPy implementation of the same quadrature


def _numpy_graded(length, h, levels, order, dtype):
    """Graded Gauss-Legendre rule on [0, length] per problem: (B,) -> (B, nodes)."""
    t, w = np.polynomial.legendre.leggauss(order)
    t, w = ((t + 1) / 2).astype(dtype), (w / 2).astype(dtype)
    tiny = np.finfo(dtype).tiny
    ratio = np.clip(FINEST * h / np.maximum(length, tiny), tiny, 1.0)
    ell = np.arange(levels + 1, dtype=dtype)
    hi = length[:, None] * np.exp(ell[None, :] * np.log(ratio)[:, None] / levels)
    lo = np.concatenate([hi[:, 1:], np.zeros((len(length), 1), dtype)], axis=1)
    width = hi - lo
    nodes = lo[:, :, None] + width[:, :, None] * t
    weights = width[:, :, None] * w
    return nodes.reshape(len(length), -1), weights.reshape(len(length), -1)


def numpy_confidence_curve(mu, sigma, max_elements=2**22, skip=False):
    """Confidence curves of problems (B, n) with the quadrature of jaxstop, in NumPy.

    ``skip``: leave out the work jaxstop leaves out. Only the candidates with
    ``mu - C sigma < b`` are evaluated (the others get p = 0; per chunk of problems,
    the columns up to the largest number of relevant candidates in the chunk), and
    the rule is taken one panel at a time in ascending x, stopping once the summed
    log-survival at a panel's last node is below jaxstop's cut in every problem of
    the chunk (the nodes left out add less than 1e-4 eps to any probability).
    """
    mu = np.atleast_2d(mu)
    sigma = np.atleast_2d(sigma)
    dtype = mu.dtype
    levels, order = RULES[np.dtype(dtype).name]
    batch, n = mu.shape
    nodes = (levels + 1) * order
    step = max(1, max_elements // (nodes * n))
    curves = np.empty_like(mu)
    orders = np.empty(mu.shape, np.int64)
    for s in range(0, batch, step):
        m, sg = mu[s : s + step], sigma[s : s + step]
        lo, hi = m - C * sg, m + C * sg
        a, b = lo.min(axis=1), hi.min(axis=1)
        rel = lo < b[:, None]
        h = np.where(rel, sg, np.inf).min(axis=1)
        dist, w = _numpy_graded(b - a, h, levels, order, dtype)
        with np.errstate(divide="ignore"):
            log_w = np.log(w)
        if skip:
            cols = np.argsort(~rel, axis=1, kind="stable")[:, : rel.sum(axis=1).max()]
            take = np.take_along_axis
            ms, ss, keep = take(m, cols, axis=1), take(sg, cols, axis=1), take(rel, cols, axis=1)
            ms = np.where(keep, ms, np.inf)
            # panels in ascending x
            x = -dist.reshape(len(b), levels + 1, order)[:, :, ::-1]
            lw = log_w.reshape(len(b), levels + 1, order)[:, :, ::-1]
            tiny = np.finfo(dtype).tiny
            log_cut = np.log(1e-4 * np.finfo(dtype).eps * h / (10 * np.maximum(b - a, tiny)))
            p = np.zeros(ms.shape, dtype)
            for k in range(levels + 1):
                z = (x[:, k, :, None] - (ms - b[:, None])[:, None, :]) / ss[:, None, :]
                log_sf = np.log(0.5 * special.erfc(np.minimum(z, ZMAX) * np.sqrt(0.5)))
                total = log_sf.sum(axis=2)
                e = (lw[:, k] - LOG_SQRT_2PI + total)[:, :, None] - 0.5 * z * z
                e -= np.log(ss)[:, None, :] + log_sf
                p += np.exp(e).sum(axis=1)
                if np.all(total[:, -1] < log_cut):
                    break
            full = np.zeros_like(m)
            np.put_along_axis(full, cols, p, axis=1)
            p = full
        else:
            z = (-dist[:, :, None] - (m - b[:, None])[:, None, :]) / sg[:, None, :]
            log_sf = np.log(0.5 * special.erfc(np.minimum(z, ZMAX) * np.sqrt(0.5)))
            total = log_sf.sum(axis=2)
            e = (log_w - LOG_SQRT_2PI + total)[:, :, None] - 0.5 * z * z
            e -= np.log(sg)[:, None, :] + log_sf
            p = np.exp(e).sum(axis=1)
        p /= p.sum(axis=1, keepdims=True)
        o = np.argsort(m, axis=1, kind="stable")
        c = np.minimum(np.cumsum(np.take_along_axis(p, o, axis=1), axis=1), 1.0)
        c[:, -1] = 1.0
        curves[s : s + step] = np.maximum.accumulate(c, axis=1)
        orders[s : s + step] = o
    return curves, orders


# --------------------------------------------------------------------------
# scipy quad reference (one candidate at a time, the defining integral)


def quad_confidence_curve(mu, sigma):
    mu, sigma = np.asarray(mu, float), np.asarray(sigma, float)
    n = len(mu)
    p = np.zeros(n)
    for i in range(n):
        others = np.arange(n) != i
        lo, hi = mu[i] - 12 * sigma[i], mu[i] + 12 * sigma[i]
        if others.any():
            hi = min(hi, np.min(mu[others] + 12 * sigma[others]))
        if hi <= lo:
            continue
        pts = sorted(
            {q for m, s in zip(mu, sigma) for k in (-3, 0, 3) for q in [m + k * s] if lo < q < hi}
        )

        def f(x, i=i, others=others):
            return stats.norm.pdf(x, mu[i], sigma[i]) * np.exp(
                np.sum(stats.norm.logsf(x, mu[others], sigma[others]))
            )

        p[i] = integrate.quad(f, lo, hi, points=pts or None, limit=2000, epsabs=1e-14)[0]
    o = np.argsort(mu, kind="stable")
    return np.cumsum(p[o]), o


# --------------------------------------------------------------------------
# timing helpers


def _median_time(fn, repeats, warmup=2):
    """Median of at least ``repeats`` timed runs after ``warmup`` calls (first calls pay
    one-off costs: allocation, thread start-up), more (up to 200) until they add up to
    0.25 s: short runs are noisy."""
    return _common.median_seconds(fn, repeats, warmup=warmup, min_seconds=0.25, max_runs=200)[0]


def _panels_evaluated(mu, sigma):
    """Mean number of panels jaxstop's kernel takes per problem (one problem at a time)."""
    from jaxstop.confidence import _quadrature  # the kernel's panel loop (internal)

    rows = jax.jit(lambda m, s: _quadrature._rows_sums(m[None], s[None], jnp.ones((1,) + m.shape, bool))[1])
    return float(np.mean([int(rows(jnp.asarray(m), jnp.asarray(s))) for m, s in zip(mu, sigma)]))


def _problems(rng, batch, n, dtype, spread=0.9):
    """Losses of HPO-like candidates: means spread over ``spread``, sigma over 2 decades."""
    mu = rng.uniform(0.1, 0.1 + spread, (batch, n))
    sigma = 10 ** rng.uniform(-3, -1, (batch, n))
    return mu.astype(dtype), sigma.astype(dtype)


def _jax_compiled(fn, mu, sigma, options=None):
    """``fn`` (confidence_curve or its batch form) jitted and compiled once for (mu, sigma)."""
    args = (jnp.asarray(mu), jnp.asarray(sigma))
    compiled, t_compile = _common.compile_timed(fn, *args, options=options)

    def run():
        return compiled(*args)

    return compiled, args, t_compile, run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per entry")
    parser.add_argument("--huge-batch", action="store_true", help="also time 1000 x n=10000")
    parser.add_argument("--spread", type=float, default=0.9, help="mu ~ U(0.1, 0.1 + spread)")
    parser.add_argument("--xla-defaults", action="store_true",
                        help="compile jaxstop with XLA's default options instead of jaxstop.compiler_options()")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    # the options jaxstop recommends (512-bit vectors on CPU); a jaxstop without
    # compiler_options (before/after runs) is compiled with XLA's defaults
    options = {} if args.xla_defaults else getattr(jaxstop, "compiler_options", dict)()

    if args.dtype == "float64":
        jax.config.update("jax_enable_x64", True)
    dtype = np.dtype(args.dtype)
    rng = np.random.default_rng(0)
    if args.quick:
        sizes, batch, repeats, quad_sizes = [10, 100], 20, args.repeats or 2, [10]
    else:
        sizes, batch, repeats, quad_sizes = (
            [10, 100, 1000, 10000],
            1000,
            args.repeats or 5,
            [10, 20],
        )

    rows = []
    relevant = {}
    panels = {}
    for n in sizes:
        mu, sigma = _problems(rng, batch, n, dtype, args.spread)

        # one problem
        compiled, jargs, t_compile, run = _jax_compiled(confidence_curve, mu[0], sigma[0], options)
        t_jax = _median_time(run, repeats)
        curve_jax = np.asarray(compiled(*jargs).curve, float)
        t_np = _median_time(
            lambda mu=mu, sigma=sigma: numpy_confidence_curve(mu[:1], sigma[:1]), repeats
        )
        curve_np = numpy_confidence_curve(mu[:1], sigma[:1])[0][0]
        diff_np = float(np.max(np.abs(curve_jax - curve_np)))
        t_npr = _median_time(
            lambda mu=mu, sigma=sigma: numpy_confidence_curve(mu[:1], sigma[:1], skip=True), repeats
        )
        lo, hi = mu - C * sigma, mu + C * sigma
        relevant[n] = float(np.mean(lo < hi.min(axis=1, keepdims=True)))
        panels[n] = _panels_evaluated(mu[:20], sigma[:20])
        err_quad = ""
        quad_row = None
        if n in quad_sizes:
            t0 = time.perf_counter()
            curve_q, _ = quad_confidence_curve(mu[0].astype(float), sigma[0].astype(float))
            t_quad = time.perf_counter() - t0
            err_quad = f"{np.max(np.abs(curve_jax - curve_q)):.1e}"
            quad_row = (
                n,
                1,
                "scipy quad",
                "",
                f"{t_quad * 1e3:.1f}",
                f"{t_quad * 1e3:.1f}",
                f"{t_np / t_quad:.3f}x",
                f"{t_npr / t_quad:.3f}x",
                "",
                "",
            )
        rows.append(
            (
                n,
                1,
                "jaxstop",
                f"{t_compile:.2f}",
                f"{t_jax * 1e3:.3f}",
                f"{t_jax * 1e3:.3f}",
                f"{t_np / t_jax:.1f}x",
                f"{t_npr / t_jax:.1f}x",
                f"{diff_np:.1e}",
                err_quad,
            )
        )
        rows.append((n, 1, "numpy", "", f"{t_np * 1e3:.3f}", f"{t_np * 1e3:.3f}", "1.0x", "", "", ""))
        rows.append((n, 1, "numpy, same skipping", "", f"{t_npr * 1e3:.3f}", f"{t_npr * 1e3:.3f}", "",
                     "1.0x", "", ""))
        if quad_row:
            rows.append(quad_row)

        # a batch of problems
        if n >= 10000 and not args.huge_batch:
            rows.append((n, batch, "(skipped)", "", "", "", "", "", "", ""))
            continue
        compiled, jargs, t_compile, run = _jax_compiled(confidence_curve_batch, mu, sigma, options)
        t_jax = _median_time(run, repeats)
        curve_jax = np.asarray(compiled(*jargs).curve, float)
        reps_np = max(1, min(repeats, 3)) if n >= 1000 else repeats
        t_np = _median_time(
            lambda mu=mu, sigma=sigma: numpy_confidence_curve(mu, sigma), reps_np, warmup=1
        )
        diff_np = float(np.max(np.abs(curve_jax - numpy_confidence_curve(mu, sigma)[0])))
        t_npr = _median_time(
            lambda mu=mu, sigma=sigma: numpy_confidence_curve(mu, sigma, skip=True), reps_np, warmup=1
        )
        rows.append(
            (
                n,
                batch,
                "jaxstop",
                f"{t_compile:.2f}",
                f"{t_jax * 1e3:.1f}",
                f"{t_jax * 1e3 / batch:.3f}",
                f"{t_np / t_jax:.1f}x",
                f"{t_npr / t_jax:.1f}x",
                f"{diff_np:.1e}",
                "",
            )
        )
        rows.append(
            (
                n,
                batch,
                "numpy",
                "",
                f"{t_np * 1e3:.1f}",
                f"{t_np * 1e3 / batch:.3f}",
                "1.0x",
                "",
                "",
                "",
            )
        )
        rows.append(
            (n, batch, "numpy, same skipping", "", f"{t_npr * 1e3:.1f}", f"{t_npr * 1e3 / batch:.3f}", "",
             "1.0x", "", "")
        )
        print(f"n={n} done", file=sys.stderr, flush=True)

    header = (
        "| n | problems | implementation | compile (s) | run, median (ms) | per problem (ms) "
        "| speed-up vs NumPy | vs NumPy, same skipping | max abs diff vs NumPy | max abs err vs quad |\n"
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    table = header + "".join("| " + " | ".join(str(c) for c in r) + " |\n" for r in rows)
    cmd = " ".join([Path(sys.executable).name, *sys.argv])
    huge = (
        "timed"
        if args.huge_batch
        else "skipped (~4e9 integrand evaluations per run; use --huge-batch)"
    )
    meta = (
        f"Confidence curve benchmark ({args.dtype}, {'quick' if args.quick else 'full'}), "
        f"{datetime.datetime.now().isoformat(timespec='seconds')}\n\n"
        f"- command: `{cmd}`\n"
        f"- machine: {platform.platform()}; "
        f"processor: {_common.cpu()}; "
        f"{os.cpu_count()} logical CPUs\n"
        f"- jax {jax.__version__}, devices: {jax.devices()}; numpy {np.__version__}; "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '(unset)')!r}; jaxstop compiled with "
        f"{options or 'XLA defaults'}\n"
        f"- inputs: mu ~ U(0.1, {0.1 + args.spread:g}), sigma log-uniform in [1e-3, 1e-1]; median of at least "
        f"{repeats} runs after warm-up calls, more (up to 200) until they add up to 0.25 s (NumPy batches at "
        f"n >= 1000: up to 3 runs)\n"
        f"- jaxstop batches use confidence_curve_batch with its default working-set target\n"
        f"- relevant candidates (mu - 9 sigma < min(mu + 9 sigma)), mean fraction: "
        + ", ".join(f"n = {k}: {v:.2f}" for k, v in relevant.items())
        + "\n"
        f"- panels of the rule jaxstop evaluates per problem (of {RULES[args.dtype][0] + 1}; mean over the "
        f"first 20 problems): "
        + ", ".join(f"n = {k}: {v:.1f}" for k, v in panels.items())
        + "\n"
        f"- batch of {batch} at n = 10000: {huge}\n\n"
    )
    text = meta + table
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
