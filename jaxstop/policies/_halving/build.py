"""The halving family's :class:`~jaxstop.policies.Policy` from a schedule:
:func:`halving_policy` puts the static description together (:class:`Engine`) and binds
the steps of ``engine.py`` (one job at a time) and ``batch.py`` (a round at once).
"""

from __future__ import annotations

from jaxstop.policies._base import Limits, Policy, build_policy
from jaxstop.policies._halving.batch import ask_batch, tell_batch, tell_batch_last
from jaxstop.policies._halving.engine import Engine, ask, init, report, tell, tell_eager
from jaxstop.policies._halving.params import check_params, default_params
from jaxstop.policies._halving.schedule import HalvingSchedule, round_jobs, round_table

__all__ = ["halving_policy"]


def _default_params(e: Engine):
    """The default :class:`~jaxstop.policies.HalvingParams`."""
    return default_params(e.fdtype, e.max_budget)


def halving_policy(
    schedule: HalvingSchedule,
    num_configs: int,
    max_budget: int,
    uq: bool,
    window: int,
    keep_rule: str,
    cand,
    fdtype,
    sampler: str,
    num_samples: int,
    delta_estimate: str = "window",
    profile_incumbent: bool = True,
) -> Policy:
    """The policy running ``schedule``'s brackets (``sampler``: ``"uniform"`` or ``"tpe"``),
    after profiling ``schedule.num_profile`` candidates (UQ versions with
    ``delta_estimate="profile"``)."""
    brackets = schedule.brackets
    tpe = sampler == "tpe"
    rounds = round_table(brackets)
    num_profile = schedule.num_profile
    per_level = {max_budget: num_profile}  # the profiled candidates' results count at max_budget
    for b in brackets:
        for r, j in zip(b.budgets, round_jobs(b, uq)):
            per_level[r] = per_level.get(r, 0) + j
    cap = max(b.sizes[0] for b in brackets)
    width = window + 1 if uq else 0
    e = Engine(
        rounds=rounds,
        num_rounds=len(rounds.last),
        num_brackets=len(brackets),
        cap=cap,
        num_configs=num_configs,
        max_budget=max_budget,
        uq=uq,
        tpe=tpe,
        window=window,
        width=width,
        m_rec=schedule.max_jobs if tpe else 0,
        samples=min(num_samples, num_configs),
        per_level=max(per_level.values()),
        keep_rule=keep_rule,
        cand=cand,
        fdtype=fdtype,
        delta_estimate=delta_estimate if uq else "window",
        num_profile=num_profile,
        profile_incumbent=bool(profile_incumbent),
        batch=max(cap, num_profile),
        # a profiled candidate's whole curve comes back in Result.history
        history=max(width, max_budget) if num_profile else width,
    )
    # a batch is one round (every pending member's job), or the profiling jobs
    max_batches = e.num_rounds + (1 if num_profile else 0)
    batch = {} if tpe else dict(ask_batch=ask_batch, tell_batch=tell_batch, tell_batch_last=tell_batch_last,
                                batch_size=e.batch, history=e.history)
    return build_policy(e, init=init, ask=ask, report=report if uq else None, tell=tell,
                        default_params=_default_params, check_params=check_params, eager={"tell": tell_eager},
                        limits=Limits(num_configs, schedule.max_jobs, max_batches, max_budget), **batch)
