"""sim.compare: paired keys, restarts that spend the budget, the answer across restarts against a
plain-loop oracle, interval coverage on a table whose answer is known, discarded_best against a
NumPy count; the CLI ``python -m jaxstop compare``."""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxstop import policies, sim
from jaxstop.__main__ import main

NUM, T = 9, 9


def table(seed=0, ragged=False):
    """Decreasing noisy curves whose order changes along the epochs (so halving can discard the
    best); lengths 3..9 with ``ragged``."""
    rng = np.random.default_rng(seed)
    e = np.arange(1, T + 1)
    v = rng.uniform(0.1, 0.5, (NUM, 1)) + rng.uniform(0.1, 0.6, (NUM, 1)) * np.exp(-0.4 * e)[None, :] \
        + rng.normal(0, 0.03, (NUM, T))
    lengths = rng.integers(3, T + 1, NUM) if ragged else np.full(NUM, T)
    lengths[0] = T
    mask = e[None, :] <= lengths[:, None]
    return sim.CurveTable(jnp.asarray(np.where(mask, v, np.nan)), jnp.asarray(mask)), lengths


TABLE, LENGTHS = table()
SH = policies.sh(NUM, T, 3)                    # 9 x 1 + 3 x 2 + 1 x 6 = 21 epochs, 13 jobs
RANDOM = policies.random_search(NUM, max_budget=T)
SHP = policies.sh(NUM, T, 3, True, num_profile=2)  # one SH+ for every test (one compiled program per shape)


def test_same_policy_paired_difference_is_exactly_zero():
    c = sim.compare({"a": SH, "b": SH, "r": RANDOM}, TABLE, jax.random.key(1), 32, budget=50, progress=False)
    diff, ci = c.paired("a", "b")
    seen = np.isfinite(c.mean[0])
    assert seen[-1] and not seen[0]          # NaN at budget 0, before any job
    np.testing.assert_array_equal(diff[seen], 0.0)
    np.testing.assert_array_equal(ci[seen], 0.0)
    d, dci = c.paired_final("a", "b")
    assert d == 0.0 and dci.tolist() == [0.0, 0.0]
    np.testing.assert_array_equal(c.studies[0], c.studies[1])
    # a paired difference is the difference of the means (one set of studies)
    d, _ = c.paired("r", "a")
    # the mean of differences against the difference of means: two summations of 32 terms, each
    # off by at most about 32 eps times the largest regret (NumPy's summation order depends on the CPU)
    tol = 4 * 32 * np.finfo(float).eps * np.nanmax(np.abs(c.studies))
    np.testing.assert_allclose(d[seen], (c.mean[2] - c.mean[0])[seen], rtol=0, atol=tol)
    with pytest.raises(ValueError, match="no policy named 'x'"):
        c.paired("x", "a")


@pytest.mark.parametrize("budget, spend, runs", [(50, 50, 3), (52, 51, 3), (21, 21, 1), (30, 30, 2)])
def test_restarts_spend_the_budget(budget, spend, runs):
    # SH on full-length curves spends exactly 21 per run, its jobs costing 1 (x9), 2 (x3), 6:
    # two runs (42) and the first rung of a third (9) reach 51 <= 52, the next job would pass it
    c = sim.compare({"sh": SH}, TABLE, jax.random.key(2), 8, budget=budget, progress=False)
    assert c.spend.tolist() == [float(spend)]
    assert c.runs.tolist() == [float(runs)]
    assert c.stopped.tolist() == [float(budget > 21)]
    assert c.budgets[-1] == budget and c.budgets[0] == 0.0
    once = sim.compare({"sh": SH}, TABLE, jax.random.key(2), 8, budget=budget, restart=False, progress=False)
    assert once.spend.tolist() == [float(min(budget, 21) if budget >= 21 else budget)]
    assert once.runs.tolist() == [1.0]


def test_restarts_spend_within_one_job_on_ragged_curves():
    tab, lengths = table(3, ragged=True)
    arms = {"sh": policies.sh(NUM, T, 3), "random": policies.random_search(NUM, max_budget=T)}
    c = sim.compare(arms, tab, jax.random.key(3), 64, budget=100, progress=False)
    # no job trains more than max_budget = 9 epochs: every study spends within 9 of the budget
    assert np.all(c.spend <= 100) and np.all(c.spend > 100 - T)
    assert np.all(c.runs > 1)


