"""The state of BO-BOS / GP-UCB and their step functions (:mod:`jaxstop.policies.bo_bos`).

:class:`BoBosParams`, :class:`BoBosState` and :class:`BoBosInfo` are the pytrees the
steps consume and produce (re-exported by :mod:`jaxstop.policies.bo_bos`, which also
validates params); :class:`BoBosConfig` is the static
configuration :mod:`jaxstop.policies.bo_bos` validates, and ``init`` / ``ask`` / ``report`` /
``tell`` (with ``ask_eager`` / ``report_eager``, their versions outside ``jit``) are the step
functions :func:`jaxstop.policies._base.build_policy` binds to it. The algorithm and its cost are described in
the docstring of :mod:`jaxstop.policies.bo_bos`.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxstop import bos, gp
from jaxstop._src import regret_bound, schedules
from jaxstop._src.batching import gated_cond
from jaxstop.policies._base import Incumbent, Job, Result, jit_step, make_job, renamed_field, update_incumbent


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
        beta_scale: Multiplier of GP-UCB's exploration term, >= 0: of ``beta_t`` under the
            square root with ``beta="paper"`` (1: Theorem 1 as stated), of the released
            code's ``d log(2t)`` with ``beta="authors"`` (0.2, its ``kappa_scale``), ().
        beta_delta: ``delta`` of ``beta_t`` (``beta="paper"`` only), in (0, 1] (0.1), ().
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
        incumbent_value: Incumbent loss ``y*`` (lowest ``y_t`` among the evaluations the
            ``incumbent`` setting counts; inf before), () (``best_value`` is its deprecated alias).
        best_config: Its candidate index (-1 before), int32 ().
        num_stopped: Evaluations stopped early so far, int32 ().
        config: Candidate of the current job, int32 ().
        model_based: Whether the current job was chosen by the LCB, bool ().
        bos_active: Whether the current job may be stopped, bool ().
        sigma: Posterior std at ``[x, n / N]`` for n = 1..N of the current job
            (standardised units), shape (N,).
        curve: Losses of the current job after each epoch (NaN before), shape (N,).
        run_sum: The current job's BOS summary statistic after its last reported epoch
            ``n > N0`` (:func:`jaxstop.bos.summary_statistic`: the mean error of epochs
            ``1..n``, or ``N0+1..n`` with ``statistic="after_n0"``; the value C1 looks
            up; 0 before), ().
        table: The current job's BOS :class:`~jaxstop.bos.DecisionTable` (rows
            ``N - N0``; zero rows for :func:`gp_ucb`).
        table_ready: Whether ``table`` was solved for the current job, bool ().
        k1: ``K_{1,t}`` of the current job, ().
        xi: ``xi_t`` of the current job, ().
        best_error: Incumbent error (in [0, 1]) given to BOS for the current job, ().
        bos_key: PRNG key of the current job's BOS solve (the state owns this stream).
        num_out_of_range: Losses so far that mapped outside [0, 1] (or were not finite)
            by ``(v - loss_lo) / (loss_hi - loss_lo)`` and were clipped for BOS, int32 ().
        ucb_width: The multiplier of ``sigma`` in the bound that chose the current job
            (``sqrt(beta_t)`` with ``beta="paper"``; NaN for a random pick), ().
    """

    X: jax.Array
    y: jax.Array
    mask: jax.Array
    gp_params: gp.GPParams
    evaluated: jax.Array
    count: jax.Array
    incumbent_value: jax.Array
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
    num_out_of_range: jax.Array = None
    ucb_width: jax.Array = None

    best_value = renamed_field("incumbent_value", "best_value")


class BoBosInfo(NamedTuple):
    """Info of :func:`bo_bos` / :func:`gp_ucb` after each evaluation.

    Attributes:
        terminate: ``max_evals`` evaluations done or every candidate evaluated, bool ().
        incumbent: Candidate with the lowest loss ``y_t`` among the evaluations the
            ``incumbent`` setting counts (all of them by default; -1 before), int32 ().
        incumbent_value: Its loss, () (``best_value`` is its deprecated alias).
        stopped: Whether this evaluation was stopped early, bool ().
        epoch: Epochs it trained, int32 ().
        model_based: Whether it was chosen by the LCB (not at random), bool ().
        bo_iteration: Its BO iteration ``t`` (``<= 0`` for the random start), int32 ().
        k1: ``K_{1,t}`` used for it, (); NaN for the random start (``t <= 0``), where
            no BOS problem is solved and the schedule is undefined.
        num_out_of_range: Losses of the study so far outside [0, 1] after the
            ``loss_lo`` / ``loss_hi`` map (clipped for BOS), int32 ().
        ok: ``num_out_of_range == 0``: BOS has seen every loss as it is, bool ().
        ucb_width: The multiplier of ``sigma`` in the bound that chose it (``sqrt(beta_t)``
            of Theorem 1 with ``beta="paper"``, the released code's ``0.2 d log(2t)`` with
            ``"authors"``); NaN for a random pick, ().
    """

    terminate: jax.Array
    incumbent: jax.Array
    incumbent_value: jax.Array
    stopped: jax.Array
    epoch: jax.Array
    model_based: jax.Array
    bo_iteration: jax.Array
    k1: jax.Array
    num_out_of_range: jax.Array = None
    ok: jax.Array = None
    ucb_width: jax.Array = None

    best_value = renamed_field("incumbent_value", "best_value")


