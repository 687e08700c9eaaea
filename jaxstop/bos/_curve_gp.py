"""The learning-curve GP of BOS: :class:`ExpDecayKernel`, its maximum-likelihood fit
(:func:`fit_curve_gp`) and its posterior over the epochs still to come (:func:`curve_posterior`)."""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import tinygp
from jax import lax
from jax.typing import ArrayLike

from jaxstop._src import checks, gp_likelihood, linalg, optim, status
from jaxstop._src.status import Reason
from jaxstop.bos._validate import RULES, check_horizon, check_in_dtype, check_prefix, rule, screen

_HIGHEST = lax.Precision.HIGHEST
# Box for the curve-GP hyperparameters, in log space: alpha and rate = alpha / beta.
LOG_ALPHA_BOUNDS = (math.log(1e-2), math.log(1e2))
LOG_RATE_BOUNDS = (math.log(1e-4), math.log(1e2))
# Starting points (log rate, log alpha): a 3 x 4 grid over the box.
STARTS = tuple(
    (math.log(rate), math.log(alpha)) for rate in (1e-2, 1e-1, 1.0) for alpha in (0.1, 1.0, 10.0, 100.0)
)


class ExpDecayKernel(tinygp.kernels.Kernel):
    """Exponential-decay learning-curve kernel, Eq. (5) of Dai et al. (2019).

    ``k(n, n') = beta**alpha / (n + n' + beta)**alpha``
    ``= integral exp(-lambda n) exp(-lambda n') Gamma(lambda; alpha, beta) d lambda``,
    the freeze-thaw kernel of Swersky et al. (2014). It is evaluated as
    ``exp(-alpha * log1p((n + n') / beta))``, which does not overflow for large
    ``alpha``.

    Args:
        alpha: Shape of the Gamma mixing measure, positive scalar.
        beta: Rate of the Gamma mixing measure, positive scalar.

    Example:
        >>> import jax.numpy as jnp
        >>> k = ExpDecayKernel(alpha=2.0, beta=3.0)
        >>> n = jnp.array([1.0, 2.0])
        >>> bool(jnp.allclose(k(n, n)[0, 1], 3.0**2 / (1.0 + 2.0 + 3.0) ** 2))
        True
    """

    alpha: jax.Array
    beta: jax.Array

    def evaluate(self, X1: jax.Array, X2: jax.Array) -> jax.Array:
        s = jnp.asarray(X1) + jnp.asarray(X2)
        if s.ndim:  # inputs of shape (1,)
            s = s[..., 0]
        return jnp.exp(-self.alpha * jnp.log1p(s / self.beta))


class CurveGP(NamedTuple):
    """Fitted learning-curve GP.

    Attributes:
        alpha: Kernel shape ``alpha``, scalar.
        beta: Kernel rate ``beta``, scalar.
        mean: Constant prior mean (the curve's asymptote); 0 for the zero-mean model.
        noise_var: Observation noise variance (fixed, not fitted), scalar.
        nll: Negative log marginal likelihood at the fitted parameters, scalar
            (the dtype's largest value when no start gave a finite likelihood).
        reason: int32 :class:`jaxstop.Reason` code: ``OK``;
            ``BAD_INPUT`` when the prefix held NaN or inf (inside ``jit``; outside it
            :func:`fit_curve_gp` raises); ``NOT_FINITE`` when no start gave a finite
            likelihood. Defaults to ``OK`` for a GP built by hand.

    The status of the fit is the boolean property :attr:`ok`.
    """

    alpha: jax.Array
    beta: jax.Array
    mean: jax.Array
    noise_var: jax.Array
    nll: jax.Array
    reason: jax.Array = np.int32(Reason.OK)

    @property
    def ok(self) -> jax.Array:
        """Whether the fit is usable, bool: ``reason`` is ``OK``, a finite likelihood was
        found (``nll`` finite and below the dtype's largest value) and the parameters
        are finite.

        Example:
            >>> import jax.numpy as jnp
            >>> bool(fit_curve_gp(jnp.array([0.6, 0.5, 0.45, 0.42])).ok)
            True
        """
        nll = jnp.asarray(self.nll)
        params = jnp.stack([jnp.asarray(a, nll.dtype) for a in (self.alpha, self.beta, self.mean)], axis=-1)
        fitted = jnp.isfinite(nll) & (nll < jnp.finfo(nll.dtype).max)
        return (jnp.asarray(self.reason) == Reason.OK) & fitted & jnp.all(jnp.isfinite(params), axis=-1)


