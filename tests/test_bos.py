"""Tests for jaxstop.bos against independent oracles.

Oracles: a literal NumPy replay of the released BO-BOS code's ``run_BOS``
(loops over paths and bins, written here the way the authors wrote them), a
literal loop reference of the corrected rules, closed-form GP conditioning,
Monte Carlo moments, scipy maximum likelihood, and closed forms of the
schedules.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st

from _compiles import count_compilations
from jaxstop import bos

# --------------------------------------------------------------------------------------
# Literal references
# --------------------------------------------------------------------------------------


def compat_reference(values, valid, best_error, k1, k2, cost, num_bins=99, min_count=30):
    """The released code's run_BOS after sampling, loop for loop (float64)."""
    samples = values[valid]
    samples = samples[np.all(samples < 1, axis=1)]
    samples = samples[np.all(samples > 0, axis=1)]
    T = samples.shape[1]
    St = np.array([np.cumsum(s) / (np.arange(len(s)) + 1) for s in samples]).reshape(-1, T)
    grid = np.linspace(0, 1, num_bins + 1)
    losses = np.zeros((T, num_bins, 3))
    for step in range(1, T + 1):
        data_t = St[:, step - 1]
        accum = np.zeros(num_bins)
        count = np.zeros(num_bins)
        for i in range(len(data_t)):
            ind_left = np.max(np.nonzero(data_t[i] > grid)[0])
            if samples[i, -1] > best_error:
                accum[ind_left] += 1.0
            count[ind_left] += 1
        for i in range(num_bins):
            if count[i] != 0:
                p = accum[i] / count[i]
                losses[step - 1, i, 0] = k2 * p + cost * step
                losses[step - 1, i, 1] = k1 * (1 - p) + cost * step
            else:
                losses[step - 1, i, 0] = 1e4
                losses[step - 1, i, 1] = 1e4
    step = T - 1
    while step > 0:
        data_t = St[:, step - 1]
        grid_samples = np.zeros(num_bins)
        grid_losses = np.zeros(num_bins)
        for i in range(len(data_t)):
            nxt = np.max(np.nonzero(St[i, step] > grid)[0])
            if step == T - 1:
                loss_continue = np.min(losses[step, nxt, :2])
            else:
                loss_continue = np.min(losses[step, nxt, :])
            cur = np.max(np.nonzero(data_t[i] > grid)[0])
            grid_losses[cur] += loss_continue
            grid_samples[cur] += 1
        for i in range(num_bins):
            if grid_samples[i] > min_count:
                losses[step - 1, i, 2] = grid_losses[i] / grid_samples[i]
            else:
                losses[step - 1, i, 2] = 0
        step -= 1
    actions = np.zeros((T, num_bins))
    for s in range(num_bins):
        actions[-1, s] = np.argmin(losses[-1, s, :2]) + 1
    for step in range(T - 1):
        for s in range(num_bins):
            if losses[step, s, 2] != 0:
                actions[step, s] = np.argmin(losses[step, s, :]) + 1
            else:
                actions[step, s] = 0
    return actions, losses


def corrected_reference(values, valid, best_error, xi, k1, k2, cost, num_bins=99, min_count=30):
    """The paper's rules (Eqs. 2-4) with the corrections, loop for loop."""
    keep = valid & np.all((values > 0) & (values < 1), axis=1)
    samples = values[keep]
    P, T = samples.shape
    grid = np.linspace(0, 1, num_bins + 1)
    bins = np.zeros((P, T), int)
    for i in range(P):
        running = np.cumsum(samples[i]) / (np.arange(T) + 1)
        for k in range(T):
            bins[i, k] = np.max(np.nonzero(running[k] > grid)[0])
    cut = min_count * P / 100_000
    count = np.zeros((T, num_bins))
    wins = np.zeros((T, num_bins))
    for i in range(P):
        for k in range(T):
            count[k, bins[i, k]] += 1
            wins[k, bins[i, k]] += samples[i, -1] < best_error + xi
    prob = np.where(count > 0, wins / np.maximum(count, 1), 0)
    d1 = np.where(count > 0, k1 * prob, np.inf)
    d2 = np.where(count > 0, k2 * (1 - prob), np.inf)
    cont = np.full((T, num_bins), np.inf)
    rho = np.zeros((T, num_bins))
    actions = np.zeros((T, num_bins), int)
    for j in range(num_bins):
        if count[-1, j] > 0:
            rho[-1, j] = min(d2[-1, j], d1[-1, j])
            actions[-1, j] = 2 if d1[-1, j] < d2[-1, j] else 1
    for k in range(T - 2, -1, -1):
        total = np.zeros(num_bins)
        for i in range(P):
            total[bins[i, k]] += rho[k + 1, bins[i, k + 1]]
        for j in range(num_bins):
            if count[k, j] == 0:
                continue
            cont[k, j] = cost + total[j] / count[k, j]
            options = [d2[k, j], d1[k, j], cont[k, j]]
            if count[k, j] > cut:
                rho[k, j] = min(options)
                actions[k, j] = int(np.argmin(options)) + 1
            else:
                rho[k, j] = cont[k, j]
    return actions, np.stack([d2, d1, cont], axis=-1), prob, count


def make_paths(rng, num_paths, T, invalid_frac=0.05, noise=0.02):
    """Decaying curves with noise, some leaving (0, 1), some masked."""
    k = np.arange(1, T + 1)
    level = rng.uniform(0.05, 0.6, num_paths)
    amp = rng.uniform(0.0, 0.5, num_paths)
    rate = rng.uniform(0.05, 0.5, num_paths)
    values = level[:, None] + amp[:, None] * np.exp(-rate[:, None] * k)
    values = values + rng.normal(0.0, noise, (num_paths, T))
    out = rng.random(num_paths) < invalid_frac
    values[out, rng.integers(0, T, out.sum())] = rng.choice([-0.1, 1.2], out.sum())
    valid = rng.random(num_paths) > invalid_frac
    return values, valid


def near_tie(losses, rtol=1e-12):
    """Cells where the continuation loss ties the smaller stopping loss up to rounding.

    The released code sums the next-step losses path by path; at such ties its
    choice is decided by the rounding of that sum (see backward_induction).
    """
    stop = np.min(losses[:-1, :, :2], axis=-1)
    cont = losses[:-1, :, 2]
    tie = (cont != 0) & (np.abs(cont - stop) <= rtol * np.maximum(np.abs(stop), 1.0))
    return np.concatenate([tie, np.zeros((1, losses.shape[1]), bool)])


