"""One simulated study (:func:`run`) and a batch of them sharded over devices (:func:`run_batch`)."""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks as _checks
from jaxstop._src import batching
from jaxstop._src.batching import any_in_batch, gated_cond
from jaxstop.policies import Job, Policy, Result
from jaxstop.sim._table import CurveTable, check_table, curve_lengths

__all__ = ["RECORDS", "Trace", "batch_program", "check_record", "check_run_args", "resolve_params", "run",
           "run_batch"]

#: What a :class:`Trace` holds, by the ``record`` argument of the runners: ``"full"`` every
#: step's job, result and policy info; ``"jobs"`` the same without the infos; ``"final"``
#: the study's outcome only (the per-step fields are ``None``).
RECORDS = ("full", "jobs", "final")


class Trace(NamedTuple):
    """One simulated HPO run.

    Attributes:
        incumbent: Index of the configuration the run returns, int32 ().
        incumbent_value: Its loss at the end of its curve (its fully trained loss), ().
        incumbent_test: Its test loss at the end of its curve (NaN without ``test``), ().
        budget: Total budget units spent, int32 ().
        stop_job: Index of the job after which the policy terminated the study, or
            ``max_jobs`` if it never did, int32 ().
        num_jobs: Number of jobs run (``stop_job + 1``, or the jobs run before
            ``max_jobs`` cut the study), int32 ().
        bad_jobs: Jobs the table could not answer, int32 (): a config index outside the
            table (clipped), a configuration without a valid entry (its result is NaN at
            epoch 0), or a non-finite loss at the job's end. The last two only happen
            with a table traced under ``jit`` / ``vmap``, whose values cannot be checked.
        jobs: The :class:`~jaxstop.policies.Job` of every step, stacked (max_jobs, ...).
        results: The :class:`~jaxstop.policies.Result` of every step.
        infos: The policy's info of every step (``None`` unless ``record="full"``).
        active: Whether step j ran (before termination), shape (max_jobs,) bool.
        spent: Cumulative budget after each step, shape (max_jobs,) int32.
        incumbents: Incumbent after each step, shape (max_jobs,) int32.
        truncated: Whether ``max_jobs`` ended the study before the policy terminated
            it, bool ().

    With ``record="final"`` the per-step fields (``jobs`` to ``incumbents``) are ``None``:
    the study's outcome costs a few bytes instead of ``max_jobs`` rows (about 22 KB per
    SH+ study on a 64-row table with ``"full"``, 10 KB with ``"jobs"``, 29 bytes with ``"final"``).
    """

    incumbent: jax.Array
    incumbent_value: jax.Array
    incumbent_test: jax.Array
    budget: jax.Array
    stop_job: jax.Array
    num_jobs: jax.Array
    bad_jobs: jax.Array
    jobs: Job
    results: Result
    infos: Any
    active: jax.Array
    spent: jax.Array
    incumbents: jax.Array
    truncated: jax.Array


#: A policy state larger than this (bytes per study) trains each study's job on its own under
#: ``vmap`` (see :func:`_evaluate`).
ALONE_STATE_BYTES = 1 << 16


def _state_bytes(state) -> int:
    return sum(int(a.size) * a.dtype.itemsize for a in jax.tree_util.tree_leaves(state))


