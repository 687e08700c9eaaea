"""Grouped batching of per-study kernels (jaxstop._src.batching) against plain vmap and loops."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxstop._src import batching as _batching


def kernel(x, n):
    """A per-study loop whose trip count depends on the data, with array constants inside."""
    weights = jnp.asarray(np.linspace(0.5, 1.5, x.shape[0]))

    def body(c):
        v, i = c
        return 0.5 * (v + x @ weights / v), i + 1

    v, i = jax.lax.while_loop(lambda c: (c[1] < n) & (jnp.abs(c[0] * c[0] - x @ weights) > 1e-12),
                              body, (jnp.asarray(1.0, x.dtype), jnp.asarray(0)))
    return {"root": v, "steps": i, "scaled": v * jnp.arange(3.0)}


@pytest.mark.parametrize("size", [1, 2, 3, 8])
def test_grouped_vmap_equals_loop_and_plain_vmap(rng, size):
    xs = rng.uniform(0.1, 50.0, size=(7, 4))
    ns = jnp.asarray([3, 40, 40, 1, 40, 5, 40])
    grouped = _batching.grouped_on_cpu(kernel, size)
    out = jax.jit(jax.vmap(grouped))(jnp.asarray(xs), ns)
    plain = jax.vmap(kernel)(jnp.asarray(xs), ns)
    w = np.linspace(0.5, 1.5, 4)
    # The grouped, the plain vmapped and the single calls are different programs: the dot
    # x . w (4 positive terms) may be summed in another order, so s differs by up to 4 eps
    # relative in each; sqrt halves that, and Newton's last step adds ~2 eps of its own
    # rounding. Two programs: 2 (4 / 2 + 2) eps; with a factor 2 of slack:
    eps = np.finfo(np.float64).eps
    rtol = 4 * (4 / 2 + 2) * eps
    # The step counts are decisions (|v^2 - s| > 1e-12): they agree across programs only if
    # no iterate lies within rounding of the threshold. Rounding moves |v^2 - s| by a few
    # ulps of s; the iterates (in NumPy) stay more than 16 ulps of s away from 1e-12.
    for x, n in zip(xs, np.asarray(ns)):
        s, v = x @ w, 1.0
        for _ in range(n):
            r = abs(v * v - s)
            assert abs(r - 1e-12) > 16 * np.spacing(s), "an iterate sits on the stopping threshold"
            if r <= 1e-12:
                break
            v = 0.5 * (v + s / v)
    for i in range(7):
        one = kernel(jnp.asarray(xs[i]), ns[i])
        assert int(out["steps"][i]) == int(one["steps"])
        np.testing.assert_allclose(out["root"][i], one["root"], rtol=rtol)
    np.testing.assert_allclose(out["scaled"], plain["scaled"], rtol=rtol)
    np.testing.assert_array_equal(out["steps"], plain["steps"])
    # the converged ones are square roots (Newton on v^2 = x . w)
    done = np.asarray(out["steps"]) < np.asarray(ns)
    np.testing.assert_allclose(np.asarray(out["root"])[done], np.sqrt(xs @ w)[done], rtol=1e-12)
    # one argument shared by the whole batch (not batched)
    shared = jax.vmap(grouped, in_axes=(0, None))(jnp.asarray(xs), 40)
    np.testing.assert_allclose(shared["root"], np.sqrt(xs @ w), rtol=1e-12)


def test_grouped_under_cond_with_batched_predicate_and_nested_vmap(rng):
    """A cond on a batched predicate batches every operand, constants included; and a
    vmap of a vmap composes (studies x restarts)."""
    xs = jnp.asarray(rng.uniform(0.1, 50.0, size=(5, 4)))
    grouped = _batching.grouped_on_cpu(kernel, 2)

    def maybe(p, x):
        return jax.lax.cond(p, lambda: grouped(x, 50)["root"], lambda: jnp.asarray(-1.0, x.dtype))

    pred = jnp.asarray([True, False, True, True, False])
    got = jax.jit(jax.vmap(maybe))(pred, xs)
    ref = np.where(np.asarray(pred), np.sqrt(np.asarray(xs) @ np.linspace(0.5, 1.5, 4)), -1.0)
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    nested = jax.vmap(jax.vmap(lambda x: grouped(x, 50)["root"]))(jnp.stack([xs, 2 * xs]))
    np.testing.assert_allclose(nested[1], np.sqrt(2 * np.asarray(xs) @ np.linspace(0.5, 1.5, 4)), rtol=1e-12)


def test_grouped_maps_on_cpu():
    """On CPU the batched program maps the groups in a loop (no lockstep over the batch)."""
    grouped = _batching.grouped_on_cpu(kernel, 2)
    x = jnp.ones((6, 4))
    hlo = jax.jit(jax.vmap(lambda x: grouped(x, 9)["root"])).lower(x).as_text()
    if jax.default_backend() == "cpu":
        # lax.map's scan over 3 groups of 2, each group a while loop of its own
        assert hlo.count("stablehlo.while") >= 2
    assert _batching.group_size(10) == 40 and _batching.group_size(100) == 2 and _batching.group_size(1) == 64
