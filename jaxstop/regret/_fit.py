"""A study's regret bound from its data in one jitted call (:func:`fit_regret_bound`).

The step itself (top set, standardisation, GP fit, Eq. 8) is
:func:`jaxstop._src.termination.fit_and_bound`, shared with :func:`jaxstop.regret.replay`
and :func:`jaxstop.policies.auto_termination.auto_termination_bo`.
"""

from __future__ import annotations

import numbers
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop import gp
from jaxstop._src import checks as _checks, gp_core, gp_fit, termination
from jaxstop._src.termination import FittedBound
from jaxstop.regret import _args
from jaxstop.regret._options import FitOptions


def fit_regret_bound(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    init: gp.GPParams | None = None,
    init_inv_hessian: ArrayLike | None = None,
    dim_mask: ArrayLike | None = None,
    candidates: ArrayLike | int = 512,
    fraction: float = 0.5,
    min_points: int = 20,
    beta_t: str = "fitted",
    options: FitOptions | None = None,
    **deprecated_keywords,
) -> FittedBound:
    """Regret bound of a study from its data: top set, GP fit and Eq. (8) in one jitted call.

    Selects the top ``max(min_points, floor(fraction * n))`` evaluations
    (:func:`top_mask`), gathers them into a fixed capacity of
    ``min(n, max(min_points, floor(fraction * n)))`` rows (the GP never sees the other
    rows), standardises them, fits the GP by maximising :mod:`jaxstop.gp`'s log marginal
    likelihood plus log prior (ML-II / MAP, analytic gradient; the amplitude and, with
    ``fit_mean``, the constant mean profiled out in closed form) with at most
    ``fit_steps`` quasi-Newton (BFGS) steps of one evaluation each from ``init``, and
    evaluates :func:`regret_bound` with ``beta`` from (``beta_size``, ``t``). The fit
    stops early once converged (``fit_tol``); under ``vmap`` on CPU each study stops on its
    own (studies run in small groups, :mod:`jaxstop._src.batching`), elsewhere a batch costs
    what its slowest study costs, at most ``fit_steps`` evaluations. In a running study pass the
    previous call's ``params`` as ``init`` and its ``inv_hessian`` as
    ``init_inv_hessian``: the steps then start from the previous optimum with its
    curvature, and a handful suffice.

    The data, the warm start, the candidates, the top set and ``beta_t`` are keywords;
    ``fit_steps``, ``fit_tol``, ``fit_mean``, ``min_noise``, ``refine_steps``,
    ``refine_starts``, ``chunk_size``, ``beta_size``, ``delta``, ``beta_scale`` and
    ``warping`` (a Kumaraswamy input warping fitted with the GP) are the fields of
    ``options`` (:class:`FitOptions`, which documents them).

    Args:
        key: PRNG key (random candidates).
        X: Evaluated configurations in the unit cube, shape (n, d).
        y: Their values (minimised), shape (n,).
        mask: Which rows are real, shape (n,) bool; default all.
        init: Warm start (the ``params`` of a previous call); default gp's start. With
            ``options.warping`` an ``init`` without a warping starts from the identity
            warping; without it, an ``init`` with one raises ``ValueError``.
        init_inv_hessian: Warm start of the quasi-Newton curvature (the ``inv_hessian``
            of a previous call), shape (d + 3, d + 3), or (3 d + 3, 3 d + 3) with
            ``options.warping``. Default: none, the steps start
            from the identity (a gradient step) and scale it at their first update. A
            matrix that is not finite and symmetric with a positive diagonal (zeros, say,
            or one from a failed fit) is treated as none.
        dim_mask: Real input dimensions, shape (d,) bool; default all. Padded dimensions
            are inert: whatever ``X`` holds there is taken as 0, as in the candidates.
        candidates: Domain points (m, d), or a number of uniform random points.
        fraction: Fraction of the evaluations in the fit.
        min_points: Minimum number of points in the fit (20: the authors' code and
            Optuna; the paper gives none).
        beta_t: ``"fitted"`` (t = number of fitted points: Optuna,
            ``improvement/evaluator.py``, and the authors' code, ``src/enhanced_gp.py``,
            lines 92 and 122) or ``"evaluations"`` (t = number of evaluations: the
            paper, App. A.2.3). The default is the code's, which computed the paper's
            Table 3, so that a bare call gives the bound of those two anchors; the
            paper's reading is the default of :func:`replay` (``convention="paper"``) and of
            :func:`jaxstop.policies.auto_termination_bo`. The two agree while ``n <=
            min_points`` and then differ by ``4 scale log(n / n_fit)`` in ``beta``
            (0.55 at the top half, ``scale = 0.2``).
        options: The other settings; default ``FitOptions()``.
        **deprecated_keywords: Deprecated: the fields of :class:`FitOptions` as keywords
            (``fit_steps=6``), applied on top of ``options`` with a
            :class:`DeprecationWarning`; use ``options=FitOptions(fit_steps=6)``. They
            will be removed in the next release.

    Returns:
        A :class:`FittedBound`; its ``bound`` is in the units of ``y`` (the GP sees ``y``
        standardised; with fewer than two valid points or a constant ``y`` there is no
        spread to measure, the scale is taken as 1, and the bound is that of the
        standardised problem: an absolute number, not a multiple of ``y``'s scale; top-set
        values that differ, but only within a few roundings of their magnitude (float32
        losses near 1e6 that differ in their last bits), have a spread the dtype does not
        resolve: ``Reason.UNREPRESENTABLE``),
        ``bound.ok`` (also ``.ok``) its status and ``bound.reason`` (also ``.reason``) a
        :class:`jaxstop.Reason`. ``ok`` is True only when every field is finite and
        computed from valid inputs; otherwise ``bound.bound`` is ``+inf``.

    Non-finite values, padding and dtypes:
        * Padded rows (``mask`` False) are inert: whatever they hold (NaN, inf, 1e30)
          changes nothing; the result equals that of the real rows alone.
        * Concrete inputs: a non-finite ``y`` on a real row, ``X`` outside the unit cube
          and bad options raise ``ValueError`` naming the argument.
        * An ``X`` without rows raises ``ValueError`` (pad a study without evaluations with
          ``mask`` False: ``Reason.EMPTY``); a ``key`` that is not a PRNG key ``TypeError``.
        * Traced inputs (inside ``jit`` / ``vmap``): a non-finite ``X`` or ``y`` on a real
          row, or an ``X`` row outside the unit cube, is left out and reported (``ok``
          False, ``Reason.BAD_INPUT``); values whose
          spread, or whose bound in the units of ``y``, exceed the dtype's range give
          ``Reason.UNREPRESENTABLE``; a failed fit or posterior gives its own reason.
        * float16 / bfloat16 inputs raise ``TypeError`` naming the argument.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import regret
        >>> X = jax.random.uniform(jax.random.key(0), (30, 2))
        >>> y = jnp.sum((X - 0.3) ** 2, axis=1)
        >>> fb = regret.fit_regret_bound(jax.random.key(1), X, y, min_points=10, candidates=128,
        ...                              beta_t="evaluations", options=regret.FitOptions(fit_steps=6))
        >>> int(fb.num_top), bool(fb.bound.ok), bool(fb.bound.bound > 0)
        (15, True, True)
    """
    opts = _checks.options_with(options, FitOptions, "fit_regret_bound", deprecated_keywords)
    _args.key(key)
    X, y = _checks.data_arrays(X, y)
    _args.rows(X, "X")
    n, d = X.shape
    dt = _checks.common_float_dtype(X, y)
    X, y = _checks.float_array(X, "X", dt), _checks.float_array(y, "y", dt)
    mask = _checks.mask_array(mask, (n,))
    dim_mask = _args.dim_mask(dim_mask, d)
    _checks.check_unit_cube(_args.real_columns(X, dim_mask), "X", mask)
    _checks.check_finite_where(y, mask, "y")
    fraction = _args.float_param(fraction, "fraction", high=1.0)
    min_points = _checks.positive_int(min_points, "min_points")
    if beta_t not in termination.BETA_T:
        raise ValueError(f"beta_t must be one of {termination.BETA_T}, got {beta_t!r}")
    delta = _args.float_param(opts.delta, "delta", high=1.0)
    beta_scale = _args.float_param(opts.beta_scale, "beta_scale")
    min_noise = _args.float_param(opts.min_noise, "min_noise")
    if isinstance(candidates, numbers.Integral) and not isinstance(candidates, bool):
        num_random = _checks.positive_int(candidates, "candidates")
        cand = jnp.zeros((0, d), dt)
    else:
        num_random = 0
        cand = _args.points(candidates, "candidates", d, dt)
        _checks.check_unit_cube(cand, "candidates")
    warping = _args.flag(opts.warping, "options.warping")
    prior = _args.prior(opts.prior)
    init = _init(init, d, dim_mask, dt, warping, prior)
    init_h = _inv_hessian(init_inv_hessian, d, dt, warping)
    cfg = termination.FitConfig(
        capacity=termination.top_capacity(n, fraction, min_points), fraction=fraction, min_points=min_points,
        beta_t=beta_t, steps=_checks.positive_int(opts.fit_steps, "fit_steps"),
        fit_mean=_args.flag(opts.fit_mean, "options.fit_mean"),
        min_noise=min_noise, num_random=num_random, refine_steps=_args.nonneg_int(opts.refine_steps, "refine_steps"),
        refine_starts=_checks.positive_int(opts.refine_starts, "refine_starts"),
        chunk_size=_checks.positive_int(opts.chunk_size, "chunk_size"),
        fit_tol=_checks.nonneg_float(opts.fit_tol, "fit_tol"), warping=warping,
        prior=prior, num_starts=_checks.positive_int(opts.num_starts, "options.num_starts"),
        joint=_args.flag(opts.joint, "options.joint"),
    )
    size = _args.beta_size(opts.beta_size, dim_mask, dt)
    return _fit_regret_bound_jit(key, X, y, mask, init, init_h, cand, dim_mask, size,
                                 np.asarray(delta, dt), np.asarray(beta_scale, dt), cfg=cfg)


