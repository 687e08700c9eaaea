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
bound at full training, ``mu([x, 1]) - w_t sigma([x, 1])`` (losses are
minimised; the paper maximises accuracy with the upper bound; ties, such as the flat
prior of a first pick with ``num_init = 0``, go to a uniform one of them). The width
``w_t`` is a named choice (``beta=``):

* ``"paper"`` (default): ``w_t = sqrt(beta_scale * beta_t)`` with Theorem 1's
  ``beta_t = 2 log(|D| t^2 pi^2 / (6 delta))`` (also Lemma 1; Srinivas et al.,
  2010), ``delta = beta_delta`` (0.1) and ``beta_scale = 1``: the theorem as
  stated, under the square root of Algorithm 1, line 2. The theory takes a
  finite domain ``D`` of inputs ``z = [x, n]`` (Section 2.1, Section 4: "we
  assume that the underlying domain D is discrete"); for a candidate table it is
  finite and ``|D| = M N``: the ``M`` candidates times the ``N`` epoch values
  ``n = 1..N`` of ``z``, over all of which Lemma 1 holds.
* ``"authors"``: the released code (``helper_funcs.py``,
  ``UtilityFunction._ucb`` with ``use_fixed_kappa=False`` and
  ``kappa_scale=0.2``, as ``run_bo_bos.py`` calls it):
  ``mean + (kappa_scale * d * np.log(2 * iteration)) * std``. So
  ``w_t = beta_scale * d_z log(2 t)`` with ``beta_scale = 0.2`` and ``d_z = d + 1``
  (the code takes ``d`` after appending the column of ``n / N``). The factor
  multiplies ``sigma`` itself, not under a square root (the code's comment
  attributes it to high-dimensional BO, whose ``beta_t`` is used under one).

Both take ``t`` as the BO iteration of Algorithm 1, which starts after the
initial points: ``t = count - num_init + 1`` (the code's first acquisition after
its initial points passes ``iteration=1``). The first ``num_init`` evaluations
are uniform draws among the unevaluated candidates and are trained in full, as
in the authors' code (their initial points are never stopped). A candidate is
evaluated at most once (an early-stopped one too). ``sigma`` is the latent
(noise-free) posterior std of the standardised losses.

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
table in the state. ``t`` excludes the ``num_init`` initial points, in all three
schedules (``beta_t``, ``K_{1,t}``, ``xi_t``): it is Algorithm 1's loop index, the
released code's ``bo_iteration + 1`` (``run_BOS``: "iteration of BO, starting from
0 (after initialization)", ``K1 = K1_init / gamma ** bo_iteration``). Lemma 7's
union bound behind ``xi_t`` runs over the ``t - 1`` earlier outputs of which
``y*_{t-1}`` is the best; with the initial points in ``y*`` (Appendix D) a strict
reading would count ``num_init + t - 1`` of them, a slightly larger ``xi_t``. In every
epoch ``n`` with ``N0 < n < N`` training stops when

* **C1**: ``bos.decide(table, n, s_n) == ACTION_STOP`` (decision d1), with the
  summary statistic ``s_n`` of :func:`jaxstop.bos.summary_statistic` (``statistic=``):
  the mean error of epochs ``1..n`` (``"all_epochs"``, Section 3.2:
  ``sum_{n'=1}^{n} y_{t,n'} / n``; the default with ``mode="corrected"``) or of
  epochs ``N0+1..n`` (``"after_n0"``, the released code; the default with
  ``mode="compat"``), the same statistic the table is solved for; and
* **C2**: ``sigma_{t-1}([x, n / N]) >= sigma_{t-1}([x, 1]) / kappa``, with the
  posterior of the GP that chose ``x`` (the authors' code evaluates these stds
  right after the choice, too).

The incumbent ``y*`` (``incumbent=``) is the BOS threshold and what
``info.incumbent`` returns:

* ``"all"`` (default): the lowest ``y_t`` over *all* evaluations, the initial
  points and early-stopped ones included, where an evaluation stopped after
  ``n_t`` epochs contributes its observed ``y_t = y_{t,n_t}`` (Section 3.2:
  ``y*_{t-1} = max_{t' < t} y_{t'}``; Appendix D; the released code's ``y_max``
  also runs over every evaluation).
* ``"completed"``: only evaluations ``report`` did not stop (a curve that ends
  before ``N`` counts as completed).

Before the first counted evaluation ``y*_0`` is the worst error, 1 (the
paper's ``y*_0 = 0`` for accuracies), so nothing is stopped. (With intermediate
observations the released code updates ``y_max`` with the last *row* appended,
which is then an intermediate epoch's value rather than ``y_t``; that slip is not
reproduced.)

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
become a ``select`` and run the solve at every epoch, so the branch is the
package's gated branch (a custom batching rule, also used by the halving family's
round decisions) that runs the vmapped solve for the whole batch
only when some member is at epoch ``N0`` (members stay in step, since every
job starts at epoch 0; a member whose curve ended just before ``N0`` can trigger
extra solves whose results are discarded). The GP fit in ``ask`` runs once per job.

