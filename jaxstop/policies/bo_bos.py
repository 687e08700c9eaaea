"""BO-BOS and its GP-UCB baseline on a finite candidate table.

BO-BOS (Dai et al., "Bayesian Optimization Meets Bayesian Optimal Stopping",
ICML 2019, Algorithm 1) is GP-UCB over ``z = [x, n / N]`` -- the configuration
and the fraction of the ``N`` training epochs -- whose training runs are stopped
early by Bayesian optimal stopping (BOS, :mod:`jaxstop.bos`). :func:`gp_ucb` is
the same policy with early stopping switched off (the paper's GP-UCB baseline):
both share one code path, so a comparison differs in the stopping rule only.

Surrogate and acquisition (Algorithm 1, line 2)
-----------------------------------------------
The candidates are the rows of a table, points ``x`` of the unit cube (for a
:class:`jaxstop.sim.CurveTable`, its ``configs``). The surrogate is
:mod:`jaxstop.gp` (Matérn-5/2 ARD, constant mean, Gaussian noise) on the inputs
``[x, n / N]`` and the losses, standardised by their mean and std. Its data
live in a buffer of static capacity ``max_evals * (len(intermediate_epochs) + 1)``
with a mask, so the program never recompiles as a study grows. Every ``ask``
refits the GP hyperparameters by ML-II (:func:`jaxstop.gp.fit`, at most
``gp_fit_steps`` objective evaluations, warm-started from the previous fit; the paper refits every 10 iterations with
restarts) and picks the unevaluated candidate with the lowest lower confidence
bound at full training, ``mu([x, 1]) - sqrt(beta_t) sigma([x, 1])`` (losses are
minimised; the paper maximises accuracy with the upper bound), with
``beta_t = beta_scale * 2 log(M t^2 pi^2 / (6 beta_delta))`` (Theorem 1 of Dai
et al. and of Srinivas et al., 2010; ``M`` = number of candidates, ``t`` = the
evaluation's index; ``beta_scale = 0.2`` as in :func:`jaxstop.regret.beta`). The
first ``num_init`` evaluations are uniform draws among the unevaluated
candidates and are trained in full, as in the authors' code (their 6 initial
points are never stopped). A candidate is evaluated at most once (an
early-stopped one too). ``sigma`` is the latent (noise-free) posterior std.

Intermediate observations (Appendix D)
--------------------------------------
Besides the final observation ``[x, n_t / N] -> y_t`` of every evaluation, the
losses after the ``intermediate_epochs`` (default: epochs 1 and ``k N / 5`` for
k = 1..4, rounded -- the paper's 1, 10, 20, 30, 40 for N = 50 and its 1, 20, 40,
60, 80 for N = 100) that lie strictly before ``n_t`` enter the GP at
``[x, e / N]``, as in the authors' code. :func:`gp_ucb` has none by default (the
paper's GP-UCB only sees ``[x, 1]``).

Early stopping (Algorithm 1, lines 3-9; Section 3.2)
----------------------------------------------------
For a model-based evaluation ``t`` (BO iteration ``t = count - num_init + 1``),
``report`` records every epoch's loss. After epoch ``N0`` it solves the BOS
problem once with :func:`jaxstop.bos.solve` on the errors of epochs ``1..N0``,
incumbent error ``y*_{t-1}``, ``K1 = K_{1,t} = k1_init / k1_gamma**(t-1)``
(Theorem 2; :func:`jaxstop.bos.k1_schedule`), ``K2 = k2``, ``c = cost`` and
``xi_t`` of Theorem 1 (:func:`jaxstop.bos.xi`, 0 unless
``params.xi_noise_var > 0``; the authors' code has none), and keeps the decision
table in the state. In every epoch ``n`` with ``N0 < n < N`` training stops when

* **C1**: ``bos.decide(table, n, running_mean) == ACTION_STOP`` (decision
  d1), ``running_mean`` = mean of the errors of epochs ``N0+1..n``; and
* **C2**: ``sigma_{t-1}([x, n / N]) >= sigma_{t-1}([x, 1]) / kappa``, with the
  posterior of the GP that chose ``x`` (the authors' code evaluates these stds
  right after the choice, too).

The incumbent ``y*`` is the lowest loss among *completed* evaluations (those
``report`` did not stop; a curve that ends before ``N`` counts as completed);
it is updated by every such evaluation, and is what ``info.incumbent`` returns.
Before the first completed evaluation ``y*_0`` is the worst error, 1 (the
paper's ``y*_0 = 0`` for accuracies), so nothing is stopped.

BOS works with errors in (0, 1). A loss ``v`` is mapped to
``e = (v - loss_lo) / (loss_hi - loss_lo)`` (identity by default: validation
errors) and clipped into ``[eps, 1 - eps]`` (``eps`` of the dtype); the
incumbent likewise into [0, 1]. Use ``loss_lo`` / ``loss_hi`` for other losses;
they only enter BOS, never the GP. A loss that maps outside [0, 1] (or is NaN) is
not silently absorbed: ``info.num_out_of_range`` counts such losses of the study
and ``info.ok`` is False once there was one (the stopping decisions after it rest
on clipped errors).

Cost inside a simulation
------------------------
The BOS solve (curve-GP fit, ``num_paths`` paths, backward induction) is the
expensive step. It is branched with ``lax.cond`` on ``epoch == N0``; under
``jax.vmap`` (many seeds) a plain ``lax.cond`` on a batched predicate would
become a ``select`` and run the solve at every epoch, so the branch is wrapped
in a custom batching rule that runs the vmapped solve for the whole batch
only when some member is at epoch ``N0`` (members stay in step, since every
job starts at epoch 0; a member whose curve ended just before ``N0`` can trigger
extra solves whose results are discarded). The GP fit in ``ask`` runs once per job.

Example:
    >>> import jax.numpy as jnp
    >>> from jaxstop.policies.bo_bos import bo_bos
    >>> cands = jnp.linspace(0.0, 1.0, 20)[:, None]
    >>> policy = bo_bos(cands, max_budget=50, max_evals=30, num_paths=1000)
    >>> p = policy.default_params()
    >>> float(p.kappa), float(p.k1_init), int(p.num_init)
    (2.0, 100.0, 6)
"""

