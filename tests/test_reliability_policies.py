"""Reliability of the policies: what they say about inputs outside their assumptions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from _compiles import count_compilations
from _oracles import drive
import jaxstop
from jaxstop import policies, sim

M, N = 10, 8


def error_curves(seed):
    """Validation-error-like curves in (0, 1), rows: candidates."""
    rng = np.random.default_rng(seed)
    floor = rng.uniform(0.1, 0.4, (M, 1))
    return floor + 0.4 * np.exp(-0.4 * np.arange(1, N + 1))[None, :]


@pytest.mark.parametrize("early_stopping", [True, False])
def test_bo_bos_counts_losses_outside_the_error_range(early_stopping):
    # BOS works with errors in [0, 1]; losses outside it after the loss_lo / loss_hi map
    # are clipped for BOS. That is reported: info.num_out_of_range counts them and
    # info.ok turns False, never a silent clip. Closed form: the count of table entries
    # outside [0, 1] among the epochs each evaluation trained.
    cand = jnp.asarray(np.random.default_rng(0).uniform(size=(M, 2)))
    v = error_curves(1)
    v[3, :] += 1.0       # candidate 3 reports losses above 1
    v[6, 2] = -0.5       # one loss of candidate 6 below 0
    factory = (lambda: policies.bo_bos(cand, max_budget=N, max_evals=M, n0=3, num_paths=200)
               if early_stopping else policies.gp_ucb(cand, max_budget=N, max_evals=M))
    policy = factory()
    tr = sim.run(policy, sim.CurveTable(jnp.asarray(v)), jax.random.key(0))
    n = int(tr.num_jobs)
    configs = np.asarray(tr.jobs.config)[:n]
    epochs = np.asarray(tr.results.epoch)[:n]
    if early_stopping:
        per_job = [int(np.sum((v[c, :e] < 0) | (v[c, :e] > 1))) for c, e in zip(configs, epochs)]
    else:
        per_job = [int((v[c, e - 1] < 0) | (v[c, e - 1] > 1)) for c, e in zip(configs, epochs)]
    np.testing.assert_array_equal(np.asarray(tr.infos.num_out_of_range)[:n], np.cumsum(per_job))
    np.testing.assert_array_equal(np.asarray(tr.infos.ok)[:n], np.cumsum(per_job) == 0)
    assert 3 in configs.tolist() and not bool(tr.infos.ok[n - 1])
    # the same study on errors in range says ok throughout
    clean = sim.run(policy, sim.CurveTable(jnp.asarray(error_curves(1))), jax.random.key(0))
    assert np.asarray(clean.infos.ok)[: int(clean.num_jobs)].all()
    assert int(clean.infos.num_out_of_range[int(clean.num_jobs) - 1]) == 0


def test_uq_halving_falls_back_to_the_plain_count_when_delta_sigma_cannot_be_estimated():
    # With r_0 = 2 (LCBench's 52 epochs with eta = 3) every candidate has two losses at
    # the end of the first rung: a window std exists but the previous window has one
    # loss, so the window estimate of delta_sigma would be 0, zeta 0, and keep_count would
    # keep every candidate with p > 0. The first decision must be the plain count n_1,
    # flagged as a fallback; the later ones (>= 3 losses) use the UQ rule.
    n, T = 27, 52
    sched = policies.halving_schedule("sh", n, T, 3)
    assert sched.brackets[0].budgets[0] == 2
    rng = np.random.default_rng(3)
    v = rng.uniform(0.2, 0.6, (n, 1)) + 0.3 * np.exp(-0.1 * np.arange(1, T + 1))[None, :]
    v = v + rng.normal(0, 0.02, v.shape)
    policy = policies.sh(n, T, uq=True, delta_estimate="window")
    tr = sim.run(policy, sim.CurveTable(jnp.asarray(v)), jax.random.key(0))
    dec = np.asarray(tr.infos.decisions) == 1
    kept, fallback = np.asarray(tr.infos.kept)[dec], np.asarray(tr.infos.fallback)[dec]
    assert fallback[0] and kept[0] == sched.brackets[0].sizes[1]
    assert not fallback[1:].any()
    # with a given delta_sigma two losses suffice: the first decision is the UQ rule's
    given = policy.default_params()._replace(delta_sigma=jnp.asarray(1e-3))
    tr2 = sim.run(policy, sim.CurveTable(jnp.asarray(v)), jax.random.key(0), given)
    dec2 = np.asarray(tr2.infos.decisions) == 1
    assert not np.asarray(tr2.infos.fallback)[dec2][0]


@pytest.mark.parametrize("estimate", ["window", "profile"])
def test_uq_halving_decisions_do_not_depend_on_the_units_of_the_losses(estimate):
    # The keep rule is invariant under a common scaling of the losses, and scaling by a
    # power of two is exact in floating point: float32 losses times 2^100 (about 1e30,
    # whose squares overflow float32) must give the same decisions, budget and incumbent
    # as the unscaled ones, and none of the rounds may lose its members.
    T = 27
    rng = np.random.default_rng(0)
    t = np.arange(1, T + 1)
    base = rng.uniform(0.1, 0.9, (9, 1)) + rng.uniform(0.2, 1.0, (9, 1)) / np.sqrt(t)
    base = base + 0.05 * rng.standard_normal((9, T))
    policy = policies.sh(9, T, uq=True, delta_estimate=estimate, dtype=jnp.float32)

    def decisions(scale):
        table = sim.CurveTable(jnp.asarray(base * scale, jnp.float32))
        tr = sim.run(policy, table, jax.random.key(1))
        dec = np.asarray(tr.infos.decisions) == 1
        return (np.asarray(tr.infos.kept)[dec].tolist(), int(tr.budget), int(tr.incumbent),
                int(tr.infos.unspent[int(tr.num_jobs) - 1]))

    small = decisions(1.0)
    assert min(small[0]) >= 1
    assert decisions(2.0 ** 66) == small
    assert decisions(2.0 ** 100) == small


def test_eager_uq_halving_takes_an_overflowed_window_variance_as_no_shrinkage():
    # delta_estimate="window_var" is in units of sigma^2: float32 losses near 1e20 (std ~3e19)
    # give variances beyond float32's range, and a delta_sigma of +-inf. Inside jit keep_count
    # counts it as 0 (no shrinkage); a hand-written eager loop passed it to keep_count, which
    # raised about a delta_sigma the caller never passed. Both now decide alike: the eager
    # loop plays the jobs of sim.run.
    T = 9
    rng = np.random.default_rng(0)
    values = (1e20 * (1.0 + 0.1 * np.arange(9))[:, None] + 3e19 * rng.standard_normal((9, T))).astype(np.float32)
    policy = policies.sh(9, T, uq=True, delta_estimate="window_var", dtype=jnp.float32)
    key = jax.random.key(0)
    tr = sim.run(policy, sim.CurveTable(jnp.asarray(values)), key, batched=False)
    n = int(tr.num_jobs)
    played = drive(policy, values, np.full(9, T), key, policy.limits.max_jobs)
    assert len(played["configs"]) == n
    assert played["configs"] == np.asarray(tr.jobs.config)[:n].tolist()
    assert played["epochs"] == np.asarray(tr.results.epoch)[:n].tolist()
    assert played["incumbent"] == int(tr.incumbent)


def test_concrete_params_are_checked_by_the_simulator_as_by_an_eager_step():
    # params._replace(...) with a value the factory would refuse: sim.run once ran on it
    # (gp_ucb's NaN LCB width fell back to random picks, a NaN threshold never stopped
    # auto-termination) with every status ok. Now the simulator runs the policy's own check,
    # as an eager step does; params with a batch axis (vmap over params) stay the caller's.
    rng = np.random.default_rng(1)
    x = rng.uniform(0, 1, (6, 1))
    loss = (x[:, 0] - 0.3) ** 2
    table = sim.CurveTable(jnp.asarray(loss[:, None] + 0.1 / np.arange(1, 5)[None, :]), configs=jnp.asarray(x))
    cases = [
        (policies.gp_ucb(x, max_budget=4, max_evals=6, num_init=2, gp_fit_steps=3), "beta_scale", -1.0),
        (policies.auto_termination_bo(max_budget=4, max_evals=6, candidates=x, threshold=0.02, num_init=3,
                                      min_iterations=5, min_points=5, fit_steps=4), "threshold", np.nan),
        (policies.auto_termination_bo(max_budget=4, max_evals=6, candidates=x, threshold=0.02, num_init=3,
                                      min_iterations=5, min_points=5, fit_steps=4), "delta", 1.5),
        (policies.subsampling(6, 4, uq=True), "threshold", 2.0),
        (policies.subsampling(6, 4, uq=True), "min_sigma", -1.0),
        (policies.sh(6, 4, uq=True), "delta_sigma", np.inf),
    ]
    for policy, field, value in cases:
        defaults = policy.default_params()
        bad = defaults._replace(**{field: jnp.asarray(value, jnp.asarray(getattr(defaults, field)).dtype)})
        with pytest.raises(ValueError, match=f"{field} must be"):
            sim.run(policy, table, jax.random.key(0), bad, max_jobs=6)
        with pytest.raises(ValueError, match=f"{field} must be"):
            policy.init(jax.random.key(0), bad)
        # the defaults themselves pass, and a batch of params is not checked here
        sim.run(policy, table, jax.random.key(0), defaults, max_jobs=6)
    policy, field, _ = cases[3]
    batch = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]), policy.default_params())
    out = jax.vmap(lambda p: sim.run(policy, table, jax.random.key(0), p, max_jobs=6))(batch)
    assert out.incumbent.shape == (2,)


def test_flags_and_modes_are_checked():
    # "no" is truthy: uq="no" once built SS+; dim beside num_configs was ignored
    for make in (lambda: policies.subsampling(5, 5, uq="no"), lambda: policies.sh(9, 9, uq="no"),
                 lambda: policies.hyperband(9, 9, uq=1)):
        with pytest.raises(TypeError, match="uq must be a bool"):
            make()
    assert policies.sh(9, 9, uq=np.bool_(True)).report is not None
    with pytest.raises(ValueError, match="dim is the unit-cube mode's argument"):
        policies.random_search(6, max_budget=3, dim=4)
    with pytest.raises(TypeError, match="replace must be a bool"):  # "no" once drew with replacement
        policies.random_search(6, max_budget=3, replace="no")
    x = np.linspace(0.0, 1.0, 12).reshape(6, 2)
    with pytest.raises(TypeError, match="fit_mean must be a bool"):
        policies.auto_termination_bo(max_budget=4, max_evals=6, candidates=x, threshold=0.02, num_init=3,
                                     min_iterations=5, min_points=5, fit_mean="no")


def test_concrete_params_of_other_shapes_are_checked_and_none_profile_completed():
    """Concrete params given to sim.run cannot carry a vmap axis: a leaf of another shape goes
    through the policy's check (it once ran, broadcast per slot, or failed deep inside); a
    HalvingParams.delta_profile of None counts as all NaN there too, as in an eager step."""
    table = sim.CurveTable(jnp.linspace(1.0, 0.1, 9)[:, None] * jnp.ones((9, 9)))
    policy = policies.sh(9, 9, eta=3, uq=True, delta_estimate="window")
    d = policy.default_params()
    for bad in (jnp.full((9,), 0.5), jnp.ones(2)):
        with pytest.raises(ValueError, match="params.min_sigma must be a scalar"):
            sim.run(policy, table, jax.random.key(0), d._replace(min_sigma=bad))
    a = sim.run(policy, table, jax.random.key(0), d._replace(delta_profile=None))
    b = sim.run(policy, table, jax.random.key(0), d)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_traced_params_complete_a_none_profile_and_refuse_a_batch_axis_without_vmap():
    """Under jit / vmap the params go through the policy's check too: a HalvingParams built
    with its five-plus-one fields and no delta_profile (its NamedTuple default, None) vmaps
    over sim.run (it once raised a structure TypeError there, while an eager run took it),
    equal to a Python loop of single runs (the same per-study program: bit for bit); and a
    params leaf with a batch axis inside jit without vmap names the field (it once
    broadcast per slot when the axis matched the slots, or failed deep inside)."""
    table = sim.CurveTable(jnp.asarray(error_curves(2)[:9, :8]))
    policy = policies.sh(9, 8, eta=2, uq=True, delta_estimate="window", dtype=jnp.float32)
    f = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
    ms = [1e-6, 1e-2, 0.5]
    batch = policies.HalvingParams(min_sigma=f(ms), delta_sigma=f([np.nan, 0.01, np.nan]), threshold=f([0.9] * 3),
                                   top_fraction=f([0.15] * 3), random_fraction=f([0.3] * 3),
                                   min_bandwidth=f([1e-3] * 3))
    key = jax.random.key(1)
    tv = jax.vmap(lambda p: sim.run(policy, table, key, params=p, record="jobs"))(batch)
    for i in range(3):
        one = sim.run(policy, table, key, params=jax.tree_util.tree_map(lambda a: a[i], batch), record="jobs")
        for x, y in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(tv)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y)[i])
    d = policy.default_params()
    run_jit = jax.jit(lambda p: sim.run(policy, table, key, params=p, record="final"))
    for width in (9, 2):  # 9: the number of slots of the first rung
        with pytest.raises(ValueError, match="params.min_sigma must be a scalar.*vmap"):
            run_jit(d._replace(min_sigma=jnp.full((width,), 1e-3, jnp.float32)))
    cand = jnp.linspace(0.0, 1.0, 6)[:, None]
    ucb = policies.gp_ucb(cand, max_budget=4, max_evals=6, num_init=2, gp_fit_steps=2, dtype=jnp.float32)
    t6 = sim.CurveTable((cand - 0.3) ** 2 + 1.0 / jnp.arange(1, 5)[None, :])
    d = ucb.default_params()
    with pytest.raises(ValueError, match="params.kappa must be a scalar"):
        jax.jit(lambda p: sim.run(ucb, t6, key, params=p, record="final"))(d._replace(kappa=jnp.full((6,), 2.0)))


def test_policies_pickle_across_processes(tmp_path):
    """A policy pickled in another process (another hash seed) loads equal to one built here:
    its static configuration's hash is recomputed, so sim.run reuses the compiled program."""
    import pickle
    import subprocess
    import sys

    path = tmp_path / "policy.pkl"
    # float32 stated: the default dtype follows x64, which the test session turns on
    script = ("import pickle, numpy as np; from jaxstop import policies; "
              f"pickle.dump(policies.sh(9, 9, eta=3, uq=True, dtype=np.float32), open({str(path)!r}, 'wb'))")
    env = {**__import__("os").environ, "PYTHONHASHSEED": "123"}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, timeout=120)
    loaded = pickle.loads(path.read_bytes())
    here = policies.sh(9, 9, eta=3, uq=True, dtype=np.float32)
    assert loaded == here and hash(loaded) == hash(here)
    assert pickle.loads(pickle.dumps(here)) == here
    table = sim.CurveTable(jnp.linspace(1.0, 0.1, 9, dtype=jnp.float32)[:, None] * jnp.ones((9, 9), jnp.float32))
    a = sim.run(loaded, table, jax.random.key(1), record="final")
    b = sim.run(here, table, jax.random.key(1), record="final")
    assert int(a.incumbent) == int(b.incumbent) and int(a.budget) == int(b.budget)


