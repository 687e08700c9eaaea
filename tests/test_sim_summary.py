"""sim.summarize against a NumPy computation from the traces; sim.plot_regret draws it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxstop
from jaxstop import policies, sim

NUM, T = 9, 9
# one grid for most summaries (one compiled program per trace shape): before any job,
# between jobs, on the jobs' budgets and past every study's end
GRID = np.array([0.0, 1.0, 2.0, 5.0, 9.5, 12.0, 17.0, 25.0, 30.0, 40.0, 60.0, 80.0, 400.0])


def ragged_table(seed=0, dtype=np.float64, test=True):
    """Decreasing noisy curves of lengths 3..9, NaN beyond their length."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(3, T + 1, NUM)
    lengths[0] = T
    e = np.arange(1, T + 1)
    v = rng.uniform(0.1, 0.5, (NUM, 1)) + 0.4 * np.exp(-0.4 * e)[None, :] + rng.normal(0, 0.02, (NUM, T))
    mask = e[None, :] <= lengths[:, None]
    v = np.where(mask, v, np.nan).astype(dtype)
    t = np.where(mask, v + rng.normal(0, 0.03, v.shape), np.nan).astype(dtype) if test else None
    return sim.CurveTable(jnp.asarray(v), jnp.asarray(mask), None if t is None else jnp.asarray(t)), lengths


def oracle(traces, values, test, lengths, grid, levels):
    """Plain loops over studies and jobs: the same definitions, written out."""
    traces = jax.tree_util.tree_map(np.asarray, traces)
    values = np.asarray(values, float)
    test = np.full_like(values, np.nan) if test is None else np.asarray(test, float)
    final = np.array([values[c, lengths[c] - 1] for c in range(len(lengths))])
    final_test = np.array([test[c, lengths[c] - 1] for c in range(len(lengths))])
    best, best_test = final.min(), final_test.min()
    num = traces.incumbent.shape[0]
    out = {k: np.full((num, len(grid)), np.nan) for k in ("regret", "incumbent_regret", "test_regret",
                                                          "incumbent_test_regret")}
    for s in range(num):
        lowest, point = np.inf, None
        per_job = []
        for j in range(traces.active.shape[1]):
            if not traces.active[s, j]:
                break
            y = traces.results.value[s, j]
            if y < lowest:
                lowest, point = y, (traces.jobs.config[s, j], traces.results.epoch[s, j])
            inc = traces.incumbents[s, j]
            per_job.append((traces.spent[s, j], lowest - best, test[point[0], point[1] - 1] - best_test,
                            final[inc] - best if inc >= 0 else np.nan,
                            final_test[inc] - best_test if inc >= 0 else np.nan))
        for g, b in enumerate(grid):
            done = [row for row in per_job if row[0] <= b]
            if done:
                _, r, rt, ri, rit = done[-1]
                out["regret"][s, g], out["test_regret"][s, g] = r, rt
                out["incumbent_regret"][s, g], out["incumbent_test_regret"][s, g] = ri, rit
    out["final_regret"] = traces.incumbent_value - best
    out["final_test_regret"] = traces.incumbent_test - best_test
    out["budget"] = traces.budget
    out["stop_step"] = traces.stop_job
    out["terminated"] = ~traces.truncated
    if num < 2:
        return out, None
    stats = {k: (np.mean(v.astype(float), 0), np.std(v.astype(float), 0, ddof=1) / np.sqrt(num),
                 np.quantile(v.astype(float), levels, axis=0)) for k, v in out.items()}
    return out, stats


def check(summary, traces, table, lengths, grid, levels=(0.1, 0.5, 0.9)):
    per, stats = oracle(traces, table.values, table.test, lengths, grid, levels)
    np.testing.assert_array_equal(np.asarray(summary.budget_grid), grid)
    np.testing.assert_array_equal(np.asarray(summary.levels), levels)
    for name in sim.Metrics._fields:
        # per study: the same subtraction of the same two table entries, exactly
        np.testing.assert_array_equal(np.asarray(getattr(summary.studies, name)), per[name], err_msg=name)
        mean, se, q = stats[name]
        # aggregates: sums of <= 16 terms of order 1 in another order, each rounding <= n eps
        tol = dict(rtol=1e-13, atol=1e-13)
        np.testing.assert_allclose(np.asarray(getattr(summary.mean, name)), mean, **tol, err_msg=name)
        np.testing.assert_allclose(np.asarray(getattr(summary.se, name)), se, **tol, err_msg=name)
        np.testing.assert_allclose(np.asarray(getattr(summary.quantiles, name)), q, **tol, err_msg=name)


