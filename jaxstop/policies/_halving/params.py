"""The numeric hyperparameters of the halving family and sub-sampling, their
defaults, and the argument checks these policies share (float dtype, candidate table).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks as _checks

__all__ = ["HalvingParams", "check_candidates", "check_params", "clean_params", "default_params", "float_dtype"]


class HalvingParams(NamedTuple):
    """Numeric hyperparameters of the halving family (a pytree; vmap over it).

    Attributes:
        min_sigma: Floor on the windowed uncertainty ``sigma``, in the units of the losses
            (``2^-18``, about 3.8e-6): a candidate whose window is flat (a plateaued run) has
            this ``sigma``. The default is the narrowest spread that
            :func:`jaxstop.confidence.prob_best`'s rule resolves (``2^-20`` of its window) when
            the losses in play span up to 4 units; a floor far below the spread of the losses
            makes the decisions with a plateaued candidate ``UNREPRESENTABLE``
            (``info.reason``: with 1e-6, 9 of 16 Hyperband+ studies on the AlexNet errors).
            It is absolute, so losses whose spreads are near or below it need a smaller floor,
            else every ``sigma`` is the floor and the UQ rule keeps nearly every member, ().
        delta_sigma: Reduction of ``sigma`` per epoch used by the keep rule for every
            candidate at every epoch; NaN (default) leaves it to the policy's
            ``delta_estimate``, ().
        threshold: Sub-sampling plus: a challenger is trained when
            ``Pr(l_m >= l_i) >= threshold`` (0.9), ().
        top_fraction: BOHB: fraction of results in the good density (0.15), ().
        random_fraction: BOHB: fraction of uniform proposals (1/3), ().
        min_bandwidth: BOHB: smallest KDE bandwidth (1e-3), ().
        delta_profile: An offline profile of ``Delta_t sigma``, the reduction of a
            candidate's ``sigma`` from epoch ``t`` to ``t + 1`` at index ``t - 1``
            (e.g. :func:`jaxstop.confidence.delta_sigma_profile`'s ``delta``), read by
            the UQ halving policies with ``delta_estimate="offline"``; NaN (default)
            entries are not given, shape (max_budget,). ``None`` counts as all NaN.

    Outside ``jit`` a value outside its range raises ``ValueError`` naming the field. Traced
    values (``jit``, ``vmap`` over params) cannot be checked before the step: a scalar outside
    its range stands replaced by its default, an infinite ``delta_sigma`` or ``delta_profile``
    entry counts as NaN (not given), and every info of the study says so (``ok`` False,
    ``reason`` ``BAD_INPUT``).
    """

    min_sigma: jax.Array
    delta_sigma: jax.Array
    threshold: jax.Array
    top_fraction: jax.Array
    random_fraction: jax.Array
    min_bandwidth: jax.Array
    delta_profile: Any = None



def default_params(fdtype, max_budget: int) -> HalvingParams:
    """The default :class:`HalvingParams` in the floating dtype ``fdtype``."""
    f = lambda v: jnp.asarray(v, fdtype)  # noqa: E731
    return HalvingParams(
        min_sigma=f(_DEFAULTS["min_sigma"]),
        delta_sigma=f(jnp.nan),
        threshold=f(_DEFAULTS["threshold"]),
        top_fraction=f(_DEFAULTS["top_fraction"]),
        random_fraction=f(_DEFAULTS["random_fraction"]),
        min_bandwidth=f(_DEFAULTS["min_bandwidth"]),
        delta_profile=jnp.full((max_budget,), jnp.nan, fdtype),
    )


#: The defaults of the scalars with a range, and the ranges: ``(> 0 (else >= 0), upper bound)``.
_DEFAULTS = {"min_sigma": 2.0**-18, "threshold": 0.9, "top_fraction": 0.15, "random_fraction": 1.0 / 3.0,
             "min_bandwidth": 1e-3}
_RANGES = {"min_sigma": (True, None), "min_bandwidth": (True, None), "threshold": (False, 1.0),
           "top_fraction": (True, 1.0), "random_fraction": (False, 1.0)}


def clean_params(params: HalvingParams):
    """``(params, valid)``: :func:`_check_values` as data (traceable), for the steps, which
    run on the result. ``valid`` is False when a scalar is outside its range (not finite,
    ``<= 0`` where it must be positive, above 1 where it is a fraction) or ``delta_sigma`` or
    an entry of ``delta_profile`` is infinite, bool (); such a scalar is replaced by its
    default and such an entry by NaN (not given), so the study runs as with valid params."""
    valid = jnp.asarray(True)
    fields = {}
    for name, (positive, high) in _RANGES.items():
        v = jnp.asarray(getattr(params, name))
        ok = jnp.isfinite(v) & ((v > 0) if positive else (v >= 0))
        if high is not None:
            ok = ok & (v <= high)
        valid = valid & ok
        fields[name] = jnp.where(ok, v, jnp.asarray(_DEFAULTS[name], jnp.result_type(v, float)))
    for name in ("delta_sigma", "delta_profile"):
        v = getattr(params, name)
        if v is None:
            continue
        v = jnp.asarray(v)
        inf = jnp.isinf(v)
        valid = valid & ~jnp.any(inf)
        fields[name] = jnp.where(inf, jnp.asarray(jnp.nan, jnp.result_type(v, float)), v)
    return params._replace(**fields), valid


def check_params(config, params):
    """Checks the params' type and shapes (the scalars, ``params.delta_profile`` against the
    policy's ``max_budget``; ``config`` has ``max_budget``), and their values when concrete;
    runs eagerly on every call that passes params."""
    if not isinstance(params, HalvingParams):
        raise TypeError(f"params must be a HalvingParams (see policy.default_params()), got {type(params).__name__}")
    if params.delta_profile is not None:
        shape = jnp.shape(params.delta_profile)
        if shape != (config.max_budget,):
            batch = "; for a batch of params, jax.vmap over sim.run" if shape[1:] == (config.max_budget,) else ""
            raise ValueError(f"params.delta_profile must have shape (max_budget,) = ({config.max_budget},), "
                             f"got {shape}{batch}")
    # shapes are static: checked under jit / vmap too (a batch axis without vmap would broadcast)
    for name in ("min_sigma", "delta_sigma", "threshold", "top_fraction", "random_fraction", "min_bandwidth"):
        if jnp.ndim(getattr(params, name)) != 0:
            raise ValueError(f"params.{name} must be a scalar, got shape {jnp.shape(getattr(params, name))}; "
                             "for a batch of params, jax.vmap over sim.run")
    if all(_checks.is_concrete(a) for a in jax.tree_util.tree_leaves(params)):
        _check_values(params)
    if params.delta_profile is None:  # counts as all NaN (not given): the defaults' structure
        params = params._replace(delta_profile=jnp.full((config.max_budget,), jnp.nan,
                                                        jnp.result_type(params.min_sigma)))
    return params


def _check_values(params: HalvingParams) -> None:
    """``ValueError`` naming the field for a concrete value outside its range (inside ``jit``
    the values are the caller's; :func:`check_params` checks the shapes): ``min_sigma`` and
    ``min_bandwidth`` > 0, ``threshold``, ``top_fraction`` and ``random_fraction`` in [0, 1] (``top_fraction`` > 0), and
    ``delta_sigma`` and the entries of ``delta_profile`` finite or NaN (not given)."""
    _checks.nonneg_float(params.min_sigma, "params.min_sigma", positive=True)
    _checks.nonneg_float(params.min_bandwidth, "params.min_bandwidth", positive=True)
    _checks.nonneg_float(params.threshold, "params.threshold", high=1.0)
    _checks.nonneg_float(params.top_fraction, "params.top_fraction", positive=True, high=1.0)
    _checks.nonneg_float(params.random_fraction, "params.random_fraction", high=1.0)
    for name in ("delta_sigma", "delta_profile"):
        v = getattr(params, name)
        if v is not None and np.any(np.isinf(np.asarray(v))):
            raise ValueError(f"params.{name} must be finite, or NaN where not given; got an infinite value")



def float_dtype(dtype):
    """The floating dtype of a policy's losses: ``dtype``, or JAX's default float."""
    return _checks.compute_dtype(dtype)



def check_candidates(candidates, num_configs, dtype, required: bool, who: str):
    """Checks the optional (``required`` for BOHB) candidate table, shape (num_configs, d),
    in the unit cube; returns it as a float array or None."""
    if candidates is None:
        if required:
            raise ValueError(f"{who} needs candidates, the configuration vectors of the table rows, "
                             "shape (num_configs, d) in the unit cube")
        return None
    cand = _checks.float_array(candidates, "candidates", dtype)
    _checks.check_rank(cand, 2, "candidates", "with shape (num_configs, d)")
    _checks.check_unit_cube(cand, "candidates")
    if cand.shape[0] != num_configs:
        raise ValueError(f"num_configs ({num_configs}) must equal len(candidates) ({cand.shape[0]})")
    if required and cand.shape[1] < 1:
        raise ValueError(f"candidates must have at least one column, got shape {cand.shape}")
    return cand
