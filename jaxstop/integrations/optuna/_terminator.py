"""Regret-bound termination of Optuna studies (Makarova et al., 2022) on :mod:`jaxstop.regret`.

:class:`RegretBoundTerminator` decides from a study whether to stop: it reads the study's
trials (``study.get_trials``, every call: it never assumes it saw every trial, so several
processes sharing one storage each reach the same decision from the same trials), encodes
them into the unit cube (:mod:`._space`), evaluates the regret bound of Eq. (8) with
:func:`jaxstop.regret.fit_regret_bound` and compares it with the threshold of Eq. (10)
from the incumbent's cross-validation scores (:func:`jaxstop.regret.cv_threshold`).
:class:`TerminatorCallback` wraps it for ``study.optimize(..., callbacks=[...])`` and
:func:`report_cross_validation_scores` stores the folds, named and used like
``optuna.terminator``'s.

Which trials: COMPLETE trials (their values); with ``include_pruned=True`` also PRUNED
trials with at least one intermediate value (their last one, unless it is NaN or inf: a
run that diverged, which Optuna's pruners prune, offers no value). FAIL, RUNNING and WAITING
trials never enter (they have no value). The incumbent, whose folds give the threshold, is
the best COMPLETE trial (lowest number among ties). Maximised studies are minimised on
``-value``; the bound and threshold are in the objective's units either way.

Compilation: rows and columns are padded to capacities that double
(:func:`._space.capacity`) and the candidate count is fixed, so the bound compiles once
per doubling of the number of trials; the warm start (the previous fit's GP parameters
and quasi-Newton curvature) is always passed, as the default start and an all-zero
curvature on a first call, so it never changes the compiled program either.
"""

from __future__ import annotations

import math
import numbers
import threading
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from jaxstop import regret
from jaxstop._src import checks, gp_fit, gp_priors, termination
from jaxstop.integrations.optuna import _space
from jaxstop.integrations.optuna._shared import PicklableLock, beyond_range

__all__ = [
    "CV_SCORES_KEY",
    "FitInputs",
    "TerminatorRecord",
    "RegretBoundTerminator",
    "TerminatorCallback",
    "report_cross_validation_scores",
]

#: A child of Optuna's root logger: follows ``optuna.logging.set_verbosity`` and Optuna's handler.
_LOGGER = optuna.logging.get_logger("optuna.jaxstop")

#: User attribute under which :func:`report_cross_validation_scores` stores the folds.
CV_SCORES_KEY = "jaxstop:cv_scores"
#: System attribute of ``optuna.terminator.report_cross_validation_scores``, also read.
OPTUNA_CV_SCORES_KEY = "terminator:cv_scores"


def report_cross_validation_scores(trial: optuna.Trial, scores: Sequence[float]) -> None:
    """Stores a trial's k-fold cross-validation scores for the threshold of Eq. (10).

    Call it in the objective (as with ``optuna.terminator``); the scores are stored as the
    user attribute :data:`CV_SCORES_KEY` (``"jaxstop:cv_scores"``), a list of floats, so
    they travel with the study's storage. The terminator also reads scores stored by
    ``optuna.terminator.report_cross_validation_scores``.

    Args:
        trial: The running ``optuna.Trial``.
        scores: The k fold scores (k >= 2), in the units of the objective.

    Raises:
        ValueError: Fewer than two scores, or a score that is not finite.

    Example:
        >>> import optuna
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> study = optuna.create_study()
        >>> trial = study.ask()
        >>> report_cross_validation_scores(trial, [0.8, 0.9, 0.85])
        >>> study.tell(trial, 0.85).user_attrs[CV_SCORES_KEY]
        [0.8, 0.9, 0.85]
    """
    try:
        if isinstance(scores, (str, bytes)):  # a string is a sequence of characters, not of scores
            raise TypeError
        values = [float(s) for s in scores]
    except (TypeError, ValueError) as err:
        raise ValueError(f"scores must be a sequence of numbers, got {scores!r}") from err
    if len(values) < 2:
        raise ValueError(f"scores must hold at least 2 fold scores, got {len(values)}")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"scores must be finite, got {values}")
    trial.set_user_attr(CV_SCORES_KEY, values)


