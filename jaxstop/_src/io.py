"""Exact save / load of any pytree of arrays (policy states, traces, params)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["save", "load"]

_KEY_PREFIX = "__key__"


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def save(tree, path: str | os.PathLike) -> None:
    """Saves the leaves of ``tree`` to an ``.npz`` file, bit for bit.

    Typed PRNG keys are stored as their key data plus the implementation name.
    The tree structure itself is not stored: :func:`load` takes a ``like`` tree.

    Example:
        >>> import tempfile, os, jax, jax.numpy as jnp, jaxstop
        >>> tree = {"a": jnp.arange(3.0), "k": jax.random.key(1)}
        >>> path = os.path.join(tempfile.mkdtemp(), "state.npz")
        >>> jaxstop.save(tree, path)
        >>> back = jaxstop.load(path, like=tree)
        >>> bool(jnp.all(back["a"] == tree["a"]))
        True
    """
    leaves = jax.tree_util.tree_leaves(tree)
    arrays = {}
    for i, leaf in enumerate(leaves):
        if _is_key(leaf):
            impl = str(jax.random.key_impl(leaf))
            arrays[f"{_KEY_PREFIX}{i}"] = np.asarray(jax.random.key_data(leaf))
            arrays[f"{_KEY_PREFIX}{i}_impl"] = np.asarray(impl)
        else:
            arrays[f"leaf{i}"] = np.asarray(leaf)
    arrays["__num_leaves__"] = np.asarray(len(leaves))
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def load(path: str | os.PathLike, like):
    """Loads a tree saved by :func:`save` into the structure of ``like``.

    Args:
        path: The file written by :func:`save`.
        like: A tree with the same structure, shapes and dtypes (e.g. a fresh
            ``policy.init(key, params)``).

    Raises:
        ValueError: If the number of leaves, a shape or a dtype differs.
    """
    leaves, treedef = jax.tree_util.tree_flatten(like)
    with np.load(path, allow_pickle=False) as data:
        n = int(data["__num_leaves__"])
        if n != len(leaves):
            raise ValueError(f"file has {n} leaves but like has {len(leaves)}")
        out = []
        for i, ref in enumerate(leaves):
            if f"{_KEY_PREFIX}{i}" in data:
                if not _is_key(ref):
                    raise ValueError(f"leaf {i} is a PRNG key in the file but not in like")
                kd = jnp.asarray(data[f"{_KEY_PREFIX}{i}"])
                impl = str(data[f"{_KEY_PREFIX}{i}_impl"])
                leaf = jax.random.wrap_key_data(kd, impl=impl)
                if leaf.shape != ref.shape:
                    raise ValueError(f"leaf {i}: shape {leaf.shape} in the file, {ref.shape} in like")
            else:
                arr = data[f"leaf{i}"]
                ref_arr = np.asarray(ref) if not _is_key(ref) else None
                if ref_arr is None:
                    raise ValueError(f"leaf {i} is a PRNG key in like but not in the file")
                if arr.shape != ref_arr.shape or arr.dtype != ref_arr.dtype:
                    raise ValueError(
                        f"leaf {i}: {arr.dtype}{arr.shape} in the file, {ref_arr.dtype}{ref_arr.shape} in like"
                    )
                leaf = jnp.asarray(arr) if isinstance(ref, jax.Array) else arr
            out.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, out)