def literal_bin(v, num_bins):
    grid = np.linspace(0, 1, num_bins + 1)
    return np.max(np.nonzero(v > grid)[0])


EPS = np.finfo(np.float64).eps


def assert_tables_agree(got, ref):
    """Two programs' corrected-mode tables from the same counts (eager / jit / vmap / fused).

    The counts are integers, and ``prob``, ``d1 = k1 prob`` and ``d2 = k2 (1 - prob)`` are
    one or two correctly rounded operations on them: identical in every program. The
    continuation loss ``cont_k = cost + (sum_j C_ij rho_{k+1, j}) / n_i`` sums at most B
    non-negative terms in an order that depends on the program, a relative error of at
    most (B - 1) u, plus one u for the division and one for adding ``cost`` (u = eps / 2),
    on top of ``rho_{k+1}``'s own (a minimum of non-negative losses carries the largest
    relative error of its arguments; ``rho`` at the last step is exact). So ``cont`` at
    step k is within ``(T - 1 - k)(B + 1) u`` of the exact value and two programs differ
    by less than ``(T - 1)(B + 1) eps`` relative (~1e-13 here, where a wrong path or bin
    would move it by percents). An action can then differ only in a cell where ``cont``
    sits within that reach of the smaller stopping loss; there either choice is allowed,
    everywhere else the actions are equal.
    """
    for name in ("counts", "prob", "edges", "first_epoch", "num_valid"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(ref, name)), err_msg=name)
    lg, lr = np.asarray(got.losses), np.asarray(ref.losses)
    np.testing.assert_array_equal(lg[..., :2], lr[..., :2])
    T, B = lr.shape[:2]
    reach = (T - 1) * (B + 1) * EPS
    np.testing.assert_allclose(lg[..., 2], lr[..., 2], rtol=reach, atol=0)
    stop = np.min(lr[..., :2], axis=-1)
    with np.errstate(invalid="ignore"):  # empty bins: inf - inf
        fragile = np.isfinite(lr[..., 2]) & (np.abs(lr[..., 2] - stop) <= reach * np.abs(lr[..., 2]))
    ag, ar = np.asarray(got.actions), np.asarray(ref.actions)
    np.testing.assert_array_equal(ag[~fragile], ar[~fragile])
    either = np.where(lr[..., 1] < lr[..., 0], bos.ACTION_STOP, bos.ACTION_D2)
    ok = (ag == ar) | (ag == either) | (ag == bos.ACTION_CONTINUE)
    assert np.all(ok[fragile])


# --------------------------------------------------------------------------------------
# Compat mode: decision for decision against the released code
# --------------------------------------------------------------------------------------

# Most tests share one problem shape so that compiled code is reused.
P, T = 400, 5


