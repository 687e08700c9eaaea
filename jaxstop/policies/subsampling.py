"""Sub-sampling (SS) and its UQ-guided version SS+ (Liu et al., 2024, Section 3.5).

SS keeps every candidate in play. After an initial round that trains each of
``num_start`` configurations (drawn uniformly without replacement from the table
rows) for ``step`` epochs, every round compares each candidate ``c_i`` with the
*leader* ``c_m`` -- the most-trained candidate, ties to the lower current loss
among those with a finite loss (a run that diverged to NaN or inf does not lead) --
and trains the challengers that win for ``step`` more epochs each (resuming from
their checkpoints). If none wins, the leader trains alone.

* SS (plain): ``c_i`` wins when its current loss is lower than the leader's,
  ``mu_i < mu_m`` -- the rule as Liu et al. describe SS ("the candidates it
  chooses are those that show smaller validation loss than the most trained
  candidate shows"). The original SS of Huang et al. compares a challenger with
  a sub-sample of the leader's history; here both versions compare current
  losses, so that they differ only in the comparison.
* SS+ (``uq=True``): ``c_i`` wins when
  ``Pr(l_m >= l_i) = Phi((mu_m - mu_i) / sqrt(sigma_m^2 + sigma_i^2)) >= threshold``
  (:func:`jaxstop.confidence.prob_better`, ``params.threshold`` = 0.9), with
  ``mu`` the current loss and ``sigma`` the windowed uncertainty of Eq. (1) as in
  :mod:`jaxstop.policies.halving`. A pair in which either candidate has fewer
  than two losses is compared as in SS.

SS+ needs no ``Delta_t sigma``: the duel of Section 3.5 compares the current
``(mu, sigma)`` of two candidates and nothing in it predicts how ``sigma`` changes
with more training (that is the exploitation term of the halving keep rule, Eq. 6).
So sub-sampling has no ``delta_estimate`` and no profiling phase (profiling would
spend ``num_profile * max_budget`` epochs on an estimate nothing reads), and it
ignores ``params.delta_sigma`` and ``params.delta_profile``.

Budget: every job trains ``min(step, max_budget - epochs, budget - spent)``
epochs; the study terminates when ``budget`` epochs are spent (both versions
spend exactly ``budget`` unless every candidate becomes complete first). A
candidate is complete when it reaches ``max_budget`` or its curve ends (a job
comes back before its budget); complete candidates still compete but do not
train. When nobody wins and the leader is complete, the trainable candidate with
the lowest current loss trains (both versions).

Incumbent: the leader, i.e. the lowest loss at the highest budget reached with a finite
loss (-1 while no candidate has one).

Status: ``info.ok`` is False from the first non-finite loss, traced params outside their
ranges (replaced by their defaults; outside ``jit`` they raise) or non-finite SS+ duel on
(:class:`SubsamplingInfo`); the study runs on.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop import confidence
from jaxstop._src import checks as _checks, numerics
from jaxstop._src.status import Reason, first_reason
from jaxstop.policies._base import Job, Limits, Policy, Result, build_policy, make_job
from jaxstop.policies._halving.params import (HalvingParams, check_candidates, check_params, clean_params,
                                              default_params, float_dtype)
from jaxstop.policies._halving.schedule import halving_schedule
from jaxstop.policies._halving.slots import first, rank_key, record_slot, sample_rows
from jaxstop.policies._halving.uncertainty import check_window, push, uncertainty

__all__ = ["SubsamplingInfo", "SubsamplingState", "subsampling"]


class SubsamplingState(NamedTuple):
    """State of :func:`subsampling` (``n`` candidates, ``W = window + 1`` or 0).

    Attributes:
        configs: Table row of each candidate, shape (n,) int32.
        epochs: Epochs trained, shape (n,) int32.
        complete: Candidates that cannot train further, shape (n,) bool.
        mu: Current loss (inf before the first result), shape (n,).
        sigma: Windowed uncertainty (0 with fewer than two losses), shape (n,).
        recent: Last ``window + 1`` losses, oldest first, shape (n, W).
        count: Losses reported per candidate, shape (n,) int32.
        pending: Candidates still to be trained this round, shape (n,) bool.
        current: Candidate of the outstanding job, int32 ().
        round: Round index (0 = initial round), int32 ().
        spent: Epochs charged so far, int32 ().
        done: Budget spent or nobody can train, bool ().
        reason: ``SubsamplingInfo.reason`` after the last tell, int32 ().
    """

    configs: jax.Array
    epochs: jax.Array
    complete: jax.Array
    mu: jax.Array
    sigma: jax.Array
    recent: jax.Array
    count: jax.Array
    pending: jax.Array
    current: jax.Array
    round: jax.Array
    spent: jax.Array
    done: jax.Array
    reason: jax.Array


class SubsamplingInfo(NamedTuple):
    """What ``tell`` of :func:`subsampling` returns.

    Attributes:
        terminate: Budget spent or nobody can train, bool ().
        incumbent: The leader's table row, int32 ().
        incumbent_value: The leader's current loss, () (inf without an incumbent).
        round: Round index after this tell, int32 ().
        chosen: Candidates chosen for a round that starts with this tell (-1 if
            none starts), int32 ().
        leader: The leader's candidate index, int32 ().
        ok: Nothing in the study so far rests on bad data: the params are valid, every
            loss told was finite and every SS+ duel was computed in finite numbers
            (``reason == Reason.OK``); it stays False once it is (a study-wide status), bool ().
        reason: Why ``ok`` is False, the first cause (a :class:`jaxstop.Reason` code), int32 ():
            ``BAD_INPUT``: traced params outside their ranges (the bad scalars are replaced
            by their defaults, see :class:`~jaxstop.policies.HalvingParams`), or a
            non-finite loss (a job's ``Result.value`` or, for SS+, a loss in a candidate's
            uncertainty window); the policy runs on (such a candidate does not lead and
            does not train again, the window statistics leave such losses out).
            ``NOT_FINITE``: an SS+ duel of a round that started with a probability that
            was not finite (it was lost).
    """

    terminate: jax.Array
    incumbent: jax.Array
    incumbent_value: jax.Array
    round: jax.Array
    chosen: jax.Array
    leader: jax.Array
    ok: jax.Array
    reason: jax.Array


def _leader(epochs, mu):
    """Most-trained candidate with a finite loss (a run that diverged to NaN or inf does not
    lead); ties to the lower loss, then the lower index. Without any finite loss, the
    most-trained candidate of the lowest index."""
    has = jnp.isfinite(mu)
    some = jnp.any(has)
    eligible = has | ~some
    top = eligible & (epochs == jnp.max(jnp.where(eligible, epochs, -1)))
    best = numerics.first_argmin(rank_key(mu, top & has))
    return jnp.where(some, best, first(top)).astype(jnp.int32)


class _Config(NamedTuple):
    """The static configuration of :func:`subsampling`."""

    num_configs: int
    max_budget: int
    uq: bool
    window: int
    n: int
    step: int
    total: int
    cand: Any
    fdtype: Any


def _default_params(cfg: _Config) -> HalvingParams:
    """The default :class:`~jaxstop.policies.HalvingParams` (``threshold`` is SS+'s)."""
    return default_params(cfg.fdtype, cfg.max_budget)


def _init(cfg: _Config, key, params) -> SubsamplingState:
    """``init(key, params=None) -> state``: ``num_start`` rows drawn without replacement,
    all pending for the initial round."""
    n, fdtype = cfg.n, cfg.fdtype
    return SubsamplingState(
        configs=sample_rows(key, cfg.num_configs, n),
        epochs=jnp.zeros((n,), jnp.int32),
        complete=jnp.zeros((n,), bool),
        mu=jnp.full((n,), jnp.inf, fdtype),
        sigma=jnp.zeros((n,), fdtype),
        recent=jnp.full((n, cfg.window + 1 if cfg.uq else 0), jnp.nan, fdtype),
        count=jnp.zeros((n,), jnp.int32),
        pending=jnp.ones((n,), bool),
        current=jnp.zeros((), jnp.int32),
        round=jnp.zeros((), jnp.int32),
        spent=jnp.zeros((), jnp.int32),
        done=jnp.asarray(False),
        reason=jnp.asarray(int(Reason.OK), jnp.int32),
    )


def _ask(cfg: _Config, key, state: SubsamplingState, params):
    """``ask(key, state, params=None) -> (job, state)``: the first pending candidate of
    the round resumes from its checkpoint for ``min(step, max_budget - epochs, budget -
    spent)`` epochs (none once the study is done)."""
    slot = first(state.pending)
    start = state.epochs[slot]
    active = state.pending[slot] & ~state.done
    room = jnp.minimum(jnp.minimum(cfg.step, cfg.max_budget - start), cfg.total - state.spent)
    budget_ = start + jnp.where(active, jnp.maximum(room, 0), 0)
    row = state.configs[slot]
    x = cfg.cand[row] if cfg.cand is not None else jnp.zeros((0,), cfg.fdtype)
    return make_job(row, x, budget_, start), state._replace(current=slot)


def _report(cfg: _Config, state: SubsamplingState, job: Job, epoch, value, params):
    """``report(state, job, epoch, value, params=None) -> (state, False)`` (SS+ only):
    buffers one loss of the outstanding job for the windowed uncertainty; never stops."""
    v = jnp.asarray(value).astype(cfg.fdtype)
    recent, count = push(state.recent, state.count, state.current, v)
    return state._replace(recent=recent, count=count), jnp.asarray(False)


def _select(cfg: _Config, s: SubsamplingState, params):
    """Candidates of the next round (a non-empty mask unless nobody can train), the leader,
    and whether a duel compared was not finite (SS+)."""
    fdtype = cfg.fdtype
    idx = jnp.asarray(np.arange(cfg.n, dtype=np.int32))
    m = _leader(s.epochs, s.mu)
    trainable = ~s.complete & jnp.isfinite(s.mu)
    others = trainable & (idx != m)
    if cfg.uq:
        ok = jnp.isfinite(s.mu)
        safe_mu = jnp.where(ok, s.mu, jnp.zeros((), fdtype))
        p = confidence.prob_better(safe_mu, s.sigma, safe_mu[m], s.sigma[m])
        has = s.count >= 2
        duel = has & has[m]
        wins = jnp.where(duel, p >= params.threshold.astype(fdtype), s.mu < s.mu[m])
        unfinite = jnp.any(others & duel & ~jnp.isfinite(p))
    else:
        wins = s.mu < s.mu[m]
        unfinite = jnp.asarray(False)
    beats = others & wins
    best_other = numerics.first_argmin(rank_key(s.mu, trainable))
    fallback = jnp.where(trainable[m], m, best_other)
    alone = (idx == fallback) & trainable
    return jnp.where(jnp.any(beats), beats, alone), m, unfinite


def _tell(cfg: _Config, state: SubsamplingState, job: Job, result: Result, params):
    """``tell(state, job, result, params=None) -> (state, SubsamplingInfo)``: records the
    result (epochs, loss, spent budget, completeness); at the end of a round chooses the
    challengers that beat the leader (SS: lower loss; SS+: ``Pr(l_m >= l_i) >= threshold``)
    for the next round; the study terminates when the budget is spent or nobody can train.
    Traced params outside their ranges stand replaced by their defaults (``info.ok`` False)."""
    params, valid = clean_params(params)
    s, active, value, cost = record_slot(state, job, result, cfg.max_budget, cfg.fdtype)
    bad = ~jnp.isfinite(value)
    if cfg.uq:
        bad = bad | ~numerics.finite_prefix(s.recent[s.current], s.count[s.current])
    s = s._replace(spent=(s.spent + jnp.where(active, cost, 0)).astype(jnp.int32))
    if cfg.uq:
        sigma, _, _ = uncertainty(s.recent, s.count, cfg.window, params)
        s = s._replace(sigma=sigma)
    out_of_budget = s.spent >= cfg.total
    round_over = ~jnp.any(s.pending) & ~s.done & ~out_of_budget
    chosen, _, unfinite = _select(cfg, s, params)
    starts = round_over & jnp.any(chosen)
    code = first_reason((s.reason != int(Reason.OK), s.reason), (~valid | (active & bad), Reason.BAD_INPUT),
                        (round_over & unfinite, Reason.NOT_FINITE))
    s = s._replace(
        reason=code,
        pending=jnp.where(starts, chosen, s.pending),
        round=(s.round + jnp.where(starts, 1, 0)).astype(jnp.int32),
        done=s.done | out_of_budget | (round_over & ~jnp.any(chosen)),
    )
    lead = _leader(s.epochs, s.mu)
    has_inc = jnp.isfinite(s.mu[lead])
    info = SubsamplingInfo(
        terminate=s.done,
        incumbent=jnp.where(has_inc, s.configs[lead], -1).astype(jnp.int32),
        incumbent_value=jnp.where(has_inc, s.mu[lead], jnp.inf).astype(cfg.fdtype),
        round=s.round,
        chosen=jnp.where(starts, jnp.sum(chosen), -1).astype(jnp.int32),
        leader=lead,
        ok=s.reason == int(Reason.OK),
        reason=s.reason,
    )
    return s, info


def subsampling(
    num_configs: int,
    max_budget: int,
    eta: int = 3,
    uq: bool = False,
    *,
    num_start: int | None = None,
    budget: int | None = None,
    step: int | None = None,
    min_budget: int = 1,
    window: int = 10,
    candidates: ArrayLike | None = None,
    dtype=None,
) -> Policy:
    """Sub-sampling (SS) or, with ``uq=True``, SS+ of Liu et al. (2024).

    See the module docstring for the rules. The defaults tie SS to the SH bracket
    of the same arguments: ``num_start`` candidates as SH's first rung, ``step``
    = SH's first-rung budget and ``budget`` = SH's total budget, so SS, SS+, SH
    and SH+ compare at equal budget; ``eta`` and ``min_budget`` only enter
    through these defaults.

    Args:
        num_configs: Rows of the candidate table.
        max_budget: Most epochs a configuration trains.
        eta: Halving rate of the SH bracket that sets the defaults, an int >= 2.
        uq: Compare by the probability of Definition 3.4 (SS+).
        num_start: Candidates kept in play.
        budget: Total epochs.
        step: Epochs per job.
        min_budget: Fewest epochs of SH's first rung (for the defaults).
        window: Losses in the uncertainty window (``uq=True``).
        candidates: Optional configuration vectors, shape (num_configs, d).
        dtype: Floating dtype of losses in the state.

    Returns:
        A :class:`~jaxstop.policies.Policy` with
        :class:`~jaxstop.policies.HalvingParams`;
        ``halving_schedule("subsampling", ...).max_jobs`` bounds its jobs.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import sim
        >>> from jaxstop.policies.halving import halving_schedule
        >>> from jaxstop.policies.subsampling import subsampling
        >>> final = jnp.linspace(0.9, 0.1, 9)
        >>> table = sim.CurveTable(final[:, None] + 1.0 / jnp.arange(1, 10)[None, :])
        >>> sched = halving_schedule("subsampling", 9, 9)
        >>> trace = sim.run(subsampling(9, 9), table, jax.random.key(0), max_jobs=sched.max_jobs)
        >>> int(trace.incumbent), int(trace.budget) == sched.total_budget
        (8, True)
    """
    sched = halving_schedule("subsampling", num_configs, max_budget, eta, uq,
                             num_start=num_start, min_budget=min_budget, budget=budget, step=step)
    window = check_window(window)
    fdtype = float_dtype(dtype)
    cand = check_candidates(candidates, num_configs, fdtype, False, "subsampling")
    uq = _checks.boolean(uq, "uq")
    cfg = _Config(num_configs, max_budget, uq, window, sched.num_start, sched.step, sched.total_budget, cand,
                  fdtype)
    return build_policy(cfg, init=_init, ask=_ask, report=_report if uq else None, tell=_tell,
                        default_params=_default_params, check_params=check_params,
                        limits=Limits(num_configs, sched.max_jobs, None, int(max_budget)))