def _evaluate(policy: Policy, table: CurveTable, lengths, job: Job, state, params, run=True):
    """Trains ``job`` against the table: per-epoch ``report`` calls, early exit; nothing
    when ``run`` is False (a finished study).

    Under ``vmap`` the studies' epochs run in lockstep: every epoch until the batch's
    longest job ends, and each selects every study's whole state (finished jobs keep
    theirs). That pays for small states (the UQ halving policies: a few KB). A state
    above :data:`ALONE_STATE_BYTES` (BO-BOS holds its BOS decision table, about 220 KB on
    a 100-epoch table) trains each study's job on its own instead, one after the other on
    CPU (:func:`jaxstop._src.batching.grouped_on_cpu` with groups of one), vectorised on
    other platforms. Values are the same either way (the same per-study program)."""
    num_configs = table.values.shape[0]
    c = jnp.clip(job.config, 0, num_configs - 1)
    row = table.values[c]
    end = jnp.clip(job.budget, 1, lengths[c])
    start = jnp.clip(job.start, 0, end)
    # a row without a valid entry (only in a traced table) has no loss to give
    some = lengths[c] > 0
    nan = jnp.asarray(jnp.nan, row.dtype)
    if policy.report is None:
        return Result(jnp.where(some, row[jnp.maximum(end - 1, 0)], nan), end, jnp.asarray(False)), state

    def train(row, start, end, state, job, params):
        def cond(carry):
            e, stopped, _, _ = carry
            return (e < end) & ~stopped

        def body(carry):
            e, _, state, _ = carry
            value = row[e]
            state, stop = policy.report(state, job, e + 1, value, params)
            return e + 1, jnp.asarray(stop, bool), state, value

        init = (start, jnp.asarray(False), state, row[jnp.maximum(start - 1, 0)])
        return jax.lax.while_loop(cond, body, init)

    stop_at = jnp.where(run, end, start)
    if _state_bytes(state) > ALONE_STATE_BYTES:
        train = batching.grouped_on_cpu(train, 1)
    epoch, stopped, state, value = train(row, start, stop_at, state, job, params)
    return Result(jnp.where(some, value, nan), epoch.astype(jnp.int32), stopped), state


def _lookup(table: CurveTable, lengths, job: Job, history: int) -> Result:
    """The result of one job of the batch protocol (no early stopping) with the last
    ``history`` losses up to its end, oldest first, left-aligned, NaN-padded."""
    num_configs, epochs = table.values.shape
    c = jnp.clip(job.config, 0, num_configs - 1)
    end = jnp.clip(job.budget, 1, lengths[c])
    # one contiguous slice of the row (under vmap a gather of whole slices, not of
    # single losses); first <= epochs - h since end <= epochs, so it is never shifted
    h = min(history, epochs)
    first = jnp.maximum(end - h, 0)
    window = jax.lax.dynamic_slice(table.values, (c, first), (1, h))[0]
    hist = jnp.where(jnp.arange(h) < end - first, window, jnp.nan)
    if history > h:
        hist = jnp.concatenate([hist, jnp.full((history - h,), jnp.nan, hist.dtype)])
    # a row without a valid entry (only in a traced table) has no loss to give
    value = jnp.where(end > 0, table.values[c, jnp.maximum(end - 1, 0)], jnp.nan)
    return Result(value, end.astype(jnp.int32), jnp.asarray(False), hist)


class _Carry(NamedTuple):
    """The simulator's loop state: the policy's state and the study's counters."""

    state: Any
    n: jax.Array          # jobs run
    done: jax.Array       # the policy terminated the study
    spent: jax.Array
    incumbent: jax.Array
    stop_job: jax.Array
    bad: jax.Array        # jobs the table could not answer (Trace.bad_jobs)


def check_record(record) -> str:
    """Checks the ``record`` argument of the runners (one of :data:`RECORDS`)."""
    if record not in RECORDS:
        raise ValueError(f"record must be one of {RECORDS}, got {record!r}")
    return record


def _compact(staged, act, max_jobs: int):
    """The first ``max_jobs`` active slots of ``staged`` (leaves of shape (steps, width, ...)),
    in step and slot order (the order the one-job protocol would run them), zero-padded;
    and their ``active`` flags."""
    steps, width = act.shape
    flat = jax.tree_util.tree_map(lambda a: a.reshape((steps * width,) + a.shape[2:]), (staged, act))
    total = steps * width
    if total < max_jobs:
        flat = jax.tree_util.tree_map(
            lambda a: jnp.concatenate([a, jnp.zeros((max_jobs - total,) + a.shape[1:], a.dtype)]), flat)
    if width > 1:
        # a batch's active slots may leave gaps: the index of the k-th active slot, by one
        # scatter of slot indices to their ranks among the active ones (a stable partition,
        # far cheaper than a sort on CPU), then one gather per field
        act = flat[1]
        rank = jnp.where(act, jnp.cumsum(act) - 1, max_jobs)
        order = jnp.zeros((max_jobs,), jnp.int32).at[rank].set(
            jnp.arange(act.shape[0], dtype=jnp.int32), mode="drop")
        staged = jax.tree_util.tree_map(lambda a: a[order], flat[0])
        return staged, jnp.arange(max_jobs) < jnp.sum(act)
    # one job per step: the active steps are a prefix (a finished study stays finished)
    return jax.tree_util.tree_map(lambda a: a[:max_jobs], flat)