from __future__ import annotations

import math
import numbers

import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import checks
from jaxstop.policies import _bo_bos_steps as _steps
from jaxstop.policies._base import Limits, Policy, build_policy
from jaxstop.policies._bo_bos_steps import BoBosInfo as BoBosInfo
from jaxstop.policies._bo_bos_steps import BoBosParams as BoBosParams
from jaxstop.policies._bo_bos_steps import BoBosState as BoBosState
from jaxstop.policies._bo_bos_steps import check_params_values

__all__ = ["BoBosInfo", "BoBosParams", "BoBosState", "bo_bos", "gp_ucb", "default_intermediate_epochs"]


# --------------------------------------------------------------------------------------
# Validation


def default_intermediate_epochs(max_budget: int) -> tuple:
    """Epochs 1 and ``round(k N / 5)``, k = 1..4, below ``N`` and distinct.

    The paper's choice (Appendix D): 1, 10, 20, 30, 40 for N = 50 and 1, 20, 40,
    60, 80 for N = 100.

    Example:
        >>> default_intermediate_epochs(50), default_intermediate_epochs(100)
        ((1, 10, 20, 30, 40), (1, 20, 40, 60, 80))
    """
    n = checks.positive_int(max_budget, "max_budget")
    eps = {1} | {int(math.floor(k * n / 5 + 0.5)) for k in range(1, 5)}
    return tuple(sorted(e for e in eps if 1 <= e < n))


def _check_epochs(epochs, n: int) -> tuple:
    try:
        seq = tuple(epochs)
    except TypeError as err:
        raise TypeError(f"intermediate_epochs must be a sequence of ints, got {type(epochs).__name__}") from err
    out = []
    for e in seq:
        if isinstance(e, (bool, np.bool_)) or not isinstance(e, numbers.Integral):
            raise TypeError(f"intermediate_epochs must hold ints, got {e!r}")
        if not 1 <= int(e) < n:
            raise ValueError(
                f"intermediate_epochs must lie in 1..N-1 = 1..{n - 1} (N = max_budget), got {int(e)}"
            )
        out.append(int(e))
    if len(set(out)) != len(out):
        raise ValueError(f"intermediate_epochs must be distinct, got {seq}")
    return tuple(sorted(out))


# --------------------------------------------------------------------------------------
# The policy


