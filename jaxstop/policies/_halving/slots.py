"""Choosing among the slots of a bracket (or sub-sampling's candidates): ranks by
loss, the first pending slot, and uniform draws of distinct table rows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["first", "rank_key", "ranks", "sample_rows"]


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
