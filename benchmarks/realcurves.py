"""Shared pieces of the real-curve studies (``uq_real.py``, ``bobos_real.py``).

A :class:`CurveData` is a table of real learning curves ready for
:func:`jaxstop.sim.run`; :func:`load_curves` builds one from the vendored OPDA
tables or the LCBench surrogate; the helpers summarise simulated runs.
"""

from __future__ import annotations

import numpy as np

from datasets import lcbench_curves, lcbench_from_unit, load_opda

from jaxstop import sim

__all__ = ["CurveData", "load_curves", "anytime_error", "fraction_to_match", "se"]


class CurveData:
    """Curves (validation error per epoch) with their mask and unit-cube configs."""

    def __init__(self, name, values, mask, configs):
        self.name = name
        self.values = np.asarray(values, np.float32)
        self.mask = np.asarray(mask, bool)
        self.configs = np.clip(np.asarray(configs, np.float32), 0.0, 1.0)
        lengths = self.mask.sum(1)
        self.final = self.values[np.arange(len(lengths)), lengths - 1]
        self.best = float(self.final.min())
        self.table = sim.CurveTable(np.where(self.mask, self.values, 0.0).astype(np.float32), self.mask,
                                    None, self.configs)

    @property
    def shape(self):
        return self.values.shape


def load_curves(name: str, rng: np.random.Generator, lcbench_epochs: int) -> CurveData:
    """``alexnet`` / ``deberta`` (OPDA), or ``lcbench-<task>``: 1,000 uniform configurations
    of the LCBench surrogate, ``lcbench_epochs`` epochs of validation error."""
    if name in ("alexnet", "deberta"):
        c = load_opda(name)
        return CurveData(name, c.values, c.mask, c.configs)
    task = name.split("-", 1)[1]
    u = rng.uniform(size=(1000, 7))
    curves = lcbench_curves(task, lcbench_from_unit(u), epochs=lcbench_epochs)
    return CurveData(name, curves.val_error, np.ones(curves.val_error.shape, bool), u)


def anytime_error(run, data: CurveData, grid):
    """Fully-trained error of the incumbent at each budget of ``grid``, per run; before the
    first incumbent, the table's mean final error (a random pick)."""
    res = np.empty((run["spent"].shape[0], grid.size))
    for i in range(res.shape[0]):
        idx = np.searchsorted(run["spent"][i], grid, side="right") - 1
        inc = np.where(idx >= 0, run["incumbents"][i][np.maximum(idx, 0)], -1)
        res[i] = np.where(inc >= 0, data.final[np.maximum(inc, 0)], data.final.mean())
    return res


def fraction_to_match(curve, target, grid, reference):
    """Smallest budget (relative to ``reference``) from which ``curve`` stays <= ``target``
    (NaN if it does not end there)."""
    ok = curve <= target + 1e-12
    if not ok[-1]:
        return float("nan")
    bad = np.flatnonzero(~ok)
    first = 0 if bad.size == 0 else bad[-1] + 1
    return float(grid[first] / reference)


def se(x):
    """Standard error of the mean."""
    return float(np.std(x, ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")
