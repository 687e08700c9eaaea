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

A policy whose jobs come in rounds (a rung of successive halving) may also offer the
batch form of the protocol: ``ask_batch`` returns every job of the round at once (a
fixed ``batch_size`` of slots with an ``active`` mask) and ``tell_batch`` takes all their
results, so round-level work (a keep decision) runs once per round instead of behind a
``lax.cond`` at every job. The contract: a batch is the jobs ``ask`` would return one at
a time, in slot order, and ``tell_batch`` leaves the state ``report`` and ``tell`` would
after them, with the infos ``tell`` would return after each job. ``report`` is not
called in the batch form; a policy declares instead the
per-job loss history it needs (``history``: the simulator passes the last ``history``
losses of every job in ``Result.history``)::

    jobs, active, state = policy.ask_batch(key, state, params)    # jobs: leading axis
    results = ...                                                  # every active job
    state, infos = policy.tell_batch(state, jobs, results, active, params)   # one info per job
    state, info = policy.tell_batch_last(state, jobs, results, active, params)  # or: the last one

``tell_batch_last`` (optional) is ``tell_batch`` for a caller that reads only the info
after the batch's last active job (a simulation that keeps a study's outcome alone): the
same state, that one info, and none of the per-job running values (incumbent, budget)
that the rows before it cost.

Such a policy also states in ``Limits.max_batches`` how many batches a study asks at
most (for the halving family: its rounds, plus one batch of profiling jobs): the simulator
stages every batch's rows in place and compacts them once at the end, so its buffers grow
with ``max_batches x batch_size``.

