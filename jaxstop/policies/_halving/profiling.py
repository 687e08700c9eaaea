"""The profiling phase of the UQ halving policies with ``delta_estimate="profile"``.

Before its first bracket the policy trains ``num_profile`` uniformly drawn candidates to
``max_budget`` (Appendix C of Liu et al., 2024: "for each launch, we sample a few
candidates and train each one fully"), keeps their whole curves and fits
:func:`jaxstop.confidence.delta_sigma_profile` to them once the last one is back. The
pieces here are the sub-state and its updates; the engine calls them (the rules are in
the docstring of :mod:`jaxstop.policies.halving`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxstop import confidence
from jaxstop.policies._halving.slots import sample_rows

__all__ = ["HalvingProfileState", "fit", "init_profile_state", "profiling", "push_loss", "record_curves"]


class HalvingProfileState(NamedTuple):
    """The profiling part of :class:`~jaxstop.policies.halving.HalvingState` (``P =
    num_profile`` profiled candidates, ``T = max_budget``; ``P = T = 0`` for the policies
    that do not profile).

    Attributes:
        configs: Table rows of the profiled candidates, shape (P,) int32.
        pending: Profiling jobs not yet told, shape (P,) bool.
        curves: Their losses, epoch ``t`` in column ``t - 1`` (NaN where not trained),
            shape (P, T).
        delta: The fitted ``Delta_t sigma`` at index ``t - 1`` (NaN before the fit and
            when it failed), shape (T,).
        ok: The profile was fitted (:attr:`jaxstop.confidence.Profile.ok`), bool ().
    """

    configs: jax.Array
    pending: jax.Array
    curves: jax.Array
    delta: jax.Array
    ok: jax.Array


def init_profile_state(key, num_configs: int, num_profile: int, max_budget: int, fdtype) -> HalvingProfileState:
    """``num_profile`` distinct rows drawn uniformly (none when 0), all pending."""
    t = max_budget if num_profile else 0
    rows = (sample_rows(key, num_configs, num_profile) if num_profile
            else jnp.zeros((0,), jnp.int32))
    return HalvingProfileState(
        configs=rows,
        pending=jnp.ones((num_profile,), bool),
        curves=jnp.full((num_profile, t), jnp.nan, fdtype),
        delta=jnp.full((t,), jnp.nan, fdtype),
        ok=jnp.asarray(False),
    )


def profiling(p: HalvingProfileState):
    """Whether the profiling phase is on (a profiling job is still to be told), bool ()."""
    return jnp.any(p.pending)


def push_loss(p: HalvingProfileState, slot, epoch, value, on) -> HalvingProfileState:
    """Stores the loss of epoch ``epoch`` (1-based) of profiled candidate ``slot`` when ``on``."""
    col = jnp.clip(epoch - 1, 0, p.curves.shape[1] - 1)
    old = p.curves[slot, col]
    return p._replace(curves=p.curves.at[slot, col].set(jnp.where(on, value.astype(p.curves.dtype), old)))


def record_curves(p: HalvingProfileState, history, active) -> HalvingProfileState:
    """The batch form of :func:`push_loss`: the whole curves of the ``active`` profiled
    candidates from ``history`` (each job's losses from epoch 1, left-aligned, NaN-padded),
    shape (P, >= T)."""
    t = p.curves.shape[1]
    curves = jnp.where(active[:, None], jnp.asarray(history)[:, :t].astype(p.curves.dtype), p.curves)
    return p._replace(curves=curves, pending=p.pending & ~active)


def fit(p: HalvingProfileState, window: int, now) -> HalvingProfileState:
    """Fits the profile to the curves when ``now``; a failed fit leaves ``delta`` NaN."""
    prof = confidence.delta_sigma_profile(p.curves, window=window)
    delta = jnp.where(prof.ok, prof.delta, jnp.nan).astype(p.delta.dtype)
    return p._replace(delta=jnp.where(now, delta, p.delta), ok=jnp.where(now, prof.ok, p.ok))