@settings(max_examples=12, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    num_bins=st.sampled_from([99, 20]),
    min_count=st.sampled_from([30, 5, 0]),
    zero_cost=st.booleans(),
)
def test_compat_matches_released_code(seed, num_bins, min_count, zero_cost):
    rng = np.random.default_rng(seed)
    values, valid = make_paths(rng, P, T)
    best = float(np.quantile(values[:, -1], rng.uniform(0.05, 0.95)))
    k1, k2 = rng.uniform(50, 200), rng.uniform(50, 150)
    cost = 0.0 if zero_cost else rng.uniform(0.1, 3.0)
    ref_actions, ref_losses = compat_reference(values, valid, best, k1, k2, cost, num_bins, min_count)
    table = bos.backward_induction(
        values, valid, best, k1, k2, cost, num_bins=num_bins, mode="compat", min_count=min_count
    )
    np.testing.assert_allclose(np.asarray(table.losses), ref_losses, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(np.asarray(table.edges), np.linspace(0, 1, num_bins + 1))
    actions = np.asarray(table.actions)
    ties = near_tie(ref_losses)
    np.testing.assert_array_equal(actions[~ties], ref_actions[~ties])
    # At rounding ties both choices attain the minimum of the reference losses.
    for k, i in np.argwhere(ties & (actions != ref_actions)):
        a = actions[k, i]
        assert a >= 1 and ref_losses[k, i, a - 1] <= np.min(ref_losses[k, i]) * (1 + 1e-12)
    # Ties are exact coincidences (a dense bin whose paths all enter one bin of the next
    # step with the same event share): a few cells of a coarse grid (2 of 100 cells at
    # num_bins=20, T=5 occur), never a sizeable part of the table.
    assert ties.mean() <= 0.05


def test_compat_default_size_and_sparse_bins(rng):
    """1,200 paths over 12 epochs, 99 bins, min_count 30: many sparse and empty bins."""
    values, valid = make_paths(rng, 3 * P, 12)
    best = float(np.median(values[:, -1]))
    ref_actions, ref_losses = compat_reference(values, valid, best, 123.4, 99.0, 1.0)
    table = bos.backward_induction(values, valid, best, 123.4, 99.0, 1.0, mode="compat")
    counts = np.asarray(table.counts)
    assert np.any(counts == 0) and np.any((counts > 0) & (counts <= 30)) and np.any(counts > 30)
    np.testing.assert_array_equal(np.asarray(table.actions), ref_actions)
    np.testing.assert_allclose(np.asarray(table.losses), ref_losses, rtol=1e-12, atol=1e-9)
    assert {0, 1, 2} <= set(np.unique(ref_actions))


@pytest.mark.parametrize("cost", [0.0, 1.0])
def test_compat_deliberate_ties(rng, cost):
    """K1 = K2 and pairs of paths split around the incumbent: P = 0.5 in every bin."""
    values, _ = make_paths(rng, P // 2, T, invalid_frac=0.0)
    best = 0.3
    a, b = values.copy(), values.copy()
    a[:, -1] = best + 1e-7
    b[:, -1] = best - 1e-7
    values = np.concatenate([a, b])
    valid = np.ones(len(values), bool)
    ref_actions, ref_losses = compat_reference(values, valid, best, 100.0, 100.0, cost, 99, 3)
    table = bos.backward_induction(values, valid, best, 100.0, 100.0, cost, mode="compat", min_count=3)
    nonempty = np.asarray(table.counts) > 0
    np.testing.assert_array_equal(np.asarray(table.prob)[nonempty], 0.5)
    np.testing.assert_array_equal(np.asarray(table.actions), ref_actions)
    np.testing.assert_allclose(np.asarray(table.losses), ref_losses, rtol=0, atol=1e-12)
    # d1 == d2 in every bin and the tie goes to d2 (first of [d2, d1, d0]): never stop.
    np.testing.assert_array_equal(ref_losses[..., 0], ref_losses[..., 1])
    assert np.all(ref_actions[-1] == bos.ACTION_D2)
    assert not np.any(ref_actions == bos.ACTION_STOP)
    assert np.any(ref_actions[:-1] == bos.ACTION_D2)


def dense_into_sparse(rng):
    """12 paths in one bin at step 1 that spread over 12 bins at step 2; the rest masked."""
    n = 12
    values = rng.uniform(-1.0, 2.0, (P, T))  # masked rows: garbage
    values[:n, 0] = 0.505
    values[:n, 1:] = (0.505 + 0.02 * (np.arange(n) - n / 2))[:, None]
    valid = np.arange(P) < n
    return values, valid, literal_bin(0.505, 99)


def test_compat_forced_continue_keyed_on_zero_loss(rng):
    """A dense bin whose paths all move into sparse bins gets continuation 0 -> action 0."""
    values, valid, b = dense_into_sparse(rng)
    ref_actions, ref_losses = compat_reference(values, valid, 0.5, 100.0, 99.0, 1.0, 99, 5)
    table = bos.backward_induction(values, valid, 0.5, 100.0, 99.0, 1.0, mode="compat", min_count=5)
    assert int(table.counts[0, b]) == 12  # more than min_count = 5
    assert ref_losses[0, b, 2] == 0 and ref_actions[0, b] == 0
    np.testing.assert_array_equal(np.asarray(table.actions), ref_actions)
    np.testing.assert_allclose(np.asarray(table.losses), ref_losses, rtol=1e-12, atol=1e-9)


def test_compat_no_valid_paths():
    values = np.full((P, T), 1.5)
    valid = np.ones(P, bool)
    ref_actions, ref_losses = compat_reference(values, valid, 0.3, 100.0, 99.0, 1.0)
    table = bos.backward_induction(values, valid, 0.3, 100.0, 99.0, 1.0, mode="compat")
    assert int(table.num_valid) == 0
    np.testing.assert_array_equal(np.asarray(table.actions), ref_actions)
    np.testing.assert_array_equal(np.asarray(table.losses), ref_losses)


def test_single_step(rng):
    values, valid = make_paths(rng, P, 1)
    best = float(np.median(values[:, 0]))
    ref_actions, ref_losses = compat_reference(values, valid, best, 110.0, 99.0, 1.0)
    table = bos.backward_induction(values, valid, best, 110.0, 99.0, 1.0, mode="compat")
    np.testing.assert_array_equal(np.asarray(table.actions), ref_actions)
    np.testing.assert_allclose(np.asarray(table.losses), ref_losses, rtol=1e-12)


# --------------------------------------------------------------------------------------
# Corrected mode
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed, min_count, xi_", [(1, 30, 0.0), (2, 2000, 0.02), (3, 8000, 0.0)])
def test_corrected_matches_loop_reference(seed, min_count, xi_):
    rng = np.random.default_rng(seed)
    values, valid = make_paths(rng, P, T)
    best = float(np.quantile(values[:, -1], 0.4))
    k1, k2, cost = 140.0, 99.0, 1.0
    ref_actions, ref_losses, ref_prob, ref_count = corrected_reference(
        values, valid, best, xi_, k1, k2, cost, 99, min_count
    )
    table = bos.backward_induction(values, valid, best, k1, k2, cost, min_count=min_count, xi=xi_)
    np.testing.assert_array_equal(np.asarray(table.counts), ref_count)
    np.testing.assert_allclose(np.asarray(table.prob), ref_prob, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(table.losses), ref_losses, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(table.actions), ref_actions)


def test_corrected_xi_shifts_the_event(rng):
    values, valid = make_paths(rng, P, T, invalid_frac=0.0)
    best, xi_ = 0.25, 0.03
    shifted = bos.backward_induction(values, valid, best, 100.0, 99.0, 1.0, xi=xi_)
    moved = bos.backward_induction(values, valid, best + xi_, 100.0, 99.0, 1.0)
    chex.assert_trees_all_equal(shifted, moved)
    plain = bos.backward_induction(values, valid, best, 100.0, 99.0, 1.0)
    keep = np.all((values > 0) & (values < 1), axis=1)
    final = values[keep, -1]
    b = np.array([literal_bin(np.cumsum(row)[-1] / len(row), 99) for row in values[keep]])
    # At the last step each bin's prob is the fraction of its paths with final < best + xi.
    for j in np.unique(b):
        in_bin = b == j
        assert float(shifted.prob[-1, j]) == pytest.approx(np.mean(final[in_bin] < best + xi_), abs=1e-15)
        assert float(plain.prob[-1, j]) == pytest.approx(np.mean(final[in_bin] < best), abs=1e-15)
    assert np.any(np.asarray(shifted.prob) != np.asarray(plain.prob))


def test_corrected_sparse_bins_do_not_leak_zero(rng):
    """Dense bin -> sparse bins: compat's continuation is pulled to 0, corrected's is not."""
    values, valid, b = dense_into_sparse(rng)
    cost = 1.0
    mc = 5 * 100_000 / 12  # sparse up to 5 of the 12 valid paths in corrected mode
    compat = bos.backward_induction(values, valid, 0.5, 100.0, 99.0, cost, mode="compat", min_count=5)
    corr = bos.backward_induction(values, valid, 0.5, 100.0, 99.0, cost, min_count=mc)
    assert float(compat.losses[0, b, 2]) == 0.0
    ref_actions, ref_losses, _, _ = corrected_reference(values, valid, 0.5, 0.0, 100.0, 99.0, cost, 99, mc)
    np.testing.assert_allclose(np.asarray(corr.losses), ref_losses, rtol=1e-12)
    np.testing.assert_array_equal(np.asarray(corr.actions), ref_actions)
    # Every non-empty continuation loss is at least the cost of one epoch.
    cont = np.asarray(corr.losses)[:-1, :, 2]
    nonempty = np.asarray(corr.counts)[:-1] > 0
    assert np.all(cont[nonempty] >= cost)
    assert float(corr.losses[0, b, 2]) >= 2 * cost
    assert int(corr.actions[0, b]) != bos.ACTION_FORCED_CONTINUE


def test_corrected_cut_scales_with_num_paths(rng):
    values, valid = make_paths(rng, P, T, invalid_frac=0.0)
    best = float(np.quantile(values[:, -1], 0.3))
    rep = 3
    values3, valid3 = np.tile(values, (rep, 1)), np.tile(valid, rep)
    kw = {"min_count": 2500}  # 10 paths of 400, 30 of 1,200
    one = bos.backward_induction(values, valid, best, 120.0, 99.0, 1.0, **kw)
    three = bos.backward_induction(values3, valid3, best, 120.0, 99.0, 1.0, **kw)
    np.testing.assert_array_equal(np.asarray(three.counts), rep * np.asarray(one.counts))
    # the rest as two programs on the same counts (3 C_ij / 3 n_i is C_ij / n_i up to rounding)
    assert_tables_agree(three._replace(counts=one.counts, num_valid=one.num_valid), one)
    # The released code's absolute cut (30) does not scale: duplicating changes its table.
    c1 = bos.backward_induction(values, valid, best, 120.0, 99.0, 1.0, mode="compat")
    c3 = bos.backward_induction(values3, valid3, best, 120.0, 99.0, 1.0, mode="compat")
    assert np.any(np.asarray(c1.actions) != np.asarray(c3.actions))


def test_corrected_infinite_k1_never_stops(rng):
    values, valid = make_paths(rng, P, T)
    table = bos.backward_induction(values, valid, 0.2, np.inf, 99.0, 1.0, min_count=0)
    assert not np.any(np.asarray(table.actions) == bos.ACTION_STOP)
    nonempty = np.asarray(table.counts) > 0
    assert np.all(np.isinf(np.asarray(table.losses[..., 1])[nonempty]))
    assert np.all(np.isfinite(np.asarray(table.losses[..., 0])[nonempty]))
    assert np.any(np.asarray(table.actions) == bos.ACTION_D2)


# --------------------------------------------------------------------------------------
# Masks, dtypes, jit / vmap
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["compat", "corrected"])
def test_padded_paths_have_no_effect(rng, mode):
    values, valid = make_paths(rng, P, T)
    valid[-100:] = False  # padding
    other = values.copy()
    other[-100:] = rng.uniform(-1.0, 2.0, (100, T))
    other[-100::2] = np.nan
    a = bos.backward_induction(values, valid, 0.3, 100.0, 99.0, 1.0, mode=mode)
    b = bos.backward_induction(other, valid, 0.3, 100.0, 99.0, 1.0, mode=mode)
    chex.assert_trees_all_equal(a, b)
    if mode == "compat":  # and the padded table is the released code's on the real paths
        ref_actions, _ = compat_reference(values[:-100], valid[:-100], 0.3, 100.0, 99.0, 1.0)
        np.testing.assert_array_equal(np.asarray(a.actions), ref_actions)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_follows_input(rng, dtype):
    values, valid = make_paths(rng, P, T)
    values = values.astype(dtype)
    table = bos.backward_induction(values, valid, 0.3, 100.0, 99.0, 1.0, mode="compat")
    for leaf in (table.losses, table.prob, table.edges, table.dropped_variance):
        assert leaf.dtype == dtype
    assert table.actions.dtype == table.counts.dtype == jnp.int32
    ref_actions, _ = compat_reference(values.astype(np.float64), valid, 0.3, 100.0, 99.0, 1.0)
    assert np.mean(np.asarray(table.actions) == ref_actions) > 0.98


def test_edges_are_numpy_linspace():
    for b in (2, 7, 99, 100, 1000):
        np.testing.assert_array_equal(np.asarray(bos._induction.edges(b, jnp.float64)), np.linspace(0, 1, b + 1))


def test_bins_match_literal_rule(rng):
    edges = np.linspace(0, 1, 100)
    v = np.concatenate([rng.random(2000), edges[1:], np.nextafter(edges[1:-1], 2)])
    got = np.asarray(bos._induction.bin_index(jnp.asarray(v), 99))
    np.testing.assert_array_equal(got, [literal_bin(x, 99) for x in v])


def test_jit_vmap_and_no_retrace(rng):
    values, valid = make_paths(rng, P, T)
    bests = jnp.array([0.2, 0.3, 0.4])
    k1s = jnp.array([100.0, 150.0, 300.0])

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(best, k1):
        return bos.backward_induction(values, valid, best, k1, 99.0, 1.0)

    loop = [bos.backward_induction(values, valid, b, k, 99.0, 1.0) for b, k in zip(bests, k1s)]
    jitted = [run(b, k) for b, k in zip(bests, k1s)]  # a second call must not retrace
    batched = jax.vmap(run)(bests, k1s)
    for i in range(3):  # three programs: agree up to the rounding of the continuation sums
        assert_tables_agree(jitted[i], loop[i])
        assert_tables_agree(jax.tree.map(lambda x, i=i: x[i], batched), loop[i])


# --------------------------------------------------------------------------------------
# decide
# --------------------------------------------------------------------------------------


def test_decide_against_table(rng):
    values, valid = make_paths(rng, P, T)
    table = bos.backward_induction(values, valid, 0.3, 100.0, 99.0, 1.0, mode="compat", n0=8)
    decide = jax.jit(bos.decide)
    for _ in range(200):
        epoch = int(rng.integers(7, 16))
        v = float(rng.choice([rng.random(), 0.0, -0.2, 1.0, 1.3]))
        got = int(decide(table, epoch, v))
        if not 9 <= epoch <= 8 + T:
            assert got == bos.ACTION_FORCED_CONTINUE
            continue
        b = 0 if v <= 0 else (98 if v > 1 else literal_bin(v, 99))
        assert got == int(table.actions[epoch - 9, b])
    assert int(decide(table, 10, np.nan)) == bos.ACTION_FORCED_CONTINUE
    epochs = jnp.arange(9, 9 + T)
    means = jnp.asarray(rng.random(T))
    batched = jax.jit(jax.vmap(bos.decide, in_axes=(None, 0, 0)))(table, epochs, means)
    expect = [int(table.actions[e - 9, literal_bin(float(m), 99)]) for e, m in zip(epochs, means)]
    np.testing.assert_array_equal(np.asarray(batched), expect)


# --------------------------------------------------------------------------------------
# Kernel, fit, posterior draws
# --------------------------------------------------------------------------------------


def test_kernel_closed_form():
    n = np.arange(1.0, 11.0)
    for alpha, beta in [(0.3, 0.7), (2.0, 3.0), (50.0, 400.0)]:
        k = bos.ExpDecayKernel(jnp.asarray(alpha), jnp.asarray(beta))
        want = beta**alpha / (n[:, None] + n[None, :] + beta) ** alpha
        np.testing.assert_allclose(np.asarray(k(jnp.asarray(n), jnp.asarray(n))), want, rtol=1e-13)
        np.testing.assert_allclose(np.asarray(k(jnp.asarray(n))), np.diag(want), rtol=1e-13)
        np.testing.assert_allclose(
            np.asarray(k(jnp.asarray(n[:, None]), jnp.asarray(n[:, None]))), want, rtol=1e-13
        )


def _numpy_posterior(alpha, beta, mean, noise, prefix, horizon):
    n0 = len(prefix)
    x, xs = np.arange(1.0, n0 + 1), np.arange(n0 + 1.0, horizon + 1)

    def k(a, b):
        return beta**alpha / (a[:, None] + b[None, :] + beta) ** alpha

    K = k(x, x) + noise * np.eye(n0)
    mu = mean + k(xs, x) @ np.linalg.solve(K, prefix - mean)
    cov = k(xs, xs) - k(xs, x) @ np.linalg.solve(K, k(x, xs))
    return mu, cov


@pytest.mark.parametrize("rank", [None, 8])
def test_posterior_draws_match_analytic(key, rank):
    prefix = np.array([0.7, 0.55, 0.47, 0.43, 0.41, 0.40])
    gp = bos.CurveGP(*map(jnp.asarray, (1.5, 4.0, 0.0, 1e-3, 0.0)))
    horizon, num = 16, 40_000
    mu, cov = _numpy_posterior(1.5, 4.0, 0.0, 1e-3, prefix, horizon)
    m, c = bos.curve_posterior(gp, prefix, horizon)
    np.testing.assert_allclose(np.asarray(m), mu, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(c), cov, atol=1e-11)
    paths = bos.simulate(key, gp, prefix, horizon, num, rank=rank)
    x = np.asarray(paths.values)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(x.mean(0) - mu) <= 4 * sd / np.sqrt(num))
    se = np.sqrt((np.outer(sd**2, sd**2) + cov**2) / num)
    assert np.all(np.abs(np.cov(x.T) - cov) <= 4 * se)
    inside = np.all((x > 0) & (x < 1), axis=1)
    np.testing.assert_array_equal(np.asarray(paths.valid), inside)
    assert 0 < inside.mean() < 1


