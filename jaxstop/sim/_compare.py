"""Fair comparisons of policies: the same keys, the same budget, paired intervals (:func:`compare`)."""

from __future__ import annotations

import math
import numbers
import os
from statistics import NormalDist
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks as _checks
from jaxstop.policies import Policy
from jaxstop.sim._many import run_many
from jaxstop.sim._run import check_run_args
from jaxstop.sim._summary import DEFAULT_GRID_POINTS, even_grid
from jaxstop.sim._table import CurveTable, check_table, curve_lengths

__all__ = ["Comparison", "compare", "INTERVALS"]

#: The interval methods of :func:`compare`.
INTERVALS = ("normal", "bootstrap")


class Comparison(NamedTuple):
    """Result of :func:`compare`: P policies, N studies each, B budgets of the grid.

    Regrets are in the table's units (a loss minus the table's best fully trained loss,
    ``min_c values[c, L_c - 1]``); see :func:`compare` for which configuration a study
    returns at each budget.

    Attributes:
        names: The policies' names, in the order given, tuple of P str.
        budgets: The budget grid (cumulative budget units), shape (B,).
        mean: Mean regret over studies at each budget, shape (P, B); NaN where some study
            had not yet finished a job that named an incumbent.
        ci: Its interval at ``level``, shape (P, B, 2).
        final: Mean regret of the configuration each study returns at the end (at the
            budget, or when the policy stopped with ``budget=None``), shape (P,).
        final_ci: Its interval, shape (P, 2).
        spend: Mean budget units spent per study (what the counted jobs trained), (P,).
        stopped: Share of studies whose first run of the policy ended (the policy
            terminated it, not ``max_jobs``) before spending the budget, (P,); with
            ``budget=None`` the share the policy terminated.
        runs: Mean number of runs of the policy per study (1 + restarts), (P,).
        discarded_best: Share of studies whose first run discarded the configuration that
            ends best among those it sampled before its full budget (the "false kill"
            rate), (P,); 0 for a policy that trains everything it samples to the end.
        discarded_best_ci: Its Wilson score interval at ``level``, (P, 2).
        studies: Per-study regret on the grid, shape (P, N, B) (what ``paired`` reads).
        final_studies: Per-study final regret, shape (P, N).
        budget: The common budget, or None (each policy ran once).
        level: Confidence level of the intervals.
        interval: ``"normal"`` or ``"bootstrap"``.
        num_bootstrap: Resamples of the bootstrap (0 with ``"normal"``).
        seed: Seed of the bootstrap's resampling.
    """

    names: tuple
    budgets: np.ndarray
    mean: np.ndarray
    ci: np.ndarray
    final: np.ndarray
    final_ci: np.ndarray
    spend: np.ndarray
    stopped: np.ndarray
    runs: np.ndarray
    discarded_best: np.ndarray
    discarded_best_ci: np.ndarray
    studies: np.ndarray
    final_studies: np.ndarray
    budget: Any
    level: float
    interval: str
    num_bootstrap: int
    seed: int

    def _index(self, name) -> int:
        if name not in self.names:
            raise ValueError(f"no policy named {name!r} in this comparison (names: {', '.join(self.names)})")
        return self.names.index(name)

    def paired(self, a: str, b: str):
        """The mean paired difference ``regret(a) - regret(b)`` on the grid and its interval.

        Study ``i`` of both policies ran on the same keys, so the difference is taken study
        by study before averaging: its interval is that of a mean of N paired differences
        (narrower than two independent intervals whenever the arms are correlated).
        Negative means ``a`` has the lower regret.

        Returns:
            ``(diff, ci)``: shapes (B,) and (B, 2).

        Example:
            >>> import jax, jax.numpy as jnp
            >>> from jaxstop import policies, sim
            >>> table = sim.CurveTable(jnp.array([[0.9, 0.5], [0.8, 0.7], [0.95, 0.3]]))
            >>> rs = policies.random_search(3, max_budget=2)
            >>> c = sim.compare({"a": rs, "b": rs}, table, jax.random.key(0), 16, progress=False)
            >>> diff, ci = c.paired("a", "b")      # the same policy on the same keys
            >>> float(abs(diff[-1])), ci[-1].tolist()
            (0.0, [0.0, 0.0])
        """
        d = self.studies[self._index(a)] - self.studies[self._index(b)]
        return _mean_ci(d, self.level, self.interval, self.num_bootstrap, self.seed)

    def paired_final(self, a: str, b: str):
        """As :meth:`paired` for the final regret: ``(diff, ci)`` of shapes () and (2,)."""
        d = self.final_studies[self._index(a)] - self.final_studies[self._index(b)]
        m, ci = _mean_ci(d[:, None], self.level, self.interval, self.num_bootstrap, self.seed)
        return m[0], ci[0]

    def to_markdown(self, baseline: str | None = None, *, scale: float = 1.0, unit: str = "") -> str:
        """A Markdown table: per policy its spend, runs, ``stopped`` (the share of first runs that
        ended before the budget, or that the policy terminated with ``budget=None``), final regret with its
        interval, the paired difference to ``baseline`` (default: the first policy) with its
        interval and whether the interval excludes 0, and ``discarded_best``.

        ``scale`` multiplies regrets (100 for percentage points of an error rate), ``unit``
        names them in the header."""
        base = self.names[0] if baseline is None else baseline
        ib = self._index(base)
        pct = int(round(100 * self.level))
        u = f" ({unit})" if unit else ""
        what = f"at a budget of {_fmt(self.budget)} units" if self.budget is not None else "each policy run once"
        lines = [f"{self.studies.shape[1]} paired studies, {what}; {pct}% intervals ({self.interval}).", "",
                 f"| policy | spend | runs | {'ended before the budget' if self.budget is not None else 'terminated'} "
                 f"| final regret{u} | vs {base}{u} | significant "
                 "| discarded best |",
                 "|---|---|---|---|---|---|---|---|"]
        for i, name in enumerate(self.names):
            fin = f"{_fmt(scale * self.final[i])} [{_fmt(scale * self.final_ci[i, 0])}, " \
                  f"{_fmt(scale * self.final_ci[i, 1])}]"
            if i == ib:
                diff, sig = "-", "-"
            else:
                d, ci = self.paired_final(name, base)
                diff = f"{_fmt(scale * d, True)} [{_fmt(scale * ci[0], True)}, {_fmt(scale * ci[1], True)}]"
                sig = "yes" if (ci[0] > 0 or ci[1] < 0) else "no"
            disc = f"{100 * self.discarded_best[i]:.1f}% [{100 * self.discarded_best_ci[i, 0]:.1f}, " \
                   f"{100 * self.discarded_best_ci[i, 1]:.1f}]"
            lines.append(f"| {name} | {self.spend[i]:.1f} | {self.runs[i]:.2f} | {100 * self.stopped[i]:.0f}% "
                         f"| {fin} | {diff} | {sig} | {disc} |")
        return "\n".join(lines)

    def plot(self, ax: Any = None, *, scale: float = 1.0, log: bool = False, ylabel: str = "regret") -> Any:
        """Mean regret against budget, one colour per policy, the interval shaded
        (matplotlib, imported here). Returns the ``Axes``.

        Example:
            >>> import jax, jax.numpy as jnp, matplotlib.pyplot as plt
            >>> from jaxstop import policies, sim
            >>> table = sim.CurveTable(jnp.array([[0.9, 0.5], [0.8, 0.7], [0.95, 0.3]]))
            >>> c = sim.compare({"random": policies.random_search(3, max_budget=2)}, table,
            ...                 jax.random.key(0), 8, budget=4, progress=False)
            >>> ax = c.plot()
            >>> [line.get_label() for line in ax.get_lines()]
            ['random']
            >>> plt.close(ax.figure)
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("Comparison.plot needs matplotlib: pip install matplotlib") from err
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        colours = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
        for i, name in enumerate(self.names):
            colour = colours[i % len(colours)] if len(self.names) <= len(colours) else plt.cm.tab20(i % 20)
            ax.plot(self.budgets, scale * self.mean[i], label=name, color=colour)
            ax.fill_between(self.budgets, scale * self.ci[i, :, 0], scale * self.ci[i, :, 1], color=colour,
                            alpha=0.2, linewidth=0)
        ax.set_xlabel("cumulative budget")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("symlog", linthresh=1e-3 * scale)
        ax.legend()
        return ax


def _fmt(x, sign: bool = False) -> str:
    return "nan" if not np.isfinite(x) else (f"{x:+.4g}" if sign else f"{x:.4g}")


def _mean_ci(x, level: float, interval: str, num_bootstrap: int, seed: int):
    """Mean over the first axis of ``x`` (N, ...) and its two-sided interval at ``level``.

    ``"normal"``: ``mean +- z se`` with ``se = std(ddof=1) / sqrt(N)`` and ``z`` the
    normal quantile at ``(1 + level) / 2`` (the central limit approximation; NaN with one
    study). ``"bootstrap"``: the percentile interval of ``num_bootstrap`` means of studies
    resampled with replacement (the same resamples for every column, and for every call
    with the same ``seed``: paired differences resample pairs). Equal values give an
    interval of width 0 either way. A column with a NaN has a NaN mean and interval."""
    x = np.asarray(x, np.float64)
    n = x.shape[0]
    mean = x.mean(axis=0)
    # equal values: their mean exactly (a sum of N equal floats divided by N can be an ulp off)
    same = np.all(x == x[:1], axis=0)
    mean = np.where(same, x[0], mean)
    if interval == "normal":
        if n < 2:
            half = np.full(mean.shape, np.nan)
        else:
            z = NormalDist().inv_cdf(0.5 + level / 2)
            half = z * x.std(axis=0, ddof=1) / math.sqrt(n)
        half = np.where(same, 0.0, half)
        lo, hi = mean - half, mean + half
    else:
        rng = np.random.default_rng(seed)
        counts = rng.multinomial(n, np.full(n, 1.0 / n), size=num_bootstrap).astype(np.float64)  # (R, N)
        flat = x.reshape(n, -1)
        finite = np.all(np.isfinite(flat), axis=0)
        means = counts @ np.where(finite, flat, 0.0) / n  # (R, cols)
        alpha = (1.0 - level) / 2
        lo = np.quantile(means, alpha, axis=0).reshape(mean.shape)
        hi = np.quantile(means, 1.0 - alpha, axis=0).reshape(mean.shape)
        bad = ~finite.reshape(mean.shape)
        lo, hi = np.where(bad, np.nan, lo), np.where(bad, np.nan, hi)
        lo, hi = np.where(same, mean, lo), np.where(same, mean, hi)
    return mean, np.stack([lo, hi], axis=-1)


def _wilson(k, n: int, level: float):
    """Wilson's score interval of a share ``k / n`` (it keeps inside [0, 1] and has
    width > 0 at a share of 0 or 1, where the normal interval collapses)."""
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = np.asarray(k, np.float64) / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return np.stack([np.maximum(centre - half, 0.0), np.minimum(centre + half, 1.0)], axis=-1)


@jax.jit
def _incumbent_losses(config, value, active, incumbents, final):
    """For every step of every study (leading axes (N, J)): the loss the study has observed
    of the incumbent named after that step (its latest result so far, the value a
    practitioner compares), and its fully trained loss ``final``; NaN without an incumbent
    (or an incumbent never observed in the run). A scan over steps with the latest loss of
    each configuration as carry, vmapped over studies."""
    num_configs = final.shape[0]
    nan = jnp.asarray(jnp.nan, final.dtype)

    def study(config, value, active, incumbents):
        def step(last, x):
            c, v, a, inc = x
            c = jnp.clip(c, 0, num_configs - 1)
            last = last.at[c].set(jnp.where(a, v.astype(last.dtype), last[c]))
            i = jnp.clip(inc, 0, num_configs - 1)
            has = inc >= 0
            return last, (jnp.where(has, last[i], nan), jnp.where(has, final[i], nan))

        _, out = jax.lax.scan(step, jnp.full((num_configs,), nan), (config, value, active, incumbents))
        return out

    return jax.vmap(study)(config, value, active, incumbents)


def _as_mapping(x, names, what: str) -> dict:
    """``x`` given per policy (a mapping over a subset of ``names``) or for all (anything else)."""
    if isinstance(x, Mapping):
        unknown = [k for k in x if k not in names]
        if unknown:
            raise ValueError(f"{what} names policies that are not compared: {unknown} (policies: {list(names)})")
        return {n: x.get(n) for n in names}
    return {n: x for n in names}


def _check_budgets(budgets, budget):
    if budgets is None:
        return None
    if isinstance(budgets, numbers.Integral) and not isinstance(budgets, bool):
        return _checks.positive_int(budgets, "budgets", minimum=2)
    try:
        g = np.asarray(budgets, np.float64)
    except (TypeError, ValueError) as err:
        raise TypeError(f"budgets must be an int (grid points) or a 1-D sequence of budgets, got {budgets!r}") from err
    if g.ndim != 1 or g.size < 1:
        raise ValueError(f"budgets must be a non-empty 1-D sequence of budgets, got shape {g.shape}")
    if not np.all(np.isfinite(g)) or np.any(g < 0) or np.any(np.diff(g) < 0):
        raise ValueError("budgets must be finite, >= 0 and non-decreasing")
    if budget is not None and g[-1] > budget:
        raise ValueError(f"budgets must not exceed budget={budget}, got a largest budget of {g[-1]:g}")
    return g


def _final_losses(table: CurveTable, dtype) -> np.ndarray:
    """Each configuration's loss at the end of its curve as runs in ``dtype`` saw it, float64."""
    values = np.asarray(table.values)
    lengths = np.asarray(curve_lengths(table))
    rows = np.arange(values.shape[0])
    final = values[rows, np.maximum(lengths - 1, 0)]
    final = np.where(lengths > 0, final, np.nan)
    return final.astype(dtype).astype(np.float64)