def fold_scores(trial: FrozenTrial) -> list[float] | None:
    """A trial's stored fold scores (jaxstop's key first, then Optuna's), or None."""
    scores = trial.user_attrs.get(CV_SCORES_KEY)
    if scores is None:
        scores = trial.system_attrs.get(OPTUNA_CV_SCORES_KEY)
    return None if scores is None else [float(s) for s in scores]


class FitInputs(NamedTuple):
    """What the terminator passes to :func:`jaxstop.regret.fit_regret_bound` (and more).

    ``regret.fit_regret_bound(i.key, i.X, i.y, i.mask, init=i.init,
    init_inv_hessian=i.init_inv_hessian, dim_mask=i.dim_mask, candidates=i.candidates,
    fraction=i.fraction, min_points=i.min_points, beta_t=i.beta_t, options=i.options)`` is
    exactly the terminator's call.

    Attributes:
        key: PRNG key, the threefry key with data ``(seed mod 2**32, n)`` (the candidates
            are given, so it only enters the fit's key threading).
        X: Encoded trials, shape (rows, cols): capacities, padded with zeros.
        y: Values to minimise (``-value`` for a maximised study) minus the incumbent's, shape
            (rows,): shifted in float64, so that the cast to JAX's float dtype keeps their
            differences (float32 resolves ``1e8 + 0.1`` from ``1e8`` only after the shift;
            the bound is that of the values themselves, as the fit standardises them).
        mask: Real rows, shape (rows,) bool.
        dim_mask: Real columns, shape (cols,) bool.
        candidates: Domain points of the LCB minimum, shape (candidates, cols) (see
            ``seed`` of :class:`RegretBoundTerminator`: drawn once per layout).
        init: Warm start of the GP parameters.
        init_inv_hessian: Warm start of the fit's curvature (zeros: none).
        fraction, min_points, beta_t, options: The fit's settings (``options.beta_size``
            is the number of hyperparameters unless set).
        numbers: The trial numbers of the real rows, in row order.
        encoding: The :class:`._space.Encoding` of those trials.
        best_number: The incumbent's trial number.
        best_value: Its value (in the study's direction).
        folds: Its fold scores, or None.
        num_complete: Number of COMPLETE trials.
    """

    key: jax.Array
    X: jax.Array
    y: jax.Array
    mask: jax.Array
    dim_mask: jax.Array
    candidates: jax.Array
    init: Any
    init_inv_hessian: jax.Array
    fraction: float
    min_points: int
    beta_t: str
    options: regret.FitOptions
    numbers: tuple[int, ...]
    encoding: _space.Encoding
    best_number: int
    best_value: float
    folds: list[float] | None
    num_complete: int


class TerminatorRecord(NamedTuple):
    """One decision of :class:`RegretBoundTerminator` (for logs and plots).

    Attributes:
        n_trials: Number of trials in the fit data (COMPLETE, plus PRUNED when included).
        bound: The regret bound, Eq. (8), in the objective's units (``inf`` when not ``ok``).
        threshold: The threshold: Eq. (10) from the incumbent's folds, or the fixed one.
        terminate: ``n_complete >= min_n_trials and ok and bound < threshold``.
        ok: The bound's status (:attr:`jaxstop.regret.FittedBound.ok`).
        reason: Its :class:`jaxstop.Reason` code.
        best_number: The incumbent's trial number.
        best_value: Its value.
        num_complete: Number of COMPLETE trials.
    """

    n_trials: int
    bound: float
    threshold: float
    terminate: bool
    ok: bool
    reason: int
    best_number: int
    best_value: float
    num_complete: int


# Eq. (10) as one compiled program (eagerly it would be a dozen small ones, each traced and
# loaded once per process: time a new process spends before its first decision).
_cv_threshold = jax.jit(regret.cv_threshold, static_argnames=("ddof",))


