"""Expected improvement and probability of improvement of the latent GP (the EI / PI baselines)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxstop import gp
from jaxstop._src import checks as _checks, regret_bound as _rb
from jaxstop.regret import _args


def _arguments(posterior, X, best):
    """The checked ``(X, best)`` of EI and PI."""
    _args.check_posterior(posterior)
    X = _args.points(X, "X", posterior.X.shape[1], posterior.X.dtype)
    _checks.check_unit_cube(X, "X")
    best = _args.finite_scalar(best, "best", posterior.X.dtype)
    return X, best


def expected_improvement(posterior: gp.Posterior, X: ArrayLike, best: ArrayLike) -> jax.Array:
    """Expected improvement below ``best`` of the latent GP (minimisation).

    ``EI(x) = sigma (z Phi(z) + phi(z))`` with ``z = (best - mu) / sigma``, evaluated
    through the scaled complementary error function for ``z < -1`` so that values down
    to ~1e-300 (float64) keep their relative precision. The stopping baseline of
    Nguyen et al. (2017) used in Makarova et al. (2022) stops once the maximum EI
    over the domain falls below a threshold (Table 3: 1e-8, on standardised values).

    Args:
        posterior: A :class:`jaxstop.gp.Posterior`.
        X: Query points in the unit cube, shape (m, d).
        best: Incumbent value on the posterior's scale, a finite scalar.

    Returns:
        EI at each point, shape (m,), >= 0 (NaN where undefined, see below).

    Non-finite values and dtypes:
        * Concrete inputs: a non-finite ``best``, a query point not finite or outside the
          unit cube raise ``ValueError`` naming the argument.
        * Traced inputs (inside ``jit`` / ``vmap``): a non-finite ``best`` gives NaN at every
          point, a row of ``X`` not finite or outside the unit cube NaN at that row (made
          inert before the kernel),
          and a posterior that is not ``ok`` NaN everywhere: no number that looks valid.
        * float16 / bfloat16 inputs raise ``TypeError`` naming the argument.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp, regret
        >>> post = gp.posterior(gp.params(1.0, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))
        >>> round(float(regret.expected_improvement(post, jnp.array([[0.5]]), 0.0)[0]), 6)  # phi(0)
        0.398942
    """
    X, best = _arguments(posterior, X, best)
    return _acq_jit(posterior, X, best, "ei")


def probability_of_improvement(posterior: gp.Posterior, X: ArrayLike, best: ArrayLike) -> jax.Array:
    """Probability that the latent GP lies below ``best``: ``Phi((best - mu) / sigma)``.

    The stopping baseline of Lorenz et al. (2016) used in Makarova et al. (2022)
    stops once the maximum PI over the domain falls below a threshold (Table 3: 1e-8).

    Args:
        posterior: A :class:`jaxstop.gp.Posterior`.
        X: Query points in the unit cube, shape (m, d).
        best: Incumbent value on the posterior's scale, a finite scalar.

    Returns:
        PI at each point, shape (m,), in [0, 1] (NaN where undefined, see below).

    Non-finite values and dtypes:
        * Concrete inputs: a non-finite ``best``, a query point not finite or outside the
          unit cube raise ``ValueError`` naming the argument.
        * Traced inputs (inside ``jit`` / ``vmap``): a non-finite ``best`` gives NaN at every
          point, a row of ``X`` not finite or outside the unit cube NaN at that row (made
          inert before the kernel),
          and a posterior that is not ``ok`` NaN everywhere: no number that looks valid.
        * float16 / bfloat16 inputs raise ``TypeError`` naming the argument.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp, regret
        >>> post = gp.posterior(gp.params(1.0, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))
        >>> float(regret.probability_of_improvement(post, jnp.array([[0.5]]), 0.0)[0])
        0.5
    """
    X, best = _arguments(posterior, X, best)
    return _acq_jit(posterior, X, best, "pi")


@partial(jax.jit, static_argnames=("kind",))
def _acq_jit(post, X, best, kind):
    mean, var = _rb.moments(post, X)
    sd = jnp.sqrt(var)
    return _rb.ei(mean, sd, best) if kind == "ei" else _rb.pi(mean, sd, best)