Example:
    >>> import jax.numpy as jnp
    >>> from jaxstop.policies.bo_bos import bo_bos
    >>> cands = jnp.linspace(0.0, 1.0, 20)[:, None]
    >>> policy = bo_bos(cands, max_budget=50, max_evals=30, num_paths=1000)
    >>> p = policy.default_params()
    >>> float(p.kappa), float(p.k1_init), int(p.num_init), float(p.beta_scale)
    (2.0, 100.0, 6, 1.0)
    >>> round(float(bo_bos(cands, max_budget=50, max_evals=30, beta="authors").default_params().beta_scale), 6)
    0.2
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop import bos
from jaxstop._src import checks
from jaxstop.policies import _bo_bos_steps as _steps
from jaxstop.policies._base import Limits, Policy, build_policy
from jaxstop.policies._bo_bos_steps import BoBosInfo as BoBosInfo
from jaxstop.policies._bo_bos_steps import BoBosParams as BoBosParams
from jaxstop.policies._bo_bos_steps import BoBosState as BoBosState

__all__ = ["BoBosInfo", "BoBosParams", "BoBosState", "bo_bos", "gp_ucb", "default_intermediate_epochs"]


# --------------------------------------------------------------------------------------
# Validation


def _check_value(name: str, value, *, lo=None, hi=None, lo_open=True, hi_open=False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    v = float(value)
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ValueError(f"{name} must be {'>' if lo_open else '>='} {lo}, got {value!r}")
    if hi is not None and (v >= hi if hi_open else v > hi):
        raise ValueError(f"{name} must be {'<' if hi_open else '<='} {hi}, got {value!r}")
    return v


_PARAM_RULES = {
    # name: (lo, hi, lo_open, hi_open)
    "kappa": (0.0, None, True, False),
    "k1_init": (0.0, None, True, False),
    "k1_gamma": (0.0, 1.0, True, False),
    "k2": (0.0, None, True, False),
    "cost": (0.0, None, False, False),
    "xi_noise_var": (0.0, None, False, False),
    "xi_delta": (0.0, 1.0, True, True),
    "beta_scale": (0.0, None, False, False),
    "beta_delta": (0.0, 1.0, True, False),
}


def _check_params_values(values: dict) -> None:
    """Checks the hyperparameters given as Python numbers, naming the first bad one."""
    for name, (lo, hi, lo_open, hi_open) in _PARAM_RULES.items():
        _check_value(name, values[name], lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open)
    _check_value("loss_lo", values["loss_lo"])
    _check_value("loss_hi", values["loss_hi"])
    if not values["loss_hi"] > values["loss_lo"]:
        raise ValueError(f"loss_hi must exceed loss_lo, got loss_lo={values['loss_lo']!r}, "
                         f"loss_hi={values['loss_hi']!r}")
    n = values["num_init"]
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"num_init must be an int >= 0, got {n!r}")


def _check_params(params) -> None:
    """Checks the params' type and shapes, and their values when concrete (the values of
    traced params are the caller's)."""
    if not isinstance(params, BoBosParams):
        raise TypeError(f"params must be a BoBosParams (see policy.default_params()), got {type(params).__name__}")
    # shapes are static: checked under jit / vmap too (a batch axis without vmap would broadcast)
    for name, a in zip(BoBosParams._fields, params):
        if jnp.ndim(a) != 0:
            raise ValueError(f"params.{name} must be a scalar, got shape {jnp.shape(a)}; "
                             "for a batch of params, jax.vmap over sim.run")
    leaves = jax.tree_util.tree_leaves(params)
    if not all(checks.is_concrete(a) for a in leaves):
        return
    values = {name: np.asarray(a).item() for name, a in zip(BoBosParams._fields, params)}
    _check_params_values(values)



def _checked_params(cfg, params) -> BoBosParams:
    """:func:`_check_params`, returning the params."""
    _check_params(params)
    return params


_BETAS = ("paper", "authors")
_INCUMBENTS = ("all", "completed")


def _check_choice(value, name: str, choices: tuple) -> str:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    return value


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
    beta,
    incumbent,
    statistic,
) -> Policy:
    fdtype = checks.compute_dtype(dtype)
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
    beta = _check_choice(beta, "beta", _BETAS)
    incumbent = _check_choice(incumbent, "incumbent", _INCUMBENTS)
    statistic = bos.resolve_statistic(statistic, mode)
    defaults = dict(defaults)
    if defaults["beta_scale"] is None:  # each width's own: Theorem 1 as stated, the code's kappa_scale
        defaults["beta_scale"] = 1.0 if beta == "paper" else 0.2
    curve_fit_steps = checks.positive_int(curve_fit_steps, "curve_fit_steps")
    gp_fit_steps = checks.positive_int(gp_fit_steps, "gp_fit_steps")
    _check_params_values(defaults)
    cfg = _steps.make_config(cand, N=N, max_evals=max_evals, n0=n0, inter=inter, early_stopping=early_stopping,
                             num_paths=num_paths, num_bins=num_bins, mode=mode, curve_fit_steps=curve_fit_steps,
                             gp_fit_steps=gp_fit_steps, defaults=defaults, fdtype=fdtype, beta=beta,
                             incumbent=incumbent, statistic=statistic)
    needs_report = early_stopping or len(inter) > 0
    return build_policy(cfg, init=_steps.init, ask=_steps.ask, report=_steps.report if needs_report else None,
                        tell=_steps.tell, default_params=_steps.default_params,
                        check_params=_checked_params,
                        eager={"ask": _steps.ask_eager, "report": _steps.report_eager},
                        limits=Limits(cfg.cand.shape[0], max_evals, None, N))


