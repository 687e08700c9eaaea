"""BO-BOS's per-trial stopping as an Optuna pruner (:class:`BOSPruner`).

The Bayesian optimal stopping (BOS) step of BO-BOS (Dai et al., "Bayesian Optimization
Meets Bayesian Optimal Stopping", ICML 2019, Algorithm 1 lines 3-9) on the values a trial
reports with ``trial.report(value, step)``: after ``N0`` steps the trial's BOS problem is
solved once (:func:`jaxstop.bos.solve`: the learning-curve GP of Eq. (5) fitted to the
first ``N0`` errors, simulated paths, backward induction with the 0-K loss of
Eqs. (2)-(4)) against the study's incumbent, and at every later step ``n < N`` the
decision table is looked up (:func:`jaxstop.bos.decide`); the trial is pruned on the
decision d1 ("its final error will not beat the incumbent").
"""

from __future__ import annotations

import math
import numbers
import threading
import warnings
from typing import NamedTuple

import jax
import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from jaxstop import bos
from jaxstop._src import checks
from jaxstop._src.status import Reason
from jaxstop.integrations.optuna._shared import PicklableLock, check_study, float_dtype

__all__ = ["BOSPruner", "BOSTrialRecord"]

_INCUMBENTS = ("all", "complete")
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# A table whose simulated paths stay inside (0, 1) less often than this is reported (see _report).
_FEW_VALID = 0.1
# Noise std of the curve GP (bos.solve's noise_var 1e-3): first errors all below it are warned of.
_NOISE_STD = math.sqrt(1e-3)


class BOSTrialRecord(NamedTuple):
    """The BOS problem a :class:`BOSPruner` solved (or declined to solve) for one trial.

    Attributes:
        number: The trial's number.
        active: Whether a decision table was solved; False during the study's startup
            (fewer than ``n_startup_trials`` finished trials) or without an incumbent.
        t: The BO iteration ``t`` of the K1 schedule: finished trials at the solve minus
            ``n_startup_trials``, plus one (0 when not active).
        k1: ``K_{1,t}`` (Theorem 2), NaN when not active.
        xi: ``xi_t`` (Theorem 1), NaN when not active.
        best_error: The incumbent's error in (0, 1) units, NaN when not active.
        prefix: The errors of epochs ``1..N0`` (steps ``0..N0-1``), shape (N0,).
        ok: Whether the table is usable (:attr:`jaxstop.bos.DecisionTable.ok`); a table
            that is not ok never prunes.
        reason: Its :class:`jaxstop.Reason` code (0 when not active).
        valid_share: The share of the simulated paths that stayed inside (0, 1) and so
            make up the table (NaN when not active); below 0.1 the pruner warns.
    """

    number: int
    active: bool
    t: int
    k1: float
    xi: float
    best_error: float
    prefix: np.ndarray
    ok: bool
    reason: int
    valid_share: float = math.nan


def _check_range(value_range) -> tuple[float, float]:
    try:
        if isinstance(value_range, (str, bytes, dict)) or len(value_range) != 2:
            raise TypeError
        lo, hi = (float(v) for v in value_range)
    except (TypeError, ValueError) as err:
        raise TypeError(f"value_range must be a pair of numbers (lo, hi), got {value_range!r}") from err
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"value_range must be finite with lo < hi, got {value_range!r}")
    return lo, hi