def check_single_objective(study: optuna.Study) -> None:
    """Raises ValueError naming ``study`` when it has several objectives."""
    if len(study.directions) != 1:
        raise ValueError(f"study {study.study_name!r} has {len(study.directions)} objectives; the regret-bound "
                         "terminator needs a single-objective study")


#: The settings of :class:`RegretBoundTerminator` (its keyword arguments and attributes).
SETTINGS = ("min_n_trials", "threshold", "top_trials_ratio", "min_top_trials", "beta_t", "ddof", "candidates",
            "include_pruned", "warm_start", "seed", "options", "min_capacity")


class RegretBoundTerminator(PicklableLock):
    """Stops an Optuna study when its regret bound falls below the statistical error.

    The study stops at the first call with at least ``min_n_trials`` COMPLETE trials where
    the bound on the incumbent's simple regret (Eq. 8 of Makarova et al., 2022, fitted on the
    top ``max(min_top_trials, floor(top_trials_ratio * n))`` trials) is below the threshold:
    ``sqrt((1/k + 1/(k - 1)) s^2)`` of the incumbent's k fold scores (Eq. 10), or the fixed
    ``threshold``. Defaults follow ``optuna.terminator`` (``beta_t="fitted"``, ``ddof=0``,
    20 trials, half of them in the fit, 2048 candidates); ``beta_t="evaluations"`` and
    ``ddof=1`` give the paper's convention. The GP is the paper's (a fitted constant mean,
    the LCB's minimum refined by gradient steps), whose bound is often smaller than
    Optuna's; ``options=regret.FitOptions(fit_mean=False, refine_steps=0)`` is the GP of
    Optuna's ``RegretBoundEvaluator`` (docs/optuna.md, "From optuna.terminator").

    The object keeps a warm start (the last fit's GP parameters and curvature) and its
    decisions (:attr:`last`, :attr:`history`); everything else is read from the study on
    each call. Calls are serialised by a lock (``study.optimize(n_jobs=...)`` runs callbacks
    on several threads).

    Args:
        min_n_trials: COMPLETE trials before the first decision (before: ``False``,
            nothing computed).
        threshold: None: Eq. (10) from the incumbent's fold scores
            (:func:`report_cross_validation_scores`; an incumbent without them raises).
            A number >= 0: that fixed threshold, for objectives without folds.
        top_trials_ratio: Fraction of the trials in the GP fit.
        min_top_trials: Minimum number of trials in the GP fit.
        beta_t: ``"fitted"`` (t of beta = fitted trials, Optuna) or ``"evaluations"``
            (all trials, the paper).
        ddof: Of the fold variance: 0 (Optuna, the authors' code) or 1 (the paper).
        candidates: Random valid configurations for the LCB's domain minimum.
        include_pruned: Also fit PRUNED trials, at their last intermediate value (a
            non-finite one leaves the trial out).
        warm_start: Start each fit from the previous one (faster); False makes every
            decision a function of the study's trials alone.
        seed: Seeds the candidates (``numpy`` generator of ``seed``, one draw per layout
            of the encoding, mapped to the trials' presence patterns at each decision)
            and the key.
        options: :class:`jaxstop.regret.FitOptions` of the fit; its ``beta_size`` defaults
            to the number of hyperparameters.
        min_capacity: Smallest row capacity (rows double from there).

    Raises:
        ValueError: Bad settings (naming them).

    Example:
        >>> import optuna
        >>> from jaxstop.integrations.optuna import RegretBoundTerminator
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        >>> study.optimize(lambda t: t.suggest_float("x", -1, 1) ** 2, n_trials=5)
        >>> RegretBoundTerminator(threshold=0.1).should_terminate(study)   # < 20 trials
        False
    """

    _LOCK = staticmethod(threading.RLock)

    def __init__(
        self,
        *,
        min_n_trials: int = 20,
        threshold: float | None = None,
        top_trials_ratio: float = 0.5,
        min_top_trials: int = 20,
        beta_t: str = "fitted",
        ddof: int = 0,
        candidates: int = 2048,
        include_pruned: bool = False,
        warm_start: bool = True,
        seed: int = 0,
        options: regret.FitOptions | None = None,
        min_capacity: int = 32,
    ) -> None:
        self.min_n_trials = checks.positive_int(min_n_trials, "min_n_trials")
        if threshold is not None and not (isinstance(threshold, numbers.Real) and not isinstance(threshold, bool)
                                          and math.isfinite(threshold) and threshold >= 0):
            raise ValueError(f"threshold must be None or a finite number >= 0, got {threshold!r}")
        self.threshold = None if threshold is None else float(threshold)
        if not (isinstance(top_trials_ratio, numbers.Real) and not isinstance(top_trials_ratio, bool)
                and 0 < top_trials_ratio <= 1):
            raise ValueError(f"top_trials_ratio must be in (0, 1], got {top_trials_ratio!r}")
        self.top_trials_ratio = float(top_trials_ratio)
        self.min_top_trials = checks.positive_int(min_top_trials, "min_top_trials")
        if beta_t not in termination.BETA_T:
            raise ValueError(f"beta_t must be one of {termination.BETA_T}, got {beta_t!r}")
        self.beta_t = beta_t
        if isinstance(ddof, bool) or ddof not in (0, 1):
            raise ValueError(f"ddof must be 0 or 1, got {ddof!r}")
        self.ddof = int(ddof)
        self.candidates = checks.positive_int(candidates, "candidates")
        self.include_pruned = checks.boolean(include_pruned, "include_pruned")
        self.warm_start = checks.boolean(warm_start, "warm_start")
        self.seed = checks.positive_int(seed, "seed", 0)
        if options is not None and not isinstance(options, regret.FitOptions):
            raise TypeError(f"options must be a jaxstop.regret.FitOptions, got {type(options).__name__}")
        self.options = options or regret.FitOptions()
        # the two settings the terminator reads itself (its fit's start), checked here; the
        # fit checks the others on the first decision
        if self.options.prior not in gp_priors.PRIORS:
            raise ValueError(f"options.prior must be one of {gp_priors.PRIORS}, got {self.options.prior!r}")
        if not isinstance(self.options.warping, (bool, np.bool_)):
            raise TypeError(f"options.warping must be a bool, got {self.options.warping!r}")
        self.min_capacity = checks.positive_int(min_capacity, "min_capacity")
        self.last: TerminatorRecord | None = None
        self.history: list[TerminatorRecord] = []
        self._warm: tuple[Any, Any, Any] | None = None  # (layout, params, inv_hessian)
        self._lock = threading.RLock()
        self._encoder = _space.IncrementalEncoder()  # each finished trial parsed once
        self._draws = None  # (layout, candidate draws): drawn once per layout
        self._cand = None   # (presence frequencies, candidates on the device)
        self._threshold = None  # (incumbent's folds, ddof), Eq. (10)

    def fresh(self) -> "RegretBoundTerminator":
        """A new terminator with the same settings, no warm start and no history."""
        return RegretBoundTerminator(**{name: getattr(self, name) for name in SETTINGS})

    # -- data ---------------------------------------------------------------------------

    def _trials(self, study: optuna.Study) -> list[FrozenTrial]:
        states = (TrialState.COMPLETE, TrialState.PRUNED) if self.include_pruned else (TrialState.COMPLETE,)
        return study.get_trials(deepcopy=False, states=states)

    def _usable(self, study_name: str, trials: Sequence[FrozenTrial]) -> tuple[list[FrozenTrial], np.ndarray]:
        """The trials that have a value, in number order, and those values."""
        rows, values = [], []
        for t in sorted(trials, key=lambda t: t.number):
            if t.state == TrialState.COMPLETE:
                v = t.value
            elif t.state == TrialState.PRUNED and self.include_pruned and t.intermediate_values:
                v = t.intermediate_values[max(t.intermediate_values)]
                if not math.isfinite(v):  # a run that diverged (pruned on NaN) offers no value
                    continue
            else:
                continue
            rows.append(t)
            values.append(float(v))
        values = np.asarray(values, float)
        bad = [t.number for t, v in zip(rows, values) if not math.isfinite(v)]
        if bad:
            raise ValueError(f"study {study_name!r}: trial(s) {bad[:10]} have non-finite objective values "
                             f"{[float(values[i]) for i, t in enumerate(rows) if t.number in bad[:10]]}; "
                             "the regret bound needs finite values (return a finite value or let the trial fail)")
        return rows, values

    def inputs(self, study: optuna.Study, trials: Sequence[FrozenTrial] | None = None) -> FitInputs:
        """The encoded data and settings of the next fit (see :class:`FitInputs`).

        Args:
            study: The study (its direction and name; its trials unless given).
            trials: Use these trials instead of the study's (e.g. a prefix, for a plot).

        Raises:
            ValueError: A multi-objective study, no COMPLETE trial, a non-finite value, a
                value beyond the range of JAX's float dtype (float32 unless ``jax_enable_x64``
                is set), or (with ``threshold=None``) an incumbent without fold scores; each names
                the study.
        """
        check_single_objective(study)
        name = study.study_name
        rows, values = self._usable(name, self._trials(study) if trials is None else trials)
        complete = [i for i, t in enumerate(rows) if t.state == TrialState.COMPLETE]
        if not complete:
            raise ValueError(f"study {name!r} has no COMPLETE trial: the regret bound needs evaluated trials")
        sign = -1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
        y = sign * values
        best = min(complete, key=lambda i: (y[i], rows[i].number))
        folds = fold_scores(rows[best])
        if self.threshold is None and folds is None:
            raise ValueError(f"study {name!r}: the incumbent, trial {rows[best].number}, has no cross-validation "
                             "scores; call report_cross_validation_scores(trial, scores) in the objective, or "
                             "pass a fixed threshold= to the terminator")
        if self.threshold is None and (len(folds) < 2 or not all(math.isfinite(v) for v in folds)):
            raise ValueError(f"study {name!r}: the cross-validation scores of the incumbent, trial "
                             f"{rows[best].number}, must be at least 2 finite numbers, got {folds}")
        with self._lock:
            enc = self._encoder(rows)
        n, d = enc.X.shape
        if d == 0:
            raise ValueError(f"study {name!r} has no parameters: the regret bound needs a search space")
        dt = jnp.result_type(float)
        over = beyond_range(values, dt)
        if over.any():
            raise ValueError(f"study {name!r}: trial(s) {[t.number for t, o in zip(rows, over) if o][:10]} have "
                             f"objective values beyond the range of {np.dtype(dt).name}, JAX's float dtype here "
                             f"(|value| <= {float(np.finfo(dt).max):.4g}), e.g. {float(values[over][0])}; rescale "
                             "the objective or enable float64 (jax.config.update('jax_enable_x64', True))")
        n_cap = _space.capacity(n, self.min_capacity)
        d_cap = _space.capacity(d, 4)
        X = np.zeros((n_cap, d_cap))
        X[:n, :d] = enc.X
        yp = np.zeros(n_cap)
        yp[:n] = y - y[best]  # the differences, exact in float64, survive the cast below
        dim_mask = np.arange(d_cap) < d
        init, init_h = self._warm_start(enc.columns, d_cap, dim_mask, dt)
        opts = self.options
        if opts.beta_size is None:
            opts = opts._replace(beta_size=float(enc.num_params))
        # the arrays built in NumPy, moved to the device in one call
        np_dt = np.dtype(dt)
        with self._lock:
            candd = self._candidates(enc, d_cap, np_dt)
        Xd, yd, maskd, dimd = jax.device_put((X.astype(np_dt), yp.astype(np_dt), np.arange(n_cap) < n, dim_mask))
        return FitInputs(
            key=jax.random.wrap_key_data(np.asarray([self.seed % 2**32, n], np.uint32)), X=Xd, y=yd,
            mask=maskd, dim_mask=dimd, candidates=candd, init=init, init_inv_hessian=init_h,
            fraction=self.top_trials_ratio, min_points=self.min_top_trials, beta_t=self.beta_t, options=opts,
            numbers=tuple(t.number for t in rows), encoding=enc, best_number=rows[best].number,
            best_value=float(values[best]), folds=folds, num_complete=len(complete))

    def _candidates(self, enc: _space.Encoding, d_cap: int, dtype) -> jax.Array:
        """The LCB's candidates for ``enc``, shape (candidates, d_cap), on the device.

        The configurations are drawn once per layout (:func:`._space.candidate_draws` with
        the generator ``numpy.random.default_rng(seed)``); a decision only maps them to the
        trials' presence patterns (:meth:`._space.CandidateDraws.apply`), and reuses the
        array on the device while the patterns' frequencies are unchanged (always, in a
        space without conditional parameters)."""
        layout = (tuple(enc.space.items()), enc.columns, enc.conditional, d_cap, np.dtype(dtype).name)
        if self._draws is None or self._draws[0] != layout:
            draws = _space.candidate_draws(np.random.default_rng(self.seed), enc.space, enc.columns, self.candidates,
                                           enc.conditional)
            self._draws, self._cand = (layout, draws), None
        cum = np.cumsum(enc.pattern_counts) / np.sum(enc.pattern_counts)
        which = (enc.patterns.tobytes(), enc.patterns.shape, cum.tobytes())
        if self._cand is None or self._cand[0] != which:
            cand = np.zeros((self.candidates, d_cap), dtype)
            cand[:, : len(enc.columns)] = self._draws[1].apply(enc.patterns, enc.pattern_counts)
            self._cand = (which, jax.device_put(cand))
        return self._cand[1]

    def _warm_start(self, columns, d_cap: int, dim_mask, dt):
        """The previous fit's parameters when the layout is unchanged; else the default
        start (lengthscales of columns kept by name) and no curvature."""
        if self.warm_start and self._warm is not None and self._warm[0] == (columns, d_cap):
            return self._warm[1], self._warm[2]
        # the start and curvature of options' GP (its prior's start; with a warping, its
        # parameters and the larger curvature of gp_fit.raw_size)
        warping, prior = bool(self.options.warping), self.options.prior
        start = termination.default_params(d_cap, jnp.asarray(dim_mask), dt, warping, prior)
        r = gp_fit.raw_size(d_cap, warping)
        none = jnp.zeros((r, r), dt)
        if not self.warm_start or self._warm is None:
            return start, none
        (old_cols, _), params, _ = self._warm
        old = {c: i for i, c in enumerate(old_cols)}
        fields = ("log_lengthscales", "log_warp_a", "log_warp_b") if warping else ("log_lengthscales",)
        per_column = {}
        for field in fields:
            values = np.asarray(getattr(start, field)).copy()
            for j, c in enumerate(columns):
                if c in old:
                    values[j] = float(getattr(params, field)[old[c]])
            per_column[field] = jnp.asarray(values, dt)
        return params._replace(**per_column), none

    # -- decisions ----------------------------------------------------------------------

    def evaluate(self, study: optuna.Study, trials: Sequence[FrozenTrial] | None = None) -> TerminatorRecord:
        """The bound, the threshold and the decision now, whatever the number of trials.

        Args:
            study: The study.
            trials: Use these trials instead of the study's.

        Returns:
            A :class:`TerminatorRecord` (also stored as :attr:`last` and in :attr:`history`).

        Raises:
            ValueError: As :meth:`inputs`.
        """
        with self._lock:
            i = self.inputs(study, trials)
            fb = regret.fit_regret_bound(i.key, i.X, i.y, i.mask, init=i.init, init_inv_hessian=i.init_inv_hessian,
                                         dim_mask=i.dim_mask, candidates=i.candidates, fraction=i.fraction,
                                         min_points=i.min_points, beta_t=i.beta_t, options=i.options)
            ok = bool(fb.ok)
            if ok and self.warm_start:
                self._warm = ((i.encoding.columns, i.X.shape[1]), fb.params, fb.inv_hessian)
            if self.threshold is not None:
                thr = self.threshold
            else:  # Eq. (10) of the incumbent's folds, computed again only when they change
                folds = (tuple(i.folds), self.ddof)
                if self._threshold is None or self._threshold[0] != folds:
                    # centred in float64: the spread of folds near 1e8 survives a float32 cast
                    centred = np.asarray(i.folds, np.float64) - np.mean(i.folds)
                    self._threshold = (folds, float(_cv_threshold(centred, ddof=self.ddof)))
                thr = self._threshold[1]
            bound = float(fb.bound.bound)
            record = TerminatorRecord(
                n_trials=len(i.numbers), bound=bound, threshold=thr,
                terminate=bool(i.num_complete >= self.min_n_trials and ok and bound < thr), ok=ok,
                reason=int(fb.reason), best_number=i.best_number, best_value=i.best_value,
                num_complete=i.num_complete)
            self.last = record
            self.history.append(record)
            return record

    def should_terminate(self, study: optuna.Study) -> bool:
        """Whether to stop ``study`` now (for ask/tell loops).

        ``False`` while the study has fewer than ``min_n_trials`` COMPLETE trials (nothing is
        computed); then :meth:`evaluate`'s decision.

        Raises:
            ValueError: A multi-objective study (always), and as :meth:`inputs` once there
                are enough trials.
        """
        check_single_objective(study)
        if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))) < self.min_n_trials:
            return False
        return self.evaluate(study).terminate


