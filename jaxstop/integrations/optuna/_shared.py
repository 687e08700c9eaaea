"""What the Optuna integration's classes share: reading a study and a trial's reported values
(the pruners), the check of values beyond the dtype's range (the pruners and the terminator),
and pickling an object that holds a lock (:class:`PicklableLock`, all three).

Optuna's public API (>= 4.0) is used: ``study.directions`` / ``study.direction``,
``study.get_trials(deepcopy=False, states=...)``, ``trial.number``,
``trial.intermediate_values``, ``trial.system_attrs``, ``trial.value`` and ``trial.state``;
and, as Optuna's own ``SuccessiveHalvingPruner`` does, ``study._storage.set_trial_system_attr``
to record a trial's rung (:class:`UQSuccessiveHalvingPruner`). The pruners themselves live
in ``_bos_pruner.py`` (:class:`BOSPruner`) and ``_uq_pruner.py``
(:class:`UQSuccessiveHalvingPruner`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import jax.numpy as jnp
import numpy as np
import optuna
from optuna.study import StudyDirection

__all__ = ["PicklableLock", "beyond_range", "check_study", "first_step_at", "float_dtype", "values_upto"]


def check_study(study: optuna.Study, who: str) -> bool:
    """Whether ``study`` minimises; raises ``ValueError`` for a multi-objective study.

    Optuna's ``trial.report`` / ``should_prune`` refuse multi-objective studies already;
    this check gives the same answer when ``prune`` is called directly.
    """
    directions = study.directions
    if len(directions) != 1:
        raise ValueError(
            f"{who} supports single-objective studies only; study {study.study_name!r} has {len(directions)} "
            f"objectives (directions {[d.name for d in directions]})"
        )
    return directions[0] == StudyDirection.MINIMIZE


def float_dtype() -> np.dtype:
    """The floating dtype the pruners compute in: JAX's default float (float64 when
    ``jax_enable_x64`` is set, float32 otherwise)."""
    return np.dtype(jnp.result_type(float))


def beyond_range(values, dtype) -> np.ndarray:
    """Which of ``values`` (float64) are finite but beyond the range of ``dtype``: a cast to
    it would make them inf (1e39 in float32, JAX's float dtype unless x64 is set)."""
    v = np.asarray(values, np.float64)
    return np.isfinite(v) & (np.abs(v) > float(np.finfo(dtype).max))


def first_step_at(values: Mapping[int, float], step: int, last: int | None = None) -> int | None:
    """The first reported step ``>= step`` (``None`` if there is none); ``last`` is the
    largest reported step when the caller knows it."""
    if step in values:
        return step
    if last is None:
        last = max(values, default=-1)
    if last < step:
        return None
    return min(s for s in values if s >= step)


def values_upto(values: Mapping[int, float], step: int, last_n: int | None = None) -> np.ndarray:
    """The reported values at steps ``<= step`` in step order (only the last ``last_n``
    of them when given), as float64."""
    steps = sorted(s for s in values if s <= step)
    if last_n is not None:
        steps = steps[-last_n:]
    return np.array([values[s] for s in steps], dtype=np.float64)


class PicklableLock:
    """A base for objects guarded by ``self._lock``: pickled and deep-copied without the lock
    (a new one on load), everything else (settings, records, caches) as it is. Optuna saves
    studies with their pruner (``pickle``, ``joblib.dump``), and a lock cannot be pickled.
    ``_LOCK`` is the lock's type (``threading.Lock`` or ``threading.RLock``)."""

    _LOCK = staticmethod(threading.Lock)

    def __getstate__(self):
        state = self.__dict__.copy()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = self._LOCK()
