"""Automatic termination of hyperparameter optimisation (Makarova et al., 2022).

Stop a hyperparameter search when the plausible improvement left is smaller than the
statistical error of the objective. Two ingredients, both from Makarova et al. (2022),
*Automatic Termination for Hyperparameter Optimization* (AutoML):

* an upper bound on the simple regret of the incumbent from GP confidence bounds,
  Eq. (8): ``rbar_t = min_{x in G_t} ucb_t(x) - min_{x in Gamma} lcb_t(x)``, with
  ``ucb/lcb = mu -+ sqrt(beta_t) sigma`` (:func:`beta`, :func:`confidence_bounds`,
  :func:`regret_bound`, :func:`fit_regret_bound`);
* a threshold from the variance of the incumbent's k-fold cross-validation scores,
  Eq. (9)-(10) (Nadeau and Bengio, 2003): ``sqrt((1/k + n_test/n_train) s_cv^2)``
  (:func:`cv_threshold`).

The search stops at the first iteration ``t >= 20`` with ``rbar_t < threshold``. The
module also has the paper's baselines (convergence Conv-i, EI and PI below a threshold),
its metrics RYC and RTC, and :func:`replay`, which recomputes bound, threshold and every
rule's stopping iteration along a recorded trace in one jitted scan -- the way the paper
evaluates.

Conventions differ between the paper, the authors' released code and Optuna's
``RegretBoundEvaluator``; each difference is a parameter here (presets in
:data:`CONVENTIONS`, which cites the line of the paper or code behind every value):

* ``t`` of beta: number of evaluations (paper) or of fitted points (code, Optuna);
  ``|Gamma|``: number of hyperparameters = dimension in all three.
* variance of the folds: ``s^2`` with ``1/k`` in all three (Algorithm 1, line 11;
  ``np.std`` / ``np.var`` in the code and Optuna); ``ddof=1`` is an option.
* threshold: the incumbent's at every iteration (paper, Optuna) or frozen at
  iteration 20 (code); among tied values the newest evaluation is the incumbent in the
  paper (Algorithm 1, line 9), the first in the code and Optuna.
* the ``Ours_0.5`` rule: ``sqrt(0.5 s^2)`` in the paper's text (Sec. 4.1), ``0.5 / 0.21``
  times Eq. (9)'s standard deviation in the code (1.54x larger for k = 10).
* EI / PI baselines: the BO's own GP, fitted on every evaluation (paper, App. A.1.1), or
  the values the authors' BO logged (code).
* domain minimum of the LCB: random points and the fitted points (code: 2,000
  random, the same at every iteration; Optuna: 2,048 Sobol, new at every call), here optionally
  refined by gradient steps.
* the GP fit of each row: jaxstop's (Optuna's priors, warm-started along the trace; paper
  and Optuna conventions) or the code's (AutoGluon 0.1's priors, every iteration afresh
  with 5 starts, the amplitude fitted jointly and the noise variance floored at 1e-9).
* iteration ``t`` of a replayed trace: after ``t + 1`` evaluations, or after ``t``
  (code: the last evaluation is never used).
* the top set's minimum of 20 points (``min_points``) comes from the code and Optuna;
  the paper says only "the top 50%".
* the GP: the plain Matérn-5/2 GP (the paper's Sec. 3; Optuna's GP has no warping) in
  every convention, or with a Kumaraswamy input warping (``warping=True``; App. A.1.1
  lists "2 input warping parameters" in the authors' GP, but their released code fits its
  bound without one, and this warping reproduces their recorded bound and Table 3 less well
  than none: see :data:`CONVENTIONS`).

API conventions (shared with :mod:`jaxstop.gp` and :mod:`jaxstop.confidence`):

* PRNG keys: a function that needs randomness takes ``key`` as its first positional
  argument (:func:`fit_regret_bound`, :func:`replay`); where randomness is optional
  (:func:`regret_bound`'s random candidates) ``key=`` is a keyword argument.
* ``mask`` is the one name for "which rows are real" (``fold_mask`` and ``dim_mask``
  mark real fold scores and real input dimensions).
* A result that can fail has a boolean ``ok`` field and an int32 ``reason``
  (:class:`jaxstop.Reason`): :class:`RegretBound`, :class:`ReplayResult` (per row); a
  :class:`FittedBound`'s status is ``bound.ok`` / ``bound.reason`` (also its properties
  ``ok`` / ``reason``). ``ok`` is True only when every field is finite and computed from
  valid inputs: a bound beyond the dtype's range in the units of ``y`` is
  ``Reason.UNREPRESENTABLE``, never ``ok`` with ``inf`` inside.
* Non-finite values: with concrete inputs a NaN / inf where a value is required raises
  ``ValueError`` naming the argument (``t``, ``best``, ``y``, ``fold_scores``, ...); inside
  ``jit`` / ``vmap`` it becomes status (``ok`` False, ``Reason.BAD_INPUT``) or, for the
  functions that return bare arrays (:func:`beta`, :func:`confidence_bounds`,
  :func:`expected_improvement`, :func:`probability_of_improvement`,
  :func:`cv_threshold`), NaN where the value is undefined: no number that looks valid.
  Padded rows (``mask`` False) are inert whatever they hold. float16 / bfloat16 inputs
  raise ``TypeError`` naming the argument.
* Settings beyond the few that matter travel in one options NamedTuple with defaults:
  ``fit_regret_bound(..., options=FitOptions(...))``, ``replay(..., options=ReplayOptions(...))``.

GP surrogate: :mod:`jaxstop.gp` (Matern-5/2 ARD, ML-II with weak priors; optionally
with an input warping, ``FitOptions.warping`` / ``ReplayOptions.warping``), fitted on
the top ``max(min_points, floor(fraction * n))`` evaluations (:func:`top_mask`) with
standardised values; bounds are computed on the latent function. :func:`regret_bound`
takes inputs (``X_eval``, candidates), not a warped posterior's ``post.X``.

Files: ``_bound.py`` (:func:`beta`, :func:`confidence_bounds`, :func:`regret_bound`),
``_acquisition.py`` (EI and PI), ``_top.py`` (:func:`top_mask`), ``_threshold.py``
(:func:`cv_threshold`), ``_fit.py`` (:func:`fit_regret_bound`), ``_rules.py`` (the
stopping rules, RYC and RTC), ``_replay.py`` (:func:`replay`), ``_conventions.py``
(:data:`CONVENTIONS`),
``_options.py`` (:class:`FitOptions`, :class:`ReplayOptions`), ``_args.py`` (shared
argument checks). They validate arguments; the computations they
share with :mod:`jaxstop.policies.auto_termination` live in
:mod:`jaxstop._src.regret_bound` (Eq. 8) and :mod:`jaxstop._src.termination` (top set,
fit and bound of one study).
"""