@pytest.mark.parametrize("sparse", [False, True])
def test_gated_cond_reads_an_int_or_float_predicate_as_lax_cond(sparse):
    # lax.cond takes an int / float predicate as `pred != 0`; the sparse rule under vmap
    # counted the members that take the branch by the sum of the predicates (0 + 2 + 1 = 3
    # members, a third run for member 0; a 0.5 counted as 0). Oracle: lax.cond per member.
    def branch(p):
        return policies.gated_cond(p, lambda: jnp.float64(1.0), lambda: jnp.float64(2.0), sparse=sparse)

    for preds in (jnp.array([0, 2, 1, 0]), jnp.array([0.0, 0.5, -3.0, 0.0])):
        want = [float(jax.lax.cond(p, lambda: 1.0, lambda: 2.0)) for p in preds]
        assert jax.vmap(branch)(preds).tolist() == want
        assert jax.jit(jax.vmap(branch))(preds).tolist() == want
    with pytest.raises(TypeError, match="pred must be a scalar"):
        branch(jnp.array([True, False]))


@pytest.mark.parametrize("uq", [False, True])
def test_subsampling_leader_is_not_a_run_that_diverged(uq):
    # Three rows, one epoch per job. Round 0 gives losses 0.5, 0.3, 0.4; row 1 leads, trains
    # alone and diverges (NaN). The leader is then the most-trained candidate with a finite
    # loss: row 2 (0.4, ahead of row 0's 0.5 at the same epoch), the incumbent, and as nobody
    # beats it, it trains alone next. The leader was slot 0 whatever row it held (a NaN top
    # gave an all-inf key). Oracle: the module docstring's rule, worked by hand.
    curves = {0: [0.5] * 4, 1: [0.3] + [np.nan] * 3, 2: [0.4, 0.2, 0.2, 0.2]}
    policy = policies.subsampling(3, 4, uq=uq, num_start=3, step=1, budget=12)
    for seed in range(6):
        state = policy.init(jax.random.key(seed))
        jobs = []
        for t in range(5):
            job, state = policy.ask(jax.random.key(t), state)
            row, budget = int(job.config), int(job.budget)
            jobs.append(row)
            state, info = policy.tell(state, job, policies.make_result(curves[row][budget - 1], budget))
            if t == 3:  # row 1's NaN at epoch 2
                assert sorted(jobs[:3]) == [0, 1, 2] and jobs[3] == 1
                assert int(info.incumbent) == 2 and float(info.incumbent_value) == 0.4
        assert jobs[4] == 2 and int(info.incumbent) == 2 and float(info.incumbent_value) == 0.2