# --------------------------------------------------------------------------------------
# The policy


class BoBosConfig(NamedTuple):
    """The static configuration of :func:`bo_bos` / :func:`gp_ucb` (validated by the factory).

    ``cand_final`` is ``[x, 1]`` for every candidate and ``fid`` the fidelities
    ``n / N`` for n = 1..N; ``n0`` is None without early stopping. ``beta``,
    ``incumbent`` and ``statistic`` are the named conventions of
    :func:`jaxstop.policies.bo_bos.bo_bos`.
    """

    cand: jax.Array
    cand_final: jax.Array
    fid: jax.Array
    N: int
    max_evals: int
    n0: Any
    inter: tuple
    early_stopping: bool
    num_paths: int
    num_bins: int
    mode: str
    curve_fit_steps: int
    gp_fit_steps: int
    defaults: dict
    fdtype: Any
    beta: str = "paper"
    incumbent: str = "all"
    statistic: str = "all_epochs"


def make_config(cand, *, N, max_evals, n0, inter, early_stopping, num_paths, num_bins, mode, curve_fit_steps,
                gp_fit_steps, defaults, fdtype, beta, incumbent, statistic) -> BoBosConfig:
    """The configuration on validated arguments (see :func:`jaxstop.policies.bo_bos.bo_bos`)."""
    M = cand.shape[0]
    fid = jnp.arange(1, N + 1, dtype=fdtype) / N
    cand_final = jnp.concatenate([cand, jnp.ones((M, 1), fdtype)], axis=1)  # [x, N / N]
    return BoBosConfig(cand, cand_final, fid, N, max_evals, n0, tuple(inter), bool(early_stopping), num_paths,
                       num_bins, mode, curve_fit_steps, gp_fit_steps, dict(defaults), fdtype, beta, incumbent,
                       statistic)


def default_params(cfg: BoBosConfig) -> BoBosParams:
    """The factory's :class:`BoBosParams`."""
    v = {k: jnp.asarray(cfg.defaults[k], cfg.fdtype) for k in BoBosParams._fields if k != "num_init"}
    return BoBosParams(**v, num_init=jnp.asarray(cfg.defaults["num_init"], jnp.int32))


def _empty_table(cfg: BoBosConfig) -> bos.DecisionTable:
    T = cfg.N - cfg.n0 if cfg.early_stopping else 0
    n0_ = cfg.n0 if cfg.early_stopping else 0
    z = lambda shape, dt=cfg.fdtype: jnp.zeros(shape, dt)  # noqa: E731
    return bos.DecisionTable(
        actions=z((T, cfg.num_bins), jnp.int32),
        losses=z((T, cfg.num_bins, 3)),
        prob=z((T, cfg.num_bins)),
        counts=z((T, cfg.num_bins), jnp.int32),
        edges=z((cfg.num_bins + 1,)),
        first_epoch=jnp.asarray(n0_ + 1, jnp.int32),
        num_valid=jnp.zeros((), jnp.int32),
        dropped_variance=z(()),
    )


def _out_of_range(v, params):
    """Whether losses ``v`` map outside [0, 1] (or are not finite), the range BOS works in."""
    e = (v - params.loss_lo) / (params.loss_hi - params.loss_lo)
    return ~((e >= 0) & (e <= 1))


def _to_error(cfg: BoBosConfig, v, params):
    eps = float(jnp.finfo(cfg.fdtype).eps)
    e = (v - params.loss_lo) / (params.loss_hi - params.loss_lo)
    return jnp.clip(e, eps, 1 - eps)