class BOSPruner(PicklableLock, optuna.pruners.BasePruner):
    """BO-BOS's Bayesian optimal stopping (Dai et al., 2019) as an Optuna pruner.

    The objective reports one value per epoch, ``trial.report(value, step)`` with
    ``step = 0, 1, ..., N - 1`` (epoch ``n = step + 1``), and calls
    ``trial.should_prune()`` after each report. For each trial:

    * Steps ``0..N0-1``: never pruned. At the first call with ``step >= N0 - 1`` the
      trial's BOS problem is solved once (:func:`jaxstop.bos.solve`) on the errors of
      epochs ``1..N0`` (the prefix), with the incumbent error ``y*`` (see ``incumbent``),
      ``K1 = K_{1,t} = k1_init / k1_gamma**(t - 1)`` (Theorem 2;
      :func:`jaxstop.bos.k1_schedule`) where ``t`` is the number of finished (complete
      or pruned) trials minus ``n_startup_trials``, plus one -- BO-BOS counts every
      evaluation, stopped or not --, ``K2 = k2``, ``c = cost`` and ``xi_t``
      (:func:`jaxstop.bos.xi`, 0 unless ``xi_noise_var > 0``).
    * Steps with ``N0 < n < N``: pruned when ``bos.decide(table, n, running_mean)`` is
      ``ACTION_STOP`` (decision d1: "the final error will not beat the incumbent"), with
      ``running_mean`` the summary statistic the table was solved for
      (:func:`jaxstop.bos.summary_statistic`: the mean error of epochs ``1..n`` in
      ``mode="corrected"``, Section 3.2; of epochs ``N0+1..n`` in ``mode="compat"``, the
      released code) -- condition C1 of Algorithm 1.
      d2 and continue keep training (Section 3.2). At ``n >= N`` nothing is pruned.

    BO-BOS also asks (condition C2) that the GP surrogate of the sampler be uncertain
    enough at ``[x, n / N]``; Optuna's samplers have no such GP, so only C1 applies. The
    first ``n_startup_trials`` finished trials are never pruned (BO-BOS's random initial
    evaluations), nor any trial while the study has no incumbent.

    Errors. BOS works with validation errors in (0, 1). A value ``v`` maps to
    ``e = (v - lo) / (hi - lo)`` in a minimised study and ``e = (hi - v) / (hi - lo)`` in a
    maximised one, with ``(lo, hi) = value_range`` (default (0, 1): errors to minimise,
    or accuracies to maximise, ``e = 1 - accuracy``); ``e`` is then clipped into
    ``[eps, 1 - eps]``. A reported NaN or inf (a run that diverged) prunes the trial, as
    Optuna's pruners prune a NaN, once the startup trials have finished (during the startup
    it is not pruned). A finite value (reported, or the incumbent's) outside ``value_range``
    raises ``ValueError`` naming ``value_range``; a missing step raises ``ValueError`` (the
    GP and the running mean need one value per epoch), and so does a step ``>= max_steps``.

    Small errors. The learning-curve GP of the paper has a fixed noise variance of ``1e-3``
    (std ``sqrt(1e-3)`` = 0.032) on the (0, 1) scale of ``e``. Where a trial's first ``N0``
    errors all lie below that std, the GP reads them as noise around a curve at 0: its
    simulated continuations leave (0, 1) (such paths are dropped, as in the authors' code)
    and the table is empty (``reason`` ``EMPTY``, usual in float32) or rests on paths near 0
    that beat any incumbent -- either way the trial is never pruned. The pruner then warns
    (``RuntimeWarning``, once per pruner), as it does for any table that is not ok or of
    whose paths fewer than 10% stayed inside (0, 1); ``records`` hold every trial's ``ok``,
    ``reason`` and ``valid_share``. The remedy is a ``value_range`` that spans just the
    values the runs report (errors of 0.5%-5% after a first epoch at 20%:
    ``value_range=(0, 0.25)``), so that ``e`` spreads over (0, 1).

    Incumbent. ``incumbent="all"`` (default, as the paper: the best observed value over
    every evaluation) takes the best of the complete trials' values and the pruned
    trials' last reported values (a pruned trial whose last value is NaN or inf, a run that
    diverged, offers none); ``"complete"`` the complete trials' only (as
    :func:`jaxstop.policies.bo_bos`). Only the incumbent's value is checked against
    ``value_range``. Read from the storage when the trial's problem is
    solved; the trial itself, running and failed trials never count.

    Cost. The first solve compiles (10-20 s on a 2-core CPU); later solves reuse the
    program (all shapes are fixed by ``N0``, ``N`` and ``num_paths``) and a decision is one
    jitted table lookup (about a millisecond). Tables are kept per trial number in this
    instance and dropped once the trial has finished, so an instance serves one study (a
    second study raises ``ValueError``: give each its own). With several processes (shared
    RDB / journal storage) each process solves the trials it runs; the solve is seeded by
    ``(seed, trial.number)``, so the same trial gets the same table in any process.

    Args:
        n_startup_steps: ``N0``, epochs observed before the solve, ``1 <= N0 < N``
            (8 in the paper).
        max_steps: ``N``, the epochs of a full run (steps ``0..N-1``).
        n_startup_trials: Finished trials before any trial is pruned (BO-BOS's random
            initial evaluations, 6 in the authors' code).
        value_range: ``(lo, hi)``, the range of the reported values (see Errors).
        incumbent: ``"all"`` or ``"complete"`` (see Incumbent).
        k1_init, k1_gamma, k2, cost: The loss parameters ``K_{1,1}``, the growth factor
            of ``K_{1,t}``, ``K2`` and ``c`` (see :func:`jaxstop.bos.backward_induction`).
        xi_noise_var, xi_delta: ``sigma^2`` and ``delta`` of :func:`jaxstop.bos.xi`.
        num_paths, num_bins, mode: See :func:`jaxstop.bos.solve`.
        seed: Seed of the simulated paths (trial ``i`` uses
            ``jax.random.fold_in(jax.random.key(seed), i)``).

    Attributes:
        records: ``{trial number: BOSTrialRecord}`` of the trials this instance decided on.

    Example:
        >>> import optuna
        >>> pruner = BOSPruner(n_startup_steps=8, max_steps=50, num_paths=20_000)
        >>> study = optuna.create_study(pruner=pruner)   # values: errors in (0, 1)
    """

    def __init__(
        self,
        n_startup_steps: int = 8,
        *,
        max_steps: int,
        n_startup_trials: int = 6,
        value_range: tuple[float, float] = (0.0, 1.0),
        incumbent: str = "all",
        k1_init: float = 100.0,
        k1_gamma: float = 0.95,
        k2: float = 99.0,
        cost: float = 1.0,
        xi_noise_var: float = 0.0,
        xi_delta: float = 0.1,
        num_paths: int = 100_000,
        num_bins: int = 99,
        mode: str = "corrected",
        seed: int = 0,
    ) -> None:
        self._n0 = checks.positive_int(n_startup_steps, "n_startup_steps")
        self._N = checks.positive_int(max_steps, "max_steps", 2)
        if self._n0 >= self._N:
            raise ValueError(f"n_startup_steps (N0) must be < max_steps (N) = {self._N}, got {self._n0}")
        self._n_startup_trials = checks.positive_int(n_startup_trials, "n_startup_trials", 0)
        self._range = _check_range(value_range)
        if incumbent not in _INCUMBENTS:
            raise ValueError(f"incumbent must be one of {_INCUMBENTS}, got {incumbent!r}")
        self._incumbent = incumbent
        self._k1_init = checks.nonneg_float(k1_init, "k1_init", positive=True)
        self._k1_gamma = checks.nonneg_float(k1_gamma, "k1_gamma", positive=True, high=1.0)
        self._k2 = checks.nonneg_float(k2, "k2", positive=True)
        self._cost = checks.nonneg_float(cost, "cost")
        self._xi_noise_var = checks.nonneg_float(xi_noise_var, "xi_noise_var")
        self._xi_delta = checks.nonneg_float(xi_delta, "xi_delta", positive=True)
        if not self._xi_delta < 1:
            raise ValueError(f"xi_delta must lie in (0, 1), got {xi_delta!r}")
        self._num_paths = checks.positive_int(num_paths, "num_paths")
        self._num_bins = checks.positive_int(num_bins, "num_bins", 2)
        if mode not in ("corrected", "compat"):
            raise ValueError(f"mode must be 'corrected' or 'compat', got {mode!r}")
        self._mode = mode
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if not -2**63 <= seed < 2**63:
            raise ValueError(f"seed must be a 64-bit signed integer (a JAX key's seed), got {seed}")
        self._seed = int(seed)
        self._lock = threading.Lock()
        self._tables: dict[int, bos.DecisionTable] = {}
        self.records: dict[int, BOSTrialRecord] = {}
        self._warned = False  # of a table that is not ok or rests on few paths (once)
        self._study: tuple | None = None  # (name, id) of the one study it decides for

    # ----------------------------------------------------------------------------------

    def table(self, number: int) -> bos.DecisionTable | None:
        """The decision table of running trial ``number`` (``None`` when none was solved
        or the trial has finished and its table was dropped)."""
        return self._tables.get(number)

    def _errors(self, values, minimise: bool, what: str) -> np.ndarray:
        """Values mapped to errors in ``[eps, 1 - eps]`` (see the class docstring);
        ``ValueError`` naming ``value_range`` for a value outside it."""
        lo, hi = self._range
        v = np.asarray(values, dtype=np.float64)
        e = (v - lo) / (hi - lo) if minimise else (hi - v) / (hi - lo)
        bad = ~((e >= 0) & (e <= 1))
        if bad.any():
            raise ValueError(
                f"BOSPruner: {what} {float(v[bad][0])!r} lies outside value_range={self._range} (or is not finite); "
                "BOS needs errors in (0, 1): pass value_range=(lo, hi) covering the values"
            )
        dtype = float_dtype()
        eps = float(np.finfo(dtype).eps)
        return np.clip(e, eps, 1 - eps).astype(dtype)

    def _curve(self, trial: FrozenTrial, minimise: bool) -> np.ndarray | None:
        """The trial's errors of steps ``0..last`` (``None`` when one of its values is NaN
        or inf: a run that diverged)."""
        values = trial.intermediate_values
        last = max(values)
        if last >= self._N:
            raise ValueError(f"BOSPruner: trial {trial.number} reported step {last}, but max_steps={self._N} "
                             f"(steps 0..{self._N - 1}); raise max_steps")
        if len(values) != last + 1:
            missing = min(set(range(last + 1)) - set(values))
            raise ValueError(f"BOSPruner needs a value at every step 0, 1, ...: trial {trial.number} has no "
                             f"value at step {missing}")
        curve = [values[s] for s in range(last + 1)]
        if not all(math.isfinite(v) for v in curve):
            return None
        return self._errors(curve, minimise, f"trial {trial.number}'s value")

    def _incumbent_error(self, finished: list[FrozenTrial], minimise: bool) -> float | None:
        values = []
        for t in finished:
            if t.state == TrialState.COMPLETE and t.value is not None:
                values.append(t.value)
            elif self._incumbent == "all" and t.state == TrialState.PRUNED and t.intermediate_values:
                last = t.intermediate_values[max(t.intermediate_values)]
                if math.isfinite(last):  # a pruned run that diverged (NaN, inf) has no value to offer
                    values.append(last)
        if not values:
            return None
        # only the incumbent's value is checked: a worse value outside value_range (a pruned
        # run that diverged to a large loss) does not stop the study
        best = min(values) if minimise else max(values)
        return float(self._errors([best], minimise, "the incumbent value")[0])

    def _solve(self, study: optuna.Study, trial: FrozenTrial, prefix: np.ndarray, minimise: bool) -> BOSTrialRecord:
        ended = study.get_trials(deepcopy=False, states=_FINISHED + (TrialState.FAIL,))
        finished = [t for t in ended if t.state in _FINISHED]
        done = {t.number for t in ended}
        best = self._incumbent_error(finished, minimise)
        t = len(finished) - self._n_startup_trials + 1
        with self._lock:
            for number in done & self._tables.keys():  # tables of finished trials are not needed again
                del self._tables[number]
        if t < 1 or best is None:
            nan = float("nan")
            return BOSTrialRecord(trial.number, False, 0, nan, nan, nan, prefix, True, 0, nan)
        dtype = prefix.dtype
        k1 = np.asarray(bos.k1_schedule(t, self._k1_init, self._k1_gamma), dtype)
        xi = np.asarray(bos.xi(t, self._xi_noise_var, self._xi_delta), dtype)
        key = jax.random.fold_in(jax.random.key(self._seed), trial.number)
        table = bos.solve(key, prefix, np.asarray(best, dtype), self._N, k1, np.asarray(self._k2, dtype),
                          np.asarray(self._cost, dtype), num_paths=self._num_paths, num_bins=self._num_bins,
                          mode=self._mode, xi=xi)
        with self._lock:
            self._tables[trial.number] = table
        record = BOSTrialRecord(trial.number, True, t, float(k1), float(xi), best, prefix, bool(table.ok),
                                int(table.reason), int(table.num_valid) / self._num_paths)
        self._report(record)
        return record

    def _report(self, record: BOSTrialRecord) -> None:
        """Warns (once per pruner) where BOS cannot judge the trial: its table is not ok, it
        rests on few paths, or its errors all lie below the curve GP's noise level."""
        small = float(record.prefix.max()) < _NOISE_STD
        if record.ok and record.valid_share >= _FEW_VALID and not small:
            return
        with self._lock:
            if getattr(self, "_warned", False):
                return
            self._warned = True
        what = (f"is not usable (reason {Reason(record.reason).name}), so the trial is never pruned"
                if not record.ok else "cannot tell it from a curve at 0")
        warnings.warn(
            f"BOSPruner: the decision table of trial {record.number} {what}: its first {self._n0} "
            f"errors (in (0, 1) units) lie in [{float(record.prefix.min()):.3g}, {float(record.prefix.max()):.3g}] "
            f"and {record.valid_share:.1%} of its {self._num_paths} simulated continuations stayed inside "
            f"(0, 1). The learning-curve GP's noise variance is fixed at 1e-3 (std {_NOISE_STD:.3f}) on "
            "that scale, so it reads errors below that as noise around 0; pass value_range=(lo, hi) "
            "spanning just the values the runs report, so that their errors spread over (0, 1). "
            "BOSPruner.records holds every trial's prefix, ok, reason and valid_share; this warning "
            "is given once.",
            RuntimeWarning, stacklevel=2)

    def _bind(self, study: optuna.Study) -> None:
        """Ties the pruner to the first study it decides for; ``ValueError`` for another one
        (its records and tables are per trial number, which another study's trials share)."""
        ident = (study.study_name, getattr(study, "_study_id", None))
        with self._lock:
            if getattr(self, "_study", None) is None:  # (pickled before the binding existed: none)
                self._study = ident
        if ident != self._study:
            raise ValueError(f"this BOSPruner decides for study {self._study[0]!r}, not {ident[0]!r}: its records "
                             "and decision tables are kept per trial number; give each study its own BOSPruner")

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        """Whether to prune ``trial`` now (see the class docstring)."""
        minimise = check_study(study, "BOSPruner")
        self._bind(study)
        if not trial.intermediate_values:
            return False
        errors = self._curve(trial, minimise)
        if errors is None:  # diverged: pruned (as Optuna prunes a NaN), unless in the startup
            finished = study.get_trials(deepcopy=False, states=_FINISHED)
            return len(finished) >= self._n_startup_trials
        n, n0 = errors.shape[0], self._n0  # n = epoch of the last report
        if n < n0:
            return False
        record = self.records.get(trial.number)
        if record is None:
            record = self._solve(study, trial, errors[:n0], minimise)
            self.records[trial.number] = record
        table = self._tables.get(trial.number)
        if not record.active or table is None or not n0 < n < self._N:
            return False
        padded = np.full(self._N, np.nan, errors.dtype)  # one shape for every step: one compiled program
        padded[:n] = errors
        statistic = bos.summary_statistic(padded, n, n0, statistic=bos.resolve_statistic(None, self._mode))
        return int(bos.decide(table, n, statistic)) == bos.ACTION_STOP
