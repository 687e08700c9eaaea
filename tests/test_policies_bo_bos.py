"""Tests of BO-BOS and GP-UCB (jaxstop.policies.bo_bos).

Oracles: a NumPy Matérn-5/2 GP posterior written below (for C2 and the LCB with
Theorem 1's beta_t), the rules of Algorithm 1 of Dai et al. (2019) replayed from
the table (the summary statistic over epochs 1..n, the incumbent over every
evaluation, K1 schedule via :func:`jaxstop.bos.k1_schedule`, the BOS
problem re-solved with :func:`jaxstop.bos.solve`), and the budget identity of
:func:`jaxstop.sim.run`. Each policy is compiled once (module-scoped fixtures)
and played three ways: a Python loop over the protocol, ``sim.run`` and
``jax.vmap(sim.run)`` over keys; the compiled runs expose every state
(``with_states``), so each program's decisions are checked to be decided by more
than rounding (tests/_oracles.py) before they are compared exactly.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _oracles import U, assert_pick_robust, assert_side_robust, drive, posterior_reach, standardize_reach, with_states
from _oracles import np_posterior as gp_posterior
from jaxstop import bos, sim
from jaxstop.policies.bo_bos import BoBosParams, bo_bos, default_intermediate_epochs, gp_ucb

M, N, N0, D = 12, 16, 4, 2
MAX_EVALS, NUM_INIT = 10, 3
INTER = default_intermediate_epochs(N)
KEYS = jax.random.split(jax.random.key(7), 2)


def make_table():
    """Good configurations (final error 0.2) near (0.3, 0.3), bad ones (0.8) elsewhere."""
    rng = np.random.default_rng(0)
    x = rng.uniform(size=(M, D))
    final = np.where(np.sum((x - 0.3) ** 2, axis=1) > 0.15, 0.8, 0.2)
    t = np.arange(1, N + 1)
    values = final[:, None] + 0.15 * np.exp(-0.4 * t)[None, :] + 0.005 * rng.normal(size=(M, N))
    return x, final, values


X_CAND, FINAL, VALUES = make_table()
TABLE = sim.CurveTable(jnp.asarray(VALUES), None, None, jnp.asarray(X_CAND))
COMMON = dict(max_budget=N, max_evals=MAX_EVALS, num_init=NUM_INIT, gp_fit_steps=5)
BOBOS = bo_bos(X_CAND, n0=N0, num_paths=2000, curve_fit_steps=100, **COMMON)
# Same GP buffer (the same intermediate observations), no early stopping.
UCB = gp_ucb(X_CAND, intermediate_epochs=INTER, **COMMON)
BOBOS_S = with_states(BOBOS)  # sim.run's traces then hold the state after every job


def play(policy, key):
    """The protocol in a Python loop (tests/_oracles.py), one record per job."""
    out = drive(policy, VALUES, np.full(M, N), key, MAX_EVALS, keep_states=True)
    return [dict(step, job=job, result=result, info=info)
            for step, job, result, info in zip(out["steps"], out["jobs"], out["results"], out["infos"])]


@pytest.fixture(scope="module")
def bobos_loop():
    return [play(BOBOS, k) for k in KEYS]


@pytest.fixture(scope="module")
def ucb_loop():
    return [play(UCB, k) for k in KEYS]


@pytest.fixture(scope="module")
def bobos_scan():
    return [sim.run(BOBOS_S, TABLE, k, max_jobs=MAX_EVALS) for k in KEYS]


@pytest.fixture(scope="module")
def bobos_vmap():
    return jax.vmap(lambda k: sim.run(BOBOS_S, TABLE, k, max_jobs=MAX_EVALS))(KEYS)


# ----------------------------------------------------------------------------- NumPy oracles


def np_posterior(state, Xq, theta=None):
    """Latent posterior mean and std of the standardised losses at ``Xq`` (data of
    ``state``, hyperparameters ``theta``, default ``state.gp_params``), and their reach
    between two programs (tests/_oracles.py: posterior_reach, the standardisation's
    rounding carried as a data perturbation)."""
    p = state.gp_params if theta is None else theta
    amp, ls = float(np.exp(p.log_amplitude)), np.exp(np.asarray(p.log_lengthscales))
    noise, mean = float(np.exp(p.log_noise)), float(p.mean)
    m = np.asarray(state.mask)
    X, y = np.asarray(state.X)[m], np.asarray(state.y)[m]
    mu_y = y.mean() if len(y) else 0.0
    sd_y = y.std() if len(y) >= 2 and y.var() > np.finfo(float).tiny else 1.0
    z = (y - mu_y) / sd_y
    if len(y) == 0:
        return np.full(len(Xq), mean), np.full(len(Xq), math.sqrt(amp)), np.zeros(len(Xq)), np.zeros(len(Xq))
    jitter = 10 * np.finfo(float).eps * amp
    mu, var = gp_posterior(X, z, amp, ls, noise, mean, jitter=jitter)(Xq)
    d_mu, d_sd = posterior_reach(X, z, Xq, amp, ls, noise + jitter, mean, dy=standardize_reach(y)[0])
    return mu, np.sqrt(var), d_mu, d_sd


def lcb_of(data_state, theta, t):
    """GP-UCB's LCB at full training over the candidates (inf where evaluated) from the
    data of ``data_state`` and hyperparameters ``theta`` at BO iteration ``t`` (the initial
    points excluded), with Theorem 1's beta_t = 2 log(|D| t^2 pi^2 / (6 delta)), |D| = M N,
    delta = 0.1, unscaled; with its reach: the posterior's, plus sqrt(beta)'s rounding
    (4 u relative) and the subtraction's (2 u)."""
    mu, sd, d_mu, d_sd = np_posterior(data_state, np.concatenate([X_CAND, np.ones((M, 1))], 1), theta)
    sb = math.sqrt(2 * math.log(M * N * t * t * math.pi**2 / (6 * 0.1)))
    lcb = mu - sb * sd
    done = np.asarray(data_state.evaluated)
    reach = d_mu + sb * d_sd + 4 * U * sb * sd + 2 * U * np.abs(lcb)
    return np.where(done, np.inf, lcb), np.where(done, 0.0, reach)