def _solve(cfg: BoBosConfig, operand):
    key, prefix, best_error, k1, k2, cost, xi = operand
    table = bos.solve(key, prefix, best_error, cfg.N, k1, k2, cost, num_paths=cfg.num_paths,
                      num_bins=cfg.num_bins, mode=cfg.mode, xi=xi, fit_steps=cfg.curve_fit_steps,
                      statistic=cfg.statistic)
    return jax.tree.map(lambda a, b: a.astype(b.dtype), table, _empty_table(cfg))


def init(cfg: BoBosConfig, key, params) -> BoBosState:
    """``init(key, params=None) -> state``: an empty GP buffer, default GP hyperparameters,
    no incumbent; ``key`` seeds the BOS solves' stream."""
    M, d = cfg.cand.shape
    cap = cfg.max_evals * (len(cfg.inter) + 1)
    fdtype, N = cfg.fdtype, cfg.N
    return BoBosState(
        X=jnp.zeros((cap, d + 1), fdtype),
        y=jnp.zeros((cap,), fdtype),
        mask=jnp.zeros((cap,), bool),
        gp_params=gp.params(1.0, [0.5] * (d + 1), 1e-2, 0.0, dtype=fdtype),
        evaluated=jnp.zeros((M,), bool),
        count=jnp.zeros((), jnp.int32),
        incumbent_value=jnp.asarray(jnp.inf, fdtype),
        best_config=jnp.asarray(-1, jnp.int32),
        num_stopped=jnp.zeros((), jnp.int32),
        config=jnp.asarray(-1, jnp.int32),
        model_based=jnp.asarray(False),
        bos_active=jnp.asarray(False),
        sigma=jnp.zeros((N,), fdtype),
        curve=jnp.full((N,), jnp.nan, fdtype),
        run_sum=jnp.zeros((), fdtype),
        table=_empty_table(cfg),
        table_ready=jnp.asarray(False),
        k1=jnp.asarray(jnp.nan, fdtype),
        xi=jnp.zeros((), fdtype),
        best_error=jnp.ones((), fdtype),
        bos_key=key,
        num_out_of_range=jnp.zeros((), jnp.int32),
        ucb_width=jnp.asarray(jnp.nan, fdtype),
    )


def _fit(cfg: BoBosConfig, state: BoBosState):
    # GP over [x, n / N] on the standardised losses, warm-started (Algorithm 1, line 2).
    z, _, _ = gp.standardize(state.y, state.mask)
    p_new, fit_info = gp.fit(state.X, z, state.mask, init=state.gp_params, steps=cfg.gp_fit_steps)
    return z, p_new, fit_info.finite


def ucb_width(cfg: BoBosConfig, t, params):
    """The multiplier of ``sigma`` in GP-UCB's bound at BO iteration ``t >= 1`` (Algorithm 1, line 2).

    ``beta="paper"``: ``sqrt(beta_scale * beta_t)``, ``beta_t = 2 log(|D| t^2 pi^2 / (6 delta))``
    (Theorem 1 and Lemma 1), ``|D| = M N`` (the candidates times the ``N`` epoch values of
    ``z = [x, n]``, the domain of Section 2.1). ``beta="authors"``: ``beta_scale * d log(2 t)``
    on ``sigma`` itself (``helper_funcs.py``, ``UtilityFunction._ucb``:
    ``mean + (kappa_scale * d * np.log(2 * iteration)) * std``, ``d`` the dimension of
    ``[x, n / N]``).
    """
    M, d = cfg.cand.shape
    if cfg.beta == "authors":
        return params.beta_scale * (d + 1) * jnp.log(2 * t)
    size = jnp.asarray(M * cfg.N, cfg.fdtype)
    beta_t = regret_bound.beta(t, size, params.beta_delta, jnp.asarray(1.0, cfg.fdtype))
    return jnp.sqrt(params.beta_scale * jnp.maximum(beta_t, 0))


