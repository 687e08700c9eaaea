"""Expected improvement and probability of improvement of the latent GP (the EI / PI baselines)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxstop import gp
from jaxstop._src import checks as _checks, gp_core, regret_bound as _rb
from jaxstop.regret import _args


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
    _args.check_posterior(posterior)
    X = _args.points(X, "X", posterior.X.shape[1], posterior.X.dtype)
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
    _args.check_posterior(posterior)
    X = _args.points(X, "X", posterior.X.shape[1], posterior.X.dtype)
    best = _checks.float_array(best, "best", posterior.X.dtype)
    _checks.check_rank(best, 0, "best", "(a scalar)")
    return _acq_jit(posterior, X, best, "pi")


@partial(jax.jit, static_argnames=("kind",))
def _acq_jit(post, X, best, kind):
    mean, var = gp_core.predict(post, X)
    sd = jnp.sqrt(var)
    return _rb.ei(mean, sd, best) if kind == "ei" else _rb.pi(mean, sd, best)