def _policy(
    candidates,
    *,
    max_budget,
    max_evals,
    n0,
    intermediate_epochs,
    early_stopping: bool,
    num_paths,
    num_bins,
    mode,
    curve_fit_steps,
    gp_fit_steps,
    defaults: dict,
    dtype,
) -> Policy:
    fdtype = jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)
    if not jnp.issubdtype(fdtype, jnp.floating):
        raise TypeError(f"dtype must be a floating dtype, got {fdtype}")
    cand = checks.float_array(candidates, "candidates", fdtype)
    checks.check_rank(cand, 2, "candidates", "with shape (num_configs, d)")
    if cand.shape[0] < 1 or cand.shape[1] < 1:
        raise ValueError(f"candidates must have at least one row and one column, got shape {cand.shape}")
    checks.check_unit_cube(cand, "candidates")
    N = checks.positive_int(max_budget, "max_budget", 2 if early_stopping else 1)
    max_evals = checks.positive_int(max_evals, "max_evals")
    if early_stopping:
        n0 = checks.positive_int(n0, "n0")
        if n0 >= N:
            raise ValueError(f"n0 (N0, epochs before the BOS solve) must be < max_budget (N) = {N}, got {n0}")
    inter = _check_epochs(
        default_intermediate_epochs(N) if intermediate_epochs is None else intermediate_epochs, N)
    num_paths = checks.positive_int(num_paths, "num_paths")
    num_bins = checks.positive_int(num_bins, "num_bins", 2)
    if mode not in ("corrected", "compat"):
        raise ValueError(f"mode must be 'corrected' or 'compat', got {mode!r}")
    curve_fit_steps = checks.positive_int(curve_fit_steps, "curve_fit_steps")
    gp_fit_steps = checks.positive_int(gp_fit_steps, "gp_fit_steps")
    check_params_values(defaults)
    cfg = _steps.make_config(cand, N=N, max_evals=max_evals, n0=n0, inter=inter, early_stopping=early_stopping,
                             num_paths=num_paths, num_bins=num_bins, mode=mode, curve_fit_steps=curve_fit_steps,
                             gp_fit_steps=gp_fit_steps, defaults=defaults, fdtype=fdtype)
    needs_report = early_stopping or len(inter) > 0
    return build_policy(cfg, init=_steps.init, ask=_steps.ask, report=_steps.report if needs_report else None,
                        tell=_steps.tell, default_params=_steps.default_params,
                        check_params=_steps.checked_params,
                        eager={"ask": _steps.ask_eager, "report": _steps.report_eager},
                        limits=Limits(cfg.cand.shape[0], max_evals))


_DEFAULTS = dict(
    kappa=2.0, k1_init=100.0, k1_gamma=0.95, k2=99.0, cost=1.0, xi_noise_var=0.0, xi_delta=0.1,
    beta_scale=0.2, beta_delta=0.1, loss_lo=0.0, loss_hi=1.0, num_init=6,
)


