"""BO-BOS against the text of Dai et al. (2019) and its released code, formula by formula.

Oracles are literal NumPy transcriptions written here:

* GP-UCB's width: Theorem 1's ``beta_t = 2 log(|D| t^2 pi^2 / (6 delta))`` under the
  square root of Algorithm 1, line 2, with ``|D| = M N``; the released code's
  ``mean + (0.2 * d * log(2 * iteration)) * std`` (``helper_funcs.UtilityFunction._ucb``,
  ``d`` the dimension of ``[x, n / N]``); ``t`` the BO iteration after the initial points.
* The incumbent ``y*_{t-1} = max_{t' < t} y_{t'}`` over every evaluation, an early-stopped
  one contributing ``y_{t,n_t}`` (Section 3.2, Appendix D), in error terms a minimum.
* The summary statistic ``sum_{n'=1}^{n} y_{t,n'} / n`` (Section 3.2) against the
  released code's ``np.sum(errors[N0:n]) / (n - N0)``.
* ``xi_t`` and ``K_{1,t}`` of Theorems 1-2 with ``t`` counted from the first BO iteration.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _oracles import U, assert_pick_robust, drive, posterior_reach, standardize_reach
from _oracles import np_posterior as gp_posterior
from jaxstop import bos
from jaxstop.policies.bo_bos import bo_bos, gp_ucb

# ----------------------------------------------------------------------------- literal formulas


def paper_beta(t, size, delta):
    """Theorem 1 (and Lemma 1): beta_t = 2 log(|D| t^2 pi^2 / (6 delta))."""
    return 2.0 * math.log(size * t * t * math.pi**2 / (6.0 * delta))


def authors_width(t, d, kappa_scale=0.2):
    """helper_funcs.py, UtilityFunction._ucb: the factor on std, kappa_scale * d * log(2 * iteration)."""
    return kappa_scale * d * math.log(2 * t)


def paper_statistic(errors, n):
    """Section 3.2: sum_{n'=1}^{n} y_{t,n'} / n, summed left to right."""
    total = 0.0
    for e in errors[:n]:
        total += e
    return total / n


def code_statistic(errors, n, n0):
    """The released code: np.sum(errors[num_init_curve:]) / (epoch - num_init_curve + 1), left to right."""
    total = 0.0
    for e in errors[n0:n]:
        total += e
    return total / (n - n0)


def paper_xi(t, noise_var, delta):
    """Theorem 1: xi_1 = 0, xi_t = sqrt(2 sigma^2 log(pi^2 t^2 (t - 1) / (6 delta'')))."""
    return 0.0 if t == 1 else math.sqrt(2 * noise_var * math.log(math.pi**2 * t * t * (t - 1) / (6 * delta)))


# ----------------------------------------------------------------------------- GP-UCB's width

M_UCB, N_UCB, D_UCB, INIT_UCB, EVALS_UCB = 8, 4, 2, 2, 5
X_UCB = np.random.default_rng(3).uniform(size=(M_UCB, D_UCB))
VALUES_UCB = np.linspace(0.2, 0.9, M_UCB)[:, None] + 0.05 * np.exp(-np.arange(1, N_UCB + 1))[None, :]


def np_lcb(state, width):
    """mu - width * sd at [x, 1] from the NumPy GP on the state's data and hyperparameters,
    with the reach between it and the policy (tests/_oracles.py)."""
    p = state.gp_params
    amp, ls = float(np.exp(p.log_amplitude)), np.exp(np.asarray(p.log_lengthscales))
    noise, mean = float(np.exp(p.log_noise)), float(p.mean)
    m = np.asarray(state.mask)
    X, y = np.asarray(state.X)[m], np.asarray(state.y)[m]
    sd_y = y.std() if len(y) >= 2 and y.var() > np.finfo(float).tiny else 1.0
    z = (y - y.mean()) / sd_y
    Xq = np.concatenate([X_UCB, np.ones((M_UCB, 1))], 1)
    jitter = 10 * np.finfo(float).eps * amp
    mu, var = gp_posterior(X, z, amp, ls, noise, mean, jitter=jitter)(Xq)
    d_mu, d_sd = posterior_reach(X, z, Xq, amp, ls, noise + jitter, mean, dy=standardize_reach(y)[0])
    sd = np.sqrt(var)
    lcb = mu - width * sd
    reach = d_mu + width * d_sd + 4 * U * width * sd + 2 * U * np.abs(lcb)
    done = np.asarray(state.evaluated)
    return np.where(done, np.inf, lcb), np.where(done, 0.0, reach)


@pytest.mark.parametrize("beta", ["paper", "authors"])
def test_ucb_width_and_pick_follow_the_chosen_beta(beta):
    """Every model-based pick of GP-UCB uses the chosen width at t = BO iteration (the
    initial points excluded) and is the argmin of mu - width sd by the NumPy GP."""
    policy = gp_ucb(X_UCB, max_budget=N_UCB, max_evals=EVALS_UCB, num_init=INIT_UCB, gp_fit_steps=3, beta=beta)
    out = drive(policy, VALUES_UCB, np.full(M_UCB, N_UCB), jax.random.key(1), EVALS_UCB, keep_states=True)
    widths = np.asarray(out["infos_stacked"].ucb_width)
    assert np.all(np.isnan(widths[:INIT_UCB]))  # the initial points are random draws
    for j in range(INIT_UCB, EVALS_UCB):
        t = j - INIT_UCB + 1
        if beta == "paper":  # Theorem 1 unscaled, |D| = M N, delta = 0.1, under the square root
            want = math.sqrt(paper_beta(t, M_UCB * N_UCB, 0.1))
        else:  # the code's factor on sigma itself, d = dim of [x, n / N]
            want = authors_width(t, D_UCB + 1)
        np.testing.assert_allclose(widths[j], want, rtol=8 * U)  # a log, a sqrt and products
        step = out["steps"][j]
        lcb, reach = np_lcb(step["before"]._replace(gp_params=step["asked"].gp_params), want)
        assert out["configs"][j] == assert_pick_robust(lcb, reach, "min", f"LCB of job {j}")


def test_beta_defaults_and_scale():
    """Defaults: Theorem 1 unscaled (beta_scale 1); the code's 0.2; the scale multiplies
    beta_t under the root ("paper") and the factor itself ("authors")."""
    cand = X_UCB
    assert float(gp_ucb(cand, max_budget=4, max_evals=3).default_params().beta_scale) == 1.0
    assert float(bo_bos(cand, max_budget=4, max_evals=3, n0=2).default_params().beta_scale) == 1.0
    assert float(gp_ucb(cand, max_budget=4, max_evals=3, beta="authors").default_params().beta_scale) == 0.2
    with pytest.raises(ValueError, match="beta"):
        gp_ucb(cand, max_budget=4, max_evals=3, beta="scaled")
    policy = gp_ucb(X_UCB, max_budget=N_UCB, max_evals=EVALS_UCB, num_init=INIT_UCB, gp_fit_steps=3)
    params = policy.default_params()._replace(beta_scale=jnp.asarray(0.2))
    out = drive(policy, VALUES_UCB, np.full(M_UCB, N_UCB), jax.random.key(1), INIT_UCB + 1, params)
    want = math.sqrt(0.2 * paper_beta(1, M_UCB * N_UCB, 0.1))
    np.testing.assert_allclose(out["infos_stacked"].ucb_width[-1], want, rtol=8 * U)


# ----------------------------------------------------------------------------- incumbent, statistic, xi_t

N, N0 = 16, 4
EPOCHS = np.arange(1, N + 1)
# A: completed initial point, final error 0.28. B: flat at 0.30 for N0 epochs, then 0.27: BOS
# (K1 tiny, C2 always true) stops it while its observed y_{t,n_t} = 0.27 already beats 0.28.
# C: asked third, its BOS threshold is y*_2.
VALUES = np.stack([
    0.28 + 0.3 * np.exp(-0.5 * EPOCHS) - 0.3 * np.exp(-0.5 * N),
    np.array([0.31, 0.30, 0.30, 0.30] + [0.27] * (N - N0)),
    0.6 - 0.01 * np.exp(-EPOCHS),
])
CANDS = np.array([[0.1], [0.9], [0.5]])  # B farthest from A: the largest std, the LCB's pick
KW = dict(max_budget=N, max_evals=3, n0=N0, num_init=1, intermediate_epochs=(), num_paths=2000,
          curve_fit_steps=100, gp_fit_steps=3, kappa=1e6, k1_init=1e-3, xi_noise_var=1e-4)


def play(incumbent, statistic=None):
    """The study from a key whose random first pick is A (found by asking; deterministic)."""
    policy = bo_bos(CANDS, incumbent=incumbent, statistic=statistic, **KW)
    for seed in range(20):
        key = jax.random.key(seed)
        k_init, k_loop = jax.random.split(key)
        job, _ = policy.ask(jax.random.split(k_loop, 3)[0], policy.init(k_init))
        if int(job.config) == 0:
            return drive(policy, VALUES, np.full(3, N), key, 3, keep_states=True)
    raise AssertionError("no key draws A first")


@pytest.fixture(scope="module")
def runs():
    return {inc: play(inc) for inc in ("all", "completed")}


def test_incumbent_counts_early_stopped_evaluations(runs):
    """y*_t = min over every evaluation's y_t (early-stopped ones at n_t) by default; over the
    completed ones with incumbent="completed". The BOS threshold of each job is y*_{t-1}."""
    for inc, out in runs.items():
        assert out["configs"] == [0, 1, 2]
        res = out["results"]
        assert not bool(res[0].stopped) and bool(res[1].stopped)  # the scenario: B is stopped ...
        y = [float(r.value) for r in res]
        assert y[1] < y[0]  # ... with an observed error below A's final one
        for j in range(3):
            counted = [(y[i], i) for i in range(j + 1) if inc == "all" or not bool(res[i].stopped)]
            want_value, want_config = min(counted)
            assert float(out["infos"][j].incumbent_value) == want_value
            assert int(out["infos"][j].incumbent) == want_config
            before = [v for v, _ in [(y[i], i) for i in range(j) if inc == "all" or not bool(res[i].stopped)]]
            if j >= 1:  # the BOS solve of job j used y*_{t-1}
                assert float(out["steps"][j]["asked"].best_error) == min(before)
    assert int(runs["all"]["incumbent"]) == 1 and int(runs["completed"]["incumbent"]) == 0


def test_c1_statistic_is_the_mean_over_all_epochs(runs):
    """After each epoch n > N0 the statistic C1 looks up (state.run_sum) is the paper's
    mean of epochs 1..n; with statistic="after_n0" the code's mean of N0+1..n. Sums run
    left to right in both (as written here), so they agree to the last bit."""
    code = play("all", statistic="after_n0")
    for out, stat in ((runs["all"], paper_statistic), (code, lambda e, n: code_statistic(e, n, N0))):
        checked = 0
        for j, step in enumerate(out["steps"]):
            c = out["configs"][j]
            for e, _, state in step["reports"]:
                if j >= 1 and e > N0:
                    assert float(state.run_sum) == stat(VALUES[c], e)
                    checked += 1
        assert checked >= 2
    # the two settings disagree on this curve (B: 0.30 for N0 epochs, then 0.27)
    assert paper_statistic(VALUES[1], N0 + 1) != code_statistic(VALUES[1], N0 + 1, N0)


def test_schedules_count_t_from_the_first_bo_iteration(runs):
    """xi_t and K_{1,t} use Algorithm 1's t: 1 for the first job after the initial point."""
    for j in (1, 2):
        t = j  # num_init = 1
        asked = runs["all"]["steps"][j]["asked"]
        np.testing.assert_allclose(float(asked.xi), paper_xi(t, 1e-4, 0.1), rtol=8 * U, atol=0)
        np.testing.assert_allclose(float(asked.k1), 1e-3 / 0.95 ** (t - 1), rtol=8 * U)
    assert float(runs["all"]["steps"][1]["asked"].xi) == 0.0


