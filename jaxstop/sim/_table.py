"""Curve tables: :class:`CurveTable`, its checks, and tables in and out (from a long table of
records, one per configuration and epoch; to and from a file)."""

from __future__ import annotations

import os
import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks as _checks
from jaxstop._src import io as _io

__all__ = ["CurveTable", "check_table", "curve_lengths", "from_long", "load_table", "read_csv", "save_table"]


class CurveTable(NamedTuple):
    """Real learning curves of a loss to minimise.

    Attributes:
        values: Loss after each budget unit, shape (num_configs, max_budget);
            ``values[c, e - 1]`` is the loss of configuration ``c`` after ``e`` epochs;
            finite wherever ``mask`` marks an entry valid (anything elsewhere).
        mask: Which entries exist, shape (num_configs, max_budget) bool; each row
            must be a prefix (a curve of length L has its first L entries valid).
            ``None`` means all valid.
        test: Optional held-out loss with the same layout as ``values`` (like ``values``,
            finite wherever ``mask`` marks an entry valid).
        configs: Optional configuration vectors in the unit cube, shape (num_configs, d).

    Built from a long table (one record per configuration and epoch) by
    :meth:`from_long` or :meth:`from_csv`; written and read back exactly by
    :meth:`save` and :meth:`load`.
    """

    values: jax.Array
    mask: Any = None
    test: Any = None
    configs: Any = None

    @classmethod
    def from_long(cls, config, epoch, value, test=None, *, return_labels: bool = False):
        """A :class:`CurveTable` from a long table: one record per configuration and epoch.

        The usual CSV / data-frame layout: columns ``config`` (any hashable label: ints,
        strings, tuples), ``epoch`` (budget units trained, counted from 1) and ``value`` (the
        loss after that many epochs), optionally ``test``. Records may come in any order.
        Row ``i`` of the table is the ``i``-th distinct label in order of first appearance.
        Every configuration must have the epochs ``1 .. L`` exactly once (any ``L`` >= 1:
        ragged curves); shorter curves are padded with NaN and ``mask`` marks the valid
        prefix, as :class:`CurveTable` represents them.

        Args:
            config: Configuration label of every record, length n.
            epoch: Integer epoch of every record, >= 1, length n.
            value: Loss of every record, finite, length n.
            test: Optional test loss of every record, length n.
            return_labels: Also return the labels of the rows.

        Returns:
            The table (values in ``value``'s floating dtype); with ``return_labels``,
            ``(table, labels)``, ``labels[i]`` the label of row ``i``.

        Raises:
            ValueError / TypeError: Naming the column: lengths differ, an epoch that is not
                an integer >= 1, a configuration with a repeated or missing epoch, a
                non-finite loss or test loss (naming the record).

        Example:
            >>> from jaxstop.sim import CurveTable
            >>> table, labels = CurveTable.from_long(
            ...     ["b", "a", "a", "b", "b"], [2, 2, 1, 1, 3], [0.5, 0.375, 0.625, 0.75, 0.25],
            ...     return_labels=True)
            >>> labels, table.mask.tolist()
            (['b', 'a'], [[True, True, True], [True, True, False]])
            >>> table.values[0].tolist()
            [0.75, 0.5, 0.25]
        """
        return from_long(config, epoch, value, test, return_labels=return_labels)

    @classmethod
    def from_csv(cls, path, *, return_labels: bool = False):
        """A table from a CSV file of records (see :meth:`from_long`).

        The file has a header line naming the columns ``config``, ``epoch``, ``value`` and
        optionally ``test`` (in any order; other columns are ignored), fields separated by
        commas (a field may be quoted, as Python's :mod:`csv` reads it). Blank lines are
        skipped, a UTF-8 byte-order mark (as spreadsheet programs write) is dropped, and
        every other line is a record, which must have a non-empty cell in each of those
        columns and no non-empty field beyond the header's columns (a field holding an
        unquoted comma).

        Configuration labels come back as they are written: as integers where every label is
        an integer as Python writes one (``3``, ``-17``, ``250``; int64, or Python ints beyond
        it), else as floats where every one is a decimal number and distinct labels are
        distinct numbers (``0.1``, ``1.0``, ``2.5e-3``), else as the strings in the file. So
        ids with leading zeros (``007``), ``1_000``, ``nan`` or ``inf``, and labels only
        equal as numbers (``1`` and ``1.0``, ``0`` and ``-0``) stay strings, each its own
        configuration (pandas would read ``007`` as 7). Row ``i`` of the table is the
        ``i``-th distinct label in the order of first appearance in the file (as
        :meth:`from_long`), not the order of the labels' values: with integer ids
        ``0 .. N - 1`` in any other order, ``labels[i]``, not ``i``, is row ``i``'s id.

        Raises:
            ValueError: Naming the file (and the line and column where a record is at
                fault: an empty cell, a value that is not a number), for a file that is not
                such a table; and the errors of :meth:`from_long`.

        Example:
            >>> import tempfile, pathlib
            >>> from jaxstop.sim import CurveTable
            >>> path = pathlib.Path(tempfile.mkdtemp()) / "curves.csv"
            >>> _ = path.write_text("config,epoch,value\\na,1,0.5\\na,2,0.4\\nb,1,0.6\\n")
            >>> table, labels = CurveTable.from_csv(path, return_labels=True)
            >>> labels, table.values.shape
            (['a', 'b'], (2, 2))
        """
        return read_csv(path, return_labels=return_labels)

    def save(self, path) -> None:
        """Writes the table (checked, ``mask`` included) to ``path`` with :func:`jaxstop.save`.

        Example:
            >>> import os, tempfile, jax.numpy as jnp
            >>> path = os.path.join(tempfile.mkdtemp(), "table.npz")
            >>> CurveTable(jnp.array([[0.5, 0.375]])).save(path)
            >>> CurveTable.load(path).values.tolist()
            [[0.5, 0.375]]
        """
        save_table(self, path)

    @classmethod
    def load(cls, path) -> "CurveTable":
        """The table :meth:`save` wrote to ``path``, bit for bit (via :func:`jaxstop.load`;
        a float64 table where ``jax_enable_x64`` is off comes back in float32, as any float64
        table given to jaxstop there); ``ValueError`` naming the file for any other file."""
        return load_table(path)


