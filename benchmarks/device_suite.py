"""Accelerator figures in one short run: the same jaxstop code on the accelerator and on its host CPU.

Rows (each compiled once per device, timed separately: median of ``--repeats`` calls after a
warm-up, ``block_until_ready``):

The host CPU runs ``1/--host-fraction`` of each row's items (per-item times are compared).

* SH+ (``uq=True``) studies on the embedded AlexNet table, float32, ``jax.vmap(sim.run)``
  over keys, batch protocol (the default) and one job per step;
* BOS ``solve_batch``: trials x paths (float32);
* regret bounds with GP fit of many studies at n = 200, d = 3 (float64).

    python benchmarks/device_suite.py --out DIR [--quick] [--gpu-autotune off]

With ``--gpu-autotune off`` XLA's GPU autotuner is off (``--xla_gpu_autotune_level=0``): the
100,000-study SH+ program then compiles in 10-12 s instead of not finishing in minutes, at
the same run time; the regret row runs about 14% slower without it (RESULTS.md, "Accelerator").

Writes ``DIR/device_suite.md``; stops adding rows once ``--budget`` seconds have passed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402


def timed(fn, args, repeats):
    """(compile seconds, median run seconds) of ``jax.jit(fn)(*args)``."""
    compiled, c = _common.compile_timed(fn, *args)
    t, _ = _common.median_seconds(lambda: compiled(*args), repeats)
    return c, t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks/out")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=400.0, help="seconds before no new row starts")
    ap.add_argument("--rows", default="regret,bos,sh,onejob", help="comma-separated rows to run, in this order")
    ap.add_argument("--sh-runs", type=int, default=100_000, help="SH+ studies of the batch-protocol row")
    ap.add_argument("--host-fraction", type=int, default=10,
                    help="the host CPU runs 1/F of each row's items (per-item times are compared)")
    ap.add_argument("--gpu-autotune", choices=("on", "off"), default="on",
                    help="XLA's GPU autotuner (off: --xla_gpu_autotune_level=0, set before JAX starts its "
                         "backends; the large SH+ programs then compile in seconds, see RESULTS.md)")
    args = ap.parse_args()
    if args.gpu_autotune == "off":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_gpu_autotune_level=0").strip()
    jax.config.update("jax_enable_x64", True)
    from jaxstop import bos, data, policies, regret, sim

    start = time.perf_counter()
    accel = jax.devices()[0]
    host = jax.devices("cpu")[0]
    targets = [("accelerator", accel)] + ([("host CPU", host)] if accel.platform != "cpu" else [])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = [f"# device suite ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})", "",
             f"accelerator: {accel.device_kind} ({accel.platform}); host: {_common.cpu()}; "
             f"jax {jax.__version__}; `python benchmarks/device_suite.py{' --quick' if args.quick else ''}"
             f"{' --gpu-autotune off' if args.gpu_autotune == 'off' else ''}`", "",
             "| row | device | size | compile s | run s | per item ms |", "|---|---|---|---|---|---|"]

    wanted = set(args.rows.split(","))

    def row(name, unit, items, fn, fargs, key):
        """One row per target; the host CPU runs the first ``items // host_fraction`` items
        (every argument's leading axis is the item axis)."""
        if key not in wanted:
            return
        for label, dev in targets:
            if time.perf_counter() - start > args.budget:
                lines.append(f"| {name} | {label} | - | - | - | (time budget spent) |")
                continue
            m = items if label == "accelerator" else max(1, items // args.host_fraction)
            sub = jax.tree.map(lambda a: a[:m], fargs)
            with jax.default_device(dev):
                a = jax.device_put(sub, dev)
                c, t = timed(fn, a, args.repeats)
            lines.append(f"| {name} | {label} | {m:,} {unit} | {c:.1f} | {t:.3f} | {1e3 * t / m:.4f} |")
            print(lines[-1], flush=True)
            (out / "device_suite.md").write_text("\n".join(lines) + "\n")

    curves = data.alexnet_curves()
    table = sim.CurveTable(jnp.asarray(curves.values, jnp.float32), jnp.asarray(curves.mask))
    n, epochs = table.values.shape
    plus = policies.sh(n, epochs, eta=3, uq=True)
    runs = 1000 if args.quick else args.sh_runs
    keys = jax.random.split(jax.random.key(0), runs)
    rng = np.random.default_rng(0)
    trials, paths = (50, 10_000) if args.quick else (1000, 100_000)
    prefix = np.sort(rng.uniform(0.3, 0.7, (trials, 8)), axis=1)[:, ::-1].astype(np.float32)
    best = rng.uniform(0.2, 0.35, trials).astype(np.float32)
    k1 = rng.uniform(80, 120, trials).astype(np.float32)
    studies = 200 if args.quick else 10_000
    X = rng.uniform(size=(studies, 200, 3))
    y = np.sin(3 * X).sum(-1) + 0.1 * rng.normal(size=(studies, 200))
    few = min(runs, 500)
    rows = {
        "sh": lambda: row(
            "SH+ studies, AlexNet, batch protocol", "runs", runs,
            lambda k: jax.vmap(lambda kk: sim.run(plus, table, kk).incumbent_value)(k), (keys,), "sh"),
        "bos": lambda: row(
            f"BOS solve_batch, N = 50, N0 = 8, {paths:,} paths", "trials", trials,
            lambda p, b, k: bos.solve_batch(jax.random.key(1), p, b, 50, k, 99.0, 1.0, num_paths=paths).actions,
            (prefix, best, k1), "bos"),
        "regret": lambda: row(
            "regret bound with GP fit, n = 200, d = 3, float64", "studies", studies,
            lambda X, y: jax.vmap(lambda k, a, b: regret.fit_regret_bound(k, a, b).bound.bound)(
                jax.random.split(jax.random.key(2), X.shape[0]), X, y), (X, y), "regret"),
        "onejob": lambda: row(
            "SH+ studies, AlexNet, one job per step", "runs", few,
            lambda k: jax.vmap(lambda kk: sim.run(plus, table, kk, batched=False).incumbent_value)(k),
            (keys[:few],), "onejob"),
    }
    for name in args.rows.split(","):
        if name not in rows:
            raise SystemExit(f"--rows: unknown row {name!r}; choose from {sorted(rows)}")
        rows[name]()
    lines.append("")
    lines.append(f"total {time.perf_counter() - start:.0f} s")
    (out / "device_suite.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    main()
