"""Batches of problems with bounded working memory: :func:`prob_best_batch` and
:func:`confidence_curve_batch` (``lax.map`` in steps whose size the quadrature's
intermediates decide)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from jaxstop._src import checks
from jaxstop.confidence import _quadrature  # read through the module: one on_cpu for blocks and steps
from jaxstop.confidence._curves import ConfidenceCurve, confidence_curve_impl, prob_best_impl
from jaxstop.confidence._validate import prepare_batch

# Candidates per lax.map step of the batch wrappers on CPU.
_CPU_STEP_CANDIDATES = 256


def _batch_size(batch: int, n: int, dtype, max_bytes: int | None) -> int:
    """Problems per lax.map step: a divisor of batch whose intermediates fit max_bytes.

    With ``max_bytes=None``, CPU steps hold about ``_CPU_STEP_CANDIDATES`` candidates
    (one problem once ``n`` exceeds it): each problem then gets its own number of
    blocks and panels, which on CPU beats sharing a step with the slowest of many
    (measured in ``benchmarks/RESULTS.md``); accelerators take steps of 256 MiB.
    """
    if max_bytes is not None:
        max_bytes = checks.positive_int(max_bytes, "max_bytes")
    _, order = _quadrature.rule(dtype)
    bs = _quadrature.block_size(n)
    # one step of the panel loop: three (chunk, block) temporaries and the kept
    # hazards of every block of the chunk (the whole rule when a panel is too small)
    c = _quadrature.dense_width(n, dtype)
    chunk = order * max(_quadrature.panels_per_step(bs, dtype), _quadrature.panels_per_step(c, dtype))
    cols = 3 * max(bs, c) + -(-n // bs) * bs
    per_problem = cols * chunk * jnp.dtype(dtype).itemsize + 64 * n
    if max_bytes is None:
        if _quadrature.on_cpu():
            target = max(1, _CPU_STEP_CANDIDATES // n)
        else:
            target = (256 * 2**20) // per_problem
    else:
        target = int(max_bytes) // per_problem
    target = max(1, min(batch, target))
    # a divisor of batch, so that lax.map needs no separately compiled remainder
    return max(d for d in range(1, target + 1) if batch % d == 0)


@functools.partial(jax.jit, static_argnames=("batch_size",))
def _prob_best_batch_impl(mu, sigma, mask, batch_size):
    return lax.map(lambda a: prob_best_impl(*a), (mu, sigma, mask), batch_size=batch_size)


@functools.partial(jax.jit, static_argnames=("batch_size",))
def _confidence_curve_batch_impl(mu, sigma, mask, batch_size):
    return lax.map(lambda a: confidence_curve_impl(*a), (mu, sigma, mask), batch_size=batch_size)


def prob_best_batch(
    mu: ArrayLike,
    sigma: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    max_bytes: int | None = None,
) -> jax.Array:
    """:func:`prob_best` for a batch of problems with bounded working memory.

    Problems are processed ``batch_size`` at a time (``lax.map``), with
    ``batch_size`` the largest divisor of the batch whose quadrature
    intermediates stay below ``max_bytes``. ``jax.vmap(prob_best)`` gives the
    same numbers but takes the whole batch in one step, which needs ``batch x``
    the memory and makes every problem wait for the one that needs the most
    blocks and panels; on CPU small steps (a few hundred candidates) ran fastest.

    Args:
        mu: Means, shape (batch, n).
        sigma: Standard deviations, shape (batch, n).
        mask: Candidates to consider, shape (batch, n), bool; all when None.
        max_bytes: Working-memory target in bytes (a Python int >= 1); None means
            steps of about 256 candidates on CPU (one problem once ``n > 256``)
            and of 256 MiB on accelerators.

    Bad values, padding, units and dtypes as in :func:`prob_best`, per problem; the
    status of each problem is ``jax.vmap(problem_status)(mu, sigma, mask)``.

    Returns:
        Probabilities, shape (batch, n).

    Raises:
        ValueError, TypeError: as :func:`prob_best` (float16 / bfloat16 included).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import prob_best_batch
        >>> p = prob_best_batch(jnp.array([[0.0, 1.0], [1.0, 0.0]]), jnp.ones((2, 2)))
        >>> [round(float(v), 4) for v in p[:, 0]]
        [0.7602, 0.2398]
    """
    mu, sigma, mask = prepare_batch(mu, sigma, mask)
    bs = _batch_size(mu.shape[0], mu.shape[1], mu.dtype, max_bytes)
    return _prob_best_batch_impl(mu, sigma, mask, batch_size=bs)


def confidence_curve_batch(
    mu: ArrayLike,
    sigma: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    max_bytes: int | None = None,
) -> ConfidenceCurve:
    """:func:`confidence_curve` for a batch of problems with bounded working memory.

    Args:
        mu: Means, shape (batch, n).
        sigma: Standard deviations, shape (batch, n).
        mask: Candidates to consider, shape (batch, n), bool; all when None.
        max_bytes: Working-memory target in bytes (a Python int); None as in
            :func:`prob_best_batch`.

    Bad values, padding, units and dtypes as in :func:`confidence_curve`, per problem;
    the status of each problem is ``jax.vmap(problem_status)(mu, sigma, mask)``.

    Returns:
        ``ConfidenceCurve(curve, order)``, each of shape (batch, n).

    Raises:
        ValueError, TypeError: as :func:`prob_best` (float16 / bfloat16 included).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxstop.confidence import confidence_curve_batch
        >>> mu = jnp.array([[0.0, 1.0], [1.0, 0.0]])
        >>> curve, order = confidence_curve_batch(mu, jnp.ones((2, 2)))
        >>> order.tolist()
        [[0, 1], [1, 0]]
    """
    mu, sigma, mask = prepare_batch(mu, sigma, mask)
    bs = _batch_size(mu.shape[0], mu.shape[1], mu.dtype, max_bytes)
    return _confidence_curve_batch_impl(mu, sigma, mask, batch_size=bs)
