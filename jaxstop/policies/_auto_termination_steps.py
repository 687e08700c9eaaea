"""The pytrees and step functions of :func:`jaxstop.policies.auto_termination.auto_termination_bo`.

:class:`AutoTerminationParams`, :class:`AutoTerminationState` and :class:`AutoTerminationInfo`
are re-exported by :mod:`jaxstop.policies.auto_termination`, whose docstring describes the
algorithm; :class:`AutoTerminationConfig` is the static configuration its factory validates,
and ``init`` / ``ask`` / ``tell`` are the step functions
:func:`jaxstop.policies._base.build_policy` binds to it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop import gp
from jaxstop._src import gp_core as _gp_core, gp_fit as _gp_fit, regret_bound as _regret_bound
from jaxstop._src import checks as _checks
from jaxstop._src import termination as _termination
from jaxstop.policies._base import Incumbent, Job, Result, make_job, renamed_field

__all__ = ["AutoTerminationConfig", "AutoTerminationInfo", "AutoTerminationParams", "AutoTerminationState",
           "ask", "check_params", "default_params", "init", "tell"]

_LOCAL_SD = 0.05


class AutoTerminationParams(NamedTuple):
    """Numeric hyperparameters of :func:`auto_termination_bo` (a pytree; vmap over it).

    Attributes:
        fold_scores: Cross-validation fold scores of every table row, shape
            (num_configs, k); (num_configs, 0) or (0, 0) without CV.
        threshold_scale: Multiplier of the standard deviation of Eq. (9)-(10), () (1.0:
            the paper's ``Ours_0.21``; ``c / 0.21``: the authors' code's ``Ours_c``).
        threshold: Fixed part of the threshold in loss units, () (0 with CV).
        beta_scale: ``scale`` of :func:`jaxstop.regret.beta`, () (0.2).
        delta: ``delta`` of :func:`jaxstop.regret.beta`, () (0.1).
        threshold_variance: Variance factor ``v`` of a ``sqrt(v s^2)`` part of the
            threshold, () (0.0: none; 0.5 with ``threshold_scale = 0``: the ``Ours_0.5``
            of the paper's text, Sec. 4.1).
    """

    fold_scores: jax.Array
    threshold_scale: jax.Array
    threshold: jax.Array
    beta_scale: jax.Array
    delta: jax.Array
    threshold_variance: jax.Array = 0.0


class AutoTerminationState(NamedTuple):
    """State of :func:`auto_termination_bo`.

    Attributes:
        X: Evaluated configurations, shape (max_evals, d).
        y: Their losses, shape (max_evals,).
        config: Their table rows (-1 in cube mode), shape (max_evals,) int32.
        mask: Which rows of ``X`` / ``y`` are real with a finite loss, (max_evals,) bool.
        evaluated: Table rows evaluated so far, shape (num_configs,) bool ((0,) in cube mode).
        count: Number of evaluations told, int32 ().
        gp_params: GP hyperparameters of the last fit (standardised scale), the warm
            start of the next fit and the model of the next acquisition; with
            ``warping`` they carry the input warping from the start (the identity).
        gp_inv_hessian: The last fit's quasi-Newton inverse Hessian, shape (d + 3, d + 3),
            or (3 d + 3, 3 d + 3) with ``warping`` (:func:`jaxstop._src.gp_fit.raw_size`):
            the next fit's steps start with that curvature (zeros before the first fit: none).
        beta: ``beta`` of the last bound, ().
        key: The stream of the bound's random domain points (cube mode).
    """

    X: jax.Array
    y: jax.Array
    config: jax.Array
    mask: jax.Array
    evaluated: jax.Array
    count: jax.Array
    gp_params: gp.GPParams
    gp_inv_hessian: jax.Array
    beta: jax.Array
    key: jax.Array


class AutoTerminationInfo(NamedTuple):
    """Info of :func:`auto_termination_bo`.

    Attributes:
        terminate: ``criterion``, or the budget ``max_evals`` / the table is used up, bool ().
        incumbent: Table row of the lowest loss (-1 before the first finite loss and in
            cube mode), int32 ().
        incumbent_value: The lowest loss, () (``best_value`` is its deprecated alias).
        incumbent_x: Its configuration vector, shape (d,).
        bound: Regret upper bound of Eq. (8) in loss units, () (+inf when ``ok`` is False).
        threshold: The stopping threshold in loss units, ().
        criterion: ``(num_evaluations >= min_iterations) & (bound < threshold)``, bool ().
        ucb_min: Minimum UCB over the fitted points, loss units, ().
        lcb_min: Minimum LCB over the domain, loss units, ().
        num_fitted: Points in the GP fit, int32 ().
        num_evaluations: Evaluations told, int32 ().
        ok: Whether the GP fit and the bound are usable, bool ().
    """

    terminate: jax.Array
    incumbent: jax.Array
    incumbent_value: jax.Array
    incumbent_x: jax.Array
    bound: jax.Array
    threshold: jax.Array
    criterion: jax.Array
    ucb_min: jax.Array
    lcb_min: jax.Array
    num_fitted: jax.Array
    num_evaluations: jax.Array
    ok: jax.Array

    best_value = renamed_field("incumbent_value", "best_value")


class AutoTerminationConfig(NamedTuple):
    """The static configuration of :func:`auto_termination_bo` (validated by the factory)."""

    cube: bool
    num_configs: int
    d: int
    max_budget: int
    max_evals: int
    num_init: int
    min_iterations: int
    ucb: bool
    num_candidates: int
    num_uniform: int
    fit: _termination.FitConfig
    test_train_ratio: Any
    ddof: int
    cand: jax.Array
    folds: jax.Array
    threshold_scale: float
    threshold: float
    beta_scale: float
    delta: float
    fdtype: Any
    threshold_variance: float = 0.0


def default_params(cfg: AutoTerminationConfig) -> AutoTerminationParams:
    """The factory's :class:`AutoTerminationParams`."""
    f = lambda v: jnp.asarray(v, cfg.fdtype)  # noqa: E731
    return AutoTerminationParams(cfg.folds, f(cfg.threshold_scale), f(cfg.threshold), f(cfg.beta_scale),
                                 f(cfg.delta), f(cfg.threshold_variance))


def check_params(cfg: AutoTerminationConfig, params) -> AutoTerminationParams:
    """Checks the params' type and shapes; returns them in the policy's dtype."""
    if not isinstance(params, AutoTerminationParams):
        raise TypeError(f"params must be an AutoTerminationParams (see policy.default_params()), "
                        f"got {type(params).__name__}")
    folds_shape = tuple(cfg.folds.shape)
    if tuple(jnp.shape(params.fold_scores)) != folds_shape:
        raise ValueError(f"params.fold_scores must have shape {folds_shape} like the factory's fold_scores, "
                         f"got {tuple(jnp.shape(params.fold_scores))}")
    for name in ("threshold_scale", "threshold", "beta_scale", "delta", "threshold_variance"):
        if jnp.ndim(getattr(params, name)) != 0:
            raise ValueError(f"params.{name} must be a scalar, got shape {jnp.shape(getattr(params, name))}")
    if all(_checks.is_concrete(a) for a in jax.tree_util.tree_leaves(params)):
        # the factory's rules for the same values (inside jit the values are the caller's)
        for name in ("threshold_scale", "threshold", "threshold_variance"):
            _checks.nonneg_float(getattr(params, name), f"params.{name}")
        _checks.nonneg_float(params.beta_scale, "params.beta_scale", positive=True)
        _checks.nonneg_float(params.delta, "params.delta", positive=True, high=1.0)
        if not np.all(np.isfinite(np.asarray(params.fold_scores))):
            raise ValueError("params.fold_scores must be finite")
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, cfg.fdtype), params)


