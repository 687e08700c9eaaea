"""Analysis of simulated studies: regret against cumulative budget, per study and aggregated."""

from __future__ import annotations

import numbers
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks as _checks
from jaxstop._src import numerics as _numerics
from jaxstop.sim._run import Trace
from jaxstop.sim._table import CurveTable, check_table, curve_lengths

__all__ = ["Metrics", "Summary", "summarize", "even_grid", "DEFAULT_GRID_POINTS"]

#: Points of the default budget grid (from 0 to the largest budget any study spent).
DEFAULT_GRID_POINTS = 101


class Metrics(NamedTuple):
    """What :func:`summarize` measures of a study (or a statistic of it over studies).

    Regrets are differences of losses: a study's loss minus the table's best fully
    trained loss. With ``f_c = values[c, L_c - 1]`` the loss of configuration ``c`` at the
    end of its curve (``L_c`` valid budget units) and ``g_c = test[c, L_c - 1]`` its test
    loss, the references are ``min_c f_c`` and ``min_c g_c``.

    Per study (``Summary.studies``) the grid fields have shape (num_studies, num_grid)
    and the others (num_studies,); in ``Summary.mean`` and ``Summary.se`` the study axis
    is gone, in ``Summary.quantiles`` it is replaced by (num_quantiles,).

    Attributes:
        regret: Best-so-far regret at each point ``b`` of the budget grid: the lowest
            loss any job observed among the jobs finished with cumulative budget
            ``<= b`` (at whatever budget the job reached), minus ``min_c f_c``.
            Non-increasing in ``b``; NaN before the first job finishes. It can be
            negative when a partly trained loss lies below the best final one.
        incumbent_regret: The regret of the configuration the policy itself would
            return after those jobs (``Trace.incumbents``, e.g. successive halving's
            rung rule): ``f_inc - min_c f_c`` (>= 0; NaN before any incumbent). It can
            rise, e.g. when a promotion makes a new rung's first job the incumbent.
        test_regret: As ``regret`` with test losses: the test loss of the best-so-far
            job (its configuration at the budget it reached) minus ``min_c g_c``. NaN
            without ``table.test``.
        incumbent_test_regret: ``g_inc - min_c g_c`` for the policy's incumbent.
        final_regret: Regret of the configuration the study returns,
            ``Trace.incumbent_value - min_c f_c`` (>= 0; NaN without an incumbent).
        final_test_regret: ``Trace.incumbent_test - min_c g_c``.
        budget: Budget units the study spent (``Trace.budget``).
        stop_step: Index of the job after which the policy terminated the study, or
            ``max_jobs`` if it never did (``Trace.stop_job``).
        terminated: Whether the policy terminated the study (not cut by ``max_jobs``);
            its mean is the share of studies that terminated.
    """

    regret: Any
    incumbent_regret: Any
    test_regret: Any
    incumbent_test_regret: Any
    final_regret: Any
    final_test_regret: Any
    budget: Any
    stop_step: Any
    terminated: Any


class Summary(NamedTuple):
    """Result of :func:`summarize`: a pytree of arrays (save it with :func:`jaxstop.save`).

    Attributes:
        studies: :class:`Metrics` of every study, leading axis (num_studies,).
        mean: Their mean over studies (floating; booleans as shares).
        se: Standard error of the mean, ``std(ddof=1) / sqrt(num_studies)`` (NaN with
            one study).
        quantiles: Quantiles over studies (linear interpolation, as ``numpy.quantile``),
            leading axis (num_quantiles,).
        budget_grid: Cumulative budgets of the grid fields, shape (num_grid,).
        levels: Quantile levels of ``quantiles``, shape (num_quantiles,).

    A statistic is NaN where any study's value is NaN (e.g. a grid point before some
    study finished its first job).
    """

    studies: Metrics
    mean: Metrics
    se: Metrics
    quantiles: Metrics
    budget_grid: jax.Array
    levels: jax.Array


def _check_levels(quantiles) -> tuple[float, ...]:
    try:
        if isinstance(quantiles, (str, bytes)):  # "0.5" would be read as the number
            raise TypeError
        levels = tuple(float(q) for q in np.atleast_1d(np.asarray(quantiles, dtype=float)))
    except (TypeError, ValueError) as err:
        raise TypeError(f"quantiles must be a sequence of numbers in [0, 1], got {quantiles!r}") from err
    if np.ndim(quantiles) > 1 or not levels or not all(0.0 <= q <= 1.0 for q in levels):
        raise ValueError(f"quantiles must be a non-empty 1-D sequence of numbers in [0, 1], got {quantiles!r}")
    return levels


