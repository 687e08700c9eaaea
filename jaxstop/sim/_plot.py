"""Regret against budget of several policies on one figure (matplotlib, an optional extra)."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from jaxstop.sim._summary import Metrics, Summary

__all__ = ["plot_regret"]

_GRID_FIELDS = ("regret", "incumbent_regret", "test_regret", "incumbent_test_regret")
_LABELS = {
    "regret": "best-so-far regret",
    "incumbent_regret": "regret of the policy's incumbent",
    "test_regret": "best-so-far test regret",
    "incumbent_test_regret": "test regret of the policy's incumbent",
}


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("plot_regret needs matplotlib: pip install matplotlib") from err
    return plt


def plot_regret(summaries: Mapping[str, Summary], ax: Any = None, *, metric: str = "regret",
                band: str | None = "se", scale: float = 1.0, log: bool = False,
                xlabel: str = "cumulative budget", ylabel: str | None = None) -> Any:
    """Draws the mean regret of several policies against cumulative budget, with bands.

    One line per entry of ``summaries`` (the mean over studies on that summary's budget
    grid, labelled by its key), with a shaded band of one standard error either side
    (``band="se"``) or between the lowest and highest quantile of the summary
    (``band="quantiles"``). Grid points where the mean is NaN (before every study
    finished its first job) are left out by matplotlib.

    Args:
        summaries: Label -> :class:`Summary` from :func:`summarize`, drawn in order.
        ax: A matplotlib ``Axes``; default a new figure's.
        metric: The grid field of :class:`Metrics` to draw: ``"regret"`` (best so far,
            default), ``"incumbent_regret"``, ``"test_regret"`` or ``"incumbent_test_regret"``.
        band: ``"se"``, ``"quantiles"`` or ``None`` (lines only).
        scale: Multiplies the regret (e.g. 100 for percentage points of an error rate).
        log: Logarithmic y axis.
        xlabel, ylabel: Axis labels (default ``ylabel``: the metric in words).

    Returns:
        The ``Axes``.

    Raises:
        ImportError: matplotlib is not installed.
        ValueError / TypeError: An unknown ``metric`` or ``band``, an entry that is not a
            :class:`Summary`, or no summaries.

    Example:
        >>> import jax, jax.numpy as jnp, matplotlib.pyplot as plt
        >>> from jaxstop import policies, sim
        >>> table = sim.CurveTable(jnp.array([[0.9, 0.5], [0.8, 0.7], [0.95, 0.3]]))
        >>> traces = sim.run_many(policies.random_search(3, max_budget=2), table,
        ...                       jax.random.key(0), 8, progress=False)
        >>> ax = sim.plot_regret({"random search": sim.summarize(traces, table)})
        >>> [line.get_label() for line in ax.get_lines()]
        ['random search']
        >>> plt.close(ax.figure)
    """
    if metric not in _GRID_FIELDS:
        raise ValueError(f"metric must be one of {_GRID_FIELDS}, got {metric!r}")
    if band not in ("se", "quantiles", None):
        raise ValueError(f"band must be 'se', 'quantiles' or None, got {band!r}")
    if not isinstance(summaries, Mapping) or not summaries:
        raise TypeError("summaries must be a non-empty dict of label -> jaxstop.sim.Summary")
    for label, s in summaries.items():
        if not isinstance(s, Summary) or not isinstance(s.mean, Metrics):
            raise TypeError(f"summaries[{label!r}] must be a jaxstop.sim.Summary, got {type(s).__name__}")
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots()
    for label, s in summaries.items():
        x = np.asarray(s.budget_grid, dtype=float)
        y = scale * np.asarray(getattr(s.mean, metric), dtype=float)
        (line,) = ax.plot(x, y, label=str(label))
        if band == "se":
            e = scale * np.asarray(getattr(s.se, metric), dtype=float)
            lo, hi = y - e, y + e
        elif band == "quantiles":
            # the lowest and highest levels, in whatever order summarize's quantiles came
            levels = np.asarray(s.levels, dtype=float)
            q = scale * np.asarray(getattr(s.quantiles, metric), dtype=float)
            lo, hi = q[int(np.argmin(levels))], q[int(np.argmax(levels))]
        if band is not None:
            ok = np.isfinite(lo) & np.isfinite(hi)
            ax.fill_between(x, lo, hi, where=ok, color=line.get_color(), alpha=0.2, linewidth=0)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(_LABELS[metric] if ylabel is None else ylabel)
    ax.legend()
    return ax
