"""Replay of a recorded HPO trace: bound, threshold and every rule per iteration (:func:`replay`).

The conventions of the paper, the authors' code and Optuna are presets
(:data:`~jaxstop.regret.CONVENTIONS`, in ``_conventions.py``); each row is one
:func:`jaxstop._src.termination.fit_and_bound` (two with ``acq_gp="all"``: the bound's GP
and the BO's) inside a ``lax.scan`` per capacity segment.
"""

from __future__ import annotations

import math
import numbers
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop import gp
from jaxstop._src import checks as _checks, gp_fit, status, termination
from jaxstop._src.status import Reason
from jaxstop.regret import _args, _rules
from jaxstop.regret._conventions import CONVENTIONS, with_convention
from jaxstop.regret._options import ReplayOptions
from jaxstop.regret._rules import Stops


ACQ_GP = ("all", "top")
TIES = ("first", "last")
#: Default quasi-Newton steps of the first (cold) and later (warm) fits of a row, without
#: and with an input warping (three times the parameters: about twice the steps to converge).
FIRST_FIT_STEPS = (30, 60)
FIT_STEPS = (6, 12)


def _steps(value, defaults, warping: bool):
    """``value``, or the default of ``defaults`` (without, with warping) where it is None."""
    return defaults[int(warping)] if value is None else value


class ReplayResult(NamedTuple):
    """Per-iteration quantities and stopping iterations of a replayed trace.

    Row ``t`` of a trace of length T describes the state after
    ``num_evaluations[t]`` evaluations (``t + 1`` by default, ``t`` with
    ``convention="authors"``). Rows that were not computed (too few evaluations to
    stop, or padded) hold ``bound = +inf``.

    Attributes:
        bound: Regret upper bound (Eq. 8) in the units of ``values``, shape (T,).
        threshold: CV threshold (Eq. 9-10) of the incumbent of that row,
            ``sqrt((1/k + n_test/n_train) s^2)``, in the units of ``values``, shape (T,).
        ucb_min: Minimum UCB over the fitted points, units of ``values``, shape (T,).
        lcb_min: Domain minimum of the LCB, units of ``values``, shape (T,).
        ei: Maximum expected improvement over the candidates and evaluated points, in the
            standardised units of the GP that ``acq_gp`` names (see
            :data:`~jaxstop.regret.CONVENTIONS`), or the recorded values; ``+inf`` where
            not computed, shape (T,).
        pi: Maximum probability of improvement, likewise, shape (T,).
        best: Incumbent value (running minimum of ``values``), shape (T,).
        incumbent: Index of the incumbent evaluation (among ties the first, or the last
            with ``ties="last"``), (T,) int32.
        num_evaluations: Evaluations behind each row, shape (T,) int32.
        num_fitted: Points in the bound's GP fit, shape (T,) int32.
        computed: Rows where the bound was computed, shape (T,) bool.
        ok: Rows whose bound was computed and is usable (every quantity of
            :func:`fit_regret_bound` finite, from valid inputs), whose ``threshold`` and
            ``variance`` are finite and, with ``acq_gp="all"`` and no recorded values,
            whose EI / PI come from a usable fit of the BO's GP, shape (T,) bool.
        stops: :class:`Stops` of all rules.
        params: GP hyperparameters of the bound's last fitted row.
        reason: Per row, the :class:`jaxstop.Reason` of a computed row that is not ``ok``
            (that of :func:`fit_regret_bound`, else that of the BO's GP fit, whose EI / PI
            are then ``+inf`` while the bound stays usable, else ``BAD_INPUT`` for a
            non-finite real fold score of the incumbent, ``NOT_FINITE`` for a threshold
            that overflowed (then NaN), or ``UNREPRESENTABLE`` for a fold variance beyond
            the dtype's range while the threshold is finite, e.g. float32 fold scores
            near 1e20: ``variance`` is NaN there, the threshold and the rules on
            ``sqrt(v * s^2)`` stay right), ``EMPTY`` on rows not computed, ``OK``
            elsewhere; shape (T,) int32.
        variance: The fold variance ``s^2`` behind ``threshold`` (``ddof``), shape (T,):
            the ``ours_variances`` rules compare ``bound < sqrt(v * variance)`` (computed
            from ``s`` itself, so also where ``s^2`` is not representable); NaN where
            the variance is not finite or not representable.
    """

    bound: jax.Array
    threshold: jax.Array
    ucb_min: jax.Array
    lcb_min: jax.Array
    ei: jax.Array
    pi: jax.Array
    best: jax.Array
    incumbent: jax.Array
    num_evaluations: jax.Array
    num_fitted: jax.Array
    computed: jax.Array
    ok: jax.Array
    stops: Stops
    params: gp.GPParams
    reason: jax.Array
    variance: jax.Array