def _check_grid(budget_grid, dtype):
    if budget_grid is None:
        return DEFAULT_GRID_POINTS
    if isinstance(budget_grid, numbers.Integral) and not isinstance(budget_grid, bool):
        return _checks.positive_int(budget_grid, "budget_grid", minimum=2)
    grid = _checks.float_array(budget_grid, "budget_grid", dtype)
    _checks.check_rank(grid, 1, "budget_grid", "with shape (num_grid,)")
    if grid.shape[0] < 1:
        raise ValueError("budget_grid must hold at least one budget")
    if _checks.is_concrete(grid):
        g = np.asarray(grid)
        if not np.all(np.isfinite(g)) or np.any(g < 0) or np.any(np.diff(g) < 0):
            raise ValueError("budget_grid must be finite, >= 0 and non-decreasing")
    return grid


def even_grid(num_grid: int, top):
    """``num_grid`` budgets from 0 to ``top`` (a scalar of the grid's floating dtype):
    ``i top / (num_grid - 1)``, a whole budget exactly where the quotient is one (linspace,
    and a division by the constant that XLA turns into a product with its reciprocal, fell
    one ulp short of some, leaving out the job finished exactly there). Traceable."""
    num = jnp.arange(num_grid, dtype=jnp.asarray(top).dtype) * top
    grid = num / (num_grid - 1)
    whole = jnp.round(grid)
    return jnp.where(whole * (num_grid - 1) == num, whole, grid)


def _fields(trace: Trace) -> dict:
    """The arrays of ``trace`` the summary reads, each with a leading study axis."""
    if not isinstance(trace, Trace):
        raise TypeError(f"trace must be a jaxstop.sim.Trace, got {type(trace).__name__}")
    if trace.jobs is None or trace.results is None or trace.spent is None:
        raise ValueError("trace holds no per-step record (run with record='final'): summarize needs "
                         "record='jobs' or 'full'")
    out = dict(
        value=trace.results.value, epoch=trace.results.epoch, config=trace.jobs.config, active=trace.active,
        spent=trace.spent, incumbents=trace.incumbents, incumbent=trace.incumbent,
        incumbent_value=trace.incumbent_value,
        incumbent_test=trace.incumbent_test, budget=trace.budget, stop_job=trace.stop_job,
        truncated=trace.truncated,
    )
    out = {k: jnp.asarray(v) for k, v in out.items()}
    lead = out["incumbent_value"].ndim
    if lead == 0:
        out = {k: v[None] for k, v in out.items()}
    elif lead != 1:
        raise ValueError(f"trace must be one study or a batch with one leading axis; trace.incumbent_value "
                         f"has shape {out['incumbent_value'].shape}")
    n = out["incumbent_value"].shape[0]
    if n == 0:
        raise ValueError("trace holds no studies (a batch of 0 runs): there is nothing to summarize")
    steps = out["spent"].shape[1:]
    for k in ("value", "epoch", "config", "active", "incumbents"):
        if out[k].shape != (n,) + steps:
            raise ValueError(f"trace is inconsistent: its per-job array {k} has shape {out[k].shape}, "
                             f"trace.spent {out['spent'].shape}")
    return out


def _check_same_table(f: dict, table: CurveTable) -> None:
    """``ValueError`` naming ``table`` when the concrete trace cannot come from it: a study's
    ``incumbent_value`` is not the table's loss of its incumbent at the end of its curve (the
    value :func:`~jaxstop.sim.run` records, with the same clipping of the index). Compared in
    the narrower of the two dtypes, so a float32 run summarised with its float64 table passes."""
    if not _checks.is_concrete(f["incumbent"], f["incumbent_value"], table.values):
        return
    values = np.asarray(table.values)
    lengths = np.asarray(curve_lengths(table))
    got = np.asarray(f["incumbent_value"])
    inc = np.asarray(f["incumbent"])
    rows = np.clip(inc, 0, values.shape[0] - 1)
    want = np.where(inc >= 0, values[rows, lengths[rows] - 1], np.nan)
    narrow = min(np.dtype(got.dtype), np.dtype(values.dtype), key=lambda d: d.itemsize)
    got, want = got.astype(narrow), want.astype(narrow)
    bad = ~((got == want) | (np.isnan(got) & np.isnan(want)))
    if np.any(bad):
        i = int(np.argmax(bad))
        where = (f"the table's loss of that configuration is {float(want[i])!r}" if inc[i] < values.shape[0]
                 else f"the table has {values.shape[0]} rows")
        raise ValueError(f"table is not the table these studies ran on: study {i} returned configuration "
                         f"{int(inc[i])} with loss {float(got[i])!r}, {where}; pass the CurveTable given to "
                         "sim.run / run_many")