def _run(policy: Policy, table: CurveTable, key, params, max_jobs: int, batched: bool, record: str = "full") -> Trace:
    num_configs = table.values.shape[0]
    lengths = curve_lengths(table)
    k_init, k_loop = jax.random.split(key)
    state0 = policy.init(k_init, params)
    width = policy.batch_size if batched else 1
    # loop iterations: one per job, or one per batch (the policy's bound, at most max_jobs)
    steps = max_jobs
    if batched and policy.limits.max_batches is not None:
        steps = min(steps, policy.limits.max_batches)

    def play(state, k, run):
        """One loop iteration: ``width`` job slots, their ``active`` mask, one info."""
        if batched:
            jobs, act, state = policy.ask_batch(k, state, params)
            results = jax.vmap(lambda j: _lookup(table, lengths, j, policy.history))(jobs)
            return jobs, act, results, state
        job, state = policy.ask(k, state, params)
        result, state = _evaluate(policy, table, lengths, job, state, params, run)
        add = lambda t: jax.tree_util.tree_map(lambda a: a[None], t)  # noqa: E731
        return add(job), jnp.ones((1,), bool), add(result), state

    # an outcome-only record reads only the info after a batch's last active job
    last_only = batched and record == "final" and policy.tell_batch_last is not None

    def tell(state, jobs, act, results):
        """The state, one info per slot (None with ``last_only``) and the info after the
        last active slot."""
        if last_only:
            state, info = policy.tell_batch_last(state, jobs, results, act, params)
            return state, None, info
        if batched:
            state, infos = policy.tell_batch(state, jobs, results, act, params)
        else:
            one = lambda t: jax.tree_util.tree_map(lambda a: a[0], t)  # noqa: E731
            state, info = policy.tell(state, one(jobs), one(results), params)
            infos = jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], info)
        last = width - 1 - jnp.argmax(act[::-1])
        return state, infos, jax.tree_util.tree_map(lambda a: a[last], infos)

    keys = jax.random.split(k_loop, steps)

    def live(c: _Carry, k):
        """One iteration of a running study: its carry and its slots (jobs, results, infos,
        active)."""
        jobs, act, results, state = play(c.state, k, running(c))
        # never run more than max_jobs jobs: later slots of a batch stay un-run (a running
        # count over the slots, computed only at a step where some study needs the cut)
        n = c.n
        cut = lambda a: a & (n + jnp.cumsum(a.astype(jnp.int32)) - 1 < max_jobs)  # noqa: E731
        act = gated_cond(n + jnp.sum(act.astype(jnp.int32)) > max_jobs, cut, lambda a: a, act)
        state, infos, info = tell(state, jobs, act, results)
        results = results._replace(history=None)
        count = jnp.sum(act).astype(jnp.int32)
        cost = jnp.where(act, results.epoch - jnp.clip(jobs.start, 0, results.epoch), 0)
        incumbent = jnp.where(count > 0, jnp.asarray(info.incumbent, jnp.int32), c.incumbent)
        terminate = (count > 0) & jnp.asarray(info.terminate, bool)
        n = c.n + count
        # a job on a row without a valid entry has a NaN result (_lookup, _evaluate)
        answered = (jobs.config >= 0) & (jobs.config < num_configs) & jnp.isfinite(results.value)
        bad = jnp.sum(act & ~answered).astype(jnp.int32)
        c = _Carry(state, n, c.done | terminate, c.spent + jnp.sum(cost).astype(jnp.int32), incumbent,
                   jnp.where(terminate, n - 1, c.stop_job), c.bad + bad)
        return c, recorded(jobs, results, infos, act)

    def recorded(jobs, results, infos, act):
        """The rows of one iteration that the trace keeps (by ``record``), ``act`` last: the
        slots' jobs, results, and infos (``"full"``) or only their incumbents (``"jobs"``)."""
        if record == "final":
            return (act,)
        return (jobs, results, infos if record == "full" else jnp.asarray(infos.incumbent, jnp.int32), act)

    def running(c: _Carry):
        return ~c.done & (c.n < max_jobs)

    def cond(loop):
        i, c, _ = loop
        # under vmap: while some study of the batch runs (an unbatched counter, so each
        # iteration writes its rows in place); a finished study stays as it is
        return (i < steps) & any_in_batch(running(c))

    def body(loop):
        i, c, staged = loop
        # unbatched, the loop runs while the study does; under vmap a finished study's
        # carry stays as it is and its slots are marked not run
        run = running(c)
        new, rows = live(c, keys[i])
        c = jax.tree_util.tree_map(lambda a, b: jnp.where(run, a, b), new, c)
        *rows, act = rows
        if record == "final":
            return i + 1, c, staged
        rows = (*rows, act & run)
        staged = jax.tree_util.tree_map(lambda b, r: jax.lax.dynamic_update_index_in_dim(b, r, i, 0), staged, rows)
        return i + 1, c, staged

    zero = jnp.zeros((), jnp.int32)
    c0 = _Carry(state0, zero, jnp.asarray(False), zero, jnp.asarray(-1, jnp.int32), jnp.asarray(max_jobs, jnp.int32),
                zero)
    row_shapes = () if record == "final" else jax.eval_shape(live, c0, keys[0])[1]
    staged0 = jax.tree_util.tree_map(lambda sd: jnp.zeros((steps,) + sd.shape, sd.dtype), row_shapes)
    _, c, staged = jax.lax.while_loop(cond, body, (zero, c0, staged0))
    incumbent = c.incumbent
    inc = jnp.clip(incumbent, 0, num_configs - 1)
    last = jnp.maximum(lengths[inc] - 1, 0)
    has_inc = (incumbent >= 0) & (lengths[inc] > 0)
    nan = jnp.asarray(jnp.nan, table.values.dtype)
    inc_value = jnp.where(has_inc, table.values[inc, last], nan)
    inc_test = nan if table.test is None else jnp.where(has_inc, table.test[inc, last], nan)
    num_jobs = jnp.where(c.stop_job < max_jobs, c.stop_job + 1, c.n).astype(jnp.int32)
    if record == "final":
        return Trace(incumbent, inc_value, inc_test, c.spent, c.stop_job, num_jobs, c.bad,
                     None, None, None, None, None, None, ~c.done)
    *staged, act = staged
    (jobs, results, extra), active = _compact(tuple(staged), act, max_jobs)
    # "full" staged the infos, "jobs" only their incumbents
    incs = jnp.asarray(extra.incumbent if record == "full" else extra, jnp.int32)
    infos = extra if record == "full" else None
    # slots that did not run are zero in the trace
    jobs, results, infos = jax.tree_util.tree_map(
        lambda a: jnp.where(active.reshape(active.shape + (1,) * (a.ndim - 1)), a, jnp.zeros_like(a)),
        (jobs, results, infos))
    cost = jnp.where(active, results.epoch - jnp.clip(jobs.start, 0, results.epoch), 0)
    spent_t = jnp.cumsum(cost).astype(jnp.int32)
    # after the last job the cumulative budget and incumbent stay where they are
    ran = jnp.arange(max_jobs) < c.n
    spent_t = jnp.where(ran, spent_t, c.spent)
    incs = jnp.where(ran, incs, c.incumbent)
    return Trace(incumbent, inc_value, inc_test, c.spent, c.stop_job, num_jobs, c.bad,
                 jobs, results, infos, active, spent_t, incs, ~c.done)


