"""One study's regret bound from its data: top set, standardisation, GP fit, Eq. (8).

:func:`fit_and_bound` is the step that :func:`jaxstop.regret.fit_regret_bound`,
:func:`jaxstop.regret.replay` (one call per replayed row) and
:func:`jaxstop.policies.auto_termination.auto_termination_bo` (one call per ``tell``)
share: the top ``max(min_points, floor(fraction * n))`` evaluations (:func:`top_order`,
gathered into a fixed capacity), standardised, the GP fitted by
:func:`jaxstop._src.gp_fit.fit_profiled` (warm-started) and the bound of
:func:`jaxstop._src.regret_bound.bound_core`. Also the CV threshold of Eq. (9)-(10)
(:func:`cv_threshold`, on the fold variance :func:`cv_variance` and its root :func:`cv_std`) and the threshold of
one stopping rule (:func:`scaled_threshold`); :func:`acquisition_config` turns the
bound's settings into those of the BO's own GP, fitted on every evaluation (the EI / PI
baselines). No argument validation here; :mod:`jaxstop.regret` validates.

Data problems are status, never exceptions: rows that are not available (padded, or
masked out by the caller) are made inert before any arithmetic; a non-finite value on
an available row, a failed standardisation, fit or posterior, and any non-finite field
of the result give ``ok = False`` with a :class:`jaxstop._src.status.Reason`.
"""

from __future__ import annotations

import functools
import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import batching, checks, gp_core, gp_fit, gp_priors, gp_starts, numerics, optim, regret_bound, status
from jaxstop._src.regret_bound import RegretBound
from jaxstop._src.warping import PRIOR_MODE
from jaxstop._src.status import Reason

__all__ = [
    "BETA_T",
    "FitConfig",
    "FittedBound",
    "top_count",
    "top_order",
    "top_capacity",
    "standardized_top",
    "cv_variance",
    "cv_std",
    "cv_threshold",
    "scaled_threshold",
    "acquisition_config",
    "default_params",
    "fit_and_bound",
]

BETA_T = ("fitted", "evaluations")


def top_count(num, n_max: int, fraction: float, min_points: int):
    """``min(num, max(min_points, floor(fraction * num)))`` for an int32 ``num`` in
    ``[0, n_max]``, read from a table built in Python (so ``floor`` is exactly that of
    ``int(fraction * num)`` in the authors' code and Optuna)."""
    table = np.array([min(i, max(min_points, int(math.floor(fraction * i)))) for i in range(n_max + 1)], np.int32)
    return jnp.asarray(table)[jnp.clip(num, 0, n_max)]


def top_order(y, avail, capacity: int, fraction: float, min_points: int):
    """Indices of the ``capacity`` smallest available values (ties: lower index first),
    the mask of those that are in the top set, and its size."""
    num = jnp.sum(avail).astype(jnp.int32)
    keyed = jnp.where(avail, y, jnp.inf)
    order = jnp.argsort(keyed, stable=True)[:capacity]
    top = top_count(num, y.shape[0], fraction, min_points)
    return order, jnp.arange(capacity) < top, top


def top_capacity(n: int, fraction: float, min_points: int) -> int:
    """Rows of the top set of ``n`` evaluations: ``min(n, max(min_points, floor(fraction * n)))``."""
    return min(n, max(min_points, int(math.floor(fraction * n))))


def standardized_top(X, y, avail, capacity: int, fraction: float, min_points: int):
    """The top set gathered into ``capacity`` rows and standardised:
    ``(order, top mask, top count, X_top, z_top, mean, std)``."""
    order, tmask, top = top_order(y, avail, capacity, fraction, min_points)
    Xt = jnp.where(tmask[:, None], X[order], 0)
    yt = jnp.where(tmask, y[order], 0)
    z, mean, std = gp_core.standardize(yt, tmask)
    return order, tmask, top, Xt, z, mean, std


