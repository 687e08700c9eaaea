"""The regret bound of Eq. (8): ``beta``, confidence bounds and :func:`regret_bound`.

Validating wrappers over :mod:`jaxstop._src.regret_bound`, which holds the bound itself
(the domain minimum of the LCB with its gradient refinement).
"""

from __future__ import annotations

import numbers
from functools import partial

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxstop import gp
from jaxstop._src import checks as _checks, regret_bound as _rb
from jaxstop._src.regret_bound import RegretBound
from jaxstop.regret import _args


def beta(t: ArrayLike, size: ArrayLike, delta: float = 0.1, scale: float = 0.2) -> jax.Array:
    """Confidence parameter ``beta_t = scale * 2 log(size t^2 pi^2 / (6 delta))``.

    Theorem 1 of Srinivas et al. (2010) with ``|D| = size``, scaled down by 5
    (``scale = 0.2``) as in their experiments; Makarova et al. (2022), App. A.2.3.
    The paper takes ``size`` = number of hyperparameters and ``t`` = iteration
    (number of evaluations); Optuna and the authors' code take ``size`` = dimension and
    ``t`` = number of points the GP was fitted on.

    Args:
        t: Iteration, finite and > 0; any shape broadcastable with ``size``.
        size: ``|Gamma|``, finite and > 0.
        delta: Failure probability, in (0, 1].
        scale: Multiplier, > 0 (0.2 in the paper).

    Returns:
        ``beta``, floating, the broadcast shape of ``t`` and ``size``.

    Raises:
        ValueError: A concrete ``t`` or ``size`` that is not finite and > 0 (naming it),
            or ``delta`` / ``scale`` out of range.
        TypeError: float16 / bfloat16 ``t`` or ``size``.

    Traced ``t`` or ``size`` (inside ``jit`` / ``vmap``) outside their domain give NaN
    there (``t = 0`` would give ``-inf`` and a negative ``t`` the ``beta`` of ``|t|``);
    the NaN propagates, and every result built from it (:func:`regret_bound`,
    :func:`fit_regret_bound`) has ``ok`` False.

    Example:
        >>> from jaxstop import regret
        >>> round(float(regret.beta(100.0, 9.0)), 4)   # 0.4 * log(9e4 pi^2 / 0.6)
        5.6831
    """
    t = _checks.float_array(t, "t")
    size = _checks.float_array(size, "size")
    delta = _args.float_param(delta, "delta", high=1.0)
    scale = _args.float_param(scale, "scale")
    _checks.positive_scalar(t, "t")
    _checks.positive_scalar(size, "size")
    try:
        jnp.broadcast_shapes(t.shape, size.shape)
    except ValueError as err:
        raise ValueError(f"t and size must broadcast together, got shapes {t.shape} and {size.shape}") from err
    dt = _checks.common_float_dtype(t, size)
    return _rb.beta(t.astype(dt), size.astype(dt), delta, scale)


def confidence_bounds(posterior: gp.Posterior, X: ArrayLike, beta: ArrayLike) -> tuple[jax.Array, jax.Array]:
    """Lower and upper confidence bounds ``mu -+ sqrt(beta) sigma`` of the latent GP.

    Args:
        posterior: A :class:`jaxstop.gp.Posterior`.
        X: Query points in the unit cube, shape (m, d).
        beta: Confidence parameter (see :func:`beta`), scalar >= 0.

    Returns:
        ``(lcb, ucb)``, each shape (m,), on the scale of the posterior's ``y``.

    Concrete inputs: a negative or non-finite ``beta`` or an ``X`` not finite or outside the
    unit cube raises ``ValueError`` naming it, float16 / bfloat16 ``TypeError``. Traced
    inputs: NaN at a row of ``X`` not finite or outside the unit cube (made inert before the
    kernel), and everywhere for a negative or NaN ``beta`` or a posterior that is not ``ok``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop import gp, regret
        >>> post = gp.posterior(gp.params(1.0, [0.2], 1e-2), jnp.zeros((0, 1)), jnp.zeros(0))
        >>> lcb, ucb = regret.confidence_bounds(post, jnp.array([[0.5]]), 4.0)  # the prior
        >>> float(lcb[0]), float(ucb[0])
        (-2.0, 2.0)
    """
    _args.check_posterior(posterior)
    X = _args.points(X, "X", posterior.X.shape[1], posterior.X.dtype)
    _checks.check_unit_cube(X, "X")
    beta = _checks.float_array(beta, "beta", posterior.X.dtype)
    _checks.check_rank(beta, 0, "beta", "(a scalar)")
    _checks.positive_scalar(beta, "beta", allow_zero=True)
    return _confidence_bounds_jit(posterior, X, beta)


_confidence_bounds_jit = jax.jit(_rb.confidence_bounds)


