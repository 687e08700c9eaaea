"""Settings of :func:`jaxstop.regret.fit_regret_bound` and :func:`jaxstop.regret.replay`
as options NamedTuples with defaults (:class:`FitOptions`, :class:`ReplayOptions`).

The functions keep a thin signature: the data (masks, warm starts, candidates), the top
set (``fraction``, ``min_points``) and the convention (``beta_t`` / ``convention``) are
keywords; everything else travels in ``options=``. Each field has the name and default
of the keyword it replaces, so ``f(..., fit_steps=6)`` becomes
``f(..., options=FitOptions(fit_steps=6))``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from jaxstop.regret._rules import DEFAULT_ACQ, DEFAULT_PATIENCE


class FitOptions(NamedTuple):
    """Settings of :func:`jaxstop.regret.fit_regret_bound`: the GP fit, the search for the
    LCB's domain minimum and ``beta``.

    Attributes:
        fit_steps: Most quasi-Newton steps of the GP fit (one objective evaluation each).
        fit_tol: The fit stops once no component of its objective's gradient (nats per
            unit of log hyperparameter) exceeds this, or once a rejected step's predicted
            decrease is below the objective's rounding (:func:`jaxstop.gp.fit`'s ``tol``;
            in float32 near the optimum); 0 = always ``fit_steps`` steps.
            ``fit_info.steps`` reports the steps taken. The default 1e-2 is the gradient
            tolerance of Optuna's L-BFGS-B fit of the same GP (``gtol`` of
            ``optuna._gp.gp.fit_kernel_params``; Optuna's lengthscale coordinates are log
            inverse squared lengthscales, in which the same gradient is half as large, so its
            stop is up to 2x looser there); against a converged fit the bound moves
            by at most about 3e-4 of itself on the studies of ``benchmarks/RESULTS.md``;
            1e-4 takes about two steps more. A fit that needs more than ``fit_steps``
            steps stops at that cap first (on one small noisy test study: 1.2e-3).
        fit_mean: Fit a constant mean (True: profiled out, its generalised-least-squares
            estimate for the current kernel, the ML-II value under its flat prior) or keep
            it at 0 like Optuna (False).
        min_noise: Lower bound on the GP noise variance relative to its amplitude (standardised
            scale, where the fitted amplitude is of order 1; the fit profiles the amplitude out);
            with ``joint``, on the noise variance itself.
        refine_steps: Gradient refinement of the LCB minimum (0 = off).
        refine_starts: Starts of the refinement.
        chunk_size: Candidates predicted at a time.
        beta_size: ``|Gamma|`` of :func:`~jaxstop.regret.beta`; None: the number of real
            dimensions.
        delta: ``delta`` of :func:`~jaxstop.regret.beta`.
        beta_scale: ``scale`` of :func:`~jaxstop.regret.beta`.
        warping: Fit a Kumaraswamy input warping with the GP (two parameters per
            dimension, :func:`jaxstop.gp.fit` with ``warping=True``; the GP of the
            authors' experiments has one, App. A.1.1 of the paper). ``init`` then carries a
            warping (or gets the identity), ``inv_hessian`` has side ``3 d + 3``, and
            the LCB refinement descends in the warped coordinates. A warped fit has
            three times the parameters and needs about twice the steps to converge from
            a cold start: raise ``fit_steps`` (e.g. to 40) for a cold fit.
        prior: The GP's hyperparameter priors (for standardised values), maximised with
            the likelihood: ``"optuna"`` (Optuna's GP sampler: Gamma(2, 1) on the
            amplitude, Gamma(1.1, 30) on the noise, a penalty on extreme lengthscales) or
            ``"autogluon"`` (AutoGluon 0.1's BayesOpt GP, the GP of the released code of
            Makarova et al., 2022: LogNormal(0, 1) on the amplitude, Gamma(0.1, 1) on the
            noise, flat lengthscales and Normal(0, 1) on the mean, which ``fit_mean``
            profiles out jointly with the amplitude). The default ``init`` is the prior's start:
            gp's own for ``"optuna"``, AutoGluon's initial values (noise variance 1e-3,
            lengthscales 1) for ``"autogluon"``.
        num_starts: Starts of the GP fit: ``init`` and ``num_starts - 1`` random
            perturbations of it (N(0, 1) on its log lengthscales and log noise, clipped to
            the box: AutoGluon 0.1's restarts, 5 in the authors' code); the best objective
            wins and ``fit_info.restart`` says which. Each start costs a fit.
        joint: Fit the amplitude and the mean jointly with the lengthscales and the noise
            (one quasi-Newton search over all of them, as AutoGluon 0.1's L-BFGS-B does)
            instead of profiling them out, with ``min_noise`` a floor on the noise variance
            itself (AutoGluon's ``NOISE_VARIANCE_LOWER_BOUND``: 1e-9) instead of on its ratio
            to the amplitude; the random starts then perturb the amplitude and the mean too
            (AutoGluon's restarts perturb every parameter). Under AutoGluon's Gamma(0.1, 1)
            noise prior the noise ends at its floor, and the floor's kind changes the fit: with
            the ratio floored a smaller amplitude also lowers the noise, which that prior
            rewards, so the profiled fit ends at a smaller amplitude (and a bound about 5%
            smaller, ``benchmarks/explore/authors_bound.py``). ``joint=True, min_noise=1e-9,
            prior="autogluon", num_starts=5`` is the fit of the authors' code.

    Example:
        >>> from jaxstop import regret
        >>> regret.FitOptions(fit_steps=6).fit_steps, regret.FitOptions().fit_tol
        (6, 0.01)
    """

    fit_steps: int = 20
    fit_tol: float = 1e-2
    fit_mean: bool = True
    min_noise: float = 1e-6
    refine_steps: int = 10
    refine_starts: int = 8
    chunk_size: int = 1024
    beta_size: float | None = None
    delta: float = 0.1
    beta_scale: float = 0.2
    warping: bool = False
    prior: str = "optuna"
    num_starts: int = 1
    joint: bool = False


class ReplayOptions(NamedTuple):
    """Settings of :func:`jaxstop.regret.replay`.

    The fields ``lag``, ``beta_t``, ``ddof``, ``fixed_threshold``, ``candidates``,
    ``redraw``, ``refine_steps``, ``fit_mean``, ``conv_rtol``, ``ours_scales``,
    ``ours_variances``, ``acq_gp``, ``ties``, ``warping``, ``prior``, ``warm_start``,
    ``num_starts``, ``joint``, ``min_noise``, ``first_fit_steps`` and ``fit_tol`` are those
    of the presets in
    :data:`~jaxstop.regret.CONVENTIONS`, which says which line of the paper, the authors'
    code or Optuna each preset value follows; ``None`` (their default) takes the value of
    ``replay``'s ``convention``, any other value overrides it. The other fields are the
    same in every convention; their defaults are the paper's where it gives one (App.
    A.2.3: ``delta = 0.1``, ``beta_scale = 0.2``, ``beta_size`` = the number of
    hyperparameters; Eq. 9: ``test_train_ratio = 1/(k-1)``; Sec. 4: ``conv_patience``;
    Table 3: the 1e-8 rows of EI and PI) and jaxstop's own (the fit's steps, the
    segments) elsewhere.

    The ``"authors"`` convention sets ``prior="autogluon"``, ``warm_start=False``,
    ``num_starts=5``, ``joint=True``, ``min_noise=1e-9``, ``first_fit_steps=60``,
    ``fit_tol=1e-3`` and ``redraw=False``: each row's bound is fitted as the authors' code
    fits it (AutoGluon 0.1's GP and ``DEFAULT_OPTIMIZATION_CONFIG``: 5 starts), up to the
    optimiser (their L-BFGS-B to ``tol = 1e-6``, at most 500 iterations; here at most 60
    quasi-Newton steps per start to a gradient of 1e-3).

    Attributes:
        lag: Row ``t`` uses the first ``t + 1 - lag`` evaluations.
        beta_t: ``"evaluations"`` or ``"fitted"`` (``t`` of :func:`~jaxstop.regret.beta`).
        ddof: Of the fold variance ``s^2`` (0: ``1/k``, the paper's Algorithm 1, line 11;
            or 1).
        fixed_threshold: Freeze the threshold at iteration ``min_evaluations``.
        candidates: Random domain points (an int): drawn afresh at every row, or once
            for the whole trace (``redraw``).
        redraw: Draw new random candidates at every row (True) or one set, used at every
            row (False: the authors' code seeds its candidate generator the same way at
            every iteration). For a trace of ``T`` rows the one set is
            ``uniform(fold_in(key, T), (candidates, d))`` (functions of ``jax.random``;
            row ``t`` draws from ``fold_in(key, t)``).
        refine_steps: Gradient refinement of the LCB minimum (0 = off).
        fit_mean: Fit a constant GP mean (True) or keep it at 0 (False).
        conv_rtol: Relative tolerance of Conv-i's ties.
        ours_scales: The ``Ours`` rules that multiply Eq. (9)'s standard deviation,
            ``bound < scale * threshold`` (:func:`~jaxstop.regret.stop_iterations`).
        conv_patience, ei_thresholds, pi_thresholds: The other rules' settings
            (:func:`~jaxstop.regret.stop_iterations`).
        beta_size: ``|Gamma|`` of :func:`~jaxstop.regret.beta`; None: the number of real
            dimensions.
        delta, beta_scale: Of :func:`~jaxstop.regret.beta`.
        test_train_ratio: Of :func:`~jaxstop.regret.cv_threshold`; None: ``1/(k-1)``.
        refine_starts: Starts of the LCB refinement.
        first_fit_steps, fit_steps: Quasi-Newton steps of the first and later GP fits
            (each of the two GPs with ``acq_gp="all"``); None (also where the convention
            says None): 30 and 6, or 60 and 12 with ``warping``.
        fit_tol: Each fit stops once converged, as in :func:`~jaxstop.regret.fit_regret_bound`.
        min_noise: Lower bound on the GP noise variance relative to its amplitude (with
            ``joint``, on the noise variance itself).
        num_segments: Capacity segments (each is compiled separately).
        chunk_size: Candidates predicted at a time.
        ours_variances: The ``Ours`` rules of the paper's text, ``bound < sqrt(v * s^2)``
            for each variance factor ``v`` (Sec. 4.1: ``Ours_0.5`` is ``v = 0.5``).
            ``Stops.ours`` holds the ``ours_scales`` rules, then these. When both are None
            both come from the convention; when one is given the other defaults to none.
        acq_gp: The GP of the EI / PI baselines: ``"all"`` (the BO's own GP, fitted on
            every evaluation so far) or ``"top"`` (the bound's GP on the top set).
            Recorded ``ei`` / ``pi`` passed to ``replay`` replace either.
        ties: The incumbent among evaluations of equal value: ``"first"`` or ``"last"``
            (the newest, Algorithm 1, line 9: ``y_t <= y_t^*``); it gives the threshold.
        warping: Fit a Kumaraswamy input warping with the GP (the bound's and, with
            ``acq_gp="all"``, the BO's): :class:`FitOptions` ``warping``. With it the
            fits' default steps are doubled (``first_fit_steps`` 60, ``fit_steps`` 12 when
            those are None): a warped fit has three times the parameters.
        prior: The GPs' hyperparameter priors (the bound's and the BO's):
            :class:`FitOptions` ``prior``, ``"optuna"`` or ``"autogluon"``; the first
            row's fits (every row's with ``warm_start=False``) start at the prior's start.
        warm_start: Each row's fits start from the previous row's hyperparameters and
            curvature with ``fit_steps`` steps (True; jaxstop's replay), or every row is
            fitted afresh from the prior's start with ``first_fit_steps`` steps (False:
            the authors' code, which builds a new GP at every iteration,
            ``src/enhanced_gp.py`` ``EnhancedGP.fit``). Cold rows cost
            ``first_fit_steps / fit_steps`` times more.
        num_starts: Starts of every fit (:class:`FitOptions` ``num_starts``).
        joint: Every fit joint, the noise variance floored (:class:`FitOptions` ``joint``).

    Example:
        >>> from jaxstop import regret
        >>> opts = regret.ReplayOptions(candidates=128, num_segments=1)
        >>> opts.delta, opts.beta_t is None   # None: from the convention
        (0.1, True)
    """

    lag: int | None = None
    beta_t: str | None = None
    ddof: int | None = None
    fixed_threshold: bool | None = None
    candidates: int | None = None
    refine_steps: int | None = None
    fit_mean: bool | None = None
    conv_rtol: float | None = None
    ours_scales: Any = None
    conv_patience: Any = DEFAULT_PATIENCE
    ei_thresholds: Any = DEFAULT_ACQ
    pi_thresholds: Any = DEFAULT_ACQ
    beta_size: float | None = None
    delta: float = 0.1
    beta_scale: float = 0.2
    test_train_ratio: float | None = None
    refine_starts: int = 8
    first_fit_steps: int | None = None
    fit_steps: int | None = None
    fit_tol: float | None = None
    min_noise: float | None = None
    num_segments: int = 4
    chunk_size: int = 1024
    ours_variances: Any = None
    acq_gp: str | None = None
    ties: str | None = None
    warping: bool | None = None
    prior: str | None = None
    warm_start: bool | None = None
    num_starts: int | None = None
    joint: bool | None = None
    redraw: bool | None = None