def _scaled_variance(fold_scores, mask, ddof):
    """``(v, inv, k, bad)``: :func:`jaxstop._src.numerics.scaled_variance` of the real folds
    (``v / inv^2`` their variance, right also where the squares of folds near 1e20 or 1e-20
    in float32 would overflow or underflow), ``k`` the number of real folds (a float) and
    ``bad`` whether a real fold is not finite (its ``v`` is then meaningless)."""
    finite = jnp.isfinite(fold_scores)
    bad = jnp.any(mask & ~finite, axis=-1)
    var, inv, _ = numerics.scaled_variance(fold_scores, mask & finite, ddof)
    return var, inv, jnp.sum(mask, axis=-1).astype(fold_scores.dtype), bad


def cv_variance(fold_scores, mask, ddof):
    """``(s^2, k)`` over the last axis: the variance of the real folds with ``1 / (k - ddof)``
    (``ddof = 0``: the ``1/k`` of Algorithm 1, line 11) and their number ``k`` (a float).

    Padded folds (``mask`` False) are made inert first. ``s^2`` is 0 where fewer than 2
    folds (or ``<= ddof``) are real and NaN where a real fold is not finite or the variance
    overflows (a variance the data do not define)."""
    var, inv, k, bad = _scaled_variance(fold_scores, mask, ddof)
    var = var / (inv * inv)
    return jnp.where(bad | ~jnp.isfinite(var), jnp.nan, var), k


def cv_std(fold_scores, mask, ddof):
    """``(s, k)``: the square root of :func:`cv_variance`'s ``s^2``, finite wherever ``s`` is
    representable (also where ``s^2`` overflows or underflows); NaN where a real fold is not
    finite."""
    var, inv, k, bad = _scaled_variance(fold_scores, mask, ddof)
    std = jnp.sqrt(var) / inv
    return jnp.where(bad | ~jnp.isfinite(std), jnp.nan, std), k


def cv_threshold(fold_scores, mask, ratio, ddof):
    """Eq. (9)-(10) over the last axis, ``sqrt((1/k + ratio) s^2)`` with ``ratio = 1/(k-1)``
    when None (see :func:`jaxstop.regret.cv_threshold`); 0 with fewer than 2 real folds, NaN
    where a real fold is not finite or the threshold overflows (a threshold the data do not
    define: ``bound < NaN`` never stops). Computed on the folds scaled by a power of two
    (:func:`_scaled_variance`): the same value as unscaled wherever that is representable,
    and the right one for folds whose squares overflow or underflow (about 1e+-19 and beyond
    in float32)."""
    dt = fold_scores.dtype
    var, inv, k, bad = _scaled_variance(fold_scores, mask, ddof)
    r = 1 / jnp.maximum(k - 1, 1) if ratio is None else jnp.asarray(ratio, dt)
    thr = jnp.sqrt((1 / jnp.maximum(k, 1) + r) * var) / inv
    return jnp.where(bad | ~jnp.isfinite(thr), jnp.nan, thr)


def scaled_threshold(threshold, std, scale, variance_factor):
    """The threshold of one stopping rule: ``scale * threshold + sqrt(variance_factor) * s``.

    ``threshold`` is Eq. (9)-(10)'s ``sqrt((1/k + n_test/n_train) s^2)`` and ``std`` its
    ``s`` (:func:`cv_std`). A rule sets one of the two factors and leaves the other 0:
    ``scale`` multiplies the standard deviation (the authors' code: ``Ours_c`` is
    ``scale = c / 0.21``), ``variance_factor`` replaces Eq. (9)'s ``1/k + n_test/n_train``
    (the text of Sec. 4.1: ``Ours_0.5`` is ``sqrt(0.5 s^2)``). A factor of 0 leaves its term
    out (an infinite ``threshold`` does not reach a variance rule as ``0 * inf``); NaN
    wherever a term that is in is NaN (a rule that never fires)."""
    std_term = jnp.where(scale != 0, scale * threshold, 0)
    var_term = jnp.where(variance_factor != 0, jnp.sqrt(variance_factor) * std, 0)
    return std_term + var_term


def acquisition_config(cfg: FitConfig, capacity: int) -> FitConfig:
    """The settings of the BO's own GP (the acquisition's): ``cfg`` fitted on every
    available evaluation (``fraction = 1``, the top set is all of them) in ``capacity``
    rows, without the LCB refinement (only its EI / PI maxima are read). Its GP is the
    bound's otherwise: the same ``warping``, fit steps and mean."""
    return cfg._replace(capacity=capacity, fraction=1.0, min_points=1, refine_steps=0)


