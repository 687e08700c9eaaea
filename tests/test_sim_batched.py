"""The batch protocol (a whole round asked and told at once), the simulator's loop that
stops with its studies, and the simulator's checks of a policy against its table."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxstop import data, policies, sim
from test_confidence import P_ATOL, p_rtol

NUM, T = 27, 9


def curves(seed, n=NUM, t=T, ragged=False):
    """Decreasing noisy learning curves (rows: configurations), optionally ragged."""
    rng = np.random.default_rng(seed)
    floor = rng.uniform(0.1, 0.6, (n, 1))
    decay = rng.uniform(0.2, 1.0, (n, 1))
    v = floor + decay * np.exp(-0.3 * np.arange(1, t + 1))[None, :] + rng.normal(0, 0.01, (n, t))
    mask = None
    if ragged:
        lengths = rng.integers(2, t + 1, n)
        mask = np.arange(t)[None, :] < lengths[:, None]
        v = np.where(mask, v, np.nan)
    return v, mask


def leaves_equal(a, b):
    """Names of the leaves of two traces that differ (NaN equal to NaN)."""
    la, lb = jax.tree_util.tree_leaves_with_path(a), jax.tree_util.tree_leaves(b)
    return [jax.tree_util.keystr(p) for (p, x), y in zip(la, lb)
            if not np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)]


@pytest.mark.parametrize("factory", [policies.sh, policies.hyperband])
@pytest.mark.parametrize("ragged", [False, True])
def test_plain_halving_batched_trace_is_the_one_job_trace(factory, ragged):
    # The plain rules compare table values and add integers: both protocols compute
    # the same numbers exactly, so the whole traces (jobs, results, every info field,
    # budgets, incumbents) must be identical.
    v, mask = curves(1, ragged=ragged)
    table = sim.CurveTable(jnp.asarray(v, jnp.float32), None if mask is None else jnp.asarray(mask))
    policy = factory(NUM, T)
    first_rungs = [b.sizes[0] for b in policies.halving_schedule(factory.__name__, NUM, T).brackets]
    assert policy.ask_batch is not None and policy.batch_size == max(first_rungs)
    for k in range(3):
        one = sim.run(policy, table, jax.random.key(k), batched=False)
        batch = sim.run(policy, table, jax.random.key(k))  # the default for this policy
        assert leaves_equal(one, batch) == []
        assert not bool(batch.truncated)


@pytest.mark.parametrize("factory", [policies.sh, policies.hyperband])
def test_uq_halving_batched_trace_is_the_one_job_trace(factory):
    # The UQ rule's window statistics and keep_count run in two different programs.
    # Their inputs are the same table values; the rounding of a window std of
    # W = 11 losses is <= ~W u |loss| ~ 1e-15 relative in float64. Margin check: the
    # decisions of the batched program do not change when every loss moves by up to
    # 1e-9 relative (six orders of magnitude above that rounding), so no decision sits
    # within rounding of its threshold; then the discrete parts are compared exactly.
    v, _ = curves(2)
    table = sim.CurveTable(jnp.asarray(v))
    policy = factory(NUM, T, uq=True)
    key = jax.random.key(5)
    batch = sim.run(policy, table, key)
    rng = np.random.default_rng(0)
    for _ in range(2):
        nudged = v * (1.0 + 1e-9 * rng.uniform(-1, 1, v.shape))
        moved = sim.run(policy, sim.CurveTable(jnp.asarray(nudged)), key)
        np.testing.assert_array_equal(moved.jobs.config, batch.jobs.config)
        np.testing.assert_array_equal(moved.jobs.budget, batch.jobs.budget)
        np.testing.assert_array_equal(moved.infos.kept, batch.infos.kept)
    one = sim.run(policy, table, key, batched=False)
    assert int(one.num_jobs) == int(batch.num_jobs)
    discrete = lambda t: (t.jobs, t.results.epoch, t.active, t.spent, t.incumbents, t.incumbent,  # noqa: E731
                          t.budget, t.stop_job, t.infos._replace(tau=None, incumbent_value=None))
    assert leaves_equal(discrete(one), discrete(batch)) == []
    # tau is keep_count's threshold probability, computed by two programs from the same
    # inputs: test_confidence's p_rtol bounds the rounding of such probabilities.
    np.testing.assert_allclose(one.infos.tau, batch.infos.tau, rtol=p_rtol(NUM), atol=P_ATOL)
    np.testing.assert_array_equal(one.infos.incumbent_value, batch.infos.incumbent_value)


def test_batched_runs_vmap_and_cut_at_max_jobs():
    v, _ = curves(3)
    table = sim.CurveTable(jnp.asarray(v, jnp.float32))
    policy = policies.sh(NUM, T)
    keys = jax.random.split(jax.random.key(0), 4)
    runs = jax.vmap(lambda k: sim.run(policy, table, k))(keys)
    for i, k in enumerate(keys):
        assert leaves_equal(sim.run(policy, table, k, batched=False), jax.tree_util.tree_map(lambda a: a[i], runs)) == []
    # a cut in the middle of the second round: the first jobs of the full study, then nothing
    full = sim.run(policy, table, keys[0])
    cut_at = policy.batch_size + 2
    assert int(full.num_jobs) > cut_at + 1
    for batched in (False, True):
        cut = sim.run(policy, table, keys[0], max_jobs=cut_at, batched=batched)
        assert bool(cut.truncated) and int(cut.num_jobs) == cut_at and int(cut.stop_job) == cut_at
        np.testing.assert_array_equal(cut.jobs.config, full.jobs.config[:cut_at])
        assert int(cut.budget) == int(full.spent[cut_at - 1])


def test_finished_studies_leave_the_trace_as_if_max_jobs_were_exact():
    # max_jobs far above what the studies need: the loop stops with the studies and the
    # steps after termination are zero / carry the final values, as documented.
    v, _ = curves(4)
    table = sim.CurveTable(jnp.asarray(v, jnp.float32))
    policy = policies.sh(NUM, T)
    bound = policy.limits.max_jobs
    for batched in (False, True):
        exact = sim.run(policy, table, jax.random.key(1), max_jobs=bound, batched=batched)
        wide = sim.run(policy, table, jax.random.key(1), max_jobs=4 * bound, batched=batched)
        n = int(exact.num_jobs)
        assert int(wide.num_jobs) == n and not bool(wide.truncated)
        np.testing.assert_array_equal(wide.jobs.config[:bound], exact.jobs.config)
        assert not np.asarray(wide.active)[n:].any()
        assert (np.asarray(wide.jobs.budget)[n:] == 0).all()
        assert (np.asarray(wide.spent)[n:] == int(exact.budget)).all()
        assert (np.asarray(wide.incumbents)[n:] == int(exact.incumbent)).all()


def test_run_checks_the_policy_against_the_table():
    v, _ = curves(5, n=20)
    table = sim.CurveTable(jnp.asarray(v))
    with pytest.raises(ValueError, match="50 configurations but table.values has 20 rows"):
        sim.run(policies.sh(50, T), table, jax.random.key(0))
    transposed = sim.CurveTable(jnp.asarray(v.T))  # (T, 20): rows are budget units
    with pytest.raises(ValueError, match="20 configurations but table.values has 9 rows"):
        sim.run(policies.sh(20, T), transposed, jax.random.key(0))
    with pytest.raises(ValueError, match="max_jobs is required"):
        sim.run(policies.random_search(dim=2, max_budget=T), table, jax.random.key(0))
    with pytest.raises(ValueError, match="batch protocol"):
        sim.run(policies.random_search(20, max_budget=T), table, jax.random.key(0), batched=True)
    # the default max_jobs is the policy's own bound: random search without replacement
    # evaluates every row once and terminates
    tr = sim.run(policies.random_search(20, max_budget=T), table, jax.random.key(0))
    assert tr.jobs.config.shape == (20,) and sorted(np.asarray(tr.jobs.config).tolist()) == list(range(20))
    assert not bool(tr.truncated)
    assert int(tr.incumbent) == int(np.argmin(v[:, -1]))


def test_a_policy_without_the_batch_protocol_cannot_half_declare_it():
    from jaxstop.policies import build_policy, make_job, Info

    def init(cfg, key, params):
        return jnp.zeros((), jnp.int32)

    def ask(cfg, key, state, params):
        return make_job(state, jnp.zeros((0,)), 1), state

    def tell(cfg, state, job, result, params):
        return state + 1, Info(state + 1 >= 3, job.config)

    with pytest.raises(ValueError, match="both or neither"):
        build_policy((3,), init=init, ask=ask, tell=tell, ask_batch=ask)
    with pytest.raises(ValueError, match="give tell_batch too"):
        build_policy((3,), init=init, ask=ask, tell=tell, tell_batch_last=tell)


def _results(v, jobs, active, history):
    """The table's results of a batch of jobs, as the simulator gives them (NumPy): the loss
    at each job's end (clipped to the curve), and its last ``history`` losses up to there,
    oldest first, NaN-padded on the right."""
    config = np.clip(np.asarray(jobs.config), 0, v.shape[0] - 1)
    end = np.clip(np.asarray(jobs.budget), 1, v.shape[1])
    hist = np.full((config.shape[0], history), np.nan)
    for i, (c, e) in enumerate(zip(config, end)):
        part = v[c, max(e - history, 0):e]
        hist[i, :part.shape[0]] = part
    return policies.make_result(v[config, end - 1], end, np.zeros(end.shape, bool))._replace(history=jnp.asarray(hist))


def _assert_same_study(a, b, uq):
    """Equal pytrees: exactly, or for the UQ rule's floats within ``p_rtol``. The plain rules
    compare losses and add integers, the same numbers in any program. The UQ rule's window
    statistics and keep threshold are computed by two programs (``tell_batch`` and
    ``tell_batch_last`` compile apart, and XLA may fuse and order their sums differently):
    test_confidence's ``p_rtol`` bounds the rounding of its probabilities, and a window std of
    ``W`` losses rounds by ~W eps relative, far below it. Integers and flags stay exact."""
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(la, lb):
        x, y = np.asarray(x), np.asarray(y)
        if uq and np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=p_rtol(NUM), atol=P_ATOL)
        else:
            np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("factory,uq", [(policies.sh, False), (policies.hyperband, False), (policies.sh, True)])
def test_tell_batch_last_is_the_last_row_of_tell_batch(factory, uq):
    """Through a whole study, driven by hand: ``tell_batch_last`` leaves ``tell_batch``'s
    state and returns its info at the batch's last active slot (compared as in
    :func:`_assert_same_study`)."""
    v, _ = curves(4)
    policy = factory(NUM, T, uq=uq)
    state = policy.init(jax.random.key(2))
    keys = jax.random.split(jax.random.key(3), policy.limits.max_batches)
    for k in keys:
        jobs, active, state = policy.ask_batch(k, state)
        results = _results(v, jobs, active, policy.history)
        state_rows, infos = policy.tell_batch(state, jobs, results, active)
        state_last, info = policy.tell_batch_last(state, jobs, results, active)
        _assert_same_study(state_rows, state_last, uq)
        if np.any(active):
            last = int(np.flatnonzero(np.asarray(active))[-1])
            _assert_same_study(jax.tree_util.tree_map(lambda a: a[last], infos), info, uq)
        state = state_rows
        if bool(info.terminate):
            break
    assert bool(info.terminate)


def test_an_integer_seed_where_a_key_belongs_says_how_to_make_a_key():
    v, _ = curves(6)
    table = sim.CurveTable(jnp.asarray(v))
    policy = policies.sh(NUM, T)
    for call in (lambda: sim.run(policy, table, 0), lambda: policy.init(0),
                 lambda: policy.ask(0, policy.init(jax.random.key(0)))):
        with pytest.raises(TypeError, match=r"key must be a PRNG key: pass jax.random.key\(seed\)"):
            call()
    with pytest.raises(TypeError, match="keys must be a 1-D array of PRNG keys"):
        sim.run_batch(policy, table, jax.random.key(0))
    # make_result builds the protocol's Result by hand, as make_job does a Job
    job, state = policy.ask(jax.random.key(1), policy.init(jax.random.key(0)))
    value = v[int(job.config), int(job.budget) - 1]
    state, info = policy.tell(state, job, policies.make_result(value, job.budget))
    assert int(info.incumbent) == int(job.config)


def _uneven_policy(batch: bool):
    """A toy policy whose studies end after a key-drawn number of steps (1..6), so the
    studies of a vmapped batch finish at different iterations. Its batch form asks 4 slots
    with gaps (slots 1 and 3 only, then 0 and 2, ...): the simulator compacts them."""
    from jaxstop.policies import Info, Limits, build_policy, make_job

    def init(cfg, key, params):
        return {"n": jnp.zeros((), jnp.int32), "end": jax.random.randint(key, (), 1, 7), "best": jnp.asarray(-1)}

    def ask(cfg, key, state, params):
        c = state["n"] % 5
        return make_job(c, jnp.zeros((0,)), 1 + c % 3), state

    def tell(cfg, state, job, result, params):
        n = state["n"] + 1
        state = {**state, "n": n, "best": job.config}
        return state, Info(n >= state["end"], job.config)

    def ask_batch(cfg, key, state, params):
        slots = jnp.arange(4)
        active = (slots % 2) == (state["n"] % 2)
        cfg = (state["n"] + slots) % 5
        return make_job(cfg, jnp.zeros((4, 0)), 1 + cfg % 3, jnp.zeros((4,))), active, state

    def tell_batch(cfg, state, jobs, results, active, params):
        n = state["n"] + jnp.cumsum(active, dtype=jnp.int32)
        end = n >= state["end"]
        state = {**state, "n": state["n"] + jnp.sum(active, dtype=jnp.int32), "best": jobs.config[3]}
        return state, Info(end, jobs.config)

    extra = dict(ask_batch=ask_batch, tell_batch=tell_batch, batch_size=4) if batch else {}
    return build_policy(("uneven", batch), init=init, ask=ask, tell=tell, limits=Limits(5, None, 4 if batch else None),
                        **extra)


@pytest.mark.parametrize("batch", [False, True])
def test_studies_ending_at_different_steps_do_not_depend_on_their_batch(batch):
    """Each study of a vmapped batch equals the same study run alone (and run in another
    batch): a finished study keeps its state while the others go on, and the trace
    compacts a batch's active slots in order."""
    v, _ = curves(5)
    table = sim.CurveTable(jnp.asarray(v[:5], jnp.float32))
    policy = _uneven_policy(batch)
    # integers and table lookups only (no float arithmetic): batched and single runs are
    # compared bit for bit
    keys = jax.random.split(jax.random.key(2), 6)
    runs = jax.jit(jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=12)))(keys)
    ends = [int(jax.random.randint(jax.random.split(k)[0], (), 1, 7)) for k in keys]
    assert len(set(ends)) > 1  # the studies do end at different steps
    for i, k in enumerate(keys):
        alone = sim.run(policy, table, k, max_jobs=12)
        assert leaves_equal(alone, jax.tree_util.tree_map(lambda a: a[i], runs)) == []
        # the jobs the protocol runs, by hand: one job per step, or the active slots of a batch
        n_done, configs = 0, []
        for step in range(12):
            if batch:
                slots = [s for s in range(4) if s % 2 == n_done % 2]
                for s in slots:
                    if len(configs) < 12:
                        configs.append((n_done + s) % 5)
                n_done += len(slots)
            else:
                configs.append(n_done % 5)
                n_done += 1
            if n_done >= ends[i] or len(configs) >= 12:
                break
        n = int(alone.num_jobs)
        assert np.asarray(alone.jobs.config)[:n].tolist() == configs[:n]
        assert np.asarray(alone.active).tolist() == [j < n for j in range(12)]
        assert np.asarray(alone.spent)[:n].tolist() == np.cumsum([1 + c % 3 for c in configs[:n]]).tolist()
    pair = jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=12))(keys[:2])
    assert leaves_equal(jax.tree_util.tree_map(lambda a: a[1], pair), jax.tree_util.tree_map(lambda a: a[1], runs)) == []


