"""Gaussian-process surrogate: masked posterior and ML-II fit, batched by ``vmap``.

The model is ``y = f(x) + eps`` with ``f ~ GP(mean, amplitude * Matern52_ARD)``
(the kernel comes from :mod:`tinygp`), ``eps ~ N(0, noise)``, inputs in the
unit cube ``[0, 1]^d``. Every function is written for one study with a fixed
capacity of ``n`` rows and a boolean ``mask`` marking the real ones: padded
rows have exactly no effect, and a study that grows from 1 to ``n``
observations never recompiles. ``jax.vmap`` gives many studies at once.

Input warping (opt-in: ``fit(..., warping=True)`` or ``params(..., warp_a=, warp_b=)``):
the kernel acts on the Kumaraswamy CDF ``w(x) = 1 - (1 - x^a)^b`` of each input
(Snoek et al., 2014; :func:`warp`), ``a``, ``b`` fitted with the rest. The warping travels
in the last two fields of :class:`GPParams` (``None`` without one), so every function
follows the parameters it is given.

``fit`` and ``posterior`` use ``y`` exactly as given; call :func:`standardize`
first when the data are not already on a unit scale (the default priors of
:func:`fit` assume standardised ``y``).

API conventions (shared with :mod:`jaxstop.regret` and :mod:`jaxstop.confidence`):

* PRNG keys: a function that needs randomness takes ``key`` as its first positional
  argument; where randomness is optional (here the random restarts of :func:`fit`)
  ``key=`` is a keyword argument.
* ``mask`` is the one name for "which rows are real" (padded rows have no effect).
* A result that can fail has a boolean ``ok`` (:class:`Posterior` and :class:`FitInfo`:
  a field, with an int32 ``reason`` code of :class:`jaxstop.Reason`;
  :class:`Prediction` and :class:`Standardized`: a property, so that they still unpack as
  two and three arrays).

Reliability (every function):

* Padded rows (``mask`` False) are inert whatever they hold, NaN, inf and 1e30 included:
  they are replaced by 0 before any arithmetic.
* Concrete inputs are checked eagerly: ``X`` and query points outside the unit cube or not
  finite, non-finite ``y`` on a real row, wrong shapes raise ``ValueError`` naming the
  argument; float16 / bfloat16 (arrays or parameters) raise ``TypeError`` naming it.
* Inside ``jit`` / ``vmap`` the same problems are status: ``ok`` False (``Reason.BAD_INPUT``),
  never an ``ok`` result holding NaN or inf. A Gram matrix too ill-conditioned for the
  dtype is jittered until its factor is accurate (``Posterior.jitter``), else
  ``Reason.ILL_CONDITIONED``.

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

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.typing import ArrayLike
from tinygp import kernels, transforms
from tinygp.kernels.distance import L2Distance

from jaxstop._src import checks as _checks, gp_core as _core, gp_fit as _gp_fit, gp_priors as _gp_priors
from jaxstop._src.gp_core import GPParams as GPParams
from jaxstop._src.gp_core import Posterior as Posterior
from jaxstop._src.gp_core import Prediction as Prediction
from jaxstop._src.gp_core import Standardized as Standardized
from jaxstop._src.gp_fit import FitInfo as FitInfo

__all__ = [
    "GPParams",
    "Posterior",
    "Prediction",
    "Standardized",
    "FitInfo",
    "GPFit",
    "params",
    "kernel",
    "warp",
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
    warp_a: ArrayLike | None = None,
    warp_b: ArrayLike | None = None,
    dtype=None,
) -> GPParams:
    """Builds :class:`GPParams` from natural-unit values.

    Args:
        amplitude: Kernel variance, > 0.
        lengthscales: One lengthscale per input dimension, each > 0, shape (d,).
        noise: Observation-noise variance, > 0.
        mean: Constant prior mean.
        warp_a, warp_b: Kumaraswamy input-warping parameters ``a`` and ``b``, each > 0,
            shape (d,) or a scalar for every dimension; both or neither (default: no
            warping). The kernel then acts on ``1 - (1 - x^a)^b`` per dimension
            (:func:`warp`); ``a = b = 1`` is the identity up to the squeeze of ``x``
            into ``[eps, 1 - eps]``.
        dtype: Floating dtype of the result (float32 or float64); by default the
            promoted input dtype.

    Returns:
        The parameters in log space.

    Raises:
        ValueError: A value that is not finite or not positive, one of ``warp_a`` /
            ``warp_b`` without the other, a shape that does not match ``lengthscales``
            (naming it).
        TypeError: float16 / bfloat16 input or ``dtype`` (naming it).

    Example:
        >>> from jaxstop import gp
        >>> p = gp.params(2.0, [0.5, 0.25], 1e-3)
        >>> p.lengthscales.shape, p.warped
        ((2,), False)
        >>> gp.params(2.0, [0.5, 0.25], 1e-3, warp_a=[0.5, 1.0], warp_b=2.0).warp_b.tolist()
        [2.0, 2.0]
    """
    if dtype is not None and jnp.dtype(dtype).name not in _checks.SUPPORTED_FLOATS:
        raise TypeError(f"dtype must be float32 or float64, got {jnp.dtype(dtype).name}")
    amplitude = _checks.float_array(amplitude, "amplitude", dtype)
    lengthscales = _checks.float_array(lengthscales, "lengthscales", dtype)
    noise = _checks.float_array(noise, "noise", dtype)
    mean = _checks.float_array(mean, "mean", dtype)
    _checks.check_rank(amplitude, 0, "amplitude", "(a scalar)")
    _checks.check_rank(lengthscales, 1, "lengthscales", "(one per input dimension)")
    _checks.check_rank(noise, 0, "noise", "(a scalar)")
    _checks.check_rank(mean, 0, "mean", "(a scalar)")
    if _checks.is_concrete(mean) and not bool(jnp.isfinite(mean)):
        raise ValueError(f"mean must be finite, got {float(mean)!r}")
    _checks.positive_scalar(amplitude, "amplitude")
    _checks.positive_scalar(lengthscales, "lengthscales")
    _checks.positive_scalar(noise, "noise")
    if (warp_a is None) != (warp_b is None):
        raise ValueError("warp_a and warp_b must be given together (a warping) or not at all")
    warps = []
    for name, v in (("warp_a", warp_a), ("warp_b", warp_b)) if warp_a is not None else ():
        v = _checks.float_array(v, name, dtype)
        v = jnp.broadcast_to(v, lengthscales.shape) if jnp.ndim(v) == 0 else v
        if v.shape != lengthscales.shape:
            raise ValueError(f"{name} must be a scalar or have the shape of lengthscales, {lengthscales.shape}, "
                             f"got {v.shape}")
        _checks.positive_scalar(v, name)
        warps.append(v)
    dt = dtype or _checks.common_float_dtype(amplitude, lengthscales, noise, mean, *warps)
    log_warps = [jnp.log(v).astype(dt) for v in warps] or [None, None]
    return GPParams(
        jnp.log(amplitude).astype(dt),
        jnp.log(lengthscales).astype(dt),
        jnp.log(noise).astype(dt),
        mean.astype(dt),
        *log_warps,
    )


def kernel(p: GPParams) -> kernels.Kernel:
    """The tinygp kernel ``amplitude * Matern52`` with ARD lengthscales, on the warped
    inputs (:func:`warp`) when ``p`` carries a warping.

    Raises ``TypeError`` when ``p`` is not a :class:`GPParams` of float32 / float64."""
    p = _core.check_params(p, None, None, "p")
    base = kernels.Matern52(distance=L2Distance())
    k = jnp.exp(p.log_amplitude) * transforms.Linear(jnp.exp(-p.log_lengthscales), base)
    if p.warped:
        k = transforms.Transform(partial(_core.warp_inputs, p), k)
    return k


def warp(p: GPParams, X: ArrayLike) -> jax.Array:
    """``X`` (shape (n, d), in the unit cube) in the kernel's coordinates: per column
    ``w(x) = 1 - (1 - x'^a)^b``, increasing, with ``x' = eps + (1 - 2 eps) x`` (``eps``:
    ``2^-30`` in float64, ``2^-20`` in float32; :mod:`jaxstop._src.warping` gives the
    conventions, those of AutoGluon's warped GP: box ``[0.25, 4]``, LogNormal(0, 0.75)
    prior), or ``X`` itself when ``p`` carries no warping. Raises like :func:`posterior`;
    inside ``jit`` a row that is not finite or leaves the unit cube is NaN (the warping
    would clip it to the cube's edge).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> p = gp.params(1.0, [0.5], 1e-3, warp_a=2.0, warp_b=1.0)   # w(x) = x'^2
        >>> gp.warp(p, jnp.array([[0.0], [0.5], [1.0]])).round(4).ravel().tolist()
        [0.0, 0.25, 1.0]
    """
    X = _checks.float_array(X, "X")
    _checks.check_rank(X, 2, "X", "with shape (n, d)")
    p = _core.check_params(p, X.shape[1], X.dtype, "p")
    _checks.check_unit_cube(X, "X")
    return _warp_jit(p, X)


@jax.jit
def _warp_jit(p, X):
    return jnp.where(_core.in_unit_cube(X)[:, None], _core.warp_inputs(p, X), jnp.nan)


def standardize(y: ArrayLike, mask: ArrayLike | None = None) -> Standardized:
    """Standardises ``y`` by its masked mean and standard deviation.

    Works for every finite ``y``: the values are scaled by powers of two (exact) before
    they are summed or squared, so 1e30 or 1e-30 data standardise like data of unit
    scale, and ``mean`` and ``std`` are at most the largest magnitude (representable);
    only a spread below the dtype's smallest normal number cannot be represented (it is
    reported). Padded entries (whatever they hold: NaN, inf) are ignored.

    Args:
        y: Values, shape (n,), float32 or float64.
        mask: Which entries are real, shape (n,) bool; default all.

    Returns:
        A :class:`Standardized` ``(z, mean, std)`` with ``z = (y - mean) / std`` on real
        entries and 0 on padded ones. ``std`` is the population standard deviation (ddof
        0); it is 1 (and ``z`` 0) when the real values are fewer than two or constant up
        to rounding: every deviation from the mean within ``4 eps`` of the largest
        magnitude (``eps`` the dtype's). ``.ok`` is False (``.reason``
        ``Reason.BAD_INPUT``) when a real entry is not finite inside ``jit``, with NaN
        results; ``Reason.UNREPRESENTABLE`` when ``std`` underflows to 0.

    Raises:
        ValueError: A non-finite real entry (concrete ``y``), a wrong shape.
        TypeError: float16 / bfloat16 ``y``, a non-boolean ``mask``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> z, m, s = gp.standardize(jnp.array([1.0, 3.0, 99.0]), jnp.array([True, True, False]))
        >>> z.tolist(), float(m), float(s)
        ([-1.0, 1.0, 0.0], 2.0, 1.0)
        >>> res = gp.standardize(jnp.array([1e30, -1e30], jnp.float32))  # squares would overflow
        >>> res.z.tolist(), float(res.std), bool(res.ok)
        ([1.0, -1.0], 1.0000000150474662e+30, True)
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

    With a warping in ``p`` the kernel acts on ``w(X)`` (:func:`warp`), which
    ``Posterior.X`` then holds; :func:`predict` warps its queries alike.

    Args:
        p: Hyperparameters (see :func:`params`).
        X: Inputs in the unit cube, shape (n, d).
        y: Observations, shape (n,), used as given.
        mask: Which rows are real, shape (n,) bool; default all. Padded rows have
            exactly no effect on anything computed from the posterior, whatever they
            hold (``Posterior.X`` holds 0 there).

    Returns:
        A :class:`Posterior` holding the Cholesky factor. When the factor is not finite,
        or not accurate for the dtype (its condition estimate ``||K||_inf / min L_ii^2``
        times ``eps`` above 1/64, e.g. repeated inputs with a tiny noise in float32),
        jitter is added on the diagonal (``jitter``: the least that makes it accurate);
        the result is then, up to rounding, the posterior of a model with that much more
        noise.
        ``ok`` is False, with ``reason``, when a real row of ``X`` or ``y`` or a
        parameter is not finite or a real row of ``X`` leaves the unit cube
        (``BAD_INPUT``, inside ``jit``), the factor is not
        finite (``NOT_FINITE``) or still inaccurate (``ILL_CONDITIONED``).

    Raises:
        ValueError: On shape mismatches, X outside [0, 1] or not finite, or non-finite
            ``y`` on a real row (checked when the arrays are concrete).
        TypeError: float16 / bfloat16 ``X``, ``y`` or ``p``.
    """
    X, y, mask = _check_data(X, y, mask)
    p = _core.check_params(p, X.shape[1], X.dtype, "p")
    return _posterior_jit(p, X, y, mask)


_posterior_jit = jax.jit(_core.posterior)


def predict(post: Posterior, Xq: ArrayLike) -> Prediction:
    """Latent (noise-free) posterior mean and variance at query points.

    Args:
        post: From :func:`posterior`.
        Xq: Query points in the unit cube, shape (m, d).

    Returns:
        A :class:`Prediction` ``(mean, var)``, each shape (m,); ``var`` is clipped at 0.
        Inside ``jit``, rows of ``Xq`` that are not finite or outside the unit cube, and
        every row when ``post.ok`` is False, are NaN with ``.ok`` (per row) False.

    Raises:
        ValueError: Concrete ``Xq`` not finite or outside [0, 1], or with the wrong
            number of columns.
        TypeError: float16 / bfloat16 ``Xq``, or ``post`` not a :class:`Posterior`.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> post = gp.posterior(gp.params(1.0, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))
        >>> mean, var = gp.predict(post, jnp.array([[0.3]]))   # no data: the prior
        >>> float(mean[0]), float(var[0])
        (0.0, 1.0)
        >>> import jax
        >>> pred = jax.jit(gp.predict)(post, jnp.array([[0.3], [7.0]]))  # 7.0: outside the cube
        >>> pred.ok.tolist()
        [True, False]
    """
    if not isinstance(post, Posterior):
        raise TypeError(f"post must be a Posterior (see jaxstop.gp.posterior), got {type(post).__name__}")
    _checks.check_float_dtype(post.X.dtype, "post.X")
    Xq = _checks.float_array(Xq, "Xq", post.X.dtype)
    _checks.check_rank(Xq, 2, "Xq", "with shape (m, d)")
    if Xq.shape[1] != post.X.shape[1]:
        raise ValueError(f"Xq must have {post.X.shape[1]} columns like the training X, got shape {Xq.shape}")
    _checks.check_unit_cube(Xq, "Xq")
    return _predict_jit(post, Xq)


_predict_jit = jax.jit(_core.predict_checked)


def log_marginal_likelihood(p: GPParams, X: ArrayLike, y: ArrayLike, mask: ArrayLike | None = None) -> jax.Array:
    """Log marginal likelihood ``log N(y | mean, K + noise I)`` of the real rows.

    Rasmussen & Williams (2006), Eq. 2.30, with the kernel on the warped inputs
    ``w(X)`` (:func:`warp`) when ``p`` carries a warping. Padded rows are inert whatever
    they hold.
    Concrete inputs are checked like :func:`posterior`'s (``ValueError`` / ``TypeError``
    naming the argument); inside ``jit`` a non-finite value on a real row, or a real row
    of ``X`` outside the unit cube (the GP's domain, where a warping would clip it), gives NaN.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp
        >>> p = gp.params(1.0, [0.5], 0.5)
        >>> lml = gp.log_marginal_likelihood(p, jnp.array([[0.2]]), jnp.array([0.0]))
        >>> round(float(lml), 6)   # log N(0 | 0, 1.5) = -log(3 pi) / 2
        -1.121671
    """
    X, y, mask = _check_data(X, y, mask)
    p = _core.check_params(p, X.shape[1], X.dtype, "p")
    return _lml_jit(p, X, y, mask)


@jax.jit
def _lml_jit(p, X, y, mask):
    value = _gp_fit.log_likelihood(p, X, y, mask)
    return jnp.where(_core.real_inputs_valid(X, mask), value, jnp.nan)


def log_prior(p: GPParams) -> jax.Array:
    """Weak log-prior on the hyperparameters (for standardised ``y``).

    With ``lam = 1 / lengthscale**2`` per dimension:
    ``-sum(0.1 / lam + 0.1 * lam) + Gamma(amplitude | 2, 1) + Gamma(noise | 1.1, 30)``
    (unnormalised), the priors Optuna's GP sampler uses. They keep 1-5 points
    and constant ``y`` finite; the mean is unpenalised (flat prior). With a warping, plus
    a LogNormal(0, 0.75) on every ``a`` and ``b``: ``-sum(t + t^2 / 1.125)`` over their
    logs ``t`` (AutoGluon's prior; :mod:`jaxstop._src.warping`). Raises ``TypeError``
    when ``p`` is not a :class:`GPParams` of float32 / float64 (naming the field); a
    non-finite parameter gives a non-finite value.

    Example:
        >>> from jaxstop import gp
        >>> round(float(gp.log_prior(gp.params(1.0, [1.0], 0.1))), 5)  # -0.2 - 1 + 0.1 log 0.1 - 3
        -4.43026
    """
    return _gp_priors.log_prior(_core.check_params(p, None, None, "p"))


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
    warping: bool = False,
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
        X: Inputs in the unit cube, shape (n, d), float32 or float64.
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
        tol: The fit stops once no component of the objective's projected gradient
            exceeds ``tol`` (the hyperparameters stay in their box; a coordinate held
            on a face of the box, its gradient pointing out, counts 0) (``0``: always
            ``steps`` evaluations), or at a rejected trial step whose predicted decrease
            (gradient times step) is at most 16 eps ``max(|f|, 1)`` for the objective ``f``:
            the objective cannot resolve a shorter one (in float32 near the optimum the
            gradient's rounding can exceed ``tol``, and the remaining steps would be trials
            along a rounding direction). ``info.steps`` reports the evaluations used. Not
            used with ``optimizer``.
        optimizer: An optax gradient transformation (e.g. ``optax.adam(1e-2)``) run
            for ``steps`` plain steps on all hyperparameters instead of the default.
            It is a static argument: pass the same object to avoid recompiling.
        warping: Whether a Kumaraswamy input warping (:func:`warp`; ``a``, ``b`` per
            dimension) is fitted with the other hyperparameters (type-II maximum
            likelihood, plus its LogNormal(0, 0.75) prior with ``prior``; ``a``, ``b``
            kept in ``[0.25, 4]``). It starts from ``init``'s warping or, where ``init``
            has none, the identity ``a = b = 1``; random starts draw ``a``, ``b``
            log-uniformly in ``[0.5, 2]``. The result's ``params`` then carry the
            warping, and :func:`posterior` / :func:`predict` use it. A static argument
            (one compilation for each value). Default False: no warping, the fit of
            earlier releases.

    Returns:
        A :class:`GPFit` ``(params, info)`` (a NamedTuple: it unpacks like the plain tuple
        that earlier releases returned); ``info.ok`` says whether the result is usable.
        When no start gives a finite objective (e.g. no real rows and ``prior=False``:
        nothing is identified) the first start comes back with ``info.ok`` False
        (``info.reason``: ``EMPTY`` without real rows, else ``NOT_FINITE``). Inside
        ``jit`` a non-finite value on a real row of ``X`` or ``y`` or in ``init``, or a real
        row of ``X`` outside the unit cube, gives ``info.ok`` False with
        ``Reason.BAD_INPUT`` (and finite parameters: a start).
        Padded rows are inert whatever they hold (NaN, inf, 1e30): the fit is the same,
        bit for bit, as with any other values there.

    Raises:
        ValueError: Concrete ``X`` outside [0, 1] or not finite, non-finite ``y`` on a
            real row, wrong shapes, invalid settings.
        TypeError: float16 / bfloat16 ``X``, ``y`` or ``init`` (naming it), a ``key`` that is
            not a PRNG key, an ``optimizer`` that is not an optax transformation, a
            ``fit_mean`` / ``prior`` / ``warping`` that is not a bool.
        ValueError: ``init`` carries a warping but ``warping`` is False.

    Batched and single fits:
        ``jax.vmap(gp.fit)`` and ``gp.fit`` on one study (likewise padded and compact
        arrays, ``jit`` and eager calls) run different programs that round differently,
        so their results are equal only up to what rounding can move. Each run stops at
        the first accepted point with ``max |g| <= tol``, at a rounding-level stall (see
        ``tol``) or after ``steps`` evaluations,
        and a rounding-level difference can change which trial step is accepted, so the
        two may stop at different points (and step counts) of the region near the
        optimum. What holds: with ``H`` the objective's Hessian in
        ``psi = (log amplitude, log lengthscales, log noise-to-amplitude, mean)``, a stop
        with gradient ``g`` lies about ``H^-1 g`` from the optimum and ``g' H^-1 g / 2``
        above it. Two runs that both converged (``info.steps < steps``; typical in
        float64) have parameters within ``2 sqrt(q) tol ||H^-1||`` and objectives within
        ``q tol^2 ||H^-1||`` of each other (``q`` free components) plus the objective's
        rounding. In float32 the objective carries a rounding error of about
        ``n kappa eps`` relative (``kappa`` the condition number of the Gram matrix), its
        gradient a noise that is often above ``tol``: fits then run all ``steps`` and stop
        wherever they stand, and only the objective values are comparable, within the sum
        of the two stops' gaps ``|g|^2 ||H^-1|| / 2`` plus that rounding; in directions
        where the objective is flat the parameters may differ by far more (several
        percent of a lengthscale).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import gp
        >>> X = jax.random.uniform(jax.random.key(0), (30, 2))
        >>> y = jnp.sin(6 * X[:, 0]) + X[:, 1]
        >>> z, _, _ = gp.standardize(y)
        >>> p, info = gp.fit(X, z)
        >>> bool(info.ok)
        True
        >>> pw, info_w = gp.fit(X, z, warping=True)   # with input warping
        >>> pw.warp_a.shape, bool(info_w.ok)
        ((2,), True)
    """
    X, y, mask = _check_data(X, y, mask)
    steps = _checks.positive_int(steps, "steps")
    num_restarts = _checks.positive_int(num_restarts, "num_restarts")
    min_noise = _checks.nonneg_float(min_noise, "min_noise", positive=True)
    tol = _checks.nonneg_float(tol, "tol")
    if num_restarts > 1 and key is None:
        raise ValueError("key is required when num_restarts > 1")
    if key is None:
        key = jax.random.key(0)
    else:
        _checks.check_key(key)
    if optimizer is not None and not (callable(getattr(optimizer, "init", None))
                                      and callable(getattr(optimizer, "update", None))):
        raise TypeError(f"optimizer must be an optax gradient transformation (e.g. optax.adam(1e-2)) or None, "
                        f"got {type(optimizer).__name__}")
    warping = _checks.boolean(warping, "warping")
    fit_mean = _checks.boolean(fit_mean, "fit_mean")
    prior = _checks.boolean(prior, "prior")
    if init is None:
        init = _core.default_init(X.shape[1], X.dtype, warping)
    else:
        init = _core.check_params(init, X.shape[1], X.dtype, "init")
        if init.warped and not warping:
            raise ValueError("init carries an input warping (log_warp_a, log_warp_b) but warping is False; pass "
                             "warping=True, or init._replace(log_warp_a=None, log_warp_b=None) to fit without one")
        init = _core.with_warping(init, warping)
    p, info = _fit_jit(key, X, y, mask, init, min_noise, tol, steps=steps, num_restarts=num_restarts,
                       fit_mean=fit_mean, use_prior=prior, optimizer=optimizer, warping=warping)
    return GPFit(p, info)


_fit_jit = jax.jit(_gp_fit.fit_restarts,
                   static_argnames=("steps", "num_restarts", "fit_mean", "use_prior", "optimizer", "warping"))
