"""The UQ part of the halving family: per-candidate uncertainty from a window of
recent losses, and its use by the UQ-guided keep rule (SH+, HB+, BOHB+).

:func:`push` and :func:`uncertainty` keep and summarise the last ``window + 1``
losses of every slot (also used by sub-sampling plus); :func:`keep_inputs` and
:func:`keep_mask` are the two halves of a round's UQ decision around
:func:`jaxstop.confidence.keep_count` (the rules are in the docstring of
:mod:`jaxstop.policies.halving`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src.numerics import masked_std

__all__ = ["DELTA_ESTIMATES", "HalvingUQState", "check_delta_estimate", "check_keep_rule", "check_window",
           "init_uq_state", "keep_inputs", "keep_mask", "min_losses", "profile_at", "push", "uncertainty"]

_KEEP_RULES = ("argmax", "crossing")
#: The estimates of ``Delta_t sigma`` a UQ halving policy can use (see the docstring of
#: :mod:`jaxstop.policies.halving`).
DELTA_ESTIMATES = ("profile", "window", "window_var", "offline")


class HalvingUQState(NamedTuple):
    """The uncertainty part of :class:`~jaxstop.policies.halving.HalvingState`
    (``cap`` slots, ``W = window + 1``, 0 for the plain versions, which keep it unused).

    Attributes:
        sigma: Windowed uncertainty per slot (0 with fewer than two losses), (cap,).
        delta: Estimated per-epoch reduction of ``sigma``, shape (cap,).
        recent: Last ``window + 1`` losses per slot, oldest first, shape (cap, W).
        count: Losses reported per slot, shape (cap,) int32.
    """

    sigma: jax.Array
    delta: jax.Array
    recent: jax.Array
    count: jax.Array


def init_uq_state(cap: int, width: int, fdtype) -> HalvingUQState:
    """The uncertainty state of ``cap`` slots without losses (``width = W``)."""
    return HalvingUQState(
        sigma=jnp.zeros((cap,), fdtype),
        delta=jnp.zeros((cap,), fdtype),
        recent=jnp.full((cap, width), jnp.nan, fdtype),
        count=jnp.zeros((cap,), jnp.int32),
    )


def check_window(window) -> int:
    """Checks the number of losses in the uncertainty window (an int >= 2)."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
        raise TypeError(f"window must be an int, got {type(window).__name__}")
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    return int(window)


def check_delta_estimate(delta_estimate):
    """Checks the name of a UQ policy's estimate of ``Delta_t sigma``."""
    if delta_estimate not in DELTA_ESTIMATES:
        raise ValueError(f"delta_estimate must be one of {DELTA_ESTIMATES}, got {delta_estimate!r}")
    return delta_estimate


def check_keep_rule(keep_rule):
    """Checks the name of a :func:`jaxstop.confidence.keep_count` rule."""
    if keep_rule not in _KEEP_RULES:
        raise ValueError(f"keep_rule must be one of {_KEEP_RULES}, got {keep_rule!r}")
    return keep_rule


def push(recent, count, slot, value):
    """Appends ``value`` to the chronological buffer of ``slot``."""
    width = recent.shape[1]
    row = recent[slot]
    c = count[slot]
    appended = row.at[jnp.minimum(c, width - 1)].set(value)
    shifted = jnp.concatenate([row[1:], value[None]])
    row = jnp.where(c < width, appended, shifted)
    return recent.at[slot].set(row), count.at[slot].add(1)


