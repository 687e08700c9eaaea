"""Reliability of jaxstop.save / jaxstop.load: malformed files, structure, PRNG keys, abstract targets.

Oracles: the saved tree itself (a round trip is exact, bit for bit), and files written by
the format's first version (reproduced below from its definition).
"""

import math
import os
import re
import zipfile
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxstop
from jaxstop._src import io


class Pair(NamedTuple):
    a: jax.Array
    b: jax.Array


class Swapped(NamedTuple):
    b: jax.Array
    a: jax.Array


def make_tree():
    return {
        "pair": Pair(jnp.arange(3.0), jnp.array([[1, 2], [3, 4]], jnp.int32)),
        "key": jax.random.key(7),
        "flag": jnp.asarray(True),
        "steps": [jnp.zeros((0,), jnp.float32), jnp.asarray(2.5, jnp.float64)],
    }


def assert_same_tree(x, y):
    lx, tx = jax.tree_util.tree_flatten(x)
    ly, ty = jax.tree_util.tree_flatten(y)
    assert tx == ty
    for a, b in zip(lx, ly):
        assert a.dtype == b.dtype and a.shape == b.shape
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            assert str(jax.random.key_impl(a)) == str(jax.random.key_impl(b))
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.fixture
def saved(tmp_path):
    tree = make_tree()
    path = tmp_path / "state.npz"
    jaxstop.save(tree, path)
    return tree, path


def load_error(path, like, *fragments):
    """Loads and expects a ValueError whose message names the file and holds every fragment."""
    with pytest.raises(ValueError) as info:
        jaxstop.load(path, like)
    msg = str(info.value)
    assert os.fspath(path) in msg, msg
    for f in fragments:
        assert re.search(f, msg), (f, msg)
    return msg


def test_round_trip_is_exact_and_keys_keep_their_implementation(tmp_path):
    tree = make_tree()
    tree["rbg"] = jax.random.key(5, impl="rbg")
    path = tmp_path / "t.npz"
    jaxstop.save(tree, path)
    back = jaxstop.load(path, like=tree)
    assert_same_tree(tree, back)
    # The restored keys draw exactly what the originals draw.
    for k in ("key", "rbg"):
        np.testing.assert_array_equal(jax.random.uniform(tree[k], (4,)), jax.random.uniform(back[k], (4,)))
    # No temporary file is left beside the saved one.
    assert sorted(os.listdir(tmp_path)) == ["t.npz"]


def test_abstract_target_from_eval_shape(saved):
    tree, path = saved
    like = jax.eval_shape(lambda: make_tree())
    assert all(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree_util.tree_leaves(like))
    back = jaxstop.load(path, like)
    assert_same_tree(tree, back)
    assert all(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(back))
    # Shapes and dtypes are checked against the abstract leaves.
    bad = jax.eval_shape(lambda: {**make_tree(), "flag": jnp.zeros((2,), bool)})
    load_error(path, bad, r"leaf \d+ \(\['flag'\]\)", r"bool\(\) in the file, bool\(2,\) in like")
    bad = jax.eval_shape(lambda: {**make_tree(), "key": jax.random.key(0, impl="rbg")})
    load_error(path, bad, "threefry2x32", "key<rbg> in like")


@pytest.mark.parametrize("compact", [False, True])
def test_64_bit_leaves_are_not_narrowed_into_jax_arrays_without_x64(tmp_path, compact):
    # values a 32-bit type cannot hold: 2**40 (int32 wraps it to 0), 1e-300 (float32: 0.0)
    tree = {"a": np.array([2**40, 1], np.int64), "f": np.array([1e-300, 2.0])}
    path = tmp_path / "wide.npz"
    jaxstop.save(tree, path, compact=compact)
    with jax.enable_x64(False):
        like = {"a": jax.ShapeDtypeStruct((2,), np.int64), "f": jax.ShapeDtypeStruct((2,), np.float64)}
        with pytest.raises(ValueError, match=r"leaf 0 \(\['a'\]\) is int64 in the file and in like.*"
                                             r"jax_enable_x64"):
            jaxstop.load(path, like)
        # a NumPy array in like restores the leaf exactly, whatever JAX's dtypes
        back = jaxstop.load(path, {"a": np.zeros(2, np.int64), "f": np.zeros(2)})
        for k in tree:
            assert back[k].dtype == tree[k].dtype and back[k].tobytes() == tree[k].tobytes()
    # with x64 on (the test session's setting) the abstract leaves restore as jax.Arrays, exactly
    back = jaxstop.load(path, {"a": jax.ShapeDtypeStruct((2,), np.int64), "f": jax.ShapeDtypeStruct((2,), np.float64)})
    assert np.asarray(back["a"]).tobytes() == tree["a"].tobytes()
    assert np.asarray(back["f"]).tobytes() == tree["f"].tobytes()


