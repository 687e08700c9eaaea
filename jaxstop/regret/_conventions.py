"""The presets of :func:`jaxstop.regret.replay` (:data:`CONVENTIONS`) and how
:class:`~jaxstop.regret.ReplayOptions` takes them (:func:`with_convention`)."""

from __future__ import annotations

from jaxstop.regret._rules import DEFAULT_SCALES

#: jaxstop's own fit of every row (warm-started along the trace, the amplitude and the mean
#: profiled out, Optuna's priors): the fit fields of the "paper" and "optuna" presets.
JAXSTOP_FIT = dict(prior="optuna", warm_start=True, num_starts=1, joint=False, min_noise=1e-6, first_fit_steps=None,
                   fit_tol=1e-2)

CONVENTIONS = {
    "paper": dict(lag=0, beta_t="evaluations", ddof=0, fixed_threshold=False, ties="last", candidates=512,
                  refine_steps=10, fit_mean=True, conv_rtol=0.0, ours_scales=(1.0,), ours_variances=(0.5,),
                  acq_gp="all", warping=False, redraw=True, **JAXSTOP_FIT),
    "authors": dict(lag=1, beta_t="fitted", ddof=0, fixed_threshold=True, ties="first", candidates=2000,
                    refine_steps=0, fit_mean=True, conv_rtol=1e-12, ours_scales=DEFAULT_SCALES, ours_variances=(),
                    acq_gp="all", warping=False, redraw=False, prior="autogluon", warm_start=False, num_starts=5,
                    joint=True, min_noise=1e-9, first_fit_steps=60, fit_tol=1e-3),
    "optuna": dict(lag=0, beta_t="fitted", ddof=0, fixed_threshold=False, ties="first", candidates=2048,
                   refine_steps=0, fit_mean=False, conv_rtol=0.0, ours_scales=(1.0,), ours_variances=(),
                   acq_gp="all", warping=False, redraw=True, **JAXSTOP_FIT),
}
"""Presets of :func:`replay`; each key is a field of :class:`ReplayOptions`, whose values
other than None override the preset.

Sources: the paper is Makarova et al. (2022), *Automatic Termination for Hyperparameter
Optimization* (Algorithm 1 in App. A.1.2); "the authors' code" is
amazon-research/bo-early-stopping (``bin/start_gap_estimation.py``, ``src/stop_methods.py``,
``src/enhanced_gp.py``, ``src/constant.py``), the code behind Table 3; "Optuna" is
Optuna 5.0's ``optuna/terminator`` (``improvement/evaluator.py``: ``RegretBoundEvaluator``,
``erroreval.py``: ``CrossValidationErrorEvaluator``, ``terminator.py``: ``Terminator``).

``"paper"``: the paper as written.

* ``lag=0``: row ``t`` after ``t + 1`` evaluations: Algorithm 1, lines 14-17 (round
  ``t`` adds ``gamma_t`` to ``G_t`` before it computes the bound).
* ``beta_t="evaluations"``: App. A.2.3, ``beta_t = 2 log(|Gamma| t^2 pi^2 / (6 delta))``
  with ``t`` the iteration (the number of evaluations), ``delta = 0.1``, ``|Gamma|`` the
  number of hyperparameters, scaled down by 5 (``ReplayOptions.delta``, ``beta_scale``,
  ``beta_size``, the same in every convention).
* ``ddof=0``: ``s_cv^2 = (1/k) sum_i (y_t - y_t^i)^2``, Algorithm 1, line 11.
* ``fixed_threshold=False``: the variance is recomputed whenever the incumbent changes,
  Algorithm 1, lines 9-12, and compared at every round, line 17 / Eq. (10).
* ``ties="last"``: Algorithm 1, line 9 (``y_t <= y_t^*``): a value equal to the
  incumbent's makes the newer evaluation the incumbent (its folds give the threshold).
* ``candidates=512``, ``refine_steps=10``: the minimum of the LCB over ``Gamma`` in
  Eq. (8) (Algorithm 1, line 16). The paper does not say how it is found; here over 512
  random points plus the fitted points, refined by 10 gradient steps from the best 8 (a
  random grid alone overestimates the minimum, which shrinks the bound).
* ``fit_mean=True``: App. A.1.1 (the GP's hyperparameters include "a scalar mean value").
* ``conv_rtol=0.0``: Sec. 4, Baselines (Conv-i: the best value "remains unchanged").
* ``ours_scales=(1.0,)``, ``ours_variances=(0.5,)``: Sec. 4.1, Methods setup, and
  Table 3: ``Ours_0.21`` is Eq. (9), ``sqrt((1/k + 1/(k-1)) s^2)`` (0.21 s^2 for k = 10),
  ``Ours_0.5`` the "empirical scaling 0.5 s_cv^2", ``sqrt(0.5 s^2)``, i.e. Eq. (9)'s
  threshold times ``sqrt(0.5 / (1/k + 1/(k-1)))`` (1.54 for k = 10). ``Stops.ours`` is
  ``[Ours_0.21, Ours_0.5]``.
* ``acq_gp="all"``: the EI / PI baselines of Sec. 4 (Nguyen et al., 2017; Lorenz et al.,
  2016: stop once the BO's acquisition value falls below a threshold) on the BO's own GP,
  fitted on every evaluation so far (App. A.1.1: the BO used EI with its GP), not on the
  bound's top half.
* ``warping=False``: the paper's text specifies no model beyond App. A.1.1's list of
  hyperparameters; it describes the GP of its own (internal) experiments, naming GPyOpt's
  input-warped GP and AutoGluon's BayesOpt searcher only as "the closest open-source
  implementations", and Eq. (8) needs only a GP posterior. The plain Matérn-5/2 ARD GP is
  the model of Sec. 3 as written; ``warping=True`` gives App. A.1.1's model (the
  ``"authors"`` preset).
* ``redraw=True``: the paper does not say how the candidates are drawn; new ones at every
  row.
* ``prior="optuna"``, ``warm_start=True``, ``num_starts=1``, ``joint=False``,
  ``min_noise=1e-6``, ``first_fit_steps=None``, ``fit_tol=1e-2``: the
  paper gives no hyperparameter priors and no fitting procedure (App. A.1.1 lists the
  hyperparameters only), so the rows are fitted by jaxstop's replay: Optuna's priors
  (Gamma(2, 1) on the amplitude, Gamma(1.1, 30) on the noise, a penalty on extreme
  lengthscales; jaxstop's default everywhere), each row warm-started from the row before
  (30 quasi-Newton steps for the first row, 6 for the others, to a gradient of 1e-2), the
  amplitude and the mean profiled out, the noise-to-amplitude ratio at least 1e-6.

``"authors"``: the authors' released code.

* ``lag=1``: row ``i`` after ``i`` evaluations: ``bin/start_gap_estimation.py``, lines 73-75
  (``evaluations[:i]``; the last evaluation is never used).
* ``beta_t="fitted"``: ``src/enhanced_gp.py``, lines 92 and 122 (``t`` = the number of
  fitted points, ``|Gamma|`` = the dimension, ``delta = 0.1`` from line 22, 0.2 x).
* ``ddof=0``: ``np.std`` of the folds, ``bin/start_gap_estimation.py``, line 102, times
  ``sqrt(1/10 + 1/9)`` (line 29, line 105).
* ``fixed_threshold=True``: ``src/stop_methods.py``, lines 16-17 (the threshold is set at
  the first row, iteration 20, and never updated).
* ``ties="first"``: ``bin/start_gap_estimation.py``, line 91 (``idxmin``).
* ``candidates=2000``, ``refine_steps=0``: ``src/enhanced_gp.py``, line 22 (``n_samples``)
  and lines 69-94 (random points plus the fitted points, no refinement).
* ``fit_mean=True``: App. A.1.1 (the GP of their BO and of their bound has a scalar mean).
* ``conv_rtol=1e-12``: ``src/stop_methods.py``, lines 74-78 compare incumbent values
  that went through a CSV file; values equal to 12 significant digits are ties there.
* ``ours_scales=(1.0, 0.5 / 0.21)``, ``ours_variances=()``: ``src/stop_methods.py``,
  line 17 (``Ours_c`` = ``incumbent_std / 0.21 * c``: ``c / 0.21`` times the standard
  deviation, 2.38 for ``Ours_0.5``).
* ``acq_gp="all"``: the code reads the EI / PI its BO logged (``src/stop_methods.py``,
  lines 99-100); pass them as ``replay``'s ``ei`` / ``pi`` to reproduce its stops exactly.
  Without them the baselines use the GP of the BO's acquisition, fitted on every
  evaluation, as that BO did.
* ``warping=False``: the code's bound GP has none. ``src/enhanced_gp.py``, lines 57 and
  65, builds it with AutoGluon 0.1's ``default_gpmodel`` (``install.sh`` pins
  ``autogluon.core==0.1.0``), whose kernel is ``build_kernel(state)`` with its default
  ``do_warping=False``: a Matérn-5/2 ARD kernel on the unit cube, no warping. This
  although App. A.1.1 lists "2 input warping parameters" among the
  hyperparameters of the authors' GP ("output noise, a scalar mean value, bandwidths for
  every input dimension, 2 input warping parameters and a scalar covariance scale
  parameter"): with jaxstop's Kumaraswamy warping (``ReplayOptions(warping=True)``, the
  warping of AutoGluon's BayesOpt GP, which App. A.1.1 names as the closest open-source
  implementation, with its box, prior and start; :mod:`jaxstop._src.warping`) and
  jaxstop's fit the bound agrees less with the authors' own recorded
  bound on their 380 traces (median Pearson correlation 0.50 against 0.79; the same
  Ours_0.21 stop on 68% of the traces against 75%) and Table 3 moves away from the paper
  (Ours_0.21 RTC 0.479 / 0.119 for RF / XGB against the paper's 0.318 / 0.144; 0.309 /
  0.114 without warping), at about 2-5x the time; see ``benchmarks/RESULTS.md``. The
  convention follows the code, and the numbers its results support. With
  ``warping=True`` both GPs of a row (the bound's and, for EI / PI, the BO's) are
  warped (and the fits' steps that are None double: ``ReplayOptions.first_fit_steps`` /
  ``fit_steps``).
* ``prior="autogluon"``, ``warm_start=False``, ``num_starts=5``, ``joint=True``,
  ``min_noise=1e-9``: the code's GP, AutoGluon 0.1's (``src/enhanced_gp.py``, lines 57 and
  65: ``default_gpmodel`` with ``DEFAULT_OPTIMIZATION_CONFIG``), with its priors
  (LogNormal(0, 1) on the covariance scale, Gamma(0.1, 1) on the noise, flat inverse
  bandwidths, Normal(0, 1) on the mean), built afresh at every iteration
  (``EnhancedGP.fit``) and fitted from AutoGluon's start with 5 L-BFGS-B starts, the
  amplitude and the mean jointly with the rest and the noise variance floored at 1e-9
  (AutoGluon's ``NOISE_VARIANCE_LOWER_BOUND``).
* ``first_fit_steps=60``, ``fit_tol=1e-3``: the optimiser. Theirs is SciPy's L-BFGS-B to
  ``tol = 1e-6``, at most 500 iterations; here at most 60 quasi-Newton steps per start,
  to a gradient of 1e-3 (with 30 steps the fits end in other local optima more often).
* ``redraw=False``: ``src/enhanced_gp.py``, lines 69-78 (``min_lcb`` seeds
  ``RandomCandidateGenerator`` with the same seed at every iteration): one set of 2,000
  random points for every row. The code keeps integer hyperparameters on their grid
  there; pass such points as ``replay``'s ``candidates`` to follow it exactly.

On the authors' 380 traces (``benchmarks/termination_cv.py``; see
``benchmarks/RESULTS.md``) the preset with the code's candidates computes the authors'
bound (median ratio 1.000 to their recorded one), stops where they did on 92% of the
traces, and gives Ours_0.21 RTC 0.332 / 0.153 (RF / XGB) against the paper's 0.318 /
0.144. The candidates are part of the search space: with uniform ones (``max_depth``
continuous) RF's bound is smaller where the LCB's minimum lies on the grid's faces, and
Ours_0.21 RTC is 0.445 / 0.154. jaxstop's cheaper fit (the ``"paper"`` preset's: Optuna's
priors, rows warm-started) takes about 1/20 of the CPU time and gives 0.309 / 0.114.

``"optuna"``: Optuna's terminator.

* ``lag=0``: ``Terminator.should_terminate`` uses every completed trial.
* ``beta_t="fitted"``: ``improvement/evaluator.py``, lines 37-47 and 67-70 (``n_trials``
  of the top trials, ``n_params`` the dimension).
* ``ddof=0``: ``erroreval.py``, lines 89-94 (``np.var``, times ``1/k + 1/(k-1)``).
* ``fixed_threshold=False``: the best trial's error at every call.
* ``ties="first"``: the best trial changes only on a strict improvement
  (``storages/_in_memory.py``, lines 322-326).
* ``candidates=2048``, ``refine_steps=0``: ``improvement/evaluator.py``, lines 56 and
  73-81 (2,048 samples plus the top points).
* ``fit_mean=False``: Optuna's GP has no mean (``optuna/_gp/gp.py``).
* ``conv_rtol=0.0``: Optuna has no Conv-i; the paper's definition.
* ``ours_scales=(1.0,)``, ``ours_variances=()``: ``terminator.py``, line 144
  (``improvement < error``, the Eq. (9) standard deviation).
* ``acq_gp="all"``: Optuna has no EI / PI rule; its ``GPSampler`` fits every trial
  (standardised, ``samplers/_gp/sampler.py``, lines 62-67).
* ``warping=False``: Optuna's GP (``optuna/_gp/gp.py``) has no input warping.
* ``redraw=True``: ``improvement/evaluator.py``, line 130 (one ``LazyRandomState`` per
  evaluator; every call draws from it the seed of a scrambled Sobol sequence,
  ``_gp/search_space.py``, line 184: new candidates at every call).
* ``prior="optuna"``: Optuna's GP priors (``optuna/_gp/prior.py``).
* ``warm_start=True``, ``num_starts=1``, ``joint=False``, ``min_noise=1e-6``,
  ``first_fit_steps=None``, ``fit_tol=1e-2``: the same objective
  (Optuna's priors and likelihood) maximised by jaxstop's replay. Optuna fits every call
  afresh (``improvement/evaluator.py``, lines 158-168, ``gpr_cache=None``) from its own
  start, with the kernel scale a coordinate of its L-BFGS-B (``_gp/gp.py``,
  ``fit_kernel_params``, ``gtol=1e-2``) and the noise variance itself floored at 1e-6
  (``_gp/prior.py``, line 16); the profiled fit has the same maximiser wherever that floor
  is not active. ``joint=True, warm_start=False`` fit as Optuna does, from jaxstop's start.

The same in every convention (arguments or fields of :class:`ReplayOptions`):

* ``fraction=0.5``: the top 50% of the evaluations, Sec. 4 ("Selecting the data for the
  bound estimate", Fig. 2); the authors' code (``topq = 0.5``) and Optuna
  (``improvement/evaluator.py``, line 33).
* ``min_points=20``: not from the paper, which says only "the top 50%": the authors' code,
  ``bin/start_gap_estimation.py``, line 79 (``max(20, int(i * topq))``), and Optuna,
  ``improvement/evaluator.py``, lines 34 and 137. While ``n <= 20`` the GP is fitted on
  every evaluation.
* ``min_evaluations=20``: no rule fires with fewer evaluations: Sec. 4.1 ("the
  termination is triggered only after the first 20 iterations"); the authors' code,
  ``src/constant.py``, line 18 (``IGNORE_ITER``); Optuna, ``terminator.py``, line 132.
  It is a different setting from ``min_points``: it also sets the first row that is
  computed (rows that cannot stop are skipped) and the start of Conv-i's count (the
  authors' loop starts there, ``src/stop_methods.py``, lines 57-80).
* ``test_train_ratio=None``: ``1/(k-1)``, Eq. (9) for k equal folds.
* the rule ``bound < threshold``: Eq. (10), the authors' code (``src/stop_methods.py``,
  line 22) and Optuna (``terminator.py``, line 144); Algorithm 1, line 17 writes ``<=``.
* ``conv_patience=(10, 30, 50)``: Sec. 4, Baselines. ``ei_thresholds`` /
  ``pi_thresholds=(1e-8,)``: the EI_1e-08 / PI_1e-08 rows of Table 3 (Sec. 4's text lists
  1e-9, 1e-13, 1e-17 and 1e-5, 1e-9, 1e-13; Table 3 prints 1e-8, 1e-12, 1e-16 and 1e-4,
  1e-8, 1e-12).

EI / PI (``acq_gp``): with ``"all"`` each row fits a second GP, the BO's, on every
evaluation of the row (warm-started along the trace like the bound's GP, with the same
random candidates), and the rules read the maximum EI / PI over the candidates and the
evaluated points, with the incumbent's value as ``best``. EI is in the units of that GP's
standardised values (the values minus their mean, over their standard deviation), as
most BO code computes it (GPyOpt with ``normalize_Y``, AutoGluon's GP searcher, Optuna's
``GPSampler``): a threshold such as 1e-8 then means the same for any scale of the
values. ``"top"`` reads the maxima of the bound's own GP (top set, standardised on the
top set) instead, with no second fit; those rarely fall below 1e-8 (on the authors' 380
traces the EI_1e-08 rule then saved 0.03 / 0.00 of the iterations (RTC, RF / XGB) against
Table 3's 0.90 / 0.85). Recorded ``ei`` / ``pi`` passed to ``replay`` replace either.
"""


def with_convention(options, convention: dict):
    """``options`` with its ``None`` convention fields taken from the preset ``convention``.

    The rules of ``ours`` come as a pair: when ``ours_scales`` and ``ours_variances`` are
    both None both are the preset's; when one is given the other is empty (the rules
    are then exactly the ones given)."""
    fill = {k: v for k, v in convention.items() if getattr(options, k) is None}
    if options.ours_scales is not None or options.ours_variances is not None:
        for name in ("ours_scales", "ours_variances"):
            if getattr(options, name) is None:
                fill[name] = ()
    return options._replace(**fill)
