"""The state and the per-tell info of the halving family (SH, Hyperband, BOHB).

:class:`HalvingState` is the core every variant uses, with the UQ part
(:class:`~jaxstop.policies._halving.uncertainty.HalvingUQState`) and the BOHB part
(:class:`~jaxstop.policies._halving.bohb_density.HalvingBOHBState`) and the profiling part
(:class:`~jaxstop.policies._halving.profiling.HalvingProfileState`) as sub-states; the
variants that do not use a part keep it with the shapes noted there. The
sub-states' fields read directly too (``state.sigma`` is ``state.uq.sigma``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax

from jaxstop.policies._base import renamed_field
from jaxstop.policies._halving.bohb_density import HalvingBOHBState
from jaxstop.policies._halving.profiling import HalvingProfileState
from jaxstop.policies._halving.uncertainty import HalvingUQState

__all__ = ["HalvingInfo", "HalvingState"]


class HalvingState(NamedTuple):
    """State of :func:`~jaxstop.policies.halving.sh`, :func:`~jaxstop.policies.halving.hyperband`
    and :func:`~jaxstop.policies.halving.bohb`.

    ``cap`` is the largest bracket size (slots), ``W = window + 1`` (0 for the
    plain versions), ``M`` the record capacity of BOHB (0 otherwise). The fields of
    ``uq`` (``sigma``, ``delta``, ``recent``, ``count``) and of ``bohb``
    (``chosen``, ``rec_config``, ``rec_level``, ``rec_loss``, ``rec_count``) are
    also readable as attributes of the state.

    Attributes:
        round: Global round index over all brackets, int32 ().
        configs: Table row of each slot, shape (cap,) int32 (-1 unassigned).
        member: Slots in the current round, shape (cap,) bool.
        pending: Members still to be trained this round, shape (cap,) bool.
        complete: Slots that cannot train further, shape (cap,) bool.
        epochs: Epochs trained per slot, shape (cap,) int32.
        mu: Current loss per slot (inf before the first result), shape (cap,).
        alloc: Epochs each job of the current round adds, int32 ().
        carry: Budget the current round could not allocate, int32 ().
        current: Slot of the outstanding job, int32 ().
        order: Sampling order of table rows per bracket, shape (brackets, cap) int32.
        spent: Epochs charged so far, int32 ().
        unspent: Budget released by the schedule but not spent: round budget that
            could not be allocated by the end of a bracket, plus epochs allocated to
            jobs whose curves ended first, int32 (). ``spent + unspent`` equals the
            released budget at the end of every bracket.
        inc_level: Nominal rung budget of the incumbent (-1 before any), int32 ().
        incumbent_value: Loss of the incumbent, () (``inc_value`` is its deprecated alias).
        inc_config: Table row of the incumbent (-1 before any), int32 ().
        done: The schedule is finished, bool ().
        uq: The windowed uncertainty of every slot (SH+, HB+, BOHB+), a
            :class:`~jaxstop.policies.halving.HalvingUQState`.
        bohb: The results the BOHB model is fitted to, a
            :class:`~jaxstop.policies.halving.HalvingBOHBState`.
        prof: The profiling phase (UQ versions with ``delta_estimate="profile"``): the
            profiled candidates, their curves and the fitted ``Delta_t sigma``, a
            :class:`~jaxstop.policies.halving.HalvingProfileState`.
        reason: ``HalvingInfo.reason`` after the last tell: the first thing that went wrong
            in the study (``Reason.OK`` while nothing did), int32 ().
    """

    round: jax.Array
    configs: jax.Array
    member: jax.Array
    pending: jax.Array
    complete: jax.Array
    epochs: jax.Array
    mu: jax.Array
    alloc: jax.Array
    carry: jax.Array
    current: jax.Array
    order: jax.Array
    spent: jax.Array
    unspent: jax.Array
    inc_level: jax.Array
    incumbent_value: jax.Array
    inc_config: jax.Array
    done: jax.Array
    uq: HalvingUQState
    bohb: HalvingBOHBState
    prof: HalvingProfileState
    reason: jax.Array

    inc_value = renamed_field("incumbent_value", "inc_value")

    # the sub-states' fields, readable as before the split
    sigma = property(lambda self: self.uq.sigma, doc="``uq.sigma``.")
    delta = property(lambda self: self.uq.delta, doc="``uq.delta``.")
    recent = property(lambda self: self.uq.recent, doc="``uq.recent``.")
    count = property(lambda self: self.uq.count, doc="``uq.count``.")
    chosen = property(lambda self: self.bohb.chosen, doc="``bohb.chosen``.")
    rec_config = property(lambda self: self.bohb.rec_config, doc="``bohb.rec_config``.")
    rec_level = property(lambda self: self.bohb.rec_level, doc="``bohb.rec_level``.")
    rec_loss = property(lambda self: self.bohb.rec_loss, doc="``bohb.rec_loss``.")
    rec_count = property(lambda self: self.bohb.rec_count, doc="``bohb.rec_count``.")


class HalvingInfo(NamedTuple):
    """What ``tell`` of the halving family returns.

    Attributes:
        terminate: The whole schedule is done, bool ().
        incumbent: Configuration the run would return now, int32 ().
        incumbent_value: Its loss at the rung it was compared at, ().
        round: Global round index after this tell, int32 ().
        decisions: Whether this tell ended a round with a keep decision (0 or 1), int32 ().
        kept: Members kept by the last decision of this tell (-1 without), int32 ().
        fallback: The last decision used the plain count for lack of
            uncertainty estimates (always True for the plain versions), bool ().
        tau: The threshold ``P_{k*}`` of the last UQ decision (NaN otherwise), ().
        round_budget: Budget ``R`` of the round that decision was for, int32 ().
        spent: Epochs charged so far, int32 ().
        unspent: ``HalvingState.unspent`` after this tell, int32 ().
        profile_ok: The policy's own profile of ``Delta_t sigma`` is fitted
            (``delta_estimate="profile"``: False while profiling and when the fit failed,
            then the window estimate stands in; False for the other versions), bool ().
        ok: Nothing in the study so far rests on bad data: the params are valid, every
            loss told was finite, and every keep decision was computed in finite,
            representable numbers (``reason == Reason.OK``). It stays False once it is (a
            study-wide status, so the last info tells about the whole study). The
            numbers of the info stay usable either way (``incumbent_value`` is inf before
            an incumbent and ``tau`` NaN without a UQ decision, by design), bool ().
        reason: Why ``ok`` is False, the first cause (a :class:`jaxstop.Reason` code), int32 ():
            ``BAD_INPUT``: traced params outside their ranges (see
            :class:`~jaxstop.policies.HalvingParams`: the bad scalars are replaced by their
            defaults), or a non-finite loss (a job's ``Result.value``, or a loss in a
            candidate's uncertainty window: ``report``'s, or ``Result.history`` in the
            batch protocol; or in a profiled candidate's curve up to its last epoch, where
            a loss not reported counts too); the policy runs on (a candidate with a
            non-finite loss is never the incumbent and ranks last, the window statistics
            leave such losses out).
            ``NOT_FINITE`` / ``UNREPRESENTABLE``: a UQ keep decision whose
            :func:`jaxstop.confidence.keep_count` was not ``ok`` for that reason, or in which a
            member with a finite loss had a non-finite ``sigma`` or ``Delta_t sigma``
            (a window statistic beyond the dtype's range: it was left out, or given no
            shrinkage; ``UNREPRESENTABLE`` for a ``sigma`` of 0, a ``min_sigma`` below the
            dtype's range). ``EMPTY``: a UQ decision with no usable member.
    """

    terminate: jax.Array
    incumbent: jax.Array
    incumbent_value: jax.Array
    round: jax.Array
    decisions: jax.Array
    kept: jax.Array
    fallback: jax.Array
    tau: jax.Array
    round_budget: jax.Array
    spent: jax.Array
    unspent: jax.Array
    profile_ok: jax.Array
    ok: jax.Array
    reason: jax.Array

