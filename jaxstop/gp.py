"""Gaussian-process surrogate: masked posterior and ML-II fit, batched by ``vmap``.

The model is ``y = f(x) + eps`` with ``f ~ GP(mean, amplitude * Matern52_ARD)``
(the kernel comes from :mod:`tinygp`), ``eps ~ N(0, noise)``, inputs in the
unit cube ``[0, 1]^d``. Every function is written for one study with a fixed
capacity of ``n`` rows and a boolean ``mask`` marking the real ones: padded
rows have exactly no effect, and a study that grows from 1 to ``n``
observations never recompiles. ``jax.vmap`` gives many studies at once.

``fit`` and ``posterior`` use ``y`` exactly as given; call :func:`standardize`
first when the data are not already on a unit scale (the default priors of
:func:`fit` assume standardised ``y``).

API conventions (shared with :mod:`jaxstop.regret` and :mod:`jaxstop.confidence`):

* PRNG keys: a function that needs randomness takes ``key`` as its first positional
  argument; where randomness is optional (here the random restarts of :func:`fit`)
  ``key=`` is a keyword argument.
* ``mask`` is the one name for "which rows are real" (padded rows have no effect).
* A result that can fail has a boolean ``ok`` field (:class:`Posterior`,
  :class:`FitInfo`).

This module checks the arguments; the computations are those of the internal layer
(:mod:`jaxstop._src.gp_core`: kernel, posterior, prediction; :mod:`jaxstop._src.gp_fit`:
likelihood, priors, the ML-II fit), which :mod:`jaxstop.regret` and the policies share.

Example:
    >>> import jax.numpy as jnp
    >>> from jaxstop import gp
    >>> X = jnp.array([[0.1, 0.2], [0.5, 0.5], [0.9, 0.7]])
    >>> y = jnp.array([1.0, -0.5, 0.3])
    >>> post = gp.posterior(gp.params(1.0, [0.3, 0.3], 1e-4), X, y)
    >>> mean, var = gp.predict(post, X)
    >>> bool(jnp.allclose(mean, y, atol=1e-3))
    True
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike
from tinygp import kernels, transforms
from tinygp.kernels.distance import L2Distance

from jaxstop._src import checks as _checks, gp_core as _core, gp_fit as _gp_fit
from jaxstop._src.gp_core import GPParams as GPParams
from jaxstop._src.gp_core import Posterior as Posterior
from jaxstop._src.gp_fit import FitInfo as FitInfo

__all__ = [
    "GPParams",
    "Posterior",
    "FitInfo",
    "GPFit",
    "params",
    "kernel",
    "standardize",
    "posterior",
    "predict",
    "log_marginal_likelihood",
    "log_prior",
    "fit",
]


class GPFit(NamedTuple):
    """What :func:`fit` returns; unpacks as ``params, info = gp.fit(...)``.

    Attributes:
        params: The fitted :class:`GPParams`.
        info: The :class:`FitInfo` of the fit (``info.ok``: usable).
    """

    params: GPParams
    info: FitInfo


def params(
    amplitude: ArrayLike,
    lengthscales: ArrayLike,
    noise: ArrayLike,
    mean: ArrayLike = 0.0,
    *,
    dtype=None,
) -> GPParams:
    """Builds :class:`GPParams` from natural-unit values.

    Args:
        amplitude: Kernel variance, > 0.
        lengthscales: One lengthscale per input dimension, each > 0, shape (d,).
        noise: Observation-noise variance, > 0.
        mean: Constant prior mean.
        dtype: Floating dtype of the result; by default the promoted input dtype.

    Returns:
        The parameters in log space.

    Example:
        >>> from jaxstop import gp
        >>> p = gp.params(2.0, [0.5, 0.25], 1e-3)
        >>> p.lengthscales.shape
        (2,)
    """
    amplitude = _checks.float_array(amplitude, "amplitude", dtype)
    lengthscales = _checks.float_array(lengthscales, "lengthscales", dtype)
    noise = _checks.float_array(noise, "noise", dtype)
    mean = _checks.float_array(mean, "mean", dtype)
    _checks.check_rank(amplitude, 0, "amplitude", "(a scalar)")
    _checks.check_rank(lengthscales, 1, "lengthscales", "(one per input dimension)")
    _checks.check_rank(noise, 0, "noise", "(a scalar)")
    _checks.check_rank(mean, 0, "mean", "(a scalar)")
    _checks.positive_scalar(amplitude, "amplitude")
    _checks.positive_scalar(lengthscales, "lengthscales")
    _checks.positive_scalar(noise, "noise")
    dt = dtype or _checks.common_float_dtype(amplitude, lengthscales, noise, mean)
    return GPParams(
        jnp.log(amplitude).astype(dt),
        jnp.log(lengthscales).astype(dt),
        jnp.log(noise).astype(dt),
        mean.astype(dt),
    )


def kernel(p: GPParams) -> kernels.Kernel:
    """The tinygp kernel ``amplitude * Matern52`` with ARD lengthscales."""
    base = kernels.Matern52(distance=L2Distance())
    return jnp.exp(p.log_amplitude) * transforms.Linear(jnp.exp(-p.log_lengthscales), base)


def standardize(y: ArrayLike, mask: ArrayLike | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Standardises ``y`` by its masked mean and standard deviation.

    Args:
        y: Values, shape (n,).
        mask: Which entries are real, shape (n,) bool; default all.

    Returns:
        ``(z, mean, std)`` with ``z = (y - mean) / std`` on real entries and 0 on
        padded ones. ``std`` is the population standard deviation (ddof 0); it is
        1 when the real values are constant or fewer than two.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> z, m, s = gp.standardize(jnp.array([1.0, 3.0, 99.0]), jnp.array([True, True, False]))
        >>> z.tolist(), float(m), float(s)
        ([-1.0, 1.0, 0.0], 2.0, 1.0)
    """
    y = _checks.float_array(y, "y")
    _checks.check_rank(y, 1, "y")
    mask = _checks.mask_array(mask, y.shape)
    _checks.check_finite_where(y, mask, "y")
    return _core.standardize(y, mask)


