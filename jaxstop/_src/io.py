"""Exact save / load of any pytree of arrays (policy states, traces, params).

The file is an ``.npz`` archive, read back with ``allow_pickle=False``. Format version 2
(written by :func:`save`):

* ``__format__``: ``"jaxstop.pytree"``; ``__version__``: 2;
* ``__num_leaves__``: the number of leaves ``n``;
* ``__paths__``: the leaves' tree paths (:func:`jax.tree_util.keystr`: ``"['state'].count"``),
  shape (n,) str, so that :func:`load` refuses a target whose structure differs (renamed,
  reordered or swapped fields) instead of filling it by position;
* ``leaf{i}``: leaf ``i`` as an array, bit for bit;
* ``__key__{i}`` and ``__key__{i}_impl``: a typed PRNG key as its key data and the name of
  its implementation (``"threefry2x32"``, ``"rbg"``, ...), checked against the target.

Version 3 (written by ``save(..., compact=True)``) adds ``__encoding__``, shape (n,) str: how
``leaf{i}`` stores leaf ``i``, each restored bit for bit:

* ``"raw"``: as itself (the version 2 entry);
* ``"const <dtype> <shape>"``: every element has the same bits; the entry is that one element;
* ``"narrow <dtype> <shape>"``: integers stored in a narrower integer dtype that holds them all;
* ``"bits <dtype> <shape>"``: booleans packed eight to a byte (:func:`numpy.packbits`).

``<dtype>`` is the leaf's ``numpy.dtype.str`` (``"<i4"``, ``"|b1"``), ``<shape>`` its shape,
comma-separated (empty for a scalar), the three fields separated by single spaces.
Files of version 1 (no ``__version__``, no ``__paths__``) still load, by position, with
every other check.

Any version may hold ``__tag__``, a str scalar written by :func:`save_tagged` (a checkpoint
chunk's fingerprint) and returned by :func:`load_tagged`; :func:`load` ignores it.
"""

from __future__ import annotations

import math
import os
import uuid
import zipfile
import zlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpy.lib.npyio import NpzFile

from jaxstop._src import checks as _checks

__all__ = ["FORMAT", "VERSION", "load", "load_tagged", "save", "save_tagged", "stored_specs"]

FORMAT = "jaxstop.pytree"
VERSION = 3
#: The version a plain save (no compact encoding) writes: readable by every jaxstop that reads version 2.
_PLAIN_VERSION = 2

_KEY_PREFIX = "__key__"
#: Array kinds a leaf may have: bool, integers, floats, complex, strings.
_SAVABLE_KINDS = "biufcU"


def _is_key_dtype(dtype) -> bool:
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and _is_key_dtype(x.dtype)


def _paths(tree):
    """``(paths, leaves, treedef)`` of ``tree``; ``paths`` are :func:`jax.tree_util.keystr` strings."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    return [jax.tree_util.keystr(p) for p, _ in flat], [leaf for _, leaf in flat], treedef


def _same_bits(a: np.ndarray) -> bool:
    """Whether every element of ``a`` (contiguous, two or more elements) has the bits of the first."""
    flat = a.reshape(-1)
    words = flat.view(f"u{a.itemsize}") if a.itemsize in (1, 2, 4, 8) else flat.view(np.uint8).reshape(flat.size, -1)
    if not (words[:64] == words[0]).all():  # most arrays differ early: a cheap first look
        return False
    return bool((words == words[0]).all())


def _narrow_int(a: np.ndarray):
    """The narrowest integer dtype, smaller than ``a``'s, holding every element of ``a``; or ``None``."""
    lo, hi = int(a.min()), int(a.max())
    for cand in (np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32):
        info = np.iinfo(cand)
        if np.dtype(cand).itemsize < a.itemsize and info.min <= lo and hi <= info.max:
            return np.dtype(cand)
    return None


def _encode(arr: np.ndarray) -> tuple[np.ndarray, str]:
    """``(stored, code)``: leaf ``arr`` in the compact encoding of format version 3 (module docstring)."""
    if arr.size <= 1:
        return arr, "raw"
    arr = np.ascontiguousarray(arr)
    desc = f"{arr.dtype.str} {','.join(map(str, arr.shape))}"
    if _same_bits(arr):
        # a 0-d array, not a NumPy scalar: a scalar would take the native byte order
        return arr.reshape(-1)[:1].reshape(()).copy(), f"const {desc}"
    if arr.dtype.kind == "b":
        return np.packbits(arr.reshape(-1)), f"bits {desc}"
    if arr.dtype.kind in "iu":
        narrow = _narrow_int(arr)
        if narrow is not None:
            return arr.astype(narrow), f"narrow {desc}"
    return arr, "raw"