def _select(cfg: BoBosConfig, key, state: BoBosState, z, p_new, finite, params):
    fdtype, N, cand = cfg.fdtype, cfg.N, cfg.cand
    M, d = cand.shape
    k_pick, k_bos = jax.random.split(key)
    p = jax.tree.map(lambda a, b: jnp.where(finite, a, b), p_new, state.gp_params)
    post = gp.posterior(p, state.X, z, state.mask)
    mu, var = gp.predict(post, cfg.cand_final)
    # t: the BO iteration of Algorithm 1 (the initial points excluded), for beta_t, K_{1,t} and xi_t
    t_bo = (state.count - params.num_init + 1).astype(fdtype)
    width = ucb_width(cfg, jnp.maximum(t_bo, 1), params)
    lcb = mu - width * jnp.sqrt(var)
    lcb = jnp.where(state.evaluated | jnp.isnan(lcb), jnp.inf, lcb)
    u = jax.random.uniform(k_pick, (M,), fdtype)
    random_pick = jnp.argmax(jnp.where(state.evaluated, -1, u)).astype(jnp.int32)
    usable = post.ok & jnp.all(jnp.isfinite(mu)) & jnp.all(jnp.isfinite(var)) & jnp.isfinite(width)
    model = (state.count >= params.num_init) & usable
    # ties of the lowest LCB (the flat prior before any data, with num_init = 0; duplicate
    # rows) go to a uniform one of them, not to the first row of every study
    tied = (lcb <= jnp.min(lcb)) & ~state.evaluated
    idx = jnp.where(model, jnp.argmax(jnp.where(tied, u, -1)).astype(jnp.int32), random_pick)
    x = cand[idx]
    # sigma_{t-1}([x, n / N]) for n = 1..N, for C2 (the posterior that chose x).
    Xq = jnp.concatenate([jnp.broadcast_to(x, (N, d)), cfg.fid[:, None]], axis=1)
    _, var_n = gp.predict(post, Xq)
    k1 = schedules.k1(t_bo, params.k1_init, params.k1_gamma)  # Theorem 2: K_{1,t} = K_{1,t-1} / gamma
    xi = schedules.xi(t_bo, params.xi_noise_var, params.xi_delta)  # Theorem 1
    best_error = jnp.where(jnp.isfinite(state.incumbent_value),
                           jnp.clip((state.incumbent_value - params.loss_lo) / (params.loss_hi - params.loss_lo),
                                    0, 1), 1).astype(fdtype)
    active = jnp.asarray(cfg.early_stopping) & (state.count >= params.num_init) & usable
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
        ucb_width=jnp.where(model, width, jnp.nan).astype(fdtype),
    )
    return make_job(idx, x, N), state


def ask(cfg: BoBosConfig, key, state: BoBosState, params):
    """``ask(key, state, params=None) -> (job, state)``: refits the GP on ``[x, n / N]``
    (warm-started) and picks the unevaluated candidate with the lowest LCB at full training
    (uniformly at random for the first ``num_init`` jobs or when the GP is unusable); sets up
    the job's BOS inputs (``K1``, ``xi``, incumbent error) and the stds of condition C2."""
    return _select(cfg, key, state, *_fit(cfg, state), params)


def ask_eager(static, key, state: BoBosState, params):
    """``ask`` outside ``jit``: :func:`jaxstop.gp.fit`'s own compiled program, then the
    jitted selection."""
    return jit_step(_select)(static, key, state, *_fit(static.value, state), params)


def _record(cfg: BoBosConfig, state: BoBosState, epoch, value, params):
    """Stores the epoch's loss; says whether to solve BOS now and with what."""
    N, n0 = cfg.N, cfg.n0
    e = jnp.asarray(epoch, jnp.int32)
    v = jnp.asarray(value).astype(cfg.fdtype)
    i = jnp.clip(e - 1, 0, N - 1)
    curve = state.curve.at[i].set(jnp.where((e >= 1) & (e <= N), v, state.curve[i]))
    state = state._replace(curve=curve)
    if not cfg.early_stopping:
        return state, jnp.asarray(False), ()
    # Line 5: solve the BOS problem once, after epoch N0.
    prefix = _to_error(cfg, curve[:n0], params)
    solve_now = state.bos_active & (e == n0) & jnp.all(jnp.isfinite(curve[:n0]))
    operand = (state.bos_key, prefix, state.best_error, state.k1, params.k2, params.cost, state.xi)
    return state, solve_now, operand


def _decide(cfg: BoBosConfig, state: BoBosState, table, solve_now, epoch, value, params):
    """Lines 6-9: stop when C1 (the BOS decision is d1) and C2 hold, for N0 < n < N."""
    N, n0 = cfg.N, cfg.n0
    e = jnp.asarray(epoch, jnp.int32)
    i = jnp.clip(e - 1, 0, N - 1)
    ready = state.table_ready | solve_now
    after = e > n0
    # C1's statistic on the errors so far (Section 3.2), the one the table was solved for
    stat = bos.summary_statistic(_to_error(cfg, state.curve, params), e, n0, statistic=cfg.statistic)
    running_mean = jnp.where(after & jnp.isfinite(stat), stat, 0)
    c1 = bos.decide(table, e, running_mean) == bos.ACTION_STOP
    c2 = state.sigma[i] >= state.sigma[N - 1] / params.kappa
    stop = state.bos_active & ready & after & (e < N) & c1 & c2
    return state._replace(table=table, table_ready=ready, run_sum=running_mean), stop


