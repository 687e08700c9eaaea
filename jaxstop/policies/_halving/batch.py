"""The batch protocol of the rung engine: a whole round (or the whole profiling phase)
asked and told at once.

:func:`ask_batch` returns the jobs :func:`~jaxstop.policies._halving.engine.ask` would
return one at a time, :func:`tell_batch` leaves the state
:func:`~jaxstop.policies._halving.engine.report` and
:func:`~jaxstop.policies._halving.engine.tell` would after them, with the infos ``tell``
would return after each job (the contract of :mod:`jaxstop.policies._base`). Batches have
``Engine.batch`` slots: the bracket's ``cap`` slots, or the ``num_profile`` profiling jobs,
padded with inactive slots.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxstop._src import numerics
from jaxstop._src.status import Reason, first_reason
from jaxstop.policies._halving import profiling as _profiling
from jaxstop.policies._halving.engine import (Engine, at, cond, finish, flag, info, track_incumbent, uq_stats,
                                              where)
from jaxstop.policies._halving.params import clean_params
from jaxstop.policies._halving.state import HalvingInfo, HalvingState
from jaxstop.policies._base import Job, Result, make_job

__all__ = ["ask_batch", "last_losses", "record_batch", "tell_batch", "tell_batch_last"]


def _pad(tree, n: int):
    """Every leaf of ``tree`` padded with zeros (False) to ``n`` rows."""
    def pad(a):
        a = jnp.asarray(a)
        extra = n - a.shape[0]
        return a if extra == 0 else jnp.concatenate([a, jnp.zeros((extra,) + a.shape[1:], a.dtype)])
    return jax.tree_util.tree_map(pad, tree)


def _head(tree, n: int):
    """The first ``n`` rows of every leaf of ``tree``."""
    return jax.tree_util.tree_map(lambda a: None if a is None else jnp.asarray(a)[:n], tree)


def last_losses(history, epoch, width: int):
    """The last ``width`` losses up to ``epoch`` (left-aligned, oldest first, NaN-padded)
    from a longer history of the same layout (``Result.history``: the last ``H >= width``
    losses up to ``epoch``), shape (n, width)."""
    history = jnp.asarray(history)
    h = history.shape[1]
    if h == width:
        return history
    have = jnp.minimum(epoch, h)
    first = jnp.maximum(have - width, 0)
    idx = first[:, None] + jnp.arange(width)[None, :]
    vals = jnp.take_along_axis(history, jnp.clip(idx, 0, h - 1), axis=1)
    return jnp.where(idx < have[:, None], vals, jnp.nan)


def _running_reason(s: HalvingState, valid, bad):
    """The study-wide ``reason`` after each slot of a batch (``bad``: the slots whose loss
    was not finite), as :func:`~jaxstop.policies._halving.engine.record` sets it."""
    return first_reason((s.reason != int(Reason.OK), s.reason), (~valid | (jnp.cumsum(bad) > 0), Reason.BAD_INPUT))


def _running_incumbent(e: Engine, s: HalvingState, level, value, configs, ok):
    """The incumbent after each slot of a batch recorded in slot order by
    :func:`track_incumbent`: per slot (config, value)."""
    n = value.shape[0]
    ok = ok & jnp.isfinite(value) & (level >= s.inc_level)
    higher = level > s.inc_level
    v = jnp.where(ok, value, jnp.inf)
    # the first strict minimum so far (slot 0 while every value is inf): the last slot
    # below every earlier one, by two running reductions (O(n), not a pairwise matrix)
    lowest_before = jnp.concatenate([jnp.full((1,), jnp.inf, v.dtype), jax.lax.cummin(v)[:-1]])
    best = jax.lax.cummax(jnp.where(v < lowest_before, jnp.arange(n), 0))
    seen = jnp.cumsum(ok) > 0
    # at the incumbent's level a result must beat it; at a higher rung the first one replaces it
    takes = seen & (higher | (v[best] < s.incumbent_value))
    return (jnp.where(takes, configs[best], s.inc_config).astype(jnp.int32),
            jnp.where(takes, v[best], s.incumbent_value).astype(e.fdtype))


def record_batch(e: Engine, s: HalvingState, jobs: Job, results: Result, active, params, rows: bool = True):
    """Bookkeeping of a round's results (one per slot, ``active`` marks the real ones):
    the state :func:`~jaxstop.policies._halving.engine.record` leaves after them in slot
    order. Returns the state, (round over, last round) and the per-slot running values of
    the infos ``tell`` would return after each job (incumbent, its value, spent, unspent),
    or None without ``rows`` (their running sums and minima cost about a third of a
    simulated plain SH study on CPU)."""
    params, valid = clean_params(params)
    act = active & ~s.done & s.pending
    value = jnp.asarray(results.value).astype(e.fdtype)
    epoch = jnp.asarray(results.epoch).astype(jnp.int32)
    budget = jnp.asarray(jobs.budget).astype(jnp.int32)
    start = jnp.clip(jnp.asarray(jobs.start).astype(jnp.int32), 0, epoch)
    ended = (epoch < budget) | (epoch >= e.max_budget)
    cost = jnp.where(act, epoch - start, 0)
    released = jnp.where(act, s.alloc, 0) - cost
    level = at(e.rounds.level, s.round)
    running = None
    if rows:
        spent = (s.spent + jnp.cumsum(cost)).astype(jnp.int32)
        unspent = (s.unspent + jnp.cumsum(released)).astype(jnp.int32)
        running = _running_incumbent(e, s, level, value, s.configs, act) + (spent, unspent)
    s = s._replace(
        epochs=jnp.where(act, epoch, s.epochs),
        mu=jnp.where(act, value, s.mu),
        complete=jnp.where(act, s.complete | ended, s.complete),
        pending=s.pending & ~act,
        spent=(s.spent + jnp.sum(cost)).astype(jnp.int32),
        unspent=(s.unspent + jnp.sum(released)).astype(jnp.int32),
    )
    if e.uq:
        # the losses report() would have pushed: the table's last `width` up to `epoch`
        hist = last_losses(results.history, epoch, e.width).astype(e.fdtype)
        recent = jnp.where(act[:, None], hist, s.uq.recent)
        count = jnp.where(act, s.uq.count + (epoch - start), s.uq.count).astype(jnp.int32)
        sigma, delta = uq_stats(e, s, recent, count, params)
        s = s._replace(uq=s.uq._replace(recent=recent, count=count, sigma=sigma, delta=delta))
    bad = ~jnp.isfinite(value)
    if e.uq:
        bad = bad | ~numerics.finite_prefix(s.uq.recent, s.uq.count)
    bad = act & bad
    if rows:
        running = running + (_running_reason(s, valid, bad),)
    s = flag(s, (~valid | jnp.any(bad), Reason.BAD_INPUT))
    ok = act & jnp.isfinite(value)
    best = numerics.first_argmin(jnp.where(ok, value, jnp.inf))
    s = track_incumbent(e, s, level, value[best], s.configs[best], ok[best])
    round_over = ~s.done & ~jnp.any(s.pending)
    last = at(e.rounds.last, s.round)
    return s, round_over & ~last, round_over & last, running


def _rows(e: Engine, state: HalvingState, act, final: HalvingInfo, running, profile_ok) -> HalvingInfo:
    """One info per slot: the running values before the last active slot, ``final`` there."""
    n = act.shape[0]
    inc_config, inc_value, spent, unspent, reason = running
    last = jnp.arange(n) == (n - 1 - jnp.argmax(act[::-1]))
    rows = HalvingInfo(
        terminate=jnp.zeros((n,), bool),
        incumbent=inc_config,
        incumbent_value=inc_value,
        round=jnp.full((n,), state.round, jnp.int32),
        decisions=jnp.zeros((n,), jnp.int32),
        kept=jnp.full((n,), -1, jnp.int32),
        fallback=jnp.full((n,), not e.uq),
        tau=jnp.full((n,), jnp.nan, e.fdtype),
        round_budget=jnp.zeros((n,), jnp.int32),
        spent=spent,
        unspent=unspent,
        profile_ok=jnp.full((n,), profile_ok),
        ok=reason == int(Reason.OK),
        reason=reason,
    )
    return jax.tree_util.tree_map(
        lambda r, f: jnp.where(last.reshape((n,) + (1,) * (r.ndim - 1)), jnp.asarray(f).astype(r.dtype), r),
        rows, final)


def _tell_rounds(e: Engine, state: HalvingState, jobs: Job, results: Result, active, params, rows: bool):
    call = lambda piece, *args: piece(e, *args)  # noqa: E731
    s, decided, finished, running = record_batch(e, state, jobs, results, active, params, rows)
    s, final = finish(e, call, s, decided, finished, params, every_call=True)
    if not rows:
        return s, final
    act = active & ~state.done & state.pending
    return s, _rows(e, state, act, final, running, state.prof.ok)


def _tell_profile(e: Engine, state: HalvingState, jobs: Job, results: Result, active, params, rows: bool):
    """All profiling results at once (the batch form of
    :func:`~jaxstop.policies._halving.engine.record_profile`)."""
    _, valid = clean_params(params)
    p = state.prof
    act = active & p.pending
    value = jnp.asarray(results.value).astype(e.fdtype)
    epoch = jnp.asarray(results.epoch).astype(jnp.int32)
    cost = jnp.where(act, epoch - jnp.clip(jnp.asarray(jobs.start).astype(jnp.int32), 0, epoch), 0)
    released = jnp.where(act, e.max_budget - cost, 0)
    level = jnp.asarray(e.max_budget, jnp.int32)
    if rows:
        spent = (state.spent + jnp.cumsum(cost)).astype(jnp.int32)
        unspent = (state.unspent + jnp.cumsum(released)).astype(jnp.int32)
        answer = act & e.profile_incumbent  # profiled candidates out of the answer with False
        running = _running_incumbent(e, state, level, value, p.configs, answer) + (spent, unspent)
    p = _profiling.record_curves(p, results.history, act)
    bad = act & (~jnp.isfinite(value) | ~numerics.finite_prefix(p.curves, epoch))
    if rows:
        running = running + (_running_reason(state, valid, bad),)
    p = _profiling.fit(p, e.window, jnp.any(act) & ~jnp.any(p.pending))
    s = state._replace(prof=p, spent=(state.spent + jnp.sum(cost)).astype(jnp.int32),
                       unspent=(state.unspent + jnp.sum(released)).astype(jnp.int32))
    s = flag(s, (~valid | jnp.any(bad), Reason.BAD_INPUT))
    ok = act & jnp.isfinite(value) & e.profile_incumbent
    best = numerics.first_argmin(jnp.where(ok, value, jnp.inf))
    s = track_incumbent(e, s, level, value[best], p.configs[best], ok[best])
    final = info(e, s, False, -1, not e.uq, jnp.nan, 0)
    if not rows:
        return s, final
    return s, _rows(e, state, act, final, running, state.prof.ok)


def ask_batch(e: Engine, key, state: HalvingState, params):
    """``ask_batch(key, state, params=None) -> (jobs, active, state)``: every pending member's
    job of the current round, one per slot (the jobs ``ask`` returns one at a time); while
    profiling, every profiling job."""
    active = state.pending & ~state.done
    start = state.epochs
    budget = start + jnp.where(active, state.alloc, 0)
    rows = jnp.clip(state.configs, 0, e.num_configs - 1)
    x = e.cand[rows] if e.cand is not None else jnp.zeros((e.cap, 0), e.fdtype)
    jobs = make_job(state.configs, x, budget, start)
    if not e.num_profile:
        return jobs, active, state
    p = state.prof
    on = _profiling.profiling(p)
    px = e.cand[p.configs] if e.cand is not None else jnp.zeros((e.num_profile, 0), e.fdtype)
    pjobs = make_job(p.configs, px, jnp.full((e.num_profile,), e.max_budget), jnp.zeros((e.num_profile,)))
    jobs = where(on, _pad(pjobs, e.batch), _pad(jobs, e.batch))
    return jobs, jnp.where(on, _pad(p.pending, e.batch), _pad(active, e.batch)), state


def _tell(e: Engine, state: HalvingState, jobs: Job, results: Result, active, params, rows: bool):
    if not e.num_profile:
        return _tell_rounds(e, state, jobs, results, active, params, rows)
    pad = (lambda t: _pad(t, e.batch)) if rows else (lambda t: t)  # noqa: E731

    def rounds(s):
        head = lambda t: _head(t, e.cap)  # noqa: E731
        s, infos = _tell_rounds(e, s, head(jobs), head(results), active[:e.cap], params, rows)
        return s, pad(infos)

    def profile(s):
        head = lambda t: _head(t, e.num_profile)  # noqa: E731
        s, infos = _tell_profile(e, s, head(jobs), head(results), active[:e.num_profile], params, rows)
        return s, pad(infos)

    return cond(_profiling.profiling(state.prof), profile, rounds, state)


def tell_batch(e: Engine, state: HalvingState, jobs: Job, results: Result, active, params):
    """``tell_batch(state, jobs, results, active, params=None) -> (state, infos)``: the
    results of a round's jobs at once (``results.history`` holds each job's last
    ``Engine.history`` losses for the UQ versions: the window's ``window + 1``, or the
    whole curve of a profiled candidate), then the round's decision as in ``tell``, once.
    ``infos`` has one :class:`HalvingInfo` per slot: the info ``tell`` returns after that
    job (rows of inactive slots are unspecified)."""
    return _tell(e, state, jobs, results, active, params, rows=True)


def tell_batch_last(e: Engine, state: HalvingState, jobs: Job, results: Result, active, params):
    """``tell_batch_last(state, jobs, results, active, params=None) -> (state, info)``:
    :func:`tell_batch`'s state and its info at the batch's last active job, without the
    rows before it (their running incumbent and budget sums)."""
    return _tell(e, state, jobs, results, active, params, rows=False)