def _dim_mask(cfg: AutoTerminationConfig) -> jax.Array:
    return jnp.asarray(np.ones((cfg.d,), bool))


def init(cfg: AutoTerminationConfig, key, params) -> AutoTerminationState:
    """``init(key, params=None) -> state``: an empty evaluation buffer, the GP's default
    hyperparameters and the bound's key stream."""
    max_evals, d, fdtype = cfg.max_evals, cfg.d, cfg.fdtype
    return AutoTerminationState(
        jnp.zeros((max_evals, d), fdtype),
        jnp.zeros((max_evals,), fdtype),
        jnp.full((max_evals,), -1, jnp.int32),
        jnp.zeros((max_evals,), bool),
        jnp.zeros((cfg.num_configs,), bool),
        jnp.zeros((), jnp.int32),
        _termination.default_params(d, _dim_mask(cfg), fdtype, cfg.fit.warping),
        jnp.zeros((_gp_fit.raw_size(d, cfg.fit.warping),) * 2, fdtype),  # no curvature yet: a cold first fit
        jnp.zeros((), fdtype),
        key,
    )


def _incumbent_row(state: AutoTerminationState):
    """Buffer row of the lowest finite loss (ties: the earlier evaluation), whether there is
    one, and that loss."""
    keyed = jnp.where(state.mask, state.y, jnp.inf)
    i = jnp.argmin(keyed)
    has = state.mask[i]
    return i, has, keyed[i]