def default_params(d: int, dim_mask, dtype, warping: bool = False, prior: str = "optuna") -> gp_core.GPParams:
    """The fit's default start under ``prior`` (:data:`jaxstop._src.gp_priors.START`: gp's
    own, :func:`jaxstop._src.gp_core.default_init`, for ``"optuna"``; AutoGluon 0.1's initial
    values for ``"autogluon"``); padded dimensions get lengthscale 1, where the prior's
    gradient is exactly 0, so they never move (and never couple into the quasi-Newton
    steps). With ``warping`` (static) the real dimensions start at the identity warping
    ``a = b = 1`` and the padded ones at the maximiser of the warping prior,
    ``log a = log b = -0.75^2`` (:data:`jaxstop._src.warping.PRIOR_MODE`), where its
    gradient is 0 likewise (their input column is constant, so the likelihood does not
    depend on them).

    Example:
        >>> import jax.numpy as jnp
        >>> p = default_params(2, jnp.array([True, False]), jnp.float32, warping=True)
        >>> p.log_lengthscales.tolist(), p.log_warp_a.tolist()
        ([-0.6931471824645996, 0.0], [0.0, -0.5625])
        >>> q = default_params(2, jnp.array([True, True]), jnp.float32, prior="autogluon")
        >>> round(float(jnp.exp(q.log_noise)), 6), q.log_lengthscales.tolist()
        (0.001, [0.0, 0.0])
    """
    p = gp_core.default_init(d, dtype, warping)
    start = gp_priors.START[prior]
    if start is not None:
        amp, ls, noise, mean = start
        p = p._replace(log_amplitude=jnp.asarray(math.log(amp), dtype),
                       log_lengthscales=jnp.full((d,), math.log(ls), dtype),
                       log_noise=jnp.asarray(math.log(noise), dtype), mean=jnp.asarray(mean, dtype))
    p = p._replace(log_lengthscales=jnp.where(dim_mask, p.log_lengthscales, 0))
    if warping:
        mode = jnp.asarray(PRIOR_MODE, dtype)
        p = p._replace(log_warp_a=jnp.where(dim_mask, p.log_warp_a, mode),
                       log_warp_b=jnp.where(dim_mask, p.log_warp_b, mode))
    return p


class FittedBound(NamedTuple):
    """What :func:`jaxstop.regret.fit_regret_bound` returns.

    Attributes:
        bound: The :class:`~jaxstop.regret.RegretBound` in the units of ``y`` (``bound``, ``ucb_min``,
            ``lcb_min`` and ``lcb_min_grid`` mapped back from the standardised scale).
        params: Fitted GP hyperparameters (standardised scale): a warm start for the
            next call.
        fit_info: The :class:`jaxstop.gp.FitInfo` of the fit.
        top: Which rows of ``X`` were used for the fit, shape (n,) bool.
        num_top: Number of rows used, shape () int32.
        y_mean: Mean of the fitted values (standardisation), shape ().
        y_std: Their standard deviation (ddof 0), shape ().
        beta: The ``beta`` used, shape ().
        ei_max: Maximum expected improvement (:func:`jaxstop.regret.expected_improvement`) over the
            candidates and fitted points, standardised units, shape ().
        pi_max: Maximum probability of improvement over the same points, shape ().
        inv_hessian: The fit's final quasi-Newton (BFGS) inverse-Hessian approximation,
            shape (d + 3, d + 3), or (3 d + 3, 3 d + 3) with input warping
            (:func:`jaxstop._src.gp_fit.raw_size`): with ``params``, a warm start for the
            next call (``init_inv_hessian``).

    Its status is ``bound.ok`` / ``bound.reason`` (also the properties :attr:`ok` and
    :attr:`reason`): ``ok`` only when every field above is finite and computed from
    valid inputs.
    """

    bound: RegretBound
    params: gp_core.GPParams
    fit_info: gp_fit.FitInfo
    top: jax.Array
    num_top: jax.Array
    y_mean: jax.Array
    y_std: jax.Array
    beta: jax.Array
    ei_max: jax.Array
    pi_max: jax.Array
    inv_hessian: jax.Array

    @property
    def ok(self) -> jax.Array:
        """``bound.ok``: whether every field is finite and computed from valid inputs."""
        return self.bound.ok

    @property
    def reason(self) -> jax.Array:
        """``bound.reason``: the :class:`jaxstop.Reason` code of the first failed check."""
        return self.bound.reason