def save(tree, path: str | os.PathLike, *, compact: bool = False, sync: bool = False) -> None:
    """Saves ``tree`` (a pytree of arrays) to an ``.npz`` file, bit for bit.

    Stores every leaf, the leaves' tree paths (so :func:`load` can refuse a different
    structure) and, for typed PRNG keys, the key data and the implementation name. The
    file is written to a temporary name and renamed, so an interrupted save never leaves
    a truncated file at ``path``.

    With ``compact=True`` a leaf whose elements are all equal is stored as one element,
    integers in the narrowest integer dtype that holds them and booleans as bits; :func:`load`
    restores each bit for bit. Traces of simulation studies (small integers, many flags)
    take about 40% of the bytes. The file is format version 3 (a jaxstop that reads
    versions 1 and 2 only refuses it with a clear error); plain saves stay version 2.

    Args:
        tree: A pytree of arrays (NumPy or JAX, typed PRNG keys included).
        path: The file to write (replaced if it exists).
        compact: Store the leaves in the compact encoding described above.
        sync: Flush the file to disk (``os.fsync``) before it takes its name, so that
            ``path`` is complete or absent after a crash of the machine too, not only of
            the process.

    Raises:
        TypeError: A leaf that is not an array of numbers, booleans or strings (an
            object array, say), named by its tree path.

    Example:
        >>> import tempfile, os, jax, jax.numpy as jnp, jaxstop
        >>> tree = {"a": jnp.arange(3.0), "k": jax.random.key(1)}
        >>> path = os.path.join(tempfile.mkdtemp(), "state.npz")
        >>> jaxstop.save(tree, path)
        >>> back = jaxstop.load(path, like=tree)
        >>> bool(jnp.all(back["a"] == tree["a"]))
        True
        >>> steps = {"round": jnp.array([0, 0, 1, 2], jnp.int32), "done": jnp.zeros(4, bool)}
        >>> jaxstop.save(steps, path, compact=True)  # int8 and one flag on disk
        >>> jaxstop.load(path, like=steps)["round"].dtype
        dtype('int32')
    """
    _save(tree, path, compact, sync, None)


def save_tagged(tree, path: str | os.PathLike, tag: str, *, compact: bool = False, sync: bool = False) -> None:
    """:func:`save` with the string ``tag`` stored beside the tree (``__tag__``), read back by
    :func:`load_tagged` (:func:`load` and earlier versions of jaxstop ignore it)."""
    if not isinstance(tag, str):
        raise TypeError(f"tag must be a str, got {type(tag).__name__}")
    _save(tree, path, compact, sync, tag)


def _save(tree, path, compact: bool, sync: bool, tag: str | None) -> None:
    compact, sync = _checks.boolean(compact, "compact"), _checks.boolean(sync, "sync")
    paths, leaves, _ = _paths(tree)
    arrays = {
        "__format__": np.asarray(FORMAT),
        "__version__": np.asarray(VERSION if compact else _PLAIN_VERSION),
        "__num_leaves__": np.asarray(len(leaves)),
        "__paths__": np.asarray(paths, dtype=str),
    }
    codes = []
    for i, (where, leaf) in enumerate(zip(paths, leaves)):
        if _is_key(leaf):
            arrays[f"{_KEY_PREFIX}{i}"] = np.asarray(jax.random.key_data(leaf))
            arrays[f"{_KEY_PREFIX}{i}_impl"] = np.asarray(str(jax.random.key_impl(leaf)))
            codes.append("raw")
            continue
        arr = np.asarray(leaf)
        if arr.dtype.kind not in _SAVABLE_KINDS:
            # ml_dtypes' floats (bfloat16, float8_*) are NumPy's kind 'V': NumPy's .npz format
            # cannot name them, so they would not load back as themselves
            ml = arr.dtype.kind == "V" and arr.dtype.names is None and jnp.issubdtype(arr.dtype, jnp.number)
            what = ("a number type of the ml_dtypes package, which the .npz format cannot store: cast it "
                    "(e.g. to float32, exact for bfloat16 and float8) before saving" if ml else
                    "not an array of numbers, booleans or strings")
            raise TypeError(f"cannot save leaf {i} ({where or 'the root'}): dtype {arr.dtype} is {what}")
        if compact:
            arr, code = _encode(arr)
            codes.append(code)
        arrays[f"leaf{i}"] = arr
    if compact:
        arrays["__encoding__"] = np.asarray(codes, dtype=str)
    if tag is not None:
        arrays["__tag__"] = np.asarray(tag, dtype=str)
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "xb") as f:
            np.savez(f, **arrays)
            if sync:  # on disk before it appears under its name
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