def curve_lengths(table: CurveTable) -> jax.Array:
    """Number of valid budget units of every curve, shape (num_configs,) int32.

    Raises ``TypeError`` for a ``table`` that is not a :class:`CurveTable` and ``ValueError``
    for ``table.values`` that are not 2-D."""
    shape = _table_shape(table)
    if table.mask is None:
        return jnp.full(shape[:1], shape[1], jnp.int32)
    return jnp.sum(jnp.asarray(table.mask), axis=1).astype(jnp.int32)


def _table_shape(table) -> tuple[int, ...]:
    """``table.values``' shape; ``TypeError`` for a ``table`` that is not a :class:`CurveTable`,
    ``ValueError`` for values that are not 2-D."""
    if not isinstance(table, CurveTable):
        raise TypeError(f"table must be a jaxstop.sim.CurveTable, got {type(table).__name__}")
    shape = np.shape(table.values)  # of a list too, and of a tracer
    if len(shape) != 2:
        raise ValueError(f"table.values must be 2-D with shape (num_configs, max_budget), got shape {shape}")
    return shape


def check_table(table: CurveTable) -> CurveTable:
    _table_shape(table)
    values = _checks.float_array(table.values, "table.values")
    if values.shape[0] < 1 or values.shape[1] < 1:
        raise ValueError(f"table.values must be non-empty, got shape {values.shape}")
    mask = _checks.mask_array(table.mask, values.shape, "table.mask")
    if _checks.is_concrete(mask):
        m = np.asarray(mask)
        lengths = m.sum(axis=1)
        prefix = np.arange(m.shape[1])[None, :] < lengths[:, None]
        if not np.array_equal(m, prefix):
            raise ValueError("table.mask must mark a prefix of every row (curves start at epoch 1 without gaps)")
        if not np.all(lengths >= 1):
            raise ValueError("every curve in table.mask must have at least one valid entry")
    _checks.check_finite_where(values, mask, "table.values")
    test = table.test
    if test is not None:
        test = _checks.float_array(test, "table.test", values.dtype)
        if test.shape != values.shape:
            raise ValueError(f"table.test must have shape {values.shape} like table.values, got {test.shape}")
        _checks.check_finite_where(test, mask, "table.test")
    configs = table.configs
    if configs is not None:
        configs = _checks.float_array(configs, "table.configs")
        _checks.check_rank(configs, 2, "table.configs", "with shape (num_configs, d)")
        if configs.shape[0] != values.shape[0]:
            raise ValueError(
                f"table.configs must have {values.shape[0]} rows like table.values, got {configs.shape[0]}"
            )
        _checks.check_unit_cube(configs, "table.configs")
    return CurveTable(values, mask, test, configs)


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
    return_labels = _checks.boolean(return_labels, "return_labels")
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
    # the range checked in the column's own dtype, before the cast could wrap a value around
    if epoch.min() < 1:
        raise ValueError(f"epoch must be >= 1 (the loss after that many budget units); got {int(epoch.min())}: "
                         "add 1 to epochs counted from 0")
    if epoch.max() > n:
        raise ValueError(f"epoch {int(epoch.max())} is beyond the number of records ({n}): every curve must have "
                         "the epochs 1 .. L without gaps")
    epoch = epoch.astype(np.int64)
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
        with np.errstate(over="ignore"):  # beyond the dtype's range: named below
            col = _checks.float_array(column, name)
        if _checks.is_concrete(col):
            bad = ~np.isfinite(np.asarray(col))
            # finite in the records but not in the table's dtype: float64 losses beyond float32's range
            lost = bad & np.isfinite(np.asarray(column, dtype=np.float64)) if bad.any() else bad
            if lost.any():
                i = int(np.argmax(lost))
                raise ValueError(f"{name} holds {int(lost.sum())} value(s) beyond the range of {col.dtype}, the "
                                 f"first {float(np.asarray(column)[i])!r} at record {i}: JAX computes in float32 "
                                 "unless jax_enable_x64 is set; set it or rescale the losses")
            if bad.any():
                # a record left out takes its loss with it (and leaves a gap in its curve): a test
                # loss is needed wherever there is a loss, or none at all
                fix = ("leave such records out" if name == "value" else
                       "every record needs a finite test loss; fill them in, or pass no test column (test=None)")
                raise ValueError(f"{name} holds {int(bad.sum())} value(s) that are not finite (NaN or inf), the "
                                 f"first at record {int(np.argmax(bad))}: {fix}")
        dtype = np.dtype(col.dtype)
        out = np.full((num_configs, width), np.nan, dtype)
        out[codes, epoch - 1] = np.asarray(col)
        return jnp.asarray(out)

    values = grid(value, "value")
    test_grid = None if test is None else grid(_column(test, "test", n), "test")
    mask = jnp.asarray(np.arange(width)[None, :] < lengths[:, None])
    table = check_table(CurveTable(values, mask, test_grid))
    return (table, labels) if return_labels else table


