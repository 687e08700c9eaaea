"""The functional ask/tell protocol every policy follows.

A policy is a :class:`Policy` — a NamedTuple of pure functions built by a
factory that closes over static configuration (sizes, counts). Numeric
hyperparameters live in a ``params`` pytree passed to every call, so a
simulation study can ``vmap`` over them; ``policy.default_params()`` gives the
defaults. States, jobs, results and infos are NamedTuples of arrays: they can
be jitted, vmapped over studies, carried through ``lax.scan`` and saved /
restored exactly with :func:`jaxstop.save` / :func:`jaxstop.load`.

One HPO step::

    job, state = policy.ask(key, state, params)
    for epoch in range(job.start + 1, job.budget + 1):        # optional hook
        state, stop = policy.report(state, job, epoch, loss[epoch], params)
        if stop: break
    state, info = policy.tell(state, job, result, params)     # info.terminate ends the study

``report`` may be ``None`` for policies that need no per-epoch values (the
simulator then evaluates a job with a single lookup).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp

__all__ = ["Policy", "Job", "Result", "Info", "make_job", "InitFn", "AskFn", "ReportFn", "TellFn"]


class Job(NamedTuple):
    """What to evaluate next.

    Attributes:
        config: Index of the configuration in the candidate table, int32 ()
            (-1 when the configuration is a free point ``x`` of the unit cube).
        x: The configuration as a point of the unit cube, shape (d,) (d may be 0
            for policies that only know table indices).
        budget: Train up to this many budget units (epochs), int32 ().
        start: Budget units already trained (resume from a checkpoint), int32 ();
            the job costs ``budget - start`` units when it runs to the end.
    """

    config: jax.Array
    x: jax.Array
    budget: jax.Array
    start: jax.Array


class Result(NamedTuple):
    """The outcome of a job.

    Attributes:
        value: Loss at the last budget unit trained, ().
        epoch: Last budget unit trained, int32 (); less than ``job.budget`` when the
            job was stopped early or the configuration's curve ended.
        stopped: Whether ``report`` stopped the job early, bool ().
    """

    value: jax.Array
    epoch: jax.Array
    stopped: jax.Array


class Info(NamedTuple):
    """What ``tell`` returns; policies may return their own NamedTuple with at
    least these two fields.

    Attributes:
        terminate: Whether the whole study should stop now, bool ().
        incumbent: Index of the configuration the study would return now, int32 ().
    """

    terminate: jax.Array
    incumbent: jax.Array


class InitFn(Protocol):
    """``init(key, params) -> state``: a fresh study's state."""

    def __call__(self, key: jax.Array, params: Any = ...) -> Any: ...


class AskFn(Protocol):
    """``ask(key, state, params) -> (job, state)``: the next job to run."""

    def __call__(self, key: jax.Array, state: Any, params: Any = ...) -> tuple[Job, Any]: ...


class ReportFn(Protocol):
    """``report(state, job, epoch, value, params) -> (state, stop)``: one budget unit's loss
    of a running job; ``stop`` (bool ()) ends the job early."""

    def __call__(self, state: Any, job: Job, epoch: jax.Array, value: jax.Array,
                 params: Any = ...) -> tuple[Any, jax.Array]: ...


class TellFn(Protocol):
    """``tell(state, job, result, params) -> (state, info)``: a finished job's result;
    ``info`` has at least ``terminate`` and ``incumbent`` (see :class:`Info`)."""

    def __call__(self, state: Any, job: Job, result: Result, params: Any = ...) -> tuple[Any, Any]: ...


class Policy(NamedTuple):
    """A stopping / scheduling policy as pure functions.

    Attributes:
        init: ``init(key, params) -> state``.
        ask: ``ask(key, state, params) -> (job, state)``.
        report: ``report(state, job, epoch, value, params) -> (state, stop)`` called
            after every budget unit, or ``None`` if the policy needs no per-epoch values.
        tell: ``tell(state, job, result, params) -> (state, info)``; ``info`` has at
            least ``terminate`` and ``incumbent``.
        default_params: ``default_params() -> params``, the default numeric
            hyperparameters (a pytree; ``()`` when there are none).
    """

    init: InitFn
    ask: AskFn
    report: Optional[ReportFn]
    tell: TellFn
    default_params: Callable[[], Any]


def make_job(config, x, budget, start=0) -> Job:
    """Builds a :class:`Job` with the protocol's dtypes."""
    return Job(
        jnp.asarray(config, jnp.int32),
        jnp.asarray(x),
        jnp.asarray(budget, jnp.int32),
        jnp.asarray(start, jnp.int32),
    )
