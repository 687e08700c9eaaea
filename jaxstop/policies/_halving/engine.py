"""The rung engine shared by SH, Hyperband and BOHB, plain or UQ-guided.

:func:`~jaxstop.policies._halving.build.halving_policy` turns a
:class:`~jaxstop.policies._halving.schedule.HalvingSchedule` into a
:class:`~jaxstop.policies.Policy` (:func:`~jaxstop.policies._base.build_policy`).
The steps are module-level functions of the policy's static description
(:class:`Engine`, the static configuration) and the state: :func:`start_bracket`,
:func:`record` (one result), :func:`record_profile` (one profiling result),
:func:`keep_inputs` / :func:`apply_keep` (the keep decision at the end of a round),
:func:`end_bracket`, and the one-job protocol's :func:`init`, :func:`ask`,
:func:`report` and :func:`tell` (the batch protocol is in ``batch.py``). Outside
``jit`` each piece runs compiled once per engine
(:func:`~jaxstop.policies._base.jit_step`) and :func:`tell_eager` calls
:func:`jaxstop.confidence.keep_count` directly, so eager calls stay cheap (the rules are
in the docstring of :mod:`jaxstop.policies.halving`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxstop import confidence
from jaxstop._src import checks as _checks
from jaxstop._src import numerics
from jaxstop._src.batching import gated_cond
from jaxstop._src.status import Reason, first_reason
from jaxstop.policies._halving import bohb_density as _bohb_density
from jaxstop.policies._halving import profiling as _profiling
from jaxstop.policies._halving import uncertainty as _uncertainty
from jaxstop.policies._base import Incumbent, Job, Result, improves, jit_step, make_job, update_incumbent
from jaxstop.policies._halving.params import clean_params
from jaxstop.policies._halving.state import HalvingInfo, HalvingState
from jaxstop.policies._halving.schedule import RoundTable
from jaxstop.policies._halving.slots import first, rank_key, record_slot, sample_rows

__all__ = ["Engine", "apply_keep", "ask", "at", "cond", "delta_table", "end_bracket", "finish", "flag", "info",
           "init", "keep_inputs", "record", "record_profile", "report", "start_bracket", "tell", "tell_eager",
           "track_incumbent", "uq_stats", "where"]


class Engine(NamedTuple):
    """The static description of one halving policy (Python values, closed over).

    Attributes:
        rounds: The schedule's rounds by global round index.
        num_rounds: Rounds of all brackets, ``G``.
        num_brackets: Brackets of the schedule.
        cap: Slots: the largest bracket size.
        num_configs: Rows of the candidate table.
        max_budget: Epochs of the last rung.
        uq: The UQ-guided keep rule is on.
        tpe: Proposals come from BOHB's model (else uniform rows).
        window: Losses in the uncertainty window.
        width: Losses kept per slot, ``window + 1`` (0 for the plain versions).
        m_rec: BOHB's record capacity (0 otherwise).
        samples: Rows a BOHB proposal scores.
        per_level: Most results at one rung budget.
        keep_rule: ``rule`` of :func:`jaxstop.confidence.keep_count`.
        cand: The candidate table, shape (num_configs, d), or None.
        fdtype: Floating dtype of losses.
        delta_estimate: The UQ versions' estimate of ``Delta_t sigma`` (``"profile"``,
            ``"window"``, ``"window_var"`` or ``"offline"``).
        num_profile: Candidates profiled before the first bracket (0 without).
        profile_incumbent: The profiled candidates count for the incumbent.
        batch: Slots of a batch of the batch protocol, ``max(cap, num_profile)``.
        history: Losses per job the batch protocol reads (``width``, or ``max_budget``
            when profiling: the profiled candidates' whole curves).
    """

    rounds: RoundTable
    num_rounds: int
    num_brackets: int
    cap: int
    num_configs: int
    max_budget: int
    uq: bool
    tpe: bool
    window: int
    width: int
    m_rec: int
    samples: int
    per_level: int
    keep_rule: str
    cand: Any
    fdtype: Any
    delta_estimate: str = "window"
    num_profile: int = 0
    profile_incumbent: bool = True
    batch: int = 0
    history: int = 0


def where(pred, a, b):
    """``a`` where ``pred`` else ``b``, leaf by leaf of two pytrees of one structure."""
    return jax.tree_util.tree_map(lambda x, y: jnp.where(pred, x, y), a, b)


def flag(s, *checks):
    """``s`` with its study-wide ``reason`` set to the first failing of ``checks``
    (:func:`jaxstop._src.status.first_reason`) unless an earlier step set it."""
    return s._replace(reason=first_reason((s.reason != int(Reason.OK), s.reason), *checks))


def delta_table(e: Engine, s: HalvingState, params):
    """The profile of ``Delta_t sigma`` the keep rule reads (shape (max_budget,), NaN
    entries not given), or None: the fitted one with ``"profile"``, ``params.delta_profile``
    with ``"offline"``."""
    if e.delta_estimate == "profile":
        return s.prof.delta
    if e.delta_estimate == "offline" and params.delta_profile is not None:
        return jnp.asarray(params.delta_profile).astype(e.fdtype)
    return None


def uq_stats(e: Engine, s: HalvingState, recent, count, params):
    """(sigma, delta) of every slot (:func:`~jaxstop.policies._halving.uncertainty.uncertainty`
    with the policy's estimate of ``Delta_t sigma``)."""
    kind = "variance" if e.delta_estimate == "window_var" else "std"
    sigma, delta, _ = _uncertainty.uncertainty(recent, count, e.window, params, kind, delta_table(e, s, params),
                                               s.epochs)
    return sigma, delta


def at(arr, g):
    """Entry ``g`` (a traced round index) of a static per-round column."""
    return jnp.asarray(arr)[g]


def cond(pred, true_fn, false_fn, *operands, gated: bool = True, sparse: bool = False):
    """A branch that stays one under ``vmap`` (:func:`jaxstop._src.batching.gated_cond`:
    ``true_fn`` runs only at the steps where some study of a batch takes it, and with
    ``sparse`` only for those studies; with ``gated=False`` a ``lax.cond``, a ``select`` of
    both branches under ``vmap``), or plain Python branching when ``pred`` is concrete
    (eager calls then run only the branch taken and compile nothing new)."""
    if _checks.is_concrete(pred):
        return true_fn(*operands) if bool(pred) else false_fn(*operands)
    if not gated:
        return lax.cond(pred, true_fn, false_fn, *operands)
    return gated_cond(pred, true_fn, false_fn, *operands, sparse=sparse)


def start_bracket(e: Engine, s: HalvingState, g) -> HalvingState:
    """Resets the slots for the first round ``g`` of a bracket."""
    n0 = at(e.rounds.n0, g)
    member = jnp.asarray(np.arange(e.cap, dtype=np.int32)) < n0
    if e.tpe:
        cfg = jnp.full((e.cap,), -1, jnp.int32)
    else:
        cfg = jnp.where(member, s.order[at(e.rounds.bracket, g)], -1).astype(jnp.int32)
    return s._replace(
        round=jnp.asarray(g, jnp.int32),
        configs=cfg,
        member=member,
        pending=member,
        complete=jnp.zeros((e.cap,), bool),
        epochs=jnp.zeros((e.cap,), jnp.int32),
        mu=jnp.full((e.cap,), jnp.inf, e.fdtype),
        uq=_uncertainty.init_uq_state(e.cap, e.width, e.fdtype),
        alloc=(at(e.rounds.c, g) // n0).astype(jnp.int32),
        carry=jnp.zeros((), jnp.int32),
        bohb=s.bohb._replace(chosen=jnp.zeros_like(s.bohb.chosen)),
    )


def track_incumbent(e: Engine, s: HalvingState, level, value, config, ok) -> HalvingState:
    """Makes ``config`` the incumbent when ``ok`` and it beats it: a finite loss at a higher
    rung, or a lower loss at the same rung (:func:`~jaxstop.policies._base.update_incumbent`
    with ``replace`` for a higher rung)."""
    inc = Incumbent(s.incumbent_value, s.inc_config)
    ok = ok & jnp.isfinite(value) & (level >= s.inc_level)
    higher = level > s.inc_level
    better = improves(inc, value, ok=ok, replace=higher)
    inc = update_incumbent(inc, value, config, ok=ok, replace=higher)
    return s._replace(
        inc_level=jnp.where(better, level, s.inc_level).astype(jnp.int32),
        incumbent_value=inc.value.astype(e.fdtype),
        inc_config=inc.config,
    )


# ---- the pieces of tell


def record(e: Engine, s: HalvingState, job: Job, result: Result, params):
    """Bookkeeping of one result; returns the state and (round over, last round)."""
    params, valid = clean_params(params)
    slot = s.current
    s, active, value, cost = record_slot(s, job, result, e.max_budget, e.fdtype)
    bad = ~jnp.isfinite(value)
    if e.uq:
        bad = bad | ~numerics.finite_prefix(s.uq.recent[slot], s.uq.count[slot])
    s = flag(s, (~valid | (active & bad), Reason.BAD_INPUT))
    s = s._replace(
        spent=(s.spent + jnp.where(active, cost, 0)).astype(jnp.int32),
        unspent=(s.unspent + jnp.where(active, s.alloc - cost, 0)).astype(jnp.int32),
    )
    if e.uq:
        sigma, delta = uq_stats(e, s, s.uq.recent, s.uq.count, params)
        s = s._replace(uq=s.uq._replace(sigma=sigma, delta=delta))
    if e.tpe:
        s = s._replace(bohb=_bohb_density.record(
            s.bohb, active, s.configs[slot], at(e.rounds.level_idx, s.round), value))
    s = track_incumbent(e, s, at(e.rounds.level, s.round), value, s.configs[slot], active)
    round_over = ~s.done & ~jnp.any(s.pending)
    last = at(e.rounds.last, s.round)
    return s, round_over & ~last, round_over & last


def record_profile(e: Engine, s: HalvingState, job: Job, result: Result, params):
    """Bookkeeping of one profiling result: the budget (``max_budget`` released per job,
    what the job did not train is unspent), the incumbent at rung ``max_budget`` and
    BOHB's records; after the last one, the fit of the profile. Returns the state and
    the info."""
    params, valid = clean_params(params)
    slot = s.current
    p = s.prof
    active = p.pending[slot]
    value = jnp.asarray(result.value).astype(e.fdtype)
    epoch = jnp.asarray(result.epoch).astype(jnp.int32)
    bad = ~jnp.isfinite(value) | ~numerics.finite_prefix(p.curves[slot], epoch)
    s = flag(s, (~valid | (active & bad), Reason.BAD_INPUT))
    cost = epoch - jnp.clip(jnp.asarray(job.start).astype(jnp.int32), 0, epoch)
    p = p._replace(pending=p.pending.at[slot].set(p.pending[slot] & ~active))
    p = _profiling.fit(p, e.window, active & ~jnp.any(p.pending))
    s = s._replace(
        prof=p,
        spent=(s.spent + jnp.where(active, cost, 0)).astype(jnp.int32),
        unspent=(s.unspent + jnp.where(active, e.max_budget - cost, 0)).astype(jnp.int32),
    )
    config = p.configs[slot]
    if e.tpe:
        s = s._replace(bohb=_bohb_density.record(s.bohb, active, config, len(e.rounds.levels) - 1, value))
    s = track_incumbent(e, s, jnp.asarray(e.max_budget, jnp.int32), value, config, active & e.profile_incumbent)
    return s, info(e, s, False, -1, not e.uq, jnp.nan, 0)


def keep_inputs(e: Engine, s: HalvingState, params):
    """Arguments of keep_count for the decision at the end of the current round."""
    budget = (at(e.rounds.c_next, s.round) + s.carry).astype(e.fdtype)
    return _uncertainty.keep_inputs(s.member, s.mu, s.uq, budget, e.fdtype)


def apply_keep(e: Engine, s: HalvingState, uq_keep, uq_tau, params, uq_reason=int(Reason.OK)):
    """Keeps members (plain count, or the UQ mask; ``uq_reason`` is keep_count's), allocates
    the next round; a UQ decision that left out a member with a finite loss, or whose
    keep_count was not ok, sets the state's ``reason``."""
    params, _ = clean_params(params)
    g = s.round
    budget = (at(e.rounds.c_next, g) + s.carry).astype(jnp.int32)
    plain_keep = s.member & (numerics.stable_ranks(rank_key(s.mu, s.member)) < at(e.rounds.size_next, g))
    if e.uq:
        need = _uncertainty.min_losses(params, delta_table(e, s, params), s.epochs)
        keep, fallback, tau = _uncertainty.keep_mask(s.member, s.mu, s.uq, plain_keep, uq_keep, uq_tau, e.fdtype,
                                                     need)
        used = s.member & jnp.isfinite(s.mu) & ~fallback
        sigma, delta = s.uq.sigma, s.uq.delta
        s = flag(s, (jnp.any(used & ~(jnp.isfinite(sigma) & jnp.isfinite(delta))), Reason.NOT_FINITE),
                 (jnp.any(used & (sigma <= 0)), Reason.UNREPRESENTABLE),
                 (~fallback & (jnp.asarray(uq_reason) != int(Reason.OK)), uq_reason),
                 (~fallback & ~jnp.isfinite(tau), Reason.NOT_FINITE))
    else:
        fallback = jnp.asarray(True)
        keep = plain_keep
        tau = jnp.asarray(jnp.nan, e.fdtype)
    trainable = keep & ~s.complete
    # more trainable members than epochs: keep the best `budget` of them. The plain count
    # n_{i+1} never exceeds the next round's budget C_{i+1} = n_{i+1} (r_{i+1} - r_i) when
    # the rungs grow, so for the plain versions this ranking is known to change nothing.
    if e.uq or not np.all(e.rounds.size_next <= e.rounds.c_next):
        too_many = trainable & (numerics.stable_ranks(rank_key(s.mu, trainable)) >= budget)
        keep = keep & ~too_many
        trainable = trainable & ~too_many
    ktr = jnp.sum(trainable).astype(jnp.int32)
    room = jnp.min(jnp.where(trainable, e.max_budget - s.epochs, e.max_budget)).astype(jnp.int32)
    alloc = jnp.where(ktr > 0, jnp.minimum(budget // jnp.maximum(ktr, 1), room), 0).astype(jnp.int32)
    s = s._replace(
        round=(g + 1).astype(jnp.int32),
        member=keep,
        pending=trainable & (alloc > 0),
        alloc=alloc,
        carry=(budget - alloc * ktr).astype(jnp.int32),
    )
    # complete members carried into the new rung compete at its level
    done_keep = keep & s.complete
    best = numerics.first_argmin(rank_key(s.mu, done_keep))
    s = track_incumbent(e, s, at(e.rounds.level_next, g), s.mu[best], s.configs[best], done_keep[best])
    close = ~jnp.any(s.pending)
    return s, (jnp.sum(keep).astype(jnp.int32), fallback, tau, budget), close


def end_bracket(e: Engine, s: HalvingState) -> HalvingState:
    """Closes the bracket of the current round: after its last round, or earlier
    when no member can train (every later round would be empty: their budget is
    unspent and the best member reaches the bracket's last rung)."""
    g = s.round
    members = s.member & s.complete
    best = numerics.first_argmin(rank_key(s.mu, members))
    s = track_incumbent(e, s, at(e.rounds.final_level, g), s.mu[best], s.configs[best], members[best])
    s = s._replace(
        unspent=(s.unspent + s.carry + at(e.rounds.rest, g)).astype(jnp.int32),
        carry=jnp.zeros((), jnp.int32),
    )
    # the next bracket starts at its own first round, also when this one ended early
    following = at(e.rounds.next_start, g)
    final = following >= e.num_rounds
    nxt = start_bracket(e, s, jnp.minimum(following, e.num_rounds - 1))
    return jax.tree_util.tree_map(lambda a, b: jnp.where(final, a, b), s._replace(done=jnp.asarray(True)), nxt)


# ---- the protocol


def init(e: Engine, key, params) -> HalvingState:
    """``init(key, params=None) -> state``: the state before the first job, the first
    bracket's first round (the key draws every bracket's rows, BOHB proposes them later;
    ``fold_in(key, 1)`` draws the profiled candidates)."""
    if e.tpe:
        order = jnp.zeros((e.num_brackets, 0), jnp.int32)
    else:
        order = sample_rows(key, e.num_configs, e.cap, (e.num_brackets,))
    s = HalvingState(
        round=jnp.zeros((), jnp.int32),
        configs=jnp.full((e.cap,), -1, jnp.int32),
        member=jnp.zeros((e.cap,), bool),
        pending=jnp.zeros((e.cap,), bool),
        complete=jnp.zeros((e.cap,), bool),
        epochs=jnp.zeros((e.cap,), jnp.int32),
        mu=jnp.full((e.cap,), jnp.inf, e.fdtype),
        alloc=jnp.zeros((), jnp.int32),
        carry=jnp.zeros((), jnp.int32),
        current=jnp.zeros((), jnp.int32),
        order=order,
        spent=jnp.zeros((), jnp.int32),
        unspent=jnp.zeros((), jnp.int32),
        inc_level=jnp.asarray(-1, jnp.int32),
        incumbent_value=jnp.asarray(jnp.inf, e.fdtype),
        inc_config=jnp.asarray(-1, jnp.int32),
        done=jnp.asarray(False),
        uq=_uncertainty.init_uq_state(e.cap, e.width, e.fdtype),
        bohb=_bohb_density.init_bohb_state(e.num_configs if e.tpe else 0, e.m_rec, e.fdtype),
        prof=_profiling.init_profile_state(jax.random.fold_in(key, 1), e.num_configs, e.num_profile, e.max_budget,
                                           e.fdtype),
        reason=jnp.asarray(int(Reason.OK), jnp.int32),
    )
    return start_bracket(e, s, 0)


def ask(e: Engine, key, state: HalvingState, params):
    """``ask(key, state, params=None) -> (job, state)``: the next pending member's job,
    resuming from its checkpoint for the round's allocation (BOHB first proposes the rows
    of a first rung from its density-ratio model); while profiling, the next profiled
    candidate's job from scratch to ``max_budget``."""
    params, _ = clean_params(params)
    slot = first(state.pending)
    row = state.configs[slot]
    active = state.pending[slot] & ~state.done
    if e.num_profile:
        profiling = _profiling.profiling(state.prof)
        active = active & ~profiling
    if e.tpe:
        fresh = (row < 0) & active
        # UQ rounds keep varying numbers, so under vmap the studies propose at different
        # steps: each proposes alone (sparse); plain BOHB's studies propose in step
        proposed = cond(
            fresh,
            lambda: _bohb_density.propose(key, e.cand, state.bohb, params, len(e.rounds.levels), e.samples,
                                          e.per_level),
            lambda: jnp.zeros((), jnp.int32), sparse=e.uq,
        )
        row = jnp.where(fresh, proposed, row).astype(jnp.int32)
        safe = jnp.clip(row, 0, e.num_configs - 1)
        chosen = state.bohb.chosen
        state = state._replace(
            configs=state.configs.at[slot].set(row),
            bohb=state.bohb._replace(chosen=chosen.at[safe].set(chosen[safe] | fresh)),
        )
    start = state.epochs[slot]
    budget = start + jnp.where(active, state.alloc, 0)
    x = e.cand[jnp.clip(row, 0, e.num_configs - 1)] if e.cand is not None else jnp.zeros((0,), e.fdtype)
    job = make_job(row, x, budget, start)
    if e.num_profile:
        p = first(state.prof.pending)
        prow = state.prof.configs[p]
        px = e.cand[prow] if e.cand is not None else jnp.zeros((0,), e.fdtype)
        job = where(profiling, make_job(prow, px, e.max_budget, 0), job)
        slot = jnp.where(profiling, p, slot).astype(jnp.int32)
    return job, state._replace(current=slot)


def report(e: Engine, state: HalvingState, job: Job, epoch, value, params):
    """``report(state, job, epoch, value, params=None) -> (state, False)`` (UQ versions):
    buffers one loss of the outstanding job for the windowed uncertainty (while profiling:
    stores it in the profiled candidate's curve); never stops."""
    v = jnp.asarray(value).astype(e.fdtype)
    recent, count = _uncertainty.push(state.uq.recent, state.uq.count, state.current, v)
    uq = state.uq._replace(recent=recent, count=count)
    if e.num_profile:
        on = _profiling.profiling(state.prof)
        uq = where(on, state.uq, uq)
        state = state._replace(prof=_profiling.push_loss(state.prof, state.current, jnp.asarray(epoch), v, on))
    return state._replace(uq=uq), jnp.asarray(False)


def _decide(e: Engine, call, s: HalvingState, params):
    """The keep decision at the end of a round (plain count, or UQ-guided)."""
    if e.uq:
        mu, sigma, delta, budget, ok = call(keep_inputs, s, params)
        # outside jit this runs keep_count's own compiled kernel (shared by all policies)
        res = confidence.keep_count(mu, sigma, delta, budget, mask=ok, rule=e.keep_rule)
        return call(apply_keep, s, res.keep, res.tau, params, res.reason)
    return call(apply_keep, s, jnp.zeros((e.cap,), bool), jnp.asarray(jnp.nan, e.fdtype), params)


def _no_decision(e: Engine, s: HalvingState):
    return s, (jnp.asarray(-1, jnp.int32), jnp.asarray(not e.uq), jnp.asarray(jnp.nan, e.fdtype),
               jnp.zeros((), jnp.int32)), jnp.asarray(False)


def info(e: Engine, s: HalvingState, decided, kept, fallback, tau, rbudget) -> HalvingInfo:
    """The :class:`HalvingInfo` of state ``s`` after a tell with that decision."""
    return HalvingInfo(
        terminate=s.done,
        incumbent=s.inc_config,
        incumbent_value=s.incumbent_value,
        round=s.round,
        decisions=jnp.asarray(decided, jnp.int32),
        kept=jnp.asarray(kept, jnp.int32),
        fallback=jnp.asarray(fallback, bool),
        tau=jnp.asarray(tau, e.fdtype),
        round_budget=jnp.asarray(rbudget, jnp.int32),
        spent=s.spent,
        unspent=s.unspent,
        profile_ok=s.prof.ok,
        ok=s.reason == int(Reason.OK),
        reason=s.reason,
    )


def finish(e: Engine, call, s: HalvingState, decided, finished, params, every_call: bool = False):
    """The end of ``tell``: the keep decision after a round, the next bracket after the
    last round; returns the state and the info. The decision is a gated branch: under
    ``vmap`` it runs at the steps where some study of the batch decides. With ``every_call``
    (the batch protocol: one call per round, so the studies of a batch decide at the same
    calls) it runs vectorised over the batch, and not at all at the calls that end no
    round (the profiling batch, a bracket's last round), where a ``select`` of both
    branches would pay the whole decision. In the one-job protocol the UQ decision
    (:func:`jaxstop.confidence.keep_count`, the costly one) runs for each study that ends a
    round (``sparse``, on CPU; vectorised on an accelerator): the number a UQ round keeps
    varies, so under ``vmap`` the studies' rounds end at different steps, and a batch of
    them would otherwise pay the whole batch's decision at nearly every step. Plain SH's
    rounds end at the same step in every study and its decision is cheap: it stays
    vectorised."""
    s, (kept, fallback, tau, rbudget), empty = cond(
        decided, lambda s: _decide(e, call, s, params), lambda s: _no_decision(e, s), s,
        sparse=e.uq and not every_call)
    s = cond(finished | empty, lambda s: call(end_bracket, s), lambda s: s, s)
    return s, info(e, s, decided, kept, fallback, tau, rbudget)


def _tell_rounds(e: Engine, call, state: HalvingState, job: Job, result: Result, params):
    s, decided, finished = call(record, state, job, result, params)
    return finish(e, call, s, decided, finished, params)


def _tell(e: Engine, call, state: HalvingState, job: Job, result: Result, params):
    if not e.num_profile:
        return _tell_rounds(e, call, state, job, result, params)
    return cond(_profiling.profiling(state.prof),
                lambda s: call(record_profile, s, job, result, params),
                lambda s: _tell_rounds(e, call, s, job, result, params), state)


def tell(e: Engine, state: HalvingState, job: Job, result: Result, params):
    """``tell(state, job, result, params=None) -> (state, HalvingInfo)``: records the result
    (budget spent, loss, incumbent); at the end of a round keeps the best members (plain
    count ``n_{i+1}``, or UQ-guided: :func:`jaxstop.confidence.keep_count`) and allocates
    the next round's budget; after a bracket's last round starts the next bracket; the
    study terminates after the last bracket. While profiling it records the profiled
    candidate's result and, after the last one, fits the profile of ``Delta_t sigma``."""
    return _tell(e, lambda piece, *args: piece(e, *args), state, job, result, params)


def tell_eager(static, state: HalvingState, job: Job, result: Result, params):
    """``tell`` outside ``jit``: each piece runs compiled once per engine, the keep decision
    calls :func:`jaxstop.confidence.keep_count` directly, and only the branch taken runs."""
    return _tell(static.value, lambda piece, *args: jit_step(piece)(static, *args), state, job, result, params)