def test_halving_budgets_beyond_int32_are_refused_when_built():
    # The policies count epochs (spent, unspent, round budgets) in int32. Hyperband on
    # 1e5 rows and 1e8 epochs budgets 1.49e10 epochs (Li et al.'s brackets: sum over s of
    # n_s (s + 1) R / eta^s, about (s_max + 1)^2 R = 17^2 1e8 / 2): its spent counter wrapped
    # silently. Such schedules (and a sub-sampling budget beyond int32) are refused when built;
    # SH on the same arguments (1.0e8 epochs) is not.
    int32_max = 2**31 - 1
    with pytest.raises(ValueError, match="int32"):
        policies.hyperband(100_000, 10**8)
    with pytest.raises(ValueError, match="int32"):
        policies.subsampling(3, 10, budget=int32_max + 1)
    sched = policies.halving_schedule("sh", 100_000, 10**8)
    assert sched.total_budget <= int32_max
    policies.sh(100_000, 10**8)


def test_subsampling_without_a_finite_loss_has_no_incumbent_and_value_inf():
    # Every run diverges (NaN): no incumbent (-1) and, as the other policies' Incumbent,
    # value inf (it was the NaN of the most-trained candidate).
    policy = policies.subsampling(3, 4, num_start=3, step=1, budget=12)
    state = policy.init(jax.random.key(0))
    for t in range(3):
        job, state = policy.ask(jax.random.key(t), state)
        state, info = policy.tell(state, job, policies.make_result(jnp.nan, int(job.budget)))
        assert int(info.incumbent) == -1 and float(info.incumbent_value) == np.inf