def _numbers(fields: list[str], kind: type, name: str, column: str, lines: list[int]) -> np.ndarray:
    """The cells of one CSV column as numbers (``int``: whole numbers, as integers where every
    cell is an integer literal, else as floats); a ``ValueError`` names the line and the cell."""
    if kind is int:
        try:
            return np.array([int(f) for f in fields], np.int64)
        except (ValueError, OverflowError):
            pass  # e.g. "2.0" or "1e3": read as floats, checked for whole numbers by from_long
    out = np.empty(len(fields), np.float64)
    for i, f in enumerate(fields):
        try:
            out[i] = float(f)
        except ValueError:
            raise ValueError(f"{name}, line {lines[i]}: column {column!r} holds {f!r}, not a number") from None
    return out


_INT = re.compile(r"0|-?[1-9][0-9]*")
_NUMBER = re.compile(r"[-+]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?")


def _labels(fields: list[str]):
    """Configuration labels, each read back as it was written: integers where every label is an
    integer as Python writes one (``str(int)``: no sign but ``-``, no leading zero, no ``-0``),
    else floats where every one is a decimal number (no leading zero, no NaN / inf) and distinct
    labels are distinct numbers (an integer one exactly), else the strings as written."""
    if all(_INT.fullmatch(f) for f in fields):
        ints = [int(f) for f in fields]
        try:
            return np.array(ints, np.int64)
        except OverflowError:  # beyond int64: Python ints, exact
            return np.array(ints, dtype=object)
    if all(_NUMBER.fullmatch(f) for f in fields):
        distinct = set(fields)
        numbers = {f: float(f) for f in distinct}
        exact = all(np.isfinite(v) and (not _INT.fullmatch(f) or v == int(f)) for f, v in numbers.items())
        if exact and len(set(numbers.values())) == len(distinct):
            return np.array([numbers[f] for f in fields], np.float64)
    return np.array(fields, dtype=str)