@pytest.fixture(scope="module")
def studies():
    table, lengths = ragged_table()
    out = {}
    sh = policies.sh(NUM, T, eta=3)
    # the same max_jobs for both: traces of one shape share the summary's program
    for name, policy in [("sh", sh), ("random", policies.random_search(NUM, max_budget=T))]:
        out[name] = sim.run_many(policy, table, jax.random.key(1), 12, max_jobs=sh.limits.max_jobs, progress=False)
    return table, lengths, out


def test_summarize_equals_numpy_from_the_traces(studies):
    table, lengths, traces = studies
    for t in traces.values():
        check(sim.summarize(t, table, budget_grid=GRID), t, table, lengths, GRID)
    # default grid: 101 points from 0 to the largest budget spent
    t = traces["sh"]
    check(sim.summarize(t, table, quantiles=(0.0, 0.25, 1.0)), t, table, lengths,
          np.linspace(0.0, float(np.max(t.budget)), 101), levels=(0.0, 0.25, 1.0))


def test_best_so_far_falls_and_the_rung_incumbent_is_kept_beside_it(studies):
    table, lengths, traces = studies
    s = sim.summarize(traces["sh"], table, budget_grid=GRID)
    r, ri = np.asarray(s.studies.regret), np.asarray(s.studies.incumbent_regret)
    seen = np.isfinite(r)
    assert seen[:, -1].all() and not seen[:, 0].any()     # nothing observed at budget 0
    assert np.all(np.diff(np.where(seen, r, np.inf), axis=1) <= 0)
    # SH's rung rule: on these curves the incumbent's regret rises somewhere in some study
    assert np.any(np.diff(ri, axis=1) > 0)
    # random search trains every job to the end of its curve: best observed = best final
    s = sim.summarize(traces["random"], table, budget_grid=GRID)
    np.testing.assert_array_equal(np.asarray(s.studies.regret)[:, -1], np.asarray(s.studies.final_regret))


def test_one_trace_float32_and_no_test_values():
    table, lengths = ragged_table(2, np.float32, test=False)
    policy = policies.random_search(NUM, max_budget=T)
    one = sim.run(policy, table, jax.random.key(0))
    grid = np.array([4.0, 20.0, 81.0], np.float32)
    s = sim.summarize(one, table, budget_grid=grid)
    assert s.studies.regret.shape == (1, 3) and s.mean.regret.dtype == jnp.float32
    assert np.isnan(np.asarray(s.se.final_regret))          # one study: no standard error
    assert np.all(np.isnan(np.asarray(s.studies.test_regret)))
    per, _ = oracle(jax.tree_util.tree_map(lambda a: np.asarray(a)[None], one), table.values, None, lengths,
                    grid, (0.1,))
    # float32 on both sides: the summary subtracts in float32, the oracle in float64 from the
    # same float32 entries; the difference is one float32 rounding of a number below 1
    np.testing.assert_allclose(np.asarray(s.studies.regret), per["regret"], atol=np.finfo(np.float32).eps)


def test_a_float32_run_summarised_with_its_float64_table_sees_the_losses_it_ran_on():
    # two configurations whose final losses differ below float32's resolution: in float32
    # they tie, and a study returning either returned the best (regret 0, not -1.5e-9)
    v = np.array([[0.9, 0.1 + 3e-9], [0.8, 0.1]])
    assert np.float32(v[0, 1]) == np.float32(v[1, 1]) and v[0, 1] > v[1, 1]
    wide = sim.CurveTable(jnp.asarray(v))
    runs = sim.run_many(policies.random_search(2, max_budget=2), sim.CurveTable(jnp.asarray(v, jnp.float32)),
                        jax.random.key(0), 4, progress=False)
    s = sim.summarize(runs, wide)
    assert s.studies.final_regret.dtype == jnp.float64
    np.testing.assert_array_equal(np.asarray(s.studies.final_regret), 0.0)
    np.testing.assert_array_equal(np.asarray(s.studies.incumbent_regret)[:, -1], 0.0)
    # and every metric equals the oracle's on the table rounded to float32 (the losses the
    # studies saw), in float64: the same subtractions of the same entries, exactly
    table, lengths = ragged_table(3)
    narrow = sim.CurveTable(*(None if a is None else jnp.asarray(a, jnp.float32) if a.dtype == jnp.float64 else a
                              for a in table))
    runs = sim.run_many(policies.sh(NUM, T, eta=3), narrow, jax.random.key(2), 6, progress=False)
    seen = sim.CurveTable(*(None if a is None else jnp.asarray(a, jnp.float32).astype(jnp.float64)
                            if a.dtype == jnp.float64 else a for a in table))
    check(sim.summarize(runs, table, budget_grid=GRID), runs, seen, lengths, GRID)


