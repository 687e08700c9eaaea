"""Integrations of jaxstop with hyperparameter-optimisation frameworks.

Each integration is a subpackage that imports its framework, an optional dependency:

* :mod:`jaxstop.integrations.optuna` (extra ``optuna``): a regret-bound terminator
  callback for Optuna studies, used like ``optuna.terminator``'s.

Nothing is imported here, so ``import jaxstop.integrations`` works without any framework.
"""

__all__: list[str] = []