def _scores(cfg: AutoTerminationConfig, state: AutoTerminationState, Xq):
    """Acquisition scores (larger is better) at ``Xq`` from the state's GP."""
    fit = cfg.fit
    _, tmask, _, Xt, z, _, _ = _termination.standardized_top(state.X, state.y, state.mask, fit.capacity,
                                                             fit.fraction, fit.min_points)
    post = _gp_core.posterior(state.gp_params, Xt, z, tmask)
    mu, var = _gp_core.predict_chunked(post, Xq, fit.chunk_size)
    sd = jnp.sqrt(var)
    if cfg.ucb:
        s = -(mu - jnp.sqrt(jnp.maximum(state.beta, 0)) * sd)
    else:
        s = _regret_bound.ei(mu, sd, jnp.min(jnp.where(tmask, z, jnp.inf)))
    usable = post.ok & jnp.any(tmask)
    return jnp.where(usable & jnp.isfinite(s), s, -jnp.inf)


def ask(cfg: AutoTerminationConfig, key, state: AutoTerminationState, params):
    """``ask(key, state, params=None) -> (job, state)``: a random configuration for the first
    ``num_init`` jobs (or when the GP is unusable), else the acquisition's maximiser (EI, or
    the lowest LCB) over the unevaluated rows (table) or ``num_candidates`` random points
    around the incumbent (cube); every job trains to ``max_budget``."""
    d, fdtype = cfg.d, cfg.fdtype
    k_rand, k_unif, k_local = jax.random.split(key, 3)
    if cfg.cube:
        x_rand = jax.random.uniform(k_rand, (d,), fdtype)
        i, has, _ = _incumbent_row(state)
        centre = jnp.where(has, state.X[i], 0.5)
        noise = jax.random.normal(k_local, (cfg.num_candidates - cfg.num_uniform, d), fdtype)
        local = jnp.clip(centre[None, :] + _LOCAL_SD * noise, 0, 1)
        Xq = jnp.concatenate([jax.random.uniform(k_unif, (cfg.num_uniform, d), fdtype), local])

        def model():
            s = _scores(cfg, state, Xq)
            j = jnp.argmax(s)
            return jnp.where(jnp.isfinite(s[j]), Xq[j], x_rand)

        x = jax.lax.cond(state.count < cfg.num_init, lambda: x_rand, model)
        return make_job(-1, x, cfg.max_budget), state

    # Table mode: a uniform unevaluated row (max of uniforms), or the acquisition's best.
    u = jnp.where(state.evaluated, -1, jax.random.uniform(k_rand, (cfg.num_configs,), fdtype))
    c_rand = jnp.argmax(u)

    def model():
        s = jnp.where(state.evaluated, -jnp.inf, _scores(cfg, state, cfg.cand))
        j = jnp.argmax(s)
        return jnp.where(jnp.isfinite(s[j]), j, c_rand)

    c = jax.lax.cond(state.count < cfg.num_init, lambda: c_rand, model).astype(jnp.int32)
    return make_job(c, cfg.cand[c], cfg.max_budget), state


