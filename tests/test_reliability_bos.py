"""Reliability of jaxstop.bos: invalid numbers, padding, dtypes, batched vs single programs.

Oracles: the paper's closed forms (Theorem 2's ``K_{1,t}``), the literal bin rule, the
compacted problem (the real paths only), a table's own entries, and bitwise equality
where two calls run the same isolated programs (see ``jaxstop/bos/_solve.py``).
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxstop import bos
from jaxstop._src.status import Reason
from test_bos import P, T, assert_tables_agree, literal_bin, make_paths

F32 = np.float32
PREFIX = np.array([0.62, 0.48, 0.41, 0.37, 0.345, 0.33, 0.32, 0.312], F32)
HORIZON = 20
# solve's defaults (100,000 paths in chunks of 10,000): at this size, in float32, separately
# compiled programs without the isolating barriers moved a few paths across bin edges.
KW = {"num_paths": 100_000, "chunk_size": 10_000}
GOOD = {"best_error": 0.3, "k1": 100.0, "k2": 99.0, "cost": 1.0, "xi": 0.0}


@jax.jit
def jit_solve(key, prefix, best_error, k1, k2, cost, xi):
    """solve with every numeric argument traced (one compiled program for the module)."""
    return bos.solve(key, prefix, best_error, HORIZON, k1, k2, cost, xi=xi, **KW)


def call_jit(key, prefix=PREFIX, **changes):
    a = {**GOOD, **changes}
    return jit_solve(key, prefix, *(F32(a[n]) for n in ("best_error", "k1", "k2", "cost", "xi")))


BATCH = np.stack([PREFIX, PREFIX * F32(0.8), PREFIX[::-1] * F32(0.5) + F32(0.2), PREFIX * F32(0.9)])
BATCH_BEST = np.array([0.3, 0.2, 0.25, 0.28], F32)
BATCH_K1 = np.array([100.0, 200.0, 105.0, 120.0], F32)


@jax.jit
def jit_batch(key, prefixes, best_errors, k1):
    """solve_batch (default batch size: 1 on CPU) with traced trials."""
    return bos.solve_batch(key, prefixes, best_errors, HORIZON, k1, 99.0, 1.0, **KW)


@pytest.fixture(scope="module")
def good_table():
    return call_jit(jax.random.key(0))


def assert_void(table, reason=Reason.BAD_INPUT):
    assert not bool(table.ok) and int(table.reason) == reason
    assert np.all(np.asarray(table.actions) == bos.ACTION_FORCED_CONTINUE)
    assert np.all(np.isnan(np.asarray(table.losses))) and int(table.num_valid) == 0


# --------------------------------------------------------------------------------------
# 1. Invalid numbers: status inside jit, ValueError outside
# --------------------------------------------------------------------------------------

BAD_SCALARS = [
    ("best_error", np.nan), ("best_error", -0.1), ("best_error", 1.5), ("best_error", np.inf),
    ("k1", np.nan), ("k1", -5.0), ("k1", 0.0), ("k1", -np.inf),
    ("k2", np.nan), ("k2", np.inf), ("k2", 0.0),
    ("cost", np.nan), ("cost", -1.0), ("cost", np.inf),
    ("xi", np.nan), ("xi", -0.01),
]


def test_bad_scalars_void_the_table_inside_jit(good_table):
    # The valid table stops somewhere: a void table (no STOP anywhere) is a real change.
    assert bool(good_table.ok) and int(good_table.reason) == Reason.OK
    assert np.any(np.asarray(good_table.actions) == bos.ACTION_STOP)
    for name, value in BAD_SCALARS:
        table = call_jit(jax.random.key(0), **{name: value})
        assert_void(table)
        # decide never stops on it, in any bin of any epoch
        rows = jnp.arange(T) + int(table.first_epoch)
        means = jnp.linspace(0.005, 0.995, 99)
        acts = jax.vmap(lambda e: jax.vmap(lambda m: bos.decide(table, e, m))(means))(rows[:3])
        assert not np.any(np.asarray(acts) == bos.ACTION_STOP)
    assert bool(call_jit(jax.random.key(0), k1=np.inf).ok)  # corrected mode: K1 = inf allowed


@pytest.mark.parametrize("name, value", BAD_SCALARS)
def test_bad_scalars_raise_naming_the_argument_when_concrete(name, value):
    a = {**GOOD, name: value}
    with pytest.raises(ValueError, match=name):
        bos.solve(jax.random.key(0), PREFIX, a["best_error"], HORIZON, a["k1"], a["k2"], a["cost"], xi=a["xi"],
                  **KW)


def test_bad_prefix_inside_jit_and_outside():
    for bad in (np.nan, np.inf, 0.0, 1.2):
        prefix = PREFIX.copy()
        prefix[3] = bad
        assert_void(call_jit(jax.random.key(0), prefix))
        with pytest.raises(ValueError, match="prefix"):
            bos.solve(jax.random.key(0), prefix, 0.3, HORIZON, 100.0, 99.0, 1.0, **KW)


def test_solve_batch_voids_only_the_bad_trial():
    """NaN / out-of-range values in some trials' rows leave the others exactly as solved
    alone (solve_batch's trials run solve's own program: same bits)."""
    best = BATCH_BEST.copy()
    best[1] = np.nan
    k1 = BATCH_K1.copy()
    k1[2] = -1.0
    prefixes = BATCH.copy()
    prefixes[3, 4] = np.inf
    key = jax.random.key(1)
    tables = jit_batch(key, prefixes, best, k1)
    np.testing.assert_array_equal(np.asarray(tables.reason), [Reason.OK] + [Reason.BAD_INPUT] * 3)
    np.testing.assert_array_equal(np.asarray(tables.ok), [True, False, False, False])
    for i in (1, 2, 3):
        assert_void(jax.tree.map(lambda a, i=i: a[i], tables))
    one = bos.solve(jax.random.split(key, 4)[0], BATCH[0], best[0], HORIZON, k1[0], 99.0, 1.0, **KW)
    chex.assert_trees_all_equal(jax.tree.map(lambda a: a[0], tables), one)
    for name, args in (("best_errors", (BATCH, best, BATCH_K1)), ("k1", (BATCH, BATCH_BEST, k1)),
                       ("prefixes", (prefixes, BATCH_BEST, BATCH_K1))):
        with pytest.raises(ValueError, match=name):
            bos.solve_batch(key, args[0], args[1], HORIZON, args[2], 99.0, 1.0, **KW)


def test_backward_induction_real_vs_padded_paths(rng):
    values, valid = make_paths(rng, P, T)
    # Padded rows hold NaN / inf: no effect. Oracle: the compacted problem (real rows only).
    padded = values.copy()
    padded[~valid] = np.nan
    padded[np.flatnonzero(~valid)[::2]] = np.inf
    a = bos.backward_induction(padded, valid, 0.3, 100.0, 99.0, 1.0)
    ref = bos.backward_induction(values[valid], np.ones(valid.sum(), bool), 0.3, 100.0, 99.0, 1.0)
    assert bool(a.ok) and int(a.reason) == Reason.OK
    assert_tables_agree(a, ref)  # two shapes, two programs: the continuation sums' rounding
    # A NaN on a real path: ValueError naming values; inside jit a void table.
    real_nan = values.copy()
    real_nan[np.flatnonzero(valid)[0], 2] = np.nan
    with pytest.raises(ValueError, match="values"):
        bos.backward_induction(real_nan, valid, 0.3, 100.0, 99.0, 1.0)
    run = jax.jit(lambda v, b: bos.backward_induction(v, valid, b, 100.0, 99.0, 1.0))
    assert_void(run(real_nan, 0.3))
    assert_void(run(values, np.nan))
    chex.assert_trees_all_equal(run(padded, 0.3), a)  # the same program inlined: same bits


def test_fit_and_simulate_status(key):
    prefix = PREFIX.astype(np.float64)
    fit = jax.jit(bos.fit_curve_gp)
    good = fit(prefix)
    assert bool(good.ok) and int(good.reason) == Reason.OK
    for bad in (np.nan, np.inf):
        p = prefix.copy()
        p[2] = bad
        gp = fit(p)
        assert not bool(gp.ok) and int(gp.reason) == Reason.BAD_INPUT
        with pytest.raises(ValueError, match="prefix"):
            bos.fit_curve_gp(p)
    sim = jax.jit(lambda g, p: bos.simulate(key, g, p, 12, 200))
    paths = sim(good, prefix)
    assert bool(paths.ok) and int(paths.reason) == Reason.OK and bool(jnp.all(jnp.isfinite(paths.values)))
    p = prefix.copy()
    p[0] = np.nan
    for g, pre, reason in (
        (good, p, Reason.BAD_INPUT),  # NaN on the prefix
        (good._replace(alpha=jnp.asarray(-1.0)), prefix, Reason.BAD_INPUT),  # invalid parameters
        (good._replace(nll=jnp.asarray(np.finfo(np.float64).max)), prefix, Reason.NOT_FINITE),  # failed fit
    ):
        out = sim(g, pre)
        assert not bool(out.ok) and int(out.reason) == reason
        assert not np.any(np.asarray(out.valid)) and np.all(np.isnan(np.asarray(out.values)))
    with pytest.raises(ValueError, match="prefix"):
        bos.simulate(key, good, p, 12, 200)
    with pytest.raises(ValueError, match="curve_gp"):
        bos.simulate(key, good._replace(beta=jnp.asarray(np.nan)), prefix, 12, 200)
    mean, cov = jax.jit(lambda g: bos.curve_posterior(g, prefix, 12))(good._replace(noise_var=jnp.asarray(-1.0)))
    assert np.all(np.isnan(np.asarray(mean))) and np.all(np.isnan(np.asarray(cov)))


def test_decide_on_a_table_that_is_not_ok(good_table):
    """decide returns forced continue for a table that says it is not ok, whatever its actions."""
    row, col = np.argwhere(np.asarray(good_table.actions) == bos.ACTION_STOP)[0]
    epoch = int(good_table.first_epoch) + int(row)
    mean = float(np.asarray(good_table.edges)[col] + 0.5 / 99)  # the middle of bin col
    assert literal_bin(mean, 99) == col
    assert int(bos.decide(good_table, epoch, mean)) == bos.ACTION_STOP
    flagged = good_table._replace(reason=jnp.int32(Reason.BAD_INPUT))
    assert int(bos.decide(flagged, epoch, mean)) == bos.ACTION_FORCED_CONTINUE
    # a NaN statistic or non-integral epoch: ValueError when concrete, forced continue traced
    with pytest.raises(ValueError, match="running_mean"):
        bos.decide(good_table, epoch, np.nan)
    with pytest.raises(ValueError, match="epoch"):
        bos.decide(good_table, epoch + 0.5, mean)
    traced = jax.jit(bos.decide)
    assert int(traced(good_table, epoch, np.nan)) == bos.ACTION_FORCED_CONTINUE
    assert int(traced(good_table, epoch + 0.5, mean)) == bos.ACTION_FORCED_CONTINUE
    assert int(traced(good_table, float(epoch), mean)) == bos.ACTION_STOP


# --------------------------------------------------------------------------------------
# 2. Batched vs single, jit vs eager: the same isolated programs, the same bits
# --------------------------------------------------------------------------------------


def test_jit_and_batch_equal_eager_solve():
    """Eager solve, solve under jit (traced arguments, or closed-over constants that XLA
    could fold) and solve_batch's trials (batch_size=1, the CPU default) inline the same
    barrier-isolated fit and solve: equal bits, float32 included (where these programs
    used to move paths across bin edges)."""
    key = jax.random.key(0)
    keys = jax.random.split(key, 4)
    tables = jit_batch(key, BATCH, BATCH_BEST, BATCH_K1)
    const = jax.jit(lambda: bos.solve(keys[2], BATCH[2], BATCH_BEST[2], HORIZON, BATCH_K1[2], 99.0, 1.0, **KW))()
    for i in range(4):
        one = bos.solve(keys[i], BATCH[i], BATCH_BEST[i], HORIZON, BATCH_K1[i], 99.0, 1.0, **KW)
        assert bool(one.ok)
        chex.assert_trees_all_equal(jax.tree.map(lambda a, i=i: a[i], tables), one)
        traced = jit_solve(keys[i], BATCH[i], BATCH_BEST[i], BATCH_K1[i], F32(99.0), F32(1.0), F32(0.0))
        chex.assert_trees_all_equal(traced, one)
        if i == 2:
            chex.assert_trees_all_equal(const, one)


# --------------------------------------------------------------------------------------
# 3. Schedules outside their domain
# --------------------------------------------------------------------------------------


def test_schedules_outside_the_domain():
    t = np.array([0.0, -1.0, np.nan, np.inf, 1.0, 2.0, 7.0])
    # Theorem 2: K_{1,1} = k1_init, K_{1,t} = K_{1,t-1} / gamma; undefined before t = 1.
    want = np.array([np.nan] * 4 + [100.0, 100.0 / 0.9, 100.0 / 0.9**6])
    np.testing.assert_allclose(np.asarray(jax.jit(bos.k1_schedule)(t, 100.0, 0.9)), want, rtol=1e-14)
    for bad_t in (0, -3, np.nan, np.inf, [1, 2, 0], 1.5, [1, 2.2]):
        with pytest.raises(ValueError, match="t must be"):
            bos.k1_schedule(bad_t, 100.0, 0.9)
        with pytest.raises(ValueError, match="t must be"):
            bos.xi(bad_t, 1e-3, 0.1)
    # an iteration is a whole number: a fractional t is NaN inside jit (xi's log of
    # pi^2 t^2 (t - 1) / (6 delta) is negative just above 1: no real value), not clamped
    assert np.all(np.isnan(np.asarray(jax.jit(bos.xi)(np.array([1.2, 1.9, 2.5]), 1e-3, 0.1))))
    assert np.all(np.isnan(np.asarray(jax.jit(bos.k1_schedule)(np.array([1.5, 2.5]), 100.0, 0.9))))
    for bad_t in (True, np.array([True, False])):
        with pytest.raises(TypeError, match="t must be a BO iteration"):
            bos.k1_schedule(bad_t)
        with pytest.raises(TypeError, match="t must be a BO iteration"):
            bos.xi(bad_t, 1e-3, 0.1)
    # a Python int beyond int32 (JAX's integer type without x64) is a float iteration
    with jax.enable_x64(False):
        assert float(bos.k1_schedule(2**40, 100.0, 1.0)) == 100.0
    xi = np.asarray(jax.jit(bos.xi)(t, 1e-3, 0.1))
    assert np.all(np.isnan(xi[:4])) and xi[4] == 0.0
    np.testing.assert_allclose(xi[5:], np.sqrt(2e-3 * np.log(np.pi**2 * t[5:] ** 2 * (t[5:] - 1) / 0.6)), rtol=1e-14)
    # traced parameters outside their range: NaN; concrete: ValueError naming them
    assert np.isnan(float(jax.jit(bos.k1_schedule)(3.0, -1.0, 0.9)))
    assert np.isnan(float(jax.jit(bos.xi)(3.0, 1e-3, 1.5)))
    for kwargs, name in ((dict(k1_init=np.nan), "k1_init"), (dict(gamma=0.0), "gamma")):
        with pytest.raises(ValueError, match=name):
            bos.k1_schedule(3, **kwargs)
    with pytest.raises(ValueError, match="noise_var"):
        bos.xi(3, np.nan, 0.1)


def test_nan_k1_from_the_schedule_voids_the_table():
    k1 = jax.jit(bos.k1_schedule)(0.0)  # a policy's t = 0: NaN, never a silent K_{1,0}
    assert_void(call_jit(jax.random.key(0), k1=float(k1)))


# --------------------------------------------------------------------------------------
# 4. decide on a batch of tables
# --------------------------------------------------------------------------------------


def test_decide_batched_tables(rng):
    values, valid = make_paths(rng, P, T)
    # the lookup is under test, not the statistic: the paths alone bin the tables (no prefix)
    one = [bos.backward_induction(values, valid, b, 100.0, 99.0, 1.0, n0=8, statistic="after_n0")
           for b in (0.2, 0.3, 0.4)]
    tables = jax.tree.map(lambda *a: jnp.stack(a), *one)
    with pytest.raises(ValueError, match="table.*jax.vmap"):
        bos.decide(tables, 9, 0.3)
    epochs, means = np.array([9, 10, 13]), np.array([0.31, 0.27, 0.55])
    got = jax.vmap(bos.decide)(tables, epochs, means)
    want = [int(tables.actions[i, epochs[i] - 9, literal_bin(means[i], 99)]) for i in range(3)]
    np.testing.assert_array_equal(np.asarray(got), want)
    # One table, an array of queries: elementwise; inside jit a NaN query is a forced continue.
    queries = bos.decide(one[1], epochs, means)
    np.testing.assert_array_equal(np.asarray(queries), [int(one[1].actions[e - 9, literal_bin(m, 99)])
                                                        for e, m in zip(epochs, means)])
    assert queries[1] != bos.ACTION_FORCED_CONTINUE  # so the NaN below changes the answer
    traced = jax.jit(bos.decide)(one[1], epochs, means.copy() * np.array([1.0, np.nan, 1.0]))
    np.testing.assert_array_equal(np.asarray(traced), [queries[0], bos.ACTION_FORCED_CONTINUE, queries[2]])


# --------------------------------------------------------------------------------------
# 5. float16 / bfloat16 rejected naming the argument; 6. NumPy float32 scalars accepted
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("half", [jnp.float16, jnp.bfloat16])
def test_half_precision_rejected(half, key, good_table):
    h = lambda x: jnp.asarray(x, half)  # noqa: E731
    calls = [
        ("prefix", lambda: bos.solve(key, h(PREFIX), 0.3, HORIZON, 100.0, 99.0, 1.0, **KW)),
        ("best_error", lambda: bos.solve(key, PREFIX, h(0.3), HORIZON, 100.0, 99.0, 1.0, **KW)),
        ("k1", lambda: bos.solve(key, PREFIX, 0.3, HORIZON, h(100.0), 99.0, 1.0, **KW)),
        ("xi", lambda: bos.solve(key, PREFIX, 0.3, HORIZON, 100.0, 99.0, 1.0, xi=h(0.0), **KW)),
        ("prefixes", lambda: bos.solve_batch(key, h(PREFIX[None]), 0.3, HORIZON, 100.0, 99.0, 1.0, **KW)),
        ("values", lambda: bos.backward_induction(h(np.full((4, 3), 0.5)), np.ones(4, bool), 0.3, 100.0, 99.0, 1.0)),
        ("running_mean", lambda: bos.decide(good_table, 9, h(0.3))),
        ("prefix", lambda: bos.fit_curve_gp(h(PREFIX))),
        ("prefix", lambda: bos.simulate(key, bos.fit_curve_gp(PREFIX), h(PREFIX), HORIZON, 10)),
        ("curve_gp", lambda: bos.simulate(key, bos.CurveGP(h(1.0), 2.0, 0.0, 1e-3, 0.0), PREFIX, HORIZON, 10)),
        ("t", lambda: bos.k1_schedule(h(3.0))),
        ("noise_var", lambda: bos.xi(3, h(1e-3), 0.1)),
    ]
    for name, call in calls:
        with pytest.raises(TypeError, match=f"^{name} has unsupported dtype"):
            call()


def test_numpy_float32_scalars_accepted(key):
    """np.float32 scalars where floats are expected give what their exact Python float gives."""
    f = F32(1e-3)
    got = bos.solve(key, PREFIX, F32(0.3), HORIZON, F32(100.0), F32(99.0), F32(1.0), noise_var=f,
                    min_count=F32(30.0), **KW)
    want = bos.solve(key, PREFIX, 0.3, HORIZON, 100.0, 99.0, 1.0, noise_var=float(f), min_count=30.0, **KW)
    chex.assert_trees_all_equal(got, want)
    gp = bos.fit_curve_gp(PREFIX, noise_var=f, learning_rate=F32(0.1))
    chex.assert_trees_all_equal(gp, bos.fit_curve_gp(PREFIX, noise_var=float(f), learning_rate=float(F32(0.1))))
    assert float(bos.k1_schedule(F32(2.0), F32(100.0), F32(0.5))) == 200.0


# --------------------------------------------------------------------------------------
# Hostile arguments: keys, structure, n0, static floats in the computation's dtype
# --------------------------------------------------------------------------------------


def test_key_must_be_a_prng_key():
    """An integer seed or a batch of keys raises TypeError naming key, before any compilation."""
    gp = bos.CurveGP(*(F32(v) for v in (1.0, 2.0, 0.0, 1e-3, 0.0)))
    calls = (lambda k: bos.solve(k, PREFIX, 0.3, HORIZON, 100.0, 99.0, 1.0),
             lambda k: bos.solve_batch(k, PREFIX[None], 0.3, HORIZON, 100.0, 99.0, 1.0),
             lambda k: bos.simulate(k, gp, PREFIX, HORIZON, 10))
    for call in calls:
        for key in (0, jax.random.split(jax.random.key(0), 2)):
            with pytest.raises(TypeError, match="key must be"):
                call(key)


def test_structure_errors_name_the_argument():
    """Empty epoch axes, objects that are not DecisionTables, an unknown mode, schedule
    arguments that do not broadcast: ValueError / TypeError naming the argument, not an
    IndexError or AttributeError from inside."""
    mask = np.ones(3, bool)
    with pytest.raises(ValueError, match="values must hold at least one"):
        bos.backward_induction(np.zeros((3, 0), F32), mask, 0.3, 1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match="errors must have"):
        bos.summary_statistic(np.zeros(0, F32), 1, 0)
    with pytest.raises(ValueError, match="epoch of shape"):
        bos.summary_statistic(np.ones((2, 4), F32), np.ones(3, int), 0)
    T, B = 2, 4  # a table built by hand: decide checks its arguments before any lookup
    table = bos.DecisionTable(np.zeros((T, B), np.int32), np.zeros((T, B, 3), F32), np.zeros((T, B), F32),
                              np.zeros((T, B), np.int32), np.linspace(0, 1, B + 1, dtype=F32), np.int32(1),
                              np.int32(1), F32(0))
    for bad in (tuple(table), None):
        with pytest.raises(TypeError, match="table must be a DecisionTable"):
            bos.decide(bad, 1, 0.5)
    with pytest.raises(TypeError, match="epoch"):
        bos.decide(table, "a", 0.5)
    with pytest.raises(ValueError, match="mode"):
        bos.resolve_statistic(None, "bogus")
    with pytest.raises(ValueError, match="gamma"):
        bos.k1_schedule(np.arange(1, 5), 100.0, np.full(3, 0.9))


def test_n0_is_an_integer_at_least_zero():
    """Concrete: ValueError naming n0. Traced: a void table (BAD_INPUT), while a valid traced
    n0 gives an ok table whose rows start at epoch n0 + 1."""
    values, mask = np.full((50, 3), 0.5, F32), np.ones(50, bool)
    for n0 in (-3, 2.5, 2**40):
        with pytest.raises(ValueError, match="n0"):
            bos.backward_induction(values, mask, 0.3, 1.0, 1.0, 1.0, mode="compat", n0=n0)
    f = jax.jit(lambda n0: bos.backward_induction(values, mask, 0.3, 1.0, 1.0, 1.0, mode="compat", n0=n0))
    for n0 in (F32(-3.0), F32(2.5)):
        assert_void(f(n0))
    good = f(F32(4.0))
    assert bool(good.ok) and int(good.first_epoch) == 5


def test_static_floats_are_checked_in_the_prefix_dtype():
    """noise_var or learning_rate = 1e300 is finite in Python but inf in float32: ValueError
    naming it, not a failed fit (NOT_FINITE) or an infinite step size that skips every step."""
    with pytest.raises(ValueError, match="noise_var"):
        bos.fit_curve_gp(PREFIX, noise_var=1e300)
    with pytest.raises(ValueError, match="learning_rate"):
        bos.fit_curve_gp(PREFIX, learning_rate=1e300)
    key = jax.random.key(0)
    for call in (lambda: bos.solve(key, PREFIX, 0.3, HORIZON, 100.0, 99.0, 1.0, noise_var=1e300),
                 lambda: bos.solve_batch(key, PREFIX[None], 0.3, HORIZON, 100.0, 99.0, 1.0, noise_var=1e300)):
        with pytest.raises(ValueError, match="noise_var"):
            call()


def test_epochs_beyond_int32_do_not_wrap(good_table):
    """An epoch past the table's rows (or past the curve) is out of range whatever its integer
    type: decide looked 2**32 + e up as epoch e (the cast to int32 wrapped it), and
    summary_statistic averaged epochs 1..e."""
    row, col = np.argwhere(np.asarray(good_table.actions) == bos.ACTION_STOP)[0]
    epoch = int(good_table.first_epoch) + int(row)
    mean = float(np.asarray(good_table.edges)[col] + 0.5 / 99)  # the middle of bin col
    traced = jax.jit(bos.decide)
    assert int(bos.decide(good_table, epoch, mean)) == int(traced(good_table, epoch, mean)) == bos.ACTION_STOP
    for far in (2**32 + epoch, np.int64(2**32 + epoch), np.int64(epoch - 2**32), np.uint64(2**32 + epoch)):
        assert int(bos.decide(good_table, far, mean)) == bos.ACTION_FORCED_CONTINUE, far
        assert int(traced(good_table, far, mean)) == bos.ACTION_FORCED_CONTINUE, far
    errors = np.array([0.5, 0.5, 0.25, 0.25])
    assert float(bos.summary_statistic(errors, 3, 0)) == (0.5 + 0.5 + 0.25) / 3
    for far in (2**32 + 3, np.int64(2**32 + 3), np.int64(3 - 2**32)):
        assert np.isnan(float(bos.summary_statistic(errors, far, 0))), far  # beyond the curve: undefined
        got = np.asarray(bos.summary_statistic(errors, np.array([far, 3]), 2, statistic="after_n0"))
        assert np.isnan(got[0]) and got[1] == 0.25, far


def test_traced_n0_must_match_the_prefix():
    """With a prefix, n0 is len(prefix): concrete, another raises; traced, it voided nothing
    and labelled the rows with epochs the statistic was not binned for."""
    values, mask, prefix = np.full((50, 3), 0.5), np.ones(50, bool), np.full(4, 0.4)
    with pytest.raises(ValueError, match="n0"):
        bos.backward_induction(values, mask, 0.3, 1.0, 1.0, 1.0, prefix=prefix, n0=6)
    f = jax.jit(lambda n0: bos.backward_induction(values, mask, 0.3, 1.0, 1.0, 1.0, prefix=prefix, n0=n0))
    good = f(4)
    assert bool(good.ok) and int(good.first_epoch) == 5
    assert_void(f(6))


@pytest.mark.parametrize("epoch", [None, "12", [[1, 2], [3]]])
def test_summary_statistic_names_an_epoch_that_is_not_an_integer(epoch):
    # None and a ragged list failed inside jnp.asarray with JAX's message, naming nothing
    with pytest.raises(TypeError, match="epoch must be an integer"):
        bos.summary_statistic(jnp.full(12, 0.4), epoch, 8)


@pytest.mark.parametrize("name", ["values", "mask"])
def test_backward_induction_names_values_or_mask_that_are_not_arrays(name):
    # None or a string failed inside jnp.asarray with JAX's message, naming nothing
    args = dict(values=jnp.full((40, 3), 0.4), mask=jnp.ones(40, bool))
    args[name] = None if name == "values" else "all"
    with pytest.raises(TypeError, match=f"{name} must be a"):
        bos.backward_induction(args["values"], args["mask"], 0.3, 100.0, 99.0, 1.0)