def _reporting_policy(state_floats: int):
    """A toy one-job policy with a per-epoch ``report`` that writes each epoch into a state
    array of ``state_floats`` entries and stops a job at a key-drawn epoch (2..8): studies
    of a vmapped batch train their jobs for different numbers of epochs."""
    from jaxstop.policies import Info, Limits, build_policy, make_job

    def init(cfg, key, params):
        return {"n": jnp.zeros((), jnp.int32), "stop_at": jax.random.randint(key, (), 2, 9),
                "seen": jnp.zeros((state_floats,), jnp.float32)}

    def ask(cfg, key, state, params):
        return make_job(state["n"] % 5, jnp.zeros((0,)), T), state

    def report(cfg, state, job, epoch, value, params):
        # one count per study's epoch (a batched epoch counts its members)
        jax.debug.callback(lambda e: calls.append(np.size(e)), epoch)
        seen = state["seen"].at[(state["n"] * T + epoch) % state_floats].set(value)
        return {**state, "seen": seen}, epoch >= state["stop_at"]

    def tell(cfg, state, job, result, params):
        n = state["n"] + 1
        return {**state, "n": n}, Info(n >= 3, job.config)

    calls = []
    policy = build_policy(("reporting", state_floats), init=init, ask=ask, report=report, tell=tell,
                          limits=Limits(5, 3, None))
    return policy, calls