def c2_margin(sd, d_sd, e, kappa=2.0):
    """C2 at epoch ``e``, ``sd[e - 1] >= sd[N - 1] / kappa`` (kappa = 2: the division is
    exact), as a margin and its reach."""
    return sd[e - 1] - sd[N - 1] / kappa, d_sd[e - 1] + d_sd[N - 1] / kappa + 2 * U * sd[e - 1]


DECIDE = jax.jit(jax.vmap(bos.decide, in_axes=(None, 0, 0)))  # bos.decide at many (epoch, running mean)


def c1_actions(table, epochs, running):
    """The BOS actions at (epochs, running means) and their margins against rounding: the
    bins are exact (every program sums the same errors one report at a time, in the same
    order); an action is the argmin of the cell's losses (d2, d1, d0), where d1 and d2
    are exact in the counts and the continuation loss d0 carries backward induction's
    reach (T - 1)(B + 1) eps relative (tests/test_bos.py::assert_tables_agree); a bin no
    path reached is a forced continue, exact in the counts. Returns (actions, margins > reach)."""
    actions = np.asarray(DECIDE(table, np.asarray(epochs), np.asarray(running)))
    edges, losses = np.asarray(table.edges), np.asarray(table.losses)
    b = np.clip(np.sum(np.asarray(running)[:, None] > edges[None, :], axis=1) - 1, 0, len(edges) - 2)
    d2, d1, d0 = np.moveaxis(losses[np.asarray(epochs) - int(table.first_epoch), b], -1, 0)
    reach = (losses.shape[0] - 1) * (losses.shape[1] + 1) * np.finfo(float).eps * np.abs(d0)
    with np.errstate(invalid="ignore"):  # empty bins: inf - inf
        clear = np.abs(d0 - np.minimum(d1, d2)) > reach
    return actions, clear | (actions == bos.ACTION_FORCED_CONTINUE)


def incumbent_of(jobs_before):
    """y*: the lowest loss y_t of every evaluation, early-stopped ones at their last epoch
    (Section 3.2; inf if none)."""
    vals = [float(j["result"].value) for j in jobs_before]
    return min(vals) if vals else math.inf


# ----------------------------------------------------------------------------- tests


def program_states(bobos_loop, bobos_scan, bobos_vmap, s):
    """The state after every job of study ``s`` in each program: loop, scan, vmap."""
    n = len(bobos_loop[s])

    def np_(a):  # NumPy (cheap slicing), but for the PRNG key
        return a if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key) else np.asarray(a)

    scan = jax.tree.map(np_, bobos_scan[s].infos.state)
    vmap = jax.tree.map(lambda a: np_(a[s]), bobos_vmap.infos.state)
    return [[jax.tree.map(np_, r["after"]) for r in bobos_loop[s]],
            [jax.tree.map(lambda a, j=j: a[j], scan) for j in range(n)],
            [jax.tree.map(lambda a, j=j: a[j], vmap) for j in range(n)]]