def uncertainty(recent, count, window: int, params, kind: str = "std", table=None, epochs=None):
    """(sigma, delta, has) of every slot from its recent losses (Eq. 1, App. C).

    ``recent`` holds the last ``min(count, window + 1)`` losses left-aligned, oldest
    first. ``sigma`` equals ``confidence.window_std(recent, cnt, window)`` (``ddof = 1``)
    floored at ``params.min_sigma``. ``delta`` is, in this order of precedence: a finite
    ``params.delta_sigma``; the entry ``table[t - 1]`` of a profile of ``Delta_t sigma``
    at the slot's epoch ``t = epochs`` where it is finite; else the window estimate,
    ``confidence.window_delta_sigma(recent, cnt, window, kind=kind)`` (``"std"``: the
    previous window's std minus the current one's, ``"variance"``: the same for the
    variances). The statistics are taken on the window of ``recent`` with
    :func:`jaxstop._src.numerics.masked_std`, the function behind ``window_std``, so float32
    losses whose squares overflow (about 1e19 and above) keep their finite ``sigma``.
    """
    width = recent.shape[1]
    cnt = jnp.minimum(count, width)[:, None]
    j = jnp.arange(width)[None, :]
    finite = jnp.isfinite(recent)
    now, n_now = masked_std(recent, finite & (j < cnt) & (j >= cnt - window), 1)
    prev, n_prev = masked_std(recent, finite & (j < cnt - 1) & (j >= cnt - 1 - window), 1)
    fdtype = recent.dtype
    zero = jnp.zeros((), fdtype)
    has = count >= 2
    sigma = jnp.where(has, jnp.maximum(now, params.min_sigma.astype(fdtype)), zero)
    change = prev - now if kind == "std" else prev * prev - now * now
    delta = jnp.where((n_now >= 2) & (n_prev >= 2), change, zero)
    if table is not None:
        at = profile_at(table, epochs).astype(fdtype)
        delta = jnp.where(jnp.isfinite(at), at, delta)
    given = params.delta_sigma.astype(fdtype)
    delta = jnp.where(has, jnp.where(jnp.isfinite(given), given, delta), zero)
    return sigma, delta, has


def profile_at(table, epochs):
    """Entry ``t - 1`` of a (max_budget,) profile for each slot's epoch ``t`` (clipped to
    ``[1, max_budget]``)."""
    return table[jnp.clip(epochs, 1, table.shape[0]) - 1]


def keep_inputs(member, mu, u: HalvingUQState, budget, fdtype):
    """Arguments of keep_count for the decision at the end of a round:
    ``(mu, sigma, delta, budget, mask)`` with neutral values outside ``mask``. A ``delta``
    that is not finite (a window statistic beyond the dtype's range: ``"window_var"`` on
    float32 losses of 1e19 and more) is 0, no shrinkage, as keep_count takes it inside
    ``jit``; eagerly keep_count would raise about a ``delta_sigma`` the caller never passed."""
    ok = member & jnp.isfinite(mu) & jnp.isfinite(u.sigma) & (u.sigma > 0)
    zero, one = jnp.zeros((), fdtype), jnp.ones((), fdtype)
    delta = jnp.where(ok & jnp.isfinite(u.delta), u.delta, zero)
    return jnp.where(ok, mu, zero), jnp.where(ok, u.sigma, one), delta, budget, ok


def min_losses(params, table=None, epochs=None):
    """Losses each slot needs before the UQ rule can use it: two for ``sigma``, and a
    third for the window estimate of ``delta_sigma`` (the previous window needs two
    losses of its own); two when ``params.delta_sigma`` is given, or when ``table`` (a
    profile of ``Delta_t sigma``) has a finite entry at the slot's epoch. Shape () or
    that of ``epochs``, int32."""
    given = jnp.isfinite(params.delta_sigma)
    if table is not None:
        given = given | jnp.isfinite(profile_at(table, epochs))
    return jnp.where(given, 2, 3).astype(jnp.int32)


def keep_mask(member, mu, u: HalvingUQState, plain_keep, uq_keep, uq_tau, fdtype, need=2):
    """The members a UQ decision keeps: keep_count's mask ``uq_keep``, or the plain
    count's ``plain_keep`` when a member has fewer than ``need`` losses
    (:func:`min_losses`). Returns ``(keep, fallback, tau)``."""
    fallback = jnp.any(member & (u.count < need))
    ok = member & jnp.isfinite(mu) & jnp.isfinite(u.sigma) & (u.sigma > 0)
    keep = jnp.where(fallback, plain_keep, uq_keep & ok)
    tau = jnp.where(fallback, jnp.nan, uq_tau).astype(fdtype)
    return keep, fallback, tau