def _check_data(X, y, mask):
    X, y = _checks.data_arrays(X, y)
    if X.shape[1] < 1:
        raise ValueError(f"X must have at least one column, got shape {X.shape}")
    mask = _checks.mask_array(mask, y.shape)
    _checks.check_unit_cube(X, "X", mask)
    _checks.check_finite_where(y, mask, "y")
    dt = _checks.common_float_dtype(X, y)
    return X.astype(dt), y.astype(dt), mask


def posterior(p: GPParams, X: ArrayLike, y: ArrayLike, mask: ArrayLike | None = None) -> Posterior:
    """Conditions the GP on the real rows of ``(X, y)``.

    Args:
        p: Hyperparameters (see :func:`params`).
        X: Inputs in the unit cube, shape (n, d).
        y: Observations, shape (n,), used as given.
        mask: Which rows are real, shape (n,) bool; default all. Padded rows have
            exactly no effect on anything computed from the posterior.

    Returns:
        A :class:`Posterior` holding the Cholesky factor. If the Gram matrix is
        numerically singular a growing jitter is added (``jitter``); ``ok`` is
        False only if even that failed.

    Raises:
        ValueError: On shape mismatches, X outside [0, 1], or non-finite ``y`` on a
            real row (checked when the arrays are concrete).
    """
    X, y, mask = _check_data(X, y, mask)
    p = _core.check_params(p, X.shape[1], X.dtype)
    return _posterior_jit(p, X, y, mask)


_posterior_jit = jax.jit(_core.posterior)