def bo_bos(
    candidates: ArrayLike,
    *,
    max_budget: int,
    max_evals: int,
    n0: int = 8,
    intermediate_epochs=None,
    num_paths: int = 100_000,
    num_bins: int = 99,
    mode: str = "corrected",
    curve_fit_steps: int = 300,
    gp_fit_steps: int = 20,
    kappa: float = 2.0,
    k1_init: float = 100.0,
    k1_gamma: float = 0.95,
    k2: float = 99.0,
    cost: float = 1.0,
    xi_noise_var: float = 0.0,
    xi_delta: float = 0.1,
    beta_scale: float = 0.2,
    beta_delta: float = 0.1,
    loss_lo: float = 0.0,
    loss_hi: float = 1.0,
    num_init: int = 6,
    dtype=None,
) -> Policy:
    """BO-BOS (Algorithm 1 of Dai et al., 2019) over a candidate table.

    See the module docstring for the surrogate, the acquisition, the
    intermediate observations, the stopping rule (C1 and C2) and the incumbent.
    Every job trains candidate ``job.config`` from epoch 0 up to ``N``
    (``job.budget = max_budget``); ``report`` may stop it after epoch ``n`` in
    ``N0 < n < N``. The study terminates after ``max_evals`` evaluations or when
    every candidate has been evaluated.

    Args:
        candidates: Configurations in the unit cube, shape (num_configs, d), d >= 1
            (e.g. ``table.configs`` of a :class:`jaxstop.sim.CurveTable`).
        max_budget: ``N``, the epochs of a full evaluation (static).
        max_evals: Most evaluations (static; sets the GP buffer capacity
            ``max_evals * (len(intermediate_epochs) + 1)``).
        n0: ``N0``, epochs observed before the BOS solve, ``1 <= n0 < N`` (8 in the paper).
        intermediate_epochs: Epochs in ``1..N-1`` whose losses enter the GP;
            default :func:`default_intermediate_epochs`.
        num_paths: Simulated paths per BOS solve (static; 100,000 in the paper).
        num_bins: Bins of the running-mean statistic (static; 99 as the
            authors' code).
        mode: ``"corrected"`` or ``"compat"`` (see :func:`jaxstop.bos.backward_induction`).
        curve_fit_steps: Adam steps of the learning-curve GP fit per start (static).
        gp_fit_steps: At most this many objective evaluations of the GP refit in every
            ``ask`` (:func:`jaxstop.gp.fit`'s ``steps``; static).
        kappa, k1_init, k1_gamma, k2, cost, xi_noise_var, xi_delta, beta_scale,
        beta_delta, loss_lo, loss_hi, num_init: Defaults of the numeric
            hyperparameters, see :class:`BoBosParams`; ``policy.default_params()``
            returns them and every call takes a params pytree instead.
        dtype: Floating dtype of the state (default: JAX's default float).

    Returns:
        A :class:`~jaxstop.policies.Policy` whose ``tell`` returns a :class:`BoBosInfo`.

    Raises:
        ValueError / TypeError: Naming the argument, for a bad shape or value.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> policy = bo_bos(jnp.linspace(0.0, 1.0, 20)[:, None], max_budget=50, max_evals=30)
        >>> state = policy.init(jax.random.key(0))
        >>> state.X.shape, state.table.actions.shape   # 30 x (5 + 1) GP rows; N - N0 = 42 BOS rows
        ((180, 2), (42, 99))
    """
    defaults = dict(kappa=kappa, k1_init=k1_init, k1_gamma=k1_gamma, k2=k2, cost=cost,
                    xi_noise_var=xi_noise_var, xi_delta=xi_delta, beta_scale=beta_scale,
                    beta_delta=beta_delta, loss_lo=loss_lo, loss_hi=loss_hi, num_init=num_init)
    return _policy(candidates, max_budget=max_budget, max_evals=max_evals, n0=n0,
                   intermediate_epochs=intermediate_epochs, early_stopping=True, num_paths=num_paths,
                   num_bins=num_bins, mode=mode, curve_fit_steps=curve_fit_steps,
                   gp_fit_steps=gp_fit_steps, defaults=defaults, dtype=dtype)


def gp_ucb(
    candidates: ArrayLike,
    *,
    max_budget: int,
    max_evals: int,
    intermediate_epochs=(),
    gp_fit_steps: int = 20,
    beta_scale: float = 0.2,
    beta_delta: float = 0.1,
    num_init: int = 6,
    dtype=None,
) -> Policy:
    """GP-UCB, the baseline of Dai et al. (2019): :func:`bo_bos` without early stopping.

    The same surrogate, acquisition, random start and incumbent as
    :func:`bo_bos`; every evaluation trains ``N`` epochs (or to the end of its
    curve). By default only the final observations ``[x, 1]`` enter the GP (the
    paper's GP-UCB), and ``report`` is ``None``; with ``intermediate_epochs``
    the policy records them as BO-BOS does.

    Args:
        candidates, max_budget, max_evals, gp_fit_steps, dtype: As in :func:`bo_bos`.
        intermediate_epochs: Epochs in ``1..N-1`` whose losses enter the GP (default none).
        beta_scale, beta_delta, num_init: Defaults of :class:`BoBosParams` (the
            stopping fields are unused).

    Returns:
        A :class:`~jaxstop.policies.Policy` with :class:`BoBosParams`.

    Example:
        >>> import jax.numpy as jnp
        >>> policy = gp_ucb(jnp.linspace(0.0, 1.0, 6)[:, None], max_budget=4, max_evals=6)
        >>> policy.report is None, int(policy.default_params().num_init)
        (True, 6)
    """
    defaults = dict(_DEFAULTS, beta_scale=beta_scale, beta_delta=beta_delta, num_init=num_init)
    return _policy(candidates, max_budget=max_budget, max_evals=max_evals, n0=None,
                   intermediate_epochs=intermediate_epochs, early_stopping=False, num_paths=1,
                   num_bins=2, mode="corrected", curve_fit_steps=1, gp_fit_steps=gp_fit_steps,
                   defaults=defaults, dtype=dtype)