from jaxstop._src.regret_bound import RegretBound as RegretBound
from jaxstop._src.termination import FittedBound as FittedBound
from jaxstop.regret._rules import Stops as Stops
from jaxstop.regret._replay import ReplayResult as ReplayResult
from jaxstop.regret._conventions import CONVENTIONS as CONVENTIONS
from jaxstop.regret._options import FitOptions as FitOptions
from jaxstop.regret._options import ReplayOptions as ReplayOptions
from jaxstop.regret._bound import beta as beta
from jaxstop.regret._bound import confidence_bounds as confidence_bounds
from jaxstop.regret._bound import regret_bound as regret_bound
from jaxstop.regret._fit import fit_regret_bound as fit_regret_bound
from jaxstop.regret._top import top_mask as top_mask
from jaxstop.regret._threshold import cv_threshold as cv_threshold
from jaxstop.regret._acquisition import expected_improvement as expected_improvement
from jaxstop.regret._acquisition import probability_of_improvement as probability_of_improvement
from jaxstop.regret._rules import convergence_stop as convergence_stop
from jaxstop.regret._rules import stop_iterations as stop_iterations
from jaxstop.regret._rules import ryc as ryc
from jaxstop.regret._rules import rtc as rtc
from jaxstop.regret._replay import replay as replay

__all__ = [
    "RegretBound",
    "FittedBound",
    "Stops",
    "ReplayResult",
    "CONVENTIONS",
    "FitOptions",
    "ReplayOptions",
    "beta",
    "confidence_bounds",
    "regret_bound",
    "fit_regret_bound",
    "top_mask",
    "cv_threshold",
    "expected_improvement",
    "probability_of_improvement",
    "convergence_stop",
    "stop_iterations",
    "ryc",
    "rtc",
    "replay",
]