class _Spec(NamedTuple):
    """What a leaf of ``like`` asks for."""

    shape: tuple
    dtype: object
    is_key: bool
    as_jax: bool  # return a jax.Array (like holds a jax.Array or a ShapeDtypeStruct)
    sharding: object


def _spec(ref) -> _Spec:
    if isinstance(ref, (jax.Array, jax.ShapeDtypeStruct)):
        return _Spec(tuple(ref.shape), ref.dtype, _is_key_dtype(ref.dtype), True,
                     getattr(ref, "sharding", None) if isinstance(ref, jax.ShapeDtypeStruct) else None)
    arr = np.asarray(ref)
    return _Spec(arr.shape, arr.dtype, False, False, None)


def _read(path) -> dict:
    """Every entry of the archive at ``path`` as a NumPy array; ``ValueError`` naming the
    file for anything that is not a readable ``.npz`` archive of plain arrays. Errors of
    the file system (missing file, permissions) propagate unchanged."""
    name = os.fspath(path)
    with open(path, "rb") as f:
        if not f.read(1):
            raise ValueError(f"{name} is not a jaxstop save file: it is empty")
        f.seek(0)
        try:
            obj = np.load(f, allow_pickle=False)
            if isinstance(obj, NpzFile):
                with obj:
                    return {k: obj[k] for k in obj.files}
        except ValueError as err:  # not NumPy's format, a damaged header, object arrays
            raise ValueError(f"{name} is not a readable jaxstop save file (not an .npz archive of plain "
                             "arrays, or corrupted)") from err
        except (EOFError, zipfile.BadZipFile, zlib.error, OSError, KeyError) as err:
            raise ValueError(f"{name} is not a readable jaxstop save file (truncated or corrupted): "
                             f"{type(err).__name__}: {err}") from err
    raise ValueError(f"{name} is not a jaxstop save file: it holds a single .npy array, not an .npz archive")


def _int_entry(data: dict, key: str, name: str) -> int:
    if key not in data:
        raise ValueError(f"{name} is not a jaxstop save file: it has no {key!r} entry")
    a = data[key]
    if a.shape != () or a.dtype.kind not in "iu":
        raise ValueError(f"{name} is not a jaxstop save file: {key!r} is not an integer scalar "
                         f"(got {a.dtype}{a.shape})")
    return int(a)


def _str_entry(data: dict, key: str, name: str) -> str:
    a = data.get(key)
    if a is None or a.shape != () or a.dtype.kind != "U":
        raise ValueError(f"{name} is malformed: {key!r} must be a string")
    return str(a)


def _version(data: dict, name: str) -> int:
    if "__format__" in data and _str_entry(data, "__format__", name) != FORMAT:
        raise ValueError(f"{name} is not a jaxstop save file: its format is {str(data['__format__'])!r}")
    if "__version__" not in data:
        return 1
    version = _int_entry(data, "__version__", name)
    if not 1 <= version <= VERSION:
        raise ValueError(f"{name} has format version {version}; this jaxstop reads versions 1 to {VERSION} "
                         "(a newer jaxstop wrote it)")
    return version


def _open(path) -> tuple[str, dict, int, int]:
    """``(name, entries, format version, number of leaves)`` of the save file at ``path``."""
    name = os.fspath(path)
    data = _read(path)
    version = _version(data, name)
    return name, data, version, _int_entry(data, "__num_leaves__", name)


def _file_paths(data: dict, n: int, name: str) -> list:
    """The ``n`` tree paths stored in a file of format version 2 or later."""
    file_paths = data.get("__paths__")
    if file_paths is None or file_paths.shape != (n,) or (n and file_paths.dtype.kind != "U"):
        raise ValueError(f"{name} is malformed: '__paths__' must hold {n} tree paths")
    return file_paths.tolist()


def _check_paths(data: dict, paths: list, name: str) -> None:
    for i, (a, b) in enumerate(zip(_file_paths(data, len(paths), name), paths)):
        if a != b:
            raise ValueError(f"{name} does not match the structure of like: leaf {i} is {a or 'the root'!r} in the "
                             f"file but {b or 'the root'!r} in like (renamed, reordered or swapped fields)")


def _first_difference(file_paths: list, paths: list) -> str:
    """The first tree path that one of the file and ``like`` has and the other has not, as a
    clause of an error message (a leaf or a field that is ``None`` on one side only)."""
    theirs, ours = set(file_paths), set(paths)
    for a, b in zip(file_paths + [None] * len(paths), paths + [None] * len(file_paths)):
        if a is not None and a not in ours:
            return f": {a or 'the root'!r} is in the file but not in like"
        if b is not None and b not in theirs:
            return f": {b or 'the root'!r} is in like but not in the file"
    return ""