class FitConfig(NamedTuple):
    """Static settings of :func:`fit_and_bound` (hashable: a ``jit`` static argument).

    ``warping``: fit a Kumaraswamy input warping with the GP
    (:func:`jaxstop._src.gp_fit.fit_profiled`); the warm start ``init`` then carries one
    (:func:`default_params` with ``warping=True``) and ``init_h`` has the side
    :func:`jaxstop._src.gp_fit.raw_size`. The posterior, the bound's candidates and its LCB
    refinement (:func:`jaxstop._src.regret_bound.refine`) all take the raw inputs and
    warp them with the fitted parameters.

    ``prior``: the GP's hyperparameter priors, one of :data:`jaxstop._src.gp_priors.PRIORS`
    (Optuna's, or AutoGluon's: the released code of Makarova et al.).

    ``num_starts``: the fit runs from ``init`` and ``num_starts - 1`` random perturbations of
    it (:func:`jaxstop._src.gp_starts.perturbed_starts`) and keeps the best objective
    (:func:`jaxstop._src.optim.multistart`; ``FitInfo.restart`` says which).

    ``joint``: fit the amplitude and the mean jointly with the rest, with ``min_noise`` a
    floor on the noise variance itself (AutoGluon 0.1's fit), instead of profiling them out
    with the floor on the noise-to-amplitude ratio (:func:`jaxstop._src.gp_fit.fit_profiled`)."""

    capacity: int
    fraction: float
    min_points: int
    beta_t: str
    steps: int
    fit_mean: bool
    min_noise: float
    num_random: int  # > 0: draw that many uniform candidates; 0: candidates given
    refine_steps: int
    refine_starts: int
    chunk_size: int
    fit_tol: float
    warping: bool = False
    prior: str = "optuna"
    num_starts: int = 1
    joint: bool = False


def fit_and_bound(key, X, y, avail, init, cand, dim_mask, size, delta, scale, cfg: FitConfig, init_h=None):
    """Top set -> standardise -> ML-II fit (warm start ``init``, ``init_h``) -> Eq. (8); one study.

    Rows that ``avail`` marks unavailable and dimensions that ``dim_mask`` marks padded are
    inert (the padded columns of ``X`` are taken as 0). A non-finite value on an available
    row, or an ``X`` row outside the unit cube, is left out of the computation and reported
    (``Reason.BAD_INPUT``); so is a
    ``beta`` that (``size``, ``delta``, ``scale``) do not define. The status
    (:class:`FittedBound` ``.ok`` / ``.reason``) checks, in order: bad input, no available
    row (``EMPTY``), the standardisation (``UNREPRESENTABLE``: the spread of ``y`` beyond
    the dtype's range, or top-set values that differ only within a few roundings of their
    magnitude, which :func:`jaxstop.gp.standardize` takes for constant), the fit and
    posterior (their reasons), the bound on the standardised scale, the bound in the units of ``y`` (``UNREPRESENTABLE``) and the
    other fields (``NOT_FINITE``).

    Under ``vmap`` on CPU the studies are fitted in small groups, each until it converges
    (:mod:`jaxstop._src.batching`), not all in lockstep."""
    return _grouped_fit_and_bound(cfg)(key, X, y, avail, init, cand, dim_mask, size, delta, scale, init_h)


@functools.lru_cache(maxsize=None)
def _grouped_fit_and_bound(cfg: FitConfig):
    return batching.grouped_on_cpu(partial(_fit_and_bound_one, cfg=cfg), batching.group_size(cfg.capacity))