def _stats(x, levels, dtype):
    """Mean, standard error and quantiles over the leading axis of ``x``. Equal values (every
    study returned the same configuration) have their value as mean and a standard error of
    exactly 0 (:func:`jaxstop._src.numerics.corrected_mean`; the plain mean was a few ulps off,
    with an error of 1e-9)."""
    x = x.astype(dtype)
    n = x.shape[0]
    # over the studies as the last axis; a NaN anywhere makes the column's mean and std NaN
    last = jnp.moveaxis(x, 0, -1)
    every = jnp.ones(last.shape, bool)
    mean = _numerics.corrected_mean(last, every)
    if n > 1:
        std, _ = _numerics.masked_std(last, every, 1)
        se = std / jnp.sqrt(jnp.asarray(n, dtype))
    else:
        se = jnp.full(mean.shape, jnp.nan, dtype)
    q = jnp.quantile(x, jnp.asarray(levels, dtype), axis=0)
    return mean, se, q


@partial(jax.jit, static_argnames=("levels", "num_grid"))
def _summarize(f: dict, values, lengths, test, grid, levels, num_grid):
    dtype = values.dtype
    num_configs = values.shape[0]
    rows = jnp.arange(num_configs)
    final = values[rows, lengths - 1]
    best = jnp.min(final)
    nan = jnp.asarray(jnp.nan, dtype)
    if test is None:
        final_test = jnp.full_like(final, jnp.nan)
        test = jnp.full_like(values, jnp.nan)
    else:
        final_test = test[rows, lengths - 1]
    best_test = jnp.min(final_test)

    active = f["active"].astype(bool)
    num_jobs = active.shape[1]
    # best-so-far: running minimum of the observed losses (un-run jobs observe nothing)
    value = jnp.where(active, f["value"].astype(dtype), jnp.inf)
    running = jax.lax.cummin(value, axis=1)
    before = jnp.concatenate([jnp.full(running.shape[:1] + (1,), jnp.inf, dtype), running[:, :-1]], axis=1)
    steps = jnp.broadcast_to(jnp.arange(num_jobs), value.shape)
    where_best = jax.lax.cummax(jnp.where(value < before, steps, -1), axis=1)  # earliest of equal minima
    has_best = where_best >= 0
    at = jnp.maximum(where_best, 0)
    best_config = jnp.clip(jnp.take_along_axis(f["config"], at, axis=1), 0, num_configs - 1)
    best_epoch = jnp.take_along_axis(f["epoch"], at, axis=1)
    best_epoch = jnp.clip(best_epoch, 1, lengths[best_config])
    step_regret = jnp.where(has_best, running - best, nan)
    step_test = jnp.where(has_best, test[best_config, best_epoch - 1] - best_test, nan)
    # the policy's own incumbent after every job
    inc = f["incumbents"]
    has_inc = inc >= 0
    inc = jnp.clip(inc, 0, num_configs - 1)
    step_inc = jnp.where(has_inc, final[inc] - best, nan)
    step_inc_test = jnp.where(has_inc, final_test[inc] - best_test, nan)

    # the last job finished within each budget of the grid (run jobs are a prefix with
    # non-decreasing cumulative budget; un-run ones never count)
    spent = jnp.where(active, f["spent"].astype(dtype), jnp.inf)
    if grid is None:
        grid = even_grid(num_grid, jnp.max(f["budget"]).astype(dtype))
    done = jax.vmap(lambda s: jnp.searchsorted(s, grid, side="right"))(spent)  # (studies, grid)
    last = done - 1
    seen = last >= 0
    pick = lambda a: jnp.where(seen, jnp.take_along_axis(a, jnp.maximum(last, 0), axis=1), nan)  # noqa: E731

    studies = Metrics(
        regret=pick(step_regret),
        incumbent_regret=pick(step_inc),
        test_regret=pick(step_test),
        incumbent_test_regret=pick(step_inc_test),
        final_regret=f["incumbent_value"].astype(dtype) - best,
        final_test_regret=f["incumbent_test"].astype(dtype) - best_test,
        budget=f["budget"].astype(jnp.int32),
        stop_step=f["stop_job"].astype(jnp.int32),
        terminated=~f["truncated"].astype(bool),
    )
    stats = [_stats(x, levels, dtype) for x in studies]
    mean, se, q = (Metrics(*s) for s in zip(*stats))
    return Summary(studies, mean, se, q, grid, jnp.asarray(levels, dtype))


