"""``python -m jaxstop.demo``: the three stopping methods on the real data embedded in the package.

Each method runs with its paper's main settings (jaxstop's defaults), and every number is
printed with what it means:

1. *Stop the whole search* (Makarova et al., 2022): four recorded XGBoost / random-forest
   searches of 200 evaluations are replayed with :func:`jaxstop.regret.replay` (one vmapped
   call): after each evaluation, an upper bound on how much the best cross-validated error
   could still improve against the statistical noise of that error; the search stops once
   the bound is below the noise.
2. *Discard the right candidates* (Liu et al., 2024): successive halving and its
   uncertainty-guided version SH+ on 64 real AlexNet learning curves, 300 simulated
   searches each (:func:`jaxstop.sim.run`, vmapped).
3. *Stop a losing training run* (Dai et al., 2019): after 8 epochs, Bayesian optimal
   stopping decides for each AlexNet run of at least 50 epochs, epoch by epoch, whether it
   can still beat the best run so far (:func:`jaxstop.bos.solve_batch`, then
   :func:`jaxstop.bos.decide`).

``make demo`` keeps the compiled programs in JAX's persistent compilation cache inside
the virtual environment, so a second run skips compilation.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop import bos, data, policies, regret, sim

__all__ = ["bos_demo", "halving_demo", "main", "termination_demo"]

_RULE = "   " + "-" * 96


def _float():
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def termination_demo() -> None:
    """Part 1: replays the four recorded searches and prints where the regret-bound rule stops each."""
    traces = data.bo_traces()
    dt = _float()
    print("1. STOP THE WHOLE SEARCH: automatic termination (Makarova et al., 2022)")
    print("   Four recorded hyperparameter searches (200 evaluations each, 10-fold cross-validated error).")
    print("   After each evaluation a Gaussian process gives an upper bound on how much lower the best error")
    print("   could still get (the 'regret bound'). The 'threshold' is the statistical noise of the current best")
    print("   error, from its 10 fold scores. Once bound / threshold < 1, more search cannot reliably find a")
    print("   better configuration: the search stops (the rule may fire from evaluation 20 on).\n")
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
    checkpoints = [20, 50, 100, 150, 200]
    print("   bound / threshold after n evaluations (below 1 = stop)")
    print("   search                      " + "".join(f"{'n = ' + str(t):>10s}" for t in checkpoints))
    ratio = np.asarray(res.bound / res.threshold)
    for i in range(len(y)):
        cells = "".join(f"{ratio[i, t - 1]:10.2f}" for t in checkpoints)
        print(f"   {traces.dataset[i]:16s} {traces.algo[i]:4s}      {cells}")
    vals = np.asarray(traces.values)
    test = np.asarray(traces.test)
    print("\n   what each search would have done with the rule (test error of the configuration it returns):")
    for i in range(len(y)):
        stop = int(res.stops.ours[i, 0])
        fired = bool(res.stops.ours_fired[i, 0])
        best_stop = int(np.argmin(vals[i, :stop]))
        best_full = int(np.argmin(vals[i]))
        a, b = test[i, best_stop], test[i, best_full]
        what = (f"stops after {stop:3d} of {T} evaluations ({1 - stop / T:4.0%} saved)" if fired
                else f"never stops (all {T} evaluations)   ")
        print(f"   {traces.dataset[i]:16s} {traces.algo[i]:4s}  {what}; test {traces.metric[i]} {a:.4f} "
              f"against {b:.4f} after all {T} ({(a - b) / abs(b):+.1%})")
    print(f"   ({elapsed:.1f} s for the 4 replays, compilation included.)\n")


def halving_demo() -> None:
    """Part 2: SH against SH+ on the AlexNet curves, 300 simulated searches each; prints their regrets."""
    curves = data.alexnet_curves()
    table = sim.CurveTable(np.where(curves.mask, curves.values, 0.0), curves.mask)
    lengths = curves.mask.sum(axis=1)
    final = curves.values[np.arange(len(lengths)), lengths - 1]
    best = float(final.min())
    n, t = curves.values.shape
    print("2. DISCARD THE RIGHT CANDIDATES: uncertainty-guided successive halving (Liu et al., 2024)")
    print("   Successive halving (SH) trains many configurations briefly and keeps the best third at each round.")
    print("   SH+ keeps as many as the uncertainty of the early losses warrants, estimated from a few")
    print("   configurations trained in full inside the search (their epochs are counted in its budget).")
    print(f"   64 real AlexNet (ImageNet) learning curves; the best final top-1 error is {100 * best:.2f}%.")
    print("   'Regret' = final error of the configuration the search returns minus that best, in percentage")
    print("   points (0 = it found the best). 300 simulated searches per method.\n")
    keys = jax.random.split(jax.random.key(1), 300)
    regrets = {}
    for uq in (False, True):
        policy = policies.sh(n, t, 3, uq)
        start = time.perf_counter()
        tr = jax.vmap(lambda k: sim.run(policy, table, k))(keys)
        inc = np.asarray(jax.block_until_ready(tr.incumbent))
        elapsed = time.perf_counter() - start
        reg = 100 * (final[inc] - best)
        regrets[uq] = reg
        print(f"   {'SH+' if uq else 'SH '}: mean regret {reg.mean():5.2f} points (+- {reg.std(ddof=1) / np.sqrt(len(reg)):.2f}), "
              f"found the best in {np.mean(reg == 0):4.0%} of searches, {float(np.mean(tr.budget)):4.0f} epochs "
              f"spent on average ({elapsed:.1f} s)")
    better = np.mean(regrets[True] < regrets[False])
    verdict = "lower" if regrets[True].mean() < regrets[False].mean() else "higher"
    print(f"   Here SH+ ends with a {verdict} mean regret than SH; searches are paired by key, and SH+ did")
    print(f"   better than SH in {better:.0%} of the pairs. On the larger tables of benchmarks/RESULTS.md the")
    print("   size and sign of the change depend on the data set.\n")


def bos_demo() -> None:
    """Part 3: BOS decisions for the AlexNet runs of at least 50 epochs; prints the epochs saved and the mistakes."""
    curves = data.alexnet_curves()
    horizon, n0 = 50, 8
    long = np.flatnonzero(curves.epochs >= horizon)
    values = curves.values[long, :horizon].astype(np.float64 if jax.config.jax_enable_x64 else np.float32)
    final = values[:, -1]
    all_final = curves.values[np.arange(len(curves.epochs)), curves.epochs - 1]
    incumbent = float(np.sort(all_final)[9])
    print("3. STOP A LOSING TRAINING RUN: Bayesian optimal stopping (Dai et al., 2019)")
    print(f"   {len(long)} AlexNet runs of >= {horizon} epochs, against a best-so-far final error of "
          f"{100 * incumbent:.2f}% (the 10th best run).")
    print(f"   After {n0} epochs, each run's remaining curve is simulated (20,000 paths) and the cheapest")
    print("   stop / continue rule is solved by backward induction; then, each epoch, the run's mean error so far")
    print("   is looked up in that rule. All runs are solved in one batched call.\n")
    start = time.perf_counter()
    tables = bos.solve_batch(jax.random.key(2), values[:, :n0], incumbent, horizon, 100.0, 99.0, 1.0,
                             num_paths=20_000)
    jax.block_until_ready(tables.actions)
    elapsed = time.perf_counter() - start
    decide = jax.jit(jax.vmap(bos.decide, in_axes=(0, None, 0)))
    stop_at = np.full(len(long), horizon)
    for epoch in range(n0 + 1, horizon):
        statistic = bos.summary_statistic(values, epoch, n0)  # the statistic the rules were solved for
        act = np.asarray(decide(tables, epoch, statistic))
        newly = (act == bos.ACTION_STOP) & (stop_at == horizon)
        stop_at[newly] = epoch
    stopped = stop_at < horizon
    good = final < incumbent
    saved = int(np.sum(horizon - stop_at))
    print(f"   stopped early: {stopped.sum()} of {len(long)} runs, saving {saved} of {len(long) * (horizon - n0)} "
          f"training epochs ({saved / (len(long) * (horizon - n0)):.0%})")
    print(f"   runs that would have beaten the best so far: {int(good.sum())}; of these, stopped by mistake: "
          f"{int(np.sum(stopped & good))}")
    print(f"   ({elapsed:.1f} s for the {len(long)} solves, compilation included.)\n")


def main() -> None:
    """Runs the three parts in order (``python -m jaxstop.demo``, ``make demo``)."""
    start = time.perf_counter()
    print(f"jaxstop demo on {jax.devices()[0].platform.upper()} ({jax.device_count()} device(s)); "
          "real data shipped with the package\n")
    termination_demo()
    halving_demo()
    bos_demo()
    print(f"Done in {time.perf_counter() - start:.0f} s. Next: the notebooks in notebooks/ (one per method, with")
    print("figures), the documentation (`make docs`, then docs/_build/html/index.html), and the benchmarks and")
    print("paper comparisons in benchmarks/RESULTS.md.")


if __name__ == "__main__":
    main()