def test_simulate_float32(key):
    prefix = np.array([0.7, 0.55, 0.47, 0.43], np.float32)
    gp = bos.CurveGP(*(jnp.asarray(v, jnp.float32) for v in (1.5, 4.0, 0.0, 1e-3, 0.0)))
    paths = bos.simulate(key, gp, prefix, 12, 20_000)
    assert paths.values.dtype == jnp.float32
    mu, cov = _numpy_posterior(1.5, 4.0, 0.0, 1e-3, prefix.astype(float), 12)
    x = np.asarray(paths.values, np.float64)
    assert np.all(np.abs(x.mean(0) - mu) <= 4 * np.sqrt(np.diag(cov) / 20_000) + 1e-4)


def _nll(u, x, y, noise):
    """NumPy negative log likelihood in (log rate, log alpha), with gradient."""
    alpha, beta = np.exp(u[1]), np.exp(u[1] - u[0])
    s = x[:, None] + x[None, :]
    K0 = np.exp(-alpha * np.log1p(s / beta))  # beta**alpha / (s + beta)**alpha
    c = scipy.linalg.cho_factor(K0 + noise * np.eye(len(x)), lower=True)
    a = scipy.linalg.cho_solve(c, y)
    val = 0.5 * y @ a + np.log(np.diag(c[0])).sum() + 0.5 * len(x) * np.log(2 * np.pi)
    W = scipy.linalg.cho_solve(c, np.eye(len(x))) - np.outer(a, a)
    q = s / (s + beta)
    d_rate = K0 * (-alpha * q)
    d_alpha = K0 * (-alpha * np.log1p(s / beta) + alpha * q)
    return val, np.array([0.5 * np.sum(W * d_rate), 0.5 * np.sum(W * d_alpha)])