@pytest.mark.parametrize("name", ["sh", "random_search", "subsampling_uq"])
def test_one_job_protocol_refuses_a_loss_or_epoch_that_is_not_a_scalar(name):
    # A loss of shape (1,) (a model's output) made random_search's incumbent shape (1,) and
    # failed inside the other steps with JAX's broadcasting error; tell / report now name it.
    policy = {"sh": lambda: policies.sh(9, 9), "random_search": lambda: policies.random_search(9, max_budget=9),
              "subsampling_uq": lambda: policies.subsampling(9, 9, uq=True)}[name]()
    state = policy.init(jax.random.key(0))
    job, state = policy.ask(jax.random.key(1), state)
    with pytest.raises(ValueError, match=r"result\.value must be a scalar"):
        policy.tell(state, job, policies.make_result(jnp.array([0.3]), job.budget))
    with pytest.raises(ValueError, match=r"result\.epoch must be a scalar"):
        policy.tell(state, job, policies.Result(jnp.asarray(0.3), jnp.array([1]), jnp.asarray(False)))
    if policy.report is not None:
        with pytest.raises(ValueError, match="value must be a scalar"):
            policy.report(state, job, 1, jnp.array([0.3]))
    state, info = policy.tell(state, job, policies.make_result(0.3, job.budget))
    assert jnp.shape(info.incumbent_value) == () and float(info.incumbent_value) == 0.3


