"""Forward simulation of BOS (Appendix B of Dai et al., 2019): joint posterior draws of
the learning curve over epochs ``N0+1..N`` (:func:`simulate`), drawn in chunks."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxstop._src import checks, linalg, status
from jaxstop._src.status import Reason
from jaxstop.bos._curve_gp import CurveGP, check_curve_gp, fit_curve_gp, posterior  # noqa: F401  (doctest)
from jaxstop.bos._validate import check_horizon, check_prefix, rule, screen

_HIGHEST = lax.Precision.HIGHEST


class Paths(NamedTuple):
    """Simulated learning curves.

    Attributes:
        values: Errors of epochs ``N0+1..N``, shape (num_paths, N - N0).
        valid: Whether the path stays inside (0, 1) at every simulated epoch,
            shape (num_paths,). Invalid paths are kept (static shapes) and carry
            no weight in :func:`backward_induction`.
        reason: int32 :class:`jaxstop.Reason` code: ``OK``;
            ``BAD_INPUT`` (inside ``jit``: a prefix error outside (0, 1), NaN or inf,
            or a ``curve_gp`` with invalid parameters); ``NOT_FINITE`` (``curve_gp``
            is not :attr:`CurveGP.ok`, e.g. a failed fit); ``EMPTY`` (no path stays
            inside (0, 1)). With ``BAD_INPUT`` or ``NOT_FINITE`` every value is NaN and
            no path is valid. Defaults to ``OK`` for paths built by hand.

    The status of the paths is the boolean property :attr:`ok`.
    """

    values: jax.Array
    valid: jax.Array
    reason: jax.Array = np.int32(Reason.OK)

    @property
    def ok(self) -> jax.Array:
        """``reason`` is ``OK`` and at least one path is valid, bool.

        Example:
            >>> import jax.numpy as jnp
            >>> bool(Paths(jnp.full((3, 2), 0.5), jnp.array([True, False, True])).ok)
            True
        """
        return (jnp.asarray(self.reason) == Reason.OK) & jnp.any(self.valid, axis=-1)


def factor(cov: jax.Array, rank: int | None):
    """Factor ``F`` with ``F @ F.T ~= cov``, shape (T, rank); dropped variance fraction."""
    evals, evecs = linalg.eigh(cov)
    evals = jnp.clip(evals, 0.0, None)
    T = cov.shape[0]
    r = T if rank is None else min(rank, T)
    top = evals[T - r :]
    F = evecs[:, T - r :] * jnp.sqrt(top)[None, :]
    total = jnp.sum(evals)
    dropped = jnp.where(total > 0, (total - jnp.sum(top)) / jnp.where(total > 0, total, 1), 0)
    return F, jnp.clip(dropped, 0.0, 1.0)


def inside(values: jax.Array, axis: int) -> jax.Array:
    return jnp.all((values > 0) & (values < 1), axis=axis)


def draw(key_c, F, mean, chunk_size: int):
    """One chunk of paths, time-major: ``F @ z + mean``, shape (T, chunk_size)."""
    z = jax.random.normal(key_c, (F.shape[1], chunk_size), F.dtype)
    return jnp.matmul(F, z, precision=_HIGHEST) + mean[:, None]


def chunks(num_paths: int, chunk_size: int):
    chunk_size = min(chunk_size, num_paths)
    return -(-num_paths // chunk_size), chunk_size


@partial(jax.jit, static_argnames=("horizon", "num_paths", "rank", "chunk_size"))
def _simulate(key, gp, prefix, bad, *, horizon: int, num_paths: int, rank: int | None, chunk_size: int):
    mean, cov = posterior(gp, prefix, horizon)
    F, _ = factor(cov, rank)
    num_chunks, chunk_size = chunks(num_paths, chunk_size)
    keys = jax.random.split(key, num_chunks)
    values = lax.map(lambda k: draw(k, F, mean, chunk_size), keys)  # (chunks, T, chunk)
    values = jnp.moveaxis(values, 1, 2).reshape(num_chunks * chunk_size, -1)[:num_paths]
    valid = inside(values, axis=1)
    failed = ~gp.ok
    void = bad | failed
    reason = status.first_reason((bad, Reason.BAD_INPUT), (failed, Reason.NOT_FINITE),
                                 (~jnp.any(valid), Reason.EMPTY))
    return Paths(jnp.where(void, jnp.nan, values), valid & ~void, reason)


def simulate(
    key: jax.Array,
    curve_gp: CurveGP,
    prefix: ArrayLike,
    horizon: int,
    num_paths: int,
    *,
    rank: int | None = None,
    chunk_size: int = 10_000,
) -> Paths:
    """Joint posterior draws of the learning curve over epochs ``N0+1..N``.

    The forward simulation of Appendix B of Dai et al. (2019): joint draws of
    the latent curve from the GP posterior (:func:`curve_posterior`),
    ``mean + F z`` for standard normal ``z`` of dimension ``rank``, with ``F``
    one factor of the ``(N - N0) x (N - N0)`` posterior covariance, computed
    once. ``F`` comes from a symmetric
    eigendecomposition with negative eigenvalues clipped to 0: the covariance of
    this kernel is numerically rank-deficient (its eigenvalues fall below
    ``1e-7`` of the largest after about 3 directions), which makes a float32
    Cholesky fail without a large jitter. With ``rank=r`` only the ``r``
    leading directions are drawn (fewer normals; the dropped share of the
    variance is below ``1e-9`` for ``r >= 8`` on every fit we tried); ``None``
    keeps all ``N - N0``.

    A path is valid when it stays strictly inside (0, 1) at *every* simulated
    epoch; this is the released code's rule (``np.all(samples < 1)`` and
    ``np.all(samples > 0)`` over epochs ``N0+1..N``, which drops the others).
    Here such paths are kept and flagged, so shapes stay static.

    Paths are drawn in chunks of ``chunk_size``, chunk ``c`` from key
    ``jax.random.split(key, num_chunks)[c]``; :func:`solve` draws the same way,
    so with the same key, GP, rank and chunk size it sees these very paths.

    Invalid numbers: a prefix error outside (0, 1) (NaN and inf included) or a
    ``curve_gp`` with non-finite or non-positive ``alpha``, ``beta``, ``noise_var`` or a
    non-finite mean raises ``ValueError`` naming it when concrete; inside ``jit``
    the paths come back void (NaN values, none valid) with ``ok`` False and
    ``reason == Reason.BAD_INPUT``. A ``curve_gp`` that is not :attr:`CurveGP.ok`
    (a failed fit) gives void paths with ``reason == Reason.NOT_FINITE``. float16 /
    bfloat16, and a ``key`` that is not a PRNG key, raise ``TypeError``.

    Args:
        key: A ``jax.random`` key.
        curve_gp: Fitted GP (:func:`fit_curve_gp`).
        prefix: Errors of epochs ``1..N0``, shape (N0,), inside (0, 1).
        horizon: Last epoch ``N`` (static int, ``N > N0``).
        num_paths: Number of paths (static int).
        rank: Number of leading covariance directions drawn (static), or ``None``.
        chunk_size: Paths per chunk (static).

    Returns:
        :class:`Paths` with values of shape (num_paths, N - N0); ``paths.ok`` says
        whether they are usable.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> prefix = jnp.array([0.6, 0.5, 0.45, 0.42, 0.40, 0.39, 0.385, 0.38])
        >>> paths = simulate(jax.random.key(0), fit_curve_gp(prefix), prefix, 20, 1000)
        >>> paths.values.shape, paths.valid.shape
        ((1000, 12), (1000,))
    """
    checks.check_key(key)
    prefix = check_prefix(prefix)
    check_horizon(horizon, prefix.shape[0])
    checks.positive_int(num_paths, "num_paths", 1)
    if rank is not None:
        checks.positive_int(rank, "rank", 1)
    checks.positive_int(chunk_size, "chunk_size", 1)
    gp = check_curve_gp(curve_gp, prefix.dtype)
    bad = screen([rule("prefix", prefix), rule("curve_gp", gp[:4])])
    return _simulate(key, gp, prefix, bad, horizon=horizon, num_paths=num_paths, rank=rank,
                     chunk_size=chunk_size)