def _epochs(start: int, stop: int, dtype) -> jax.Array:
    return jnp.arange(start, stop + 1, dtype=dtype)


def _unpack(u: jax.Array):
    log_rate, log_alpha = u[0], u[1]
    return jnp.exp(log_alpha), jnp.exp(log_alpha - log_rate)


def _conditioned(kernel: ExpDecayKernel, x, noise_var):
    """``(k(x, x), k(x, x) + noise_var I)``: every row is real, no mask."""
    K0 = kernel(x, x)
    return K0, gp_likelihood.conditioned(K0, None, noise_var)


def _nll_and_grad(u, x, y, noise_var, constant_mean: bool):
    """Negative log marginal likelihood and its gradient in ``u``.

    ``u = (log(alpha / beta), log(alpha)[, mean])``. The kernel-agnostic pieces are those
    of :mod:`jaxstop._src.gp_likelihood`, which :mod:`jaxstop.gp` shares: the log
    likelihood (Rasmussen & Williams, Eq. 2.30) and its gradient (Eq. 5.9,
    ``0.5 tr((a a^T - K^-1) dK/du)`` with ``a = K^-1 (y - mean)``, and ``sum(a)`` for the
    mean), both negated here; this kernel brings its log-derivatives
    ``dK/du = K * dlogK/du``. One
    Cholesky factor and one triangular inverse per evaluation (no jitter: a failed
    factor gives a non-finite value, a skipped step), both vmap-safe on CPU.
    """
    alpha, beta = _unpack(u)
    mean = u[2] if constant_mean else jnp.zeros((), y.dtype)
    K0, K = _conditioned(ExpDecayKernel(alpha, beta), x, noise_var)
    Kinv, _, r, a, logdet, n, _ = gp_likelihood.masked_solve(K, y, None, mean, precision=_HIGHEST)
    value = -gp_likelihood.log_marginal(r, a, logdet, n, precision=_HIGHEST)
    W = gp_likelihood.lml_weights(a, Kinv, None)
    s = x[:, None] + x[None, :]
    q = s / (s + beta)  # -d log1p(s / beta) / d log(beta)
    log1p = jnp.log1p(s / beta)
    # d log k / d log rate (beta = alpha / rate) and d log k / d log alpha at fixed rate
    g_rate, g_alpha = gp_likelihood.lml_grad_log(W, K0, [-alpha * q, alpha * (q - log1p)])
    grads = [-g_rate, -g_alpha] + ([-jnp.sum(a)] if constant_mean else [])
    return value, jnp.stack(grads)


def fit_impl(prefix, noise_var, learning_rate, *, constant_mean: bool, num_steps: int):
    """The fit (see :func:`fit_curve_gp`) on checked structure; traceable, one trial.

    Isolated by optimisation barriers on its inputs and its result, so that XLA compiles
    the same arithmetic wherever it is inlined (alone in :func:`fit_curve_gp`, inside a
    caller's ``jit``, in :func:`jaxstop.bos.solve_batch`'s loop): the fitted GP is then
    the same bits in every one of these programs.
    """
    prefix, noise_var, learning_rate = lax.optimization_barrier((prefix, noise_var, learning_rate))
    dtype = prefix.dtype
    x = _epochs(1, prefix.shape[0], dtype)
    starts = jnp.asarray(STARTS, dtype)
    lo = jnp.asarray([LOG_RATE_BOUNDS[0], LOG_ALPHA_BOUNDS[0]], dtype)
    hi = jnp.asarray([LOG_RATE_BOUNDS[1], LOG_ALPHA_BOUNDS[1]], dtype)
    if constant_mean:
        m0 = jnp.full((starts.shape[0], 1), 0.5, dtype) * jnp.min(prefix)
        starts = jnp.concatenate([starts, m0], axis=1)
        lo = jnp.concatenate([lo, jnp.zeros((1,), dtype)])
        hi = jnp.concatenate([hi, jnp.ones((1,), dtype)])
    value_and_grad = partial(_nll_and_grad, x=x, y=prefix, noise_var=noise_var, constant_mean=constant_mean)
    opt = optax.adam(learning_rate)

    def run(u0):
        u, v = optim.projected_first_order(value_and_grad, opt, u0, lo, hi, num_steps=num_steps)
        return u, v, None

    # Every start is usable (inside the box; value the dtype's max when never finite).
    u, v, _, _, _ = optim.multistart(run, starts)
    alpha, beta = _unpack(u)
    mean = u[2] if constant_mean else jnp.zeros((), dtype)
    reason = status.first_reason(
        (~jnp.all(RULES["prefix_finite"][0](prefix)), Reason.BAD_INPUT),
        (~(jnp.isfinite(v) & (v < jnp.finfo(dtype).max)), Reason.NOT_FINITE),
    )
    return lax.optimization_barrier(CurveGP(alpha, beta, mean, jnp.asarray(noise_var, dtype), v, reason))