@pytest.mark.parametrize("name", ["random_search", "gp_ucb", "bo_bos"])
def test_a_loss_of_minus_inf_never_becomes_the_incumbent(name):
    # A run that diverged to -inf (a log-likelihood loss of a degenerate model) made
    # random_search's and bo_bos's incumbent for good: nothing beats -inf. The other
    # policies (halving, sub-sampling, auto-termination) only ever took finite losses.
    # Oracle: the lowest finite loss told, by hand (0.3 of the third job).
    cand = jnp.linspace(0.0, 1.0, 5)[:, None]
    policy = {"random_search": lambda: policies.random_search(5, max_budget=3),
              "gp_ucb": lambda: policies.gp_ucb(cand, max_budget=3, max_evals=5, num_init=2),
              "bo_bos": lambda: policies.bo_bos(cand, max_budget=3, max_evals=5, n0=1, num_paths=50,
                                                num_init=2)}[name]()
    state = policy.init(jax.random.key(0))
    told = []
    for t, loss in enumerate([0.5, -np.inf, 0.3, np.inf, 0.4]):
        job, state = policy.ask(jax.random.key(t + 1), state)
        told.append(int(job.config))
        state, info = policy.tell(state, job, policies.make_result(loss, 3))
    assert int(info.incumbent) == told[2] and float(info.incumbent_value) == 0.3
    inc = policies.update_incumbent(policies.init_incumbent(jnp.float64), -jnp.inf, 1)
    assert int(inc.config) == -1 and float(inc.value) == np.inf