def _init(init, d: int, dim_mask, dtype, warping: bool, prior: str):
    """The fit's start: the prior's default (:func:`jaxstop._src.termination.default_params`),
    or ``init`` checked; with ``warping``, an ``init`` without one gets the default's warping."""
    if init is None:
        return termination.default_params(d, dim_mask, dtype, warping, prior)
    init = gp_core.check_params(init, d, dtype, name="init")
    if init.warped and not warping:
        raise ValueError("init carries an input warping (log_warp_a, log_warp_b) but options.warping is False; "
                         "pass options=FitOptions(warping=True), or init without its warping fields")
    if warping and not init.warped:
        default = termination.default_params(d, dim_mask, dtype, warping)
        init = init._replace(log_warp_a=default.log_warp_a, log_warp_b=default.log_warp_b)
    return init


def _inv_hessian(H, d: int, dtype, warping: bool):
    """A warm-start inverse Hessian as an (r, r) array of ``dtype`` (``r = d + 3``, or
    ``3 d + 3`` with ``warping``: :func:`jaxstop._src.gp_fit.raw_size`); zeros (no curvature:
    a cold start, as the fit reads them) for None, so that a first call without one and the
    warm-started calls after it share one compiled program."""
    r = gp_fit.raw_size(d, warping)
    if H is None:
        return np.zeros((r, r), dtype)
    H = _checks.float_array(H, "init_inv_hessian")
    if H.shape != (r, r):
        raise ValueError(f"init_inv_hessian must have shape {(r, r)} (the inv_hessian of a previous call with "
                         f"d = {d}{' and warping' if warping else ''}), got {H.shape}")
    return H.astype(dtype)


@partial(jax.jit, static_argnames=("cfg",))
def _fit_regret_bound_jit(key, X, y, avail, init, init_h, cand, dim_mask, size, delta, scale, *, cfg):
    return termination.fit_and_bound(key, X, y, avail, init, cand, dim_mask, size, delta, scale, cfg, init_h)