def test_a_float64_curve_table_loads_without_x64(tmp_path):
    """CurveTable.load of a float64 table where x64 is off: the values as float32, the rounding
    of the stored float64 values (as any float64 table given to jaxstop there); with x64 on,
    bit for bit. It once refused the file, advising a like= that CurveTable.load has not."""
    from jaxstop import sim

    values = np.random.default_rng(0).random((4, 5))
    mask = np.arange(5)[None, :] < np.array([5, 3, 4, 1])[:, None]
    path = tmp_path / "t64.npz"
    sim.CurveTable(values, mask).save(path)
    with jax.enable_x64(False):
        back = sim.CurveTable.load(path)
        assert back.values.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(back.mask), mask)
        np.testing.assert_array_equal(np.asarray(back.values)[mask], values.astype(np.float32)[mask])
    back = sim.CurveTable.load(path)
    assert back.values.dtype == np.float64
    assert np.asarray(back.values)[mask].tobytes() == values[mask].tobytes()


@pytest.mark.parametrize("damage", ["empty", "half", "tail", "crc", "header", "text", "single_npy", "object",
                                    "foreign", "missing_leaf", "newer", "bad_count", "bad_paths"])
def test_every_malformed_file_raises_one_clear_value_error(saved, tmp_path, damage):
    tree, path = saved
    raw = path.read_bytes()
    bad = tmp_path / f"{damage}.npz"
    if damage == "empty":
        bad.write_bytes(b"")
        fragments = ["empty"]
    elif damage == "half":
        bad.write_bytes(raw[: len(raw) // 2])
        fragments = ["truncated or corrupted"]
    elif damage == "tail":
        bad.write_bytes(raw[:-1])
        fragments = ["truncated or corrupted"]
    elif damage in ("crc", "header"):
        # Flip one byte inside the data of a leaf's member (crc: its last byte) or of the
        # NumPy header of the archive's first member (header).
        leaf = "leaf%d.npy" % io._paths(tree)[0].index("['pair'].a")
        with zipfile.ZipFile(path) as z:
            info = z.getinfo(leaf if damage == "crc" else "__format__.npy")
        # local file header: 30 bytes with the name and extra lengths at 26 and 28, then
        # the name, the extra field and the member's data
        h = info.header_offset
        start = h + 30 + int.from_bytes(raw[h + 26:h + 28], "little") + int.from_bytes(raw[h + 28:h + 30], "little")
        assert raw[start:start + 6] == b"\x93NUMPY"
        at = start + info.file_size - 1 if damage == "crc" else start + 12
        buf = bytearray(raw)
        buf[at] ^= 0x5A
        bad.write_bytes(bytes(buf))
        fragments = ["corrupted"]
    elif damage == "text":
        bad.write_bytes(b"a,b\n1,2\n")
        fragments = ["not a readable jaxstop save file"]
    elif damage == "single_npy":
        with open(bad, "wb") as f:
            np.save(f, np.ones(3))
        fragments = ["single .npy array"]
    elif damage == "object":
        with open(bad, "wb") as f:
            np.savez(f, __num_leaves__=np.asarray(1), leaf0=np.array([None, 1], dtype=object))
        fragments = ["not an .npz archive of plain arrays"]
    elif damage == "foreign":
        np.savez(bad, weights=np.ones(3))
        fragments = ["no '__num_leaves__' entry"]
    else:
        with np.load(path) as z:
            entries = {k: z[k] for k in z.files}
        if damage == "missing_leaf":
            i = io._paths(tree)[0].index("['pair'].a")
            del entries[f"leaf{i}"]
            fragments = [rf"leaf {i} \(\['pair'\]\.a\) is missing"]
        elif damage == "newer":
            entries["__version__"] = np.asarray(io.VERSION + 1)
            fragments = [f"format version {io.VERSION + 1}"]
        elif damage == "bad_count":
            entries["__num_leaves__"] = np.asarray([1.5])
            fragments = ["'__num_leaves__' is not an integer scalar"]
        else:
            entries["__paths__"] = entries["__paths__"][:-1]
            fragments = ["'__paths__' must hold"]
        with open(bad, "wb") as f:
            np.savez(f, **entries)
    load_error(bad, tree, *fragments)


def test_missing_file_is_an_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        jaxstop.load(tmp_path / "nothing.npz", make_tree())


def test_swapped_namedtuple_fields_are_refused(saved):
    tree, path = saved
    p = tree["pair"]
    # Same leaves in the same order, but the fields are named the other way round: by
    # position this would load `a` into `b`. The shapes differ here, so also check a
    # case where they agree (both fields of one shape).
    load_error(path, {**tree, "pair": Swapped(p.a, p.b)}, r"\['pair'\]\.a", r"\['pair'\]\.b", "swapped")
    path2 = path.parent / "same_shapes.npz"
    jaxstop.save(Pair(jnp.zeros(2), jnp.ones(2)), path2)
    load_error(path2, Swapped(jnp.zeros(2), jnp.ones(2)), r"leaf 0 is '\.a' in the file but '\.b' in like")
    # A renamed dict key is refused too; the leaf count keeps its old message.
    load_error(path, {("other" if k == "flag" else k): v for k, v in tree.items()}, "structure of like")
    load_error(path, {"pair": tree["pair"]}, "leaves")


@pytest.mark.parametrize("saved_key, like_key, fragment", [
    (lambda: jax.random.key(1, impl="rbg"), lambda: jax.random.key(1), "implementation 'rbg'"),
    (lambda: jax.random.key(1), lambda: jax.random.key(1, impl="unsafe_rbg"), "key<urbg> in like"),
    (lambda: jax.random.key(1), lambda: jax.random.PRNGKey(1), r"typed PRNG key in the file but uint32\(2,\)"),
    (lambda: jax.random.PRNGKey(1), lambda: jax.random.key(1), r"in like but a uint32\(2,\) array in the file"),
])
def test_prng_key_implementation_is_checked(tmp_path, saved_key, like_key, fragment):
    path = tmp_path / "k.npz"
    jaxstop.save({"k": saved_key()}, path)
    load_error(path, {"k": like_key()}, fragment)
    # ... and the matching target loads it exactly.
    assert_same_tree({"k": saved_key()}, jaxstop.load(path, {"k": saved_key()}))


def _save_version1(tree, path):
    """A file as the first format version wrote it: leaves by position, no paths or version."""
    arrays = {}
    leaves = jax.tree_util.tree_leaves(tree)
    for i, leaf in enumerate(leaves):
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            arrays[f"__key__{i}"] = np.asarray(jax.random.key_data(leaf))
            arrays[f"__key__{i}_impl"] = np.asarray(str(jax.random.key_impl(leaf)))
        else:
            arrays[f"leaf{i}"] = np.asarray(leaf)
    arrays["__num_leaves__"] = np.asarray(len(leaves))
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def test_version_one_files_still_load_with_their_checks(tmp_path):
    tree = make_tree()
    path = tmp_path / "v1.npz"
    _save_version1(tree, path)
    assert_same_tree(tree, jaxstop.load(path, tree))
    # The key implementation was stored in version 1 too: still checked.
    load_error(path, {**tree, "key": jax.random.key(0, impl="rbg")}, "key<rbg> in like")
    load_error(path, {**tree, "flag": jnp.asarray(1.0)}, r"bool\(\) in the file, float")
    with pytest.raises(ValueError, match="version 1, which stores no tree paths"):
        io.stored_specs(path)


def test_unsavable_leaf_is_a_type_error_naming_its_path(tmp_path):
    with pytest.raises(TypeError, match=r"\['bad'\].*object"):
        jaxstop.save({"bad": np.array([None], dtype=object)}, tmp_path / "x.npz")
    # ml_dtypes' floats: the .npz format cannot name them; the error says so and what to do
    for dtype in (jnp.bfloat16, jnp.float8_e4m3fn):
        with pytest.raises(TypeError, match=r"\['half'\].*ml_dtypes.*cast it"):
            jaxstop.save({"half": jnp.array([1.5], dtype)}, tmp_path / "x.npz")
    assert not os.listdir(tmp_path)  # nothing written, no temporary left


def assert_same_bits(x, y):
    """Equal trees, every leaf equal byte for byte (NaN payloads and the sign of zero included)."""
    lx, tx = jax.tree_util.tree_flatten(x)
    ly, ty = jax.tree_util.tree_flatten(y)
    assert tx == ty
    for a, b in zip(lx, ly):
        assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
        if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
            assert str(jax.random.key_impl(a)) == str(jax.random.key_impl(b))
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


def compact_tree():
    """Leaves for every branch of the compact encoding: constants (a NaN with a payload,
    negative zeros, strings, flags), integers that narrow (to each narrower kind) and that do
    not, packed flags of a length not a multiple of 8, floats that stay raw, scalars, empty
    arrays and a typed key."""
    payload_nan = np.array([0x7FC01234], np.uint32).view(np.float32)[0]
    return {
        "nan": np.full((3, 5), payload_nan, np.float32),
        "neg_zero": np.full(7, -0.0),
        "zeros_mixed": np.array([0.0, -0.0, 0.0]),  # equal as numbers, not as bits: stays raw
        "text": np.array(["ab", "ab", "ab"]),
        "text_mixed": np.array(["ab", "c"]),
        "ones": np.ones(9, bool),
        "flags": np.arange(13) % 3 == 0,
        "to_int8": np.arange(-5, 100, dtype=np.int32).reshape(3, 35),
        "to_uint8": np.array([0, 255, 7], np.int64),
        "to_int16": np.array([-300, 200], np.int32),
        "to_uint16": np.array([0, 65535], np.int32),
        "to_int32": np.array([-(2**31), 5], np.int64),
        "to_uint32": np.array([0, 2**32 - 1], np.int64),
        "wide": np.array([-(2**40), 2**40], np.int64),  # needs all 64 bits: stays raw
        "u8": np.array([1, 2], np.uint8),  # already the narrowest: stays raw
        "big_const": np.full(4, 7, ">i4"),  # big-endian: restored with its byte order
        "big_narrow": np.arange(-3, 3, dtype=">i8"),
        "floats": np.linspace(0.0, 1.0, 11, dtype=np.float32),
        "complex": np.array([1 + 2j, 3 - 1j]),
        "scalar": np.asarray(3, np.int32),
        "empty": np.zeros((0, 4), np.int32),
        "key": jax.random.key(11),
    }


def test_compact_round_trip_is_bit_exact_and_stores_each_leaf_narrowly(tmp_path):
    tree = compact_tree()
    path = tmp_path / "c.npz"
    jaxstop.save(tree, path, compact=True)
    back = jaxstop.load(path, like=tree)
    assert_same_bits(tree, back)
    # abstract leaves (strings and big-endian arrays have no JAX type: they stay NumPy)
    def numpy_only(v):
        return isinstance(v, np.ndarray) and (v.dtype.kind == "U" or not v.dtype.isnative)
    abstract = {k: v if numpy_only(v) else jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in tree.items()}
    assert_same_bits(tree, jax.device_get(jaxstop.load(path, like=abstract)))
    # how each leaf is stored, read from the archive itself
    paths = io._paths(tree)[0]
    with np.load(path) as z:
        assert int(z["__version__"]) == 3
        codes = dict(zip(paths, z["__encoding__"].tolist()))
        stored = {p: z[f"leaf{i}"] for i, p in enumerate(paths) if f"leaf{i}" in z.files}
    want_kind = {"nan": "const", "neg_zero": "const", "text": "const", "ones": "const", "flags": "bits",
                 "to_int8": "narrow", "to_uint8": "narrow", "to_int16": "narrow", "to_uint16": "narrow",
                 "to_int32": "narrow", "to_uint32": "narrow", "zeros_mixed": "raw", "text_mixed": "raw",
                 "wide": "raw", "u8": "raw", "big_const": "const", "big_narrow": "narrow", "floats": "raw",
                 "complex": "raw", "scalar": "raw", "empty": "raw",
                 "key": "raw"}
    for name, kind in want_kind.items():
        assert codes[f"['{name}']"].split(" ")[0] == kind, (name, codes[f"['{name}']"])
    want_dtype = {"to_int8": np.int8, "to_uint8": np.uint8, "to_int16": np.int16, "to_uint16": np.uint16,
                  "to_int32": np.int32, "to_uint32": np.uint32}
    for name, dtype in want_dtype.items():
        assert stored[f"['{name}']"].dtype == dtype, name
    assert stored["['nan']"].shape == () and stored["['flags']"].shape == (2,)
    # the plain save of the same tree is version 2 and loads to the same bits
    plain = tmp_path / "p.npz"
    jaxstop.save(tree, plain)
    with np.load(plain) as z:
        assert int(z["__version__"]) == 2 and "__encoding__" not in z.files
    assert_same_bits(tree, jaxstop.load(plain, like=tree))


def test_compact_trace_is_smaller_and_loads_into_its_abstract_structure(tmp_path):
    # a simulation trace: small integers, flags and constant columns
    from jaxstop import policies, sim
    curves = jnp.asarray(np.random.default_rng(0).uniform(0.2, 0.9, (9, 9)), jnp.float32)
    table = sim.CurveTable(curves)
    policy = policies.sh(9, 9, uq=True)
    traces = sim.run_many(policy, table, jax.random.key(0), 16, progress=False)
    plain, small = tmp_path / "plain.npz", tmp_path / "small.npz"
    jaxstop.save(traces, plain)
    jaxstop.save(traces, small, compact=True)
    # int32 columns of values below 128 take a quarter of the bytes, flags an eighth, constant
    # columns one element (the archive's own headers, about the same in both, left out)
    def data_bytes(path):
        with np.load(path) as z:
            return sum(z[k].nbytes for k in z.files if k.startswith("leaf"))
    assert data_bytes(plain) == sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(traces))
    assert data_bytes(small) < 0.5 * data_bytes(plain)  # 42% here; 41% for SH+ on the AlexNet table
    like = jax.eval_shape(lambda: jax.tree_util.tree_map(jnp.asarray, traces))
    assert_same_bits(traces, jax.device_get(jaxstop.load(small, like=like)))
    assert io.stored_specs(small) == io.stored_specs(plain)
    # a table saved compact (its mask as bits) loads as a table
    masked = sim.CurveTable(curves, mask=jnp.arange(9)[None, :] < jnp.arange(1, 10)[:, None])
    jaxstop.save(masked, tmp_path / "table.npz", compact=True)
    back = sim.CurveTable.load(tmp_path / "table.npz")
    assert_same_bits(jax.device_get(tuple(masked)), jax.device_get(tuple(back)))


@pytest.mark.parametrize("damage, fragment", [
    ("unknown", "not one of raw, const, narrow, bits"),
    ("dtype", "unreadable dtype or shape"),
    ("shape", "unreadable dtype or shape"),
    ("object", "not a savable dtype"),
    ("const_shape", r"not one int32 element"),
    ("bits_length", r"not 13 booleans packed"),
    ("narrow_wider", "not a narrower integer array"),
    ("narrow_range", "values outside the range of uint16"),
    ("count", "'__encoding__' must hold"),
])
def test_malformed_compact_entries_raise_one_clear_value_error(tmp_path, damage, fragment):
    tree = {"c": np.full(4, 7, np.int32), "f": np.arange(13) % 2 == 0, "n": np.array([1, 2], np.uint16)}
    path = tmp_path / "c.npz"
    jaxstop.save(tree, path, compact=True)
    with np.load(path) as z:
        entries = {k: z[k] for k in z.files}
    codes = entries["__encoding__"].tolist()  # leaves in path order: c, f, n
    if damage == "unknown":
        codes[0] = "zip <i4 4"
    elif damage == "dtype":
        codes[0] = "const <q9 4"
    elif damage == "shape":
        codes[0] = "const <i4 4,x"
    elif damage == "object":
        codes[0] = "const |O 4"
    elif damage == "const_shape":
        entries["leaf0"] = np.full(4, 7, np.int32)
    elif damage == "bits_length":
        entries["leaf1"] = entries["leaf1"][:1]
    elif damage == "narrow_wider":
        entries["leaf2"] = np.array([1, 2], np.uint32)
        codes[2] = "narrow <u2 2"
    elif damage == "narrow_range":
        entries["leaf2"] = np.array([-1, 2], np.int8)
        codes[2] = "narrow <u2 2"
    else:
        codes = codes[:2]
    entries["__encoding__"] = np.asarray(codes)
    bad = tmp_path / "bad.npz"
    with open(bad, "wb") as f:
        np.savez(f, **entries)
    load_error(bad, tree, fragment)
    with pytest.raises(ValueError, match=fragment):
        io.stored_specs(bad)


def test_compact_round_trip_of_random_trees_is_bit_exact(tmp_path):
    # random leaves of every savable kind and byte order, constant, small-valued or arbitrary
    # bits, empty, scalar, transposed: every one comes back byte for byte
    rng = np.random.default_rng(0)
    kinds = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16,
             np.float32, np.float64, np.complex64, np.complex128, bool, ">i4", ">f8", "<U3"]
    path = tmp_path / "t.npz"
    for _ in range(150):
        tree = {}
        for j in range(int(rng.integers(1, 6))):
            dt = np.dtype(kinds[rng.integers(len(kinds))])
            shape = tuple(int(s) for s in rng.integers(0, 5, rng.integers(0, 3)))
            size, form = math.prod(shape), int(rng.integers(3))  # form: 0 constant, 1 small values, 2 any bits
            if dt.kind == "U":
                leaf = np.array([["ab", "c", "xyz"][i] for i in rng.integers(0, 1 if form == 0 else 3, size)], dt)
            else:
                raw = rng.integers(0, 256, size * dt.itemsize, dtype=np.uint8)
                if form == 0 and size:
                    raw = np.tile(raw[:dt.itemsize], size)
                leaf = (raw % 2).astype(bool) if dt.kind == "b" else raw.view(dt)
                if form == 1 and dt.kind in "iu":
                    leaf = (leaf % 50).astype(dt)
            leaf = leaf.reshape(shape)
            tree[f"l{j}"] = leaf.T if leaf.ndim == 2 and rng.integers(2) else leaf
        jaxstop.save(tree, path, compact=True)
        assert_same_bits(tree, jaxstop.load(path, like=tree))