@pytest.mark.parametrize("name", ["random_search", "gp_ucb", "auto_termination"])
def test_eager_tell_refuses_a_job_config_beyond_the_table(name):
    # A job of another table (row 10 of a 5-row policy) became random_search's incumbent, a
    # row that does not exist, and gp_ucb / auto_termination_bo clipped it to row 4 and
    # marked that candidate evaluated. An eager tell now names job.config; -1 stays allowed.
    cand = jnp.linspace(0.0, 1.0, 5)[:, None]
    policy = {"random_search": lambda: policies.random_search(5, max_budget=3),
              "gp_ucb": lambda: policies.gp_ucb(cand, max_budget=3, max_evals=5, num_init=2),
              "auto_termination": lambda: policies.auto_termination_bo(
                  max_budget=3, max_evals=5, candidates=cand, threshold=0.1, num_init=2)}[name]()
    state = policy.init(jax.random.key(0))
    job, state = policy.ask(jax.random.key(1), state)
    for bad in (5, 10, -2):
        with pytest.raises(ValueError, match=r"job\.config must be a row of the policy's table, 0\.\.4"):
            policy.tell(state, job._replace(config=jnp.asarray(bad, jnp.int32)), policies.make_result(0.3, 3))
    state, info = policy.tell(state, job, policies.make_result(0.3, 3))
    assert int(info.incumbent) == int(job.config)


def test_gp_ucb_without_initial_points_breaks_the_flat_prior_tie_at_random():
    # With num_init = 0 the first pick is the LCB's minimiser under the GP prior, which is
    # flat: every candidate ties. argmin gave row 0 in every study whatever the key. The
    # tie now goes to a uniform candidate. Oracle: over 40 keys the first picks of 6 rows are
    # uniform; P(a row is never picked) = (5/6)^40 = 7e-4, P(row 0 in more than 20 of
    # them) < 1e-6 (binomial tail), so distinct picks >= 4 and row 0's share fail the
    # old code only.
    cand = jnp.linspace(0.0, 1.0, 6)[:, None]
    policy = policies.gp_ucb(cand, max_budget=3, max_evals=6, num_init=0)
    firsts = []
    for seed in range(40):
        job, _ = policy.ask(jax.random.key(seed), policy.init(jax.random.key(1000 + seed)))
        firsts.append(int(job.config))
    counts = np.bincount(firsts, minlength=6)
    assert np.count_nonzero(counts) >= 4 and counts[0] <= 20, counts


@pytest.mark.parametrize("name", ["sh", "hyperband", "subsampling"])
def test_halving_draws_the_same_rows_in_and_out_of_x64_mode(name):
    # A float32 study's configurations are drawn from its key alone: JAX's x64 mode (an
    # environment setting, JAX_ENABLE_X64) must not change which rows a study trains.
    rng = np.random.default_rng(3)
    table = sim.CurveTable(np.sort(rng.uniform(0.2, 1.0, (40, 9)), axis=1)[:, ::-1].astype(np.float32))
    make = {"sh": lambda: policies.sh(40, 9, num_start=12, dtype=jnp.float32),
            "hyperband": lambda: policies.hyperband(40, 9, dtype=jnp.float32),
            "subsampling": lambda: policies.subsampling(40, 9, num_start=12, dtype=jnp.float32)}[name]
    key = jax.random.key(7)
    on = sim.run(make(), table, key, record="jobs")
    with jax.enable_x64(False):
        off = sim.run(make(), table, key, record="jobs")
    assert on.jobs.config.dtype == off.jobs.config.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(on.jobs.config), np.asarray(off.jobs.config))
    np.testing.assert_array_equal(np.asarray(on.incumbent), np.asarray(off.incumbent))


