"""Automatic termination of hyperparameter optimisation (Makarova et al., 2022).

Stop a hyperparameter search when the plausible improvement left is smaller than the
statistical error of the objective. Two ingredients, both from Makarova et al. (2022),
*Automatic Termination for Hyperparameter Optimization* (AutoML):

* an upper bound on the simple regret of the incumbent from GP confidence bounds,
  Eq. (8): ``rbar_t = min_{x in G_t} ucb_t(x) - min_{x in Gamma} lcb_t(x)``, with
  ``ucb/lcb = mu -+ sqrt(beta_t) sigma`` (:func:`beta`, :func:`confidence_bounds`,
  :func:`regret_bound`, :func:`fit_regret_bound`);
* a threshold from the variance of the incumbent's k-fold cross-validation scores,
  Eq. (9)-(10) (Nadeau and Bengio, 2003): ``sqrt((1/k + n_test/n_train) s_cv^2)``
  (:func:`cv_threshold`).

The search stops at the first iteration ``t >= 20`` with ``rbar_t < threshold``. The
module also has the paper's baselines (convergence Conv-i, EI and PI below a threshold),
its metrics RYC and RTC, and :func:`replay`, which recomputes bound, threshold and every
rule's stopping iteration along a recorded trace in one jitted scan -- the way the paper
evaluates.

Conventions differ between the paper, the authors' released code and Optuna's
``RegretBoundEvaluator``; each difference is a parameter here (presets in
:data:`CONVENTIONS`):

* ``t`` of beta: number of evaluations (paper) or of fitted points (code, Optuna);
  ``|Gamma|``: number of hyperparameters = dimension in all three.
* variance of the folds: sample variance, ddof 1 (paper) or ddof 0 (code, Optuna).
* threshold: the incumbent's at every iteration (paper, Optuna) or frozen at
  iteration 20 (code).
* domain minimum of the LCB: random points and the fitted points (code: 2,000
  random; Optuna: 2,048 Sobol), here optionally refined by gradient steps.
* iteration ``t`` of a replayed trace: after ``t + 1`` evaluations, or after ``t``
  (code: the last evaluation is never used).

GP surrogate: :mod:`jaxstop.gp` (Matern-5/2 ARD, ML-II with weak priors), fitted on
the top ``max(min_points, floor(fraction * n))`` evaluations (:func:`top_mask`) with
standardised values; bounds are computed on the latent function.
"""

from __future__ import annotations

import functools
import math
import numbers
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxstop._src import batching as _batching, checks as _checks, linalg as _linalg
from jaxstop import gp

__all__ = [
    "RegretBound",
    "FittedBound",
    "Stops",
    "ReplayResult",
    "CONVENTIONS",
    "beta",
    "confidence_bounds",
    "regret_bound",
    "fit_regret_bound",
    "top_mask",
    "cv_threshold",
    "expected_improvement",
    "probability_of_improvement",
    "convergence_stop",
    "stop_iterations",
    "ryc",
    "rtc",
    "replay",
]

