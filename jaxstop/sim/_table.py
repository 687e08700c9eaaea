"""Curve tables in and out: from a long table (one row per configuration and epoch), to and from a file."""

from __future__ import annotations

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks as _checks
from jaxstop._src import io as _io
from jaxstop.sim._run import CurveTable, check_table

__all__ = ["from_long", "save_table", "load_table", "read_csv"]

_FIELDS = tuple(f".{name}" for name in CurveTable._fields)


def _codes(config) -> tuple[np.ndarray, list]:
    """Row index of every record (configurations in order of first appearance) and the labels."""
    arr = None
    if not (isinstance(config, (list, tuple)) and len({type(c) for c in config}) > 1
            or any(isinstance(c, (tuple, list)) for c in config)):
        try:
            arr = np.asarray(config)
        except ValueError:  # labels of different lengths
            arr = None
    if arr is not None and arr.ndim == 1 and arr.dtype.kind in "biufUS":
        uniq, first, inverse = np.unique(arr, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        return rank[inverse.reshape(-1)], uniq[order].tolist()
    if arr is not None and arr.ndim == 2 and arr.dtype.kind in "biuf":  # a configuration vector per record
        items = [tuple(row) for row in arr.tolist()]
    elif arr is not None and arr.ndim != 1:
        raise TypeError(f"config must hold one label per record, got an array of shape {arr.shape}")
    else:
        # Python objects as they are (mixed types, tuples): no conversion to a common dtype
        items = arr.tolist() if arr is not None else list(config)
    index: dict = {}
    try:
        codes = np.fromiter((index.setdefault(c, len(index)) for c in items), dtype=np.int64, count=len(items))
    except TypeError as err:
        raise TypeError(f"config must hold hashable labels (one per record): {err}") from err
    return codes, list(index)


def _column(x, name: str, n: int | None) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one entry per record), got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise ValueError(f"{name} must have one entry per record ({n}), got {a.shape[0]}")
    return a


def from_long(config, epoch, value, test=None, *, return_labels: bool = False):
    """The records ``(config, epoch, value[, test])`` as a table: :meth:`CurveTable.from_long`."""
    value = _column(value, "value", None)
    n = value.shape[0]
    if n == 0:
        raise ValueError("value must hold at least one record")
    epoch = _column(epoch, "epoch", n)
    if epoch.dtype.kind == "f":
        if not np.all(np.isfinite(epoch)) or np.any(epoch != np.round(epoch)):
            raise ValueError("epoch must hold whole numbers (budget units trained, counted from 1)")
    elif epoch.dtype.kind not in "iu":
        raise TypeError(f"epoch must hold integers, got dtype {epoch.dtype}")
    epoch = epoch.astype(np.int64)
    if epoch.min() < 1:
        raise ValueError(f"epoch must be >= 1 (the loss after that many budget units); got {int(epoch.min())}: "
                         "add 1 to epochs counted from 0")
    codes, labels = _codes(config)
    if codes.shape[0] != n:
        raise ValueError(f"config must have one entry per record ({n}), got {codes.shape[0]}")
    num_configs, width = len(labels), int(epoch.max())
    cell = codes * width + (epoch - 1)
    uniq, counts = np.unique(cell, return_counts=True)
    if uniq.size != n:
        c = int(uniq[counts > 1][0] // width)
        raise ValueError(f"configuration {labels[c]!r} has epoch {int(uniq[counts > 1][0] % width) + 1} "
                         "more than once")
    lengths = np.bincount(codes, minlength=num_configs)
    longest = np.zeros(num_configs, np.int64)
    np.maximum.at(longest, codes, epoch)
    gap = np.flatnonzero(longest != lengths)
    if gap.size:
        c = int(gap[0])
        raise ValueError(f"configuration {labels[c]!r} has {int(lengths[c])} epochs up to epoch {int(longest[c])}: "
                         "every curve must have the epochs 1 .. L without gaps")

    def grid(column, name):
        col = _checks.float_array(column, name)
        dtype = np.dtype(col.dtype)
        out = np.full((num_configs, width), np.nan, dtype)
        out[codes, epoch - 1] = np.asarray(col)
        return jnp.asarray(out)

    values = grid(value, "value")
    test_grid = None if test is None else grid(_column(test, "test", n), "test")
    mask = jnp.asarray(np.arange(width)[None, :] < lengths[:, None])
    table = check_table(CurveTable(values, mask, test_grid))
    return (table, labels) if return_labels else table


def read_csv(path: str | os.PathLike, *, return_labels: bool = False):
    """A :class:`CurveTable` from a CSV file with a header and the columns ``config``,
    ``epoch``, ``value`` and optionally ``test`` (any order; other columns are ignored),
    read with NumPy; see :func:`from_long`. Fields are separated by commas and not quoted."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            lines = [line for line in (f.readline(), f.readline()) if line.strip()]
    except UnicodeDecodeError as err:
        raise ValueError(f"{name} is not a CSV table (not UTF-8 text): {err}") from err
    if len(lines) < 2:
        raise ValueError(f"{name} is not a CSV table: it needs a header line (config,epoch,value) and at least "
                         "one record")
    try:
        data = np.genfromtxt(name, delimiter=",", names=True, dtype=None, encoding="utf-8", autostrip=True)
    except (ValueError, IndexError) as err:
        raise ValueError(f"{name} is not a readable CSV table: {err}") from err
    columns = data.dtype.names or ()
    missing = [c for c in ("config", "epoch", "value") if c not in columns]
    if missing:
        raise ValueError(f"{name} must have the columns config, epoch, value (and optionally test); "
                         f"missing {missing}, found {list(columns)}")
    data = np.atleast_1d(data)
    return from_long(data["config"], data["epoch"], data["value"],
                     data["test"] if "test" in columns else None, return_labels=return_labels)


def save_table(table: CurveTable, path: str | os.PathLike) -> None:
    """Saves ``table`` (checked; ``mask`` stored even when it is ``None``) with :func:`jaxstop.save`."""
    _io.save(check_table(table), path)


def _stored(path) -> dict[str, Any]:
    """Tree path -> ``jax.ShapeDtypeStruct`` of every leaf of a file written by :func:`jaxstop.save`."""
    name = os.fspath(path)
    try:
        with np.load(name, allow_pickle=False) as npz:
            paths = npz["__paths__"].tolist()
            return {p: jax.ShapeDtypeStruct(npz[f"leaf{i}"].shape, npz[f"leaf{i}"].dtype) for i, p in enumerate(paths)}
    except (OSError, ValueError, KeyError, AttributeError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise ValueError(f"{name} is not a CurveTable saved by CurveTable.save") from err


def load_table(path: str | os.PathLike) -> CurveTable:
    """The :class:`CurveTable` saved at ``path`` by :meth:`CurveTable.save` (via :func:`jaxstop.load`)."""
    stored = _stored(path)
    if not set(stored) <= set(_FIELDS) or ".values" not in stored or ".mask" not in stored:
        raise ValueError(f"{os.fspath(path)} is not a CurveTable saved by CurveTable.save: "
                         f"it holds {sorted(stored)}")
    like = CurveTable(*[stored.get(f) for f in _FIELDS])
    return check_table(_io.load(path, like=like))