def _arm(policy: Policy, table: CurveTable, key, num_runs: int, budget, restart: bool, run_kw: dict,
         checkpoint, progress: bool):
    """One policy's studies: runs (and restarts) until each study spent ``budget``; per
    counted step its cumulative budget and the returned configuration's fully trained loss,
    per study its spend, and the first run's trace."""
    offset = np.zeros(num_runs)
    prev_obs = np.full(num_runs, np.inf)
    prev_fin = np.full(num_runs, np.nan)
    have = np.zeros(num_runs, bool)
    times, fins, first, runs = [], [], None, np.zeros(num_runs)
    final_loss = None
    r = 0
    while True:
        ckpt = None if checkpoint is None else os.path.join(checkpoint, f"run-{r}")
        tr = run_many(policy, table, jax.random.fold_in(key, r), num_runs, record="jobs", progress=progress,
                      checkpoint=ckpt, **run_kw)
        if final_loss is None:
            final_loss = _final_losses(table, np.asarray(tr.results.value).dtype)
            first = tr
        obs, fin = (np.asarray(a, np.float64) for a in _incumbent_losses(
            tr.jobs.config, tr.results.value, tr.active, tr.incumbents, jnp.asarray(final_loss)))
        active = np.asarray(tr.active, bool)
        t = offset[:, None] + np.asarray(tr.spent, np.float64)
        live = (offset < budget) if budget is not None else np.ones(num_runs, bool)
        counted = active & live[:, None]
        if budget is not None:
            counted &= t <= budget
        runs += live
        # the study's answer: this run's incumbent where its observed loss is below the best
        # answer of the earlier runs (the earlier one on a tie), else that one
        obs_inf = np.where(np.isnan(obs), np.inf, obs)
        better = np.where(have[:, None], obs_inf < prev_obs[:, None], ~np.isnan(fin))
        sel = np.where(better, fin, prev_fin[:, None])
        times.append(np.where(counted, t, np.nan))
        fins.append(np.where(counted, sel, np.nan))
        # the best answer after this run's last counted step
        any_counted = counted.any(axis=1)
        last = np.where(any_counted, counted.shape[1] - 1 - np.argmax(counted[:, ::-1], axis=1), 0)
        take = any_counted & np.take_along_axis(better, last[:, None], 1)[:, 0]
        prev_obs = np.where(take, np.take_along_axis(obs_inf, last[:, None], 1)[:, 0], prev_obs)
        prev_fin = np.where(take, np.take_along_axis(fin, last[:, None], 1)[:, 0], prev_fin)
        have |= take
        spent_now = np.where(counted, t, offset[:, None]).max(axis=1, initial=-np.inf)
        total = np.asarray(tr.budget, np.float64)
        if budget is None or not restart:
            offset = np.maximum(offset, spent_now) if budget is not None else total
            break
        stuck = live & (total <= 0)
        if np.any(stuck):
            raise ValueError(f"a run of the policy spent no budget (study {int(np.argmax(stuck))}): restarting it "
                             "cannot spend the budget; use restart=False")
        offset = np.where(live, offset + total, offset)
        r += 1
        if not np.any(offset < budget):
            break
    times = np.concatenate(times, axis=1)
    fins = np.concatenate(fins, axis=1)
    spend = np.nanmax(np.where(np.isnan(times), 0.0, times), axis=1) if times.size else np.zeros(num_runs)
    return times, fins, spend, runs, first, final_loss