def read_csv(path: str | os.PathLike, *, return_labels: bool = False):
    """A :class:`CurveTable` from a CSV file with a header and the columns ``config``,
    ``epoch``, ``value`` and optionally ``test`` (any order; other columns are ignored); see
    :meth:`CurveTable.from_csv` and :func:`from_long`. Read with Python's :mod:`csv` module
    (commas; a field may be quoted); blank lines are skipped and a UTF-8 byte-order mark is
    dropped; every other line after the header is a record (no comment lines: a label may
    begin with ``#``). Every record must have each of the named columns' cells, non-empty, and
    no non-empty field beyond the header's columns."""
    import csv

    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8-sig", newline="") as f:
            rows = [(i, row) for i, row in enumerate(csv.reader(f), start=1) if any(c.strip() for c in row)]
    except UnicodeDecodeError as err:
        raise ValueError(f"{name} is not a CSV table (not UTF-8 text): {err}") from err
    except csv.Error as err:
        raise ValueError(f"{name} is not a readable CSV table: {err}") from err
    if len(rows) < 2:
        raise ValueError(f"{name} is not a CSV table: it needs a header line (config,epoch,value) and at least "
                         "one record")
    header = [c.strip() for c in rows[0][1]]
    missing = [c for c in ("config", "epoch", "value") if c not in header]
    if missing:
        raise ValueError(f"{name} must have the columns config, epoch, value (and optionally test); "
                         f"missing {missing}, found {header}")
    wanted = [c for c in ("config", "epoch", "value", "test") if c in header]
    for c in wanted:
        if header.count(c) > 1:
            raise ValueError(f"{name} has the column {c!r} more than once")
    where = {c: header.index(c) for c in wanted}
    cells: dict[str, list[str]] = {c: [] for c in wanted}
    lines = []
    for line, row in rows[1:]:
        if any(c.strip() for c in row[len(header):]):
            # a field the header does not name shifts nothing it reads, but says the line is not
            # split as the header is (an unquoted decimal comma: "a,1,0,5" read as the loss 0)
            raise ValueError(f"{name}, line {line}: the record has {len(row)} fields but the header names "
                             f"{len(header)} (quote a field that holds a comma)")
        for c in wanted:
            j = where[c]
            cell = row[j].strip() if j < len(row) else ""
            if not cell:
                raise ValueError(f"{name}, line {line}: the record has no value in column {c!r}")
            cells[c].append(cell)
        lines.append(line)
    losses = {c: _numbers(cells[c], float, name, c, lines) for c in ("value", "test") if c in cells}
    for c, col in losses.items():
        bad = ~np.isfinite(col)
        if bad.any():  # named by its line here, as every other fault of a record
            i = int(np.argmax(bad))
            fix = ("leave such records out (and the later epochs of their configurations: a curve has no gaps)"
                   if c == "value" else "every record needs a finite test loss; fill them in, or drop the column")
            raise ValueError(f"{name}, line {lines[i]}: column {c!r} holds {cells[c][i]!r}, not a finite number "
                             f"({int(bad.sum())} such record(s)): {fix}")
    return from_long(_labels(cells["config"]), _numbers(cells["epoch"], int, name, "epoch", lines),
                     losses["value"], losses.get("test"), return_labels=return_labels)


def save_table(table: CurveTable, path: str | os.PathLike) -> None:
    """Saves ``table`` (checked; ``mask`` stored even when it is ``None``) with :func:`jaxstop.save`."""
    _io.save(check_table(table), path)


def _stored(path) -> dict[str, Any]:
    """Tree path -> ``jax.ShapeDtypeStruct`` of every leaf of a file written by :func:`jaxstop.save`."""
    try:
        return _io.stored_specs(path)
    except (OSError, ValueError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise ValueError(f"{os.fspath(path)} is not a CurveTable saved by CurveTable.save") from err


def load_table(path: str | os.PathLike) -> CurveTable:
    """The :class:`CurveTable` saved at ``path`` by :meth:`CurveTable.save` (via :func:`jaxstop.load`)."""
    stored = _stored(path)
    if not set(stored) <= set(_FIELDS) or ".values" not in stored or ".mask" not in stored:
        raise ValueError(f"{os.fspath(path)} is not a CurveTable saved by CurveTable.save: "
                         f"it holds {sorted(stored)}")
    # NumPy leaves in like: read as stored (a float64 table also where jax_enable_x64 is off),
    # then checked and converted as any table given to the simulator
    like = CurveTable(*[None if f not in stored else np.broadcast_to(np.zeros((), stored[f].dtype), stored[f].shape)
                        for f in _FIELDS])
    return check_table(_io.load(path, like=like))
