"""The state of BO-BOS / GP-UCB and their step functions (:mod:`jaxstop.policies.bo_bos`).

:class:`BoBosParams`, :class:`BoBosState` and :class:`BoBosInfo` are the pytrees the
steps consume and produce (re-exported by :mod:`jaxstop.policies.bo_bos`);
:func:`check_params` validates a params pytree; :func:`build_policy` closes
``init`` / ``ask`` / ``report`` / ``tell`` over a configuration that
:mod:`jaxstop.policies.bo_bos` has validated. The algorithm and its cost are described in
the docstring of :mod:`jaxstop.policies.bo_bos`.
"""

from __future__ import annotations

import math
import numbers
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import custom_batching, lax

from jaxstop import bos, gp
from jaxstop._src import checks, regret_bound, schedules
from jaxstop.policies._base import Job, Policy, Result, make_job


class BoBosParams(NamedTuple):
    """Numeric hyperparameters of :func:`bo_bos` / :func:`gp_ucb` (a pytree; vmap over it).

    Attributes:
        kappa: ``kappa`` of C2, > 0 (2 in the paper), ().
        k1_init: ``K_{1,1}``, > 0 (100), ().
        k1_gamma: ``K_{1,t} = K_{1,t-1} / gamma``, in (0, 1] (0.95), ().
        k2: ``K_2``, > 0 (99), ().
        cost: Cost of one more epoch ``c_{d_0}``, >= 0 (1), ().
        xi_noise_var: ``sigma^2`` of ``xi_t`` (Theorem 1), >= 0 (0: ``xi_t = 0``), ().
        xi_delta: ``delta''`` of ``xi_t``, in (0, 1) (0.1), ().
        beta_scale: Multiplier of ``beta_t``, >= 0 (0.2), ().
        beta_delta: ``delta`` of ``beta_t``, in (0, 1] (0.1), ().
        loss_lo: Loss mapped to error 0 for BOS (0), ().
        loss_hi: Loss mapped to error 1 for BOS, > ``loss_lo`` (1), ().
        num_init: Uniform random evaluations before the model is used, >= 0 (6), int32 ().
    """

    kappa: jax.Array
    k1_init: jax.Array
    k1_gamma: jax.Array
    k2: jax.Array
    cost: jax.Array
    xi_noise_var: jax.Array
    xi_delta: jax.Array
    beta_scale: jax.Array
    beta_delta: jax.Array
    loss_lo: jax.Array
    loss_hi: jax.Array
    num_init: jax.Array


class BoBosState(NamedTuple):
    """State of :func:`bo_bos` / :func:`gp_ucb`.

    ``M`` candidates of dimension ``d``, ``N = max_budget``, capacity
    ``C = max_evals * (K + 1)`` for ``K`` intermediate epochs; the observations
    of evaluation ``i`` occupy rows ``i (K + 1) .. i (K + 1) + K`` (intermediate
    epochs in order, then the final one).

    Attributes:
        X: GP inputs ``[x, n / N]``, shape (C, d + 1).
        y: Observed losses, shape (C,).
        mask: Which rows are real, shape (C,) bool.
        gp_params: The GP hyperparameters of the last fit (warm start of the next).
        evaluated: Candidates evaluated so far, shape (M,) bool.
        count: Evaluations told so far, int32 ().
        best_value: Incumbent loss ``y*`` (lowest completed; inf before), ().
        best_config: Its candidate index (-1 before), int32 ().
        num_stopped: Evaluations stopped early so far, int32 ().
        config: Candidate of the current job, int32 ().
        model_based: Whether the current job was chosen by the LCB, bool ().
        bos_active: Whether the current job may be stopped, bool ().
        sigma: Posterior std at ``[x, n / N]`` for n = 1..N of the current job
            (standardised units), shape (N,).
        curve: Losses of the current job after each epoch (NaN before), shape (N,).
        run_sum: Sum of the current job's errors of epochs ``N0+1..n``, ().
        table: The current job's BOS :class:`~jaxstop.bos.DecisionTable` (rows
            ``N - N0``; zero rows for :func:`gp_ucb`).
        table_ready: Whether ``table`` was solved for the current job, bool ().
        k1: ``K_{1,t}`` of the current job, ().
        xi: ``xi_t`` of the current job, ().
        best_error: Incumbent error (in [0, 1]) given to BOS for the current job, ().
        bos_key: PRNG key of the current job's BOS solve (the state owns this stream).
    """

    X: jax.Array
    y: jax.Array
    mask: jax.Array
    gp_params: gp.GPParams
    evaluated: jax.Array
    count: jax.Array
    best_value: jax.Array
    best_config: jax.Array
    num_stopped: jax.Array
    config: jax.Array
    model_based: jax.Array
    bos_active: jax.Array
    sigma: jax.Array
    curve: jax.Array
    run_sum: jax.Array
    table: bos.DecisionTable
    table_ready: jax.Array
    k1: jax.Array
    xi: jax.Array
    best_error: jax.Array
    bos_key: jax.Array


