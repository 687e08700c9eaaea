"""The regret bound and the threshold of a study per trial (:func:`plot_terminator_improvement`)."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.trial import TrialState

from jaxstop.integrations.optuna._terminator import RegretBoundTerminator, TerminatorRecord

__all__ = ["terminator_improvement", "plot_terminator_improvement"]


def terminator_improvement(
    study: optuna.Study, terminator: RegretBoundTerminator | None = None
) -> list[tuple[int, TerminatorRecord]]:
    """The terminator's record after each trial of ``study``, recomputed from the study.

    For every prefix of the study's usable trials (in trial-number order) with at least
    ``min_n_trials`` COMPLETE trials, the decision a terminator with ``terminator``'s
    settings makes on that prefix (one warm-started chain of fits in a fresh copy: the
    given terminator's own state is untouched).

    Args:
        study: A single-objective study.
        terminator: Its settings; default ``RegretBoundTerminator()``.

    Returns:
        ``[(trial_number, record), ...]``: the last trial of each prefix and its
        :class:`TerminatorRecord`.

    Raises:
        ValueError: As :meth:`RegretBoundTerminator.inputs`.
    """
    term = (terminator or RegretBoundTerminator()).fresh()
    states = (TrialState.COMPLETE, TrialState.PRUNED) if term.include_pruned else (TrialState.COMPLETE,)
    trials = sorted(study.get_trials(deepcopy=False, states=states), key=lambda t: t.number)
    out = []
    complete = 0
    for i, t in enumerate(trials):
        complete += t.state == TrialState.COMPLETE
        if complete >= term.min_n_trials:
            out.append((t.number, term.evaluate(study, trials[: i + 1])))
    return out


def plot_terminator_improvement(
    study: optuna.Study,
    terminator: RegretBoundTerminator | None = None,
    *,
    ax: Any = None,
    records: list[tuple[int, TerminatorRecord]] | None = None,
) -> Any:
    """Plots the regret bound and the threshold per trial, the stop marked (matplotlib).

    Args:
        study: A single-objective study.
        terminator: The settings of the terminator (default ``RegretBoundTerminator()``).
        ax: A matplotlib ``Axes``; default a new figure's.
        records: The output of :func:`terminator_improvement`, if already computed.

    Returns:
        The ``Axes``: the bound (log scale where positive), the threshold, and a vertical
        line at the first trial where the bound is below the threshold.

    Raises:
        ImportError: matplotlib is not installed.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("plot_terminator_improvement needs matplotlib (pip install matplotlib)") from err
    if records is None:
        records = terminator_improvement(study, terminator)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.5))
    xs = [n for n, _ in records]
    ax.plot(xs, [r.bound for _, r in records], marker=".", label="regret bound (Eq. 8)")
    ax.plot(xs, [r.threshold for _, r in records], linestyle="--", label="threshold")
    stops = [n for n, r in records if r.terminate]
    if stops:
        ax.axvline(stops[0], color="black", linewidth=1, label=f"stop (trial {stops[0]})")
    if records and all(r.bound > 0 for _, r in records):
        ax.set_yscale("log")
    ax.set_xlabel("trial")
    ax.set_ylabel("objective units")
    ax.set_title(f"terminator: {study.study_name}")
    ax.legend()
    return ax