def test_summary_is_a_pytree_saved_and_loaded_into_its_eval_shape(studies, tmp_path):
    table, _, traces = studies
    s = sim.summarize(traces["sh"], table, budget_grid=GRID)
    jaxstop.save(s, tmp_path / "s.npz")
    like = jax.eval_shape(lambda t: sim.summarize(t, table, budget_grid=GRID), traces["sh"])
    back = jaxstop.load(tmp_path / "s.npz", like=like)
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(s)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_bad_arguments_raise(studies):
    table, _, traces = studies
    t = traces["random"]
    with pytest.raises(TypeError, match="trace"):
        sim.summarize(t._asdict(), table)
    with pytest.raises(ValueError, match="budget_grid"):
        sim.summarize(t, table, budget_grid=np.array([3.0, 1.0]))
    with pytest.raises(ValueError, match="budget_grid"):
        sim.summarize(t, table, budget_grid=1)
    with pytest.raises(ValueError, match="quantiles"):
        sim.summarize(t, table, quantiles=(0.5, 1.5))
    with pytest.raises(TypeError, match="quantiles"):
        sim.summarize(t, table, quantiles="0.5")
    with pytest.raises(ValueError, match="per-job"):
        sim.summarize(t._replace(spent=t.spent[:, :3]), table)
    # a batch of no studies (run_batch of 0 keys) failed inside the jitted program
    with pytest.raises(ValueError, match="no studies"):
        sim.summarize(jax.tree_util.tree_map(lambda a: a[:0], t), table)
    with pytest.raises(ValueError, match="no studies"):
        sim.summarize(jax.tree_util.tree_map(lambda a: a[:0], t), table, budget_grid=GRID)
    # another table than the studies ran on: the incumbents' losses do not match
    with pytest.raises(ValueError, match="not the table these studies ran on"):
        sim.summarize(t, table._replace(values=table.values + 1.0))
    with pytest.raises(ValueError, match="the table has 1 rows"):
        sim.summarize(t._replace(incumbent=np.full_like(np.asarray(t.incumbent), 3)),
                      sim.CurveTable(table.values[:1], None if table.mask is None else table.mask[:1]))


def test_plot_regret_draws_each_policy_with_its_band(studies):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table, _, traces = studies
    grid = GRID
    summaries = {name: sim.summarize(t, table, budget_grid=grid) for name, t in traces.items()}
    ax = sim.plot_regret(summaries, scale=100.0)
    try:
        lines = ax.get_lines()
        assert [line.get_label() for line in lines] == list(summaries)
        assert [t.get_text() for t in ax.get_legend().get_texts()] == list(summaries)
        for line, s in zip(lines, summaries.values()):
            np.testing.assert_array_equal(line.get_xdata(), grid)
            np.testing.assert_array_equal(line.get_ydata(), 100.0 * np.asarray(s.mean.regret))
        bands = ax.collections
        assert len(bands) == len(summaries)
        for band, s in zip(bands, summaries.values()):
            y = np.concatenate([p.vertices[:, 1] for p in band.get_paths()])
            m, e = 100.0 * np.asarray(s.mean.regret), 100.0 * np.asarray(s.se.regret)
            ok = np.isfinite(m) & np.isfinite(e)
            # the band spans mean -/+ one standard error where both exist
            assert np.isclose(y.min(), np.min((m - e)[ok])) and np.isclose(y.max(), np.max((m + e)[ok]))
    finally:
        plt.close(ax.figure)
    fig, ax = plt.subplots()
    try:
        assert sim.plot_regret(summaries, ax, metric="incumbent_regret", band="quantiles") is ax
        assert ax.get_ylabel() == "regret of the policy's incumbent"
    finally:
        plt.close(fig)
    with pytest.raises(ValueError, match="metric"):
        sim.plot_regret(summaries, metric="final_regret")
    with pytest.raises(TypeError, match="Summary"):
        sim.plot_regret({"x": traces["sh"]})