fit_jit = jax.jit(fit_impl, static_argnames=("constant_mean", "num_steps"))


def fit_curve_gp(
    prefix: ArrayLike,
    *,
    noise_var: float = 1e-3,
    mean: str = "zero",
    num_steps: int = 300,
    learning_rate: float = 0.1,
) -> CurveGP:
    """Fit the learning-curve GP to the first ``N0`` validation errors.

    Maximises the log marginal likelihood of ``prefix`` (errors at epochs
    ``1..N0``) under a GP with :class:`ExpDecayKernel`, Gaussian noise of fixed
    variance ``noise_var`` (the authors fix it to ``1e-3``) and zero mean (the
    paper and the released code), or -- with ``mean="constant"`` -- a fitted
    constant mean in [0, 1], the asymptote the curve decays towards. (Appendix
    B of the paper speaks of a conjugate "Bayesian update" of ``alpha`` and
    ``beta``; the released code computes such values but then fits both by
    maximum likelihood with GPy -- start ``alpha = beta = 1``, L-BFGS-B -- which
    is what is done here, with several starts.)

    The optimisation runs in ``(log(alpha / beta), log(alpha))``, a
    parametrisation in which the ridge of nearly equal likelihoods along which
    ``alpha, beta -> infinity`` (the kernel tends to ``exp(-rate (n + n'))``) is
    axis-aligned. Projected Adam takes ``num_steps`` steps inside ``jit`` from
    each of 12 starting points (a grid of ``alpha`` in {0.1, 1, 10, 100} and
    ``alpha / beta`` in {0.01, 0.1, 1}), within the box ``alpha`` in
    [1e-2, 1e2], ``alpha / beta`` in [1e-4, 1e2]; the best iterate over all
    starts is returned. Steps whose likelihood or gradient is not finite are
    skipped. With the defaults the result matched the best of 20 scipy
    L-BFGS-B starts to 1e-9 in the negative log likelihood on curves drawn
    from the model; on flat real prefixes the optimum often lies on the
    ``alpha = 100`` edge of the ridge, where the likelihood is nearly flat.

    Invalid numbers: a prefix with NaN or inf raises ``ValueError`` (concrete) or
    gives ``ok`` False with ``reason == Reason.BAD_INPUT`` (inside ``jit``); a fit
    where no start reaches a finite likelihood gives ``reason == Reason.NOT_FINITE``.
    float16 / bfloat16 prefixes raise ``TypeError``. The prefix has no padding:
    every entry is an observed epoch.

    Args:
        prefix: Validation errors of epochs ``1..N0``, shape (N0,), float32 or float64.
        noise_var: Observation noise variance (fixed), a positive float, finite in the
            dtype of ``prefix``.
        mean: ``"zero"`` (paper, released code) or ``"constant"``.
        num_steps: Adam steps per start (static).
        learning_rate: Adam learning rate, a positive float, finite in the dtype of ``prefix``.

    Returns:
        The fitted :class:`CurveGP` (dtype of ``prefix``).

    Example:
        >>> import jax.numpy as jnp
        >>> prefix = jnp.array([0.62, 0.48, 0.41, 0.37, 0.345, 0.33, 0.32, 0.312])
        >>> gp = fit_curve_gp(prefix)
        >>> bool(gp.alpha > 0) and bool(gp.beta > 0)
        True
    """
    prefix = check_prefix(prefix)
    if mean not in ("zero", "constant"):
        raise ValueError(f"mean must be 'zero' or 'constant', got {mean!r}")
    noise_var = checks.nonneg_float(noise_var, "noise_var", positive=True)
    learning_rate = checks.nonneg_float(learning_rate, "learning_rate", positive=True)
    checks.positive_int(num_steps, "num_steps", 1)
    check_in_dtype(prefix.dtype, noise_var=noise_var, learning_rate=learning_rate)
    screen([rule("prefix", prefix, "prefix_finite")])
    return fit_jit(
        prefix,
        jnp.asarray(noise_var, prefix.dtype),
        jnp.asarray(learning_rate, prefix.dtype),
        constant_mean=mean == "constant",
        num_steps=num_steps,
    )