def test_fit_is_maximum_likelihood_and_recovers_parameters(rng):
    """Curves drawn from the model at epochs 1..8 (the paper's N0)."""
    alpha, beta, n = 2.0, 1.0, 8
    x = np.arange(1.0, n + 1)
    L = np.linalg.cholesky(beta**alpha / (x[:, None] + x[None, :] + beta) ** alpha + 1e-3 * np.eye(n))
    ys = (L @ rng.standard_normal((n, 40))).T
    fits = [bos.fit_curve_gp(y) for y in ys]
    bounds = [(np.log(1e-4), np.log(1e2)), (np.log(1e-2), np.log(1e2))]
    for i, (y, fit) in enumerate(zip(ys, fits)):
        truth = _nll(np.array([np.log(alpha / beta), np.log(alpha)]), x, y, 1e-3)[0]
        assert float(fit.nll) <= truth + 1e-9
        if i < 3:
            best = min(
                scipy.optimize.minimize(
                    _nll, np.array(u0), args=(x, y, 1e-3), jac=True, method="L-BFGS-B", bounds=bounds
                ).fun
                for u0 in [(r, a) for r in np.log([1e-3, 1e-1, 10]) for a in np.log([0.1, 10, 100])]
            )
            assert float(fit.nll) <= best + 1e-6
    # With 8 points the likelihood has a ridge along which alpha and beta grow together
    # (the kernel tends to exp(-(alpha / beta)(n + n'))): the rate alpha / beta is
    # recovered well, alpha and beta themselves only roughly.
    log_alpha = np.log([float(f.alpha) for f in fits])
    log_beta = np.log([float(f.beta) for f in fits])
    assert abs(np.median(log_alpha - log_beta) - np.log(alpha / beta)) < 0.3
    assert abs(np.median(log_alpha) - np.log(alpha)) < 1.0
    assert abs(np.median(log_beta) - np.log(beta)) < 1.0