def oracle(runs_per_restart, final, best, budget, grid):
    """The answer across restarts with plain loops: after every job finished within the budget,
    this run's incumbent unless an earlier run's answer has a lower observed loss (the latest
    loss seen of that configuration in its run; the earlier answer wins ties)."""
    num = runs_per_restart[0].incumbent.shape[0]
    out = np.full((num, len(grid)), np.nan)
    for s in range(num):
        points, t0 = [], 0.0
        prev = None  # (observed loss, final loss)
        for tr in runs_per_restart:
            if t0 >= budget:
                break
            last_seen, answer = {}, prev
            for j in range(tr.active.shape[1]):
                if not tr.active[s, j]:
                    break
                t = t0 + tr.spent[s, j]
                last_seen[int(tr.jobs.config[s, j])] = float(tr.results.value[s, j])
                if t > budget:
                    break
                inc = int(tr.incumbents[s, j])
                cur = None if inc < 0 else (last_seen.get(inc, np.inf), final[inc])
                answer = cur if prev is None else (cur if cur is not None and cur[0] < prev[0] else prev)
                points.append((t, answer[1] if answer is not None else np.nan))
            prev = answer
            t0 += float(tr.budget[s])
        for g, b in enumerate(grid):
            done = [v for t, v in points if t <= b]
            if done:
                out[s, g] = done[-1] - best
    return out


@pytest.mark.parametrize("name, policy", [("sh", SH), ("sh+", SHP),
                                          ("hyperband", policies.hyperband(NUM, T, 3))])
def test_answer_across_restarts_matches_a_plain_loop(name, policy):
    tab, lengths = table(4, ragged=True)
    key, budget, n = jax.random.key(5), 70, 12
    grid = np.array([0.0, 1.0, 5.0, 9.0, 20.0, 21.0, 33.5, 45.0, 60.0, 69.0, 70.0])
    c = sim.compare({name: policy}, tab, key, n, budget=budget, budgets=grid, progress=False)
    runs = []
    for r in range(int(math.ceil(c.runs.max()))):
        tr = sim.run_many(policy, tab, jax.random.fold_in(key, r), n, record="jobs", progress=False)
        runs.append(jax.tree_util.tree_map(np.asarray, tr))
    values = np.asarray(tab.values)
    final = values[np.arange(NUM), lengths - 1]
    want = oracle(runs, final, final.min(), budget, grid)
    np.testing.assert_array_equal(c.studies[0], want)
    np.testing.assert_array_equal(c.final_studies[0], want[:, -1])


def test_one_run_is_summarize_incumbent_regret():
    key = jax.random.key(6)
    grid = np.array([0.0, 3.0, 9.0, 12.0, 15.0, 21.0, 25.0])
    c = sim.compare({"sh": SH}, TABLE, key, 16, budgets=grid, progress=False)
    tr = sim.run_many(SH, TABLE, jax.random.fold_in(key, 0), 16, record="jobs", progress=False)
    s = sim.summarize(tr, TABLE, budget_grid=jnp.asarray(grid))
    np.testing.assert_array_equal(c.studies[0], np.asarray(s.studies.incumbent_regret))
    np.testing.assert_array_equal(c.final_studies[0], np.asarray(s.studies.final_regret))
    assert c.stopped.tolist() == [1.0] and c.runs.tolist() == [1.0]


def test_intervals_cover_the_known_mean():
    """Arms of one and of two uniform draws (random search without replacement): the mean regret
    of one draw is mean(f) - min(f), of two the mean over pairs of min(f_a, f_b) - min(f)."""
    rng = np.random.default_rng(7)
    # Mildly skewed regrets: a rare large value (the largest pair minimum has probability 1/66
    # with squared exponentials) makes the normal interval undercover badly at n = 48, which
    # is the interval's limit, documented in compare, not what this test is about.
    f = rng.uniform(0.0, 1.0, 12) ** 2
    tab = sim.CurveTable(jnp.asarray(np.repeat(f[:, None], 2, axis=1)))
    rs = policies.random_search(12, max_budget=2)
    pairs = [min(f[a], f[b]) for a in range(12) for b in range(a + 1, 12)]
    truth_one, truth_two = f.mean() - f.min(), np.mean(pairs) - f.min()
    reps, n = 300, 48
    hits = np.zeros(3)
    for i in range(reps):
        c = sim.compare({"one": rs, "two": rs}, tab, jax.random.key(100 + i), n, max_jobs={"one": 1, "two": 2},
                        progress=False)
        hits[0] += c.final_ci[0, 0] <= truth_one <= c.final_ci[0, 1]
        hits[1] += c.final_ci[1, 0] <= truth_two <= c.final_ci[1, 1]
        _, ci = c.paired_final("one", "two")
        hits[2] += ci[0] <= truth_one - truth_two <= ci[1]
    # The normal interval's coverage at n = 48 is 0.95 up to the t / z gap and the skew
    # (about 0.93-0.95 here); 300 replicates estimate it with a standard deviation of
    # sqrt(0.95 * 0.05 / 300) = 0.0126: four of them (0.05) below 0.93 is 0.88. An interval of
    # one standard error (0.68) or a paired interval built as if the arms were independent
    # (wider: coverage near 1) fails one side or the other.
    cov = hits / reps
    assert np.all(cov >= 0.88), cov
    assert np.all(cov <= 0.995), cov