class TerminatorCallback:
    """Stops ``study.optimize`` when :class:`RegretBoundTerminator` says so.

    Used like ``optuna.terminator.TerminatorCallback``: replacing the import is the whole
    migration. Each call reads the study (not only the trial just finished), so the
    callback may run in several processes sharing one storage. The stop is logged at INFO
    through Optuna's logger (``optuna.logging.set_verbosity`` silences it).

    Args:
        terminator: The terminator; default ``RegretBoundTerminator(**kwargs)``.
        **kwargs: Settings of a new :class:`RegretBoundTerminator` (only without ``terminator``).

    Example:
        >>> import optuna
        >>> from jaxstop.integrations.optuna import TerminatorCallback, report_cross_validation_scores
        >>> optuna.logging.set_verbosity(optuna.logging.WARNING)
        >>> def objective(trial):
        ...     x = trial.suggest_float("x", -1, 1)
        ...     folds = [x ** 2 + 0.1 * k for k in range(5)]
        ...     report_cross_validation_scores(trial, folds)
        ...     return sum(folds) / 5
        >>> study = optuna.create_study()
        >>> study.optimize(objective, n_trials=5, callbacks=[TerminatorCallback()])
        >>> len(study.trials)             # fewer than min_n_trials = 20: never stops
        5
    """

    def __init__(self, terminator: RegretBoundTerminator | None = None, **kwargs) -> None:
        if terminator is not None and kwargs:
            raise ValueError(f"pass either terminator or settings of a new one, not both (got {sorted(kwargs)})")
        if terminator is not None and not callable(getattr(terminator, "should_terminate", None)):
            raise TypeError(f"terminator must have a should_terminate(study) method (a RegretBoundTerminator), "
                            f"got {type(terminator).__name__}")
        self.terminator = terminator if terminator is not None else RegretBoundTerminator(**kwargs)

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self.terminator.should_terminate(study):
            # under Optuna's root logger, so the line shows (and is silenced) with Optuna's own
            _LOGGER.info(f"Study {study.study_name!r} stopped by the regret-bound terminator after trial "
                         f"{trial.number}.")
            study.stop()
