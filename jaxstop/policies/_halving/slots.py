"""Choosing among the slots of a bracket (or sub-sampling's candidates): the sort key
of their losses, the first pending slot, and uniform draws of distinct table rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["first", "rank_key", "record_slot", "sample_rows"]


def record_slot(s, job, result, max_budget: int, fdtype):
    """Writes the result of the job of slot ``s.current`` into the slot arrays of a
    halving-like state (``epochs``, ``mu``, ``complete``, ``pending``; ignored once
    ``s.done`` or when the slot is not pending). Returns ``(state, active, value, cost)``:
    whether the result counted, its loss, and the epochs it trained."""
    slot = s.current
    active = ~s.done & s.pending[slot]
    value = jnp.asarray(result.value).astype(fdtype)
    epoch = jnp.asarray(result.epoch).astype(jnp.int32)
    budget = jnp.asarray(job.budget).astype(jnp.int32)
    start = jnp.clip(jnp.asarray(job.start).astype(jnp.int32), 0, epoch)
    ended = (epoch < budget) | (epoch >= max_budget)
    upd = lambda new, old: jnp.where(active, new, old)  # noqa: E731
    s = s._replace(
        epochs=s.epochs.at[slot].set(upd(epoch, s.epochs[slot])),
        mu=s.mu.at[slot].set(upd(value, s.mu[slot])),
        complete=s.complete.at[slot].set(upd(s.complete[slot] | ended, s.complete[slot])),
        pending=s.pending.at[slot].set(s.pending[slot] & ~active),
    )
    return s, active, value, epoch - start


def sample_rows(key, num_configs: int, k: int, batch: tuple = ()):
    """``k`` distinct rows of ``range(num_configs)`` in uniformly random order
    (independently for each of ``batch``).

    The first ``k`` steps of a Fisher-Yates shuffle: step ``i`` swaps entry ``i`` with a
    uniform entry of ``i .. num_configs - 1``. O(``num_configs + k``) work, against a sort
    of ``num_configs`` random keys (``lax.top_k``), which on XLA:CPU cost several times as
    much for a table of 64 rows, the draw that opens every simulated study.
    """
    k = int(k)
    if not 0 <= k <= num_configs:
        raise ValueError(f"cannot draw {k} distinct rows of {num_configs}")
    if batch:
        keys = jax.random.split(key, int(np.prod(batch)))
        rows = jax.vmap(lambda kk: sample_rows(kk, num_configs, k))(keys)
        return rows.reshape(batch + (k,))
    if k == 0:
        return jnp.zeros((0,), jnp.int32)
    # int32 draws: the default integer is int64 in x64 mode, whose draws differ
    pick = jax.random.randint(key, (k,), jnp.arange(k, dtype=jnp.int32), num_configs, jnp.int32)

    def swap(i, rows):
        a, b = rows[i], rows[pick[i]]
        return rows.at[i].set(b).at[pick[i]].set(a)

    rows = lax.fori_loop(0, k, swap, jnp.arange(num_configs, dtype=jnp.int32), unroll=min(k, 8))
    return rows[:k]


def rank_key(mu, mask):
    """Sort key: mu where selected and not NaN, +inf elsewhere."""
    return jnp.where(mask & ~jnp.isnan(mu), mu, jnp.inf)


def first(mask):
    """Index of the first True entry of ``mask`` (0 when none), int32."""
    return jnp.argmax(mask).astype(jnp.int32)