@pytest.mark.parametrize("state_floats", [64, 2 * sim._run.ALONE_STATE_BYTES // 4])
def test_each_study_trains_its_job_alone_when_its_state_is_large(state_floats):
    """Under vmap a study's job runs the epochs it trains: with a state above
    ``ALONE_STATE_BYTES`` each study trains on its own, so ``report`` runs exactly the
    epochs the studies trained (their sum); a small state trains in lockstep, every epoch
    until the batch's longest job ends. Either way each study equals the study run alone
    (table lookups and writes only: bit for bit)."""
    v, _ = curves(7)
    table = sim.CurveTable(jnp.asarray(v[:5], jnp.float32))
    policy, calls = _reporting_policy(state_floats)
    keys = jax.random.split(jax.random.key(4), 4)
    runs = jax.jit(jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=3)))(keys)
    jax.effects_barrier()
    epochs = np.asarray(runs.results.epoch) - np.asarray(runs.jobs.start)
    assert len(set(epochs[:, 0].tolist())) > 1  # the studies' jobs do differ in length
    trained = int(np.sum(np.where(np.asarray(runs.active), epochs, 0)))
    if state_floats * 4 > sim._run.ALONE_STATE_BYTES:
        assert sum(calls) == trained
    else:
        assert sum(calls) > trained
    for i, k in enumerate(keys):
        alone = sim.run(policy, table, k, max_jobs=3)
        assert leaves_equal(alone, jax.tree_util.tree_map(lambda a: a[i], runs)) == []