def _fit_and_bound_one(key, X, y, avail, init, cand, dim_mask, size, delta, scale, init_h, *, cfg: FitConfig):
    dt = X.dtype
    X = jnp.where(dim_mask[None, :], X, 0)  # padded dimensions are inert, 0 as in the candidates
    finite_rows = jnp.isfinite(y) & gp_core.in_unit_cube(X)
    bad_rows = jnp.any(avail & ~finite_rows)
    avail = avail & finite_rows
    X, y = checks.inert_rows(X, avail, 0), checks.inert_rows(y, avail, 0)
    order, tmask, top, Xt, z, mean, std = standardized_top(X, y, avail, cfg.capacity, cfg.fraction, cfg.min_points)
    # distinct top values that standardize takes for constant (within CONSTANT_ULPS roundings
    # of their magnitude): the dtype does not resolve their spread, and a bound on the unit
    # scale it falls back to would not be in the units of y
    yt = y[order]
    blurred = (jnp.max(jnp.where(tmask, yt, -jnp.inf)) > jnp.min(jnp.where(tmask, yt, jnp.inf))) & jnp.all(z == 0)
    k_start, k_cand = jax.random.split(key)
    fit = partial(gp_fit.fit_profiled, Xt, z, tmask, min_noise=cfg.min_noise, steps=cfg.steps, fit_mean=cfg.fit_mean,
                  tol=cfg.fit_tol, warping=cfg.warping, use_prior=cfg.prior, joint=cfg.joint)
    if cfg.num_starts > 1:
        starts = gp_starts.perturbed_starts(k_start, init, cfg.num_starts, dim_mask, joint=cfg.joint)
        # the given curvature goes with the given start; the perturbed ones start without
        r = gp_fit.raw_size(X.shape[1], cfg.warping)
        h0 = jnp.zeros((r, r), dt) if init_h is None else init_h
        hs = jnp.concatenate([h0[None], jnp.zeros((cfg.num_starts - 1, r, r), dt)])

        def run(start_h):
            p, inf, post_, H_ = fit(init=start_h[0], inv_hessian=start_h[1])
            return p, jnp.where(inf.ok, inf.objective, jnp.inf), (inf, post_, H_)

        params, _, (info, post, H), best, _ = optim.multistart(run, (starts, hs))
        info = info._replace(restart=best.astype(info.restart.dtype))
    else:
        params, info, post, H = fit(init=init, inv_hessian=init_h)
    n = jnp.sum(avail).astype(jnp.int32)
    t = (n if cfg.beta_t == "evaluations" else top).astype(dt)
    b = regret_bound.beta(jnp.maximum(t, 1), size, delta, scale)
    if cfg.num_random:
        cand = jax.random.uniform(k_cand, (cfg.num_random, X.shape[1]), dt)
    best = jnp.min(jnp.where(tmask, z, jnp.inf))
    core = regret_bound.bound_core(post, Xt, tmask, cand, b, dim_mask, best, refine_steps=cfg.refine_steps,
                                   refine_starts=cfg.refine_starts, chunk_size=cfg.chunk_size, train_y=z)
    rb = core.bound
    rb_y = rb._replace(
        bound=rb.bound * std,
        ucb_min=rb.ucb_min * std + mean,
        lcb_min=rb.lcb_min * std + mean,
        lcb_min_grid=rb.lcb_min_grid * std + mean,
    )
    reason = status.first_reason(
        (bad_rows | ~jnp.isfinite(b), Reason.BAD_INPUT),
        (~jnp.any(avail), Reason.EMPTY),
        (~(jnp.isfinite(mean) & jnp.isfinite(std) & (std > 0)) | blurred, Reason.UNREPRESENTABLE),
        (~info.ok, regret_bound.own_reason(info.ok, info.reason)),
        (~rb.ok, rb.reason),
        (~status.all_finite(rb_y.bound, rb_y.ucb_min, rb_y.lcb_min, rb_y.lcb_min_grid), Reason.UNREPRESENTABLE),
        (~status.all_finite(params, core.ei_max, core.pi_max, H), Reason.NOT_FINITE),
    )
    ok = reason == int(Reason.OK)
    rb_y = rb_y._replace(bound=jnp.where(ok, rb_y.bound, jnp.asarray(jnp.inf, dt)), ok=ok, reason=reason)
    sel = jnp.zeros(y.shape[0], bool).at[order].set(tmask)
    return FittedBound(rb_y, params, info, sel & avail, top, mean, std, b, core.ei_max, core.pi_max, H)