_SQRT2 = math.sqrt(2.0)
_SQRT_HALF_PI = math.sqrt(math.pi / 2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


# --------------------------------------------------------------------------- results
class RegretBound(NamedTuple):
    """Regret upper bound of Eq. (8) and its parts.

    Attributes:
        bound: ``ucb_min - lcb_min``, shape (); ``+inf`` when ``ok`` is False.
        ucb_min: Minimum of the UCB over the evaluated points ``G_t``, shape ().
        lcb_min: Minimum of the LCB over the domain: candidates, evaluated points and
            (if enabled) gradient refinement, shape ().
        lcb_min_grid: The same minimum before refinement, shape (); ``>= lcb_min``.
        x_lcb: Where ``lcb_min`` is attained, shape (d,).
        x_ucb: The evaluated point where ``ucb_min`` is attained, shape (d,).
        ok: Whether the posterior factorised, at least one evaluated point is real and
            the bound is finite, shape () bool.
    """

    bound: jax.Array
    ucb_min: jax.Array
    lcb_min: jax.Array
    lcb_min_grid: jax.Array
    x_lcb: jax.Array
    x_ucb: jax.Array
    ok: jax.Array


class FittedBound(NamedTuple):
    """What :func:`fit_regret_bound` returns.

    Attributes:
        bound: The :class:`RegretBound` in the units of ``y`` (``bound``, ``ucb_min``,
            ``lcb_min`` and ``lcb_min_grid`` mapped back from the standardised scale).
        params: Fitted GP hyperparameters (standardised scale): a warm start for the
            next call.
        fit_info: The :class:`jaxstop.gp.FitInfo` of the fit.
        top: Which rows of ``X`` were used for the fit, shape (n,) bool.
        num_top: Number of rows used, shape () int32.
        y_mean: Mean of the fitted values (standardisation), shape ().
        y_std: Their standard deviation (ddof 0), shape ().
        beta: The ``beta`` used, shape ().
        ei_max: Maximum expected improvement (:func:`expected_improvement`) over the
            candidates and fitted points, standardised units, shape ().
        pi_max: Maximum probability of improvement over the same points, shape ().
        inv_hessian: The fit's final quasi-Newton (BFGS) inverse-Hessian approximation,
            shape (d + 3, d + 3): with ``params``, a warm start for the next call
            (``init_inv_hessian``).
    """

    bound: RegretBound
    params: gp.GPParams
    fit_info: gp.FitInfo
    top: jax.Array
    num_top: jax.Array
    y_mean: jax.Array
    y_std: jax.Array
    beta: jax.Array
    ei_max: jax.Array
    pi_max: jax.Array
    inv_hessian: jax.Array


class Stops(NamedTuple):
    """Stopping iterations of every rule, as numbers of evaluations.

    ``stop`` is the number of evaluations made when the rule fires; where a rule never
    fires it is the number of evaluations of the last row (the full budget) and the
    matching ``*_fired`` entry is False.

    Attributes:
        ours: Regret bound below ``scale * threshold``, one entry per scale, shape (S,).
        conv: Conv-i (incumbent unchanged for ``i`` rows), one per patience, shape (C,).
        ei: Expected improvement below a threshold, one per threshold, shape (E,).
        pi: Probability of improvement below a threshold, shape (P,).
        ours_fired, conv_fired, ei_fired, pi_fired: Whether each rule fired, bool.
    """

    ours: jax.Array
    conv: jax.Array
    ei: jax.Array
    pi: jax.Array
    ours_fired: jax.Array
    conv_fired: jax.Array
    ei_fired: jax.Array
    pi_fired: jax.Array


class ReplayResult(NamedTuple):
    """Per-iteration quantities and stopping iterations of a replayed trace.

    Row ``t`` of a trace of length T describes the state after
    ``num_evaluations[t]`` evaluations (``t + 1`` by default, ``t`` with
    ``convention="authors"``). Rows that were not computed (too few evaluations to
    stop, or padded) hold ``bound = +inf``.

    Attributes:
        bound: Regret upper bound (Eq. 8) in the units of ``values``, shape (T,).
        threshold: CV threshold (Eq. 9-10) of the incumbent of that row, in the units
            of ``values``, shape (T,).
        ucb_min: Minimum UCB over the fitted points, units of ``values``, shape (T,).
        lcb_min: Domain minimum of the LCB, units of ``values``, shape (T,).
        ei: Maximum expected improvement over the candidates (standardised units) or
            the recorded values, shape (T,).
        pi: Maximum probability of improvement, or the recorded values, shape (T,).
        best: Incumbent value (running minimum of ``values``), shape (T,).
        incumbent: Index of the incumbent evaluation (first one among ties), (T,) int32.
        num_evaluations: Evaluations behind each row, shape (T,) int32.
        num_fitted: Points in the GP fit, shape (T,) int32.
        computed: Rows where the bound was computed, shape (T,) bool.
        ok: Rows whose GP fit and posterior were usable, shape (T,) bool.
        stops: :class:`Stops` of all rules.
        params: GP hyperparameters of the last fitted row.
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


# ----------------------------------------------------------------------- validation
def _float_param(value, name: str, *, low=0.0, high=None, inclusive_high=True) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value <= low:
        raise ValueError(f"{name} must be a finite number > {low}, got {value!r}")
    if high is not None and (value > high if inclusive_high else value >= high):
        raise ValueError(f"{name} must be <= {high}, got {value!r}")
    return value


def _nonneg_int(value, name: str) -> int:
    return _checks.positive_int(value, name, minimum=0)


def _check_posterior(post) -> None:
    if not isinstance(post, gp.Posterior):
        raise TypeError(f"posterior must be a jaxstop.gp.Posterior (see gp.posterior), got {type(post).__name__}")


def _points(X, name: str, d: int, dtype) -> jax.Array:
    X = _checks.float_array(X, name, dtype)
    _checks.check_rank(X, 2, name, "with shape (m, d)")
    if X.shape[1] != d:
        raise ValueError(f"{name} must have {d} columns like the posterior's X, got shape {X.shape}")
    return X


def _dim_mask(dim_mask, d: int) -> jax.Array:
    return _checks.mask_array(dim_mask, (d,), "dim_mask")


# ------------------------------------------------------------------------------ beta
def beta(t: ArrayLike, size: ArrayLike, delta: float = 0.1, scale: float = 0.2) -> jax.Array:
    """Confidence parameter ``beta_t = scale * 2 log(size t^2 pi^2 / (6 delta))``.

    Theorem 1 of Srinivas et al. (2010) with ``|D| = size``, scaled down by 5
    (``scale = 0.2``) as in their experiments; Makarova et al. (2022), App. A.2.3.
    The paper takes ``size`` = number of hyperparameters and ``t`` = iteration
    (number of evaluations); Optuna and the authors' code take ``size`` = dimension and
    ``t`` = number of points the GP was fitted on.

    Args:
        t: Iteration, > 0; any shape broadcastable with ``size``.
        size: ``|Gamma|``, > 0.
        delta: Failure probability, in (0, 1].
        scale: Multiplier, > 0 (0.2 in the paper).

    Returns:
        ``beta``, floating, the broadcast shape of ``t`` and ``size``.

    Example:
        >>> from jaxstop import regret
        >>> round(float(regret.beta(100.0, 9.0)), 4)   # 0.4 * log(9e4 pi^2 / 0.6)
        5.6831
    """
    t = _checks.float_array(t, "t")
    size = _checks.float_array(size, "size")
    delta = _float_param(delta, "delta", high=1.0)
    scale = _float_param(scale, "scale")
    _checks.positive_scalar(t, "t")
    _checks.positive_scalar(size, "size")
    dt = _checks.common_float_dtype(t, size)
    return _beta(t.astype(dt), size.astype(dt), delta, scale)


def _beta(t, size, delta, scale):
    return scale * 2.0 * jnp.log(size * jnp.square(t) * (math.pi**2 / 6.0) / delta)


# ----------------------------------------------------------------- confidence bounds
def confidence_bounds(posterior: gp.Posterior, X: ArrayLike, beta: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Lower and upper confidence bounds ``mu -+ sqrt(beta) sigma`` of the latent GP.

    Args:
        posterior: A :class:`jaxstop.gp.Posterior`.
        X: Query points, shape (m, d).
        beta: Confidence parameter (see :func:`beta`), scalar >= 0.

    Returns:
        ``(lcb, ucb)``, each shape (m,), on the scale of the posterior's ``y``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp, regret
        >>> post = gp.posterior(gp.params(1.0, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))
        >>> lcb, ucb = regret.confidence_bounds(post, jnp.array([[0.5]]), 4.0)  # the prior
        >>> float(lcb[0]), float(ucb[0])
        (-2.0, 2.0)
    """
    _check_posterior(posterior)
    X = _points(X, "X", posterior.X.shape[1], posterior.X.dtype)
    beta = _checks.float_array(beta, "beta", posterior.X.dtype)
    _checks.check_rank(beta, 0, "beta", "(a scalar)")
    _checks.positive_scalar(beta, "beta", allow_zero=True)
    return _confidence_bounds_jit(posterior, X, beta)


def _confidence_bounds(post, X, beta):
    mean, var = gp._predict(post, X)
    w = jnp.sqrt(jnp.maximum(beta, 0) * var)
    return mean - w, mean + w


_confidence_bounds_jit = jax.jit(_confidence_bounds)


# ------------------------------------------------------------------- EI and PI
def _ei(mu, sd, best):
    """Expected improvement ``E[max(best - f, 0)]`` for ``f ~ N(mu, sd^2)``, stable in the tail."""
    pos = sd > 0
    s = jnp.where(pos, sd, 1)
    z = (best - mu) / s
    phi = _INV_SQRT_2PI * jnp.exp(-0.5 * z * z)
    direct = phi + z * jax.scipy.special.ndtr(z)
    # z Phi(z) = -phi(z) (1 - 1/z^2 + ...) cancels for z << 0: use the scaled erfc.
    tail = phi * (1 + z * _SQRT_HALF_PI * jax.scipy.special.erfcx(-z / _SQRT2))
    h = jnp.maximum(jnp.where(z > -1, direct, tail), 0)
    return jnp.where(pos, s * h, jnp.maximum(best - mu, 0))


def _pi(mu, sd, best):
    pos = sd > 0
    s = jnp.where(pos, sd, 1)
    return jnp.where(pos, jax.scipy.special.ndtr((best - mu) / s), (mu < best).astype(mu.dtype))


def expected_improvement(posterior: gp.Posterior, X: ArrayLike, best: ArrayLike) -> jax.Array:
    """Expected improvement below ``best`` of the latent GP (minimisation).

    ``EI(x) = sigma (z Phi(z) + phi(z))`` with ``z = (best - mu) / sigma``, evaluated
    through the scaled complementary error function for ``z < -1`` so that values down
    to ~1e-300 (float64) keep their relative precision. The stopping baseline of
    Nguyen et al. (2017) used in Makarova et al. (2022) stops once the maximum EI
    over the domain falls below a threshold (Table 3: 1e-8, on standardised values).

    Args:
        posterior: A :class:`jaxstop.gp.Posterior`.
        X: Query points, shape (m, d).
        best: Incumbent value on the posterior's scale, scalar.

    Returns:
        EI at each point, shape (m,), >= 0.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp, regret
        >>> post = gp.posterior(gp.params(1.0, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))
        >>> round(float(regret.expected_improvement(post, jnp.array([[0.5]]), 0.0)[0]), 6)  # phi(0)
        0.398942
    """
    _check_posterior(posterior)
    X = _points(X, "X", posterior.X.shape[1], posterior.X.dtype)
    best = _checks.float_array(best, "best", posterior.X.dtype)
    _checks.check_rank(best, 0, "best", "(a scalar)")
    return _acq_jit(posterior, X, best, "ei")


def probability_of_improvement(posterior: gp.Posterior, X: ArrayLike, best: ArrayLike) -> jax.Array:
    """Probability that the latent GP lies below ``best``: ``Phi((best - mu) / sigma)``.

    The stopping baseline of Lorenz et al. (2016) used in Makarova et al. (2022)
    stops once the maximum PI over the domain falls below a threshold (Table 3: 1e-8).

    Args:
        posterior: A :class:`jaxstop.gp.Posterior`.
        X: Query points, shape (m, d).
        best: Incumbent value on the posterior's scale, scalar.

    Returns:
        PI at each point, shape (m,), in [0, 1].

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp, regret
        >>> post = gp.posterior(gp.params(1.0, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))
        >>> float(regret.probability_of_improvement(post, jnp.array([[0.5]]), 0.0)[0])
        0.5
    """
    _check_posterior(posterior)
    X = _points(X, "X", posterior.X.shape[1], posterior.X.dtype)
    best = _checks.float_array(best, "best", posterior.X.dtype)
    _checks.check_rank(best, 0, "best", "(a scalar)")
    return _acq_jit(posterior, X, best, "pi")


@partial(jax.jit, static_argnames=("kind",))
def _acq_jit(post, X, best, kind):
    mean, var = gp._predict(post, X)
    sd = jnp.sqrt(var)
    return _ei(mean, sd, best) if kind == "ei" else _pi(mean, sd, best)


# ------------------------------------------------------------------ regret bound
def _predict_chunked(post, Xq, chunk_size: int):
    """Latent mean and variance at many points, ``chunk_size`` rows at a time."""
    m, d = Xq.shape
    if m <= chunk_size:
        return gp._predict(post, Xq)
    num = -(-m // chunk_size)
    pad = num * chunk_size - m
    Xp = jnp.concatenate([Xq, jnp.zeros((pad, d), Xq.dtype)]) if pad else Xq
    mean, var = jax.lax.map(partial(gp._predict, post), Xp.reshape(num, chunk_size, d))
    return mean.reshape(-1)[:m], var.reshape(-1)[:m]


def _lcb_value_and_grad(post, Kinv, sqrt_beta, x):
    """LCB ``mean - sqrt(beta) sd`` at the rows of ``x`` (shape (s, d)) and its gradient in ``x``,
    from ``K^-1`` (``Kinv``, the inverse of the posterior's covariance).

    With ``u = K^-1 k(x)``, ``var = a - k . u`` and
    ``grad LCB = sum_i (alpha_i + sqrt(beta) u_i / sd) grad k_i``, where for Matern-5/2
    ``grad k_i = -(5/3) a (1 + sqrt5 r_i) exp(-sqrt5 r_i) (x - x_i) / lengthscale^2``
    (``r_i`` the scaled distance to training row ``i``, ``a`` the amplitude): one product
    with ``K^-1``, where the value and a reverse pass through :func:`jaxstop.gp.predict`
    take two with ``L^-1``. Below a variance of ``tiny`` the sd is ``sqrt(tiny)`` with no
    gradient, as in ``sqrt(maximum(var, tiny))``.
    """
    p = post.params
    dt = x.dtype
    tiny = jnp.finfo(dt).tiny
    inv_ls = jnp.exp(-p.log_lengthscales)
    amp = jnp.exp(p.log_amplitude)
    r2 = gp._sq_dist(x * inv_ls[None, :], post.X * inv_ls[None, :])
    r = jnp.sqrt(r2 + tiny)
    e = jnp.exp(-gp._SQRT5 * r)
    real = post.mask[None, :]
    H = jnp.where(real, (1 + gp._SQRT5 * r) * e, 0)
    k = jnp.where(real, amp * (H + (5.0 / 3.0) * r2 * e), 0)
    u = k @ Kinv
    var = amp - jnp.sum(k * u, axis=1)
    pos = var > tiny
    sd = jnp.sqrt(jnp.where(pos, var, tiny))
    f = p.mean + k @ post.alpha - sqrt_beta * sd
    w = (post.alpha[None, :] + jnp.where(pos, sqrt_beta / sd, 0)[:, None] * u) * H
    g = (x * jnp.sum(w, axis=1)[:, None] - w @ post.X) * (-(5.0 / 3.0) * amp * inv_ls * inv_ls)[None, :]
    return f, g


def _refine(post, sqrt_beta, x0, dim_mask, steps: int):
    """Projected descent on the LCB from several starts at once.

    Each step moves a start by ``step`` lengthscales along the normalised negative
    gradient (in lengthscale-scaled coordinates), projects onto the unit cube, and
    keeps the move only if the LCB went down; the step doubles after a success and
    halves after a failure. The LCB of every start is therefore non-increasing.

    The steps use :func:`_lcb_value_and_grad` (``K^-1`` formed once, one product per
    step). The LCB values returned are evaluated again in :func:`jaxstop.gp.predict`'s
    form (``a - |L^-1 k|^2``, free of ``K^-1``'s larger rounding for small variances).
    """
    dt = x0.dtype
    ls = jnp.exp(post.params.log_lengthscales) * dim_mask.astype(dt)
    tiny = jnp.finfo(dt).tiny
    value_and_grad = partial(_lcb_value_and_grad, post, _linalg.inv_from_tri_inv(post.chol_inv), sqrt_beta)

    def step(carry, _):
        x, f, g, size = carry
        gu = jnp.where(jnp.isfinite(g), g, 0) * ls[None, :]
        norm = jnp.sqrt(jnp.sum(gu * gu, axis=1))
        direction = -gu * ls[None, :] / jnp.maximum(norm, tiny)[:, None]
        xn = jnp.clip(x + size[:, None] * direction, 0, 1)
        fn, gn = value_and_grad(xn)
        accept = jnp.isfinite(fn) & (fn < f)
        f_prev = f
        x = jnp.where(accept[:, None], xn, x)
        f = jnp.where(accept, fn, f)
        g = jnp.where(accept[:, None], gn, g)
        size = jnp.where(accept & jnp.isfinite(f_prev), 2 * size, jnp.where(accept, size, 0.5 * size))
        return (x, f, g, size), None

    # Step 0 evaluates the starts themselves (g = 0: a zero move, accepted against
    # f = inf), so the LCB and its gradient are traced once.
    size0 = jnp.full(x0.shape[:1], 0.1, dt)
    f0 = jnp.full(x0.shape[:1], jnp.inf, dt)
    (x, _, _, _), _ = jax.lax.scan(step, (x0, f0, jnp.zeros_like(x0), size0), None, length=steps + 1)
    mean, var = gp._predict(post, x)
    return x, mean - sqrt_beta * jnp.sqrt(jnp.maximum(var, tiny))


def _smallest(v, k: int):
    """Indices of the ``k`` smallest entries of ``v``, ascending, ties to the lower index
    (``lax.top_k(-v, k)``'s order) by ``k`` rounds of min reductions, which XLA:CPU runs
    vectorised (``top_k`` and ``argmin`` it does not: 2.6x slower for 8 of 612)."""
    n = v.shape[0]
    iota = jnp.arange(n)
    taken = jnp.zeros(n, bool)
    out = []
    for _ in range(k):
        m = jnp.min(jnp.where(taken, jnp.inf, v))
        i = jnp.minimum(jnp.min(jnp.where((v == m) & ~taken, iota, n)), n - 1)
        out.append(i)
        taken = taken | (iota == i)
    return jnp.stack(out)


class _Core(NamedTuple):
    bound: RegretBound
    ei_max: jax.Array
    pi_max: jax.Array


def _bound_core(post, X_eval, eval_mask, cand, beta, dim_mask, best, *,
                refine_steps: int, refine_starts: int, chunk_size: int, train_y=None) -> _Core:
    """Eq. (8) on one posterior; also the maxima of EI and PI over the same points.

    ``train_y``: the evaluated points are the posterior's own rows (``X_eval = post.X``,
    ``eval_mask = post.mask``) conditioned on these values; their predictions then come
    from the factor (:func:`jaxstop.gp._predict_train`), not from the kernel."""
    dt = X_eval.dtype
    inf = jnp.asarray(jnp.inf, dt)
    sb = jnp.sqrt(jnp.maximum(beta, 0)).astype(dt)
    m = cand.shape[0]
    cand = jnp.where(dim_mask[None, :], cand, 0)
    X_all = jnp.concatenate([cand, X_eval])
    real = jnp.concatenate([jnp.ones(m, bool), eval_mask])
    if train_y is None:
        mu, var = _predict_chunked(post, X_all, chunk_size)
    else:
        mu_c, var_c = _predict_chunked(post, cand, chunk_size)
        mu_e, var_e = gp._predict_train(post, train_y)
        mu, var = jnp.concatenate([mu_c, mu_e]), jnp.concatenate([var_c, var_e])
    sd = jnp.sqrt(var)
    ucb_e = jnp.where(eval_mask, mu[m:] + sb * sd[m:], inf)
    i_u = jnp.argmin(ucb_e)
    ucb_min = ucb_e[i_u]
    lcb_all = jnp.where(real, mu - sb * sd, inf)
    i_l = jnp.argmin(lcb_all)
    grid_min = lcb_all[i_l]
    lcb_min, x_l = grid_min, X_all[i_l]
    if refine_steps > 0:
        idx = _smallest(lcb_all, min(refine_starts, lcb_all.shape[0]))
        xr, fr = _refine(post, sb, X_all[idx], dim_mask, refine_steps)
        j = jnp.argmin(fr)
        better = fr[j] < grid_min
        lcb_min = jnp.where(better, fr[j], grid_min)
        x_l = jnp.where(better, xr[j], x_l)
    bound = ucb_min - lcb_min
    ok = post.ok & jnp.any(eval_mask) & jnp.isfinite(bound)
    rb = RegretBound(jnp.where(ok, bound, inf), ucb_min, lcb_min, grid_min, x_l, X_eval[i_u], ok)
    ei = jnp.where(real, _ei(mu, sd, best), 0)
    pi = jnp.where(real, _pi(mu, sd, best), 0)
    return _Core(rb, jnp.max(ei), jnp.max(pi))


def _candidates(key, candidates, d: int, dtype):
    """An (m, d) array as given, or ``m`` uniform points drawn with ``key``."""
    if isinstance(candidates, numbers.Integral) and not isinstance(candidates, bool):
        m = _checks.positive_int(candidates, "candidates")
        if key is None:
            raise ValueError("key is required when candidates is a number of random points")
        return jax.random.uniform(key, (m, d), dtype)
    return _points(candidates, "candidates", d, dtype)


def regret_bound(
    posterior: gp.Posterior,
    X_eval: ArrayLike,
    eval_mask: ArrayLike | None,
    candidates: ArrayLike | int,
    beta: ArrayLike,
    *,
    key: jax.Array | None = None,
    refine_steps: int = 0,
    refine_starts: int = 8,
    dim_mask: ArrayLike | None = None,
    chunk_size: int = 1024,
) -> RegretBound:
    """Upper bound on the simple regret of the incumbent, Eq. (8) of Makarova et al. (2022).

    ``rbar = min_{x in G_t} ucb(x) - min_{x in Gamma} lcb(x)`` with
    ``ucb/lcb = mu -+ sqrt(beta) sigma`` of the latent GP. ``G_t`` is the set of real
    rows of ``X_eval`` (usually the points the GP was fitted on). The domain minimum is
    taken over ``candidates`` and ``G_t``; with ``refine_steps > 0`` it is then refined
    by projected gradient steps inside the unit cube from the ``refine_starts`` best of
    those points (all starts in one batch). Refinement only accepts moves that lower the
    LCB, so it can lower ``lcb_min`` (raise the bound) and never raise it. A random grid
    alone is biased low in high dimension; refinement removes most of that bias.

    Args:
        posterior: A :class:`jaxstop.gp.Posterior` (on standardised values, usually).
        X_eval: Evaluated points ``G_t``, shape (n, d).
        eval_mask: Which rows of ``X_eval`` are real, shape (n,) bool; ``None`` = all.
        candidates: Domain points, shape (m, d) in [0, 1], or an int ``m``: that many
            uniform random points drawn with ``key``.
        beta: Confidence parameter (see :func:`beta`), scalar >= 0.
        key: PRNG key, needed when ``candidates`` is an int.
        refine_steps: Gradient steps of the refinement (0 = off).
        refine_starts: Number of starts of the refinement.
        dim_mask: Real input dimensions, shape (d,) bool; padded dimensions are held at
            0 in the candidates and in the refinement. Default all.
        chunk_size: Candidates predicted at a time (memory bound under ``vmap``).

    Returns:
        A :class:`RegretBound` on the posterior's scale; ``bound`` is ``+inf`` with
        ``ok = False`` if the posterior failed or no evaluated point is real.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import gp, regret
        >>> X = jnp.array([[0.1], [0.4], [0.8]])
        >>> post = gp.posterior(gp.params(1.0, [0.3], 1e-4), X, jnp.array([0.5, -1.0, 0.2]))
        >>> grid = jnp.linspace(0, 1, 101)[:, None]
        >>> rb = regret.regret_bound(post, X, None, grid, 1.0, refine_steps=10)
        >>> bool(rb.bound >= 0), bool(rb.lcb_min <= rb.lcb_min_grid)
        (True, True)
    """
    _check_posterior(posterior)
    d = posterior.X.shape[1]
    dt = posterior.X.dtype
    X_eval = _points(X_eval, "X_eval", d, dt)
    eval_mask = _checks.mask_array(eval_mask, X_eval.shape[:1], "eval_mask")
    _checks.check_unit_cube(X_eval, "X_eval", eval_mask)
    cand = _candidates(key, candidates, d, dt)
    _checks.check_unit_cube(cand, "candidates")
    beta = _checks.float_array(beta, "beta", dt)
    _checks.check_rank(beta, 0, "beta", "(a scalar)")
    _checks.positive_scalar(beta, "beta", allow_zero=True)
    refine_steps = _nonneg_int(refine_steps, "refine_steps")
    refine_starts = _checks.positive_int(refine_starts, "refine_starts")
    chunk_size = _checks.positive_int(chunk_size, "chunk_size")
    dim_mask = _dim_mask(dim_mask, d)
    return _regret_bound_jit(posterior, X_eval, eval_mask, cand, beta, dim_mask,
                             refine_steps=refine_steps, refine_starts=refine_starts, chunk_size=chunk_size)


@partial(jax.jit, static_argnames=("refine_steps", "refine_starts", "chunk_size"))
def _regret_bound_jit(post, X_eval, eval_mask, cand, beta, dim_mask, *, refine_steps, refine_starts, chunk_size):
    best = jnp.asarray(0, X_eval.dtype)
    return _bound_core(post, X_eval, eval_mask, cand, beta, dim_mask, best, refine_steps=refine_steps,
                       refine_starts=refine_starts, chunk_size=chunk_size).bound


# ----------------------------------------------------------------------- top set
def _top_count(num, n_max: int, fraction: float, min_points: int):
    """``min(num, max(min_points, floor(fraction * num)))`` for an int32 ``num`` in
    ``[0, n_max]``, read from a table built in Python (so ``floor`` is exactly that of
    ``int(fraction * num)`` in the authors' code and Optuna)."""
    table = np.array([min(i, max(min_points, int(math.floor(fraction * i)))) for i in range(n_max + 1)], np.int32)
    return jnp.asarray(table)[jnp.clip(num, 0, n_max)]


def _top_order(y, avail, capacity: int, fraction: float, min_points: int):
    """Indices of the ``capacity`` smallest available values (ties: lower index first),
    the mask of those that are in the top set, and its size."""
    num = jnp.sum(avail).astype(jnp.int32)
    keyed = jnp.where(avail, y, jnp.inf)
    order = jnp.argsort(keyed, stable=True)[:capacity]
    top = _top_count(num, y.shape[0], fraction, min_points)
    return order, jnp.arange(capacity) < top, top


def _top_capacity(n: int, fraction: float, min_points: int) -> int:
    return min(n, max(min_points, int(math.floor(fraction * n))))


def top_mask(y: ArrayLike, mask: ArrayLike | None = None, fraction: float = 0.5, min_points: int = 20) -> jax.Array:
    """The evaluations the regret bound's GP is fitted on: the best ``fraction``.

    ``top = max(min_points, floor(fraction * n))`` of the lowest values among the ``n``
    real entries (all of them when ``n <= min_points``). Makarova et al. (2022, Sec. 4)
    fit on the top 50% (Fig. 2); ``min_points = 20`` as in the authors' code and
    Optuna. Ties are broken by position (earlier first), so exactly ``top`` entries are
    selected (Optuna keeps every entry tied with the last one).

    Args:
        y: Values (minimised), shape (n,).
        mask: Which entries are real, shape (n,) bool; default all. Non-finite values
            count as not real.
        fraction: ``q`` in (0, 1].
        min_points: Minimum number of points, >= 1.

    Returns:
        Boolean mask of the selected entries, shape (n,).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import regret
        >>> regret.top_mask(jnp.array([5.0, 1.0, 4.0, 2.0, 3.0]), fraction=0.5, min_points=2).tolist()
        [False, True, False, True, False]
    """
    y = _checks.float_array(y, "y")
    _checks.check_rank(y, 1, "y")
    mask = _checks.mask_array(mask, y.shape)
    fraction = _float_param(fraction, "fraction", high=1.0)
    min_points = _checks.positive_int(min_points, "min_points")
    return _top_mask_jit(y, mask, fraction=fraction, min_points=min_points)


@partial(jax.jit, static_argnames=("fraction", "min_points"))
def _top_mask_jit(y, mask, *, fraction, min_points):
    n = y.shape[0]
    order, sel, _ = _top_order(y, mask & jnp.isfinite(y), n, fraction, min_points)
    return jnp.zeros(n, bool).at[order].set(sel)


# ---------------------------------------------------------------- CV threshold
def cv_threshold(
    fold_scores: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    test_train_ratio: float | None = None,
    ddof: int = 1,
) -> jax.Array:
    """Stopping threshold from k-fold CV scores, Eq. (9)-(10) of Makarova et al. (2022).

    ``sqrt((1/k + n_test/n_train) * s^2)``: the standard deviation of the CV estimate
    with the correction of Nadeau and Bengio (2003); for k-fold CV
    ``n_test/n_train = 1/(k-1)`` (0.21 s^2 for k = 10). ``s^2`` is the variance of the
    k fold scores with ``ddof`` (1: sample variance, the default; 0: ``np.var``, as in
    the authors' code and Optuna).

    Args:
        fold_scores: Fold scores, shape (..., k); the last axis holds the folds.
        mask: Which folds are real, same shape, bool; default all. ``k`` counts the
            real folds.
        test_train_ratio: ``|D_i| / |D_-i|``; default ``1/(k-1)``.
        ddof: Delta degrees of freedom of ``s^2`` (0 or 1).

    Returns:
        Threshold, shape (...). Where fewer than 2 folds are real (or ``k <= ddof``)
        it is 0, so a rule ``bound < threshold`` never fires; with concrete input that
        case raises instead.

    Raises:
        ValueError: Fewer than 2 folds, non-finite real scores, or bad options.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import regret
        >>> s = jnp.array([0.1, 0.2, 0.3, 0.4])           # var (ddof 1) = 1/60
        >>> round(float(regret.cv_threshold(s)), 6)      # sqrt((1/4 + 1/3) / 60)
        0.098601
    """
    fold_scores = _checks.float_array(fold_scores, "fold_scores")
    if fold_scores.ndim < 1:
        raise ValueError(f"fold_scores must have a fold axis (shape (..., k)), got shape {fold_scores.shape}")
    if fold_scores.shape[-1] < 2:
        raise ValueError(f"fold_scores must have at least 2 folds on its last axis, got shape {fold_scores.shape}")
    mask = _checks.mask_array(mask, fold_scores.shape)
    if isinstance(ddof, bool) or ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {ddof!r}")
    if test_train_ratio is not None:
        test_train_ratio = _float_param(test_train_ratio, "test_train_ratio", low=-1e-300)
    _checks.check_finite_where(fold_scores, mask, "fold_scores")
    if _checks.is_concrete(mask):
        k = np.asarray(mask).sum(-1)
        if np.any(k < 2):
            raise ValueError("fold_scores must have at least 2 real folds per entry (mask), "
                             f"got {int(k.min())}")
    return _cv_threshold(fold_scores, mask, test_train_ratio, ddof)


def _cv_threshold(fold_scores, mask, ratio, ddof):
    dt = fold_scores.dtype
    mask = mask & jnp.isfinite(fold_scores)
    k = jnp.sum(mask, axis=-1).astype(dt)
    x = jnp.where(mask, fold_scores, 0)
    mean = jnp.sum(x, axis=-1) / jnp.maximum(k, 1)
    dev = jnp.where(mask, fold_scores - mean[..., None], 0)
    var = jnp.sum(dev * dev, axis=-1) / jnp.maximum(k - ddof, 1)
    r = 1 / jnp.maximum(k - 1, 1) if ratio is None else jnp.asarray(ratio, dt)
    good = (k >= 2) & (k > ddof)
    return jnp.where(good, jnp.sqrt((1 / jnp.maximum(k, 1) + r) * var), 0)


# -------------------------------------------------------------- fit + bound
def _default_params(d: int, dim_mask, dtype) -> gp.GPParams:
    """gp's default start; padded dimensions get lengthscale 1, where the prior's gradient
    is exactly 0, so they never move (and never couple into the quasi-Newton steps)."""
    p = gp._default_init(d, dtype)
    return p._replace(log_lengthscales=jnp.where(dim_mask, p.log_lengthscales, 0))


def _standardized_top(X, y, avail, capacity: int, fraction: float, min_points: int):
    order, tmask, top = _top_order(y, avail, capacity, fraction, min_points)
    Xt = jnp.where(tmask[:, None], X[order], 0)
    yt = jnp.where(tmask, y[order], 0)
    z, mean, std = gp._standardize(yt, tmask)
    return order, tmask, top, Xt, z, mean, std


class _FitConfig(NamedTuple):
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


def _fit_and_bound(key, X, y, avail, init, cand, dim_mask, size, delta, scale, cfg: _FitConfig, init_h=None):
    """Top set -> standardise -> ML-II fit (warm start ``init``, ``init_h``) -> Eq. (8); one study.

    Under ``vmap`` on CPU the studies are fitted in small groups, each until it converges
    (:mod:`jaxstop._src.batching`), not all in lockstep."""
    return _grouped_fit_and_bound(cfg)(key, X, y, avail, init, cand, dim_mask, size, delta, scale, init_h)


@functools.lru_cache(maxsize=None)
def _grouped_fit_and_bound(cfg: _FitConfig):
    return _batching.grouped_on_cpu(partial(_fit_and_bound_one, cfg=cfg), _batching.group_size(cfg.capacity))


def _fit_and_bound_one(key, X, y, avail, init, cand, dim_mask, size, delta, scale, init_h, *, cfg: _FitConfig):
    dt = X.dtype
    order, tmask, top, Xt, z, mean, std = _standardized_top(X, y, avail, cfg.capacity, cfg.fraction, cfg.min_points)
    _, k_cand = jax.random.split(key)
    params, info, post, H = gp._fit_profiled(Xt, z, tmask, init, cfg.min_noise, steps=cfg.steps,
                                             fit_mean=cfg.fit_mean, tol=cfg.fit_tol, inv_hessian=init_h)
    n = jnp.sum(avail).astype(jnp.int32)
    t = (n if cfg.beta_t == "evaluations" else top).astype(dt)
    b = _beta(jnp.maximum(t, 1), size, delta, scale)
    if cfg.num_random:
        cand = jax.random.uniform(k_cand, (cfg.num_random, X.shape[1]), dt)
    best = jnp.min(jnp.where(tmask, z, jnp.inf))
    core = _bound_core(post, Xt, tmask, cand, b, dim_mask, best, refine_steps=cfg.refine_steps,
                       refine_starts=cfg.refine_starts, chunk_size=cfg.chunk_size, train_y=z)
    rb = core.bound
    ok = rb.ok & info.finite
    inf = jnp.asarray(jnp.inf, dt)
    rb_y = rb._replace(
        bound=jnp.where(ok, rb.bound * std, inf),
        ucb_min=rb.ucb_min * std + mean,
        lcb_min=rb.lcb_min * std + mean,
        lcb_min_grid=rb.lcb_min_grid * std + mean,
        ok=ok,
    )
    sel = jnp.zeros(y.shape[0], bool).at[order].set(tmask)
    return FittedBound(rb_y, params, info, sel & avail, top, mean, std, b, core.ei_max, core.pi_max, H)


_BETA_T = ("fitted", "evaluations")


def _beta_size(beta_size, dim_mask, dt):
    if beta_size is None:
        return jnp.sum(dim_mask).astype(dt)
    return jnp.asarray(_float_param(beta_size, "beta_size"), dt)


def fit_regret_bound(
    key: jax.Array,
    X: ArrayLike,
    y: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    init: gp.GPParams | None = None,
    init_inv_hessian: ArrayLike | None = None,
    fraction: float = 0.5,
    min_points: int = 20,
    candidates: ArrayLike | int = 512,
    beta_t: str = "fitted",
    beta_size: float | None = None,
    delta: float = 0.1,
    beta_scale: float = 0.2,
    refine_steps: int = 10,
    refine_starts: int = 8,
    fit_steps: int = 20,
    fit_tol: float = 1e-2,
    fit_mean: bool = True,
    min_noise: float = 1e-6,
    dim_mask: ArrayLike | None = None,
    chunk_size: int = 1024,
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

    Args:
        key: PRNG key (random candidates).
        X: Evaluated configurations in the unit cube, shape (n, d).
        y: Their values (minimised), shape (n,).
        mask: Which rows are real, shape (n,) bool; default all.
        init: Warm start (the ``params`` of a previous call); default gp's start.
        init_inv_hessian: Warm start of the quasi-Newton curvature (the ``inv_hessian``
            of a previous call), shape (d + 3, d + 3). Default: none, the steps start
            from the identity (a gradient step) and scale it at their first update. A
            matrix that is not finite and symmetric with a positive diagonal (zeros, say,
            or one from a failed fit) is treated as none.
        fraction: Fraction of the evaluations in the fit.
        min_points: Minimum number of points in the fit.
        candidates: Domain points (m, d), or a number of uniform random points.
        beta_t: ``"fitted"`` (t = number of fitted points: Optuna, authors' code) or
            ``"evaluations"`` (t = number of evaluations: the paper).
        beta_size: ``|Gamma|`` in :func:`beta`; default the number of real dimensions.
        delta: ``delta`` of :func:`beta`.
        beta_scale: ``scale`` of :func:`beta`.
        refine_steps: Gradient refinement of the LCB minimum (0 = off).
        refine_starts: Starts of the refinement.
        fit_steps: Most quasi-Newton steps of the GP fit (one objective evaluation each).
        fit_tol: The fit stops once no component of its objective's gradient (nats per
            unit of log hyperparameter) exceeds this; 0 = always ``fit_steps`` steps.
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
            scale, where the fitted amplitude is of order 1; the fit profiles the amplitude out).
        dim_mask: Real input dimensions, shape (d,) bool; default all.
        chunk_size: Candidates predicted at a time.

    Returns:
        A :class:`FittedBound`; its ``bound`` is in the units of ``y``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import regret
        >>> X = jax.random.uniform(jax.random.key(0), (30, 2))
        >>> y = jnp.sum((X - 0.3) ** 2, axis=1)
        >>> fb = regret.fit_regret_bound(jax.random.key(1), X, y, min_points=10, candidates=128,
        ...                              beta_t="evaluations", fit_steps=6)
        >>> int(fb.num_top), bool(fb.bound.ok), bool(fb.bound.bound > 0)
        (15, True, True)
    """
    X = _checks.float_array(X, "X")
    y = _checks.float_array(y, "y")
    _checks.check_rank(X, 2, "X", "with shape (n, d)")
    _checks.check_rank(y, 1, "y", "with shape (n,)")
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X and y must have the same number of rows, got {X.shape[0]} and {y.shape[0]}")
    n, d = X.shape
    dt = _checks.common_float_dtype(X, y)
    X, y = X.astype(dt), y.astype(dt)
    mask = _checks.mask_array(mask, (n,))
    _checks.check_unit_cube(X, "X", mask)
    _checks.check_finite_where(y, mask, "y")
    fraction = _float_param(fraction, "fraction", high=1.0)
    min_points = _checks.positive_int(min_points, "min_points")
    if beta_t not in _BETA_T:
        raise ValueError(f"beta_t must be one of {_BETA_T}, got {beta_t!r}")
    delta = _float_param(delta, "delta", high=1.0)
    beta_scale = _float_param(beta_scale, "beta_scale")
    min_noise = _float_param(min_noise, "min_noise")
    dim_mask = _dim_mask(dim_mask, d)
    if isinstance(candidates, numbers.Integral) and not isinstance(candidates, bool):
        num_random = _checks.positive_int(candidates, "candidates")
        cand = jnp.zeros((0, d), dt)
    else:
        num_random = 0
        cand = _points(candidates, "candidates", d, dt)
        _checks.check_unit_cube(cand, "candidates")
    init = _default_params(d, dim_mask, dt) if init is None else gp._check_params(init, d, dt)
    init_h = _inv_hessian(init_inv_hessian, d, dt)
    cfg = _FitConfig(
        capacity=_top_capacity(n, fraction, min_points), fraction=fraction, min_points=min_points,
        beta_t=beta_t, steps=_checks.positive_int(fit_steps, "fit_steps"),
        fit_mean=bool(fit_mean),
        min_noise=min_noise, num_random=num_random, refine_steps=_nonneg_int(refine_steps, "refine_steps"),
        refine_starts=_checks.positive_int(refine_starts, "refine_starts"),
        chunk_size=_checks.positive_int(chunk_size, "chunk_size"), fit_tol=_checks.nonneg_float(fit_tol, "fit_tol"),
    )
    size = _beta_size(beta_size, dim_mask, dt)
    return _fit_regret_bound_jit(key, X, y, mask & jnp.isfinite(y), init, init_h, cand, dim_mask, size,
                                 jnp.asarray(delta, dt), jnp.asarray(beta_scale, dt), cfg=cfg)


def _inv_hessian(H, d: int, dtype):
    """A warm-start inverse Hessian as a (d + 3, d + 3) array of ``dtype``, or None."""
    if H is None:
        return None
    H = _checks.float_array(H, "init_inv_hessian")
    if H.shape != (d + 3, d + 3):
        raise ValueError(f"init_inv_hessian must have shape {(d + 3, d + 3)} (the inv_hessian of a previous "
                         f"call with d = {d}), got {H.shape}")
    return H.astype(dtype)


@partial(jax.jit, static_argnames=("cfg",))
def _fit_regret_bound_jit(key, X, y, avail, init, init_h, cand, dim_mask, size, delta, scale, *, cfg):
    return _fit_and_bound(key, X, y, avail, init, cand, dim_mask, size, delta, scale, cfg, init_h)


# ------------------------------------------------------------------- stopping rules
def _first_row(cond, fallback):
    """First index where ``cond`` (last axis) holds, else ``fallback``; and whether it held."""
    fired = jnp.any(cond, axis=-1)
    return jnp.where(fired, jnp.argmax(cond, axis=-1), fallback).astype(jnp.int32), fired


def _last_row(valid):
    n = valid.shape[0]
    return (n - 1 - jnp.argmax(valid[::-1])).astype(jnp.int32)


def _conv_counts(best, allowed, rtol):
    """Rows since the last improvement of ``best``, counted over ``allowed`` rows only and
    starting at the first of them (which counts as an improvement: count 0)."""
    dt = best.dtype
    inf = jnp.asarray(jnp.inf, dt)
    running = jax.lax.cummin(jnp.where(allowed, best, inf))
    before = jnp.concatenate([inf[None], running[:-1]])
    level = jnp.where(jnp.isfinite(before), before - rtol * jnp.abs(before), inf)
    improved = allowed & (best < level)
    first = allowed & (jnp.cumsum(allowed) == 1)
    pos = jnp.cumsum(allowed).astype(jnp.int32)
    last = jax.lax.cummax(jnp.where(improved | first, pos, 0))
    return pos - last


def convergence_stop(
    best_so_far: ArrayLike,
    patience: int | ArrayLike,
    *,
    start: int = 0,
    mask: ArrayLike | None = None,
    rtol: float = 0.0,
) -> tuple[jax.Array, jax.Array]:
    """Conv-i baseline: stop once the incumbent has not improved for ``patience`` rows.

    Counting starts at row ``start`` (which counts as an improvement, count 0); each
    later real row either improves on the best value seen since ``start`` (strictly, by
    more than ``rtol`` relative) and resets the count, or adds one. The rule fires at
    the first row whose count equals ``patience``. This is the rule of the authors'
    code with ``start = 20`` (Makarova et al., 2022, Sec. 4: "Conv-i").

    Args:
        best_so_far: Incumbent value after each row, shape (T,).
        patience: ``i``, a positive int or an int array of shape (C,).
        start: First row that may count (and stop).
        mask: Which rows are real, shape (T,) bool; default all.
        rtol: Relative tolerance of an improvement (0: any strict decrease).

    Returns:
        ``(stop, fired)``: the row at which the rule fires (the last real row if it never
        does) and whether it fired; int32 / bool, shape () or (C,).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import regret
        >>> best = jnp.array([5.0, 4.0, 4.0, 4.0, 3.0, 3.0, 3.0, 3.0])
        >>> stop, fired = regret.convergence_stop(best, 3)
        >>> int(stop), bool(fired)
        (7, True)
    """
    best = _checks.float_array(best_so_far, "best_so_far")
    _checks.check_rank(best, 1, "best_so_far", "with shape (T,)")
    mask = _checks.mask_array(mask, best.shape)
    patience = jnp.asarray(patience)
    if not jnp.issubdtype(patience.dtype, jnp.integer) or patience.ndim > 1:
        raise TypeError(f"patience must be an int or a 1-D int array, got {patience.dtype} of shape {patience.shape}")
    if _checks.is_concrete(patience) and np.any(np.asarray(patience) < 1):
        raise ValueError(f"patience must be >= 1, got {patience}")
    start = _nonneg_int(start, "start")
    rtol = float(rtol)
    if not rtol >= 0:
        raise ValueError(f"rtol must be >= 0, got {rtol}")
    return _convergence_stop_jit(best, patience.astype(jnp.int32), mask, start, rtol)


@jax.jit
def _convergence_stop_jit(best, patience, mask, start, rtol):
    allowed = mask & (jnp.arange(best.shape[0]) >= start)
    count = _conv_counts(best, allowed, rtol)
    lead = (1,) * patience.ndim
    cond = allowed.reshape(lead + allowed.shape) & (count.reshape(lead + count.shape) == patience[..., None])
    return _first_row(cond, _last_row(mask))


def _stop_rules(bound, threshold, best, num_eval, valid, ei, pi, ours_scales, conv_patience, ei_thr, pi_thr,
                *, min_evaluations: int, fixed_threshold: bool, conv_rtol):
    allowed = valid & (num_eval >= min_evaluations)
    last = _last_row(valid)
    first = jnp.argmax(allowed)
    thr = jnp.broadcast_to(threshold[first], threshold.shape) if fixed_threshold else threshold

    def stops(cond):
        row, fired = _first_row(cond & allowed[None, :], last)
        return num_eval[row], fired

    ours, ours_f = stops(bound[None, :] < ours_scales[:, None] * thr[None, :])
    count = _conv_counts(best, allowed, conv_rtol)
    conv, conv_f = stops(count[None, :] == conv_patience[:, None])
    if ei is None:
        ei_s, ei_f = jnp.zeros((0,), jnp.int32), jnp.zeros((0,), bool)
    else:
        ei_s, ei_f = stops(ei[None, :] < ei_thr[:, None])
    if pi is None:
        pi_s, pi_f = jnp.zeros((0,), jnp.int32), jnp.zeros((0,), bool)
    else:
        pi_s, pi_f = stops(pi[None, :] < pi_thr[:, None])
    return Stops(ours, conv, ei_s, pi_s, ours_f, conv_f, ei_f, pi_f)


_DEFAULT_SCALES = (1.0, 0.5 / 0.21)
_DEFAULT_PATIENCE = (10, 30, 50)
_DEFAULT_ACQ = (1e-8,)


def _rule_arrays(ours_scales, conv_patience, ei_thresholds, pi_thresholds, dt):
    scales = _checks.float_array(ours_scales, "ours_scales", dt)
    _checks.check_rank(scales, 1, "ours_scales", "(one scale per rule)")
    patience = jnp.asarray(conv_patience)
    if patience.ndim != 1 or not jnp.issubdtype(patience.dtype, jnp.integer):
        raise TypeError(f"conv_patience must be a 1-D sequence of ints, got {patience.dtype} of shape {patience.shape}")
    if _checks.is_concrete(patience) and np.any(np.asarray(patience) < 1):
        raise ValueError(f"conv_patience must be >= 1, got {patience}")
    ei_t = _checks.float_array(ei_thresholds, "ei_thresholds", dt)
    pi_t = _checks.float_array(pi_thresholds, "pi_thresholds", dt)
    _checks.check_rank(ei_t, 1, "ei_thresholds")
    _checks.check_rank(pi_t, 1, "pi_thresholds")
    return scales, patience.astype(jnp.int32), ei_t, pi_t


def stop_iterations(
    bound: ArrayLike,
    threshold: ArrayLike,
    best_so_far: ArrayLike,
    num_evaluations: ArrayLike,
    *,
    ei: ArrayLike | None = None,
    pi: ArrayLike | None = None,
    mask: ArrayLike | None = None,
    min_evaluations: int = 20,
    ours_scales=_DEFAULT_SCALES,
    fixed_threshold: bool = False,
    conv_patience=_DEFAULT_PATIENCE,
    ei_thresholds=_DEFAULT_ACQ,
    pi_thresholds=_DEFAULT_ACQ,
    conv_rtol: float = 0.0,
) -> Stops:
    """Stopping iteration of every rule of Makarova et al. (2022) along a trace.

    Row ``t`` describes the search after ``num_evaluations[t]`` evaluations. A rule
    may fire only on real rows with at least ``min_evaluations`` evaluations (the paper
    never stops during the first 20 iterations):

    * ours (Eq. 10): ``bound[t] < scale * threshold[t]``; with ``fixed_threshold`` the
      threshold of the first row that may stop is used throughout, as in the authors'
      code. ``scale = 1`` with the Nadeau-Bengio threshold is the paper's
      ``Ours_0.21``; ``Ours_0.5`` is ``scale = 0.5 / 0.21``.
    * Conv-i: :func:`convergence_stop` counted from the first row that may stop.
    * EI / PI: ``ei[t] < threshold`` (resp. ``pi``).

    Args:
        bound: Regret bound per row, shape (T,).
        threshold: Stopping threshold per row (e.g. :func:`cv_threshold` of the
            incumbent), shape (T,).
        best_so_far: Incumbent value per row, shape (T,).
        num_evaluations: Evaluations behind each row, shape (T,) int.
        ei: Expected improvement per row, shape (T,); ``None`` skips the EI rules.
        pi: Probability of improvement per row, shape (T,); ``None`` skips the PI rules.
        mask: Which rows are real, shape (T,) bool; default all.
        min_evaluations: No rule fires with fewer evaluations.
        ours_scales: Multipliers of ``threshold``, shape (S,).
        fixed_threshold: Freeze the threshold at the first row that may stop.
        conv_patience: Patiences ``i`` of Conv-i, shape (C,) ints.
        ei_thresholds: Thresholds of the EI rule, shape (E,).
        pi_thresholds: Thresholds of the PI rule, shape (P,).
        conv_rtol: Relative tolerance of an improvement in Conv-i.

    Returns:
        :class:`Stops`, as numbers of evaluations.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import regret
        >>> n = jnp.arange(1, 31)
        >>> bound = 1.0 / n                       # falls below 0.04 after 25 evaluations
        >>> s = regret.stop_iterations(bound, jnp.full(30, 0.04), jnp.ones(30), n,
        ...                            ours_scales=(1.0,), conv_patience=(5,))
        >>> s.ours.tolist(), s.conv.tolist()
        ([26], [25])
    """
    bound = _checks.float_array(bound, "bound")
    _checks.check_rank(bound, 1, "bound", "with shape (T,)")
    dt = bound.dtype
    shape = bound.shape
    arrays = {"threshold": threshold, "best_so_far": best_so_far}
    if ei is not None:
        arrays["ei"] = ei
    if pi is not None:
        arrays["pi"] = pi
    conv = {}
    for name, a in arrays.items():
        a = _checks.float_array(a, name, dt)
        if a.shape != shape:
            raise ValueError(f"{name} must have shape {shape} like bound, got {a.shape}")
        conv[name] = a
    num_evaluations = jnp.asarray(num_evaluations)
    if num_evaluations.shape != shape or not jnp.issubdtype(num_evaluations.dtype, jnp.integer):
        raise ValueError(f"num_evaluations must be ints of shape {shape}, got {num_evaluations.dtype} {num_evaluations.shape}")
    mask = _checks.mask_array(mask, shape)
    min_evaluations = _nonneg_int(min_evaluations, "min_evaluations")
    scales, patience, ei_t, pi_t = _rule_arrays(ours_scales, conv_patience, ei_thresholds, pi_thresholds, dt)
    return _stop_rules_jit(bound, conv["threshold"], conv["best_so_far"], num_evaluations.astype(jnp.int32), mask,
                           conv.get("ei"), conv.get("pi"), scales, patience, ei_t, pi_t, jnp.asarray(conv_rtol, dt),
                           min_evaluations=min_evaluations, fixed_threshold=bool(fixed_threshold))


@partial(jax.jit, static_argnames=("min_evaluations", "fixed_threshold"))
def _stop_rules_jit(bound, threshold, best, num_eval, valid, ei, pi, scales, patience, ei_t, pi_t, rtol, *,
                    min_evaluations, fixed_threshold):
    return _stop_rules(bound, threshold, best, num_eval, valid, ei, pi, scales, patience, ei_t, pi_t,
                       min_evaluations=min_evaluations, fixed_threshold=fixed_threshold, conv_rtol=rtol)


# -------------------------------------------------------------------------- metrics
def ryc(y_final: ArrayLike, y_stop: ArrayLike) -> jax.Array:
    """Relative test-error change, Eq. (11): ``(y_T - y_es) / max(y_T, y_es)``.

    Positive when stopping early gave a better (lower) test error than running to the
    end. Assumes positive errors, as the paper's metrics are.

    Example:
        >>> from jaxstop import regret
        >>> round(float(regret.ryc(0.20, 0.25)), 12)
        -0.2
    """
    y_final = _checks.float_array(y_final, "y_final")
    y_stop = _checks.float_array(y_stop, "y_stop")
    return (y_final - y_stop) / jnp.maximum(y_final, y_stop)


def rtc(t_final: ArrayLike, t_stop: ArrayLike) -> jax.Array:
    """Relative time change, Eq. (12): ``(t_T - t_es) / t_T`` (time or iterations saved).

    Example:
        >>> from jaxstop import regret
        >>> float(regret.rtc(200, 50))
        0.75
    """
    t_final = _checks.float_array(t_final, "t_final")
    t_stop = _checks.float_array(t_stop, "t_stop")
    return (t_final - t_stop) / t_final


# --------------------------------------------------------------------------- replay
CONVENTIONS = {
    "paper": dict(lag=0, beta_t="evaluations", ddof=1, fixed_threshold=False, candidates=512,
                  refine_steps=10, fit_mean=True, conv_rtol=0.0),
    "authors": dict(lag=1, beta_t="fitted", ddof=0, fixed_threshold=True, candidates=2000,
                    refine_steps=0, fit_mean=True, conv_rtol=1e-12),
    "optuna": dict(lag=0, beta_t="fitted", ddof=0, fixed_threshold=False, candidates=2048,
                   refine_steps=0, fit_mean=False, conv_rtol=0.0),
}
"""Presets of :func:`replay`; any of these keys can also be passed explicitly.

* ``"paper"``: Makarova et al. (2022) as written: row ``t`` after ``t + 1``
  evaluations, ``beta`` from (number of hyperparameters, number of evaluations),
  sample variance of the folds, the incumbent's threshold at every iteration (Eq. 10),
  the LCB minimum over 512 random points plus the fitted points, refined by 10
  gradient steps from the best 8.
* ``"authors"``: the released code behind Table 3: row ``i`` after ``i`` evaluations
  (the last evaluation is never used), ``beta`` from (dimension, fitted points),
  ``np.std`` of the folds (ddof 0), the threshold frozen at iteration 20, 2,000 random
  points plus the fitted points, no refinement; Conv-i treats values equal to 12
  significant digits as ties (the authors' incumbents passed through a CSV file).
* ``"optuna"``: Optuna 5.0's ``RegretBoundEvaluator`` + ``CrossValidationErrorEvaluator``:
  ``beta`` from (dimension, top points), zero GP mean, ddof 0, 2,048 random points plus
  the top points, no refinement.

EI / PI baselines: by default the maximum EI / PI of our GP over the candidates and
fitted points (standardised values). The authors stopped on the EI / PI values that
their BO logged (its own GP, fitted on all evaluations); pass those as ``ei`` / ``pi``
to :func:`replay` to reproduce their stops. Thresholds such as 1e-8 are specific to the
GP that produced the values: with ours the maximum EI rarely falls that low.
"""


class _ReplayConfig(NamedTuple):
    lag: int
    t0: int
    segments: tuple  # ((start, stop, capacity), ...), rows [t0, T)
    fraction: float
    min_points: int
    min_evaluations: int
    beta_t: str
    ddof: int
    test_train_ratio: float | None
    fixed_threshold: bool
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


def _segments(T: int, t0: int, lag: int, fraction: float, min_points: int, num_segments: int) -> tuple:
    """Split rows [t0, T) into contiguous runs, each with the capacity its last row needs."""
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
            segs.append((a, b, max(1, need[b - 1])))
    # merge runs that ended up with the same capacity
    merged = []
    for s in segs:
        if merged and merged[-1][2] == s[2]:
            merged[-1] = (merged[-1][0], s[1], s[2])
        else:
            merged.append(s)
    return tuple(merged)


def _replay_row(warm, t, data, cfg: _ReplayConfig, capacity: int):
    """One row of the replay: the bound after the evaluations of row ``t``; ``warm`` is the
    previous row's ``(params, inv_hessian)``, the warm start of this row's fit."""
    params, inv_h = warm
    configs, values, avail0, dim_mask, key, size, delta, scale = data
    T = values.shape[0]
    avail = avail0 & (jnp.arange(T) < t + 1 - cfg.lag)
    fcfg = _FitConfig(
        capacity=capacity, fraction=cfg.fraction, min_points=cfg.min_points, beta_t=cfg.beta_t,
        steps=cfg.fit_steps,
        fit_mean=cfg.fit_mean, min_noise=cfg.min_noise, num_random=cfg.num_candidates,
        refine_steps=cfg.refine_steps, refine_starts=cfg.refine_starts, chunk_size=cfg.chunk_size,
        fit_tol=cfg.fit_tol,
    )
    cand = jnp.zeros((0, configs.shape[1]), configs.dtype)
    fb = _fit_and_bound(jax.random.fold_in(key, t), configs, values, avail, params, cand, dim_mask,
                        size, delta, scale, fcfg, inv_h)
    rb = fb.bound
    out = (rb.bound, rb.ucb_min, rb.lcb_min, fb.ei_max, fb.pi_max, fb.num_top, rb.ok)
    return (fb.params, fb.inv_hessian), out


def _replay_prefix(configs, values, fold_scores, mask, fold_mask, cfg: _ReplayConfig):
    """Incumbent, best value, CV threshold and evaluation count of every row (no GP)."""
    T = values.shape[0]
    idx = jnp.arange(T)
    avail0 = mask & jnp.isfinite(values)
    rows = avail0[None, :] & (idx[None, :] < (idx + 1 - cfg.lag)[:, None])
    vals = jnp.where(rows, values[None, :], jnp.inf)
    incumbent = jnp.argmin(vals, axis=1).astype(jnp.int32)
    best = jnp.min(vals, axis=1)
    num_eval = jnp.sum(rows, axis=1).astype(jnp.int32)
    thr_all = _cv_threshold(fold_scores, fold_mask, cfg.test_train_ratio, cfg.ddof)
    return avail0, incumbent, best, num_eval, thr_all[incumbent]


def _replay_impl(key, configs, values, fold_scores, mask, fold_mask, dim_mask, ei_rec, pi_rec, size, delta, scale,
                 scales, patience, ei_t, pi_t, conv_rtol, cfg: _ReplayConfig, *, python_loop: bool = False):
    dt = values.dtype
    T = values.shape[0]
    avail0, incumbent, best, num_eval, threshold = _replay_prefix(configs, values, fold_scores, mask, fold_mask, cfg)
    data = (configs, values, avail0, dim_mask, key, size, delta, scale)
    d = configs.shape[1]
    fit_state = (_default_params(d, dim_mask, dt), jnp.zeros((d + 3, d + 3), dt))  # zeros: no curvature yet
    inf = jnp.asarray(jnp.inf, dt)
    outs = [(jnp.full((cfg.t0,), inf), jnp.full((cfg.t0,), inf), jnp.full((cfg.t0,), -inf),
             jnp.full((cfg.t0,), inf), jnp.full((cfg.t0,), inf), jnp.zeros((cfg.t0,), jnp.int32),
             jnp.zeros((cfg.t0,), bool))]
    for j, (start, stop, cap) in enumerate(cfg.segments):
        ts = jnp.arange(start, stop, dtype=jnp.int32)
        if j == 0:
            # Cold start: the first row is fitted ceil(first_fit_steps / fit_steps) times
            # in a row (the same compiled body as every other row); its last pass counts.
            warm = -(-cfg.first_fit_steps // cfg.fit_steps) - 1
            ts = jnp.concatenate([jnp.full((warm,), start, jnp.int32), ts])
        body = partial(_replay_row, data=data, cfg=cfg, capacity=cap)
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
    bound, ucb, lcb, ei, pi, num_fit, ok = (jnp.concatenate(a) for a in zip(*outs))
    computed = (jnp.arange(T) >= cfg.t0) & mask
    bound = jnp.where(computed, bound, inf)
    ei = ei_rec if cfg.recorded_ei else jnp.where(computed, ei, inf)
    pi = pi_rec if cfg.recorded_pi else jnp.where(computed, pi, inf)
    stops = _stop_rules(bound, threshold, best, num_eval, mask, ei, pi, scales, patience, ei_t, pi_t,
                        min_evaluations=cfg.min_evaluations, fixed_threshold=cfg.fixed_threshold,
                        conv_rtol=conv_rtol)
    return ReplayResult(bound, threshold, ucb, lcb, ei, pi, best, incumbent, num_eval, num_fit, computed,
                        ok & computed, stops, fit_state[0])


_replay_jit = jax.jit(_replay_impl, static_argnames=("cfg", "python_loop"))


def replay(
    configs: ArrayLike,
    values: ArrayLike,
    fold_scores: ArrayLike,
    *,
    key: jax.Array,
    mask: ArrayLike | None = None,
    fold_mask: ArrayLike | None = None,
    dim_mask: ArrayLike | None = None,
    ei: ArrayLike | None = None,
    pi: ArrayLike | None = None,
    convention: str = "paper",
    fraction: float = 0.5,
    min_points: int = 20,
    min_evaluations: int = 20,
    ours_scales=_DEFAULT_SCALES,
    conv_patience=_DEFAULT_PATIENCE,
    ei_thresholds=_DEFAULT_ACQ,
    pi_thresholds=_DEFAULT_ACQ,
    beta_size: float | None = None,
    delta: float = 0.1,
    beta_scale: float = 0.2,
    test_train_ratio: float | None = None,
    refine_starts: int = 8,
    first_fit_steps: int = 30,
    fit_steps: int = 6,
    fit_tol: float = 1e-2,
    min_noise: float = 1e-6,
    num_segments: int = 4,
    chunk_size: int = 1024,
    **overrides,
) -> ReplayResult:
    """Replays a recorded HPO trace: bound, threshold and every stopping rule per iteration.

    For every row ``t`` the GP is fitted on the top ``max(min_points, floor(fraction *
    n_t))`` of the first ``n_t`` evaluations (standardised), warm-started from the
    previous row's hyperparameters with ``fit_steps`` quasi-Newton steps
    (``first_fit_steps`` for the first row), and Eq. (8) is evaluated. Everything runs in one jitted
    ``lax.scan`` per capacity segment: the top set is gathered into a fixed capacity that
    grows in ``num_segments`` steps with ``t`` (no recompilation as the trace grows), so
    ``jax.vmap`` over traces works. Only rows that may stop (``n_t >= min_evaluations``)
    are computed. Makarova et al. (2022), Sec. 4.1 and Algorithm 1.

    The stopping rules (:func:`stop_iterations`): ours with threshold
    ``scale * cv_threshold(incumbent folds)`` for each of ``ours_scales`` (default: the
    paper's ``Ours_0.21`` = Nadeau-Bengio and ``Ours_0.5``), Conv-i for
    ``conv_patience``, EI and PI below ``ei_thresholds`` / ``pi_thresholds``.

    Args:
        configs: Configurations in the unit cube, shape (T, d), in evaluation order.
        values: Their CV values (minimised), shape (T,).
        fold_scores: Per-fold scores, shape (T, k), k >= 2.
        key: PRNG key (random candidates of each row).
        mask: Which evaluations are real, shape (T,) bool; default all. Padded rows have
            no effect on the real ones; rules fire only on real rows.
        fold_mask: Which fold scores are real, shape (T, k) bool; default all.
            Non-finite scores must be masked out.
        dim_mask: Real input dimensions, shape (d,) bool; padded dimensions must be 0 in
            ``configs``.
        ei, pi: Recorded acquisition values per row, shape (T,), used by the EI / PI
            rules instead of our GP's (the authors logged the EI / PI of their BO, computed
            from the first ``t`` evaluations: row ``t`` of ``"authors"``).
        convention: ``"paper"``, ``"authors"`` or ``"optuna"`` (see :data:`CONVENTIONS`);
            its settings can be overridden by keyword: ``lag`` (row ``t`` uses the first
            ``t + 1 - lag`` evaluations), ``beta_t`` (``"evaluations"`` / ``"fitted"``),
            ``ddof``, ``fixed_threshold``, ``candidates`` (random domain points per
            row), ``refine_steps``, ``fit_mean``, ``conv_rtol``.
        fraction, min_points: Top set of the fit (:func:`top_mask`).
        min_evaluations: No rule fires before this many evaluations (20 in the paper).
        ours_scales, conv_patience, ei_thresholds, pi_thresholds: The rules' settings.
        beta_size: ``|Gamma|`` of :func:`beta`; default the number of real dimensions.
        delta, beta_scale: Of :func:`beta`.
        test_train_ratio: Of :func:`cv_threshold`; default ``1/(k-1)``.
        refine_starts: Starts of the LCB refinement.
        first_fit_steps, fit_steps: Quasi-Newton steps of the first and later GP fits (the
            first row is fitted ``ceil(first_fit_steps / fit_steps)`` times in a row).
        fit_tol: Each fit stops once converged, as in :func:`fit_regret_bound`.
        min_noise: Lower bound on the GP noise variance relative to its amplitude (standardised
            scale, where the fitted amplitude is of order 1; the fit profiles the amplitude out).
        num_segments: Capacity segments (each is compiled separately).
        chunk_size: Candidates predicted at a time.

    Returns:
        A :class:`ReplayResult`; ``stops`` are numbers of evaluations.

    Raises:
        ValueError / TypeError: Mismatched shapes, fewer than 2 folds, non-finite real
            values or fold scores, configurations outside the unit cube, bad options.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import regret
        >>> k1, k2, k3 = jax.random.split(jax.random.key(0), 3)
        >>> X = jax.random.uniform(k1, (30, 2))
        >>> folds = jnp.sum((X - 0.4) ** 2, 1)[:, None] + 0.05 * jax.random.normal(k2, (30, 5))
        >>> res = regret.replay(X, folds.mean(1), folds, key=k3, min_points=10,
        ...                     min_evaluations=20, candidates=128, num_segments=1)
        >>> res.bound.shape, int(res.num_evaluations[-1]), bool(res.ok[-1])
        ((30,), 30, True)
    """
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {tuple(CONVENTIONS)}, got {convention!r}")
    unknown = set(overrides) - set(CONVENTIONS[convention])
    if unknown:
        raise TypeError(f"replay got unexpected keyword argument(s) {sorted(unknown)}")
    opts = {**CONVENTIONS[convention], **overrides}

    configs = _checks.float_array(configs, "configs")
    values = _checks.float_array(values, "values")
    fold_scores = _checks.float_array(fold_scores, "fold_scores")
    _checks.check_rank(configs, 2, "configs", "with shape (T, d)")
    _checks.check_rank(values, 1, "values", "with shape (T,)")
    _checks.check_rank(fold_scores, 2, "fold_scores", "with shape (T, k)")
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
    dim_mask = _dim_mask(dim_mask, d)
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
        rec[name] = a

    lag = _nonneg_int(opts["lag"], "lag")
    if opts["beta_t"] not in _BETA_T:
        raise ValueError(f"beta_t must be one of {_BETA_T}, got {opts['beta_t']!r}")
    if isinstance(opts["ddof"], bool) or opts["ddof"] not in (0, 1):
        raise ValueError(f"ddof must be 0 or 1, got {opts['ddof']!r}")
    fraction = _float_param(fraction, "fraction", high=1.0)
    min_points = _checks.positive_int(min_points, "min_points")
    min_evaluations = _checks.positive_int(min_evaluations, "min_evaluations")
    if test_train_ratio is not None:
        test_train_ratio = _float_param(test_train_ratio, "test_train_ratio", low=-1e-300)
    num_segments = _checks.positive_int(num_segments, "num_segments")
    t0 = min_evaluations - 1 + lag
    cfg = _ReplayConfig(
        lag=lag, t0=min(t0, T), segments=_segments(T, t0, lag, fraction, min_points, num_segments),
        fraction=fraction, min_points=min_points, min_evaluations=min_evaluations, beta_t=opts["beta_t"],
        ddof=int(opts["ddof"]), test_train_ratio=test_train_ratio, fixed_threshold=bool(opts["fixed_threshold"]),
        num_candidates=_checks.positive_int(opts["candidates"], "candidates"),
        refine_steps=_nonneg_int(opts["refine_steps"], "refine_steps"),
        refine_starts=_checks.positive_int(refine_starts, "refine_starts"),
        first_fit_steps=_checks.positive_int(first_fit_steps, "first_fit_steps"),
        fit_steps=_checks.positive_int(fit_steps, "fit_steps"), fit_tol=_checks.nonneg_float(fit_tol, "fit_tol"),
        fit_mean=bool(opts["fit_mean"]),
        min_noise=_float_param(min_noise, "min_noise"), chunk_size=_checks.positive_int(chunk_size, "chunk_size"),
        recorded_ei=rec["ei"] is not None, recorded_pi=rec["pi"] is not None,
    )
    conv_rtol = float(opts["conv_rtol"])
    if not conv_rtol >= 0:
        raise ValueError(f"conv_rtol must be >= 0, got {conv_rtol}")
    scales, patience, ei_t, pi_t = _rule_arrays(ours_scales, conv_patience, ei_thresholds, pi_thresholds, dt)
    size = _beta_size(beta_size, dim_mask, dt)
    return _replay_jit(key, configs, values, fold_scores, mask, fold_mask, dim_mask, rec["ei"], rec["pi"], size,
                       jnp.asarray(_float_param(delta, "delta", high=1.0), dt),
                       jnp.asarray(_float_param(beta_scale, "beta_scale"), dt), scales, patience, ei_t, pi_t,
                       jnp.asarray(conv_rtol, dt), cfg=cfg)