def test_bootstrap_agrees_with_the_normal_interval_on_many_studies():
    rs = policies.random_search(NUM, max_budget=T)
    args = ({"one": rs, "three": rs}, TABLE, jax.random.key(8), 2000)
    kw = dict(max_jobs={"one": 1, "three": 3}, progress=False)
    normal = sim.compare(*args, **kw)
    boot = sim.compare(*args, interval="bootstrap", num_bootstrap=4000, **kw)
    np.testing.assert_array_equal(normal.final, boot.final)
    # At N = 2,000 both approximate the same sampling distribution; the percentile endpoints of
    # 4,000 resamples move by about se / sqrt(4000) * 2.5 (under 5% of the half width), and the
    # skew of a mean of 2,000 is small: the half widths agree within 10%.
    for i in range(2):
        hn = np.diff(normal.final_ci[i])[0]
        hb = np.diff(boot.final_ci[i])[0]
        assert abs(hb / hn - 1) < 0.1
    dn, cn = normal.paired_final("three", "one")
    db, cb = boot.paired_final("three", "one")
    assert dn == db and abs(np.diff(cb)[0] / np.diff(cn)[0] - 1) < 0.1
    # reproducible: the resamples come from the comparison's key
    again = sim.compare(*args, interval="bootstrap", num_bootstrap=4000, **kw)
    np.testing.assert_array_equal(again.final_ci, boot.final_ci)


def count_discarded_best(tr, final, full):
    """Per study: the sampled configurations, the best of them by final loss, and whether any of
    the best reached its full budget, by plain loops."""
    out = []
    for s in range(tr.incumbent.shape[0]):
        reached = {}
        for j in range(tr.active.shape[1]):
            if tr.active[s, j]:
                c = int(tr.jobs.config[s, j])
                reached[c] = max(reached.get(c, 0), int(tr.results.epoch[s, j]))
        best = min(final[c] for c in reached)
        out.append(not any(reached[c] >= full[c] for c in reached if final[c] == best))
    return np.array(out)


def test_discarded_best_against_a_count():
    tab, lengths = table(9, ragged=True)
    key, n = jax.random.key(10), 100
    arms = {"sh": policies.sh(NUM, T, 3), "sh+": SHP,
            "random": policies.random_search(NUM, max_budget=T)}
    c = sim.compare(arms, tab, key, n, budget=60, progress=False)
    values = np.asarray(tab.values)
    final = values[np.arange(NUM), lengths - 1]
    for i, p in enumerate(arms.values()):
        tr = jax.tree_util.tree_map(np.asarray, sim.run_many(p, tab, jax.random.fold_in(key, 0), n, record="jobs",
                                                             progress=False))
        want = count_discarded_best(tr, final, np.minimum(lengths, T))
        assert c.discarded_best[i] == want.mean()
    assert c.discarded_best[2] == 0.0 and c.discarded_best[0] > 0.1
    # Wilson's interval holds the share and stays in [0, 1], with width at a share of 0
    assert np.all(c.discarded_best_ci[:, 0] <= c.discarded_best) and np.all(c.discarded_best <= c.discarded_best_ci[:, 1])
    # at a share of 0 Wilson's upper end is z^2 / (n + z^2) (z = 1.96 at 95%)
    z2 = 1.959963984540054 ** 2
    assert c.discarded_best_ci[2, 0] == 0.0
    np.testing.assert_allclose(c.discarded_best_ci[2, 1], z2 / (n + z2), rtol=1e-12)


def test_markdown_and_plot():
    import matplotlib.pyplot as plt

    c = sim.compare({"sh": SH, "random": RANDOM}, TABLE, jax.random.key(11), 32, budget=40, progress=False)
    md = c.to_markdown(scale=100, unit="pp")
    assert "| sh |" in md and "| random |" in md and "vs sh (pp)" in md and "32 paired studies" in md
    ax = c.plot()
    assert [line.get_label() for line in ax.get_lines()] == ["sh", "random"]
    colours = {line.get_color() for line in ax.get_lines()}
    assert len(colours) == 2
    plt.close(ax.figure)