def test_plot_regret_quantile_band_spans_the_lowest_to_the_highest_level(studies):
    """The band of band="quantiles" was drawn between the first and the last level as given:
    with quantiles=(0.5, 0.1, 0.9) from the median to q0.9, not from q0.1 to q0.9."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table, _, traces = studies
    s = sim.summarize(traces["sh"], table, budget_grid=GRID, quantiles=(0.5, 0.1, 0.9))
    ax = sim.plot_regret({"sh": s}, band="quantiles")
    try:
        xy = np.concatenate([p.vertices for p in ax.collections[0].get_paths()])
    finally:
        plt.close(ax.figure)
    regret = np.asarray(s.studies.regret, float)
    lo, hi = np.quantile(regret, 0.1, axis=0), np.quantile(regret, 0.9, axis=0)
    ok = np.isfinite(lo) & np.isfinite(hi)
    assert np.any(ok & (hi > lo))
    for b, want_lo, want_hi in zip(GRID[ok], lo[ok], hi[ok]):
        y = xy[xy[:, 0] == b, 1]
        # the band's vertices at this budget are the two quantiles (differences of float64
        # losses interpolated once: a few ulps)
        np.testing.assert_allclose([y.min(), y.max()], [want_lo, want_hi], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("num_configs", [10, 31, 97])
def test_default_grid_holds_whole_budgets_exactly(num_configs):
    """Random search over one-epoch curves spends budget j after its j-th job; on a grid of
    num_configs + 1 points from 0 to num_configs (point i is budget i) the regret at point i
    is the best-so-far after exactly i jobs (NumPy from the trace), NaN at 0. A grid point one
    float32 ulp below i (as linspace gave for some i) would show the value after i - 1 jobs."""
    vals = jnp.linspace(0.9, 0.1, num_configs, dtype=jnp.float32)[:, None]
    table = sim.CurveTable(vals)
    policy = policies.random_search(num_configs, max_budget=1)
    traces = sim.run_batch(policy, table, jax.random.split(jax.random.key(0), 3))
    s = sim.summarize(traces, table, budget_grid=num_configs + 1)
    np.testing.assert_array_equal(np.asarray(s.budget_grid), np.arange(num_configs + 1))
    losses = np.asarray(vals)[np.asarray(traces.jobs.config), 0]          # (studies, jobs)
    want = np.minimum.accumulate(losses, axis=1) - np.asarray(vals).min()
    got = np.asarray(s.studies.regret)
    assert np.all(np.isnan(got[:, 0]))
    np.testing.assert_array_equal(got[:, 1:], want)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_equal_outcomes_have_their_value_as_mean_and_no_standard_error(dtype):
    # SH ranks config 0 first after one epoch and returns it in every study: all studies have
    # the final regret 0.3 - 0.2 (a value no float represents exactly). The mean of the equal
    # values came out a few ulps off and the standard error 2e-9 (float32) instead of 0
    v = np.array([[0.1, 0.1, 0.3], [0.5, 0.4, 0.2], [0.6, 0.5, 0.25]], dtype)
    table = sim.CurveTable(jnp.asarray(v))
    traces = sim.run_many(policies.sh(3, 3, eta=3), table, jax.random.key(0), 100, progress=False)
    s = sim.summarize(traces, table, budget_grid=np.array([0.0, 3.0, 5.0]))
    want = v[0, 2] - v[1, 2]      # the same subtraction in the table's dtype
    np.testing.assert_array_equal(np.asarray(s.studies.final_regret), want)
    # the final regret, and the incumbent's regret at the grid's end (every study done)
    for stat, zero in ((s.mean, want), (s.se, 0.0)):
        assert np.asarray(stat.final_regret) == zero
        assert np.asarray(stat.incumbent_regret)[-1] == zero
    # a grid point before any job finished is still NaN in every statistic
    assert np.isnan(np.asarray(s.mean.regret)[0]) and np.isnan(np.asarray(s.se.regret)[0])