class _ReplayConfig(NamedTuple):
    lag: int
    t0: int
    segments: tuple  # ((start, stop, top capacity, BO-GP capacity), ...), rows [t0, T)
    fraction: float
    min_points: int
    min_evaluations: int
    beta_t: str
    ddof: int
    test_train_ratio: float | None
    fixed_threshold: bool
    ties_last: bool
    num_candidates: int
    refine_steps: int
    refine_starts: int
    first_fit_steps: int
    fit_steps: int
    fit_tol: float
    fit_mean: bool
    min_noise: float
    chunk_size: int
    recorded_ei: bool
    recorded_pi: bool
    acq_all: bool  # fit the BO's GP on every evaluation for EI / PI
    warping: bool = False  # both GPs with a Kumaraswamy input warping
    prior: str = "optuna"  # both GPs' hyperparameter priors
    warm_start: bool = True  # False: every row fitted afresh from the prior's start
    num_starts: int = 1  # starts of every fit
    joint: bool = False  # amplitude and mean fitted jointly, the noise variance floored (AutoGluon)
    shared_candidates: int = 0  # > 0: that many uniform candidates drawn once, used at every row


def _segments(T: int, t0: int, lag: int, fraction: float, min_points: int, num_segments: int, acq_all: bool) -> tuple:
    """Split rows [t0, T) into contiguous runs, each with the capacities its last row needs:
    the bound's top set, and every evaluation for the BO's GP (0 without it)."""
    if t0 >= T:
        return ()
    need = [min(T, max(0, t + 1 - lag), max(min_points, int(math.floor(fraction * max(0, t + 1 - lag)))))
            for t in range(T)]
    rows = T - t0
    k = max(1, min(num_segments, rows))
    bounds = [t0 + (rows * j) // k for j in range(k + 1)]
    segs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            segs.append((a, b, max(1, need[b - 1]), max(1, min(T, b - lag)) if acq_all else 0))
    # merge runs that ended up with the same capacities
    merged = []
    for s in segs:
        if merged and merged[-1][2:] == s[2:]:
            merged[-1] = (merged[-1][0], s[1]) + s[2:]
        else:
            merged.append(s)
    return tuple(merged)


def _start(d: int, dim_mask, dtype, cfg: _ReplayConfig) -> tuple:
    """``(params, inv_hessian)`` of a cold fit: the prior's start, no curvature (zeros)."""
    r = gp_fit.raw_size(d, cfg.warping)
    return termination.default_params(d, dim_mask, dtype, cfg.warping, cfg.prior), jnp.zeros((r, r), dtype)


def _replay_row(warm, t, data, cfg: _ReplayConfig, capacity: int, acq_capacity: int):
    """One row of the replay: the bound after the evaluations of row ``t`` and the EI / PI
    maxima; ``warm`` is the previous row's ``(params, inv_hessian)`` of the bound's GP
    and, with ``acq_capacity > 0``, of the BO's GP: the warm starts of this row's fits."""
    configs, values, avail0, dim_mask, key, size, delta, scale, cand = data
    T = values.shape[0]
    avail = avail0 & (jnp.arange(T) < t + 1 - cfg.lag)
    fcfg = termination.FitConfig(
        capacity=capacity, fraction=cfg.fraction, min_points=cfg.min_points, beta_t=cfg.beta_t,
        steps=cfg.fit_steps if cfg.warm_start else cfg.first_fit_steps,
        fit_mean=cfg.fit_mean, min_noise=cfg.min_noise, num_random=cfg.num_candidates,
        refine_steps=cfg.refine_steps, refine_starts=cfg.refine_starts, chunk_size=cfg.chunk_size,
        fit_tol=cfg.fit_tol, warping=cfg.warping, prior=cfg.prior, num_starts=cfg.num_starts, joint=cfg.joint,
    )
    if not cfg.warm_start:  # every row afresh: the prior's start, no curvature
        warm = _start(configs.shape[1], dim_mask, values.dtype, cfg) * 2
    k_row = jax.random.fold_in(key, t)

    def fit(cfg_, params, inv_h):
        fb = termination.fit_and_bound(k_row, configs, values, avail, params, cand, dim_mask, size, delta, scale,
                                       cfg_, inv_h)
        # A failed fit does not poison the next rows: they start from the last finite one.
        keep = fb.fit_info.ok
        return fb, (jax.tree_util.tree_map(lambda a, b: jnp.where(keep, a, b), fb.params, params),
                    jnp.where(keep, fb.inv_hessian, inv_h))

    fb, warm_top = fit(fcfg, *warm[:2])
    rb = fb.bound
    ei, pi, reason = fb.ei_max, fb.pi_max, rb.reason
    if acq_capacity:
        # The BO's GP on every evaluation (the same candidates: given, or drawn with the same row key).
        fa, warm_acq = fit(termination.acquisition_config(fcfg, acq_capacity), *warm[2:])
        inf = jnp.asarray(jnp.inf, ei.dtype)
        ei, pi = jnp.where(fa.ok, fa.ei_max, inf), jnp.where(fa.ok, fa.pi_max, inf)
        reason = status.first_reason((rb.reason != int(Reason.OK), rb.reason),
                                     (fa.reason != int(Reason.OK), fa.reason))
        warm = warm_top + warm_acq
    else:
        warm = warm_top + tuple(warm[2:])
    return warm, (rb.bound, rb.ucb_min, rb.lcb_min, ei, pi, fb.num_top, reason)


def _replay_prefix(configs, values, fold_scores, mask, fold_mask, cfg: _ReplayConfig):
    """Incumbent, best value, evaluation count, CV threshold, fold variance and its root of
    every row (no GP)."""
    T = values.shape[0]
    idx = jnp.arange(T)
    avail0 = mask & jnp.isfinite(values)
    rows = avail0[None, :] & (idx[None, :] < (idx + 1 - cfg.lag)[:, None])
    vals = jnp.where(rows, values[None, :], jnp.inf)
    best = jnp.min(vals, axis=1)
    if cfg.ties_last:  # Algorithm 1, line 9: y_t <= y_t^* makes the newer one the incumbent
        incumbent = jnp.max(jnp.where(rows & (vals == best[:, None]), idx[None, :], 0), axis=1).astype(jnp.int32)
    else:
        incumbent = jnp.argmin(vals, axis=1).astype(jnp.int32)
    num_eval = jnp.sum(rows, axis=1).astype(jnp.int32)
    # Folds of padded evaluations are inert like the evaluations themselves.
    real_folds = fold_mask & mask[:, None]
    var_all, _ = termination.cv_variance(fold_scores, real_folds, cfg.ddof)
    std_all, _ = termination.cv_std(fold_scores, real_folds, cfg.ddof)
    thr_all = termination.cv_threshold(fold_scores, real_folds, cfg.test_train_ratio, cfg.ddof)
    return avail0, incumbent, best, num_eval, thr_all[incumbent], var_all[incumbent], std_all[incumbent]


def _replay_impl(key, configs, values, fold_scores, mask, fold_mask, dim_mask, ei_rec, pi_rec, size, delta, scale,
                 scales, variances, patience, ei_t, pi_t, conv_rtol, cand, cfg: _ReplayConfig, *,
                 python_loop: bool = False):
    dt = values.dtype
    T = values.shape[0]
    avail0, incumbent, best, num_eval, threshold, variance, std = _replay_prefix(configs, values, fold_scores, mask,
                                                                                 fold_mask, cfg)
    # The fit sees every real row: a non-finite value there (traced input) is reported by
    # its status (Reason.BAD_INPUT), not silently dropped.
    if cfg.shared_candidates:  # one set for every row (the rows draw from fold_in(key, t), t < T)
        cand = jax.random.uniform(jax.random.fold_in(key, T), (cfg.shared_candidates, configs.shape[1]), dt)
    data = (configs, values, mask, dim_mask, key, size, delta, scale, cand)
    fit_state = _start(configs.shape[1], dim_mask, dt, cfg) * 2  # the bound's GP, the BO's GP
    inf = jnp.asarray(jnp.inf, dt)
    outs = [(jnp.full((cfg.t0,), inf), jnp.full((cfg.t0,), inf), jnp.full((cfg.t0,), -inf),
             jnp.full((cfg.t0,), inf), jnp.full((cfg.t0,), inf), jnp.zeros((cfg.t0,), jnp.int32),
             jnp.full((cfg.t0,), int(Reason.EMPTY), jnp.int32))]
    for j, (start, stop, cap, acq_cap) in enumerate(cfg.segments):
        ts = jnp.arange(start, stop, dtype=jnp.int32)
        if j == 0:
            # Cold start: the first row is fitted ceil(first_fit_steps / fit_steps) times
            # in a row (the same compiled body as every other row); its last pass counts.
            warm = -(-cfg.first_fit_steps // cfg.fit_steps) - 1 if cfg.warm_start else 0
            ts = jnp.concatenate([jnp.full((warm,), start, jnp.int32), ts])
        body = partial(_replay_row, data=data, cfg=cfg, capacity=cap, acq_capacity=acq_cap)
        if python_loop:
            step = jax.jit(body)
            seg = []
            for t in ts:
                fit_state, o = step(fit_state, t)
                seg.append(o)
            o = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *seg)
        else:
            fit_state, o = jax.lax.scan(body, fit_state, ts)
        if j == 0:
            o = jax.tree_util.tree_map(lambda a: a[warm:], o)
        outs.append(o)
    bound, ucb, lcb, ei, pi, num_fit, reason = (jnp.concatenate(a) for a in zip(*outs))
    computed = (jnp.arange(T) >= cfg.t0) & mask
    # a usable bound beside a threshold the data do not define is not ok either: the incumbent's
    # real folds hold a non-finite value (an input), or the threshold overflowed; nor is one
    # whose fold variance s^2 is beyond the dtype's range (its threshold and s still usable)
    inc_folds = (fold_mask & mask[:, None])[incumbent]
    bad_folds = jnp.any(inc_folds & ~jnp.isfinite(fold_scores[incumbent]), axis=1)
    is_ok = reason == int(Reason.OK)
    reason = jnp.where(is_ok & bad_folds, int(Reason.BAD_INPUT), reason)
    reason = jnp.where(is_ok & ~bad_folds & ~jnp.isfinite(threshold), int(Reason.NOT_FINITE), reason)
    reason = jnp.where(is_ok & ~bad_folds & jnp.isfinite(threshold) & ~jnp.isfinite(variance),
                       int(Reason.UNREPRESENTABLE), reason).astype(jnp.int32)
    reason = jnp.where(computed, reason, jnp.int32(int(Reason.EMPTY)))
    bound = jnp.where(computed, bound, inf)
    ei = ei_rec if cfg.recorded_ei else jnp.where(computed, ei, inf)
    pi = pi_rec if cfg.recorded_pi else jnp.where(computed, pi, inf)
    stops = _rules.stop_rules(bound, threshold, std, best, num_eval, mask, ei, pi, scales, variances, patience,
                              ei_t, pi_t, min_evaluations=cfg.min_evaluations, fixed_threshold=cfg.fixed_threshold,
                              conv_rtol=conv_rtol)
    return ReplayResult(bound, threshold, ucb, lcb, ei, pi, best, incumbent, num_eval, num_fit, computed,
                        reason == int(Reason.OK), stops, fit_state[0], reason, variance)


_replay_jit = jax.jit(_replay_impl, static_argnames=("cfg", "python_loop"))


def replay(
    key: jax.Array,
    /,
    configs: ArrayLike,
    values: ArrayLike,
    fold_scores: ArrayLike | None = None,
    *,
    mask: ArrayLike | None = None,
    fold_mask: ArrayLike | None = None,
    dim_mask: ArrayLike | None = None,
    ei: ArrayLike | None = None,
    pi: ArrayLike | None = None,
    convention: str = "paper",
    fraction: float = 0.5,
    min_points: int = 20,
    min_evaluations: int = 20,
    candidates: ArrayLike | int | None = None,
    options: ReplayOptions | None = None,
    **deprecated_keywords,
) -> ReplayResult:
    """Replays a recorded HPO trace: bound, threshold and every stopping rule per iteration.

    For every row ``t`` the GP is fitted on the top ``max(min_points, floor(fraction *
    n_t))`` of the first ``n_t`` evaluations (standardised), warm-started from the
    previous row's hyperparameters with ``fit_steps`` quasi-Newton steps
    (``first_fit_steps`` for the first row; ``warm_start=False``, the ``"authors"``
    convention's: every row afresh with ``first_fit_steps``), and Eq. (8) is evaluated. Everything runs in one jitted
    ``lax.scan`` per capacity segment: the top set is gathered into a fixed capacity that
    grows in ``num_segments`` steps with ``t`` (no recompilation as the trace grows), so
    ``jax.vmap`` over traces works. Only rows that may stop (``n_t >= min_evaluations``)
    are computed. Makarova et al. (2022), Sec. 4.1 and Algorithm 1. With ``acq_gp="all"``
    (every convention's default) each row also fits the BO's own GP on all ``n_t``
    evaluations (warm-started along the trace in the same scan, capacity ``n_t`` per
    segment) for the EI / PI baselines; recorded ``ei`` and ``pi`` make it unnecessary.

    The stopping rules (:func:`stop_iterations`): ours with threshold
    ``scale * cv_threshold(incumbent folds)`` for each of ``ours_scales`` and
    ``sqrt(v * s^2)`` for each of ``ours_variances`` (by default the convention's:
    ``Ours_0.21`` and ``Ours_0.5`` of the paper's text or of the authors' code), Conv-i
    for ``conv_patience``, EI and PI below ``ei_thresholds`` / ``pi_thresholds``. Which line
    of the paper, the authors' code or Optuna each setting follows:
    :data:`CONVENTIONS`.

    The data, the convention and the top set are arguments; every other setting is a
    field of ``options`` (:class:`ReplayOptions`, which documents them).

    Deprecated forms (they still work in this release, with a :class:`DeprecationWarning`,
    and will be removed in the next): the key as a keyword after the data,
    ``replay(configs, values, fold_scores, key=key)`` (now ``replay(key, configs,
    values, fold_scores)``); the fields of :class:`ReplayOptions` as keywords, including
    the convention overrides that were ``**overrides`` (``fit_steps=3``, ``lag=1``; now
    ``options=ReplayOptions(fit_steps=3, lag=1)``).

    Args:
        key: PRNG key (random candidates of each row); positional only.
        configs: Configurations in the unit cube, shape (T, d), in evaluation order.
        values: Their CV values (minimised), shape (T,).
        fold_scores: Per-fold scores, shape (T, k), k >= 2 (required).
        mask: Which evaluations are real, shape (T,) bool; default all. Padded rows have
            no effect on the real ones; rules fire only on real rows.
        fold_mask: Which fold scores are real, shape (T, k) bool; default all.
            Non-finite scores must be masked out.
        dim_mask: Real input dimensions, shape (d,) bool; padded dimensions must be 0 in
            ``configs``.
        ei, pi: Recorded acquisition values per row, shape (T,), used by the EI / PI
            rules instead of a GP's (the authors logged the EI / PI of their BO, computed
            from the first ``t`` evaluations: row ``t`` of ``"authors"``).
        convention: ``"paper"``, ``"authors"`` or ``"optuna"`` (see :data:`CONVENTIONS`):
            the values of the ``options`` fields that are left at None (the convention
            fields of :class:`ReplayOptions`: the rules' settings, the candidates and the
            GP fit).
        fraction, min_points: Top set of the bound's fit (:func:`top_mask`): the top 50%
            (Sec. 4 of the paper), at least ``min_points = 20`` (the authors' code and
            Optuna; the paper gives no minimum).
        min_evaluations: No rule fires before this many evaluations, and rows before it
            are not computed (Sec. 4.1: "only after the first 20 iterations").
        candidates: Domain points of every row's LCB minimum (with the fitted points), shape
            (m, d), in the unit cube, the same at every row, instead of ``options.candidates``
            uniform draws (``options.redraw``). The authors' code draws its 2,000 candidates
            with the same seed at every iteration (``src/enhanced_gp.py``, ``min_lcb``), and
            keeps integer hyperparameters on their grid there; pass such points to follow it
            exactly (the ``"authors"`` convention draws one uniform set). The domain
            ``Gamma`` of Eq. (8) is the search space: an integer hyperparameter with ``L``
            values encoded as ``i / (L - 1)`` is drawn on its grid by
            ``jnp.floor(u * L) / (L - 1)`` from uniform ``u``. (An int is
            the deprecated keyword form of ``options.candidates``.)
        options: The other settings; default ``ReplayOptions()``.
        **deprecated_keywords: Deprecated: ``key`` (see above) and the fields of
            :class:`ReplayOptions` as keywords, applied on top of ``options``.

    Returns:
        A :class:`ReplayResult`; ``stops`` are numbers of evaluations.

    Non-finite values, padding and dtypes:
        * Padded evaluations (``mask`` False), with their fold scores, and padded folds
          (``fold_mask`` False) are inert: whatever they hold changes nothing.
        * Concrete inputs: non-finite real values, configurations or fold scores raise
          ``ValueError`` naming the argument.
        * Traced inputs (inside ``jit`` / ``vmap``): a non-finite value or configuration on
          a real row makes every later computed row not ``ok`` (``Reason.BAD_INPUT``, bound
          ``+inf``); a non-finite real fold score makes that evaluation's threshold NaN.
          Neither can make a rule fire.
        * float16 / bfloat16 inputs raise ``TypeError`` naming the argument.

    Raises:
        ValueError / TypeError: Mismatched shapes, no rows, fewer than 2 folds, non-finite real
            values or fold scores, configurations outside the unit cube, bad options,
            a first argument that is not a PRNG key.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import regret
        >>> k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
        >>> X = jax.random.uniform(k1, (30, 2))
        >>> folds = jnp.sum((X - 0.4) ** 2, 1)[:, None] + 0.05 * jax.random.normal(k2, (30, 5))
        >>> res = regret.replay(k3, X, folds.mean(1), folds, min_points=10, min_evaluations=20,
        ...                     options=regret.ReplayOptions(candidates=128, num_segments=1))
        >>> res.bound.shape, int(res.num_evaluations[-1]), bool(res.ok[-1])
        ((30,), 30, True)
    """
    key, configs, values, fold_scores = _key_first(key, configs, values, fold_scores, deprecated_keywords)
    if isinstance(candidates, numbers.Integral) and not isinstance(candidates, bool):  # deprecated form
        deprecated_keywords["candidates"], candidates = candidates, None
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {tuple(CONVENTIONS)}, got {convention!r}")
    opts = _checks.options_with(options, ReplayOptions, "replay", deprecated_keywords)
    opts = with_convention(opts, CONVENTIONS[convention])

    configs = _checks.float_array(configs, "configs")
    values = _checks.float_array(values, "values")
    fold_scores = _checks.float_array(fold_scores, "fold_scores")
    _checks.check_rank(configs, 2, "configs", "with shape (T, d)")
    _checks.check_rank(values, 1, "values", "with shape (T,)")
    _checks.check_rank(fold_scores, 2, "fold_scores", "with shape (T, k)")
    _args.rows(configs, "configs")
    T, d = configs.shape
    if values.shape[0] != T or fold_scores.shape[0] != T:
        raise ValueError(f"configs, values and fold_scores must have the same number of rows, got "
                         f"{configs.shape}, {values.shape} and {fold_scores.shape}")
    if fold_scores.shape[1] < 2:
        raise ValueError(f"fold_scores must have at least 2 folds per evaluation, got shape {fold_scores.shape}")
    dt = _checks.common_float_dtype(configs, values, fold_scores)
    configs, values, fold_scores = configs.astype(dt), values.astype(dt), fold_scores.astype(dt)
    mask = _checks.mask_array(mask, (T,))
    fold_mask = _checks.mask_array(fold_mask, fold_scores.shape, "fold_mask")
    dim_mask = _args.dim_mask(dim_mask, d)
    _checks.check_unit_cube(configs, "configs", mask)
    _checks.check_finite_where(values, mask, "values")
    real_folds = fold_mask & mask[:, None]
    _checks.check_finite_where(fold_scores, real_folds, "fold_scores")
    if _checks.is_concrete(real_folds) and _checks.is_concrete(mask):
        k = np.asarray(real_folds).sum(1)[np.asarray(mask)]
        if k.size and k.min() < 2:
            raise ValueError(f"fold_scores must have at least 2 real folds (fold_mask) per evaluation, got {int(k.min())}")
    if _checks.is_concrete(configs) and _checks.is_concrete(dim_mask):
        off = np.asarray(configs)[:, ~np.asarray(dim_mask)]
        if off.size and np.any(off != 0):
            raise ValueError("configs must be 0 in the dimensions that dim_mask marks as padded")
    rec = {}
    for name, a in (("ei", ei), ("pi", pi)):
        if a is not None:
            a = _checks.float_array(a, name, dt)
            if a.shape != (T,):
                raise ValueError(f"{name} must have shape ({T},) like values, got {a.shape}")
            _args.no_nan_where(a, mask, name)
        rec[name] = a
    if candidates is None:
        cand = jnp.zeros((0, d), dt)
    else:  # as fit_regret_bound takes them
        cand = _args.points(candidates, "candidates", d, dt)
        _checks.check_unit_cube(cand, "candidates")

    lag = _args.nonneg_int(opts.lag, "lag")
    if opts.beta_t not in termination.BETA_T:
        raise ValueError(f"beta_t must be one of {termination.BETA_T}, got {opts.beta_t!r}")
    if isinstance(opts.ddof, bool) or opts.ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {opts.ddof!r}")
    if opts.acq_gp not in ACQ_GP:
        raise ValueError(f"acq_gp must be one of {ACQ_GP}, got {opts.acq_gp!r}")
    if opts.ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {opts.ties!r}")
    if not isinstance(opts.warping, (bool, np.bool_)):
        raise TypeError(f"warping must be a bool (or None: the convention's), got {opts.warping!r}")
    warping = _args.flag(opts.warping, "warping")
    fraction = _args.float_param(fraction, "fraction", high=1.0)
    min_points = _checks.positive_int(min_points, "min_points")
    min_evaluations = _checks.positive_int(min_evaluations, "min_evaluations")
    test_train_ratio = opts.test_train_ratio
    if test_train_ratio is not None:
        test_train_ratio = _args.float_param(test_train_ratio, "test_train_ratio", low=-1e-300)
    num_segments = _checks.positive_int(opts.num_segments, "num_segments")
    t0 = min_evaluations - 1 + lag
    acq_all = opts.acq_gp == "all" and (rec["ei"] is None or rec["pi"] is None)
    num_random = 0 if candidates is not None else _checks.positive_int(opts.candidates, "candidates")
    redraw = _args.flag(opts.redraw, "redraw")
    cfg = _ReplayConfig(
        lag=lag, t0=min(t0, T), segments=_segments(T, t0, lag, fraction, min_points, num_segments, acq_all),
        fraction=fraction, min_points=min_points, min_evaluations=min_evaluations, beta_t=opts.beta_t,
        ddof=int(opts.ddof), test_train_ratio=test_train_ratio,
        fixed_threshold=_args.flag(opts.fixed_threshold, "fixed_threshold"),
        ties_last=opts.ties == "last",
        num_candidates=num_random if redraw else 0,
        refine_steps=_args.nonneg_int(opts.refine_steps, "refine_steps"),
        refine_starts=_checks.positive_int(opts.refine_starts, "refine_starts"),
        first_fit_steps=_checks.positive_int(_steps(opts.first_fit_steps, FIRST_FIT_STEPS, warping),
                                             "first_fit_steps"),
        fit_steps=_checks.positive_int(_steps(opts.fit_steps, FIT_STEPS, warping), "fit_steps"),
        fit_tol=_checks.nonneg_float(opts.fit_tol, "fit_tol"),
        fit_mean=_args.flag(opts.fit_mean, "fit_mean"),
        min_noise=_args.float_param(opts.min_noise, "min_noise"),
        chunk_size=_checks.positive_int(opts.chunk_size, "chunk_size"),
        recorded_ei=rec["ei"] is not None, recorded_pi=rec["pi"] is not None, acq_all=acq_all,
        warping=warping, prior=_args.prior(opts.prior),
        warm_start=_args.flag(opts.warm_start, "warm_start"),
        num_starts=_checks.positive_int(opts.num_starts, "num_starts"),
        joint=_args.flag(opts.joint, "joint"),
        shared_candidates=0 if redraw else num_random,
    )
    conv_rtol = _args.rtol(opts.conv_rtol, "conv_rtol")
    scales, variances, patience, ei_t, pi_t = _rules.rule_arrays(opts.ours_scales, opts.ours_variances,
                                                                 opts.conv_patience, opts.ei_thresholds,
                                                                 opts.pi_thresholds, dt)
    size = _args.beta_size(opts.beta_size, dim_mask, dt)
    return _replay_jit(key, configs, values, fold_scores, mask, fold_mask, dim_mask, rec["ei"], rec["pi"], size,
                       jnp.asarray(_args.float_param(opts.delta, "delta", high=1.0), dt),
                       jnp.asarray(_args.float_param(opts.beta_scale, "beta_scale"), dt), scales, variances, patience,
                       ei_t, pi_t,
                       jnp.asarray(conv_rtol, dt), cand, cfg=cfg)


def _key_first(first, configs, values, fold_scores, keywords: dict):
    """``(key, configs, values, fold_scores)`` of a :func:`replay` call: the new form
    ``replay(key, configs, values, fold_scores)`` as it is; the deprecated form
    ``replay(configs, values, fold_scores, key=key)`` (a first argument that is not a PRNG
    key and ``key`` in ``keywords``, from which it is removed) with a warning."""
    if "key" in keywords:
        if _checks.is_prng_key(first) or fold_scores is not None:
            raise TypeError("replay() got the key twice: pass it once, as the first argument")
        _checks.deprecated("replay(configs, values, fold_scores, key=key) is deprecated and will be removed in "
                           "the next release; call replay(key, configs, values, fold_scores)", stacklevel=4)
        return keywords.pop("key"), first, configs, values
    if not _checks.is_prng_key(first):
        raise TypeError(f"replay() takes a PRNG key (jax.random.key) as its first argument: "
                        f"replay(key, configs, values, fold_scores); got {type(first).__name__}")
    if fold_scores is None:
        raise TypeError("replay() missing required argument: 'fold_scores'")
    return first, configs, values, fold_scores
