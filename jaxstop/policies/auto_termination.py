"""GP-based Bayesian optimisation that stops itself (Makarova et al., 2022).

:func:`auto_termination_bo` is Algorithm 1 of Makarova et al. (2022), *Automatic
Termination for Hyperparameter Optimization* (AutoML), as an ask/tell policy:
sequential GP-BO in which, after every evaluation, the upper bound on the simple
regret of the incumbent (Eq. 8, :func:`jaxstop.regret.fit_regret_bound`) is compared
with a threshold, and the study terminates once the bound is below it (Eq. 10).

Search space
------------
* **table** (``candidates`` given): the configurations are the rows of a finite
  candidate table (the rows of a :class:`jaxstop.sim.CurveTable`, with their vectors
  in the unit cube). Each candidate is evaluated at most once; the acquisition is
  maximised exactly over the rows not yet evaluated, and the domain ``Gamma`` of the
  bound's LCB minimum is the table itself (no refinement is needed: the minimum over
  a finite domain is exact).
* **unit cube** (only ``dim`` given): ``job.config = -1`` and ``job.x`` is a point of
  ``[0, 1]^dim``. The acquisition is maximised over ``num_candidates`` points drawn
  by ``ask`` (three quarters uniform, one quarter Gaussian perturbations, sd 0.05,
  of the incumbent); the bound's LCB minimum is taken over ``num_candidates`` uniform
  points plus the fitted points and refined by ``refine_steps`` projected-gradient
  steps (see :func:`jaxstop.regret.regret_bound`). The random points of the bound are
  drawn from a key the state owns (``tell`` takes no key).

Steps
-----
``ask``: the first ``num_init`` jobs are uniform random (unevaluated rows in table
mode); afterwards the maximiser of expected improvement (``acquisition="ei"``, the
default, as in the paper's BO, App. A.1.1) or the minimiser of the lower confidence
bound ``mu - sqrt(beta) sigma`` (``acquisition="ucb"``: GP-UCB of Srinivas et al.
(2010) for minimisation, with the bound's ``beta``). Every job trains to
``max_budget`` (``report`` is ``None``). Ties go to the first candidate. If the GP is
unusable (failed factorisation, non-finite acquisition everywhere) the job is drawn
at random as in the initial phase.

``tell``: stores the observation in a buffer of capacity ``max_evals`` (non-finite
losses are stored but masked out, and in table mode the row still counts as
evaluated), updates the incumbent (lowest loss; ties: the earlier evaluation, as in
the authors' code, ``idxmin`` in ``bin/start_gap_estimation.py``, and Optuna, and as every
policy here; Algorithm 1, line 9, ``y_t <= y_t^*``, would make the newer one the
incumbent and give its folds the threshold: :func:`jaxstop.regret.replay`'s
``ties="last"``), and calls the bound of :mod:`jaxstop.regret`: top ``max(min_points, floor(fraction * n))``
evaluations, standardised, GP fitted with at most ``fit_steps`` quasi-Newton steps
warm-started from the previous step's hyperparameters, Eq. (8) with ``beta`` of
(number of dimensions, ``t``) -- ``t`` = number of evaluations (``beta_t=
"evaluations"``, the paper) or of fitted points (``"fitted"``, Optuna / the
authors' code). Then::

    criterion = (n >= min_iterations) & (bound < threshold)      # Eq. (10)
    terminate = criterion | (n >= max_evals) | (table exhausted)

with ``n`` the number of evaluations told. ``max_evals`` is the search budget ``T``.

One GP per step
---------------
The acquisition uses the same GP as the bound: the hyperparameters fitted in
``tell`` (kept in the state) and the same top set. ``ask`` only refactorises it (one
Cholesky of the top-set size, versus up to ``fit_steps`` factorisations for the fit), so a
step costs one GP fit, as in Algorithm 1 (its lines 3 and 15-16 use one GP). While
``n <= min_points`` (20 by default: the authors' code, ``max(20, int(n * 0.5))``; the
paper gives no minimum) the top set is all evaluations, i.e. the paper's BO model;
later the model is the local one on the best ``fraction`` of the evaluations that the
paper recommends for the bound (Sec. 4, "Selecting the data", Fig. 2) -- a local
surrogate in the spirit of TuRBO (Eriksson et al., 2019). The BO of the paper's
experiments fitted its acquisition's GP on every evaluation (App. A.1.1);
``fraction=1.0`` does that here (a global model for both). The policy has no EI / PI
stopping rule; those baselines are :func:`jaxstop.regret.replay`'s (``acq_gp``).

Threshold
---------
``threshold = params.threshold + params.threshold_scale * s(incumbent) +
sqrt(params.threshold_variance * s_cv^2(incumbent))`` where ``s`` is the
cross-validation standard error of Eq. (9)-(10), ``sqrt((1/k + n_test/n_train) s_cv^2)``
(:func:`jaxstop.regret.cv_threshold`), of the incumbent's ``k`` fold scores, and
``s_cv^2`` their variance with ``1/k`` (``ddof = 0``, Algorithm 1, line 11). The same
two forms as the rules of :func:`jaxstop.regret.stop_iterations`: a multiple of the
standard deviation, or a variance factor (the ``0.5 s_cv^2`` of Sec. 4.1). The two
sources:

* **cross-validation** (``fold_scores`` given, table mode): ``params.fold_scores``
  holds the fold scores of every table row, shape (num_configs, k) -- a
  :class:`~jaxstop.sim.CurveTable` has none, so they travel in the params pytree and
  a simulation study can ``vmap`` over them. ``threshold_scale = 1`` (the default) is
  the paper's ``Ours_0.21`` (Eq. 9, Nadeau-Bengio); its ``Ours_0.5`` is
  ``threshold_scale = 0, threshold_variance = 0.5`` as the text writes it
  (``sqrt(0.5 s_cv^2)``), or ``threshold_scale = 0.5 / 0.21`` as the authors' code
  computes it (a threshold 1.54x larger for k = 10); ``params.threshold`` defaults to 0.
* **fixed** (only ``threshold`` given, any mode): a user-set accuracy in loss units
  (Sec. 3.2, "the user can define the right-hand side"; Optuna's
  ``StaticErrorEvaluator``). ``params.fold_scores`` then has zero folds.

Both may be given (a CV threshold with a floor). Before the first finite loss there
is no incumbent and the CV part is 0.

Batched and single runs
-----------------------
A study run alone and the same study (same key) inside ``jax.vmap`` are two compiled
programs: the batched GP linear algebra and reductions round differently in the last
bits. Every float they report agrees to within that rounding carried through the fit
(in float64 about 1e-10 relative at the default settings). The *discrete* choices
(the EI / LCB argmax of ``ask``, the fit's stopping step, ``terminate``) agree whenever
they are decided by more than that rounding; a choice between two candidates whose
acquisition values agree to rounding may go either way, and the two studies then
continue differently. In float32 such near-ties are common once the GP has converged
on a flat region (a fit that stops at its step cap stops at a rounding-dependent
point), so batched and single float32 studies can part after a few dozen steps; they
are equally valid runs of the method. Use float64 where trace-level reproducibility
between batched and single runs matters.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import checks as _checks
from jaxstop._src import termination as _termination
from jaxstop.policies import _auto_termination_steps as _steps
from jaxstop.policies._auto_termination_steps import AutoTerminationInfo as AutoTerminationInfo
from jaxstop.policies._auto_termination_steps import AutoTerminationParams as AutoTerminationParams
from jaxstop.policies._auto_termination_steps import AutoTerminationState as AutoTerminationState
from jaxstop.policies._base import Limits, Policy, build_policy

__all__ = [
    "AutoTerminationInfo",
    "AutoTerminationParams",
    "AutoTerminationState",
    "auto_termination_bo",
]

_ACQUISITIONS = ("ei", "ucb")


def auto_termination_bo(
    num_configs: int | None = None,
    *,
    max_budget: int,
    max_evals: int,
    candidates: ArrayLike | None = None,
    dim: int | None = None,
    fold_scores: ArrayLike | None = None,
    threshold: float | None = None,
    threshold_scale: float = 1.0,
    acquisition: str = "ei",
    num_init: int = 10,
    min_iterations: int = 20,
    fraction: float = 0.5,
    min_points: int = 20,
    beta_t: str = "evaluations",
    beta_scale: float = 0.2,
    delta: float = 0.1,
    ddof: int = 0,
    test_train_ratio: float | None = None,
    fit_steps: int = 10,
    fit_tol: float = 1e-2,
    fit_mean: bool = True,
    min_noise: float = 1e-6,
    num_candidates: int = 512,
    refine_steps: int | None = None,
    refine_starts: int = 8,
    chunk_size: int = 1024,
    dtype=None,
    threshold_variance: float = 0.0,
    warping: bool = False,
) -> Policy:
    """GP-BO with automatic termination, Algorithm 1 of Makarova et al. (2022).

    See the module docstring for the steps, the threshold sources and the choice of
    one GP per step. Static sizes are arguments here; the numeric hyperparameters
    ``fold_scores``, ``threshold_scale``, ``threshold_variance``, ``threshold``,
    ``beta_scale`` and ``delta`` are the defaults of :class:`AutoTerminationParams`
    (``policy.default_params()``). The defaults are the paper's main method: Eq. (9)'s
    threshold with ``s^2`` over ``1/k`` (``ddof = 0``, Algorithm 1, line 11), checked from
    20 evaluations on (Sec. 4.1), ``beta`` of App. A.2.3 with ``t`` the number of
    evaluations, the top 50% of the evaluations in the GP (Sec. 4) with at least 20
    (``min_points``: the authors' code, not the paper).

    Args:
        num_configs: Size of the candidate table (default ``len(candidates)``).
        max_budget: Budget units (epochs) every job trains for.
        max_evals: Search budget ``T``: capacity of the evaluation buffer; the study
            terminates after this many evaluations. At most ``num_configs`` in table mode.
        candidates: Configuration vectors of the table rows in the unit cube, shape
            (num_configs, d), d >= 1 (table mode).
        dim: Dimension of the unit cube (cube mode, without ``candidates``).
        fold_scores: Fold scores of every table row, shape (num_configs, k), k >= 2,
            finite: the CV threshold (table mode).
        threshold: Fixed threshold in loss units, >= 0 (default 0 with ``fold_scores``).
        threshold_scale: Multiplier of the CV threshold's standard deviation, >= 0 (1:
            Eq. 9, the paper's ``Ours_0.21``; ``c / 0.21``: the authors' code's ``Ours_c``).
        acquisition: ``"ei"`` (expected improvement) or ``"ucb"`` (lowest LCB).
        num_init: Random jobs before the GP drives the search, in [1, max_evals] (the
            paper does not say how its BO starts; 10 is Optuna's ``GPSampler``
            ``n_startup_trials``).
        min_iterations: No termination by the criterion with fewer evaluations (20:
            Sec. 4.1, "only after the first 20 iterations"), >= 1. A different setting
            from ``min_points``, which sizes the GP's top set.
        fraction, min_points: Top set of the GP fit (:func:`jaxstop.regret.top_mask`):
            the top 50% (Sec. 4), at least 20 (the authors' code; the paper gives no
            minimum).
        beta_t: ``"evaluations"`` or ``"fitted"``: ``t`` of :func:`jaxstop.regret.beta`.
        beta_scale, delta: ``scale`` and ``delta`` of :func:`jaxstop.regret.beta`.
        ddof: Of the fold variance ``s^2`` (0: ``1/k``, the paper's Algorithm 1, line 11,
            the authors' code and Optuna; 1: the unbiased sample variance).
        test_train_ratio: ``n_test / n_train`` of Eq. (9); default ``1 / (k - 1)``.
        fit_steps: Most quasi-Newton steps of each GP fit (warm-started).
        fit_tol: A fit stops once converged (see :func:`jaxstop.regret.fit_regret_bound`).
        fit_mean: Fit the GP's constant mean (profiled out: its generalised-least-squares estimate).
        min_noise: Lower bound of the GP noise variance relative to its amplitude (standardised
            scale, where the fitted amplitude is of order 1).
        num_candidates: Cube mode: random points of the acquisition and of the bound.
        refine_steps: Gradient refinement of the bound's LCB minimum; default 0 in
            table mode, 10 in cube mode.
        refine_starts: Starts of that refinement.
        chunk_size: Candidates predicted at a time.
        dtype: Floating dtype in cube mode (default: JAX's default float); in table
            mode the dtype of ``candidates``.
        threshold_variance: Variance factor ``v`` of a ``sqrt(v s^2)`` part of the CV
            threshold, >= 0 (the paper's text, Sec. 4.1: ``Ours_0.5`` is
            ``threshold_scale=0, threshold_variance=0.5``).
        warping: Fit the GP with a Kumaraswamy input warping (two parameters per
            dimension, fitted with the others; App. A.1.1 of the paper: the GP of the
            authors' BO has "2 input warping parameters"). The acquisition and the bound
            then both use the warped GP. A warped fit has three times the parameters:
            consider a larger ``fit_steps``. Default False: the plain Matérn-5/2 GP.

    Returns:
        A :class:`~jaxstop.policies.Policy` with ``report=None``; ``tell`` returns an
        :class:`AutoTerminationInfo`.

    Raises:
        ValueError / TypeError: Bad sizes or options, ``candidates`` outside the unit
            cube, ``fold_scores`` of the wrong shape or with non-finite values, no
            threshold source; at trace time, params whose ``fold_scores`` shape differs
            from the factory's.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import sim
        >>> from jaxstop.policies.auto_termination import auto_termination_bo
        >>> x = jnp.linspace(0, 1, 12)[:, None]
        >>> loss = (x[:, 0] - 0.3) ** 2
        >>> table = sim.CurveTable(jnp.stack([loss + 0.1, loss], 1), configs=x)
        >>> policy = auto_termination_bo(
        ...     max_budget=2, max_evals=12, candidates=x, threshold=0.02,
        ...     num_init=3, min_iterations=5, min_points=5, fit_steps=4)
        >>> trace = sim.run(policy, table, jax.random.key(0), max_jobs=12)
        >>> int(trace.incumbent), bool(trace.num_jobs < 12)
        (3, True)
    """
    max_budget = _checks.positive_int(max_budget, "max_budget")
    max_evals = _checks.positive_int(max_evals, "max_evals")
    if candidates is not None:
        fdtype = None if dtype is None else _checks.compute_dtype(dtype)
        cand = _checks.float_array(candidates, "candidates", fdtype)
        _checks.check_rank(cand, 2, "candidates", "with shape (num_configs, d)")
        _checks.check_unit_cube(cand, "candidates")
        if cand.shape[0] < 1 or cand.shape[1] < 1:
            raise ValueError(f"candidates must have at least one row and one column, got shape {cand.shape}")
        if num_configs is not None and num_configs != cand.shape[0]:
            raise ValueError(f"num_configs ({num_configs}) must equal len(candidates) ({cand.shape[0]})")
        if dim is not None and dim != cand.shape[1]:
            raise ValueError(f"dim ({dim}) must equal candidates.shape[1] ({cand.shape[1]})")
        num_configs = cand.shape[0]
        d = cand.shape[1]
        fdtype = cand.dtype
        cube = False
    else:
        if num_configs is not None:
            raise ValueError("table mode needs candidates, the configuration vectors of the table rows, "
                             "shape (num_configs, d) in the unit cube (or give only dim for unit-cube mode)")
        if dim is None:
            raise ValueError("give candidates (table mode) or dim (unit-cube mode)")
        d = _checks.positive_int(dim, "dim")
        fdtype = _checks.compute_dtype(dtype)
        cand = jnp.zeros((0, d), fdtype)
        num_configs = 0
        cube = True
    if not cube and max_evals > num_configs:
        raise ValueError(f"max_evals ({max_evals}) must be <= num_configs ({num_configs}) in table mode: "
                         "a candidate is evaluated at most once")
    num_init = _checks.positive_int(num_init, "num_init")
    if num_init > max_evals:
        raise ValueError(f"num_init ({num_init}) must be <= max_evals ({max_evals})")
    min_iterations = _checks.positive_int(min_iterations, "min_iterations")
    if acquisition not in _ACQUISITIONS:
        raise ValueError(f"acquisition must be one of {_ACQUISITIONS}, got {acquisition!r}")
    if beta_t not in _termination.BETA_T:
        raise ValueError(f"beta_t must be one of {_termination.BETA_T}, got {beta_t!r}")
    if isinstance(ddof, bool) or ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof!r}")
    fraction = _checks.nonneg_float(fraction, "fraction", positive=True, high=1.0)
    min_points = _checks.positive_int(min_points, "min_points")
    if test_train_ratio is not None:
        test_train_ratio = _checks.nonneg_float(test_train_ratio, "test_train_ratio")
    threshold_scale = _checks.nonneg_float(threshold_scale, "threshold_scale")
    threshold_variance = _checks.nonneg_float(threshold_variance, "threshold_variance")
    beta_scale = _checks.nonneg_float(beta_scale, "beta_scale", positive=True)
    delta = _checks.nonneg_float(delta, "delta", positive=True, high=1.0)
    min_noise = _checks.nonneg_float(min_noise, "min_noise", positive=True)
    fit_steps = _checks.positive_int(fit_steps, "fit_steps")
    fit_tol = _checks.nonneg_float(fit_tol, "fit_tol")
    num_candidates = _checks.positive_int(num_candidates, "num_candidates")
    refine_steps = (10 if cube else 0) if refine_steps is None else _checks.positive_int(
        refine_steps, "refine_steps", minimum=0)
    refine_starts = _checks.positive_int(refine_starts, "refine_starts")
    chunk_size = _checks.positive_int(chunk_size, "chunk_size")
    if not isinstance(warping, (bool, np.bool_)):
        raise TypeError(f"warping must be a bool, got {warping!r}")

    if fold_scores is not None:
        if cube:
            raise ValueError("fold_scores needs table mode (one row of fold scores per candidate); "
                             "in unit-cube mode give a fixed threshold")
        folds = _checks.float_array(fold_scores, "fold_scores", fdtype)
        if folds.ndim != 2 or folds.shape[0] != num_configs or folds.shape[1] < 2:
            raise ValueError(f"fold_scores must have shape (num_configs, k) = ({num_configs}, k) with k >= 2 "
                             f"folds, got {tuple(folds.shape)}")
        if _checks.is_concrete(folds) and not np.all(np.isfinite(np.asarray(folds))):
            raise ValueError("fold_scores must be finite")
        if ddof >= folds.shape[1]:
            raise ValueError(f"ddof ({ddof}) must be < the number of folds ({folds.shape[1]})")
        threshold = 0.0 if threshold is None else _checks.nonneg_float(threshold, "threshold")
    else:
        if threshold is None:
            raise ValueError("give fold_scores (cross-validation threshold, table mode) or a fixed threshold")
        threshold = _checks.nonneg_float(threshold, "threshold")
        folds = jnp.zeros((num_configs, 0), fdtype)
    capacity = _termination.top_capacity(max_evals, fraction, min_points)
    fit_cfg = _termination.FitConfig(
        capacity=capacity, fraction=fraction, min_points=min_points, beta_t=beta_t, steps=fit_steps,
        fit_mean=_checks.boolean(fit_mean, "fit_mean"), min_noise=min_noise, num_random=num_candidates if cube else 0,
        refine_steps=refine_steps, refine_starts=refine_starts, chunk_size=chunk_size, fit_tol=fit_tol,
        warping=_checks.boolean(warping, "warping"),
    )
    cfg = _steps.AutoTerminationConfig(
        cube=cube, num_configs=num_configs, d=d, max_budget=max_budget, max_evals=max_evals, num_init=num_init,
        min_iterations=min_iterations, ucb=acquisition == "ucb", num_candidates=num_candidates,
        num_uniform=num_candidates - num_candidates // 4, fit=fit_cfg, test_train_ratio=test_train_ratio,
        ddof=ddof, cand=cand, folds=folds, threshold_scale=threshold_scale, threshold=threshold,
        beta_scale=beta_scale, delta=delta, fdtype=fdtype, threshold_variance=threshold_variance,
    )
    return build_policy(cfg, init=_steps.init, ask=_steps.ask, tell=_steps.tell,
                        default_params=_steps.default_params, check_params=_steps.check_params,
                        limits=Limits(None if cube else num_configs, max_evals, None, max_budget))