def _candidates(key, candidates, d: int, dtype):
    """An (m, d) array as given, or ``m`` uniform points drawn with ``key``."""
    if isinstance(candidates, numbers.Integral) and not isinstance(candidates, bool):
        m = _checks.positive_int(candidates, "candidates")
        if key is None:
            raise ValueError("key is required when candidates is a number of random points")
        _args.key(key)
        return jax.random.uniform(key, (m, d), dtype)
    return _args.points(candidates, "candidates", d, dtype)


def regret_bound(
    posterior: gp.Posterior,
    X_eval: ArrayLike,
    mask: ArrayLike | None = None,
    candidates: ArrayLike | int | None = None,
    beta: ArrayLike | None = None,
    *,
    key: jax.Array | None = None,
    refine_steps: int = 0,
    refine_starts: int = 8,
    dim_mask: ArrayLike | None = None,
    chunk_size: int = 1024,
    eval_mask: ArrayLike | None = _checks.UNSET,
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
        X_eval: Evaluated points ``G_t``, shape (n, d): inputs in the unit cube (for a
            posterior with an input warping, the inputs it was conditioned on, not its
            warped ``post.X``).
        mask: Which rows of ``X_eval`` are real, shape (n,) bool; ``None`` = all.
        candidates: Domain points, shape (m, d) in [0, 1], or an int ``m``: that many
            uniform random points drawn with ``key`` (required).
        beta: Confidence parameter (see :func:`beta`), scalar >= 0 (required).
        key: PRNG key, needed when ``candidates`` is an int (a keyword: the randomness
            is optional).
        refine_steps: Gradient steps of the refinement (0 = off).
        refine_starts: Number of starts of the refinement.
        dim_mask: Real input dimensions, shape (d,) bool; padded dimensions are held at
            0 in the candidates and in the refinement. Default all.
        chunk_size: Candidates predicted at a time (memory bound under ``vmap``).
        eval_mask: Deprecated name of ``mask`` (a :class:`DeprecationWarning`; removed
            in the next release).

    Returns:
        A :class:`RegretBound` on the posterior's scale; ``bound`` is ``+inf`` with
        ``ok = False`` and a :class:`jaxstop.Reason` in ``reason`` if the posterior is not
        ``ok``, no evaluated point is real, an input is bad or any field is not finite.

    Non-finite values, padding and dtypes:
        * Padded rows of ``X_eval`` (``mask`` False) are inert: whatever they hold changes
          nothing.
        * Concrete inputs: a negative or NaN ``beta``, non-finite or out-of-cube real rows
          of ``X_eval`` or candidates raise ``ValueError`` naming the argument; so does an
          ``X_eval`` without rows (mark padded rows with ``mask`` instead: ``Reason.EMPTY``).
        * Traced inputs: the same problems give ``ok`` False with ``Reason.BAD_INPUT``.
        * float16 / bfloat16 inputs raise ``TypeError`` naming the argument.

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
    mask = _checks.renamed("regret_bound", "mask", mask, "eval_mask", eval_mask)
    if candidates is None or beta is None:
        missing = [n for n, v in (("candidates", candidates), ("beta", beta)) if v is None]
        raise TypeError(f"regret_bound() missing required argument(s): {missing}")
    _args.check_posterior(posterior)
    d = posterior.X.shape[1]
    dt = posterior.X.dtype
    X_eval = _args.points(X_eval, "X_eval", d, dt)
    _args.rows(X_eval, "X_eval")
    mask = _checks.mask_array(mask, X_eval.shape[:1], "mask")
    _checks.check_unit_cube(X_eval, "X_eval", mask)
    cand = _candidates(key, candidates, d, dt)
    _checks.check_unit_cube(cand, "candidates")
    beta = _checks.float_array(beta, "beta", dt)
    _checks.check_rank(beta, 0, "beta", "(a scalar)")
    _checks.positive_scalar(beta, "beta", allow_zero=True)
    refine_steps = _args.nonneg_int(refine_steps, "refine_steps")
    refine_starts = _checks.positive_int(refine_starts, "refine_starts")
    chunk_size = _checks.positive_int(chunk_size, "chunk_size")
    dim_mask = _args.dim_mask(dim_mask, d)
    return _regret_bound_jit(posterior, X_eval, mask, cand, beta, dim_mask,
                             refine_steps=refine_steps, refine_starts=refine_starts, chunk_size=chunk_size)


@partial(jax.jit, static_argnames=("refine_steps", "refine_starts", "chunk_size"))
def _regret_bound_jit(post, X_eval, mask, cand, beta, dim_mask, *, refine_steps, refine_starts, chunk_size):
    best = jnp.asarray(0, X_eval.dtype)
    return _rb.bound_core(post, X_eval, mask, cand, beta, dim_mask, best, refine_steps=refine_steps,
                       refine_starts=refine_starts, chunk_size=chunk_size).bound