def predict(post: Posterior, Xq: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Latent (noise-free) posterior mean and variance at query points.

    Args:
        post: From :func:`posterior`.
        Xq: Query points, shape (m, d).

    Returns:
        ``(mean, var)``, each shape (m,); ``var`` is clipped at 0.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> post = gp.posterior(gp.params(1.0, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))
        >>> mean, var = gp.predict(post, jnp.array([[0.3]]))   # no data: the prior
        >>> float(mean[0]), float(var[0])
        (0.0, 1.0)
    """
    if not isinstance(post, Posterior):
        raise TypeError(f"post must be a Posterior (see jaxstop.gp.posterior), got {type(post).__name__}")
    Xq = _checks.float_array(Xq, "Xq", post.X.dtype)
    _checks.check_rank(Xq, 2, "Xq", "with shape (m, d)")
    if Xq.shape[1] != post.X.shape[1]:
        raise ValueError(f"Xq must have {post.X.shape[1]} columns like the training X, got shape {Xq.shape}")
    return _predict_jit(post, Xq)


_predict_jit = jax.jit(_core.predict)


def log_marginal_likelihood(p: GPParams, X: ArrayLike, y: ArrayLike, mask: ArrayLike | None = None) -> jax.Array:
    """Log marginal likelihood ``log N(y | mean, K + noise I)`` of the real rows.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> p = gp.params(1.0, [0.5], 0.5)
        >>> lml = gp.log_marginal_likelihood(p, jnp.array([[0.2]]), jnp.array([0.0]))
        >>> round(float(lml), 6)   # log N(0 | 0, 1.5) = -log(3 pi) / 2
        -1.121671
    """
    X, y, mask = _check_data(X, y, mask)
    p = _core.check_params(p, X.shape[1], X.dtype)
    return _lml_jit(p, X, y, mask)


_lml_jit = jax.jit(_gp_fit.lml)


def log_prior(p: GPParams) -> jax.Array:
    """Weak log-prior on the hyperparameters (for standardised ``y``).

    With ``lam = 1 / lengthscale**2`` per dimension:
    ``-sum(0.1 / lam + 0.1 * lam) + Gamma(amplitude | 2, 1) + Gamma(noise | 1.1, 30)``
    (unnormalised), the priors Optuna's GP sampler uses. They keep 1-5 points
    and constant ``y`` finite; the mean is unpenalised (flat prior).
    """
    return _gp_fit.log_prior(p)


def fit(
    X: ArrayLike,
    y: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    init: GPParams | None = None,
    steps: int = 30,
    num_restarts: int = 1,
    key: jax.Array | None = None,
    fit_mean: bool = True,
    prior: bool = True,
    min_noise: float = 1e-6,
    tol: float = 1e-4,
    optimizer: optax.GradientTransformation | None = None,
) -> GPFit:
    """Maximises the log marginal likelihood plus the weak log-prior (ML-II / MAP).

    At most ``steps`` objective evaluations run inside ``jit`` from each start; the
    best start wins. The default optimiser profiles the amplitude and (with
    ``fit_mean``) the constant mean out in closed form for the current lengthscales
    and noise-to-amplitude ratio (:func:`jaxstop._src.gp_fit.lml_profiled_scale`) and runs dense BFGS on
    the rest, one evaluation per step: a rejected trial shrinks the next step instead
    of starting an inner line search, so under ``vmap`` a batch of fits costs what
    one fit costs (no study waits on another's line search) and stops once every
    study has converged. The maximiser is the joint one over all hyperparameters. The
    noise-to-amplitude ratio is kept above ``min_noise`` by a smooth floor
    (``ratio = min_noise + exp(raw)``; on standardised data the amplitude is of
    order 1). Everything is traceable, so ``fit`` can be ``vmap``-ped over studies
    and does not recompile when the number of real rows changes.

    Args:
        X: Inputs in the unit cube, shape (n, d).
        y: Observations (standardised, see :func:`standardize`), shape (n,).
        mask: Which rows are real, shape (n,) bool; default all.
        init: Warm start (e.g. the previous fit); default amplitude 1,
            lengthscales 0.5, noise 1e-2, mean 0.
        steps: Objective evaluations per start, the first at the start itself (with
            ``optimizer``: that optimiser's steps).
        num_restarts: Number of starts: ``init`` plus ``num_restarts - 1`` random
            ones (log-uniform lengthscales in [0.05, 2], amplitude in [0.3, 3],
            noise in [1e-4, 0.3]; the default optimiser starts from their lengthscales
            and noise-to-amplitude ratio); needs ``key`` when > 1.
        key: PRNG key for the random starts (a keyword: the randomness is optional).
        fit_mean: Whether the constant mean is fitted (flat prior) or kept at ``init.mean``.
        prior: Whether to add :func:`log_prior` (recommended: keeps tiny or constant
            data finite).
        min_noise: Lower bound on the noise-to-amplitude ratio, > 0 (with
            ``optimizer``: on the noise variance).
        tol: The fit stops once no component of the objective's gradient exceeds
            ``tol`` (``0``: always ``steps`` evaluations); ``info.steps`` reports the
            evaluations used. Not used with ``optimizer``.
        optimizer: An optax gradient transformation (e.g. ``optax.adam(1e-2)``) run
            for ``steps`` plain steps on all hyperparameters instead of the default.
            It is a static argument: pass the same object to avoid recompiling.

    Returns:
        A :class:`GPFit` ``(params, info)`` (a NamedTuple: it unpacks like the plain tuple
        that earlier releases returned); ``info.ok`` says whether the result is usable.
        When no start gives a finite objective (e.g. no real rows and ``prior=False``:
        nothing is identified) the first start comes back with ``info.ok`` False.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import gp
        >>> X = jax.random.uniform(jax.random.key(0), (30, 2))
        >>> y = jnp.sin(6 * X[:, 0]) + X[:, 1]
        >>> z, _, _ = gp.standardize(y)
        >>> p, info = gp.fit(X, z)
        >>> bool(info.ok)
        True
    """
    X, y, mask = _check_data(X, y, mask)
    steps = _checks.positive_int(steps, "steps")
    num_restarts = _checks.positive_int(num_restarts, "num_restarts")
    if not isinstance(min_noise, (int, float)) or not min_noise > 0:
        raise ValueError(f"min_noise must be a positive float, got {min_noise!r}")
    tol = _checks.nonneg_float(tol, "tol")
    if num_restarts > 1 and key is None:
        raise ValueError("key is required when num_restarts > 1")
    if key is None:
        key = jax.random.key(0)
    init = _core.default_init(X.shape[1], X.dtype) if init is None else _core.check_params(init, X.shape[1], X.dtype)
    p, info = _fit_jit(key, X, y, mask, init, min_noise, tol, steps=steps, num_restarts=num_restarts,
                       fit_mean=bool(fit_mean), use_prior=bool(prior), optimizer=optimizer)
    return GPFit(p, info)


_fit_jit = jax.jit(_gp_fit.fit_restarts,
                   static_argnames=("steps", "num_restarts", "fit_mean", "use_prior", "optimizer"))