def test_fit_constant_mean():
    zero = bos.fit_curve_gp(PREFIX)
    const = bos.fit_curve_gp(PREFIX, mean="constant")
    assert 0 <= float(const.mean) <= 1 and float(zero.mean) == 0.0
    assert float(const.nll) <= float(zero.nll) + 1e-9
    x = np.arange(1.0, 9.0)
    for gp in (zero, const):  # the reported nll is the NumPy nll at the reported parameters
        u = np.array([np.log(float(gp.alpha) / float(gp.beta)), np.log(float(gp.alpha))])
        assert float(gp.nll) == pytest.approx(_nll(u, x, PREFIX - float(gp.mean), 1e-3)[0], rel=1e-9)


# --------------------------------------------------------------------------------------
# solve / solve_batch
# --------------------------------------------------------------------------------------

PREFIX = np.array([0.62, 0.48, 0.41, 0.37, 0.345, 0.33, 0.32, 0.312])
HORIZON = 8 + T
# num_paths is not a multiple of chunk_size: the padded tail of the last chunk must not count.
SOLVE_KW = {"num_paths": 3 * P, "chunk_size": 500}


def path_reach(gp, prefix, horizon, values, rank):
    """Per path and epoch, how far two programs' draws of the same paths can be apart.

    ``solve`` and ``simulate`` + ``backward_induction`` are different programs: the fit is
    one compiled function (same inputs, same output) but the posterior, its factor and
    the draws ``mean + F z`` round differently. The posterior comes from a Cholesky
    factor of ``Kw = K + noise I``, exact for ``Kw + E`` with ``||E|| <= c n eps ||Kw||``
    (c = 4), so with ``r = c n kappa(Kw) eps`` the mean moves by ``r ||k_s|| ||alpha||``
    and the covariance by ``r ||Kss||`` (as in tests/test_gp.py); the symmetric
    eigensolver adds ``c T eps ||C||``; two programs: twice that, ``dC``. Column i of F,
    ``sqrt(lambda_i) v_i``, then moves by ``sqrt(lambda_i) sqrt(2) dC / gap_i``
    (Davis-Kahan) plus ``dC / sqrt(lambda_i)`` (Weyl), and a path by the sum over the
    drawn directions weighted by its |z_i| (recovered from the path). This needs the
    drawn directions' eigenvalues separated by much more than dC, hence ``rank=3`` in
    the test (the covariance's 4th and 5th eigenvalues, 1e-9 and 1e-12, sit near dC).
    """
    n0, T = len(prefix), horizon - len(prefix)
    alpha, beta, mean0, noise = (float(a) for a in (gp.alpha, gp.beta, gp.mean, gp.noise_var))
    x, xs = np.arange(1.0, n0 + 1), np.arange(n0 + 1.0, horizon + 1)

    def k(a, b):
        return beta**alpha / (a[:, None] + b[None, :] + beta) ** alpha

    Kw = k(x, x) + noise * np.eye(n0)
    r = 4 * n0 * np.linalg.cond(Kw) * EPS
    mean, cov = _numpy_posterior(alpha, beta, mean0, noise, prefix, horizon)
    d_mean = 2 * r * np.linalg.norm(k(xs, x), axis=1) * np.linalg.norm(np.linalg.solve(Kw, prefix - mean0))
    lam, V = np.linalg.eigh(cov)
    dC = 2 * (r * np.linalg.norm(k(xs, xs), 2) + 4 * T * EPS * lam[-1])
    top = np.arange(T - rank, T)
    gaps = np.array([np.min(np.abs(np.delete(lam, i) - lam[i])) for i in top])
    assert np.all(gaps > 100 * dC), "drawn directions not separated"
    col = np.sqrt(lam[top]) * np.sqrt(2) * dC / (gaps - dC) + dC / np.sqrt(lam[top])
    z = (values - mean) @ V[:, top] / np.sqrt(lam[top])  # (paths, rank)
    return d_mean + 1.01 * (np.abs(z) @ col)[:, None] + 4 * T * EPS, dC  # (paths, T), scalar


def assert_table_of_paths(table, gp, paths, prefix, horizon, best_error, rank, **induction):
    """``table`` (from a solve program) is the table of ``paths`` (drawn by ``simulate`` from ``gp``).

    Both programs draw the same paths up to rounding (:func:`path_reach`): no path may sit
    within that reach of (0, 1)'s ends, the event threshold or a bin edge of its running
    mean (checked here: otherwise the two could legitimately count it differently), so
    both count every path alike, and the tables are the same counts' tables
    (:func:`assert_tables_agree`). Returns ``dC`` of :func:`path_reach`.
    """
    n0 = len(prefix)
    # solve's default statistic (corrected mode): the paper's mean of epochs 1..n, prefix included
    ref = bos.backward_induction(paths.values, paths.valid, best_error, **induction, prefix=prefix)
    v = np.asarray(paths.values)
    reach, dC = path_reach(gp, prefix, horizon, v, rank)
    assert np.all(np.minimum(np.abs(v), np.abs(1 - v)) > reach)
    assert np.all(np.abs(v[:, -1] - best_error) > reach[:, -1])
    # the statistic's reach: at most the running mean of the paths' reaches (the prefix is
    # the same data in both programs) plus the sums' rounding, bounded as before
    running = (np.sum(prefix) + np.cumsum(v, axis=1)) / (n0 + np.arange(1, v.shape[1] + 1))
    run_reach = np.maximum.accumulate(reach, axis=1) + (n0 + np.arange(1, v.shape[1] + 1)) * EPS
    to_edge = np.min(np.abs(running[..., None] - np.linspace(0, 1, 100)), axis=-1)
    assert np.all(to_edge[np.asarray(paths.valid)] > run_reach[np.asarray(paths.valid)])
    assert_tables_agree(table, ref)
    return dC