# ----------------------------------------------------------------------------- the statistic in BOS


def test_summary_statistic_literal():
    """One curve: the same left-to-right sum and one division, equal bits. A batch of
    curves: XLA:CPU may divide a vector through a reciprocal, within one ulp (eps relative)."""
    rng = np.random.default_rng(0)
    errors = rng.uniform(0.05, 0.95, (5, 12))
    for n0 in (0, 3, 7):
        for n in range(1, 13):
            paper = [paper_statistic(e, n) for e in errors]
            assert [float(bos.summary_statistic(e, n, n0)) for e in errors] == paper
            np.testing.assert_allclose(bos.summary_statistic(errors, n, n0), paper, rtol=np.finfo(float).eps)
            code = [float(bos.summary_statistic(e, n, n0, statistic="after_n0")) for e in errors]
            if n > n0:
                assert code == [code_statistic(e, n, n0) for e in errors]
            else:
                assert np.all(np.isnan(code))
    assert bos.resolve_statistic(None, "corrected") == "all_epochs"
    assert bos.resolve_statistic(None, "compat") == "after_n0"
    with pytest.raises(ValueError, match="statistic"):
        bos.summary_statistic(errors, 4, 2, statistic="mean")


@pytest.mark.parametrize("statistic", ["all_epochs", "after_n0"])
def test_induction_bins_paths_by_the_chosen_statistic(statistic):
    """The table's counts per (epoch, bin) are the histogram of the literal statistic of the
    paths (prefix included or not), and prob the share of each bin's paths beating y*."""
    rng = np.random.default_rng(1)
    P, T, B = 400, 6, 99
    prefix = np.array([0.6, 0.5, 0.45, 0.42])
    k = np.arange(1, T + 1)
    values = rng.uniform(0.1, 0.5, P)[:, None] + 0.1 * np.exp(-0.3 * k)[None, :] + rng.normal(0, 0.02, (P, T))
    mask = rng.random(P) > 0.1
    best = 0.3
    table = bos.backward_induction(values, mask, best, 100.0, 99.0, 1.0, prefix=prefix, statistic=statistic)
    grid = np.linspace(0, 1, B + 1)
    counts = np.zeros((T, B), int)
    wins = np.zeros((T, B), int)
    for i in np.nonzero(mask & np.all((values > 0) & (values < 1), axis=1))[0]:
        curve = np.concatenate([prefix, values[i]])
        for step in range(T):
            n = len(prefix) + step + 1
            s = paper_statistic(curve, n) if statistic == "all_epochs" else code_statistic(curve, n, len(prefix))
            b = np.max(np.nonzero(s > grid)[0])
            counts[step, b] += 1
            wins[step, b] += values[i, -1] < best
    np.testing.assert_array_equal(np.asarray(table.counts), counts)
    np.testing.assert_array_equal(np.asarray(table.prob), np.where(counts > 0, wins / np.maximum(counts, 1), 0))
    other = bos.backward_induction(values, mask, best, 100.0, 99.0, 1.0, prefix=prefix,
                                   statistic="after_n0" if statistic == "all_epochs" else "all_epochs")
    assert not np.array_equal(np.asarray(other.counts), counts)  # the setting matters


