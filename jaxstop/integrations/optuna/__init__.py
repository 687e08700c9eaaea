"""jaxstop inside Optuna (extra ``optuna``, Optuna >= 4.0): a terminator and two pruners.

Used like ``optuna.terminator``; replacing the import is the whole migration::

    from jaxstop.integrations.optuna import TerminatorCallback, report_cross_validation_scores

    def objective(trial):
        ...
        report_cross_validation_scores(trial, scores)      # the k fold scores
        return sum(scores) / len(scores)

    study.optimize(objective, n_trials=200, callbacks=[TerminatorCallback()])

* :class:`TerminatorCallback`: stops ``study.optimize``; :class:`RegretBoundTerminator`:
  ``should_terminate(study)`` for ask/tell loops, and the settings (threshold, beta
  convention, which trials, warm start).
* :func:`report_cross_validation_scores`: stores the folds (user attribute
  :data:`CV_SCORES_KEY`).
* :func:`plot_terminator_improvement`: the bound and the threshold per trial.
* :class:`BOSPruner`: BO-BOS's per-trial stopping (Dai et al., 2019) on
  ``trial.report`` / ``trial.should_prune``: after ``n_startup_steps`` the BOS problem
  is solved once for the trial against the study's incumbent, then decided each step.
* :class:`UQSuccessiveHalvingPruner`: asynchronous successive halving whose rungs keep
  the trials the UQ rule of Liu et al. (2024) keeps (``uq=False``: the plain top
  ``1/eta``, equal to Optuna's ``SuccessiveHalvingPruner``).
* :func:`enable_compilation_cache`: JAX's persistent compilation cache, so a new process
  reaches its first decision without compiling.
* :func:`encode` / :func:`search_space`: the unit-cube encoding of a search space (floats
  and ints, linear or log, with steps; categoricals one-hot; conditional parameters with a
  presence column).

The method is Makarova et al. (2022), *Automatic Termination for Hyperparameter
Optimization*: the bound of Eq. (8) from :func:`jaxstop.regret.fit_regret_bound`, the
threshold of Eq. (10) from :func:`jaxstop.regret.cv_threshold`.
"""

try:
    import optuna as _optuna  # noqa: F401
except ImportError as err:  # pragma: no cover - depends on the environment
    raise ImportError("jaxstop.integrations.optuna needs Optuna >= 4.0: pip install 'jaxstop[optuna]'") from err

from jaxstop.integrations.optuna._bos_pruner import BOSPruner as BOSPruner
from jaxstop.integrations.optuna._bos_pruner import BOSTrialRecord as BOSTrialRecord
from jaxstop.integrations.optuna._cache import enable_compilation_cache as enable_compilation_cache
from jaxstop.integrations.optuna._plot import plot_terminator_improvement as plot_terminator_improvement
from jaxstop.integrations.optuna._plot import terminator_improvement as terminator_improvement
from jaxstop.integrations.optuna._space import Encoding as Encoding
from jaxstop.integrations.optuna._space import encode as encode
from jaxstop.integrations.optuna._space import search_space as search_space
from jaxstop.integrations.optuna._terminator import CV_SCORES_KEY as CV_SCORES_KEY
from jaxstop.integrations.optuna._terminator import FitInputs as FitInputs
from jaxstop.integrations.optuna._terminator import RegretBoundTerminator as RegretBoundTerminator
from jaxstop.integrations.optuna._terminator import TerminatorCallback as TerminatorCallback
from jaxstop.integrations.optuna._terminator import TerminatorRecord as TerminatorRecord
from jaxstop.integrations.optuna._terminator import report_cross_validation_scores as report_cross_validation_scores
from jaxstop.integrations.optuna._uq_pruner import RungDecision as RungDecision
from jaxstop.integrations.optuna._uq_pruner import UQSuccessiveHalvingPruner as UQSuccessiveHalvingPruner

__all__ = [
    "BOSPruner",
    "BOSTrialRecord",
    "CV_SCORES_KEY",
    "Encoding",
    "FitInputs",
    "RegretBoundTerminator",
    "RungDecision",
    "TerminatorCallback",
    "TerminatorRecord",
    "UQSuccessiveHalvingPruner",
    "encode",
    "enable_compilation_cache",
    "plot_terminator_improvement",
    "report_cross_validation_scores",
    "search_space",
    "terminator_improvement",
]