def test_solve_equals_fit_simulate_induction(key):
    rank = 3  # see path_reach
    table = bos.solve(key, PREFIX, 0.3, HORIZON, 100.0, 99.0, 1.0, rank=rank, **SOLVE_KW)
    gp = bos.fit_curve_gp(PREFIX)
    paths = bos.simulate(key, gp, PREFIX, HORIZON, 3 * P, rank=rank, chunk_size=500)
    dC = assert_table_of_paths(table, gp, paths, PREFIX, HORIZON, 0.3, rank, k1=100.0, k2=99.0, cost=1.0)
    lam = np.linalg.eigvalsh(_numpy_posterior(float(gp.alpha), float(gp.beta), float(gp.mean),
                                              float(gp.noise_var), PREFIX, HORIZON)[1])
    # the dropped share: each eigenvalue within dC (Weyl), the sum's rounding below T eps
    tol = 2 * len(lam) * (dC + EPS * lam[-1]) / lam.sum()
    assert abs(float(table.dropped_variance) - lam[:-rank].sum() / lam.sum()) <= tol
    assert float(table.dropped_variance) > 0
    assert int(table.first_epoch) == 9
    counts = np.asarray(table.counts)
    assert np.all(counts.sum(1) == int(table.num_valid))
    assert int(table.num_valid) == int(np.sum(np.asarray(paths.valid)))
    assert 0.5 * 3 * P < int(table.num_valid) <= 3 * P


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_solve_dtype_and_no_retrace(key, dtype):
    prefix = PREFIX.astype(dtype)
    t1 = bos.solve(key, prefix, 0.3, HORIZON, 100.0, 99.0, 1.0, **SOLVE_KW)
    key2, prefix2 = jax.random.key(1), prefix * 0.9
    with count_compilations() as compiled:  # new values, same shapes: nothing compiles
        t2 = bos.solve(key2, prefix2, 0.25, HORIZON, 130.0, 99.0, 0.5, **SOLVE_KW)
    assert compiled.total() == 0, compiled
    for t in (t1, t2):
        assert t.losses.dtype == t.prob.dtype == t.edges.dtype == dtype
        assert t.actions.dtype == jnp.int32