def _codes(data: dict, n: int, name: str, version: int) -> list:
    """The leaves' encodings (format version 3), ``"raw"`` for each where the file has none."""
    codes = data.get("__encoding__") if version >= 3 else None
    if codes is None:
        return ["raw"] * n
    if codes.shape != (n,) or (n and codes.dtype.kind != "U"):
        raise ValueError(f"{name} is malformed: '__encoding__' must hold {n} leaf encodings")
    return codes.tolist()


def _decode(stored: np.ndarray, code: str, label: str, name: str) -> np.ndarray:
    """Leaf ``label`` from its entry ``stored`` and its encoding ``code`` (module docstring)."""
    if code == "raw":
        return stored

    def bad(why: str) -> ValueError:
        return ValueError(f"{name} is malformed: {label}: encoding {code!r}: {why}")

    parts = code.split(" ")
    if len(parts) != 3 or parts[0] not in ("const", "narrow", "bits"):
        raise bad("not one of raw, const, narrow, bits")
    try:
        dtype = np.dtype(parts[1])
        shape = tuple(int(d) for d in parts[2].split(",")) if parts[2] else ()
    except (TypeError, ValueError) as err:
        raise bad("unreadable dtype or shape") from err
    if dtype.kind not in _SAVABLE_KINDS or any(d < 0 for d in shape):
        raise bad(f"not a savable dtype and shape: {dtype}{shape}")
    size = math.prod(shape)
    if parts[0] == "const":
        if stored.shape != () or stored.dtype != dtype:
            raise bad(f"the entry is {stored.dtype}{stored.shape}, not one {dtype} element")
        return np.broadcast_to(stored, shape).copy()
    if parts[0] == "bits":
        if dtype.kind != "b" or stored.dtype != np.uint8 or stored.shape != (-(-size // 8),):
            raise bad(f"the entry is {stored.dtype}{stored.shape}, not {size} booleans packed in uint8")
        return np.unpackbits(stored, count=size).view(bool).reshape(shape)
    if (dtype.kind not in "iu" or stored.dtype.kind not in "iu" or stored.itemsize >= dtype.itemsize
            or stored.shape != shape):
        raise bad(f"the entry is {stored.dtype}{stored.shape}, not a narrower integer array of shape {shape}")
    info = np.iinfo(dtype)
    if size and (int(stored.min()) < info.min or int(stored.max()) > info.max):
        raise bad(f"values outside the range of {dtype}")
    return stored.astype(dtype)


def _label(i: int, where: str) -> str:
    return f"leaf {i} ({where})" if where else f"leaf {i}"


def _file_leaf(data: dict, i: int, label: str, name: str, code: str):
    """``(leaf, impl)``: leaf ``i`` as the file holds it, a typed PRNG key (``impl`` its
    implementation's name) or a decoded array (``impl`` ``None``)."""
    key_entry = f"{_KEY_PREFIX}{i}"
    if key_entry in data:
        impl = _str_entry(data, key_entry + "_impl", name)
        try:
            return jax.random.wrap_key_data(jnp.asarray(data[key_entry]), impl=impl), impl
        except (ValueError, TypeError) as err:
            raise ValueError(f"{name}: {label}: cannot restore a PRNG key of implementation {impl!r}: {err}") from err
    if f"leaf{i}" not in data:
        raise ValueError(f"{name} is malformed: {label} is missing from the file")
    return _decode(data[f"leaf{i}"], code, label, name), None


def _restore(data: dict, i: int, ref, where: str, name: str, code: str):
    spec = _spec(ref)
    label = _label(i, where)
    leaf, impl = _file_leaf(data, i, label, name, code)
    if impl is not None:
        if not spec.is_key:
            raise ValueError(f"{name}: {label} is a typed PRNG key in the file but {spec.dtype}{spec.shape} in like")
        if leaf.dtype != spec.dtype:
            raise ValueError(f"{name}: {label} is a PRNG key of implementation {impl!r} ({leaf.dtype}) in the file "
                             f"but {spec.dtype} in like")
        if leaf.shape != spec.shape:
            raise ValueError(f"{name}: {label}: key shape {leaf.shape} in the file, {spec.shape} in like")
    else:
        if spec.is_key:
            raise ValueError(f"{name}: {label} is a typed PRNG key ({spec.dtype}) in like but a "
                             f"{leaf.dtype}{leaf.shape} array in the file (raw key data: jax.random.wrap_key_data "
                             "makes it a typed key)")
        if leaf.shape != spec.shape or leaf.dtype != spec.dtype:
            raise ValueError(f"{name}: {label}: {leaf.dtype}{leaf.shape} in the file, {spec.dtype}{spec.shape} in like")
        if spec.as_jax:
            if jax.dtypes.canonicalize_dtype(leaf.dtype) != leaf.dtype:
                # jnp.asarray would narrow it (int64 -> int32, float64 -> float32) and change values
                raise ValueError(f"{name}: {label} is {leaf.dtype} in the file and in like, but JAX holds no "
                                 f"{leaf.dtype} arrays unless jax_enable_x64 is set (it would become "
                                 f"{jax.dtypes.canonicalize_dtype(leaf.dtype)}); enable it "
                                 "(jax.config.update('jax_enable_x64', True)) or pass a NumPy array for this "
                                 "leaf in like")
            leaf = jnp.asarray(leaf)
    if spec.sharding is not None:
        leaf = jax.device_put(leaf, spec.sharding)
    return leaf


def stored_specs(path: str | os.PathLike) -> dict:
    """Tree path -> ``jax.ShapeDtypeStruct`` of every leaf of a file written by :func:`save`
    (format version 2 or later), for building the ``like`` of :func:`load` from the file itself.

    Raises:
        ValueError: Naming the file, for a file :func:`load` would refuse as malformed.
    """
    name, data, version, n = _open(path)
    if version < 2:
        raise ValueError(f"{name} has format version 1, which stores no tree paths")
    out = {}
    for i, (where, code) in enumerate(zip(_file_paths(data, n, name), _codes(data, n, name, version))):
        leaf, _ = _file_leaf(data, i, _label(i, where), name, code)
        out[where] = jax.ShapeDtypeStruct(leaf.shape, leaf.dtype)
    return out


def load(path: str | os.PathLike, like):
    """Loads a tree saved by :func:`save` into the structure of ``like``.

    Args:
        path: The file written by :func:`save`.
        like: A tree with the same structure (tree paths), shapes and dtypes: concrete
            arrays (e.g. a fresh ``policy.init(key, params)``) or abstract ones
            (``jax.eval_shape(policy.init, key, params)``: ``jax.ShapeDtypeStruct``
            leaves, restored as arrays, on their sharding where one is given).

    Returns:
        The saved tree, with ``like``'s structure; a leaf is a ``jax.Array`` where
        ``like`` has a ``jax.Array`` or a ``jax.ShapeDtypeStruct``, a NumPy array otherwise.

    Raises:
        ValueError: Naming the file and what is wrong, for every file that is not a
            well-formed save file (empty, truncated, corrupted, a foreign ``.npz``, a
            newer format version) and for every mismatch with ``like``: the number of
            leaves (naming a tree path that one side lacks), a tree path (fields renamed,
            reordered or swapped), a shape, a dtype, a typed PRNG key against an array or
            a key of another implementation, and a 64-bit leaf to restore as a
            ``jax.Array`` while ``jax_enable_x64`` is off (JAX would narrow it to 32 bits).
        OSError: The file cannot be opened (e.g. ``FileNotFoundError``).

    Example:
        >>> import tempfile, os, jax, jax.numpy as jnp, jaxstop
        >>> path = os.path.join(tempfile.mkdtemp(), "state.npz")
        >>> jaxstop.save({"w": jnp.ones(2), "k": jax.random.key(0)}, path)
        >>> like = jax.eval_shape(lambda: {"w": jnp.zeros(2), "k": jax.random.key(1)})
        >>> jaxstop.load(path, like)["w"].tolist()
        [1.0, 1.0]
    """
    return _load(path, like)[0]


def load_tagged(path: str | os.PathLike, like) -> tuple[Any, str | None]:
    """:func:`load` and the tag :func:`save_tagged` stored with the tree (``None`` for a file
    without one), from one read of the file."""
    tree, name, data = _load(path, like)
    return tree, (_str_entry(data, "__tag__", name) if "__tag__" in data else None)


def _load(path, like):
    paths, leaves, treedef = _paths(like)
    name, data, version, n = _open(path)
    if n != len(leaves):
        raise ValueError(f"{name}: the file has {n} leaves but like has {len(leaves)}"
                         + (_first_difference(_file_paths(data, n, name), paths) if version >= 2 else ""))
    if version >= 2:
        _check_paths(data, paths, name)
    codes = _codes(data, n, name, version)
    out = [_restore(data, i, ref, where, name, code)
           for i, (where, ref, code) in enumerate(zip(paths, leaves, codes))]
    return jax.tree_util.tree_unflatten(treedef, out), name, data