def _np_log_kde(x, data, min_bw):
    """log of the mean product-Gaussian density of ``data`` at ``x`` (float64), bandwidths
    max(1.06 std n^(-1/(d+4)), min_bw) with the population std (statsmodels' normal_reference)."""
    n, d = data.shape
    bw = np.maximum(1.06 * data.std(axis=0) * n ** (-1 / (d + 4)), min_bw)
    s = np.sum(-0.5 * ((x[:, None, :] - data[None]) / bw) ** 2 - np.log(bw), axis=-1)
    return np.log(np.mean(np.exp(s - s.max(1, keepdims=True)), axis=1)) + s.max(1)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_bohb_counts_a_diverged_run_among_the_bad_results(dtype):
    # 21 rows on [0, 1]; every row's result at the one rung budget: x <= 0.5 gives a finite
    # loss (two minima, at 0 and 0.5), x > 0.5 diverges (NaN, and +inf, -inf). BOHB's model
    # dropped the non-finite results: g was fitted on the mediocre rows of [0.05, 0.45] only,
    # l (rows 0 and 0.5, a wide bandwidth) over g grew into the tails and the model proposed
    # x = 1, a diverged row. HpBandSter's bohb config generator (new_result) counts a
    # non-finite loss as +inf among the bad results. Oracle: a literal NumPy transcription of
    # its split (stable argsort of the losses with non-finite -> inf; the best max(d + 1,
    # floor(0.15 n)) good, the next max(d + 1, floor(0.85 n)) bad) and of the KDE ratio.
    from jaxstop.policies._halving import bohb_density
    from jaxstop.policies._halving.params import default_params

    x = np.linspace(0.0, 1.0, 21)
    loss = np.where(x <= 0.5, np.minimum(x, 0.51 - x), np.nan)
    loss[-3:] = [np.inf, -np.inf, np.nan]
    n, m = 21, 24
    st = bohb_density.init_bohb_state(n, m, dtype)
    st = st._replace(rec_config=st.rec_config.at[:n].set(jnp.arange(n, dtype=jnp.int32)),
                     rec_level=st.rec_level.at[:n].set(0), rec_loss=st.rec_loss.at[:n].set(jnp.asarray(loss, dtype)),
                     rec_count=jnp.asarray(n, jnp.int32))
    cand = jnp.asarray(x[:, None], dtype)
    params = default_params(dtype, 9)._replace(random_fraction=jnp.asarray(0.0, dtype))
    # the transcription (d = 1: n_min = 2; n_good = 3, n_bad = 17 of 21: the last diverged one is left out)
    idx = np.argsort(np.where(np.isfinite(loss), loss, np.inf), kind="stable")
    n_good, n_bad = max(2, (15 * n) // 100), max(2, (85 * n) // 100)
    want_good, want_bad = idx[:n_good], idx[n_good:n_good + n_bad]
    usable, data, good, bad = bohb_density.split(cand, st, params, 1, m)
    rows_of = lambda mask: np.round(np.asarray(data)[np.asarray(mask), 0] * 20).astype(int).tolist()  # noqa: E731
    assert bool(usable)
    assert rows_of(good) == want_good.tolist() and rows_of(bad) == want_bad.tolist()
    assert not np.isin(want_good, np.flatnonzero(x > 0.5)).any()
    assert np.isin(np.flatnonzero(x > 0.5)[:-1], want_bad).all()
    # the model-based proposal over every row: argmax of log l - log g, decided by more than
    # float32 rounding (the ratio's logs are O(10): a few 1e-6 of reach against the gap)
    score = _np_log_kde(x[:, None], x[want_good, None], 1e-3) - _np_log_kde(x[:, None], x[want_bad, None], 1e-3)
    top2 = np.sort(score)[-2:]
    assert top2[1] - top2[0] > 1e-2
    for seed in range(3):
        row = int(bohb_density.propose(jax.random.key(seed), cand, st, params, 1, n, m))
        assert row == int(np.argmax(score)) and x[row] <= 0.5


@pytest.mark.parametrize("x64", [False, True])
def test_python_numbers_and_jax_scalars_share_the_compiled_steps(x64):
    # Python numbers are weakly typed under jit: a loop driven by hand with
    # make_result(float(loss), ...) compiled every step once more when the loss came from a
    # jitted training step (a strongly typed scalar), or from Result(loss, ...) built by hand;
    # so did params._replace(threshold=0.9) against the defaults, eagerly and in sim.run
    # (the documented way to set params). Such numbers are now made strong (params in the
    # defaults' dtype): one program each, and the same decisions.
    with jax.enable_x64(x64):
        values = error_curves(4)[:9]
        policy = policies.sh(9, N, eta=3, uq=True, delta_estimate="window")
        d = policy.default_params()
        dt = d.threshold.dtype

        def loop(result, params=None):
            state, key = policy.init(jax.random.key(0), params), jax.random.key(1)
            for _ in range(9):
                key, k = jax.random.split(key)
                job, state = policy.ask(k, state, params)
                state, _ = policy.tell(state, job, result(float(values[int(job.config), int(job.budget) - 1]), job),
                                       params)
            return state

        with count_compilations() as first:
            ref = loop(lambda v, job: policies.make_result(v, job.budget))
        assert first["record"] == 1 and first["ask"] == 1  # the count sees the steps
        with count_compilations() as again:
            states = [loop(lambda v, job: policies.make_result(jnp.asarray(v, dt), job.budget)),
                      loop(lambda v, job: policies.Result(v, job.budget, False)),
                      loop(lambda v, job: policies.make_result(v, job.budget), d._replace(threshold=0.9)),
                      # the defaults as Python floats, without delta_profile (None: filled in)
                      loop(lambda v, job: policies.make_result(v, job.budget),
                           policies.HalvingParams(*(float(v) for v in d[:6])))]
        assert again.total() == 0, again
        for state in states:
            for a, b in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(state)):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        # a float32 policy: under x64 too the Python floats become float32, the defaults' dtype
        policy = policies.sh(9, N, eta=3, uq=True, delta_estimate="window", dtype=jnp.float32)
        d = policy.default_params()
        table = sim.CurveTable(jnp.asarray(values))
        ref = sim.run(policy, table, jax.random.key(2))
        with count_compilations() as run_again:
            tr = sim.run(policy, table, jax.random.key(2), d._replace(threshold=0.9, min_sigma=2.0**-18))
        assert run_again["_run"] == 0, run_again
        assert d.threshold == np.float32(0.9) and d.min_sigma == np.float32(2.0**-18)  # the same values
        for a, b in zip(jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(tr)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_simulator_and_schedule_flags_must_be_bools(tmp_path):
    # "no" is truthy: batched="no" asked for the batch protocol, progress="no" printed,
    # return_labels="no" returned labels, halving_schedule(uq="no") bounded SH+'s jobs
    table = sim.CurveTable(jnp.full((4, 3), 0.5), jnp.ones((4, 3), bool))
    policy = policies.random_search(4, max_budget=3)
    with pytest.raises(TypeError, match="batched must be a bool"):
        sim.run(policy, table, jax.random.key(0), max_jobs=2, batched="no")
    with pytest.raises(TypeError, match="progress must be a bool"):
        sim.run_many(policy, table, jax.random.key(0), 2, max_jobs=2, progress="no")
    with pytest.raises(TypeError, match="return_labels must be a bool"):
        sim.CurveTable.from_long([0, 1], [1, 1], [0.5, 0.4], return_labels="no")
    with pytest.raises(TypeError, match="uq must be a bool"):
        policies.halving_schedule("sh", 9, 9, uq="no")
    assert sim.run(policy, table, jax.random.key(0), max_jobs=2, batched=np.bool_(False)).incumbent.shape == ()


def test_curve_lengths_names_a_table_that_is_not_one():
    # an AttributeError about .mask, or an IndexError for 1-D values, came from inside
    with pytest.raises(TypeError, match="table must be a jaxstop.sim.CurveTable"):
        sim.curve_lengths(None)
    with pytest.raises(ValueError, match="table.values must be 2-D"):
        sim.curve_lengths(sim.CurveTable(jnp.ones(3)))
    table = sim.CurveTable([[0.5, 0.4, 0.3]], np.array([[True, True, False]]))
    assert sim.curve_lengths(table).tolist() == [2]
    assert sim.curve_lengths(sim.CurveTable([[0.5, 0.4, 0.3]])).tolist() == [3]
