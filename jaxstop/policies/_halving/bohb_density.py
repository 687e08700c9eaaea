"""BOHB's density-ratio model over the rows of a candidate table (BOHB and BOHB+).

The results of every job are recorded in :class:`HalvingBOHBState`;
:func:`propose` fits the good and bad product-Gaussian KDEs ``l`` and ``g`` to the
results at the largest rung budget with enough of them and picks, among rows not
yet in the bracket, the sampled row with the largest ``l(x) / g(x)`` (the rules are
in the docstring of :mod:`jaxstop.policies.halving`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxstop.policies._halving.slots import rank_key

__all__ = ["HalvingBOHBState", "init_bohb_state", "propose", "record", "split"]


class HalvingBOHBState(NamedTuple):
    """The BOHB part of :class:`~jaxstop.policies.halving.HalvingState` (record
    capacity ``M``; zero-size arrays for SH and Hyperband, which keep it unused).

    Attributes:
        chosen: Rows already in the current bracket, shape (num_configs,) bool.
        rec_config: Table row of every result, shape (M,) int32.
        rec_level: Rung-budget index of every result, shape (M,) int32.
        rec_loss: Loss of every result, shape (M,).
        rec_count: Number of results recorded, int32 ().
    """

    chosen: jax.Array
    rec_config: jax.Array
    rec_level: jax.Array
    rec_loss: jax.Array
    rec_count: jax.Array


def init_bohb_state(num_rows: int, m_rec: int, fdtype) -> HalvingBOHBState:
    """An empty record of capacity ``m_rec`` over ``num_rows`` table rows."""
    return HalvingBOHBState(
        chosen=jnp.zeros((num_rows,), bool),
        rec_config=jnp.full((m_rec,), -1, jnp.int32),
        rec_level=jnp.full((m_rec,), -1, jnp.int32),
        rec_loss=jnp.full((m_rec,), jnp.nan, fdtype),
        rec_count=jnp.zeros((), jnp.int32),
    )


def record(b: HalvingBOHBState, active, config, level_idx, value) -> HalvingBOHBState:
    """Records the result ``value`` of table row ``config`` at rung-budget index
    ``level_idx`` when ``active`` (the last entry is overwritten once full)."""
    m_rec = b.rec_config.shape[0]
    upd = lambda new, old: jnp.where(active, new, old)  # noqa: E731
    i = jnp.minimum(b.rec_count, m_rec - 1)
    return b._replace(
        rec_config=b.rec_config.at[i].set(upd(config, b.rec_config[i])),
        rec_level=b.rec_level.at[i].set(upd(level_idx, b.rec_level[i])),
        rec_loss=b.rec_loss.at[i].set(upd(value, b.rec_loss[i])),
        rec_count=(b.rec_count + jnp.where(active & (b.rec_count < m_rec), 1, 0)).astype(jnp.int32),
    )


def _log_kde(points, data, weight, bw):
    """log of the mean product-Gaussian density of ``data[weight]`` at ``points``."""
    # one (points x data) plane per dimension, added in order (a reduction over a trailing
    # axis of a few dimensions vectorises poorly on CPU)
    log_k = jnp.zeros((points.shape[0], data.shape[0]), points.dtype)
    for k in range(points.shape[1]):
        z = (points[:, k, None] - data[None, :, k]) / bw[k]
        log_k = log_k + (-0.5 * z * z - jnp.log(bw[k]))
    log_k = jnp.where(weight[None, :], log_k, -jnp.inf)
    top = jnp.max(log_k, axis=1)
    top = jnp.where(jnp.isfinite(top), top, jnp.zeros((), top.dtype))
    n = jnp.maximum(jnp.sum(weight), 1).astype(points.dtype)
    return jnp.log(jnp.sum(jnp.exp(log_k - top[:, None]), axis=1)) + top - jnp.log(n)


def _bandwidth(data, weight, params):
    """Normal-reference bandwidths 1.06 std n^(-1/(d+4)), floored."""
    d = data.shape[1]
    n = jnp.maximum(jnp.sum(weight), 1).astype(data.dtype)
    w = weight.astype(data.dtype)[:, None]
    mean = jnp.sum(w * data, axis=0) / n
    std = jnp.sqrt(jnp.sum(w * (data - mean[None, :]) ** 2, axis=0) / n)
    bw = 1.06 * std * n ** (-1.0 / (d + 4))
    return jnp.maximum(bw, params.min_bandwidth.astype(data.dtype))


def split(cand, state: HalvingBOHBState, params, num_levels: int, per_level: int):
    """BOHB's good / bad split of the results at the largest rung budget with enough of
    them. Returns ``(usable, data, good, bad)``: whether any budget has enough results for
    a model, the (per_level, d) candidate rows of that budget's results best first, and
    the masks of the good and of the bad ones among them.

    A result whose loss is not finite (NaN from a diverged run, +-inf) counts as a loss
    of +inf: it is among the bad results, after every finite one, as in HpBandSter's
    ``bohb`` config generator (``config_generators/bohb.py``, ``new_result``: ``loss =
    job.result["loss"] if np.isfinite(job.result["loss"]) else np.inf``, "count them as
    bad configurations"), so the model learns to avoid the region of diverged runs.
    """
    fdtype = cand.dtype
    n_rows, d = cand.shape
    m = state.rec_config.shape[0]
    recorded = jnp.arange(m) < state.rec_count
    # not finite -> the largest float: after every finite loss, before the +inf of the
    # results not at the level (a finite loss of exactly finfo.max ties with them)
    loss = jnp.where(jnp.isfinite(state.rec_loss), state.rec_loss, jnp.finfo(fdtype).max)
    n_min = d + 1
    gamma = params.top_fraction.astype(fdtype)
    counts = jnp.sum(recorded[None, :] & (state.rec_level[None, :] == jnp.arange(num_levels)[:, None]), axis=1)
    usable = (counts - jnp.maximum(n_min, jnp.floor(gamma * counts).astype(jnp.int32))) >= n_min
    level = (num_levels - 1 - jnp.argmax(usable[::-1])).astype(jnp.int32)
    at = recorded & (state.rec_level == level)
    n = jnp.sum(at)
    n_good = jnp.maximum(n_min, jnp.floor(gamma * n).astype(jnp.int32))
    n_bad = jnp.maximum(n_min, jnp.floor((1 - gamma) * n).astype(jnp.int32))
    # the (at most per_level) results at that level, best first (ties: recorded first)
    order = lax.top_k(-jnp.where(at, loss, jnp.inf), per_level)[1]
    rank = jnp.arange(per_level)
    good = (rank < n) & (rank < n_good)
    bad = (rank < n) & (rank >= n_good) & (rank < n_good + n_bad)
    data = cand[jnp.clip(state.rec_config[order], 0, n_rows - 1)]
    return jnp.any(usable), data, good, bad


def propose(key, cand, state: HalvingBOHBState, params, num_levels: int, num_samples: int, per_level: int):
    """One BOHB proposal: a table row not yet in the bracket (see the module docstring)."""
    fdtype = cand.dtype
    n_rows = cand.shape[0]
    u = jax.random.uniform(key, (n_rows + 1,), fdtype, minval=jnp.finfo(fdtype).tiny)
    avail = ~state.chosen
    gumbel = jnp.where(avail, -jnp.log(-jnp.log(u[:n_rows])), -jnp.inf)
    rows = lax.top_k(gumbel, num_samples)[1]  # uniform, distinct; rows[0] is a uniform row
    usable, data, good, bad = split(cand, state, params, num_levels, per_level)
    x = cand[rows]
    score = _log_kde(x, data, good, _bandwidth(data, good, params)) - _log_kde(x, data, bad, _bandwidth(data, bad, params))
    score = jnp.where(avail[rows], score, -jnp.inf)
    model_row = rows[jnp.argmax(score)]
    use_random = ~usable | (u[n_rows] < params.random_fraction.astype(fdtype))
    return jnp.where(use_random, rows[0], model_row).astype(jnp.int32)