def tell(cfg: AutoTerminationConfig, state: AutoTerminationState, job: Job, result: Result, params):
    """``tell(state, job, result, params=None) -> (state, AutoTerminationInfo)``: stores the
    evaluation (a non-finite loss is masked out), refits the GP warm-started and evaluates
    the regret bound of Eq. (8); terminates when ``bound < threshold`` after
    ``min_iterations`` evaluations (Eq. 10), or when ``max_evals`` / the table is used up."""
    max_evals, num_configs, d, fdtype = cfg.max_evals, cfg.num_configs, cfg.d, cfg.fdtype
    n0 = state.count
    write = n0 < max_evals
    slot = jnp.minimum(n0, max_evals - 1)
    value = jnp.asarray(result.value, fdtype)
    if cfg.cube:
        c = jnp.asarray(-1, jnp.int32)
        x = jnp.asarray(job.x, fdtype)
        evaluated = state.evaluated
    else:
        c = jnp.clip(jnp.asarray(job.config, jnp.int32), 0, num_configs - 1)
        x = cfg.cand[c]
        evaluated = state.evaluated.at[c].set(state.evaluated[c] | write)
    real = write & jnp.isfinite(value)
    X = state.X.at[slot].set(jnp.where(write, x, state.X[slot]))
    y = state.y.at[slot].set(jnp.where(write, jnp.where(real, value, 0), state.y[slot]))
    config = state.config.at[slot].set(jnp.where(write, c, state.config[slot]))
    mask = state.mask.at[slot].set(jnp.where(write, real, state.mask[slot]))
    count = n0 + write.astype(jnp.int32)

    fb = _termination.fit_and_bound(
        jax.random.fold_in(state.key, count), X, y, mask, state.gp_params, cfg.cand, _dim_mask(cfg),
        jnp.asarray(d, fdtype), params.delta, params.beta_scale, cfg.fit, state.gp_inv_hessian,
    )
    keep = fb.fit_info.finite
    gp_params = jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), fb.params, state.gp_params)
    inv_hessian = jnp.where(keep, fb.inv_hessian, state.gp_inv_hessian)
    state = AutoTerminationState(X, y, config, mask, evaluated, count, gp_params, inv_hessian,
                                 jnp.where(keep, fb.beta, state.beta), state.key)

    i, has, best = _incumbent_row(state)
    inc = Incumbent(best, jnp.where(has, config[i], -1).astype(jnp.int32),
                    jnp.where(has, X[i], jnp.zeros((d,), fdtype)))
    thr = params.threshold
    if cfg.folds.shape[1] > 0:
        row = params.fold_scores[jnp.clip(inc.config, 0, num_configs - 1)]
        real = jnp.ones(row.shape, bool)
        cv = _termination.cv_threshold(row, real, cfg.test_train_ratio, cfg.ddof)
        std, _ = _termination.cv_std(row, real, cfg.ddof)
        part = _termination.scaled_threshold(cv, std, params.threshold_scale, params.threshold_variance)
        thr = thr + jnp.where(has, part, 0)
    rb = fb.bound
    criterion = (count >= cfg.min_iterations) & (rb.bound < thr)
    exhausted = count >= max_evals
    if not cfg.cube:
        exhausted = exhausted | jnp.all(evaluated)
    info = AutoTerminationInfo(
        criterion | exhausted, inc.config, inc.value, inc.x, rb.bound, thr,
        criterion, rb.ucb_min, rb.lcb_min, fb.num_top.astype(jnp.int32), count, rb.ok,
    )
    return state, info
