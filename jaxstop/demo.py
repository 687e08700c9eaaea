"""``python -m jaxstop.demo``: the three stopping methods on the real data embedded in the package.

1. *Stop the whole run* (Makarova et al., 2022): replay 4 recorded XGBoost /
   random-forest BO runs with :func:`jaxstop.regret.replay` (one vmapped call):
   the GP regret bound against the cross-validation noise of the incumbent, and
   when each stopping rule fires, with the relative test-error change (RYC) and
   the fraction of the run saved (RTC).
2. *Discard the right candidates* (Liu et al., 2024): successive halving and its
   UQ-guided version SH+ on 64 real AlexNet learning curves, 300 simulated
   studies each in one vmapped :func:`jaxstop.sim.run`.
3. *Stop a losing training run* (Dai et al., 2019): Bayesian optimal stopping
   after 8 epochs for every AlexNet curve of at least 50 epochs, in one batched
   :func:`jaxstop.bos.solve_batch` call, then each run is followed epoch by epoch
   with :func:`jaxstop.bos.decide`.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop import bos, data, policies, regret, sim

__all__ = ["main"]


def _float():
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def termination_demo() -> None:
    traces = data.bo_traces()
    dt = _float()
    print("1. Automatic termination on 4 real BO runs (Makarova et al., 2022)")
    print("   GP on the top half of the evaluations so far, regret bound (Eq. 8) vs. the CV noise of the")
    print("   incumbent; all 4 runs replayed in one vmapped, jitted scan.\n")
    X = jnp.asarray(traces.configs, dt)
    y = jnp.asarray(traces.values, dt)
    folds = jnp.asarray(traces.fold_scores, dt)
    dims = jnp.asarray(traces.dim_mask)
    keys = jax.random.split(jax.random.key(0), len(y))

    def one(k, X, y, f, dm):
        return regret.replay(k, X, y, f, dim_mask=dm, options=regret.ReplayOptions(beta_size=3.0, num_segments=2))

    start = time.perf_counter()
    res = jax.block_until_ready(jax.vmap(one)(keys, X, y, folds, dims))
    elapsed = time.perf_counter() - start
    T = y.shape[1]
    print(f"   {len(y)} runs x {T} evaluations replayed in {elapsed:.1f}s (incl. compile)\n")
    checkpoints = [20, 50, 100, 150, 200]
    print("   bound / threshold at t =   " + "".join(f"{t:>8d}" for t in checkpoints))
    ratio = np.asarray(res.bound / res.threshold)
    for i in range(len(y)):
        cells = "".join(f"{ratio[i, t - 1]:8.2f}" for t in checkpoints)
        print(f"   {traces.dataset[i]:16s} {traces.algo[i]:4s}      {cells}")
    print("\n   stop after (evaluations)     Ours_0.21  Ours_0.5  Conv_30     EI      PI")
    vals = np.asarray(traces.values)
    for i in range(len(y)):
        s = res.stops
        picks = [int(s.ours[i, 0]), int(s.ours[i, 1]), int(s.conv[i, 1]), int(s.ei[i, 0]), int(s.pi[i, 0])]
        print(f"   {traces.dataset[i]:16s} {traces.algo[i]:4s}      " + "".join(f"{p:>9d}" for p in picks))
    ours = np.asarray(res.stops.ours[:, 0])
    y_final = vals.min(1)
    y_stop = np.array([vals[i, : ours[i]].min() for i in range(len(y))])
    print(f"\n   Ours_0.21: mean RYC {float(np.mean(regret.ryc(y_final, y_stop))):+.4f} "
          f"(relative change of the best CV error), mean RTC {float(np.mean(regret.rtc(T, ours))):.2f} "
          "(fraction of the run saved)\n")

    # The same criterion inside a live study: GP-BO (EI) over the 200 evaluated configurations
    # of the first run as a finite candidate table, stopping itself (Algorithm 1).
    i = 0
    dm = traces.dim_mask[i]
    cand = jnp.asarray(traces.configs[i][:, dm], dt)
    table = sim.CurveTable(jnp.asarray(traces.values[i], dt)[:, None], test=jnp.asarray(traces.test[i], dt)[:, None],
                           configs=cand)
    policy = policies.auto_termination_bo(max_budget=1, max_evals=T, candidates=cand,
                                          fold_scores=jnp.asarray(traces.fold_scores[i], dt))
    keys = jax.random.split(jax.random.key(3), 16)
    start = time.perf_counter()
    tr = jax.block_until_ready(jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=T))(keys))
    elapsed = time.perf_counter() - start
    best = float(vals[i].min())
    gap = np.asarray(tr.incumbent_value) - best
    print(f"   Live: auto_termination_bo on {traces.dataset[i]} {traces.algo[i]} ({T} candidates), 16 studies vmapped, "
          f"{elapsed:.1f}s incl. compile:")
    print(f"   stopped after {np.mean(tr.num_jobs):.0f} evaluations on average (min {int(np.min(tr.num_jobs))}, max "
          f"{int(np.max(tr.num_jobs))}); returned CV error - best in the table: mean {gap.mean():.2e} "
          f"(best {best:.4f}, found in {np.mean(gap == 0):.0%} of studies)\n")


def halving_demo() -> None:
    curves = data.alexnet_curves()
    table = sim.CurveTable(np.where(curves.mask, curves.values, 0.0), curves.mask)
    lengths = curves.mask.sum(axis=1)
    final = curves.values[np.arange(len(lengths)), lengths - 1]
    best = float(final.min())
    n, t = curves.values.shape
    print("2. Successive halving vs. UQ-guided SH+ on 64 real AlexNet (ImageNet) curves (Liu et al., 2024)")
    print(f"   best final top-1 error in the table: {best:.4f}; 300 studies per policy, one vmapped scan each")
    keys = jax.random.split(jax.random.key(1), 300)
    regrets = {}
    for uq in (False, True):
        policy = policies.sh(n, t, 3, uq)
        max_jobs = policies.halving_schedule("sh", n, t, 3, uq).max_jobs
        start = time.perf_counter()
        tr = jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=max_jobs))(keys)
        inc = np.asarray(jax.block_until_ready(tr.incumbent))
        elapsed = time.perf_counter() - start
        reg = 100 * (final[inc] - best)
        regrets[uq] = reg.mean()
        print(f"   {'SH+' if uq else 'SH '}: regret {reg.mean():.2f} pp (mean), best found in {np.mean(reg == 0):.0%} "
              f"of studies, {float(np.mean(tr.budget)):.0f} epochs spent, {elapsed:.1f}s incl. compile")
    print(f"   SH+ changes the mean regret by {100 * (regrets[True] / regrets[False] - 1):+.0f}%: it keeps as many "
          "candidates as its confidence")
    print("   curve warrants (Eq. 4-7) and may spend budget that plain SH leaves unused when curves end early.")
    print("   On all 365 AlexNet curves the sign depends on the uncertainty estimate: benchmarks/RESULTS.md.\n")


def bos_demo() -> None:
    curves = data.alexnet_curves()
    horizon, n0 = 50, 8
    long = np.flatnonzero(curves.epochs >= horizon)
    values = curves.values[long, :horizon].astype(np.float64 if jax.config.jax_enable_x64 else np.float32)
    final = values[:, -1]
    all_final = curves.values[np.arange(len(curves.epochs)), curves.epochs - 1]
    incumbent = float(np.sort(all_final)[9])
    print("3. Bayesian optimal stopping of AlexNet training runs (Dai et al., 2019)")
    print(f"   {len(long)} curves with >= {horizon} epochs; incumbent error {incumbent:.4f} (the 10th best of all 64 runs);")
    print(f"   after {n0} epochs each run's remaining curve is simulated (20,000 GP paths) and the optimal")
    print("   stop/continue policy found by backward induction; all runs solved in one batched call.")
    start = time.perf_counter()
    tables = bos.solve_batch(jax.random.key(2), values[:, :n0], incumbent, horizon, 100.0, 99.0, 1.0,
                             num_paths=20_000)
    actions = jax.block_until_ready(tables.actions)
    elapsed = time.perf_counter() - start
    decide = jax.jit(jax.vmap(bos.decide, in_axes=(0, None, 0)))
    stop_at = np.full(len(long), horizon)
    for epoch in range(n0 + 1, horizon + 1):
        running = values[:, n0:epoch].mean(1)
        act = np.asarray(decide(tables, epoch, running))
        newly = (act == bos.ACTION_STOP) & (stop_at == horizon)
        stop_at[newly] = epoch
    stopped = stop_at < horizon
    good = final < incumbent
    print(f"   solved {len(long)} problems in {elapsed:.1f}s incl. compile ({actions.shape[-2]} epochs x "
          f"{actions.shape[-1]} bins each)")
    print(f"   stopped early: {stopped.sum()} of {len(long)} runs; epochs saved "
          f"{int(np.sum(horizon - stop_at))} of {len(long) * (horizon - n0)}; "
          f"runs better than the incumbent that were stopped: {int(np.sum(stopped & good))} of {int(good.sum())}\n")


def main() -> None:
    print(f"jaxstop demo on {jax.devices()[0].platform.upper()} ({jax.device_count()} device(s))\n")
    termination_demo()
    halving_demo()
    bos_demo()


if __name__ == "__main__":
    main()