def assert_decisions_robust(jobs, states):
    """Every decision of one study, in every program (``states``: per program the state after
    each job; the data a job was chosen on are the state after the job before, its
    hyperparameters, C2's stds and BOS table are the state after the job), is decided by
    more than the rounding the programs can differ by (tests/_oracles.py):

    * the LCB's argmin over the unevaluated candidates (the first NUM_INIT picks are the
      largest of uniform draws: bits of jax.random, the same in every program);
    * C2 at every epoch a job reports after N0, and C1's BOS action there (the tables'
      counts are compared exactly across programs: integers);
    * the incumbent compares losses that are table values: exact in every program.
    """
    for j, rec in enumerate(jobs):
        c = int(rec["job"].config)
        if j >= NUM_INIT:
            picks = [lcb_of(st[j - 1], st[j].gp_params, j - NUM_INIT + 1) for st in states]
            got = assert_pick_robust([v for v, _ in picks], [r for _, r in picks], "min", f"LCB of job {j}")
            assert got == c and bool(rec["info"].model_based)
            for st in states[1:]:
                np.testing.assert_array_equal(np.asarray(st[j].table.counts), np.asarray(states[0][j].table.counts))
        if not bool(rec["asked"].bos_active):
            continue
        Xq = np.concatenate([np.repeat(X_CAND[c][None], N, 0), (np.arange(1, N + 1) / N)[:, None]], 1)
        d_sds = [np_posterior(st[j - 1], Xq, st[j].gp_params)[3] for st in states]
        epochs = np.array([e for e, _, _ in rec["reports"] if N0 < e < N])
        running, total = [], 0.0
        for e in range(1, N0 + 1 + len(epochs)):
            total += VALUES[c, e - 1]  # the statistic over epochs 1..e, summed in the policy's order
            if e > N0:
                running.append(total / e)
        cells = [c1_actions(st[j].table, epochs, running) for st in states]
        assert all(np.array_equal(a, cells[0][0]) and np.all(clear) for a, clear in cells), f"C1 of job {j}"
        for e, action in zip(epochs, cells[0][0]):
            margins = [c2_margin(np.asarray(st[j].sigma), d_sd, e) for st, d_sd in zip(states, d_sds)]
            c2 = not assert_side_robust([m for m, _ in margins], [r for _, r in margins], f"C2 of job {j} at {e}")
            stop = rec["reports"][e - 1][1]
            assert stop == (c2 and action == bos.ACTION_STOP)


def test_loop_scan_vmap_agree(bobos_loop, bobos_scan, bobos_vmap):
    """The three programs choose the same candidates, stop the same jobs at the same epochs
    and keep the same incumbent, once every decision is shown to be decided by more than
    rounding in every program. Losses are table values (exact); K1 = K1_init / gamma^(t-1)
    is a power and a division, to 8 eps."""
    for s, (jobs, tr) in enumerate(zip(bobos_loop, bobos_scan)):
        n = len(jobs)
        assert int(tr.num_jobs) == n == MAX_EVALS
        assert_decisions_robust(jobs, program_states(bobos_loop, bobos_scan, bobos_vmap, s))
        configs = [int(j["job"].config) for j in jobs]
        epochs = [int(j["result"].epoch) for j in jobs]
        stopped = [bool(j["result"].stopped) for j in jobs]
        for t in (tr, jax.tree.map(lambda a, s=s: a[s], bobos_vmap)):
            assert np.asarray(t.jobs.config)[:n].tolist() == configs
            assert np.asarray(t.results.epoch)[:n].tolist() == epochs
            assert np.asarray(t.results.stopped)[:n].tolist() == stopped
            np.testing.assert_array_equal(np.asarray(t.results.value)[:n], [float(j["result"].value) for j in jobs])
            assert np.asarray(t.incumbents)[:n].tolist() == [int(j["info"].incumbent) for j in jobs]
            np.testing.assert_allclose(np.asarray(t.infos.k1)[:n], [float(j["info"].k1) for j in jobs],
                                       rtol=8 * np.finfo(float).eps)
            assert int(t.incumbent) == int(jobs[-1]["info"].incumbent)
        assert len(set(configs)) == n  # a candidate is evaluated at most once