def report(cfg: BoBosConfig, state: BoBosState, job: Job, epoch, value, params):
    """``report(state, job, epoch, value, params=None) -> (state, stop)``: records the
    epoch's loss; after epoch ``N0`` solves the BOS problem once (:func:`jaxstop.bos.solve`)
    and afterwards stops when C1 (the BOS decision is to stop) and C2 (the std at
    ``[x, n / N]`` is at least ``1 / kappa`` of the std at ``[x, 1]``) hold, ``N0 < n < N``."""
    state, solve_now, operand = _record(cfg, state, epoch, value, params)
    if not cfg.early_stopping:
        return state, jnp.asarray(False)
    # each study solves at its own epoch N0 of each job: under vmap only the studies that
    # reach it solve (sparse, on CPU), not the whole batch whenever one of them does
    table = gated_cond(solve_now, functools.partial(_solve, cfg), lambda _: state.table, operand, sparse=True)
    return _decide(cfg, state, table, solve_now, epoch, value, params)


def report_eager(static, state: BoBosState, job: Job, epoch, value, params):
    """``report`` outside ``jit``: the BOS solve (:func:`jaxstop.bos.solve`'s own compiled
    program) runs only at epoch ``N0``, between the jitted bookkeeping pieces."""
    state, solve_now, operand = jit_step(_record)(static, state, epoch, value, params)
    if not static.value.early_stopping:
        return state, jnp.asarray(False)
    table = _solve(static.value, operand) if bool(solve_now) else state.table
    return jit_step(_decide)(static, state, table, solve_now, epoch, value, params)


def tell(cfg: BoBosConfig, state: BoBosState, job: Job, result: Result, params):
    """``tell(state, job, result, params=None) -> (state, BoBosInfo)``: adds the final
    observation ``[x, n_t / N]`` and the intermediate ones before ``n_t`` to the GP buffer,
    marks the candidate evaluated and updates the incumbent with ``y_t`` (every evaluation,
    or completed ones only with ``incumbent="completed"``); terminates after ``max_evals``
    evaluations or when every candidate is done."""
    fdtype, N = cfg.fdtype, cfg.N
    M = cfg.cand.shape[0]
    K = len(cfg.inter)
    c = jnp.clip(jnp.asarray(job.config, jnp.int32), 0, M - 1)
    x = cfg.cand[c]
    epoch = jnp.asarray(result.epoch, jnp.int32)
    value = jnp.asarray(result.value).astype(fdtype)
    stopped = jnp.asarray(result.stopped, bool)
    room = state.count < cfg.max_evals
    base = state.count * (K + 1)
    X, y, mask = state.X, state.y, state.mask
    for k, ek in enumerate(cfg.inter):  # line 11, plus the intermediate observations before n_t
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
    # y*_t = best y_t' over t' <= t (Section 3.2; Appendix D), early-stopped y_t = y_{t,n_t} included
    counts = ~stopped if cfg.incumbent == "completed" else jnp.asarray(True)
    inc = update_incumbent(Incumbent(state.incumbent_value, state.best_config), value, c, ok=counts)
    # the losses BOS saw (clipped into (0, 1)): the reported curve, or the final value alone
    if cfg.early_stopping:
        bad = (jnp.arange(1, N + 1) <= epoch) & _out_of_range(state.curve, params)
    else:
        bad = _out_of_range(value, params)
    num_out = state.num_out_of_range + jnp.sum(bad).astype(jnp.int32)
    evaluated = state.evaluated.at[c].set(True)
    count = state.count + 1
    state = state._replace(
        X=X, y=y, mask=mask, evaluated=evaluated, count=count,
        incumbent_value=inc.value, best_config=inc.config,
        num_stopped=state.num_stopped + stopped.astype(jnp.int32),
        num_out_of_range=num_out,
    )
    info = BoBosInfo(
        terminate=(count >= cfg.max_evals) | jnp.all(evaluated),
        incumbent=inc.config,
        incumbent_value=inc.value,
        stopped=stopped,
        epoch=epoch,
        model_based=state.model_based,
        bo_iteration=(count - 1 - params.num_init + 1).astype(jnp.int32),
        k1=state.k1,
        num_out_of_range=num_out,
        ok=num_out == 0,
        ucb_width=state.ucb_width,
    )
    return state, info