def posterior(gp: CurveGP, prefix: jax.Array, horizon: int):
    dtype = prefix.dtype
    n0 = prefix.shape[0]
    x = _epochs(1, n0, dtype)
    xs = _epochs(n0 + 1, horizon, dtype)
    alpha, beta = jnp.asarray(gp.alpha, dtype), jnp.asarray(gp.beta, dtype)
    kernel = ExpDecayKernel(alpha, beta)
    _, K = _conditioned(kernel, x, jnp.asarray(gp.noise_var, dtype))
    L, _, _ = gp_likelihood.factor(K, None, 0.0, max_tries=0)  # no jitter (the noise suffices)
    return gp_likelihood.posterior_from_factor(
        linalg.tri_inv(L), kernel(x, xs), kernel(xs, xs), gp.mean,
        resid=prefix - gp.mean, full_cov=True, precision=_HIGHEST,
    )


@partial(jax.jit, static_argnames=("horizon",))
def _posterior_jit(gp, prefix, bad, *, horizon):
    mean, cov = posterior(gp, prefix, horizon)
    return jnp.where(bad, jnp.nan, mean), jnp.where(bad, jnp.nan, cov)


def curve_posterior(curve_gp: CurveGP, prefix: ArrayLike, horizon: int):
    """Posterior of the noise-free curve at epochs ``N0+1..N`` given the prefix.

    Standard GP conditioning (Rasmussen & Williams, Eqs. 2.23-2.24) with the
    fitted :class:`CurveGP`: the prefix is observed at epochs ``1..N0`` with noise
    ``curve_gp.noise_var``; the returned moments are those of the latent curve
    (the released code draws ``posterior_samples_f``, also latent).

    Invalid numbers: NaN or inf in ``prefix``, or a ``curve_gp`` with non-finite or
    non-positive ``alpha``, ``beta``, ``noise_var`` (or a non-finite mean) raises
    ``ValueError`` naming it when concrete; inside ``jit`` both moments are NaN
    (there is no status field: check ``curve_gp.ok`` and the prefix, or use
    :func:`simulate`, whose :class:`Paths` carry one). float16 / bfloat16 raise
    ``TypeError``.

    Args:
        curve_gp: Fitted GP (:func:`fit_curve_gp`).
        prefix: Errors of epochs ``1..N0``, shape (N0,).
        horizon: Last epoch ``N`` (static int, ``N > N0``).

    Returns:
        ``(mean, cov)`` with shapes (N - N0,) and (N - N0, N - N0).

    Example:
        >>> import jax.numpy as jnp
        >>> prefix = jnp.array([0.6, 0.5, 0.45, 0.42])
        >>> gp = CurveGP(jnp.array(1.0), jnp.array(2.0), jnp.array(0.0), jnp.array(1e-3), jnp.array(0.0))
        >>> mean, cov = curve_posterior(gp, prefix, horizon=10)
        >>> mean.shape, cov.shape
        ((6,), (6, 6))
    """
    prefix = check_prefix(prefix)
    check_horizon(horizon, prefix.shape[0])
    gp = check_curve_gp(curve_gp, prefix.dtype)
    bad = screen([rule("prefix", prefix, "prefix_finite"), rule("curve_gp", gp[:4])])
    return _posterior_jit(gp, prefix, bad, horizon=horizon)


def check_curve_gp(curve_gp, dtype) -> CurveGP:
    """``curve_gp`` as a :class:`CurveGP` in ``dtype`` (float16 / bfloat16 fields raise ``TypeError``)."""
    if not isinstance(curve_gp, CurveGP):
        if not (isinstance(curve_gp, tuple) and len(curve_gp) in (5, 6)):
            raise TypeError(f"curve_gp must be a CurveGP (from fit_curve_gp), got {type(curve_gp).__name__}")
        curve_gp = CurveGP(*curve_gp)
    floats = {f: checks.float_array(getattr(curve_gp, f), "curve_gp").astype(dtype)
              for f in ("alpha", "beta", "mean", "noise_var", "nll")}
    return curve_gp._replace(**floats, reason=jnp.asarray(curve_gp.reason, jnp.int32))
