"""Simulation studies: play a policy against a table of real learning curves.

:func:`run` plays one whole HPO run inside one jitted ``lax.scan``; ``jax.vmap``
over keys (or params) gives many runs, and :func:`run_batch` does that and
spreads the runs over all local devices with ``jax.sharding``.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxstop import policies, sim
    >>> curves = jnp.array([[0.9, 0.5, 0.4], [0.8, 0.7, 0.6], [0.95, 0.3, 0.2]])
    >>> table = sim.CurveTable(curves)
    >>> policy = policies.random_search(3, max_budget=3)
    >>> traces = jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=3))(
    ...     jax.random.split(jax.random.key(0), 4))
    >>> traces.incumbent.tolist()   # every run evaluates all 3 and returns the best
    [2, 2, 2, 2]
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks as _checks
from jaxstop.policies import Job, Policy, Result

__all__ = ["CurveTable", "Trace", "run", "run_batch", "curve_lengths"]


class CurveTable(NamedTuple):
    """Real learning curves of a loss to minimise.

    Attributes:
        values: Loss after each budget unit, shape (num_configs, max_budget);
            ``values[c, e - 1]`` is the loss of configuration ``c`` after ``e`` epochs.
        mask: Which entries exist, shape (num_configs, max_budget) bool; each row
            must be a prefix (a curve of length L has its first L entries valid).
            ``None`` means all valid.
        test: Optional held-out loss with the same layout as ``values``.
        configs: Optional configuration vectors in the unit cube, shape (num_configs, d).
    """

    values: jax.Array
    mask: Any = None
    test: Any = None
    configs: Any = None


class Trace(NamedTuple):
    """One simulated HPO run.

    Attributes:
        incumbent: Index of the configuration the run returns, int32 ().
        incumbent_value: Its loss at the end of its curve (its fully trained loss), ().
        incumbent_test: Its test loss at the end of its curve (NaN without ``test``), ().
        budget: Total budget units spent, int32 ().
        stop_job: Index of the job after which the policy terminated the study, or
            ``max_jobs`` if it never did, int32 ().
        num_jobs: Number of jobs run (``stop_job + 1``, or ``max_jobs``), int32 ().
        bad_jobs: Jobs whose config index was outside the table (clipped), int32 ().
        jobs: The :class:`~jaxstop.policies.Job` of every step, stacked (max_jobs, ...).
        results: The :class:`~jaxstop.policies.Result` of every step.
        infos: The policy's info of every step.
        active: Whether step j ran (before termination), shape (max_jobs,) bool.
        spent: Cumulative budget after each step, shape (max_jobs,) int32.
        incumbents: Incumbent after each step, shape (max_jobs,) int32.
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


def curve_lengths(table: CurveTable) -> jax.Array:
    """Number of valid budget units of every curve, shape (num_configs,) int32."""
    if table.mask is None:
        return jnp.full(table.values.shape[:1], table.values.shape[1], jnp.int32)
    return jnp.sum(table.mask, axis=1).astype(jnp.int32)


def _check_table(table: CurveTable) -> CurveTable:
    if not isinstance(table, CurveTable):
        raise TypeError(f"table must be a jaxstop.sim.CurveTable, got {type(table).__name__}")
    values = _checks.float_array(table.values, "table.values")
    _checks.check_rank(values, 2, "table.values", "with shape (num_configs, max_budget)")
    if values.shape[0] < 1 or values.shape[1] < 1:
        raise ValueError(f"table.values must be non-empty, got shape {values.shape}")
    mask = _checks.mask_array(table.mask, values.shape, "table.mask")
    if _checks.is_concrete(mask):
        m = np.asarray(mask)
        lengths = m.sum(axis=1)
        prefix = np.arange(m.shape[1])[None, :] < lengths[:, None]
        if not np.array_equal(m, prefix):
            raise ValueError("table.mask must mark a prefix of every row (curves start at epoch 1 without gaps)")
        if not np.all(lengths >= 1):
            raise ValueError("every curve in table.mask must have at least one valid entry")
    _checks.check_finite_where(values, mask, "table.values")
    test = table.test
    if test is not None:
        test = _checks.float_array(test, "table.test", values.dtype)
        if test.shape != values.shape:
            raise ValueError(f"table.test must have shape {values.shape} like table.values, got {test.shape}")
    configs = table.configs
    if configs is not None:
        configs = _checks.float_array(configs, "table.configs")
        _checks.check_rank(configs, 2, "table.configs", "with shape (num_configs, d)")
        if configs.shape[0] != values.shape[0]:
            raise ValueError(
                f"table.configs must have {values.shape[0]} rows like table.values, got {configs.shape[0]}"
            )
        _checks.check_unit_cube(configs, "table.configs")
    return CurveTable(values, mask, test, configs)


def _evaluate(policy: Policy, table: CurveTable, lengths, job: Job, state, params):
    """Trains ``job`` against the table: per-epoch ``report`` calls, early exit."""
    num_configs = table.values.shape[0]
    c = jnp.clip(job.config, 0, num_configs - 1)
    row = table.values[c]
    end = jnp.clip(job.budget, 1, lengths[c])
    start = jnp.clip(job.start, 0, end)
    if policy.report is None:
        return Result(row[end - 1], end, jnp.asarray(False)), state

    def cond(carry):
        e, stopped, _, _ = carry
        return (e < end) & ~stopped

    def body(carry):
        e, _, state, _ = carry
        value = row[e]
        state, stop = policy.report(state, job, e + 1, value, params)
        return e + 1, jnp.asarray(stop, bool), state, value

    init = (start, jnp.asarray(False), state, row[jnp.maximum(start - 1, 0)])
    epoch, stopped, state, value = jax.lax.while_loop(cond, body, init)
    return Result(value, epoch.astype(jnp.int32), stopped), state