_DEFAULTS = dict(
    kappa=2.0, k1_init=100.0, k1_gamma=0.95, k2=99.0, cost=1.0, xi_noise_var=0.0, xi_delta=0.1,
    beta_scale=None, beta_delta=0.1, loss_lo=0.0, loss_hi=1.0, num_init=6,
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
    beta: str = "paper",
    incumbent: str = "all",
    statistic: str | None = None,
    curve_fit_steps: int = 300,
    gp_fit_steps: int = 20,
    kappa: float = 2.0,
    k1_init: float = 100.0,
    k1_gamma: float = 0.95,
    k2: float = 99.0,
    cost: float = 1.0,
    xi_noise_var: float = 0.0,
    xi_delta: float = 0.1,
    beta_scale: float | None = None,
    beta_delta: float = 0.1,
    loss_lo: float = 0.0,
    loss_hi: float = 1.0,
    num_init: int = 6,
    dtype=None,
) -> Policy:
    """BO-BOS (Algorithm 1 of Dai et al., 2019) over a candidate table.

    See the module docstring for the surrogate, the acquisition, the
    intermediate observations, the stopping rule (C1 and C2) and the incumbent.
    The defaults are the paper's main method: Theorem 1's ``beta_t``
    (``beta="paper"``), the incumbent over all evaluations (``incumbent="all"``)
    and the statistic of Section 3.2 (``mode="corrected"``, ``statistic="all_epochs"``);
    ``beta="authors"``, ``mode="compat"`` (whose statistic is ``"after_n0"``) and
    ``k1_gamma=0.99`` give the released code's choices.
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
        n0: ``N0``, epochs observed before the BOS solve, ``1 <= n0 < N`` (8: the
            paper's experiments with ``N = 50``, Appendix B; it gives none for other ``N``).
        intermediate_epochs: Epochs in ``1..N-1`` whose losses enter the GP;
            default :func:`default_intermediate_epochs`.
        num_paths: Simulated paths per BOS solve (static; 100,000 in the paper).
        num_bins: Bins of the running-mean statistic (static; 99: the authors'
            code's grid ``np.linspace(0, 1, 100)``, Appendix D's "grid size ... 100").
        mode: ``"corrected"`` (the paper's BOS rules) or ``"compat"`` (the released
            code's; see :func:`jaxstop.bos.backward_induction`).
        beta: GP-UCB's width, ``"paper"`` (Theorem 1, ``sqrt(beta_t) sigma``) or
            ``"authors"`` (the released code, ``0.2 d log(2t) sigma``); see the module
            docstring.
        incumbent: ``"all"`` (the paper: the best ``y_t`` of every evaluation,
            early-stopped ones included) or ``"completed"`` (evaluations not stopped).
        statistic: BOS summary statistic, ``"all_epochs"`` (Section 3.2: mean error of
            epochs ``1..n``), ``"after_n0"`` (released code: epochs ``N0+1..n``) or
            ``None``: the mode's (:func:`jaxstop.bos.resolve_statistic`).
        curve_fit_steps: Adam steps of the learning-curve GP fit per start (static).
        gp_fit_steps: At most this many objective evaluations of the GP refit in every
            ``ask`` (:func:`jaxstop.gp.fit`'s ``steps``; static).
        kappa, k1_init, k1_gamma, k2, cost, xi_noise_var, xi_delta, beta_scale,
        beta_delta, loss_lo, loss_hi, num_init: Defaults of the numeric
            hyperparameters, see :class:`BoBosParams`; ``policy.default_params()``
            returns them and every call takes a params pytree instead.
            ``beta_scale=None`` is the chosen width's own: 1 for ``"paper"``, 0.2 for
            ``"authors"``.
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
                   gp_fit_steps=gp_fit_steps, defaults=defaults, dtype=dtype, beta=beta,
                   incumbent=incumbent, statistic=statistic)


def gp_ucb(
    candidates: ArrayLike,
    *,
    max_budget: int,
    max_evals: int,
    intermediate_epochs=(),
    gp_fit_steps: int = 20,
    beta: str = "paper",
    beta_scale: float | None = None,
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
        beta: GP-UCB's width, ``"paper"`` (Theorem 1) or ``"authors"`` (the released
            code), as in :func:`bo_bos`.
        beta_scale, beta_delta, num_init: Defaults of :class:`BoBosParams` (the
            stopping fields are unused; ``beta_scale=None``: 1 for ``"paper"``, 0.2 for
            ``"authors"``).

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
                   defaults=defaults, dtype=dtype, beta=beta, incumbent="all", statistic=None)