def _on_grid(times, fins, grid):
    """The loss of the returned configuration at each grid budget: that after the last
    counted step with a cumulative budget at most the grid's (NaN before the first).
    Counted steps have non-decreasing budgets; the others are NaN and skipped."""
    n, s = times.shape
    counted = ~np.isnan(times)
    idx = np.where(counted, np.arange(s), -1)
    idx = np.maximum.accumulate(idx, axis=1)
    t_eff = np.where(idx >= 0, np.take_along_axis(np.where(counted, times, -np.inf), np.maximum(idx, 0), 1),
                     -np.inf)
    # one searchsorted for every study: row i's budgets shifted by i * span into a range of
    # their own (exact in float64: budgets and the shift are whole or small numbers, far below 2**53)
    finite = np.where(np.isfinite(t_eff), t_eff, -1.0)
    span = math.ceil(max(float(np.max(finite, initial=0.0)), float(np.max(grid, initial=0.0)))) + 2.0
    shift = np.arange(n, dtype=np.float64)[:, None] * span
    k = np.searchsorted((finite + shift).ravel(), (grid[None, :] + shift).ravel(), side="right").reshape(n, -1)
    k = k - 1 - np.arange(n)[:, None] * s  # index within the row; -1 before its first step
    j = np.where(k >= 0, np.take_along_axis(idx, np.maximum(k, 0), 1), -1) if s else np.full(k.shape, -1)
    out = np.where(j >= 0, np.take_along_axis(fins, np.maximum(j, 0), 1), np.nan) if s else \
        np.full((n, grid.shape[0]), np.nan)
    last = np.where(idx[:, -1] >= 0, np.take_along_axis(fins, np.maximum(idx[:, -1:], 0), 1)[:, 0], np.nan) \
        if s else np.full(n, np.nan)
    return out, last