class BoBosInfo(NamedTuple):
    """Info of :func:`bo_bos` / :func:`gp_ucb` after each evaluation.

    Attributes:
        terminate: ``max_evals`` evaluations done or every candidate evaluated, bool ().
        incumbent: Candidate with the lowest completed loss (-1 before), int32 ().
        best_value: Its loss, ().
        stopped: Whether this evaluation was stopped early, bool ().
        epoch: Epochs it trained, int32 ().
        model_based: Whether it was chosen by the LCB (not at random), bool ().
        bo_iteration: Its BO iteration ``t`` (``<= 0`` for the random start), int32 ().
        k1: ``K_{1,t}`` used for it, ().
    """

    terminate: jax.Array
    incumbent: jax.Array
    best_value: jax.Array
    stopped: jax.Array
    epoch: jax.Array
    model_based: jax.Array
    bo_iteration: jax.Array
    k1: jax.Array


# --------------------------------------------------------------------------------------
# A branch that stays a branch under vmap


def _gated(fn):
    """``lambda pred, operand, fallback: fn(operand) if pred else fallback``.

    Unbatched it is a ``lax.cond``. Under ``vmap`` a ``lax.cond`` on a batched
    predicate becomes a ``select`` that evaluates ``fn`` for every member at
    every call; here the batching rule evaluates the vmapped ``fn`` for the whole
    batch only when *some* member's predicate holds (a ``lax.cond`` on
    ``any(pred)``, gated the same way again under an enclosing vmap) and keeps
    ``fallback`` for the others.
    """

    @custom_batching.custom_vmap
    def run(pred, operand, fallback):
        return lax.cond(pred, fn, lambda _: fallback, operand)

    @run.def_vmap
    def _rule(axis_size, in_batched, pred, operand, fallback):
        pb, ob, fb = in_batched

        def bcast(a, batched):
            return a if batched else jnp.broadcast_to(a, (axis_size,) + jnp.shape(a))

        pred = bcast(pred, pb)
        operand = jax.tree.map(bcast, operand, ob)
        fallback = jax.tree.map(bcast, fallback, fb)
        out = _gated(jax.vmap(fn))(jnp.any(pred), operand, fallback)

        def pick(o, f):
            return jnp.where(jnp.reshape(pred, pred.shape + (1,) * (o.ndim - 1)), o, f)

        out = jax.tree.map(pick, out, fallback)
        return out, jax.tree.map(lambda _: True, out)

    return run


# --------------------------------------------------------------------------------------
# Validation of the params


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


def check_params_values(values: dict) -> None:
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


def check_params(params) -> None:
    """Checks concrete params (skipped when any leaf is traced)."""
    if not isinstance(params, BoBosParams):
        raise TypeError(f"params must be a BoBosParams (see policy.default_params()), got {type(params).__name__}")
    leaves = jax.tree_util.tree_leaves(params)
    if not all(checks.is_concrete(a) for a in leaves):
        return
    for name, a in zip(BoBosParams._fields, params):
        if np.ndim(a) != 0:
            raise ValueError(f"params.{name} must be a scalar, got shape {np.shape(a)}")
    values = {name: np.asarray(a).item() for name, a in zip(BoBosParams._fields, params)}
    check_params_values(values)


# --------------------------------------------------------------------------------------
# The policy


