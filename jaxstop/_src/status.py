"""The one status convention of jaxstop's results.

Every result type carries ``ok``: a boolean array that is ``True`` only when the
result holds finite, representable values computed from valid inputs. Where the
cause is useful, a result also carries ``reason``: an ``int32`` code from
:class:`Reason` (the first cause that applies, in the order of the checks). Inside
``jit`` what went wrong is data; outside it, the public functions raise
``ValueError`` / ``TypeError`` naming the argument before any computation.
"""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp


class Reason(enum.IntEnum):
    """Why a result is not ``ok`` (``int(result.reason)`` is one of these)."""

    OK = 0
    #: An input that must be finite or in range (on a real row) was not: NaN, inf,
    #: a negative count, a probability outside [0, 1].
    BAD_INPUT = 1
    #: The computation produced NaN or inf from valid inputs (overflow, a failed
    #: factorisation).
    NOT_FINITE = 2
    #: The inputs are valid but the answer cannot be represented in the dtype
    #: (spreads below the float resolution of the values, scales beyond its range).
    UNREPRESENTABLE = 3
    #: A linear system was too ill-conditioned for the dtype even after jitter.
    ILL_CONDITIONED = 4
    #: There was nothing to compute from (no real rows).
    EMPTY = 5


def all_finite(*trees) -> jax.Array:
    """``True`` when every floating leaf of ``trees`` is finite everywhere (traceable)."""
    out = jnp.asarray(True)
    for leaf in jax.tree_util.tree_leaves(trees):
        leaf = jnp.asarray(leaf)
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            out = out & jnp.all(jnp.isfinite(leaf))
    return out


def first_reason(*checks) -> jax.Array:
    """The code of the first failing check, ``Reason.OK`` when none fails.

    ``checks`` are ``(failed, reason)`` pairs; ``failed`` is a boolean array of any
    shape that broadcasts with the others (one code per batch element); ``reason`` is a
    :class:`Reason` or an int32 array of codes (e.g. a sub-result's own ``reason``).
    """
    code = jnp.asarray(int(Reason.OK), jnp.int32)
    for failed, reason in reversed(checks):
        code = jnp.where(failed, jnp.asarray(int(reason) if isinstance(reason, Reason) else reason, jnp.int32),
                         code)
    return code