def test_stop_decisions_match_oracle(bobos_loop):
    """C1 and C2 replayed with NumPy (the running mean by np.mean, the stds by the NumPy GP
    with the state's hyperparameters), each decided by more than the rounding between
    NumPy and the policy (tests/_oracles.py)."""
    num_stops = num_c1 = 0
    for jobs in bobos_loop:
        for j, rec in enumerate(jobs):
            asked, c = rec["asked"], int(rec["job"].config)
            active = j >= NUM_INIT
            assert bool(asked.bos_active) == active
            # C2's stds at [x, n / N], n = 1..N, from the GP that chose x.
            Xq = np.concatenate([np.repeat(X_CAND[c][None], N, 0), (np.arange(1, N + 1) / N)[:, None]], 1)
            _, sd, _, d_sd = np_posterior(asked, Xq)
            assert np.all(np.abs(np.asarray(asked.sigma) - sd) <= d_sd), (j, np.asarray(asked.sigma) - sd, d_sd)
            if active:
                t = j - NUM_INIT + 1
                np.testing.assert_allclose(float(asked.k1), float(bos.k1_schedule(t, 100.0, 0.95)),
                                           rtol=8 * np.finfo(float).eps)
                best = incumbent_of(jobs[:j])
                assert float(asked.best_error) == (min(max(best, 0.0), 1.0) if math.isfinite(best) else 1.0)
            for e, stop, state in rec["reports"]:
                if not active or e <= N0:
                    assert not stop
                    continue
                assert bool(state.table_ready)
                running = float(np.mean(VALUES[c, :e]))  # Section 3.2: sum_{n'=1}^{n} y_{t,n'} / n
                # np.mean and the policy's running sum round differently: the bin must not change
                edges = np.asarray(state.table.edges)
                assert np.min(np.abs(running - edges)) > 2 * (e + 3) * U * running
                c1 = int(bos.decide(state.table, e, running)) == bos.ACTION_STOP
                margin, reach = c2_margin(sd, d_sd, e)
                c2 = not assert_side_robust(margin, reach, f"C2 of job {j} at epoch {e}")
                expected = c1 and c2 and e < N
                assert stop == expected, (j, e)
                num_c1 += c1
                num_stops += stop
    assert num_stops >= 1 and num_c1 >= num_stops


def test_stored_table_is_the_bos_solution(bobos_loop):
    """The table in the state is bos.solve on the job's first N0 errors, y*, K1 and key."""
    jobs = bobos_loop[0]
    j = next(i for i, r in enumerate(jobs) if bool(r["result"].stopped))
    rec = jobs[j]
    c = int(rec["job"].config)
    state = rec["reports"][N0 - 1][2]
    best = incumbent_of(jobs[:j])
    table = bos.solve(rec["asked"].bos_key, jnp.asarray(VALUES[c, :N0]), best, N,
                      float(bos.k1_schedule(j - NUM_INIT + 1, 100.0, 0.95)), 99.0, 1.0,
                      num_paths=2000, fit_steps=100)
    np.testing.assert_array_equal(np.asarray(state.table.actions), np.asarray(table.actions))
    np.testing.assert_array_equal(np.asarray(state.table.counts), np.asarray(table.counts))


def test_gp_ucb_never_stops_and_picks_the_lcb_minimum(ucb_loop):
    num_model = 0
    for jobs in ucb_loop:
        evaluated = set()
        for j, rec in enumerate(jobs):
            c = int(rec["job"].config)
            assert c not in evaluated
            assert not any(stop for _, stop, _ in rec["reports"])
            assert not bool(rec["result"].stopped) and int(rec["result"].epoch) == N
            if j >= NUM_INIT:
                asked = rec["asked"]
                lcb, reach = lcb_of(asked, asked.gp_params, j - NUM_INIT + 1)
                assert np.isinf(lcb[sorted(evaluated)]).all() and bool(rec["info"].model_based)
                # the NumPy LCB and the policy's round differently: its argmin must be clear of that
                assert c == assert_pick_robust(lcb, reach, "min", f"LCB of job {j}")
                num_model += 1
            evaluated.add(c)
    assert num_model >= 2 * (MAX_EVALS - NUM_INIT) - 2


def test_budget_accounting(bobos_loop, ucb_loop, bobos_vmap):
    spent = np.asarray(bobos_vmap.budget)
    active = np.asarray(bobos_vmap.active)
    assert spent.tolist() == np.sum(np.where(active, np.asarray(bobos_vmap.results.epoch), 0), axis=1).tolist()
    for jobs_b, jobs_u, total in zip(bobos_loop, ucb_loop, spent):
        b = sum(int(r["result"].epoch) for r in jobs_b)
        u = sum(int(r["result"].epoch) for r in jobs_u)
        assert b == int(total)
        assert u == N * MAX_EVALS
        assert b < u
        # Only configurations that end worse than the incumbent are stopped here.
        for r in jobs_b:
            if bool(r["result"].stopped):
                assert FINAL[int(r["job"].config)] == 0.8
        inc = int(jobs_b[-1]["info"].incumbent)
        assert FINAL[inc] == 0.2


