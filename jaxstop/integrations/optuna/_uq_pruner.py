"""Asynchronous successive halving with the UQ-guided keep rule of Liu et al. (2024)
as an Optuna pruner (:class:`UQSuccessiveHalvingPruner`)."""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

import numpy as np
import optuna
from optuna.trial import FrozenTrial

from jaxstop import confidence
from jaxstop._src import checks
from jaxstop._src.status import Reason
from jaxstop.integrations.optuna._shared import (PicklableLock, beyond_range, check_study, first_step_at, float_dtype,
                                                  values_upto)

__all__ = ["RungDecision", "UQSuccessiveHalvingPruner", "plain_promotable"]

_KEEP_RULES = ("argmax", "crossing")
# Smallest capacity of the padded keep-count problem (grows by doubling).
_MIN_CAPACITY = 32

# Why a UQ decision used the plain rule instead (RungDecision.fallback).
FALLBACK_NONE = ""
FALLBACK_FEW_VALUES = "few_values"  # a member has too few values up to the rung for sigma / delta
FALLBACK_NOT_FINITE = "not_finite"  # a rung loss is -inf, or none is finite (checked first)
FALLBACK_STATUS = "status"  # keep_count's result is not ok (RungDecision.reason says why)


class RungDecision(NamedTuple):
    """One promotion decision of a :class:`UQSuccessiveHalvingPruner`.

    Attributes:
        number: The trial's number.
        rung: The rung (0 for the first).
        step: The rung's promotion step ``min_resource * eta**(s + rung)``.
        members: Trial numbers that reached the rung, the trial last (the others in
            trial-number order): the order of the keep-count problem.
        promoted: Whether the trial continues.
        uq: Whether the UQ keep rule decided (False: the plain rule, for ``uq=False``,
            a fallback, a NaN value or the bootstrap).
        k: Members the rule keeps (the UQ count, or the plain ``max(1, n // eta)``).
        fallback: Why a UQ pruner used the plain rule (``""`` when it did not):
            ``"few_values"``, ``"not_finite"`` or ``"status"``.
        reason: :class:`jaxstop.Reason` code of the keep count (0 when it did not run).
    """

    number: int
    rung: int
    step: int
    members: tuple
    promoted: bool
    uq: bool
    k: int
    fallback: str
    reason: int