def _run(policy: Policy, table: CurveTable, key, params, max_jobs: int) -> Trace:
    num_configs = table.values.shape[0]
    lengths = curve_lengths(table)
    k_init, k_loop = jax.random.split(key)
    state0 = policy.init(k_init, params)

    def play(state, k):
        job, state = policy.ask(k, state, params)
        result, state = _evaluate(policy, table, lengths, job, state, params)
        state, info = policy.tell(state, job, result, params)
        return state, job, result, info

    shapes = jax.eval_shape(play, state0, k_loop)
    placeholder = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes[1:])

    def step(carry, inp):
        state, done, spent, incumbent, stop_job, bad = carry
        j, k = inp
        new_state, job, result, info = jax.lax.cond(
            done, lambda s: (s, *placeholder), lambda s: play(s, k), state
        )
        active = ~done
        cost = jnp.where(active, result.epoch - jnp.clip(job.start, 0, result.epoch), 0)
        spent = spent + cost
        incumbent = jnp.where(active, jnp.asarray(info.incumbent, jnp.int32), incumbent)
        terminate = active & jnp.asarray(info.terminate, bool)
        stop_job = jnp.where(terminate, j, stop_job)
        bad = bad + (active & ((job.config < 0) | (job.config >= num_configs))).astype(jnp.int32)
        carry = (new_state, done | terminate, spent, incumbent, stop_job, bad)
        return carry, (job, result, info, active, spent, incumbent)

    carry0 = (
        state0,
        jnp.asarray(False),
        jnp.zeros((), jnp.int32),
        jnp.asarray(-1, jnp.int32),
        jnp.asarray(max_jobs, jnp.int32),
        jnp.zeros((), jnp.int32),
    )
    steps = (jnp.arange(max_jobs, dtype=jnp.int32), jax.random.split(k_loop, max_jobs))
    (_, _, spent, incumbent, stop_job, bad), (jobs, results, infos, active, spent_t, incs) = jax.lax.scan(
        step, carry0, steps
    )
    inc = jnp.clip(incumbent, 0, num_configs - 1)
    last = lengths[inc] - 1
    has_inc = incumbent >= 0
    nan = jnp.asarray(jnp.nan, table.values.dtype)
    inc_value = jnp.where(has_inc, table.values[inc, last], nan)
    inc_test = nan if table.test is None else jnp.where(has_inc, table.test[inc, last], nan)
    num_jobs = jnp.where(stop_job < max_jobs, stop_job + 1, max_jobs).astype(jnp.int32)
    return Trace(incumbent, inc_value, inc_test, spent, stop_job, num_jobs, bad,
                 jobs, results, infos, active, spent_t, incs)


_run_jit = jax.jit(_run, static_argnames=("policy", "max_jobs"))


def _check_run_args(policy, table, max_jobs):
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must be a jaxstop.policies.Policy, got {type(policy).__name__}")
    max_jobs = _checks.positive_int(max_jobs, "max_jobs")
    return _check_table(table), max_jobs


def run(policy: Policy, table: CurveTable, key: jax.Array, params: Any = None, *, max_jobs: int) -> Trace:
    """Plays one HPO run of ``policy`` against ``table`` in one jitted scan.

    Each of the ``max_jobs`` steps asks the policy for a job, trains it against
    the table (calling ``policy.report`` after every budget unit, if the policy
    has one, and stopping when it says so; a job never trains past the end of its
    configuration's curve), and tells the policy the result. After the policy
    sets ``info.terminate`` the remaining steps do nothing.

    Args:
        policy: A :class:`~jaxstop.policies.Policy`.
        table: The curves to play against.
        key: PRNG key.
        params: The policy's numeric hyperparameters; default ``policy.default_params()``.
        max_jobs: Number of steps (static).

    Returns:
        A :class:`Trace`. Works under ``jax.vmap`` over keys, params or tables.
    """
    table, max_jobs = _check_run_args(policy, table, max_jobs)
    if params is None:
        params = policy.default_params()
    return _run_jit(policy, table, key, params, max_jobs)


def run_batch(
    policy: Policy,
    table: CurveTable,
    keys: jax.Array,
    params: Any = None,
    *,
    max_jobs: int,
    devices=None,
) -> Trace:
    """Many independent runs (one per key), sharded over ``devices``.

    The key batch is split evenly over the devices (default: all local devices)
    with a 1-D ``jax.sharding.Mesh``; each device runs its share vmapped. The
    number of keys must be a multiple of the number of devices.

    Args:
        policy, table, params, max_jobs: As in :func:`run` (``params`` shared).
        keys: PRNG keys, shape (num_runs,).
        devices: Devices to use; default ``jax.devices()``.

    Returns:
        A :class:`Trace` whose leaves have a leading (num_runs,) axis.
    """
    table, max_jobs = _check_run_args(policy, table, max_jobs)
    if params is None:
        params = policy.default_params()
    devices = list(jax.devices() if devices is None else devices)
    if jnp.ndim(keys) != 1:
        raise ValueError(f"keys must be a 1-D array of PRNG keys, got shape {jnp.shape(keys)}")
    n = keys.shape[0]
    if n % len(devices):
        raise ValueError(f"the number of keys ({n}) must be a multiple of the number of devices ({len(devices)})")
    mesh = jax.sharding.Mesh(np.asarray(devices), ("runs",))
    sharded = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))
    keys = jax.device_put(keys, sharded)
    return _run_batch_jit(policy, table, keys, params, max_jobs)


@partial(jax.jit, static_argnames=("policy", "max_jobs"))
def _run_batch_jit(policy, table, keys, params, max_jobs):
    return jax.vmap(lambda k: _run(policy, table, k, params, max_jobs))(keys)