def test_solve_batch_matches_loop(key):
    prefixes = np.stack([PREFIX, PREFIX * 0.8, PREFIX[::-1] * 0.5 + 0.2, PREFIX * 0.9])
    best = np.array([0.3, 0.2, 0.25, 0.28])
    k1 = np.array([100.0, 200.0, 105.0, 120.0])
    keys = jax.random.split(key, 4)
    # batch_size=1: every trial runs solve's own program (isolated fit and solve): equal bits.
    tables = bos.solve_batch(key, prefixes, best, HORIZON, k1, 99.0, 1.0, batch_size=1, **SOLVE_KW)
    assert tables.actions.shape == (4, T, 99)
    for i in range(4):
        one = bos.solve(keys[i], prefixes[i], best[i], HORIZON, k1[i], 99.0, 1.0, **SOLVE_KW)
        chex.assert_trees_all_equal(jax.tree.map(lambda a, i=i: a[i], tables), one)
    # batch_size=2: groups of two trials are vectorised, the fit included; each trial's
    # table is then the table of the paths simulate draws from the vectorised fit (the
    # fit is an isolated piece: jax.vmap of it over the same group computes the same
    # bits), up to the rounding reach of the vectorised posterior and draws.
    # (A rising prefix, trial 2 above, has a posterior too ill-conditioned for this bound
    # to place its paths: some lie within its reach of a bin edge. Decaying ones here.)
    prefixes[2] = PREFIX * 0.7
    rank = 3  # see path_reach
    vec = bos.solve_batch(key, prefixes, best, HORIZON, k1, 99.0, 1.0, batch_size=2, rank=rank, **SOLVE_KW)
    fits = [jax.vmap(bos.fit_curve_gp)(prefixes[g:g + 2]) for g in (0, 2)]
    for i in range(4):
        gp = jax.tree.map(lambda a, i=i: a[i % 2], fits[i // 2])
        paths = bos.simulate(keys[i], gp, prefixes[i], HORIZON, 3 * P, rank=rank, chunk_size=500)
        assert_table_of_paths(jax.tree.map(lambda a, i=i: a[i], vec), gp, paths, prefixes[i], HORIZON,
                              best[i], rank, k1=k1[i], k2=99.0, cost=1.0)


# --------------------------------------------------------------------------------------
# Schedules
# --------------------------------------------------------------------------------------


def test_k1_schedule_recursion():
    want, k = [], 100.0
    for _ in range(1, 30):
        want.append(k)
        k = k / 0.95
    np.testing.assert_allclose(np.asarray(bos.k1_schedule(np.arange(1, 30), 100.0, 0.95)), want, rtol=1e-12)
    assert float(bos.k1_schedule(1, 100.0, 0.95)) == 100.0
    assert bos.k1_schedule(jnp.arange(1, 5), 100.0, 1.0).tolist() == [100.0] * 4


def test_xi_closed_form():
    t = np.arange(1, 50)
    got = np.asarray(bos.xi(t, 1e-3, 0.1))
    want = np.where(t > 1, np.sqrt(2e-3 * np.log(np.pi**2 * t**2 * np.maximum(t - 1, 1) / 0.6)), 0.0)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got[0] == 0.0 and np.all(np.diff(got[1:]) > 0)
    # float32 inputs whose xi fits though pi^2 t^2 (t - 1) or 2 noise_var log(...) does not:
    # the same closed form, in float64 (a few float32 roundings apart)
    for t_, nv in ((3.0, 1e38), (1e30, 1e-4)):
        got32 = float(bos.xi(jnp.float32(t_), jnp.float32(nv), jnp.float32(0.1)))
        want64 = np.sqrt(nv) * np.sqrt(2 * (np.log(np.pi**2 / 0.6) + 2 * np.log(t_) + np.log(t_ - 1)))
        np.testing.assert_allclose(got32, want64, rtol=16 * np.finfo(np.float32).eps)


# --------------------------------------------------------------------------------------
# Bad inputs
# --------------------------------------------------------------------------------------


def test_bad_inputs(key):
    values, valid = np.full((10, 3), 0.5), np.ones(10, bool)
    with pytest.raises(ValueError, match="horizon"):
        bos.solve(key, PREFIX, 0.3, 8, 100.0, 99.0, 1.0)
    gp = bos.CurveGP(*map(jnp.asarray, (1.0, 2.0, 0.0, 1e-3, 0.0)))
    with pytest.raises(ValueError, match="horizon"):
        bos.simulate(key, gp, PREFIX, 5, 10)
    with pytest.raises(ValueError, match="prefix"):
        bos.solve(key, np.array([0.5, 1.2, 0.4]), 0.3, 10, 100.0, 99.0, 1.0)
    with pytest.raises(ValueError, match="prefix"):
        bos.solve(key, np.array([0.5, 0.0, 0.4]), 0.3, 10, 100.0, 99.0, 1.0)
    with pytest.raises(ValueError, match="prefixes"):
        bos.solve_batch(key, np.array([[0.5, 0.4], [0.5, -0.1]]), 0.3, 10, 100.0, 99.0, 1.0)
    with pytest.raises(ValueError, match="k1"):
        bos.solve(key, PREFIX, 0.3, 10, 0.0, 99.0, 1.0)
    with pytest.raises(ValueError, match="k1"):
        bos.backward_induction(values, valid, 0.3, -5.0, 99.0, 1.0)
    with pytest.raises(ValueError, match="k1"):
        bos.backward_induction(values, valid, 0.3, np.inf, 99.0, 1.0, mode="compat")
    with pytest.raises(ValueError, match="num_bins"):
        bos.backward_induction(values, valid, 0.3, 100.0, 99.0, 1.0, num_bins=1)
    with pytest.raises(ValueError, match="num_bins"):
        bos.solve(key, PREFIX, 0.3, 10, 100.0, 99.0, 1.0, num_bins=1)
    with pytest.raises(ValueError, match="best_error"):
        bos.backward_induction(values, valid, 1.5, 100.0, 99.0, 1.0)
    with pytest.raises(ValueError, match="mode"):
        bos.backward_induction(values, valid, 0.3, 100.0, 99.0, 1.0, mode="paper")
    with pytest.raises(ValueError, match="mask"):
        bos.backward_induction(values, valid[:5], 0.3, 100.0, 99.0, 1.0)
    with pytest.raises(ValueError, match="values"):
        bos.backward_induction(values[0], valid, 0.3, 100.0, 99.0, 1.0)
    with pytest.raises(ValueError, match="cost"):
        bos.backward_induction(values, valid, 0.3, 100.0, 99.0, -1.0)
    with pytest.raises(ValueError, match="delta"):
        bos.xi(3, 1e-3, 1.5)
    with pytest.raises(ValueError, match="gamma"):
        bos.k1_schedule(3, 100.0, 1.5)


# --------------------------------------------------------------------------------------
# mask (the deprecated valid=), the ok status of results
# --------------------------------------------------------------------------------------


def test_backward_induction_mask_and_deprecated_valid(rng):
    values, valid = make_paths(rng, P, T)
    table = bos.backward_induction(values, valid, 0.3, 100.0, 99.0, 1.0)
    by_name = bos.backward_induction(values, mask=valid, best_error=0.3, k1=100.0, k2=99.0, cost=1.0)
    chex.assert_trees_all_equal(by_name, table)
    with pytest.warns(DeprecationWarning, match="mask"):
        old = bos.backward_induction(values, valid=valid, best_error=0.3, k1=100.0, k2=99.0, cost=1.0)
    chex.assert_trees_all_equal(old, table)
    with pytest.raises(TypeError, match="both"):
        bos.backward_induction(values, valid, 0.3, 100.0, 99.0, 1.0, valid=valid)
    with pytest.raises(TypeError, match="mask"):
        bos.backward_induction(values, best_error=0.3, k1=100.0, k2=99.0, cost=1.0)
    with pytest.raises(TypeError, match="mask must be boolean"):
        bos.backward_induction(values, valid.astype(int), 0.3, 100.0, 99.0, 1.0)


@pytest.mark.parametrize("mode", ["compat", "corrected"])
def test_decision_table_ok(rng, mode):
    values, valid = make_paths(rng, P, T)
    table = bos.backward_induction(values, valid, 0.3, np.inf if mode == "corrected" else 100.0, 99.0, 1.0,
                                   mode=mode)
    assert bool(table.ok)  # infinite losses (empty bins, k1 = inf) are allowed
    assert np.any(np.isinf(np.asarray(table.losses))) == (mode == "corrected")
    none = bos.backward_induction(values, np.zeros(P, bool), 0.3, 100.0, 99.0, 1.0, mode=mode)
    assert int(none.num_valid) == 0 and not bool(none.ok)
    assert not bool(table._replace(losses=table.losses.at[2, 5, 1].set(np.nan)).ok)
    assert not bool(table._replace(dropped_variance=jnp.asarray(np.nan)).ok)
    # per trial for a batch of tables, and under jit
    batched = jax.tree.map(lambda a, b: jnp.stack([a, b]), table, none)
    np.testing.assert_array_equal(np.asarray(batched.ok), [True, False])
    assert bool(jax.jit(lambda t: t.ok)(table))


def test_solve_batch_ok_and_curve_gp_ok(key):
    prefixes = np.stack([PREFIX, PREFIX * 0.8, PREFIX * 0.9, PREFIX * 0.7])  # shapes of the test above
    tables = bos.solve_batch(key, prefixes, 0.3, HORIZON, 100.0, 99.0, 1.0, batch_size=1, **SOLVE_KW)
    assert tables.ok.shape == (4,) and bool(jnp.all(tables.ok))
    np.testing.assert_array_equal(np.asarray(tables.reason), 0)
    gp = bos.fit_curve_gp(PREFIX)
    assert bool(gp.ok)
    # nll at the dtype's max is what a fit with no finite likelihood at any start returns
    assert not bool(gp._replace(nll=jnp.asarray(np.finfo(np.float64).max)).ok)
    assert not bool(gp._replace(alpha=jnp.asarray(np.nan)).ok)
    assert not bool(bos.CurveGP(1.0, 2.0, 0.0, 1e-3, np.inf).ok)