_run_jit = jax.jit(_run, static_argnames=("policy", "max_jobs", "batched", "record"))


def check_run_args(policy, table, max_jobs, batched):
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be a jaxstop.policies.Policy, got {type(policy).__name__}")
    table = check_table(table)
    rows = table.values.shape[0]
    limits = policy.limits
    if limits.num_configs is not None and limits.num_configs != rows:
        raise ValueError(
            f"the policy indexes {limits.num_configs} configurations but table.values has {rows} rows "
            f"(shape {table.values.shape}: rows are configurations, columns budget units)"
        )
    width = table.values.shape[1]
    if limits.max_budget is not None and width < limits.max_budget:
        raise ValueError(
            f"the policy trains jobs up to max_budget={limits.max_budget} budget units but table.values has "
            f"{width} columns (shape {table.values.shape}): build the policy with max_budget <= {width}"
        )
    if max_jobs is None:
        if limits.max_jobs is None:
            raise ValueError("max_jobs is required: this policy does not bound the number of jobs of a study")
        max_jobs = limits.max_jobs
    max_jobs = _checks.positive_int(max_jobs, "max_jobs")
    if batched is None:
        batched = policy.ask_batch is not None
    elif _checks.boolean(batched, "batched") and policy.ask_batch is None:
        raise ValueError("batched=True needs a policy with the batch protocol (policy.ask_batch)")
    return table, max_jobs, bool(batched)


