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


# ---- gated_cond: a branch that stays a branch under vmap


def _branches(calls):
    """A rare, observable true branch (it counts its calls) and a cheap false branch; both
    close over a traced-in scale. Only + and * on float64: each member's value is the same
    correctly rounded arithmetic whether batched or not."""

    def true_fn(v, scale):
        jax.debug.callback(lambda: calls.append(1))
        return {"v": v * 3.0 + scale, "n": jnp.asarray(1, jnp.int32)}

    def false_fn(v, scale):
        return {"v": v - scale, "n": jnp.asarray(0, jnp.int32)}

    return true_fn, false_fn


@pytest.mark.parametrize("sparse", [False, True])
def test_gated_cond_equals_cond_per_member_unbatched_batched_and_nested(rng, sparse):
    calls = []
    true_fn, false_fn = _branches(calls)
    x = jnp.asarray(rng.normal(size=(3, 4)))
    scale = jnp.asarray(0.25)

    def gated(v):
        return _batching.gated_cond(v > 0.5, lambda v: true_fn(v, scale), lambda v: false_fn(v, scale), v,
                                    sparse=sparse)

    def plain(v):
        return jax.lax.cond(v > 0.5, lambda v: true_fn(v, scale), lambda v: false_fn(v, scale), v)

    xs = np.asarray(x)
    ref_v = np.where(xs > 0.5, xs * 3.0 + 0.25, xs - 0.25)
    for f in (jax.jit(jax.vmap(jax.vmap(gated))), jax.vmap(jax.vmap(plain))):
        out = f(x)
        np.testing.assert_array_equal(out["v"], ref_v)
        np.testing.assert_array_equal(out["n"], (xs > 0.5).astype(np.int32))
    one = jax.jit(gated)(x[0, 0])
    assert float(one["v"]) == float(ref_v[0, 0])
    # a predicate that is not batched, operands that are: one real branch
    out = jax.vmap(lambda v: _batching.gated_cond(True, lambda v: true_fn(v, scale), lambda v: false_fn(v, scale),
                                                  v, sparse=sparse))(x[0])
    np.testing.assert_array_equal(out["v"], xs[0] * 3.0 + 0.25)
    with pytest.raises(TypeError, match="different structures"):
        _batching.gated_cond(x[0, 0] > 0, lambda v: v, lambda v: (v, v), x[0, 0])


def test_gated_cond_runs_the_true_branch_only_when_some_member_takes_it():
    """In a vmapped loop, the true branch runs at the steps where some member's predicate
    holds (every 4th step here), where a plain cond on a batched predicate runs it at all."""

    def loop(cond, calls):
        true_fn, false_fn = _branches(calls)

        def body(i, v):
            take = (i % 4 == 0) & (v > -1e9)
            return cond(take, lambda v: true_fn(v, 0.0)["v"], lambda v: v + 1.0, v)

        return jax.jit(jax.vmap(lambda v: jax.lax.fori_loop(0, 12, body, v)))

    x = jnp.arange(5.0)
    gated_calls, plain_calls = [], []
    got = loop(_batching.gated_cond, gated_calls)(x)
    ref = loop(jax.lax.cond, plain_calls)(x)
    np.testing.assert_array_equal(got, ref)
    jax.effects_barrier()
    # a callback without arguments runs once per evaluation of the (vmapped) branch
    assert (len(gated_calls), len(plain_calls)) == (3, 12)
    none = []
    loop(lambda p, t, f, v: _batching.gated_cond(p & False, t, f, v), none)(x)
    jax.effects_barrier()
    assert none == []