def _discarded_best(trace, final_loss, full):
    """Per study of ``trace`` (record="jobs"): whether every configuration that ends best among
    those sampled (lowest ``final_loss`` of the configurations with a job) stopped training
    before ``full`` (its full budget) epochs."""
    config = np.asarray(trace.jobs.config)
    epoch = np.asarray(trace.results.epoch)
    active = np.asarray(trace.active, bool)
    n, c = config.shape[0], final_loss.shape[0]
    reached = np.full((n, c), -1)
    rows = np.broadcast_to(np.arange(n)[:, None], config.shape)
    cc = np.clip(config, 0, c - 1)
    np.maximum.at(reached, (rows[active], cc[active]), epoch[active])
    sampled = reached >= 0
    loss = np.where(sampled, np.where(np.isnan(final_loss), np.inf, final_loss)[None, :], np.inf)
    best = loss.min(axis=1, keepdims=True)
    is_best = sampled & (loss == best)
    fully = reached >= full[None, :]
    return np.any(sampled, axis=1) & ~np.any(is_best & fully, axis=1)


def compare(policies: Mapping[str, Policy], table: CurveTable, key: jax.Array, num_runs: int, *,
            budget: int | None = None, budgets: Any = None, restart: bool = True, level: float = 0.95,
            interval: str = "normal", num_bootstrap: int = 2000, params: Any = None, max_jobs: Any = None,
            chunk_size: int | None = None, checkpoint: str | os.PathLike | None = None,
            progress: bool = True) -> Comparison:
    """Compares policies at equal budget on the same keys, with paired intervals.

    Every policy plays ``num_runs`` studies against ``table`` (:func:`run_many`, chunked,
    sharded, resumable). Study ``i`` of every policy uses the same keys: its run ``r`` has
    the key ``fold_in(fold_in(key, r), i)``, so two arms given the same policy agree exactly
    and differences between arms are paired (:meth:`Comparison.paired`).

    Budget. With ``budget=B`` (budget units, e.g. epochs) every study gets ``B``: with
    ``restart=True`` a run that ends before spending it is followed by another run of the
    policy with a fresh key (as a practitioner reruns SH brackets), and so on; the jobs
    that finish within ``B`` count (the last run is cut at ``B``: a job that would finish
    after it does not count), so each study spends between ``B`` minus one job's budget
    and ``B``. With ``restart=False`` each policy runs once, cut at ``B``; with
    ``budget=None`` once, uncut (as :func:`summarize` sees it).

    Regret. After each counted job the study's answer is the incumbent of its current run
    (the policy's own rule, ``Trace.incumbents``) unless an earlier run's answer has the
    lower *observed* loss, the latest loss the study saw of that configuration (what a
    practitioner compares; the earlier answer wins a tie). Its regret is its fully trained
    loss (``values[c, L_c - 1]``, as runs in the trace's dtype saw it) minus the table's
    best; at a grid budget ``b``, that after the last job finished within ``b`` (NaN
    before the first incumbent). With one run this is :func:`summarize`'s
    ``incumbent_regret``.

    ``discarded_best`` counts, in each study's first run, whether the configuration that
    ends best among those the run sampled (the lowest fully trained loss; with ties, every
    one of them) stopped before its full budget, ``min(policy.limits.max_budget, L_c)``
    (the table's width for a policy without one).

    Intervals. ``interval="normal"``: mean +- z standard errors over the N studies (the
    central limit approximation, fine for N in the hundreds; it can undercover with few
    studies and heavily skewed regrets). ``"bootstrap"``: percentile intervals of
    ``num_bootstrap`` resamples of the studies (paired differences resample the pairs;
    seeded, so a comparison is reproducible). The share ``discarded_best`` gets Wilson's
    score interval either way.

    The simulations run in :func:`run_many`'s jitted, sharded programs and the incumbent
    bookkeeping in one jitted scan over steps; the driver itself runs eagerly (the number
    of restarts depends on the data), like :func:`run_many`. Besides one run's traces it
    keeps 16 bytes per study and step of every run (the steps' budgets and answers).

    Args:
        policies: Name -> :class:`~jaxstop.policies.Policy` (at least one), compared in order.
        table: The :class:`CurveTable` every policy plays against.
        key: PRNG key of the comparison.
        num_runs: Studies per policy (N).
        budget: The common budget per study, an int >= 1, or None.
        budgets: The budget grid: a 1-D sequence of budgets (at most ``budget``), or an int,
            the number of evenly spaced points from 0 to ``budget`` (or, with
            ``budget=None``, to the largest spend of any study); default 101 points.
        restart: Restart a policy that ends before the budget (see above).
        level: Confidence level of every interval, in (0, 1).
        interval: ``"normal"`` or ``"bootstrap"``.
        num_bootstrap: Resamples with ``interval="bootstrap"``.
        params: Each policy's params: one for all, or a mapping name -> params (missing
            names: the policy's defaults).
        max_jobs: Most jobs of one run, one int for all or a mapping name -> int; default
            each policy's own bound.
        chunk_size, progress: As in :func:`run_many`.
        checkpoint: A directory: each policy's runs are checkpointed in a subdirectory
            ``<i>/run-<r>`` (policy ``i`` in order, run ``r``), so an interrupted
            comparison resumes.

    Returns:
        A :class:`Comparison` of NumPy arrays (float64).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import policies, sim
        >>> table = sim.CurveTable(jnp.array([[0.9, 0.5, 0.4], [0.8, 0.7, 0.6], [0.95, 0.3, 0.2]]))
        >>> arms = {"random": policies.random_search(3, max_budget=3),
        ...         "sh": policies.sh(3, 3, eta=3)}
        >>> c = sim.compare(arms, table, jax.random.key(0), 64, budget=9, progress=False)
        >>> c.names, c.mean.shape, c.ci.shape
        (('random', 'sh'), (2, 101), (2, 101, 2))
        >>> bool(c.spend.max() <= 9)
        True
    """
    if not isinstance(policies, Mapping) or not policies:
        raise TypeError("policies must be a non-empty mapping of name -> jaxstop.policies.Policy")
    names = tuple(policies)
    for n, p in policies.items():
        if not isinstance(n, str):
            raise TypeError(f"policies must be keyed by str names, got {n!r}")
        if not isinstance(p, Policy):
            raise TypeError(f"policies[{n!r}] must be a jaxstop.policies.Policy, got {type(p).__name__}")
    table = check_table(table)
    _checks.check_key(key)
    num_runs = _checks.positive_int(num_runs, "num_runs")
    if budget is not None:
        budget = _checks.positive_int(budget, "budget")
    restart = _checks.boolean(restart, "restart")
    progress = _checks.boolean(progress, "progress")
    if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be a number in (0, 1), got {level!r}")
    level = float(level)
    if interval not in INTERVALS:
        raise ValueError(f"interval must be one of {INTERVALS}, got {interval!r}")
    num_bootstrap = _checks.positive_int(num_bootstrap, "num_bootstrap", minimum=2) if interval == "bootstrap" else 0
    grid = _check_budgets(budgets, budget)
    params = _as_mapping(params, names, "params")
    max_jobs = _as_mapping(max_jobs, names, "max_jobs")
    for n in names:  # every argument error before the first simulation
        check_run_args(policies[n], table, max_jobs[n], None)
    width = table.values.shape[1]

    arms = []
    for i, n in enumerate(names):
        p = policies[n]
        kw = dict(params=params[n], max_jobs=max_jobs[n], chunk_size=chunk_size)
        ckpt = None if checkpoint is None else os.path.join(os.fspath(checkpoint), str(i))
        arms.append(_arm(p, table, key, num_runs, budget, restart, kw, ckpt, progress))

    if grid is None or isinstance(grid, numbers.Integral):
        points = DEFAULT_GRID_POINTS if grid is None else grid
        top = float(budget) if budget is not None else max(float(a[2].max()) for a in arms)
        with jax.enable_x64(True):  # the grid in float64, whatever the caller's setting
            grid = np.asarray(even_grid(points, jnp.float64(top)))

    studies, finals, spend, runs, stopped, disc = [], [], [], [], [], []
    for n, (times, fins, sp, nr, first, final_loss) in zip(names, arms):
        best = np.nanmin(final_loss)
        on_grid, last = _on_grid(times, fins, grid)
        studies.append(on_grid - best)
        finals.append(last - best)
        spend.append(sp.mean())
        runs.append(nr.mean())
        terminated = ~np.asarray(first.truncated, bool)
        if budget is not None:
            terminated &= np.asarray(first.budget) < budget
        stopped.append(terminated.mean())
        cap = policies[n].limits.max_budget or width
        full = np.minimum(np.asarray(curve_lengths(table)), cap)
        disc.append(_discarded_best(first, final_loss, full))
    studies = np.stack(studies)
    finals = np.stack(finals)
    seed = int(jax.random.randint(jax.random.fold_in(key, 2**31 - 1), (), 0, 2**31 - 1))
    stats = [_mean_ci(s, level, interval, num_bootstrap, seed) for s in studies]
    fstats = [_mean_ci(f[:, None], level, interval, num_bootstrap, seed) for f in finals]
    disc = np.stack(disc)
    return Comparison(
        names=names, budgets=grid,
        mean=np.stack([m for m, _ in stats]), ci=np.stack([c for _, c in stats]),
        final=np.stack([m[0] for m, _ in fstats]), final_ci=np.stack([c[0] for _, c in fstats]),
        spend=np.asarray(spend), stopped=np.asarray(stopped), runs=np.asarray(runs),
        discarded_best=disc.mean(axis=1), discarded_best_ci=_wilson(disc.sum(axis=1), num_runs, level),
        studies=studies, final_studies=finals, budget=budget, level=level, interval=interval,
        num_bootstrap=num_bootstrap, seed=seed)
