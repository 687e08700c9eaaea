"""Tests of the successive-halving family: SH / SH+, HB / HB+, BOHB / BOHB+, SS / SS+.

Oracles: NumPy replays of the documented rules written below (textbook successive
halving for the plain versions; the same rounds with ``confidence.keep_count`` as the
keep rule for the UQ versions; sub-sampling duels with ``scipy.stats.norm``), the
closed-form schedule, and the budget identity ``spent + unspent = total``. Every
policy is compiled once (module-level cache) and played three ways.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from _compiles import count_compilations
from _oracles import drive
from jaxstop import confidence, policies, sim
from jaxstop.policies import halving
from jaxstop.policies.subsampling import subsampling

N, T, ETA, WINDOW = 27, 27, 3, 10
KINDS = ("sh", "hyperband", "bohb", "subsampling")
CASES = [(k, uq) for k in KINDS for uq in (False, True)]


def make_table(seed, ragged, min_length=8, max_length=T):
    """Crossing exponential-decay curves with noise; ragged curves end at min_length..max_length epochs."""
    rng = np.random.default_rng(seed)
    t = np.arange(1, T + 1)
    final = rng.uniform(0.1, 0.5, N)
    amp = rng.uniform(0.2, 1.0, N)
    rate = rng.uniform(0.05, 0.5, N)
    values = final[:, None] + amp[:, None] * np.exp(-rate[:, None] * t) + 0.02 * rng.normal(size=(N, T))
    lengths = rng.integers(min_length, max_length + 1, N) if ragged else np.full(N, T)
    mask = t[None, :] <= lengths[:, None]
    configs = rng.uniform(size=(N, 2))
    # Always pass a mask so both tables share one compiled program.
    return sim.CurveTable(np.where(mask, values, np.nan), mask, None, configs), lengths


FULL, FULL_LEN = make_table(1, ragged=False)
RAGGED, RAGGED_LEN = make_table(2, ragged=True)
# Curves of 1-2 epochs: brackets run out of trainable members before their last rung and
# must hand over to the next bracket's first round.
SHORT, SHORT_LEN = make_table(3, ragged=True, min_length=1, max_length=2)
TABLES = {"full": (FULL, FULL_LEN), "ragged": (RAGGED, RAGGED_LEN), "short": (SHORT, SHORT_LEN)}
KEYS = jax.random.split(jax.random.key(11), 3)


@functools.cache
def make_policy(kind, uq):
    if kind == "sh":
        return halving.sh(N, T, ETA, uq)
    if kind == "hyperband":
        return halving.hyperband(N, T, ETA, uq)
    if kind == "bohb":
        return halving.bohb(N, T, ETA, uq, candidates=FULL.configs)
    return subsampling(N, T, ETA, uq)


def schedule(kind, uq):
    return halving.halving_schedule(kind, N, T, ETA, uq)


# One scan length for every policy (a bound for all of them): the steps after
# termination do nothing, and the test's own key splitting compiles once.
MAX_JOBS = max(schedule(k, uq).max_jobs for k, uq in CASES)


@functools.cache
def batch_run(kind, uq, table_name):
    table = TABLES[table_name][0]
    p = make_policy(kind, uq)
    trace = jax.vmap(lambda k: sim.run(p, table, k, max_jobs=MAX_JOBS))(KEYS)
    return jax.tree_util.tree_map(np.asarray, trace)  # NumPy: cheap slicing in the checks


@functools.cache
def single_run(kind, uq, table_name, i):
    table = FULL if table_name == "full" else RAGGED
    return jax.tree_util.tree_map(np.asarray, sim.run(make_policy(kind, uq), table, KEYS[i], max_jobs=MAX_JOBS))


@functools.cache
def python_loop(kind, uq, table_name, i, keep_states=False):
    """The protocol driven by hand, call by call, with NumPy table lookups (tests/_oracles.py)."""
    table = FULL if table_name == "full" else RAGGED
    out = drive(make_policy(kind, uq), np.asarray(table.values), np.asarray(table.mask).sum(1), KEYS[i], MAX_JOBS,
                keep_states=keep_states)
    assert not any(bool(r.stopped) for r in out["results"])  # no halving policy stops a job in report
    out["jobs"] = [(int(j.config), int(j.start), int(j.budget)) for j in out["jobs"]]
    out["states"] = [(s["told"], s["after"]) for s in out["steps"]]
    return out


def trace_jobs(tr, n):
    return list(zip(np.asarray(tr.jobs.config)[:n].tolist(), np.asarray(tr.jobs.start)[:n].tolist(),
                    np.asarray(tr.jobs.budget)[:n].tolist()))


def job_rounds(tr):
    """Global round index of every job (the state's round before the job was asked)."""
    rounds = np.asarray(tr.infos.round)
    return np.concatenate([[0], rounds[:-1]])


# --------------------------------------------------------------------------
# NumPy references


def np_window(h, window):
    """(sigma, delta) of a loss history as documented: std (ddof=1) of the last
    `window` losses, and the previous window's std minus it (0 if either has < 2)."""
    def std(x):
        x = x[-window:]
        return np.std(x, ddof=1) if len(x) >= 2 else None
    now = std(h)
    prev = std(h[:-1]) if len(h) >= 1 else None
    delta = 0.0 if (now is None or prev is None) else prev - now
    return (0.0 if now is None else now), delta


def ref_halving(sched, values, lengths, first_configs, uq, max_budget=T, window=WINDOW, min_sigma=1e-6):
    """Round-by-round replay: textbook SH for the plain rule, keep_count for UQ."""
    jobs, spent, unspent = [], 0, 0
    inc = (-1, np.inf, -1)  # (level, value, config)
    decisions = []

    def better(level, value, cfg):
        nonlocal inc
        if np.isfinite(value) and (level > inc[0] or (level == inc[0] and value < inc[1])):
            inc = (level, value, cfg)

    for b, br in enumerate(sched.brackets):
        cfg = list(first_configs[b])
        n0 = len(cfg)
        assert n0 == br.sizes[0]
        epochs = np.zeros(n0, int)
        complete = np.zeros(n0, bool)
        mu = np.full(n0, np.inf)
        hist = [[] for _ in range(n0)]
        member = np.ones(n0, bool)
        pending = member.copy()
        e, carry = br.round_budgets[0] // n0, 0
        for i in range(len(br.sizes)):
            for slot in np.flatnonzero(pending):
                c = cfg[slot]
                start, budget = epochs[slot], epochs[slot] + e
                end = min(budget, lengths[c])
                st = min(start, end)
                hist[slot].extend(values[c, st:end].tolist())
                jobs.append((c, int(start), int(budget)))
                spent += end - st
                unspent += e - (end - st)
                epochs[slot] = end
                mu[slot] = values[c, end - 1]
                complete[slot] |= (end < budget) or (end >= max_budget)
                better(br.budgets[i], mu[slot], c)
            if i == len(br.sizes) - 1:
                unspent += carry
                break
            rb = br.round_budgets[i + 1] + carry
            key = np.where(member, mu, np.inf)
            rank = np.empty(n0, int)
            rank[np.argsort(key, kind="stable")] = np.arange(n0)
            keep = member & (rank < br.sizes[i + 1])
            fallback = True
            if uq:
                fallback = any(len(hist[s]) < 2 for s in np.flatnonzero(member))
                if not fallback:
                    sig = np.array([max(np_window(np.array(h), window)[0], min_sigma) for h in hist])
                    dlt = np.array([np_window(np.array(h), window)[1] for h in hist])
                    # padded to N candidates (masked): one compiled shape for every bracket
                    pad = lambda x, fill: np.concatenate([x, np.full(N - n0, fill)])  # noqa: E731
                    res = confidence.keep_count(pad(np.where(member, mu, 0.0), 0.0), pad(np.where(member, sig, 1.0), 1.0),
                                                pad(np.where(member, dlt, 0.0), 0.0), float(rb),
                                                mask=pad(member, False).astype(bool))
                    keep = np.asarray(res.keep)[:n0] & member
            trainable = keep & ~complete
            key = np.where(trainable, mu, np.inf)
            rank = np.empty(n0, int)
            rank[np.argsort(key, kind="stable")] = np.arange(n0)
            drop = trainable & (rank >= rb)
            keep, trainable = keep & ~drop, trainable & ~drop
            decisions.append((int(keep.sum()), fallback, rb))
            ktr = int(trainable.sum())
            room = min([max_budget - epochs[s] for s in np.flatnonzero(trainable)], default=max_budget)
            e = min(rb // ktr, room) if ktr else 0
            carry = rb - e * ktr
            member, pending = keep, trainable & (e > 0)
            done_keep = np.flatnonzero(keep & complete)
            if len(done_keep):
                s = done_keep[np.argmin(mu[done_keep])]
                better(br.budgets[i + 1], mu[s], cfg[s])
            if not pending.any():  # nobody can train: the later rounds are empty
                unspent += carry + sum(br.round_budgets[i + 2:])
                if len(done_keep):
                    better(br.budgets[-1], mu[s], cfg[s])
                break
    return dict(jobs=jobs, spent=spent, unspent=unspent, incumbent=inc[2], decisions=decisions)


def ref_subsampling(values, lengths, configs, uq, total, step, max_budget=T, window=WINDOW,
                    min_sigma=1e-6, threshold=0.9):
    n = len(configs)
    epochs = np.zeros(n, int)
    complete = np.zeros(n, bool)
    mu = np.full(n, np.inf)
    hist = [[] for _ in range(n)]
    jobs, spent = [], 0
    pending = list(range(n))

    def leader():
        return min(range(n), key=lambda i: (-epochs[i], mu[i], i))

    while True:
        for slot in pending:
            c = configs[slot]
            start = epochs[slot]
            budget = start + min(step, max_budget - start, total - spent)
            end = min(budget, lengths[c])
            st = min(start, end)
            hist[slot].extend(values[c, st:end].tolist())
            jobs.append((c, int(start), int(budget)))
            spent += end - st
            epochs[slot] = end
            mu[slot] = values[c, end - 1]
            complete[slot] |= (end < budget) or (end >= max_budget)
            if spent >= total:
                return dict(jobs=jobs, spent=spent, incumbent=configs[leader()])
        m = leader()
        trainable = ~complete
        sig = np.array([max(np_window(np.array(h), window)[0], min_sigma) if len(h) >= 2 else 0.0 for h in hist])
        wins = []
        for i in range(n):
            if i == m or not trainable[i]:
                continue
            if uq and len(hist[i]) >= 2 and len(hist[m]) >= 2:
                p = norm.cdf((mu[m] - mu[i]) / np.hypot(sig[i], sig[m]))
                win = p >= threshold
            else:
                win = mu[i] < mu[m]
            if win:
                wins.append(i)
        if not wins:
            if trainable[m]:
                wins = [m]
            elif trainable.any():
                cand = np.flatnonzero(trainable)
                wins = [int(cand[np.argmin(mu[cand])])]
            else:
                return dict(jobs=jobs, spent=spent, incumbent=configs[leader()])
        pending = wins


# --------------------------------------------------------------------------
# three ways


@pytest.mark.parametrize("kind, uq", CASES)
def test_loop_scan_vmap_agree(kind, uq):
    """Python loop == sim.run (jit + scan) == vmap over keys, on ragged curves."""
    batch = batch_run(kind, uq, "ragged")
    ref = python_loop(kind, uq, "ragged", 0)
    n = len(ref["jobs"])
    assert ref["stop_job"] == n - 1 and n <= schedule(kind, uq).max_jobs, "must terminate within max_jobs"
    runs = [single_run(kind, uq, "ragged", 0), jax.tree_util.tree_map(lambda a: a[0], batch)]
    for tr in runs:
        assert int(tr.stop_job) == ref["stop_job"]
        assert trace_jobs(tr, n) == ref["jobs"]
        assert np.asarray(tr.results.epoch)[:n].tolist() == ref["epochs"]
        assert int(tr.budget) == ref["spent"]
        assert int(tr.incumbent) == ref["incumbent"]
    # the other keys: sim.run == vmap, without retracing
    with count_compilations() as compiled:
        for i in range(1, len(KEYS)):
            one = single_run(kind, uq, "ragged", i)
            chex.assert_trees_all_equal(one, jax.tree_util.tree_map(lambda a: a[i], batch))
    assert compiled["_run"] == 0


@pytest.mark.parametrize("kind", ["sh", "hyperband", "bohb"])
@pytest.mark.parametrize("uq", [False, True])
@pytest.mark.parametrize("table_name", ["full", "ragged", "short"])
def test_halving_matches_numpy_replay(kind, uq, table_name):
    """Every job (config, start, budget), the budget and the incumbent equal a NumPy
    replay of the rules, given the configurations each bracket sampled. For the plain
    versions on full curves this is textbook successive halving; for the UQ versions
    the keep counts come from confidence.keep_count on NumPy window statistics."""
    table, lengths = TABLES[table_name]
    values = np.asarray(table.values)
    sched = schedule(kind, uq)
    batch = batch_run(kind, uq, table_name)
    for i in range(len(KEYS)):
        tr = jax.tree_util.tree_map(lambda a: a[i], batch)
        n = int(tr.num_jobs)
        rounds = job_rounds(tr)[:n]
        configs = np.asarray(tr.jobs.config)[:n]
        firsts, g = [], 0
        for br in sched.brackets:
            firsts.append(configs[rounds == g])
            g += len(br.sizes)
        ref = ref_halving(sched, values, lengths, firsts, uq)
        assert trace_jobs(tr, n) == ref["jobs"]
        assert int(tr.budget) == ref["spent"]
        assert int(tr.incumbent) == ref["incumbent"]
        assert int(tr.infos.unspent[n - 1]) == ref["unspent"]
        decisions = np.asarray(tr.infos.decisions)[:n]
        if uq and decisions.max() <= 1:  # no round was skipped: one decision per tell
            got = [(int(k), bool(f), int(r)) for d, k, f, r in zip(
                decisions, tr.infos.kept[:n], tr.infos.fallback[:n], tr.infos.round_budget[:n]) if d == 1]
            assert got == ref["decisions"]


def test_plain_sh_is_textbook_successive_halving():
    """On full curves: rung i trains the best floor(n_{i-1}/eta) of rung i-1 from its
    checkpoint r_{i-1} up to r_i, and the run returns the best config of the last rung."""
    values = np.asarray(FULL.values)
    (br,) = schedule("sh", False).brackets
    assert br.sizes == (27, 9, 3, 1) and br.budgets == (1, 3, 9, 27)
    batch = batch_run("sh", False, "full")
    for i in range(len(KEYS)):
        tr = jax.tree_util.tree_map(lambda a: a[i], batch)
        jobs = trace_jobs(tr, int(tr.num_jobs))
        alive = [c for c, _, _ in jobs[:27]]
        assert len(set(alive)) == 27
        pos, prev = 27, 1
        for n_i, r_i in zip(br.sizes[1:], br.budgets[1:]):
            alive = sorted(alive, key=lambda c: values[c, prev - 1])[:n_i]
            rung = jobs[pos: pos + n_i]
            assert sorted(c for c, _, _ in rung) == sorted(alive)
            assert all(s == prev and b == r_i for _, s, b in rung)
            pos, prev = pos + n_i, r_i
        assert pos == len(jobs)
        assert int(tr.incumbent) == alive[0]
        assert int(tr.budget) == 27 * 1 + 9 * 2 + 3 * 6 + 1 * 18


@pytest.mark.parametrize("kind", ["sh", "hyperband", "bohb"])
def test_budget_accounting_identical(kind):
    """Both versions release the same round budgets: spent + unspent equals the plain
    schedule's budget for both, the plain version spends all of it on full curves, and
    the UQ version never spends more."""
    total = schedule(kind, False).total_budget
    assert schedule(kind, True).total_budget == total
    for table_name in ("full", "ragged"):
        plain = batch_run(kind, False, table_name)
        plus = batch_run(kind, True, table_name)
        for tr in (plain, plus):
            last = np.asarray(tr.num_jobs) - 1
            spent = np.asarray(tr.budget)
            unspent = np.asarray(tr.infos.unspent)[np.arange(len(KEYS)), last]
            np.testing.assert_array_equal(spent + unspent, total)
            np.testing.assert_array_equal(np.asarray(tr.infos.spent)[np.arange(len(KEYS)), last], spent)
        if table_name == "full":
            np.testing.assert_array_equal(np.asarray(plain.budget), total)
        assert np.all(np.asarray(plus.budget) <= total)


@pytest.mark.parametrize("uq", [False, True])
@pytest.mark.parametrize("table_name", ["full", "ragged"])
def test_subsampling_matches_numpy_replay(uq, table_name):
    table, lengths = (FULL, FULL_LEN) if table_name == "full" else (RAGGED, RAGGED_LEN)
    sched = schedule("subsampling", uq)
    assert sched.total_budget == schedule("sh", False).total_budget and sched.step == 1
    batch = batch_run("subsampling", uq, table_name)
    for i in range(len(KEYS)):
        tr = jax.tree_util.tree_map(lambda a: a[i], batch)
        n = int(tr.num_jobs)
        first = np.asarray(tr.jobs.config)[: sched.num_start]
        ref = ref_subsampling(np.asarray(table.values), lengths, first, uq, sched.total_budget, sched.step)
        assert trace_jobs(tr, n) == ref["jobs"]
        assert int(tr.budget) == ref["spent"]
        assert int(tr.incumbent) == ref["incumbent"]
        if table_name == "full":
            assert int(tr.budget) == sched.total_budget  # equal budget for SS and SS+


def test_uq_keep_counts_agree_with_keep_count_on_state():
    """At every UQ decision, the kept set is confidence.keep_count applied to the
    state's mu / sigma / delta (sigma = windowed std of the buffered losses, which are
    the table's last window + 1 losses of each candidate)."""
    values = np.asarray(FULL.values)
    run = python_loop("sh", True, "full", 0, keep_states=True)
    params = make_policy("sh", True).default_params()
    checked = 0
    for (before, after), info in zip(run["states"], run["infos"]):
        cnt = np.minimum(np.asarray(after.count), WINDOW + 1)
        for slot in np.flatnonzero(np.asarray(after.count) > 0):
            c, t = int(after.configs[slot]), int(after.epochs[slot])
            np.testing.assert_array_equal(np.asarray(after.recent)[slot, : cnt[slot]],
                                          values[c, t - cnt[slot]: t])
        std = confidence.window_std(after.recent, jnp.asarray(cnt), WINDOW)
        dlt = confidence.window_delta_sigma(after.recent, jnp.asarray(cnt), WINDOW)
        has = np.asarray(after.count) >= 2
        np.testing.assert_allclose(np.asarray(after.sigma)[has],
                                   np.maximum(np.asarray(std)[has], float(params.min_sigma)), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(after.delta)[has], np.asarray(dlt)[has], rtol=1e-10, atol=1e-15)
        if int(info.decisions) != 1 or bool(info.fallback):
            continue
        members = np.asarray(before.member)
        res = confidence.keep_count(np.where(members, after.mu, 0.0), np.where(members, after.sigma, 1.0),
                                    np.where(members, after.delta, 0.0), float(info.round_budget), mask=members)
        assert int(res.k) <= int(info.round_budget)  # the epoch cap does not bind here
        np.testing.assert_array_equal(np.asarray(after.member), np.asarray(res.keep))
        assert int(info.kept) == int(res.k)
        assert float(info.tau) == pytest.approx(float(res.tau), abs=1e-12)
        checked += 1
    assert checked >= 2


def test_schedule_closed_forms():
    s = halving.halving_schedule("sh", 81, 81)
    (br,) = s.brackets
    assert br.sizes == (81, 27, 9, 3, 1) and br.budgets == (1, 3, 9, 27, 81)
    assert br.round_budgets == (81, 54, 54, 54, 54) and s.total_budget == 297 and s.max_jobs == 121
    hb = halving.halving_schedule("hyperband", 1000, 81)
    # Li et al. (2017), Algorithm 1: n = ceil((s_max + 1) eta^s / (s + 1)), r = R eta^-s
    assert [b.sizes[0] for b in hb.brackets] == [81, 34, 15, 8, 5]
    assert [b.budgets[0] for b in hb.brackets] == [1, 3, 9, 27, 81]
    assert hb.brackets[1].sizes == (34, 11, 3, 1)
    assert hb.total_budget == sum(sum(b.round_budgets) for b in hb.brackets)
    # non-powers round half up; the last rung is max_budget
    assert halving.halving_schedule("sh", 365, 100).brackets[0].budgets == (1, 4, 11, 33, 100)
    assert halving.halving_schedule("sh", 10, 27, 3, min_budget=3).brackets[0].budgets == (3, 9, 27)
    assert halving.halving_schedule("sh", 10, 27).brackets[0].sizes == (10, 3, 1, 1)
    assert halving.halving_schedule("hyperband", 5, 27).brackets[0].sizes[0] == 5  # clipped
    assert halving.halving_schedule("sh", 27, 1).brackets[0].budgets == (1,)
    assert halving.halving_schedule("sh", 27, 27, uq=True).max_jobs >= 40


def test_uq_differs_from_plain_and_dtypes():
    """The UQ rule is not a no-op on crossing curves, and float32 stays float32."""
    plain = batch_run("sh", False, "full")
    plus = batch_run("sh", True, "full")
    assert not np.array_equal(np.asarray(plain.jobs.config), np.asarray(plus.jobs.config))
    assert plus.infos.incumbent_value.dtype == jnp.float64
    p32 = halving.sh(N, T, ETA, True, dtype=jnp.float32)
    st = p32.init(jax.random.key(0), p32.default_params())
    assert st.mu.dtype == jnp.float32 and st.recent.dtype == jnp.float32
    assert p32.default_params().threshold.dtype == jnp.float32


@pytest.mark.parametrize(
    "make, err, match",
    [
        (lambda: halving.sh(27, 27, eta=1), ValueError, "eta must be >= 2"),
        (lambda: halving.hyperband(27, 27, eta=2.5), TypeError, "eta must be an int"),
        (lambda: halving.sh(27, 0), ValueError, "max_budget must be >= 1"),
        (lambda: halving.sh(0, 27), ValueError, "num_configs must be >= 1"),
        (lambda: halving.bohb(0, 27, candidates=np.zeros((0, 2))), ValueError, "num_configs must be >= 1"),
        (lambda: subsampling(27, 27, eta=0), ValueError, "eta must be >= 2"),
        (lambda: subsampling(27, -1), ValueError, "max_budget must be >= 1"),
        (lambda: halving.sh(27, 27, min_budget=28), ValueError, "min_budget must be <= max_budget"),
        (lambda: halving.sh(27, 27, num_start=28), ValueError, "num_start must be <= num_configs"),
        (lambda: halving.sh(27, 27, uq=True, window=1), ValueError, "window must be >= 2"),
        (lambda: halving.sh(27, 27, keep_rule="max"), ValueError, "keep_rule must be one of"),
        (lambda: halving.bohb(27, 27, candidates=None), ValueError, "bohb needs candidates"),
        (lambda: halving.bohb(27, 27, candidates=np.zeros((26, 2))), ValueError, "num_configs \\(27\\) must equal"),
        (lambda: halving.bohb(27, 27, candidates=np.full((27, 2), 2.0)), ValueError, "unit cube"),
        (lambda: halving.halving_schedule("asha", 27, 27), ValueError, "kind must be one of"),
        (lambda: halving.halving_schedule("sh", 27, 27, budget=10), ValueError, "subsampling only"),
        (lambda: subsampling(27, 27, step=28), ValueError, "step must be <= max_budget"),
    ],
)
def test_bad_inputs_raise(make, err, match):
    with pytest.raises(err, match=match):
        make()