def test_solve_default_statistic_by_mode(key):
    """solve's corrected mode bins by the paper's statistic, compat by the code's (the same
    program as naming the statistic: equal bits), and the two statistics bin differently."""
    prefix = np.array([0.6, 0.5, 0.45, 0.42, 0.40, 0.39, 0.385, 0.38])
    kw = dict(num_paths=300, chunk_size=300, fit_steps=50)
    tables = {}
    for mode, statistic in (("corrected", None), ("corrected", "all_epochs"), ("corrected", "after_n0"),
                            ("compat", None), ("compat", "after_n0")):  # three programs
        tables[mode, statistic] = bos.solve(key, prefix, 0.35, 14, 100.0, 99.0, 1.0, mode=mode,
                                            statistic=statistic, **kw)
    for mode, default in (("corrected", "all_epochs"), ("compat", "after_n0")):
        for name in ("counts", "actions", "prob"):
            np.testing.assert_array_equal(np.asarray(getattr(tables[mode, None], name)),
                                          np.asarray(getattr(tables[mode, default], name)))
    assert not np.array_equal(np.asarray(tables["corrected", "all_epochs"].counts),
                              np.asarray(tables["corrected", "after_n0"].counts))


def test_all_epochs_needs_the_prefix():
    values = np.full((10, 3), 0.3)
    with pytest.raises(ValueError, match="prefix"):
        bos.backward_induction(values, np.ones(10, bool), 0.3, 100.0, 99.0, 1.0, n0=8)
    bos.backward_induction(values, np.ones(10, bool), 0.3, 100.0, 99.0, 1.0, n0=8, statistic="after_n0")
    with pytest.raises(ValueError, match="n0"):
        bos.backward_induction(values, np.ones(10, bool), 0.3, 100.0, 99.0, 1.0, n0=3, prefix=[0.5, 0.4])
