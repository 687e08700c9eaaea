"""Random search: the baseline every other policy is compared with."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxstop._src import checks as _checks
from jaxstop.policies._base import (Incumbent, Job, Limits, Policy, Result, build_policy, make_job, renamed_field,
                                    update_incumbent)

__all__ = ["random_search", "RandomSearchState", "RandomSearchInfo"]


class RandomSearchState(NamedTuple):
    """State of :func:`random_search`.

    Attributes:
        order: The sampling order of table indices, shape (num_configs,) int32
            (empty in unit-cube mode).
        count: Number of jobs told so far, int32 ().
        incumbent_value: Lowest loss seen, () (``best_value`` is its deprecated alias).
        best_config: Its table index (-1 before the first result / in cube mode), int32 ().
        best_x: Its configuration vector, shape (d,).
    """

    order: jax.Array
    count: jax.Array
    incumbent_value: jax.Array
    best_config: jax.Array
    best_x: jax.Array

    best_value = renamed_field("incumbent_value", "best_value")


class RandomSearchInfo(NamedTuple):
    """Info of :func:`random_search`: ``terminate``, ``incumbent`` and ``incumbent_value``
    (the lowest loss seen; ``best_value`` is its deprecated alias)."""

    terminate: jax.Array
    incumbent: jax.Array
    incumbent_value: jax.Array

    best_value = renamed_field("incumbent_value", "best_value")


class _Config(NamedTuple):
    """The static configuration of :func:`random_search`."""

    num_configs: int | None
    max_budget: int
    d: int
    cube: bool
    replace: bool
    cand: Any
    fdtype: Any


def _init(cfg: _Config, key, params) -> RandomSearchState:
    """``init(key, params=()) -> state``: a random order of the table rows (table mode)
    and no incumbent yet."""
    order = (
        jnp.zeros((0,), jnp.int32)
        if cfg.cube
        else jax.random.permutation(key, cfg.num_configs).astype(jnp.int32)
    )
    return RandomSearchState(
        order,
        jnp.zeros((), jnp.int32),
        jnp.asarray(jnp.inf, cfg.fdtype),
        jnp.asarray(-1, jnp.int32),
        jnp.zeros((cfg.d,), cfg.fdtype),
    )


def _ask(cfg: _Config, key, state: RandomSearchState, params):
    """``ask(key, state, params=()) -> (job, state)``: the next row of the random order
    (a uniform row with ``replace``; a uniform point of the cube in cube mode), trained
    to ``max_budget``."""
    if cfg.cube:
        x = jax.random.uniform(key, (cfg.d,), cfg.fdtype)
        return make_job(-1, x, cfg.max_budget), state
    if cfg.replace:
        idx = jax.random.randint(key, (), 0, cfg.num_configs, jnp.int32)
    else:
        idx = state.order[jnp.minimum(state.count, cfg.num_configs - 1)]
    x = cfg.cand[idx].astype(cfg.fdtype) if cfg.cand is not None else jnp.zeros((0,), cfg.fdtype)
    return make_job(idx, x, cfg.max_budget), state


def _tell(cfg: _Config, state: RandomSearchState, job: Job, result: Result, params):
    """``tell(state, job, result, params=()) -> (state, RandomSearchInfo)``: counts the job
    and updates the incumbent (the lowest loss; NaN never, ties keep the earlier); the
    study terminates once every row was evaluated (table mode without replacement)."""
    inc = Incumbent(state.incumbent_value, state.best_config, state.best_x)
    inc = update_incumbent(inc, jnp.asarray(result.value, cfg.fdtype), job.config, job.x)
    state = RandomSearchState(state.order, state.count + 1, inc.value, inc.config, inc.x)
    done = jnp.asarray(False) if (cfg.cube or cfg.replace) else state.count >= cfg.num_configs
    return state, RandomSearchInfo(done, inc.config, inc.value)


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
    fdtype = _checks.compute_dtype(dtype)
    if candidates is not None:
        cand = _checks.float_array(candidates, "candidates", fdtype)
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
    if num_configs is not None and dim is not None and cand is None:
        raise ValueError("dim is the unit-cube mode's argument: give num_configs (table mode, optionally with "
                         "candidates) or dim (unit-cube mode), not both")
    cube = num_configs is None
    if cube:
        dim = _checks.positive_int(dim, "dim")
    else:
        num_configs = _checks.positive_int(num_configs, "num_configs")
    d = dim if cube else (cand.shape[1] if cand is not None else 0)
    replace = _checks.boolean(replace, "replace")
    cfg = _Config(num_configs, max_budget, d, cube, replace, cand, fdtype)
    # without replacement the study ends after every row: num_configs jobs
    limits = Limits(num_configs, None if (cube or replace) else num_configs, None, max_budget)
    return build_policy(cfg, init=_init, ask=_ask, tell=_tell, limits=limits)
