"""Reliability of jaxstop.save / jaxstop.load: malformed files, structure, PRNG keys, abstract targets.

Oracles: the saved tree itself (a round trip is exact, bit for bit), and files written by
the format's first version (reproduced below from its definition).
"""

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


def test_unsavable_leaf_is_a_type_error_naming_its_path(tmp_path):
    with pytest.raises(TypeError, match=r"\['bad'\].*object"):
        jaxstop.save({"bad": np.array([None], dtype=object)}, tmp_path / "x.npz")
    assert not os.listdir(tmp_path)  # nothing written, no temporary left