def test_sparse_gated_cond_runs_the_true_branch_once_per_member_that_takes_it():
    """With ``sparse=True`` the true branch runs once for each (step, member) whose
    predicate holds, unbatched, the members' operands (a batched one and a closed-over
    batched one) sliced out: member k takes it at the steps i = k (mod 4), so 15 runs in
    12 steps of 5 members, where the vectorised gate runs it (over the whole batch) at
    all 12 steps. Values equal a plain cond per member's."""

    def loop(cond, calls):
        true_fn, _ = _branches(calls)

        def study(v, k):
            def body(i, v):
                take = i % 4 == k % 4
                return cond(take, lambda v: true_fn(v, 0.5 * k)["v"], lambda v: v + k, v)

            return jax.lax.fori_loop(0, 12, body, v)

        return jax.jit(jax.vmap(study))

    x, k = jnp.arange(5.0) / 8, jnp.arange(5.0)
    runs = {}
    for name, cond in (("sparse", lambda p, t, f, v: _batching.gated_cond(p, t, f, v, sparse=True)),
                       ("gated", _batching.gated_cond), ("plain", jax.lax.cond)):
        runs[name] = []
        out = loop(cond, runs[name])(x, k)
        jax.effects_barrier()
        if name == "sparse":
            got = out
        else:
            np.testing.assert_array_equal(got, out)
    assert {name: len(c) for name, c in runs.items()} == {"sparse": 15, "gated": 12, "plain": 12}
    # nested vmap: the inner rule loops over its members, the outer batches that loop
    two = jax.vmap(loop(lambda p, t, f, v: _batching.gated_cond(p, t, f, v, sparse=True), []), in_axes=(0, None))
    np.testing.assert_array_equal(two(jnp.stack([x, x + 1.0]), k)[1], loop(jax.lax.cond, [])(x + 1.0, k))


@pytest.mark.parametrize("platform, loops", [("cpu", 1), ("cuda", 0), ("tpu", 0)])
def test_sparse_gated_cond_loops_over_members_on_cpu_only(platform, loops):
    """``sparse=True`` lowers the loop over members for CPU only; for an accelerator the
    program is the vectorised gate's (no loop; the true branch's ``sine`` once). Exporting
    for another platform (``jax.export``) needs no such device here."""

    def program(sparse):
        fn = jax.jit(jax.vmap(lambda v: _batching.gated_cond(
            v > 1.0, lambda u: jnp.sin(u) * 10.0, lambda u: -u, v, sparse=sparse)))
        return jax.export.export(fn, platforms=(platform,))(jnp.arange(4.0)).mlir_module()

    text, plain = program(True), program(False)
    assert text.count("stablehlo.while") == loops
    assert plain.count("stablehlo.while") == 0
    assert text.count("stablehlo.sine") == plain.count("stablehlo.sine") == 1


def test_any_in_batch_keeps_a_loop_counter_unbatched():
    """A loop on ``any_in_batch(running)``: each member equals its own loop, the loop runs
    as long as the longest member, and its counter stays a scalar under vmap (so a write at
    the counter is an in-place update, not a scatter)."""

    def count_to(limit):
        def cond(c):
            i, v = c
            return _batching.any_in_batch(v < limit)

        def body(c):
            i, v = c
            return i + 1, jnp.where(v < limit, v + 1, v)

        return jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32)))

    limits = jnp.asarray([3, 7, 1, 5])
    i, v = jax.jit(jax.vmap(count_to))(limits)
    np.testing.assert_array_equal(v, limits)
    assert i.tolist() == [7, 7, 7, 7]  # one shared counter: the longest member's loop
    # nested vmap: over every member of both axes (the value comes back broadcast)
    nested = jax.vmap(jax.vmap(_batching.any_in_batch))
    assert bool(jnp.all(nested(jnp.asarray([[False, False], [False, True]]))))
    assert not bool(jnp.any(nested(jnp.zeros((2, 2), bool))))
    jaxpr = jax.make_jaxpr(jax.vmap(count_to))(limits)
    loop = next(e for e in jaxpr.eqns if e.primitive.name == "while")
    assert [tuple(v.aval.shape) for v in loop.outvars] == [(), (4,)]
    assert [int(x) for x in count_to(jnp.asarray(4))] == [4, 4]