def test_sync_flushes_the_file_before_it_takes_its_name(tmp_path, monkeypatch):
    # os.fsync is called on the temporary file, before the rename, only when asked
    tree = make_tree()
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(io.os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(io.os, "replace", lambda a, b: (events.append("replace"), real_replace(a, b))[1])
    jaxstop.save(tree, tmp_path / "plain.npz")
    assert events == ["replace"]
    events.clear()
    jaxstop.save(tree, tmp_path / "synced.npz", sync=True, compact=True)
    assert events == ["fsync", "replace"]
    assert_same_bits(tree, jaxstop.load(tmp_path / "synced.npz", like=tree))
    assert sorted(os.listdir(tmp_path)) == ["plain.npz", "synced.npz"]


def test_a_like_with_more_or_fewer_leaves_is_refused_naming_the_leaf(saved):
    # only the counts were given ("the file has 5 leaves but like has 4"): a like built for a
    # trace with record="full" against a file of record="jobs" (infos None) left the user to
    # find which of dozens of leaves differ
    tree, path = saved
    like = jax.eval_shape(make_tree)
    load_error(path, {k: v for k, v in like.items() if k != "flag"}, "has 6 leaves but like has 5",
               r"\"\['flag'\]\" is in the file but not in like")
    load_error(path, {**like, "extra": jax.ShapeDtypeStruct((2,), jnp.float32)}, "like has 7",
               r"\"\['extra'\]\" is in like but not in the file")
    load_error(path, {**like, "pair": Pair(like["pair"].a, None)}, "like has 5",
               r"\"\['pair'\]\.b\" is in the file but not in like")
    load_error(path, {**like, "steps": like["steps"] + [like["flag"]]}, "like has 7",
               r"\"\['steps'\]\[2\]\" is in like but not in the file")


def test_save_flags_must_be_bools(tmp_path):
    # compact="no" once wrote the compact format (version 3), sync="no" flushed
    for name in ("compact", "sync"):
        with pytest.raises(TypeError, match=f"{name} must be a bool"):
            jaxstop.save({"a": jnp.ones(3)}, tmp_path / "a.npz", **{name: "no"})
    assert not (tmp_path / "a.npz").exists()