def summarize(trace: Trace, table: CurveTable, *, budget_grid: Any = None,
              quantiles: tuple[float, ...] = (0.1, 0.5, 0.9)) -> Summary:
    """Regret against cumulative budget, the final regret and the cost of simulated studies.

    For every study (the leading axis of ``trace``, as :func:`run_many`, :func:`run_batch`
    or ``jax.vmap(sim.run)`` return it; one :func:`run` trace counts as one study) and
    aggregated over studies (mean, standard error, quantiles): the best-so-far regret and
    the policy's own incumbent's regret on a common grid of cumulative budgets, the final
    regret, the budget spent, the stop step and whether the policy terminated the study.
    See :class:`Metrics` for exactly which loss each regret uses.

    A grid value at budget ``b`` is that after the last job whose cumulative budget
    (``Trace.spent``) is at most ``b``; after a study's last job it stays at its last
    value. Vectorised over studies (one jitted program; works under ``jax.eval_shape``).

    Args:
        trace: A :class:`Trace` of one study or with a leading (num_studies,) axis.
        table: The :class:`CurveTable` the studies ran on.
        budget_grid: Cumulative budgets, shape (num_grid,), finite, >= 0, non-decreasing;
            or an int, the number of evenly spaced points from 0 to the largest budget any
            study spent (point ``i`` is ``i B / (num_grid - 1)``, exact where that is a whole
            budget); default 101 points. Pass one grid to compare
            several policies at the same budgets.
        quantiles: Quantile levels in [0, 1].

    Returns:
        A :class:`Summary` of arrays in the table's floating dtype (budgets and steps of
        ``studies`` int32, ``terminated`` bool). Studies run in a narrower dtype than the
        table's (a float32 run of a float64 table) are measured against the table's losses
        rounded to that dtype, the losses they saw.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import policies, sim
        >>> table = sim.CurveTable(jnp.array([[0.9, 0.5], [0.8, 0.7], [0.95, 0.3]]))
        >>> policy = policies.random_search(3, max_budget=2)
        >>> traces = sim.run_many(policy, table, jax.random.key(0), 8, progress=False)
        >>> s = sim.summarize(traces, table, budget_grid=jnp.array([2.0, 6.0]))
        >>> s.studies.regret.shape, s.mean.final_regret.tolist()   # every run ends with the best
        ((8, 2), 0.0)
        >>> s.mean.regret[1].tolist(), s.mean.terminated.tolist()
        (0.0, 1.0)
    """
    table = check_table(table)
    f = _fields(trace)
    _check_same_table(f, table)
    values, test = _as_run(table, f["value"].dtype)
    levels = _check_levels(quantiles)
    grid = _check_grid(budget_grid, values.dtype)
    num_grid = grid if isinstance(grid, int) else grid.shape[0]
    return _summarize(f, values, curve_lengths(table), test, None if isinstance(grid, int) else grid,
                      levels, num_grid)


def _as_run(table: CurveTable, run_dtype):
    """The table's losses (values, test) as studies that ran in ``run_dtype`` saw them, in the
    table's dtype: rounded to ``run_dtype`` first where it is the narrower. Every regret is then
    a difference of losses of one precision (a float32 run summarised with its float64 table
    gets 0, not a rounding error of either sign, for a study that returned the best)."""
    values, test = table.values, table.test
    run_dtype = jnp.dtype(run_dtype)
    if not jnp.issubdtype(run_dtype, jnp.floating) or run_dtype.itemsize >= values.dtype.itemsize:
        return values, test
    narrow = lambda a: None if a is None else a.astype(run_dtype).astype(a.dtype)  # noqa: E731
    return narrow(values), narrow(test)