def resolve_params(policy: Policy, params):
    """``params``, or the policy's defaults for ``None``; ``TypeError`` naming ``params``
    unless it has the structure of ``policy.default_params()`` (the same pytree of the same
    types; under ``vmap`` over params a batch axis on the leaves is fine).

    Params go through the policy's check, as in an eager step (which may also complete
    them: a ``None`` field the policy documents, such as ``HalvingParams.delta_profile``,
    becomes its default, under ``jit`` / ``vmap`` too); the values of traced params (``vmap``
    over params, a batch axis) are the caller's to check, as inside any ``jit``."""
    defaults = policy.default_params()
    if params is None or params is defaults:  # the policy's own defaults need no check
        return defaults
    # Python numbers (defaults()._replace(threshold=0.2)) typed as the defaults: one program for both
    params = _checks.strong_like(params, defaults)
    check = getattr(policy.init, "check", None)
    if check is not None and type(params) is type(defaults):
        # before the structure test: the check may complete the params (a documented None field)
        params = check(policy.init.static.value, params)
    want, got = jax.tree_util.tree_structure(defaults), jax.tree_util.tree_structure(params)
    if want != got:
        raise TypeError(f"params must have the structure of policy.default_params() "
                        f"({type(defaults).__name__}: {want}), got {type(params).__name__}: {got}; "
                        "build them with policy.default_params()._replace(...)")
    return params


def run(policy: Policy, table: CurveTable, key: jax.Array, params: Any = None, *, max_jobs: int | None = None,
        batched: bool | None = None, record: str = "full") -> Trace:
    """Plays one HPO run of ``policy`` against ``table`` in one jitted loop.

    Each step asks the policy for a job, trains it against the table (calling
    ``policy.report`` after every budget unit, if the policy has one, and stopping
    when it says so; a job never trains past the end of its configuration's curve),
    and tells the policy the result. The loop ends when the policy sets
    ``info.terminate`` or after ``max_jobs`` jobs; under ``jax.vmap`` it runs while
    some study does (a finished study keeps its state, and its results never depend on
    the other studies' values; a batch of another size is another compiled program,
    whose rounding can turn a float32 decision at a near-tie) and ends when every study
    has.

    With the batch protocol (``batched``, the default for policies that offer it,
    e.g. SH / Hyperband and their UQ versions) a step runs a whole round: every job of
    ``policy.ask_batch`` is looked up at once and ``policy.tell_batch`` makes the
    round's decision once. The trace is that of the one-job-at-a-time protocol (the
    policy's contract); only the keys differ (one per round instead of one per job).

    Args:
        policy: A :class:`~jaxstop.policies.Policy`.
        table: The curves to play against; its rows must be the policy's
            configurations (``policy.limits.num_configs``), else ``ValueError``.
        key: PRNG key.
        params: The policy's numeric hyperparameters; default ``policy.default_params()``.
        max_jobs: Most jobs to run (static); default ``policy.limits.max_jobs``, the
            policy's own bound (required when the policy has none). A smaller value
            cuts studies short: ``Trace.truncated`` says which.
        batched: Use the batch protocol (static); default: when the policy has it.
        record: What the trace keeps (static): ``"full"`` (default) every
            step's job, result and policy info; ``"jobs"`` the same without the infos
            (all that :func:`~jaxstop.sim.summarize` reads); ``"final"`` the outcome only
            (incumbent, its losses, budget, stop step; the per-step fields ``None``). The
            outcome is the same whatever is recorded; a smaller record is faster and
            smaller in large studies.

    Returns:
        A :class:`Trace`. Works under ``jax.vmap`` over keys, params or tables.
    """
    table, max_jobs, batched = check_run_args(policy, table, max_jobs, batched)
    record = check_record(record)
    _checks.check_key(key)
    params = resolve_params(policy, params)
    return _run_jit(policy, table, key, params, max_jobs, batched, record)