def build_policy(
    cand: jax.Array,
    *,
    N: int,
    max_evals: int,
    n0: int | None,
    inter: tuple,
    early_stopping: bool,
    num_paths: int,
    num_bins: int,
    mode: str,
    curve_fit_steps: int,
    gp_fit_steps: int,
    defaults: dict,
    fdtype,
) -> Policy:
    """The policy on validated arguments (see :func:`jaxstop.policies.bo_bos.bo_bos`)."""
    M, d = cand.shape
    K = len(inter)
    cap = max_evals * (K + 1)
    T = N - n0 if early_stopping else 0
    n0_ = n0 if early_stopping else 0
    inter_np = np.asarray(inter, np.int32)
    fid = jnp.arange(1, N + 1, dtype=fdtype) / N
    cand_final = jnp.concatenate([cand, jnp.ones((M, 1), fdtype)], axis=1)  # [x, N / N]
    eps = float(jnp.finfo(fdtype).eps)
    needs_report = early_stopping or K > 0

    def default_params() -> BoBosParams:
        v = {k: jnp.asarray(defaults[k], fdtype) for k in BoBosParams._fields if k != "num_init"}
        return BoBosParams(**v, num_init=jnp.asarray(defaults["num_init"], jnp.int32))

    def empty_table() -> bos.DecisionTable:
        z = lambda shape, dt=fdtype: jnp.zeros(shape, dt)  # noqa: E731
        return bos.DecisionTable(
            actions=z((T, num_bins), jnp.int32),
            losses=z((T, num_bins, 3)),
            prob=z((T, num_bins)),
            counts=z((T, num_bins), jnp.int32),
            edges=z((num_bins + 1,)),
            first_epoch=jnp.asarray(n0_ + 1, jnp.int32),
            num_valid=jnp.zeros((), jnp.int32),
            dropped_variance=z(()),
        )

    def to_error(v, params):
        e = (v - params.loss_lo) / (params.loss_hi - params.loss_lo)
        return jnp.clip(e, eps, 1 - eps)

    def solve(operand):
        key, prefix, best_error, k1, k2, cost, xi = operand
        table = bos.solve(key, prefix, best_error, N, k1, k2, cost, num_paths=num_paths, num_bins=num_bins,
                          mode=mode, xi=xi, fit_steps=curve_fit_steps)
        return jax.tree.map(lambda a, b: a.astype(b.dtype), table, empty_table())

    gated_solve = _gated(solve)

    def _init(key, params):
        return BoBosState(
            X=jnp.zeros((cap, d + 1), fdtype),
            y=jnp.zeros((cap,), fdtype),
            mask=jnp.zeros((cap,), bool),
            gp_params=gp.params(1.0, [0.5] * (d + 1), 1e-2, 0.0, dtype=fdtype),
            evaluated=jnp.zeros((M,), bool),
            count=jnp.zeros((), jnp.int32),
            best_value=jnp.asarray(jnp.inf, fdtype),
            best_config=jnp.asarray(-1, jnp.int32),
            num_stopped=jnp.zeros((), jnp.int32),
            config=jnp.asarray(-1, jnp.int32),
            model_based=jnp.asarray(False),
            bos_active=jnp.asarray(False),
            sigma=jnp.zeros((N,), fdtype),
            curve=jnp.full((N,), jnp.nan, fdtype),
            run_sum=jnp.zeros((), fdtype),
            table=empty_table(),
            table_ready=jnp.asarray(False),
            k1=jnp.asarray(jnp.nan, fdtype),
            xi=jnp.zeros((), fdtype),
            best_error=jnp.ones((), fdtype),
            bos_key=key,
        )

    def _fit(state: BoBosState):
        # GP over [x, n / N] on the standardised losses, warm-started (Algorithm 1, line 2).
        z, _, _ = gp.standardize(state.y, state.mask)
        p_new, fit_info = gp.fit(state.X, z, state.mask, init=state.gp_params, steps=gp_fit_steps)
        return z, p_new, fit_info.finite

    def _select(key, state: BoBosState, z, p_new, finite, params):
        k_pick, k_bos = jax.random.split(key)
        p = jax.tree.map(lambda a, b: jnp.where(finite, a, b), p_new, state.gp_params)
        post = gp.posterior(p, state.X, z, state.mask)
        mu, var = gp.predict(post, cand_final)
        t = (state.count + 1).astype(fdtype)
        beta = regret_bound.beta(t, jnp.asarray(M, fdtype), params.beta_delta, params.beta_scale)  # GP-UCB's beta
        lcb = mu - jnp.sqrt(jnp.maximum(beta, 0)) * jnp.sqrt(var)
        lcb = jnp.where(state.evaluated | jnp.isnan(lcb), jnp.inf, lcb)
        u = jax.random.uniform(k_pick, (M,), fdtype)
        random_pick = jnp.argmax(jnp.where(state.evaluated, -1, u)).astype(jnp.int32)
        usable = post.ok & jnp.all(jnp.isfinite(mu)) & jnp.all(jnp.isfinite(var))
        model = (state.count >= params.num_init) & usable
        idx = jnp.where(model, jnp.argmin(lcb).astype(jnp.int32), random_pick)
        x = cand[idx]
        # sigma_{t-1}([x, n / N]) for n = 1..N, for C2 (the posterior that chose x).
        Xq = jnp.concatenate([jnp.broadcast_to(x, (N, d)), fid[:, None]], axis=1)
        _, var_n = gp.predict(post, Xq)
        t_bo = (state.count - params.num_init + 1).astype(fdtype)
        k1 = schedules.k1(t_bo, params.k1_init, params.k1_gamma)  # Theorem 2: K_{1,t} = K_{1,t-1} / gamma
        xi = schedules.xi(t_bo, params.xi_noise_var, params.xi_delta)  # Theorem 1
        best_error = jnp.where(jnp.isfinite(state.best_value),
                               jnp.clip((state.best_value - params.loss_lo) / (params.loss_hi - params.loss_lo),
                                        0, 1), 1).astype(fdtype)
        active = jnp.asarray(early_stopping) & (state.count >= params.num_init) & usable
        state = state._replace(
            gp_params=p,
            config=idx,
            model_based=model,
            bos_active=active,
            sigma=jnp.sqrt(var_n),
            curve=jnp.full((N,), jnp.nan, fdtype),
            run_sum=jnp.zeros((), fdtype),
            table_ready=jnp.asarray(False),
            k1=k1.astype(fdtype),
            xi=xi.astype(fdtype),
            best_error=best_error,
            bos_key=k_bos,
        )
        return make_job(idx, x, N), state

    def _ask(key, state: BoBosState, params):
        return _select(key, state, *_fit(state), params)

    def _record(state: BoBosState, epoch, value, params):
        """Stores the epoch's loss; says whether to solve BOS now and with what."""
        e = jnp.asarray(epoch, jnp.int32)
        v = jnp.asarray(value).astype(fdtype)
        i = jnp.clip(e - 1, 0, N - 1)
        curve = state.curve.at[i].set(jnp.where((e >= 1) & (e <= N), v, state.curve[i]))
        state = state._replace(curve=curve)
        if not early_stopping:
            return state, jnp.asarray(False), ()
        # Line 5: solve the BOS problem once, after epoch N0.
        prefix = to_error(curve[:n0], params)
        solve_now = state.bos_active & (e == n0) & jnp.all(jnp.isfinite(curve[:n0]))
        operand = (state.bos_key, prefix, state.best_error, state.k1, params.k2, params.cost, state.xi)
        return state, solve_now, operand

    def _decide(state: BoBosState, table, solve_now, epoch, value, params):
        """Lines 6-9: stop when C1 (the BOS decision is d1) and C2 hold, for N0 < n < N."""
        e = jnp.asarray(epoch, jnp.int32)
        v = jnp.asarray(value).astype(fdtype)
        i = jnp.clip(e - 1, 0, N - 1)
        ready = state.table_ready | solve_now
        after = e > n0
        run_sum = state.run_sum + jnp.where(after, to_error(v, params), 0)
        running_mean = run_sum / jnp.maximum(e - n0, 1).astype(fdtype)
        c1 = bos.decide(table, e, running_mean) == bos.ACTION_STOP
        c2 = state.sigma[i] >= state.sigma[N - 1] / params.kappa
        stop = state.bos_active & ready & after & (e < N) & c1 & c2
        return state._replace(table=table, table_ready=ready, run_sum=run_sum), stop

    def _report(state: BoBosState, job: Job, epoch, value, params):
        state, solve_now, operand = _record(state, epoch, value, params)
        if not early_stopping:
            return state, jnp.asarray(False)
        table = gated_solve(solve_now, operand, state.table)
        return _decide(state, table, solve_now, epoch, value, params)

    def _tell(state: BoBosState, job: Job, result: Result, params):
        c = jnp.clip(jnp.asarray(job.config, jnp.int32), 0, M - 1)
        x = cand[c]
        epoch = jnp.asarray(result.epoch, jnp.int32)
        value = jnp.asarray(result.value).astype(fdtype)
        stopped = jnp.asarray(result.stopped, bool)
        room = state.count < max_evals
        base = state.count * (K + 1)
        X, y, mask = state.X, state.y, state.mask
        for k in range(K):  # line 11, plus the intermediate observations before n_t
            ek = int(inter_np[k])
            obs = state.curve[ek - 1]
            ok = room & (ek < epoch) & jnp.isfinite(obs)
            row = jnp.concatenate([x, jnp.full((1,), ek / N, fdtype)])
            X = X.at[base + k].set(row, mode="drop")
            y = y.at[base + k].set(jnp.where(ok, obs, 0), mode="drop")
            mask = mask.at[base + k].set(ok, mode="drop")
        ok = room & jnp.isfinite(value)
        n_t = jnp.clip(epoch, 1, N).astype(fdtype) / N
        X = X.at[base + K].set(jnp.concatenate([x, n_t[None]]), mode="drop")
        y = y.at[base + K].set(jnp.where(ok, value, 0), mode="drop")
        mask = mask.at[base + K].set(ok, mode="drop")
        better = ~stopped & (value < state.best_value)  # NaN never becomes the incumbent
        evaluated = state.evaluated.at[c].set(True)
        count = state.count + 1
        state = state._replace(
            X=X, y=y, mask=mask, evaluated=evaluated, count=count,
            best_value=jnp.where(better, value, state.best_value),
            best_config=jnp.where(better, c, state.best_config),
            num_stopped=state.num_stopped + stopped.astype(jnp.int32),
        )
        info = BoBosInfo(
            terminate=(count >= max_evals) | jnp.all(evaluated),
            incumbent=state.best_config,
            best_value=state.best_value,
            stopped=stopped,
            epoch=epoch,
            model_based=state.model_based,
            bo_iteration=(count - 1 - params.num_init + 1).astype(jnp.int32),
            k1=state.k1,
        )
        return state, info

    # Eager use (a Python loop over the protocol): the GP fit and the BOS solve are
    # called directly, so their compiled kernels are shared by every policy with the
    # same shapes, and only the small glue is jitted per policy. Traced (sim.run,
    # jit, vmap): the whole step is traced into the caller's program.
    init_j, tell_j = jax.jit(_init), jax.jit(_tell)
    select_j, record_j, decide_j = jax.jit(_select), jax.jit(_record), jax.jit(_decide)

    def _concrete(*trees):
        return all(checks.is_concrete(a) for a in jax.tree_util.tree_leaves(trees))

    def _params(params):
        if params is None:
            return default_params()
        check_params(params)
        return params

    def init(key, params=None):
        return init_j(key, _params(params))

    def ask(key, state: BoBosState, params=None):
        params = _params(params)
        if not _concrete(key, state, params):
            return _ask(key, state, params)
        return select_j(key, state, *_fit(state), params)

    def report(state: BoBosState, job: Job, epoch, value, params=None):
        params = _params(params)
        if not _concrete(state, job, epoch, value, params):
            return _report(state, job, epoch, value, params)
        state, solve_now, operand = record_j(state, epoch, value, params)
        if not early_stopping:
            return state, jnp.asarray(False)
        table = solve(operand) if bool(solve_now) else state.table
        return decide_j(state, table, solve_now, epoch, value, params)

    def tell(state: BoBosState, job: Job, result: Result, params=None):
        return tell_j(state, job, result, _params(params))

    return Policy(init, ask, report if needs_report else None, tell, default_params)