def test_gated_cond_keeps_unbatched_operands_unbatched():
    """A branch may call a custom_vmap function of its own whose body holds constants (the
    confidence kernels do): JAX requires those constants unbatched, so gated_cond's rule
    must not broadcast the operands a vmap leaves unbatched. Also: a batched predicate
    with only unbatched operands, and with none."""
    table = np.linspace(0.0, 1.0, 5).astype(np.float32)  # a constant of the inner body

    @jax.custom_batching.custom_vmap
    def scaled(v):
        return v * jnp.asarray(table)

    @scaled.def_vmap
    def _rule(axis_size, in_batched, v):
        return v[:, None] * jnp.asarray(table)[None, :], in_batched[0]

    def f(p, v):
        return _batching.gated_cond(p > 0.5, lambda v: scaled(v), lambda v: -scaled(v), v)

    p = jnp.array([0.2, 0.9, 0.7])
    v = jnp.array([1.0, 2.0, 3.0])
    want = np.where(np.asarray(p)[:, None] > 0.5, 1.0, -1.0) * np.asarray(v)[:, None] * table
    np.testing.assert_array_equal(np.asarray(jax.vmap(f)(p, v)), want)
    # v unbatched: its branch's operands stay unbatched, the outputs are per member
    sign = np.where(np.asarray(p)[:, None] > 0.5, 1.0, -1.0)
    np.testing.assert_array_equal(np.asarray(jax.vmap(f, in_axes=(0, None))(p, 2.0)), sign * 2.0 * table)
    g = lambda p: _batching.gated_cond(p > 0.5, lambda: jnp.float32(1.0), lambda: jnp.float32(0.0))  # noqa: E731
    np.testing.assert_array_equal(np.asarray(jax.vmap(g)(p)), [0.0, 1.0, 1.0])


@pytest.mark.parametrize("n, block", [(7, 3), (9, 3), (10, 4), (5, 5), (5, None), (1, 2)])
def test_map_in_blocks_equals_vmap_on_integer_results(n, block):
    """Blocks of equal size, the last padded: every row's result is the row's own, in order
    (integer arithmetic and a key per row, so any program gives the same values)."""
    keys = jax.random.split(jax.random.key(3), n)

    def fn(k):
        bits = jax.random.bits(k, (4,))
        return {"sum": jnp.sum(bits % 97), "bits": bits}

    out = jax.jit(lambda ks: _batching.map_in_blocks(fn, ks, block))(keys)
    ref = jax.vmap(fn)(keys)
    assert out["bits"].shape == (n, 4)
    np.testing.assert_array_equal(out["bits"], ref["bits"])
    np.testing.assert_array_equal(out["sum"], ref["sum"])
    # raw uint32 keys and a pytree of rows work alike
    raw = jax.random.key_data(keys)
    two = _batching.map_in_blocks(lambda r: (r[0] + r[1], r * 2), raw, block)
    np.testing.assert_array_equal(two[0], raw[:, 0] + raw[:, 1])
    np.testing.assert_array_equal(two[1], raw * 2)


def test_run_batch_in_blocks_equals_one_vmapped_batch(monkeypatch):
    """sim.run_batch on CPU runs its studies in blocks of CPU_BLOCK (here 3, so that 10
    studies make 4 blocks of 3, the last padded): the traces equal one vmapped batch of
    sim.run exactly. Plain SH only compares and copies table entries and counts epochs, so
    the two programs cannot round differently."""
    from jaxstop import policies, sim

    monkeypatch.setattr(_batching, "CPU_BLOCK", 3)
    rs = np.random.default_rng(4)
    lengths = rs.integers(2, 13, size=16)
    mask = np.arange(12)[None, :] < lengths[:, None]
    values = np.where(mask, np.round(rs.uniform(0, 1, (16, 1)) * np.linspace(1, 0.4, 12) * 8) / 8, 0.0)
    table = sim.CurveTable(jnp.asarray(values), jnp.asarray(mask))
    policy = policies.sh(16, 12, eta=2)
    keys = jax.random.split(jax.random.key(5), 10)
    out = sim.run_batch(policy, table, keys)
    ref = jax.vmap(lambda k: sim.run(policy, table, k))(keys)
    for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(out), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=jax.tree_util.keystr(path))
    assert len(set(np.asarray(out.incumbent).tolist())) > 1  # the keys draw different studies