def run_batch(
    policy: Policy,
    table: CurveTable,
    keys: jax.Array,
    params: Any = None,
    *,
    max_jobs: int | None = None,
    devices=None,
    batched: bool | None = None,
    record: str = "full",
) -> Trace:
    """Many independent runs (one per key), sharded over ``devices``.

    The key batch is split evenly over the devices (default: all local devices)
    with a 1-D ``jax.sharding.Mesh``; each device runs its share vmapped. The
    number of keys must be a multiple of the number of devices.

    Args:
        policy, table, params, max_jobs, batched, record: As in :func:`run` (``params`` shared
            by every run: for a sweep over params, ``jax.vmap`` :func:`run` over them).
        keys: PRNG keys, shape (num_runs,).
        devices: Devices to use; default ``jax.devices()``.

    Returns:
        A :class:`Trace` whose leaves have a leading (num_runs,) axis.
    """
    table, max_jobs, batched = check_run_args(policy, table, max_jobs, batched)
    record = check_record(record)
    params = resolve_params(policy, params)
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must name at least one device (or be None: all of them)")
    _checks.check_key(keys, "keys", batched=True)
    n = keys.shape[0]
    if n % len(devices):
        raise ValueError(f"the number of keys ({n}) must be a multiple of the number of devices ({len(devices)})")
    mesh = jax.sharding.Mesh(np.asarray(devices), ("runs",))
    keys = jax.device_put(keys, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs")))
    return batch_program(policy, table, keys, params, max_jobs, batched, mesh, record)


def batch_program(policy: Policy, table: CurveTable, keys, params, max_jobs: int, batched: bool, mesh,
                  record: str = "full") -> Trace:
    """The compiled program of a batch of runs (checked arguments): each device of
    ``mesh`` (a 1-D mesh, axis ``"runs"``) runs its share of ``keys``, in blocks of
    :data:`jaxstop._src.batching.CPU_BLOCK` studies on CPU and vmapped at once elsewhere
    (:func:`jaxstop._src.batching.map_in_blocks`)."""
    cpu = all(d.platform == "cpu" for d in mesh.devices.flat)
    return _batch_jit(policy, table, keys, params, max_jobs, batched, mesh, batching.CPU_BLOCK if cpu else None,
                      record)


@partial(jax.jit, static_argnames=("policy", "max_jobs", "batched", "mesh", "block", "record"))
def _batch_jit(policy, table, keys, params, max_jobs, batched, mesh, block, record):
    def local(keys, table, params):
        one = lambda k: _run(policy, table, k, params, max_jobs, batched, record)  # noqa: E731
        return batching.map_in_blocks(one, keys, block)

    runs, shared = jax.sharding.PartitionSpec("runs"), jax.sharding.PartitionSpec()
    return jax.shard_map(local, mesh=mesh, in_specs=(runs, shared, shared), out_specs=runs,
                         check_vma=False)(keys, table, params)