def test_gp_data_hold_the_intermediate_observations(bobos_loop):
    state = bobos_loop[0][-1]["after"]
    X, y, mask = np.asarray(state.X), np.asarray(state.y), np.asarray(state.mask)
    K = len(INTER)
    for i, rec in enumerate(bobos_loop[0]):
        c, n_t = int(rec["job"].config), int(rec["result"].epoch)
        rows = slice(i * (K + 1), (i + 1) * (K + 1))
        want = [e for e in INTER if e < n_t]
        got_mask = mask[rows]
        assert got_mask[:K].tolist() == [e < n_t for e in INTER] and bool(got_mask[K])
        np.testing.assert_allclose(y[rows][got_mask], [VALUES[c, e - 1] for e in want] + [VALUES[c, n_t - 1]])
        np.testing.assert_allclose(X[rows][got_mask][:, -1], [e / N for e in want] + [n_t / N])
        np.testing.assert_allclose(X[rows][got_mask][:, :-1], np.repeat(X_CAND[c][None], len(want) + 1, 0))
    assert not mask[len(bobos_loop[0]) * (K + 1):].any()


def test_dtype_follows_and_defaults():
    pol = bo_bos(X_CAND.astype(np.float32), max_budget=50, max_evals=4, dtype=jnp.float32)
    state = pol.init(jax.random.key(0))
    assert state.X.dtype == state.y.dtype == state.table.losses.dtype == jnp.float32
    p = pol.default_params()
    assert p.kappa.dtype == jnp.float32 and p.num_init.dtype == jnp.int32
    got = [p.kappa, p.k1_init, p.k1_gamma, p.k2, p.cost]
    assert [float(a) for a in got] == [float(np.float32(v)) for v in (2, 100, 0.95, 99, 1)]
    assert default_intermediate_epochs(50) == (1, 10, 20, 30, 40)
    assert default_intermediate_epochs(100) == (1, 20, 40, 60, 80)
    assert UCB.report is not None and gp_ucb(X_CAND, max_budget=N, max_evals=3).report is None


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n0=N), "n0"),
        (dict(n0=N + 3), "n0"),
        (dict(kappa=0.0), "kappa"),
        (dict(kappa=-1.0), "kappa"),
        (dict(intermediate_epochs=(0, 5)), "intermediate_epochs"),
        (dict(intermediate_epochs=(5, N)), "intermediate_epochs"),
        (dict(intermediate_epochs=(3, 3)), "intermediate_epochs"),
        (dict(max_evals=0), "max_evals"),
        (dict(k1_gamma=1.5), "k1_gamma"),
        (dict(k1_init=0.0), "k1_init"),
        (dict(loss_lo=1.0, loss_hi=0.5), "loss_hi"),
        (dict(mode="fast"), "mode"),
        (dict(beta="scaled"), "beta"),
        (dict(incumbent="best"), "incumbent"),
        (dict(statistic="mean"), "statistic"),
        (dict(num_init=-1), "num_init"),
        (dict(num_paths=0), "num_paths"),
        (dict(max_budget=1), "max_budget"),
    ],
)
def test_bad_inputs_raise(kwargs, match):
    args = dict(max_budget=N, max_evals=5)
    args.update(kwargs)
    with pytest.raises((ValueError, TypeError), match=match):
        bo_bos(X_CAND, **args)


def test_bad_candidates_and_params_raise():
    with pytest.raises(ValueError, match="candidates"):
        bo_bos(X_CAND + 1.0, max_budget=N, max_evals=5)
    with pytest.raises(ValueError, match="candidates"):
        gp_ucb(X_CAND[:, 0], max_budget=N, max_evals=5)
    with pytest.raises(TypeError, match="intermediate_epochs"):
        bo_bos(X_CAND, max_budget=N, max_evals=5, intermediate_epochs=(1.5,))
    p = BOBOS.default_params()
    with pytest.raises(ValueError, match="kappa"):
        BOBOS.init(jax.random.key(0), p._replace(kappa=jnp.asarray(0.0)))
    with pytest.raises(TypeError, match="params"):
        BOBOS.init(jax.random.key(0), dict(p._asdict()))
    assert isinstance(p, BoBosParams)