def test_uq_hyperband_studies_vmapped_together_equal_each_run_alone():
    # Hyperband+ on the embedded AlexNet curves: plateaued runs (losses at 0.999, sigma at
    # its floor) sit far behind the leaders, so a round whose uncertainty grows keeps every
    # candidate with a resolved probability of being the best (k* = n, tau = 1). The
    # probabilities of the plateaued runs (~1e-40) are below the quadrature's resolution and
    # a batch of studies computes other values for them than a single study (which skips
    # other nodes); the keep count used to count them as positive, and study 2 kept 32
    # candidates in the batch where it kept 18 alone. A study's outcome must not depend on
    # the studies it is batched with. float64: both programs get the same table values.
    a = data.alexnet_curves()
    table = sim.CurveTable(jnp.asarray(a.values, jnp.float64), jnp.asarray(a.mask))
    policy = policies.hyperband(*table.values.shape, uq=True, delta_estimate="window")
    keys = jax.random.split(jax.random.key(0), 3)
    together = jax.vmap(lambda k: sim.run(policy, table, k, record="final"))(keys)
    for i, k in enumerate(keys):
        alone = sim.run(policy, table, k, record="final")
        assert leaves_equal(alone, jax.tree_util.tree_map(lambda x: x[i], together)) == [], i