def plain_promotable(losses: np.ndarray, eta: int) -> bool:
    """Whether the last of ``losses`` (the trial; the others are the rung's members)
    is promoted by asynchronous successive halving's top-``1/eta`` rule.

    The rule of Optuna's ``SuccessiveHalvingPruner``: with ``n`` values at the rung, the
    trial is promoted iff its loss is at most the ``max(1, n // eta)``-th smallest (ties
    at the boundary are all promoted; with fewer than ``eta`` values only the best is).
    """
    idx = max(len(losses) // eta - 1, 0)
    return bool(losses[-1] <= np.sort(losses)[idx])


def rung_key(rung: int) -> str:
    """The system attribute that makes a trial a member of rung ``rung``: set (to its rung
    value and the step it reported it at, ``[value, step]``) when
    :class:`UQSuccessiveHalvingPruner` decides the trial there."""
    return f"jaxstop:uq_successive_halving:rung_{rung}"


def _recorded(attr) -> tuple[float, int | None]:
    """``(rung value, step)`` of a :func:`rung_key` attribute: ``[value, step]``, or a value
    alone (studies begun before the step was recorded; step ``None``)."""
    if isinstance(attr, (list, tuple)):
        return float(attr[0]), int(attr[1])
    return float(attr), None


def _check_int(value, name: str, minimum: int) -> int:
    return checks.positive_int(value, name, minimum)


class UQSuccessiveHalvingPruner(PicklableLock, optuna.pruners.BasePruner):
    """Asynchronous successive halving whose promotions follow the UQ keep rule.

    Rungs as in Optuna's ``SuccessiveHalvingPruner`` (asynchronous successive halving,
    Li et al., 2020): rung ``r`` is at step ``S_r = min_resource * eta**(s + r)`` with
    ``s = min_early_stopping_rate`` and ``eta = reduction_factor``. When ``should_prune()``
    is called and the trial's last report is at a step ``>= S_r`` of a rung it was not
    decided at before (its rung value is that last value; it is decided once per rung, at
    each rung up to the step in order, as in Optuna's pruner), it becomes a
    member of the rung, competes with the rung's other members -- the trials of the study
    decided at that rung before, promoted or not, in any state (a NaN rung value never
    competes), as in Optuna's pruner: a trial pruned at a lower rung is no member of a
    higher one even if its reports went past it, nor is a trial the objective pruned
    without asking -- and either continues to rung ``r + 1`` or is pruned:

    * ``uq=False`` (the baseline): it continues iff its value is among the top
      ``max(1, n // eta)`` of the ``n`` rung values (:func:`plain_promotable`). This is
      Optuna's rule, and the decisions equal ``optuna.pruners.SuccessiveHalvingPruner``'s
      (with the same ``min_resource``, ``reduction_factor``, ``min_early_stopping_rate``,
      ``bootstrap_count``), whenever the objective calls ``should_prune()`` (after every
      report or not, at consecutive steps or not, twice at one step).
    * ``uq=True`` (SH+ of Liu et al., 2024, Section 3.3.2): it continues iff
      :func:`jaxstop.confidence.keep_count` keeps it, on the ``n`` members' converged-loss
      model (Assumption 3.3): ``mu`` their loss at the rung (the value, negated in a
      maximised study); ``sigma`` the std of their last ``window`` values up to the rung
      (Eq. 1, :func:`jaxstop.confidence.window_std`, floored at ``min_sigma``); ``delta_sigma``
      as below; and the round budget ``R = max(1, n // eta) * (S_{r+1} - S_r)``, the steps
      the plain rule would give the promoted members up to the next rung. The rule keeps
      the smallest ``k`` with ``P_k >= tau = P_{k*}`` (Eq. 4-7), so a rung whose leaders are
      clearly apart promotes fewer trials, and one with overlapping members more.

    ``delta_sigma`` (``Delta_t sigma`` of Eq. 6, how much one more step lowers a member's
    ``sigma``): the window estimate of Appendix C, each member's std of the previous
    window minus the current one up to the rung
    (:func:`jaxstop.confidence.window_delta_sigma`), or the constant ``delta_sigma``
    when given. Why the window estimate: the other estimates of
    :func:`jaxstop.policies.halving.sh` need what an asynchronous study does not have --
    the profile (the paper's main method) trains a few trials to the maximum resource
    before the first rung decision, but Optuna decides a trial's rung as soon as it
    arrives and the pruner is not told the maximum resource; an offline profile needs an
    earlier launch. The window estimate uses only the member's own values up to the rung,
    so every member is judged on data at the same step whether it stopped there or trained
    on, and the decision needs no extra budget.

    A member whose rung loss is ``+inf`` (a run that diverged; ``-inf`` accuracy in a maximised
    study) is the worst of its rung: it leaves the UQ problem and is not promoted, as the
    policies' keep rule leaves out non-finite losses. The plain rule stands in for a UQ
    decision (:attr:`RungDecision.fallback`) when a member's rung loss is ``-inf``, better
    than every finite one, or no member's is finite (``"not_finite"``), a member with a finite
    rung loss has fewer values up to the rung
    than the estimates need (``"few_values"``: 2 for ``sigma``, 3 with the window
    ``delta_sigma``; e.g. the first rung with ``min_resource=1`` and steps from 0), or the
    keep count is not ``ok`` (``"status"``, with its :class:`jaxstop.Reason`: e.g. a problem
    float32 cannot represent, including finite values beyond its range, such as 1e39,
    which are not cast to inf, and values whose window std overflows it, such as
    alternating +-3e38: ``UNREPRESENTABLE``). The values enter the keep count minus the
    best finite rung loss, shifted in float64 (the rule depends on differences only), so
    float32 keeps spreads small against their magnitude (``1e8 + 0.1``); "beyond its
    range" is said of these differences. A NaN value at the rung prunes the trial (as
    Optuna does), and with at most ``bootstrap_count`` values at the rung every trial is
    pruned (as Optuna's ``bootstrap_count``). The window statistics assume one report
    per step; with sparser reports ``delta_sigma`` is per report.

    Cost. The keep count runs on arrays padded to a capacity (32, then doubled as a
    rung's members outgrow it), so a study compiles one program per doubling (5-20 s
    each on a 2-core CPU) and a decision then costs milliseconds. The capacity and
    :attr:`decisions` are per instance; with several processes each process decides its
    own trials from the shared storage.

    Args:
        min_resource: ``r`` of the rung steps, an int >= 1.
        reduction_factor: ``eta``, an int >= 2.
        min_early_stopping_rate: ``s``, an int >= 0.
        bootstrap_count: Trials pruned until more than this many values reached a rung.
        uq: Use the UQ keep rule (True) or the plain top-``1/eta`` rule (False).
        window: Values in the uncertainty window (Eq. 1), an int >= 2.
        keep_rule: ``"argmax"`` or ``"crossing"`` (see :func:`jaxstop.confidence.keep_count`).
        delta_sigma: A constant ``Delta_t sigma`` for every member, or ``None`` for the
            window estimate.
        min_sigma: Floor on ``sigma`` (in the units of the values; ``2^-18``, the default of
            :class:`jaxstop.policies.HalvingParams`, which says why).

    Attributes:
        decisions: The :class:`RungDecision` of every promotion decision of this instance.

    Example:
        >>> import optuna
        >>> pruner = UQSuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
        >>> study = optuna.create_study(pruner=pruner)
    """

    def __init__(
        self,
        min_resource: int = 1,
        reduction_factor: int = 3,
        min_early_stopping_rate: int = 0,
        bootstrap_count: int = 0,
        *,
        uq: bool = True,
        window: int = 10,
        keep_rule: str = "argmax",
        delta_sigma: float | None = None,
        min_sigma: float = 2.0**-18,
    ) -> None:
        self._min_resource = _check_int(min_resource, "min_resource", 1)
        self._eta = _check_int(reduction_factor, "reduction_factor", 2)
        self._rate = _check_int(min_early_stopping_rate, "min_early_stopping_rate", 0)
        self._bootstrap = _check_int(bootstrap_count, "bootstrap_count", 0)
        self._uq = checks.boolean(uq, "uq")
        self._window = _check_int(window, "window", 2)
        if keep_rule not in _KEEP_RULES:
            raise ValueError(f"keep_rule must be one of {_KEEP_RULES}, got {keep_rule!r}")
        self._keep_rule = keep_rule
        self._delta = None if delta_sigma is None else checks.nonneg_float(delta_sigma, "delta_sigma")
        self._min_sigma = checks.nonneg_float(min_sigma, "min_sigma", positive=True)
        self._capacity = _MIN_CAPACITY
        self._lock = threading.Lock()
        self.decisions: list[RungDecision] = []

    def rung_step(self, rung: int) -> int:
        """``S_r = min_resource * eta**(s + r)``, the step at which rung ``r`` is decided."""
        return self._min_resource * self._eta ** (self._rate + rung)

    # ----------------------------------------------------------------------------------

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Whether to prune ``trial`` now (see the class docstring)."""
        minimise = check_study(study, "UQSuccessiveHalvingPruner")
        values = trial.intermediate_values
        if not values:
            return False
        last = max(values)
        trials = None
        rung = 0
        while (step_r := self.rung_step(rung)) <= last:
            # decided at every rung its last report reached and it was not decided at before
            # (its membership recorded there), as Optuna's pruner: a second call at the same
            # step, or a report at a lower step, decides no rung again
            if rung_key(rung) not in trial.system_attrs:
                if trials is None:
                    trials = study.get_trials(deepcopy=False)
                if not self._decide(study, trials, trial, rung, step_r, minimise):
                    return True
            rung += 1
        return False

    def _members(self, trials, trial: FrozenTrial, rung: int, step_r: int):
        """``(number, rung value, rung step, trial)`` of every other trial decided at the rung
        (its system attribute :func:`rung_key` set) with a non-NaN value there, in
        trial-number order: the value and step recorded when it was decided (a value alone,
        in studies begun before steps were recorded: its step is then the first reported at
        or beyond the rung)."""
        key = rung_key(rung)
        out = []
        for t in trials:
            iv = t.intermediate_values
            if t.number == trial.number or not iv or key not in t.system_attrs:
                continue
            value, s = _recorded(t.system_attrs[key])
            if s is None or s not in iv:
                s = first_step_at(iv, step_r)
            if s is not None and not math.isnan(value):
                out.append((t.number, value, s, t))
        out.sort(key=lambda m: m[0])
        return out

    def _decide(self, study: optuna.Study, trials, trial: FrozenTrial, rung: int, step_r: int,
                minimise: bool) -> bool:
        values = trial.intermediate_values
        value = values[max(values)]
        if not math.isnan(value):
            # the trial is a member of the rung from now on, promoted or not (a NaN value never
            # competes); the record lives in the study's storage, as Optuna's own pruner's
            study._storage.set_trial_system_attr(trial._trial_id, rung_key(rung), [float(value), int(max(values))])
        others = self._members(trials, trial, rung, step_r)
        numbers = tuple(m[0] for m in others) + (trial.number,)
        n = len(numbers)
        sign = 1.0 if minimise else -1.0
        losses = sign * np.array([m[1] for m in others] + [value], dtype=np.float64)
        plain_k = max(1, n // self._eta)

        def record(promoted, uq, k, fallback="", reason=0):
            self.decisions.append(RungDecision(trial.number, rung, step_r, numbers, bool(promoted), uq, k,
                                               fallback, reason))
            return bool(promoted)

        if math.isnan(value) or n <= self._bootstrap:
            return record(False, False, 0 if n <= self._bootstrap else plain_k)
        if not self._uq:
            return record(plain_promotable(losses, self._eta), False, plain_k)
        curves = [values_upto(m[3].intermediate_values, m[2], self._window + 1) for m in others]
        curves.append(values_upto(values, max(values), self._window + 1))
        need = 2 if self._delta is not None else 3
        # a member whose rung loss is +inf (a run that diverged) is the worst of the rung: it
        # leaves the UQ problem and is not kept, as in the policies' keep rule
        finite = np.isfinite(losses)
        counts = [int(np.sum(np.isfinite(c))) for c, f in zip(curves, finite) if f]
        fallback = FALLBACK_NONE
        # a -inf rung loss is better than every finite one: the rule cannot weigh it
        if np.any(losses == -np.inf) or not np.any(finite):
            fallback = FALLBACK_NOT_FINITE
        elif min(counts) < need:
            fallback = FALLBACK_FEW_VALUES
        if fallback:
            return record(plain_promotable(losses, self._eta), False, plain_k, fallback)
        # shifted in float64 by the best rung loss, as the keep rule depends on differences only:
        # the cast to JAX's float dtype then keeps spreads small against the values (1e8 + 0.1)
        ref = float(np.min(losses[finite]))
        shifted = losses - ref
        curves = [sign * c - ref for c in curves]
        live = [c for c, f in zip(curves, finite) if f]
        if any(beyond_range(a, float_dtype()).any() for a in [shifted[finite]] + live):
            # finite differences beyond the working dtype's range (e.g. 1e39 in float32) would turn
            # into inf in the cast: the problem as given cannot be computed in that dtype
            return record(plain_promotable(losses, self._eta), False, plain_k, FALLBACK_STATUS,
                          int(Reason.UNREPRESENTABLE))
        budget = plain_k * (self.rung_step(rung + 1) - step_r)
        res = self._keep_count(shifted, curves, budget, finite)
        if res is None:  # a member's window std (or its change) overflowed the dtype
            return record(plain_promotable(losses, self._eta), False, plain_k, FALLBACK_STATUS,
                          int(Reason.UNREPRESENTABLE))
        if not bool(res.ok):
            return record(plain_promotable(losses, self._eta), False, plain_k, FALLBACK_STATUS, int(res.reason))
        return record(bool(np.asarray(res.keep)[n - 1]), True, int(res.k))

    def _keep_count(self, losses: np.ndarray, curves: list, budget: int,
                    member: np.ndarray) -> confidence.KeepCount | None:
        """:func:`jaxstop.confidence.keep_count` on the ``member`` rows, padded to the capacity;
        ``None`` when such a member's ``sigma`` or ``delta_sigma`` is not finite (the spread of
        finite values beyond the dtype's range: float32 values of +-3e38)."""
        n = losses.shape[0]
        with self._lock:
            while self._capacity < n:
                self._capacity *= 2
            cap = self._capacity
        dtype = float_dtype()
        width = self._window + 1
        table = np.full((cap, width), np.nan, dtype)
        count = np.zeros((cap,), np.int32)
        for i, c in enumerate(curves):
            table[i, : c.shape[0]] = c
            count[i] = c.shape[0]
        mask = np.zeros((cap,), bool)
        mask[:n] = member
        sigma = np.maximum(np.asarray(confidence.window_std(table, count, self._window)), self._min_sigma)
        # back in NumPy: a JAX array indexed by the mask below would compile its eager gather
        # once per number of members
        sigma = np.asarray(checks.inert_rows(sigma.astype(dtype), mask, 1.0))
        if self._delta is None:
            delta = np.asarray(confidence.window_delta_sigma(table, count, self._window)).astype(dtype)
        else:
            delta = np.full((cap,), self._delta, dtype)
        if not (np.all(np.isfinite(sigma[mask])) and np.all(np.isfinite(delta[mask]))):
            return None
        mu = np.zeros((cap,), dtype)
        mu[:n] = np.where(member, losses, 0.0)
        return confidence.keep_count(mu, sigma, checks.inert_rows(delta, mask), np.asarray(budget, dtype),
                                     mask=mask, rule=self._keep_rule)