Every policy is built the same way (like optax's aliases): its factory validates the
arguments, puts the static ones in a configuration NamedTuple and calls
:func:`build_policy` with module-level step functions ``step(config, *args, params)``.
:func:`build_policy` fills in default params, jits each step once per equal configuration
(:class:`Static` hashes it by value, so equal policies are equal and compile once) and
dispatches between eager calls (compiled steps) and traced ones (the step runs inside the
caller's program). Every policy tracks its incumbent with :class:`Incumbent` and
:func:`update_incumbent` (a strict running minimum of the finite losses: ties keep the
earlier result); its loss is ``incumbent_value`` everywhere.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks

__all__ = ["Policy", "Job", "Result", "Info", "make_job", "make_result", "InitFn", "AskFn", "ReportFn", "TellFn",
           "AskBatchFn", "TellBatchFn", "TellBatchLastFn", "Limits", "Incumbent", "init_incumbent", "improves",
           "update_incumbent", "Static", "Step", "DefaultParams", "jit_step", "build_policy", "no_params",
           "renamed_field"]


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
        history: For the batch protocol only: the last ``policy.history`` losses up to
            ``epoch``, oldest first, left-aligned and NaN-padded when fewer were
            trained, shape (history,); ``None`` otherwise.
    """

    value: jax.Array
    epoch: jax.Array
    stopped: jax.Array
    history: Any = None


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


class AskBatchFn(Protocol):
    """``ask_batch(key, state, params) -> (jobs, active, state)``: every job of the next round;
    ``jobs`` has a leading (batch_size,) axis, ``active`` (batch_size,) bool marks the real ones."""

    def __call__(self, key: jax.Array, state: Any, params: Any = ...) -> tuple[Job, jax.Array, Any]: ...


class TellBatchFn(Protocol):
    """``tell_batch(state, jobs, results, active, params) -> (state, infos)``: the results of the
    ``active`` jobs of a batch (leading (batch_size,) axes); ``infos`` has the same leading axis,
    each row the info ``tell`` would return after that job (inactive rows are unspecified)."""

    def __call__(self, state: Any, jobs: Job, results: Result, active: jax.Array,
                 params: Any = ...) -> tuple[Any, Any]: ...


class TellBatchLastFn(Protocol):
    """``tell_batch_last(state, jobs, results, active, params) -> (state, info)``: the state of
    ``tell_batch`` and its row at the batch's last active job alone (with no active job, the
    info of the state after the batch)."""

    def __call__(self, state: Any, jobs: Job, results: Result, active: jax.Array,
                 params: Any = ...) -> tuple[Any, Any]: ...


class Limits(NamedTuple):
    """What a policy knows statically about the studies it can run (checked by :mod:`jaxstop.sim`).

    Attributes:
        num_configs: Rows of the candidate table its jobs index (``None`` when its jobs are
            points of the unit cube, ``job.config == -1``).
        max_jobs: Most jobs one study runs before the policy terminates it (``None`` when
            the policy does not terminate by itself).
        max_batches: Most batches of the batch protocol one study asks before the policy
            terminates it (``None``: unknown; the simulator then allows ``max_jobs``
            batches, and a study's trace buffers grow with ``max_jobs x batch_size``).
        max_budget: Most budget units a job of the policy trains (``None``: unknown); a
            table for :mod:`jaxstop.sim` needs at least as many columns.
    """

    num_configs: Optional[int] = None
    max_jobs: Optional[int] = None
    max_batches: Optional[int] = None
    max_budget: Optional[int] = None


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
        ask_batch: The batch form of ``ask`` (:class:`AskBatchFn`), or ``None``.
        tell_batch: The batch form of ``tell`` (:class:`TellBatchFn`), or ``None``.
        batch_size: Slots of a batch (static int; 0 without the batch form).
        history: Losses per job ``tell_batch`` needs in ``Result.history`` (static int).
        limits: The policy's :class:`Limits` (table rows, most jobs of a study).
        tell_batch_last: ``tell_batch`` returning only the info after the batch's last active
            job (:class:`TellBatchLastFn`), or ``None`` (callers take that row of ``tell_batch``'s).
    """

    init: InitFn
    ask: AskFn
    report: Optional[ReportFn]
    tell: TellFn
    default_params: Callable[[], Any]
    ask_batch: Optional[AskBatchFn] = None
    tell_batch: Optional[TellBatchFn] = None
    batch_size: int = 0
    history: int = 0
    limits: Limits = Limits()
    tell_batch_last: Optional[TellBatchLastFn] = None


def make_job(config, x, budget, start=0) -> Job:
    """Builds a :class:`Job` with the protocol's dtypes."""
    return Job(
        jnp.asarray(config, jnp.int32),
        jnp.asarray(x),
        jnp.asarray(budget, jnp.int32),
        jnp.asarray(start, jnp.int32),
    )


def make_result(value, epoch, stopped=False) -> Result:
    """Builds a :class:`Result` with the protocol's dtypes, strongly typed (e.g. when driving a policy by hand).

    Example:
        >>> r = make_result(0.25, 10)
        >>> float(r.value), int(r.epoch), bool(r.stopped)
        (0.25, 10, False)
    """
    return Result(jnp.asarray(checks.strong(value)), jnp.asarray(epoch, jnp.int32), jnp.asarray(stopped, bool))


# --------------------------------------------------------------------------------------
# The incumbent: one tracker for every policy


class Incumbent(NamedTuple):
    """The configuration a study would return now.

    Attributes:
        value: Its loss, () (``inf`` before the first finite loss).
        config: Its table index, int32 () (-1 before any, and in unit-cube mode).
        x: Its configuration vector, shape (d,); ``None`` for policies that do not keep it.
    """

    value: jax.Array
    config: jax.Array
    x: Any = None


def init_incumbent(dtype, d: int | None = None) -> Incumbent:
    """No incumbent yet: ``value = inf``, ``config = -1`` and, when ``d`` is given, ``x = 0``
    of shape (d,).

    Example:
        >>> import jax.numpy as jnp
        >>> inc = init_incumbent(jnp.float32, 2)
        >>> float(inc.value), int(inc.config), inc.x.shape
        (inf, -1, (2,))
    """
    x = None if d is None else jnp.zeros((d,), dtype)
    return Incumbent(jnp.asarray(jnp.inf, dtype), jnp.asarray(-1, jnp.int32), x)


def improves(inc: Incumbent, value, *, ok=True, replace=False) -> jax.Array:
    """Whether ``value`` takes over the incumbent: ``ok & isfinite(value) & (replace | (value < inc.value))``.

    A NaN or ``+-inf`` loss (a run that diverged; a ``-inf`` would beat every later result) never
    becomes the incumbent, ties keep the earlier one (strict ``<``); ``replace`` (e.g. a result at
    a higher rung) wins regardless of the loss, ``ok`` masks results out. Returns bool ()."""
    value = jnp.asarray(value)
    return jnp.asarray(ok) & jnp.isfinite(value) & (jnp.asarray(replace) | (value < inc.value))


def update_incumbent(inc: Incumbent, value, config, x=None, *, ok=True, replace=False) -> Incumbent:
    """The incumbent after a result ``(value, config, x)``, by the rule of :func:`improves`.

    Dtypes follow ``inc``: ``value`` and ``x`` are cast to ``inc``'s, ``config`` to int32.

    Example:
        >>> import jax.numpy as jnp
        >>> inc = init_incumbent(jnp.float32)
        >>> inc = update_incumbent(inc, jnp.float32(0.5), 3)
        >>> inc = update_incumbent(inc, jnp.float32(jnp.nan), 4)     # NaN never wins
        >>> inc = update_incumbent(inc, jnp.float32(-jnp.inf), 6)    # nor does -inf
        >>> inc = update_incumbent(inc, jnp.float32(0.5), 5)         # ties keep the earlier
        >>> float(inc.value), int(inc.config)
        (0.5, 3)
    """
    value = jnp.asarray(value).astype(jnp.result_type(inc.value))
    better = improves(inc, value, ok=ok, replace=replace)
    new_x = inc.x
    if inc.x is not None and x is not None:
        new_x = jnp.where(better, jnp.asarray(x).astype(inc.x.dtype), inc.x)
    return Incumbent(
        jnp.where(better, value, inc.value),
        jnp.where(better, jnp.asarray(config, jnp.int32), inc.config).astype(jnp.int32),
        new_x,
    )


# --------------------------------------------------------------------------------------
# Building a policy from module-level step functions


def _static_key(value):
    """A hashable stand-in for a static configuration: arrays by content (by identity
    when traced), containers element-wise, everything else as itself."""
    if isinstance(value, (jax.Array, np.ndarray)):
        if isinstance(value, jax.core.Tracer):
            return ("traced", id(value))
        a = np.asarray(value)
        return ("array", a.shape, a.dtype.str, a.tobytes())
    if isinstance(value, tuple):
        return (type(value),) + tuple(_static_key(v) for v in value)
    if isinstance(value, list):
        return (list,) + tuple(_static_key(v) for v in value)
    if isinstance(value, dict):
        return (dict,) + tuple((k, _static_key(v)) for k, v in sorted(value.items()))
    return value


def _concrete(tree) -> bool:
    return checks.is_concrete(*jax.tree_util.tree_leaves(tree))


class Static:
    """A policy's static configuration, hashable by value.

    Two policies built from equal configurations (the same sizes, flags and array
    contents) are equal, so :func:`jaxstop.sim.run` and the steps' jitted programs
    compile once for both. ``value`` is the configuration itself.
    """

    __slots__ = ("value", "_key", "_hash", "concrete")

    def __init__(self, value):
        self.value = value
        self._key = _static_key(value)
        self._hash = hash(self._key)
        self.concrete = _concrete(value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, Static) and (self is other or (self._hash == other._hash and self._key == other._key))

    def __repr__(self) -> str:
        return f"Static({type(self.value).__name__})"

    def __reduce__(self):
        # rebuilt from the configuration: the hash of its key (strings among it) is per process
        return Static, (self.value,)


@functools.lru_cache(maxsize=None)
def jit_step(fn: Callable) -> Callable:
    """``fn(config, *args)`` jitted once per function: call it as ``jit_step(fn)(static, *args)``
    with a :class:`Static` configuration; equal configurations share the compiled program."""

    def call(static, *args):
        return fn(static.value, *args)

    call.__name__, call.__qualname__, call.__doc__ = fn.__name__, fn.__qualname__, fn.__doc__
    return jax.jit(call, static_argnums=0)


_KEYED = ("init", "ask", "ask_batch")
_ARITY = {"init": 1, "ask": 2, "report": 4, "tell": 3, "ask_batch": 2, "tell_batch": 4, "tell_batch_last": 4}


def _protocol_signature(protocol) -> inspect.Signature:
    """The public signature of a protocol function: the Protocol's ``__call__`` without
    ``self``, annotations resolved to types (``help`` shows ``job: Job``, not a string) and
    ``params`` optional."""
    sig = inspect.signature(protocol.__call__, eval_str=True)
    return sig.replace(parameters=[p.replace(default=None) if p.name == "params" else p
                                   for p in list(sig.parameters.values())[1:]])


_SIGNATURES = {"init": _protocol_signature(InitFn), "ask": _protocol_signature(AskFn),
               "report": _protocol_signature(ReportFn), "tell": _protocol_signature(TellFn),
               "ask_batch": _protocol_signature(AskBatchFn), "tell_batch": _protocol_signature(TellBatchFn),
               "tell_batch_last": _protocol_signature(TellBatchLastFn)}


class Step:
    """One protocol function of a policy: a module-level step ``fn(config, *args, params)``
    bound to the policy's :class:`Static` configuration.

    A call fills in ``params`` (``None`` -> the policy's default params; given params go
    through the policy's ``check_params``), and dispatches: with concrete arguments (a Python loop
    over the protocol) it runs ``eager(static, *args, params)`` if the policy gives one,
    else ``fn`` compiled once per equal configuration (:func:`jit_step`); traced (inside
    ``jit`` / ``vmap`` / ``lax.scan``, e.g. :func:`jaxstop.sim.run`) it runs ``fn`` itself
    into the caller's program. Steps are equal when their functions and configurations are
    (equal policies are equal). ``help(policy.tell)`` shows the protocol's typed signature.
    """

    def __init__(self, name, fn, static, defaults, check=None, eager=None, num_configs=None):
        self.name, self.fn, self.static, self.defaults, self.check, self.eager, self.num_configs = (
            name, fn, static, defaults, check, eager, num_configs)
        self.nargs = _ARITY[name]
        self.__doc__ = fn.__doc__
        self.__name__ = name
        self.__signature__ = _SIGNATURES[name]

    def _key(self):
        return (self.name, self.fn, self.static, self.defaults, self.check, self.eager, self.num_configs)

    def __reduce__(self):  # from its parts: its protocol signature does not pickle
        return Step, self._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other) -> bool:
        return isinstance(other, Step) and self._key() == other._key()

    def __repr__(self) -> str:
        return f"<policy step {self.name}: {self.fn.__module__}.{self.fn.__qualname__}>"

    def __get__(self, obj, objtype=None):
        """A step is a routine to :mod:`inspect` and :mod:`pydoc` (a method descriptor), so
        ``help(policy.ask)`` documents it as a function, typed signature first. Steps live in
        a policy's fields, never as class attributes, so binding returns the step itself."""
        return self

    def __call__(self, *args, params=None):
        if len(args) == self.nargs + 1:
            if params is not None:
                raise TypeError(f"{self.name}() got params twice")
            *args, params = args
        elif len(args) != self.nargs:
            raise TypeError(f"{self.name}() takes {self.nargs} arguments and optional params, got {len(args)}")
        args = checks.check_step_args(self.name, args, self.name in _KEYED, self.num_configs)
        defaults = self.defaults()
        if params is None:
            params = defaults
        elif self.check is not None and params is not defaults:
            params = self.check(self.static.value, checks.strong_like(params, defaults))
        if self.static.concrete and _concrete((args, params)):
            if self.eager is not None:
                return self.eager(self.static, *args, params)
            return jit_step(self.fn)(self.static, *args, params)
        return self.fn(self.static.value, *args, params)


class DefaultParams:
    """``default_params()`` of a policy: ``fn(config)``; equal for equal configurations.

    Concrete defaults (JAX arrays, immutable) are kept per ``jax_enable_x64`` setting and
    returned again: a Python loop of eager steps or :func:`jaxstop.sim.run` calls no longer
    rebuilds them (about half of a plain SH study's time there, ``benchmarks/RESULTS.md``).
    Traced ones are never kept; a copy or an unpickled policy builds them anew.
    """

    def __init__(self, fn, static):
        self.fn, self.static = fn, static
        self.__doc__ = fn.__doc__
        self._kept = {}

    def __reduce__(self):
        return DefaultParams, (self.fn, self.static)

    def __hash__(self) -> int:
        return hash((self.fn, self.static))

    def __eq__(self, other) -> bool:
        return isinstance(other, DefaultParams) and (self.fn, self.static) == (other.fn, other.static)

    def __call__(self):
        x64 = bool(jax.config.jax_enable_x64)
        value = self._kept.get(x64)
        if value is None:
            value = self.fn(self.static.value)
            leaves = jax.tree_util.tree_leaves(value)
            if all(isinstance(a, jax.Array) for a in leaves) and checks.is_concrete(*leaves):
                self._kept[x64] = value
        return value


def no_params(config) -> tuple:
    """The params of a policy without numeric hyperparameters: ``()``."""
    return ()


def build_policy(config, *, init, ask, tell, report=None, default_params=no_params, check_params=None,
                 eager=None, ask_batch=None, tell_batch=None, batch_size: int = 0, history: int = 0,
                 limits: Limits = Limits(), tell_batch_last=None) -> Policy:
    """A :class:`Policy` from module-level step functions and a static configuration.

    Every policy factory validates its arguments, builds ``config`` (a NamedTuple of
    Python values and arrays: sizes, flags, the candidate table) and calls this. The
    steps take the configuration first: ``init(config, key, params)``, ``ask(config,
    key, state, params)``, ``report(config, state, job, epoch, value, params)``,
    ``tell(config, state, job, result, params)``; the policy's functions have the
    protocol's signatures (:class:`InitFn`, ...) with ``params`` optional. See
    :class:`Step` for the dispatch.

    Args:
        config: The static configuration (hashed by value, see :class:`Static`).
        init, ask, tell: Step functions.
        report: Step function, or ``None`` when the policy needs no per-epoch values.
        default_params: ``default_params(config) -> params`` (default ``()``).
        check_params: ``check_params(config, params) -> params``, run eagerly on every
            call that passes params (validation, dtype casts), or ``None``.
        eager: Optional dict ``{name: fn(static, *args, params)}`` of steps to run
            instead of the compiled step when every argument is concrete (e.g. to
            call a shared kernel's own compiled program between jitted pieces).
        ask_batch, tell_batch: Step functions of the batch protocol
            (``ask_batch(config, key, state, params)``, ``tell_batch(config, state, jobs,
            results, active, params)``), both or neither. In the batch protocol
            ``report`` is not called: ``tell_batch`` reads ``Result.history`` instead.
        batch_size: Slots of a batch (required with the batch protocol).
        history: Losses per job ``tell_batch`` reads from ``Result.history``.
        limits: The policy's :class:`Limits` (an eager ``tell`` checks ``job.config`` against it).
        tell_batch_last: Optional step function (``tell_batch_last(config, state, jobs,
            results, active, params)``) returning ``tell_batch``'s state and its info at the
            batch's last active job alone; only with ``tell_batch``.

    Returns:
        A :class:`Policy`.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from typing import NamedTuple
        >>> class Config(NamedTuple):
        ...     num_configs: int
        >>> def init(cfg, key, params):
        ...     return jnp.zeros((), jnp.int32)
        >>> def ask(cfg, key, state, params):
        ...     return make_job(state % cfg.num_configs, jnp.zeros((0,)), 1), state
        >>> def tell(cfg, state, job, result, params):
        ...     return state + 1, Info(state + 1 >= cfg.num_configs, job.config)
        >>> p = build_policy(Config(3), init=init, ask=ask, tell=tell)
        >>> p == build_policy(Config(3), init=init, ask=ask, tell=tell)
        True
        >>> job, s = p.ask(jax.random.key(0), p.init(jax.random.key(1)))
        >>> int(job.config)
        0
    """
    static = Static(config)
    defaults = DefaultParams(default_params, static)
    eager = dict(eager or {})
    unknown = set(eager) - set(_ARITY)
    if unknown:
        raise ValueError(f"eager names unknown steps {sorted(unknown)}")
    if (ask_batch is None) != (tell_batch is None):
        raise ValueError("ask_batch and tell_batch go together: give both or neither")
    if tell_batch_last is not None and tell_batch is None:
        raise ValueError("tell_batch_last is a form of tell_batch: give tell_batch too")
    if ask_batch is not None:
        batch_size = checks.positive_int(batch_size, "batch_size")
        history = checks.positive_int(history, "history", minimum=0)
    else:
        batch_size, history = 0, 0
    limits = Limits(*limits)
    step = lambda name, fn: Step(name, fn, static, defaults, check_params, eager.get(name),  # noqa: E731
                                 limits.num_configs)
    maybe = lambda name, fn: None if fn is None else step(name, fn)  # noqa: E731
    return Policy(step("init", init), step("ask", ask), maybe("report", report), step("tell", tell), defaults,
                  maybe("ask_batch", ask_batch), maybe("tell_batch", tell_batch), batch_size, history,
                  limits, maybe("tell_batch_last", tell_batch_last))


def renamed_field(new: str, old: str) -> property:
    """A read-only property ``old`` that returns the field ``new`` and warns that ``old``
    is deprecated (kept for one release)."""

    def get(self):
        checks.deprecated(f"{type(self).__name__}.{old} is deprecated and will be removed in the next release; "
                          f"use .{new}", stacklevel=3)
        return getattr(self, new)

    return property(get, doc=f"Deprecated alias of ``{new}``.")
