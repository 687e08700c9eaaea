"""The GP's hyperparameter priors (for standardised values), as log densities up to a constant.

Two sets, chosen by a fit's ``use_prior`` (:func:`prior_kind`): ``"optuna"``, the priors of
Optuna's GP sampler (:func:`log_prior`; jaxstop's default), and ``"autogluon"``, those of
AutoGluon 0.1's BayesOpt GP, the GP of the released code of Makarova et al. (2022)
(:func:`log_prior_autogluon`). Both add :func:`log_prior_warping` for a warped GP. The
amplitude and noise parts are separate (:func:`log_prior_scale`,
:func:`log_prior_scale_autogluon`) because the fit profiles the amplitude out in closed form
or by Newton steps (:func:`jaxstop._src.gp_fit.scale_parts`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxstop._src import warping
from jaxstop._src.gp_core import GPParams

__all__ = [
    "PRIORS",
    "START",
    "prior_kind",
    "log_prior",
    "log_prior_autogluon",
    "log_prior_lengthscales",
    "log_prior_scale",
    "log_prior_scale_autogluon",
    "log_prior_warping",
]


#: The priors a fit can use (its ``use_prior``): ``"optuna"`` (Optuna's GP sampler:
#: :func:`log_prior`, also ``True``) or ``"autogluon"`` (AutoGluon 0.1's BayesOpt GP, the GP of
#: the released code of Makarova et al. 2022: :func:`log_prior_autogluon`).
PRIORS = ("optuna", "autogluon")

#: Where each prior's fit starts by default, as ``(amplitude, lengthscale, noise variance,
#: mean)`` on the standardised scale, or None for jaxstop's own start
#: (:func:`jaxstop._src.gp_core.default_init`: 1, 0.5, 1e-2, 0). ``"autogluon"``: the initial
#: values of AutoGluon 0.1's GP (``gpautograd``: covariance scale 1, inverse bandwidths 1,
#: noise variance 1e-3, mean 0), where the released code of Makarova et al. starts every fit.
START = {"optuna": None, "autogluon": (1.0, 1.0, 1e-3, 0.0)}


def prior_kind(use_prior) -> str | None:
    """``use_prior`` as one of :data:`PRIORS`, or None for no prior (``False`` / ``None``);
    ``True`` is ``"optuna"``. Raises ``ValueError`` on anything else."""
    if use_prior is None or use_prior is False:
        return None
    if use_prior is True:
        return "optuna"
    if use_prior in PRIORS:
        return use_prior
    raise ValueError(f"prior must be one of {PRIORS} (or True / False), got {use_prior!r}")


def log_prior_autogluon(p: GPParams) -> jax.Array:
    """AutoGluon 0.1's priors (``gpautograd``: ``kernel/base.py``, ``likelihood.py``), on the
    hyperparameters' values, unnormalised: LogNormal(0, 1) on the covariance scale
    (amplitude ``a``: ``-log a - (log a)^2 / 2``), Gamma(shape 0.1, rate 1) on the noise
    variance ``s`` (``Gamma(mean=0.1, alpha=0.1)``: ``-0.9 log s - s``), Normal(0, 1) on the
    scalar mean (``-m^2 / 2``) and a flat prior on the inverse bandwidths (``Uniform`` in
    their box)."""
    return (log_prior_scale_autogluon(p.log_amplitude, p.log_noise) - 0.5 * jnp.square(p.mean)
            + log_prior_warping(p))


def log_prior_scale_autogluon(log_amplitude, log_noise) -> jax.Array:
    """LogNormal(0, 1) on the amplitude plus Gamma(0.1, 1) on the noise, unnormalised."""
    return -log_amplitude - 0.5 * log_amplitude ** 2 - 0.9 * log_noise - jnp.exp(log_noise)


def log_prior(p: GPParams) -> jax.Array:
    """Weak log-prior on the hyperparameters (for standardised ``y``).

    With ``lam = 1 / lengthscale**2`` per dimension:
    ``-sum(0.1 / lam + 0.1 * lam) + Gamma(amplitude | 2, 1) + Gamma(noise | 1.1, 30)``
    (unnormalised), the priors Optuna's GP sampler uses. They keep 1-5 points
    and constant ``y`` finite; the mean is unpenalised (flat prior). With a warping, plus
    :func:`log_prior_warping`.
    """
    return log_prior_lengthscales(p) + log_prior_scale(p.log_amplitude, p.log_noise) + log_prior_warping(p)


def log_prior_warping(p: GPParams) -> jax.Array:
    """LogNormal(0, 0.75) on every warping parameter (:func:`jaxstop._src.warping.log_prior`);
    0 without a warping."""
    if not p.warped:
        return jnp.zeros((), p.log_amplitude.dtype)
    return warping.log_prior(p.log_warp_a, p.log_warp_b)


def log_prior_lengthscales(p: GPParams) -> jax.Array:
    lam = jnp.exp(-2 * p.log_lengthscales)
    return -jnp.sum(0.1 / lam + 0.1 * lam)


def log_prior_scale(log_amplitude, log_noise) -> jax.Array:
    """Gamma(amplitude | 2, 1) + Gamma(noise | 1.1, 30), unnormalised."""
    amp_term = (2.0 - 1.0) * log_amplitude - 1.0 * jnp.exp(log_amplitude)
    noise_term = (1.1 - 1.0) * log_noise - 30.0 * jnp.exp(log_noise)
    return amp_term + noise_term
