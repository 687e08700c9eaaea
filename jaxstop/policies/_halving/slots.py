"""Choosing among the slots of a bracket (or sub-sampling's candidates): ranks by
loss, the first pending slot, and uniform draws of distinct table rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["first", "rank_key", "ranks", "record_slot", "sample_rows"]


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


def ranks(key):
    """Rank of every entry of ``key`` (stable: ties by index), int32.

    Pairwise comparisons, O(n^2) for the few slots of a bracket: much cheaper to
    compile than a sort, which matters inside every simulated step.
    """
    n = key.shape[0]
    i = jnp.arange(n)
    before = (key[None, :] < key[:, None]) | ((key[None, :] == key[:, None]) & (i[None, :] < i[:, None]))
    return jnp.sum(before, axis=1).astype(jnp.int32)


def sample_rows(key, num_configs: int, k: int, batch: tuple = ()):
    """``k`` distinct rows of ``range(num_configs)`` in uniformly random order
    (independently for each of ``batch``), from one draw of random bits."""
    u = jax.random.uniform(key, batch + (num_configs,))
    return lax.top_k(u, k)[1].astype(jnp.int32)


def rank_key(mu, mask):
    """Sort key: mu where selected and not NaN, +inf elsewhere."""
    return jnp.where(mask & ~jnp.isnan(mu), mu, jnp.inf)


def first(mask):
    """Index of the first True entry of ``mask`` (0 when none), int32."""
    return jnp.argmax(mask).astype(jnp.int32)
