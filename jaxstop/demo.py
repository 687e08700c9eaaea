"""``python -m jaxstop.demo``: jaxstop on the real data embedded in the package.

1. GP regret bound on real BO traces (Makarova et al., 2022): for 4 recorded
   XGBoost / random-forest tuning runs, fit the GP on the top half of the first
   t evaluations (one batched, masked fit for all traces and prefixes), and
   compare the regret upper bound with the cross-validation noise of the
   incumbent: the run may stop once the bound falls below it.
2. Random search on 64 real ImageNet AlexNet learning curves: 2,000 simulated
   studies in one vmapped call, regret of the returned configuration.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop import data, gp, policies, sim

__all__ = ["main"]


def _bound_at_prefix(key, X, y, t, beta_size):
    """Regret upper bound (Makarova et al., Eq. 8) from the first ``t`` rows.

    The GP is fitted on the top half (at least 20) of the standardised values;
    UCB is minimised over those points and LCB over them plus 2,048 uniform
    random points. Returned in the units of ``y``.
    """
    n = y.shape[0]
    seen = jnp.arange(n) < t
    ranks = jnp.argsort(jnp.argsort(jnp.where(seen, y, jnp.inf)))
    top = seen & (ranks < jnp.maximum(20, t // 2))
    z, mu, sd = gp.standardize(y, top)
    params, _ = gp.fit(X, z, top, steps=40)
    post = gp.posterior(params, X, z, top)
    beta = 0.2 * 2 * jnp.log(beta_size * t**2 * math.pi**2 / (6 * 0.1))
    m_eval, v_eval = gp.predict(post, X)
    ucb_min = jnp.min(jnp.where(top, m_eval + jnp.sqrt(beta * v_eval), jnp.inf))
    cand = jax.random.uniform(key, (2048, X.shape[1]), X.dtype)
    m_c, v_c = gp.predict(post, cand)
    lcb_min = jnp.minimum(
        jnp.min(m_c - jnp.sqrt(beta * v_c)),
        jnp.min(jnp.where(top, m_eval - jnp.sqrt(beta * v_eval), jnp.inf)),
    )
    return (ucb_min - lcb_min) * sd


_bounds = jax.jit(jax.vmap(_bound_at_prefix, in_axes=(0, None, None, 0, None)), static_argnums=4)


def _cv_threshold(folds):
    k = folds.shape[-1]
    return np.sqrt((1 / k + 1 / (k - 1)) * folds.var(axis=-1, ddof=1))


def bound_demo() -> None:
    traces = data.bo_traces()
    prefixes = np.array([20, 50, 100, 150, 200])
    print("1. Regret bound vs. CV noise on real BO traces (Makarova et al., 2022)")
    print("   GP fitted on the top half of the first t evaluations; all traces x prefixes in one vmapped call.\n")
    rows = []
    for i in range(len(traces.values)):
        dims = traces.dim_mask[i]
        X = jnp.asarray(traces.configs[i][:, dims], jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
        y = jnp.asarray(traces.values[i], X.dtype)
        keys = jax.random.split(jax.random.key(i), len(prefixes))
        start = time.perf_counter()
        bounds = _bounds(keys, X, y, jnp.asarray(prefixes), int(dims.sum()))
        bounds = np.asarray(jax.block_until_ready(bounds))
        elapsed = time.perf_counter() - start
        best = [int(np.argmin(traces.values[i][:t])) for t in prefixes]
        thresholds = [_cv_threshold(traces.fold_scores[i][b]) for b in best]
        rows.append((traces.dataset[i], traces.algo[i], bounds, thresholds, elapsed))
    header = "   dataset / algo            " + "".join(f"   t={t:<4d}" for t in prefixes)
    print(header + "   (bound / CV threshold)")
    for name, algo, bounds, thr, elapsed in rows:
        cells = "".join(f"  {b / t:7.2f}x" for b, t in zip(bounds, thr))
        print(f"   {name:18s} {algo:4s}  {cells}   [{elapsed:.1f}s incl. compile]")
    print("\n   A ratio below 1 means the remaining possible improvement is smaller than the")
    print("   noise of the CV estimate itself: the criterion would stop the run there.\n")


def random_search_demo() -> None:
    curves = data.alexnet_curves()
    table = sim.CurveTable(curves.values, curves.mask)
    lengths = curves.mask.sum(axis=1)
    final = curves.values[np.arange(len(lengths)), lengths - 1]
    best = float(final.min())
    print("2. Random search on 64 real AlexNet (ImageNet) learning curves, 2,000 studies vmapped")
    policy = policies.random_search(len(final), max_budget=curves.values.shape[1])
    keys = jax.random.split(jax.random.key(0), 2000)
    print(f"   best final top-1 error in the table: {best:.4f}")
    start = time.perf_counter()
    traces = jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=32))(keys)
    incumbents = np.asarray(jax.block_until_ready(traces.incumbents))
    print(f"   {len(keys)} studies x 32 jobs in {time.perf_counter() - start:.2f}s (incl. compile)")
    for jobs in (4, 8, 16, 32):
        regret = final[incumbents[:, jobs - 1]] - best
        epochs = float(np.mean(traces.spent[:, jobs - 1]))
        print(
            f"   after {jobs:3d} configs: mean regret {regret.mean():.4f} "
            f"(median {np.median(regret):.4f}), mean epochs spent {epochs:7.1f}"
        )
    print()


def main() -> None:
    print(f"jaxstop demo on {jax.devices()[0].platform.upper()} ({jax.device_count()} device(s))\n")
    bound_demo()
    random_search_demo()


if __name__ == "__main__":
    main()