def test_bad_arguments_are_named():
    key = jax.random.key(0)
    with pytest.raises(TypeError, match="policies must be a non-empty mapping"):
        sim.compare({}, TABLE, key, 4)
    with pytest.raises(TypeError, match=r"policies\['x'\] must be a jaxstop.policies.Policy"):
        sim.compare({"x": 3}, TABLE, key, 4)
    with pytest.raises(ValueError, match="level must be a number in"):
        sim.compare({"sh": SH}, TABLE, key, 4, level=1.5)
    with pytest.raises(ValueError, match="interval must be one of"):
        sim.compare({"sh": SH}, TABLE, key, 4, interval="t")
    with pytest.raises(ValueError, match="budgets must not exceed budget=10"):
        sim.compare({"sh": SH}, TABLE, key, 4, budget=10, budgets=[0.0, 20.0])
    with pytest.raises(ValueError, match="budgets must be finite"):
        sim.compare({"sh": SH}, TABLE, key, 4, budgets=[3.0, 1.0])
    with pytest.raises(ValueError, match="max_jobs names policies that are not compared"):
        sim.compare({"sh": SH}, TABLE, key, 4, max_jobs={"other": 3})
    with pytest.raises(ValueError, match="budget must be"):
        sim.compare({"sh": SH}, TABLE, key, 4, budget=0)
    with pytest.raises(ValueError, match="the policy indexes 8 configurations"):
        sim.compare({"sh": policies.sh(8, T, 3)}, TABLE, key, 4)


def test_profile_incumbent_false_keeps_the_profile_out_of_the_answer():
    tab, _ = table(12)
    key = jax.random.key(13)
    with_p = policies.sh(NUM, T, 3, True, num_start=3, num_profile=3)
    without = policies.sh(NUM, T, 3, True, num_start=3, num_profile=3, profile_incumbent=False)
    tw = jax.tree_util.tree_map(np.asarray, sim.run_many(with_p, tab, key, 24, record="jobs", progress=False))
    for batched in (True, False):  # the batch protocol and the one-job protocol's own code
        to = jax.tree_util.tree_map(np.asarray, sim.run_many(without, tab, key, 24, record="jobs", progress=False,
                                                             batched=batched))
        if batched:  # the same jobs and budget: only the answer differs
            np.testing.assert_array_equal(tw.jobs.config, to.jobs.config)
            np.testing.assert_array_equal(tw.budget, to.budget)
        # no incumbent during the profile (its 3 jobs); then always one of the brackets' configurations
        assert np.all(to.incumbents[:, :3] == -1) and np.all(tw.incumbents[:, 0] >= 0)
        profiled_only = 0
        for s in range(24):
            act = to.active[s]
            bracket = set(to.jobs.config[s][act][3:].tolist())
            assert to.incumbent[s] in bracket
            assert np.all(np.isin(to.incumbents[s][act][3:], list(bracket)))
            profiled_only += int(tw.incumbent[s] not in bracket)
        # with the profile in the answer, some studies return a profiled configuration
        assert profiled_only > 0 or not batched
    with pytest.raises(ValueError, match="profile_incumbent is an option of uq=True"):
        policies.sh(NUM, T, 3, profile_incumbent=False)
    with pytest.raises(ValueError, match="profile_incumbent is an option of uq=True"):
        policies.hyperband(NUM, T, 3, True, delta_estimate="window", profile_incumbent=False)


def test_cli_compare(tmp_path, capsys):
    out = tmp_path / "cmp.md"
    code = main(["compare", "--table", "alexnet", "--policies", "sh,random", "--runs", "16", "--budget", "600",
                 "--out", str(out), "--no-progress", "--no-plot"])
    assert code == 0
    printed = capsys.readouterr().out
    text = out.read_text()
    assert "| sh |" in text and "| random |" in text and "at a budget of 600 units" in text
    assert text.strip() in printed
    assert main(["compare", "--table", "alexnet", "--policies", "sh,nope", "--out", str(out)]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "cmp.png")


def test_checkpointed_comparison_resumes_to_the_same_result(tmp_path):
    args = ({"sh": SH, "random": RANDOM}, TABLE, jax.random.key(14), 16)
    first = sim.compare(*args, budget=50, checkpoint=tmp_path, progress=False)
    # every run of every arm left its chunks: policy i's run r under <i>/run-<r>
    assert sorted(os.listdir(tmp_path)) == ["0", "1"]
    assert sorted(os.listdir(tmp_path / "0")) == ["run-0", "run-1", "run-2"]
    again = sim.compare(*args, budget=50, checkpoint=tmp_path, progress=False)
    np.testing.assert_array_equal(first.studies, again.studies)
    np.testing.assert_array_equal(first.discarded_best, again.discarded_best)
