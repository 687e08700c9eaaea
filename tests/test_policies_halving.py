"""Tests of the successive-halving family: SH / SH+, HB / HB+, BOHB / BOHB+, SS / SS+.

Oracles: NumPy replays of the documented rules written below (textbook successive
halving for the plain versions; the same rounds with ``confidence.keep_count`` as the
keep rule for the UQ versions; sub-sampling duels with ``scipy.stats.norm``; BOHB's
proposals from its density ratio), the closed-form schedule, and the budget identity
``spent + unspent = total``. Every policy is compiled once (module-level cache) and
played three ways. The replays also check that each decision they replay is decided by
more than the rounding two programs can differ by, so that the programs' decisions can
be compared exactly.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import norm

from _compiles import count_compilations
from _oracles import U, assert_pick_robust, assert_side_robust, drive, mean_std_reach
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
    """The policies these replays model: the UQ versions with the window estimate of
    Delta sigma (no profiling jobs; the default profile estimate is tested in
    tests/test_uq_profile.py)."""
    if kind == "sh":
        return halving.sh(N, T, ETA, uq, delta_estimate="window")
    if kind == "hyperband":
        return halving.hyperband(N, T, ETA, uq, delta_estimate="window")
    if kind == "bohb":
        return halving.bohb(N, T, ETA, uq, candidates=FULL.configs, delta_estimate="window")
    return subsampling(N, T, ETA, uq)


def schedule(kind, uq):
    return halving.halving_schedule(kind, N, T, ETA, uq, num_profile=0)


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


# --------------------------------------------------------------------------
# Rounding reach of the decisions. The Python loop of jitted steps, sim.run (lax.scan),
# its vmap and the NumPy replays below are different programs; their discrete decisions
# are compared exactly once every decision is shown, from the replay's numbers, to be
# decided by more than the rounding two programs can differ by.
#
# Exact in every program (no margin needed): the ranks of the plain rule, the incumbent
# and sub-sampling's leader compare losses that are table values, bit for bit the same in
# every program (ties too: broken by slot index everywhere); counts, budgets and the
# uniform draws of rows (bits of jax.random) are integers or exact. The floats the
# decisions are made on are the windowed sigma / delta, and from them keep_count's
# probabilities, SS+'s duel probability and BOHB's density ratios.


def window_reach(h, window):
    """Reach of ``np_window(h, window)``'s (sigma, delta) between two programs: each std
    from :func:`mean_std_reach`; delta = prev - now adds both and its subtraction."""
    std = lambda x: mean_std_reach(x[-window:], ddof=1)[2] if len(x) >= 2 else 0.0  # noqa: E731
    now, prev = std(h), std(h[:-1])
    _, delta = np_window(h, window)
    return now, (now + prev + 4 * U * abs(delta)) if len(h) >= 3 else 0.0


# keep_count's own reach between two programs for problems of N candidates: probabilities
# to 2 (15 N + 420) eps relative (tests/test_confidence.py::p_rtol derives it).
KEEP_RTOL = 2 * (15 * N + 420) * np.finfo(float).eps


def uq_keep(mu, sig, dlt, reach, rb, member):
    """keep_count's keep mask for one round (padded to N candidates: one compiled shape),
    asserted to be decided by more than rounding; returns (keep, tau, tau's reach).

    Inputs that two programs round differently: sigma (relative rho_i = dsigma_i / sigma_i)
    and delta (``reach``: (dsigma, ddelta) per slot, from :func:`window_reach`).

    Probabilities (jaxstop.confidence's quadrature): p_i integrates
    ``phi(z_i) / sigma_i prod_j S(z_j)`` over x in [a, b], b = min_j(mu_j + 9 sigma_j), a sum
    of positive node terms (at N = 27 the whole rule is evaluated: no node is skipped).
    Candidates with mu_j - 9 sigma_j >= b get exactly 0; one that is outside (or inside)
    by more than rounding is so in every program. There z_j <= 9 for every j, so
    d log S(z_j) / d log sigma_j = h(z_j) z_j <= 10 * 9, and d log(phi(z_i) / sigma_i) /
    d log sigma_i = z_i^2 - 1 <= Z_i^2 (Z_i: the window's farthest point in sigma_i): p_i moves
    by at most rel_i = Z_i^2 rho_i + 90 sum_{j != i} rho_j relatively, plus the
    normalisation's sum_j p_j rel_j, plus KEEP_RTOL. The leader curves of zeta (values <= 1,
    the leader's window within 9 of its mean) move by 90 times the sum of the top k rho's,
    for sigma and for the shrunk sigma' = max(sigma - delta, 1e-3 sigma) (moved by
    dsigma + ddelta); zeta by both plus 2 KEEP_RTOL; gain is R zeta / (k (k - 1)).

    k* maximises F(k) = sum_{j > k} (gain_j - cost_j): every other k must trail by more than
    the reach of the terms between, unless all costs between are robust zeros (then both
    k give the same count and tau). The count is 1 + #{k: 1 - P_k > 1 - P_k*}: every tail
    sum must differ from 1 - P_k* by more than its reach, or by robust zeros only.
    """
    n0 = len(mu)
    pad = lambda x, fill: np.concatenate([x, np.full(N - n0, fill)])  # noqa: E731
    res = confidence.keep_count(pad(np.where(member, mu, 0.0), 0.0), pad(np.where(member, sig, 1.0), 1.0),
                                pad(np.where(member, dlt, 0.0), 0.0), float(rb), mask=pad(member, False).astype(bool))
    nv, ks = int(res.num_valid), int(res.k_star)
    o = np.asarray(res.order)[:nv]
    m, s, d = mu[o], sig[o], dlt[o]
    ds, dd = reach[o, 0], reach[o, 1]
    cost, gain = np.asarray(res.cost)[:nv], np.asarray(res.gain)[:nv]
    top = np.argmin(m + 9 * s)
    b, a = m[top] + 9 * s[top], np.min(m - 9 * s)
    side = (m - 9 * s) - b  # >= 0: outside the window
    robust = np.abs(side) > 9 * (ds + ds[top]) + 8 * U * (np.abs(m) + np.abs(b) + 9 * (s + s[top]))
    assert np.all(robust), "a candidate sits on the edge of the quadrature's window"
    zero = side >= 0
    assert np.all(cost[zero] == 0) and np.all(cost[~zero] > 0), "keep_count's zeros are not the window's"
    rho, rho_shrunk = ds / s, (ds + dd + 2 * U * s) / np.maximum(s - d, 1e-3 * s)
    far = np.maximum(np.abs(a - m), np.abs(b - m)) / s
    rel = far**2 * rho + 90 * (np.sum(rho[~zero]) - rho)
    e_cost = (rel + np.sum(cost * rel) + KEEP_RTOL) * cost
    k = np.arange(1, nv + 1)
    e_zeta = 2 * KEEP_RTOL + 90 * (np.cumsum(rho) + np.cumsum(rho_shrunk))
    e_gain = np.where(k >= 2, rb / np.maximum(k * (k - 1), 1) * e_zeta, 0.0)
    net = np.where(k >= 2, gain - cost, 0.0)
    f = np.append(np.cumsum(net[::-1])[::-1][1:], 0.0)  # F(k) at k - 1
    after = np.append(np.cumsum(cost[::-1])[::-1][1:], 0.0)  # 1 - P_k
    for kk in k[k != ks]:
        sl = slice(min(kk, ks), max(kk, ks))  # the terms between k and k*
        flat = bool(zero[sl].all())
        assert flat or f[ks - 1] - f[kk - 1] > (e_cost[sl] + e_gain[sl]).sum() + 2 * nv * U * np.abs(net).sum(), \
            f"k* = {ks} within rounding of k = {kk}"
        assert flat or cost[sl].sum() > e_cost[sl].sum() + 2 * nv * U * (after[kk - 1] + after[ks - 1]), \
            f"the keep count sits on a knife edge at k = {kk} (k* = {ks})"
    return np.asarray(res.keep)[:n0], float(res.tau), e_cost[:ks].sum() + 2 * nv * U


def duel_wins(mu_i, mu_m, sig_i, sig_m, ds_i, ds_m, threshold):
    """SS+'s duel ``Phi((mu_m - mu_i) / hypot(sigma_i, sigma_m)) >= threshold``, asserted
    to be decided by more than rounding: z moves by |z| times the relative reach of the
    hypot ((ds_i + ds_m) / hypot from the sigmas, 6 u from hypot and the division in two
    programs; the difference of two table values rounds alike everywhere), Phi by
    phi(z) times that plus its own 8 u relative."""
    s = np.hypot(sig_i, sig_m)
    z = (mu_m - mu_i) / s
    p = norm.cdf(z)
    reach = norm.pdf(z) * abs(z) * ((ds_i + ds_m) / s + 6 * U) + 8 * U * p
    return not assert_side_robust(p - threshold, reach, f"SS+ duel at p = {p:.6f}")


# The policies' documented default floor on sigma (HalvingParams.min_sigma).
MIN_SIGMA = 2.0**-18


def ref_halving(sched, values, lengths, first_configs, uq, max_budget=T, window=WINDOW, min_sigma=MIN_SIGMA):
    """Round-by-round replay: textbook SH for the plain rule, keep_count for UQ."""
    jobs, spent, unspent = [], 0, 0
    inc = (-1, np.inf, -1)  # (level, value, config)
    decisions, taus = [], []

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
                # sigma needs two losses, the window estimate of delta_sigma a third
                fallback = any(len(hist[s]) < 3 for s in np.flatnonzero(member))
                if not fallback:
                    sig = np.array([max(np_window(np.array(h), window)[0], min_sigma) for h in hist])
                    dlt = np.array([np_window(np.array(h), window)[1] for h in hist])
                    reach = np.array([window_reach(np.array(h), window) for h in hist])
                    keep, tau, d_tau = uq_keep(mu, sig, dlt, reach, rb, member)
                    keep = keep & member
                    taus.append((tau, d_tau))
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
    return dict(jobs=jobs, spent=spent, unspent=unspent, incumbent=inc[2], decisions=decisions, taus=taus)


def ref_subsampling(values, lengths, configs, uq, total, step, max_budget=T, window=WINDOW,
                    min_sigma=MIN_SIGMA, threshold=0.9):
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
        reach = [window_reach(np.array(h), window)[0] for h in hist]
        wins = []
        for i in range(n):
            if i == m or not trainable[i]:
                continue
            if uq and len(hist[i]) >= 2 and len(hist[m]) >= 2:
                win = duel_wins(mu[i], mu[m], sig[i], sig[m], reach[i], reach[m], threshold)
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


def bracket_starts(kind, uq):
    """Global round index of every bracket's first round."""
    return np.cumsum([0] + [len(b.sizes) for b in schedule(kind, uq).brackets])[:-1]


def first_configs(kind, uq, configs, rounds):
    """The configurations each bracket's first round sampled, from a run's jobs and rounds."""
    configs, rounds = np.asarray(configs), np.asarray(rounds)
    return tuple(tuple(configs[rounds == g].tolist()) for g in bracket_starts(kind, uq))


@functools.cache
def replay_halving(kind, uq, table_name, firsts):
    table, lengths = TABLES[table_name]
    return ref_halving(schedule(kind, uq), np.asarray(table.values), lengths, firsts, uq)


@functools.cache
def replay_subsampling(uq, table_name, first):
    table, lengths = TABLES[table_name]
    sched = schedule("subsampling", uq)
    return ref_subsampling(np.asarray(table.values), lengths, first, uq, sched.total_budget, sched.step)


def log_kde(x, data, min_bw):
    """BOHB's log-KDE of ``data`` at ``x`` (bandwidths max(1.06 std n^(-1/(d+4)), min_bw)) and
    its reach between two programs: bw is off by the std's reach (mean_std_reach) and 6 u
    (power, product), rho relatively, which moves s_j = sum_d (-z_jd^2 / 2 - log bw_d) by
    sum_d (z_jd^2 + 1) rho_d, and rounding adds 4 (d + 2) u (1 + |s_j|); the log of the mean
    of exp(s_j) moves by the exp(s_j)-weighted mean of those, and 2 (m + 4) u (1 + |result|)."""
    m, d = data.shape
    stats = [mean_std_reach(col) for col in data.T]
    raw = np.array([1.06 * std * m ** (-1 / (d + 4)) for _, std, _ in stats])
    bw = np.maximum(raw, min_bw)
    rho = np.array([ds / std + 6 * U if std > 0 else 0.0 for _, std, ds in stats]) * raw / bw
    z = (x[:, None, :] - data[None]) / bw
    s = np.sum(-0.5 * z**2 - np.log(bw), axis=-1)
    w = np.exp(s - s.max(1, keepdims=True))
    out = np.log(w.mean(1)) + s.max(1)
    ds = np.sum((z**2 + 1) * rho, axis=-1) + 4 * (d + 2) * U * (1 + np.abs(s))
    return out, (w * ds).sum(1) / w.sum(1) + 2 * (m + 4) * U * (1 + np.abs(out))


def bohb_proposals(configs, values, rounds, i, uq):
    """BOHB's proposals replayed from one run's jobs (the rules in jaxstop.policies.halving's
    docstring), each asserted to be decided by more than rounding; returns the rows proposed.

    The records (row, rung, loss) hold table values and the draws are bits of jax.random
    (the ask keys of sim.run: split(split(key)[1], MAX_JOBS)), the same in every program: the
    model's data, its good / bad split and the choice between a uniform and a model-based
    proposal are exact. Two programs round the uniform draw's Gumbel keys -log(-log u)
    (ordered like u; to 8 u (1 + |key|)) and the density ratios (:func:`log_kde`)."""
    sched, params = schedule("bohb", uq), make_policy("bohb", uq).default_params()
    cand = np.asarray(FULL.configs)
    n_min = cand.shape[1] + 1
    gamma = float(params.top_fraction)
    levels = sorted({r for b in sched.brackets for r in b.budgets})
    level_of = [levels.index(r) for b in sched.brackets for r in b.budgets]
    starts = bracket_starts("bohb", uq)
    keys = jax.random.split(jax.random.split(KEYS[i])[1], MAX_JOBS)
    recs, chosen, proposed = np.zeros((0, 3)), np.zeros(N, bool), []
    for j, (c, v, g) in enumerate(zip(configs, values, rounds)):
        if g in starts:
            if j == 0 or rounds[j - 1] != g:
                chosen[:] = False  # a new bracket
            u = np.asarray(jax.random.uniform(keys[j], (N + 1,), jnp.float64, minval=np.finfo(float).tiny))
            lv, loss = recs[:, 1].astype(int), recs[:, 2]
            counts = np.array([np.sum(lv == k) for k in range(len(levels))])
            usable = counts - np.maximum(n_min, np.floor(gamma * counts)) >= n_min
            if not usable.any() or u[N] < float(params.random_fraction):
                key = np.where(chosen, -np.inf, -np.log(-np.log(u[:N])))
                row = assert_pick_robust(key, np.where(chosen, 0.0, 8 * U * (1 + np.abs(key))), "max",
                                         f"BOHB's uniform draw at job {j}")
            else:
                at = np.flatnonzero(lv == np.flatnonzero(usable).max())  # a non-finite loss counts as inf
                at = at[np.argsort(np.where(np.isfinite(loss[at]), loss[at], np.inf), kind="stable")]
                n_good = max(n_min, int(np.floor(gamma * len(at))))
                n_bad = max(n_min, int(np.floor((1 - gamma) * len(at))))
                data = cand[recs[at, 0].astype(int)]
                lg, rg = log_kde(cand, data[:n_good], float(params.min_bandwidth))
                lb, rb = log_kde(cand, data[n_good:n_good + n_bad], float(params.min_bandwidth))
                row = assert_pick_robust(np.where(chosen, -np.inf, lg - lb), np.where(chosen, 0.0, rg + rb), "max",
                                         f"BOHB's density ratio at job {j}")
            proposed.append(row)
            chosen[c] = True
        recs = np.vstack([recs, [c, level_of[g], v]])
    return proposed


def assert_well_posed(kind, uq, configs, values, rounds, i):
    """Every decision of one run (jobs, their losses and rounds; key ``KEYS[i]``, ragged
    table) is decided by more than rounding: the replays assert it while they replay the
    run. Returns the reach of the run's tau (UQ halving; 0 otherwise)."""
    configs, rounds = np.asarray(configs), np.asarray(rounds)
    if kind == "subsampling":
        replay_subsampling(uq, "ragged", tuple(configs[: schedule(kind, uq).num_start].tolist()))
        return 0.0
    if kind == "bohb":
        fresh = np.isin(rounds, bracket_starts(kind, uq))
        assert bohb_proposals(configs, values, rounds, i, uq) == configs[fresh].tolist()
    ref = replay_halving(kind, uq, "ragged", first_configs(kind, uq, configs, rounds))
    return max([d_tau for _, d_tau in ref["taus"]], default=0.0)


# --------------------------------------------------------------------------
# three ways


@pytest.mark.parametrize("kind, uq", CASES)
def test_loop_scan_vmap_agree(kind, uq):
    """Python loop == sim.run (jit + scan) == vmap over keys, on ragged curves: the jobs,
    epochs, budget and incumbent exactly, once the replays have shown every decision of
    the runs to be decided by more than the rounding the programs can differ by."""
    batch = batch_run(kind, uq, "ragged")
    ref = python_loop(kind, uq, "ragged", 0)
    n = len(ref["jobs"])
    assert ref["stop_job"] == n - 1 and n <= schedule(kind, uq).max_jobs, "must terminate within max_jobs"
    rounds = [0] + [int(info.round) for info in ref["infos"][:-1]]
    assert_well_posed(kind, uq, [c for c, _, _ in ref["jobs"]], [float(r.value) for r in ref["results"]], rounds, 0)
    runs = [single_run(kind, uq, "ragged", 0), jax.tree_util.tree_map(lambda a: a[0], batch)]
    for tr in runs:
        assert int(tr.stop_job) == ref["stop_job"]
        assert trace_jobs(tr, n) == ref["jobs"]
        assert np.asarray(tr.results.epoch)[:n].tolist() == ref["epochs"]
        assert int(tr.budget) == ref["spent"]
        assert int(tr.incumbent) == ref["incumbent"]
    # the other keys: sim.run == vmap, without retracing. Every float of the traces but
    # tau is a table value (losses, incumbent values) and equal exactly; tau (P_k* of the
    # UQ decisions) agrees to the reach the replay gives it.
    with count_compilations() as compiled:
        for i in range(1, len(KEYS)):
            one, other = single_run(kind, uq, "ragged", i), jax.tree_util.tree_map(lambda a: a[i], batch)
            m = int(one.num_jobs)
            d_tau = assert_well_posed(kind, uq, one.jobs.config[:m], one.results.value[:m], job_rounds(one)[:m], i)
            if uq and kind != "subsampling":
                np.testing.assert_allclose(other.infos.tau, one.infos.tau, rtol=0, atol=d_tau)
                one, other = (t._replace(infos=t.infos._replace(tau=None)) for t in (one, other))
            chex.assert_trees_all_equal(one, other)
    assert compiled["_run"] == 0


@pytest.mark.parametrize("kind", ["sh", "hyperband", "bohb"])
@pytest.mark.parametrize("uq", [False, True])
@pytest.mark.parametrize("table_name", ["full", "ragged", "short"])
def test_halving_matches_numpy_replay(kind, uq, table_name):
    """Every job (config, start, budget), the budget and the incumbent equal a NumPy
    replay of the rules, given the configurations each bracket sampled. For the plain
    versions on full curves this is textbook successive halving; for the UQ versions
    the keep counts come from confidence.keep_count on NumPy window statistics (the replay
    asserts that each is decided by more than rounding), and tau agrees to its reach."""
    batch = batch_run(kind, uq, table_name)
    for i in range(len(KEYS)):
        tr = jax.tree_util.tree_map(lambda a: a[i], batch)
        n = int(tr.num_jobs)
        ref = replay_halving(kind, uq, table_name, first_configs(kind, uq, tr.jobs.config[:n], job_rounds(tr)[:n]))
        assert trace_jobs(tr, n) == ref["jobs"]
        assert int(tr.budget) == ref["spent"]
        assert int(tr.incumbent) == ref["incumbent"]
        assert int(tr.infos.unspent[n - 1]) == ref["unspent"]
        decisions = np.asarray(tr.infos.decisions)[:n]
        if uq and decisions.max() <= 1:  # no round was skipped: one decision per tell
            got = [(int(k), bool(f), int(r)) for d, k, f, r in zip(
                decisions, tr.infos.kept[:n], tr.infos.fallback[:n], tr.infos.round_budget[:n]) if d == 1]
            assert got == ref["decisions"]
            taus = [t for d, f, t in zip(decisions, tr.infos.fallback[:n], tr.infos.tau[:n]) if d == 1 and not f]
            assert len(taus) == len(ref["taus"])
            for t, (t_ref, d_tau) in zip(taus, ref["taus"]):
                assert abs(t - t_ref) <= d_tau


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
    sched = schedule("subsampling", uq)
    assert sched.total_budget == schedule("sh", False).total_budget and sched.step == 1
    batch = batch_run("subsampling", uq, table_name)
    for i in range(len(KEYS)):
        tr = jax.tree_util.tree_map(lambda a: a[i], batch)
        n = int(tr.num_jobs)
        ref = replay_subsampling(uq, table_name, tuple(np.asarray(tr.jobs.config)[: sched.num_start].tolist()))
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
