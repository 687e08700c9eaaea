"""Random search: the baseline every other policy is compared with."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxstop._src import checks as _checks
from jaxstop.policies._base import Job, Policy, Result, make_job

__all__ = ["random_search", "RandomSearchState", "RandomSearchInfo"]


class RandomSearchState(NamedTuple):
    """State of :func:`random_search`.

    Attributes:
        order: The sampling order of table indices, shape (num_configs,) int32
            (empty in unit-cube mode).
        count: Number of jobs told so far, int32 ().
        best_value: Lowest loss seen, ().
        best_config: Its table index (-1 before the first result / in cube mode), int32 ().
        best_x: Its configuration vector, shape (d,).
    """

    order: jax.Array
    count: jax.Array
    best_value: jax.Array
    best_config: jax.Array
    best_x: jax.Array


class RandomSearchInfo(NamedTuple):
    """Info of :func:`random_search`: ``terminate``, ``incumbent`` and ``best_value``."""

    terminate: jax.Array
    incumbent: jax.Array
    best_value: jax.Array


def random_search(
    num_configs: int | None = None,
    *,
    max_budget: int,
    candidates: ArrayLike | None = None,
    dim: int | None = None,
    replace: bool = False,
    dtype=None,
) -> Policy:
    """Random search, each configuration trained with the full budget.

    Two modes:

    * **table** (``num_configs`` or ``candidates`` given): configurations are rows
      of a finite candidate table, drawn uniformly; without replacement (default)
      the study terminates once every row has been evaluated.
    * **unit cube** (only ``dim`` given): configurations are uniform points of
      ``[0, 1]^dim`` (``job.config == -1``); the study never terminates by itself.

    Args:
        num_configs: Size of the candidate table.
        max_budget: Budget units (epochs) each job trains for.
        candidates: Optional table of configuration vectors in the unit cube, shape
            (num_configs, d); they are returned as ``job.x``.
        dim: Dimension of the unit cube (cube mode).
        replace: Draw table rows with replacement.
        dtype: Floating dtype of losses in the state (default: JAX's default float).

    Returns:
        A :class:`~jaxstop.policies.Policy` with ``report=None``; its params are ``()``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import policies, sim
        >>> table = sim.CurveTable(jnp.linspace(1.0, 0.1, 8)[:, None] * jnp.ones((8, 5)))
        >>> policy = policies.random_search(8, max_budget=5)
        >>> trace = sim.run(policy, table, jax.random.key(0), max_jobs=8)
        >>> int(trace.incumbent), int(trace.budget)
        (7, 40)
    """
    max_budget = _checks.positive_int(max_budget, "max_budget")
    if candidates is not None:
        cand = _checks.float_array(candidates, "candidates", dtype)
        _checks.check_rank(cand, 2, "candidates", "with shape (num_configs, d)")
        _checks.check_unit_cube(cand, "candidates")
        if num_configs is not None and num_configs != cand.shape[0]:
            raise ValueError(f"num_configs ({num_configs}) must equal len(candidates) ({cand.shape[0]})")
        num_configs = cand.shape[0]
    else:
        cand = None
    if num_configs is None and dim is None:
        raise ValueError("give num_configs / candidates (table mode) or dim (unit-cube mode)")
    if num_configs is not None and dim is not None and cand is not None and dim != cand.shape[1]:
        raise ValueError(f"dim ({dim}) must equal candidates.shape[1] ({cand.shape[1]})")
    cube = num_configs is None
    if cube:
        dim = _checks.positive_int(dim, "dim")
    else:
        num_configs = _checks.positive_int(num_configs, "num_configs")
    d = dim if cube else (cand.shape[1] if cand is not None else 0)
    fdtype = jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)

    def init(key, params=()):
        order = (
            jnp.zeros((0,), jnp.int32)
            if cube
            else jax.random.permutation(key, num_configs).astype(jnp.int32)
        )
        return RandomSearchState(
            order,
            jnp.zeros((), jnp.int32),
            jnp.asarray(jnp.inf, fdtype),
            jnp.asarray(-1, jnp.int32),
            jnp.zeros((d,), fdtype),
        )

    def ask(key, state, params=()):
        if cube:
            x = jax.random.uniform(key, (d,), fdtype)
            return make_job(-1, x, max_budget), state
        if replace:
            idx = jax.random.randint(key, (), 0, num_configs, jnp.int32)
        else:
            idx = state.order[jnp.minimum(state.count, num_configs - 1)]
        x = cand[idx].astype(fdtype) if cand is not None else jnp.zeros((0,), fdtype)
        return make_job(idx, x, max_budget), state

    def tell(state, job: Job, result: Result, params=()):
        value = jnp.asarray(result.value, fdtype)
        better = value < state.best_value  # NaN losses never become the incumbent
        state = RandomSearchState(
            state.order,
            state.count + 1,
            jnp.where(better, value, state.best_value),
            jnp.where(better, job.config, state.best_config),
            jnp.where(better, job.x.astype(fdtype), state.best_x),
        )
        done = jnp.asarray(False) if (cube or replace) else state.count >= num_configs
        return state, RandomSearchInfo(done, state.best_config, state.best_value)

    return Policy(init, ask, None, tell, lambda: ())

