"""The numeric hyperparameters of the halving family and sub-sampling, their
defaults, and the argument checks these policies share (float dtype, candidate table).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxstop._src import checks as _checks

__all__ = ["HalvingParams", "check_candidates", "default_params", "float_dtype"]


class HalvingParams(NamedTuple):
    """Numeric hyperparameters of the halving family (a pytree; vmap over it).

    Attributes:
        min_sigma: Floor on the windowed uncertainty ``sigma``, ().
        delta_sigma: Reduction of ``sigma`` per epoch used by the keep rule; NaN
            (default) estimates it per candidate from two consecutive windows, ().
        threshold: Sub-sampling plus: a challenger is trained when
            ``Pr(l_m >= l_i) >= threshold`` (0.9), ().
        top_fraction: BOHB: fraction of results in the good density (0.15), ().
        random_fraction: BOHB: fraction of uniform proposals (1/3), ().
        min_bandwidth: BOHB: smallest KDE bandwidth (1e-3), ().
    """

    min_sigma: jax.Array
    delta_sigma: jax.Array
    threshold: jax.Array
    top_fraction: jax.Array
    random_fraction: jax.Array
    min_bandwidth: jax.Array




def default_params(fdtype) -> HalvingParams:
    """The default :class:`HalvingParams` in the floating dtype ``fdtype``."""
    f = lambda v: jnp.asarray(v, fdtype)  # noqa: E731
    return HalvingParams(
        min_sigma=f(1e-6),
        delta_sigma=f(jnp.nan),
        threshold=f(0.9),
        top_fraction=f(0.15),
        random_fraction=f(1.0 / 3.0),
        min_bandwidth=f(1e-3),
    )



def float_dtype(dtype):
    """The floating dtype of a policy's losses: ``dtype``, or JAX's default float."""
    return jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)



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
