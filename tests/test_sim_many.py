"""sim.run_many: chunked studies with keys independent of the chunking, resumable checkpoints."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxstop
from jaxstop import policies, sim

NUM, T = 12, 9


def table(seed=0):
    rng = np.random.default_rng(seed)
    v = rng.uniform(0.1, 0.6, (NUM, 1)) + 0.4 * np.exp(-0.3 * np.arange(1, T + 1))[None, :]
    return sim.CurveTable(jnp.asarray(v + rng.normal(0, 0.01, v.shape), jnp.float32))


def same(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
                                      for x, y in zip(la, lb))


def test_chunks_are_the_runs_of_their_keys():
    # Run i uses fold_in(key, i) whatever the chunking; random search (table lookups and
    # integer bookkeeping, no float arithmetic) gives the same numbers in every program.
    policy = policies.random_search(NUM, max_budget=T)
    tab, key = table(), jax.random.key(3)
    out = sim.run_many(policy, tab, key, 10, chunk_size=4, progress=False)
    assert out.incumbent.shape == (10,) and isinstance(out.incumbent, np.ndarray)
    keys = sim.run_keys(key, 0, 10)
    ref = jax.vmap(lambda k: sim.run(policy, tab, k))(keys)
    assert same(out, ref)
    assert same(out, sim.run_many(policy, tab, key, 10, chunk_size=2, progress=False))
    # the runs differ (the keys are independent), as they must for a study
    assert len({tuple(r) for r in np.asarray(out.jobs.config).tolist()}) > 1


def test_run_keys_are_fold_in_of_each_index_and_refuse_indices_outside_uint32():
    # oracle: jax.random.fold_in(key, i) called for each index on its own
    for key in (jax.random.key(3), jax.random.PRNGKey(5), jax.random.key(1, impl="rbg")):
        data = (lambda k: jax.random.key_data(k) if jnp.issubdtype(k.dtype, jax.dtypes.prng_key) else k)
        want = np.stack([np.asarray(data(jax.random.fold_in(key, i))) for i in range(7, 12)])
        np.testing.assert_array_equal(np.asarray(data(sim.run_keys(key, 7, 5))), want)
    key = jax.random.key(0)
    last = sim.run_keys(key, 2**32 - 2, 2)  # the last two indices a uint32 holds
    np.testing.assert_array_equal(jax.random.key_data(last[1]),
                                  jax.random.key_data(jax.random.fold_in(key, np.uint32(2**32 - 1))))
    with pytest.raises(ValueError, match="start must be >= 0"):
        sim.run_keys(key, -1, 3)
    with pytest.raises(ValueError, match=r"indices in \[0, 2\*\*32\)"):
        sim.run_keys(key, 2**32 - 2, 3)
    with pytest.raises(TypeError, match="start must be an int"):
        sim.run_keys(key, 1.5, 2)
    # the key is checked as run / run_many check it, naming the argument
    with pytest.raises(TypeError, match="key must be a PRNG key: pass jax.random.key"):
        sim.run_keys(0, 0, 2)
    with pytest.raises(TypeError, match="key must be one PRNG key"):
        sim.run_keys(jax.random.split(key, 2), 0, 2)


def test_checkpoint_resumes_bit_identically_and_refuses_other_arguments(tmp_path, capsys):
    policy = policies.sh(NUM, T, uq=True)
    tab, key = table(1), jax.random.key(0)
    full = sim.run_many(policy, tab, key, 10, chunk_size=4, progress=False)
    ckpt = tmp_path / "study"
    first = sim.run_many(policy, tab, key, 10, chunk_size=4, checkpoint=ckpt, progress=True)
    assert same(first, full)
    assert "run_many: 10/10 runs" in capsys.readouterr().err
    names = sorted(os.listdir(ckpt))
    assert names == ["chunk_000000.npz", "chunk_000001.npz", "chunk_000002.npz", "manifest.json"]
    # tell_batch_last is another form of tell_batch, not another study: a checkpoint written
    # by a policy without it (as every policy was before the field) resumes with it
    without = policy._replace(tell_batch_last=None)
    assert same(sim.run_many(without, tab, key, 10, chunk_size=4, checkpoint=ckpt, progress=False), full)
    # interrupted after the first chunk, with a half-written file left behind
    os.remove(ckpt / "chunk_000001.npz")
    os.remove(ckpt / "chunk_000002.npz")
    (ckpt / "chunk_000001.npz.4242.0123abcd.tmp").write_bytes(b"partial")  # a save's temporary name
    resumed = sim.run_many(policy, tab, key, 10, chunk_size=4, checkpoint=ckpt, progress=False)
    assert same(resumed, full)
    # chunk 1's file put in place of chunk 0's was loaded as runs 0-3; its fingerprint names
    # chunk 1, so it is refused, naming the file (that stored chunks are loaded, not
    # recomputed, the modification times below show)
    (ckpt / "chunk_000000.npz").write_bytes((ckpt / "chunk_000001.npz").read_bytes())
    with pytest.raises(ValueError, match=r"chunk_000000\.npz' does not belong .* runs of chunk 1, not of chunk 0"):
        sim.run_many(policy, tab, key, 10, chunk_size=4, checkpoint=ckpt, progress=False)
    # chunk files are compact (format version 3); plain ones (version 2, as written before
    # the compact encoding, and without a fingerprint) still resume, loaded and not rewritten
    os.remove(ckpt / "chunk_000000.npz")
    assert same(sim.run_many(policy, tab, key, 10, chunk_size=4, checkpoint=ckpt, progress=False), full)
    like = jax.tree_util.tree_map(lambda a: a[:4], full)
    for c in range(3):
        path = ckpt / f"chunk_{c:06d}.npz"
        with np.load(path) as z:
            assert int(z["__version__"]) == 3 and "__encoding__" in z.files
        chunk = jaxstop.load(path, like=like)
        jaxstop.save(chunk, path)
    stamps = [os.stat(ckpt / f"chunk_{c:06d}.npz").st_mtime_ns for c in range(3)]
    assert same(sim.run_many(policy, tab, key, 10, chunk_size=4, checkpoint=ckpt, progress=False), full)
    assert [os.stat(ckpt / f"chunk_{c:06d}.npz").st_mtime_ns for c in range(3)] == stamps
    for other in [dict(key=jax.random.key(1)), dict(num_runs=11), dict(chunk_size=2),
                  dict(policy=policies.sh(NUM, T)), dict(tab=table(2))]:
        args = dict(policy=policy, tab=tab, key=key, num_runs=10, chunk_size=4)
        args.update(other)
        with pytest.raises(ValueError, match="other arguments"):
            sim.run_many(args["policy"], args["tab"], args["key"], args["num_runs"],
                         chunk_size=args["chunk_size"], checkpoint=ckpt, progress=False)


def test_a_chunk_file_of_another_study_is_refused_naming_it(tmp_path):
    # Two studies (seeds 0 and 1) of the same shapes: a chunk file of one copied into the
    # other's directory (or written there by a second study started at the same time on
    # the same directory, whose manifest the first one's replaced) was loaded as that
    # study's runs, silently. Each chunk file holds the study's fingerprint and its index.
    policy, tab = policies.random_search(NUM, max_budget=T), table(1)
    a, b = tmp_path / "a", tmp_path / "b"
    want_a = sim.run_many(policy, tab, jax.random.key(0), 8, chunk_size=4, checkpoint=a, progress=False)
    want_b = sim.run_many(policy, tab, jax.random.key(1), 8, chunk_size=4, checkpoint=b, progress=False)
    assert not same(want_a, want_b)
    (a / "chunk_000001.npz").write_bytes((b / "chunk_000001.npz").read_bytes())
    with pytest.raises(ValueError, match=r"'.*a/chunk_000001\.npz' does not belong to this study: it was "
                                         r"written by run_many with other arguments.*remove it"):
        sim.run_many(policy, tab, jax.random.key(0), 8, chunk_size=4, checkpoint=a, progress=False)
    # removed as the message says, the chunk is computed again: the study is the uninterrupted one
    os.remove(a / "chunk_000001.npz")
    assert same(sim.run_many(policy, tab, jax.random.key(0), 8, chunk_size=4, checkpoint=a, progress=False),
                want_a)
    # the fingerprint is an entry of the file beside the tree: jaxstop.load reads the chunk as before
    like = jax.tree_util.tree_map(lambda x: x[:4], want_a)
    with np.load(a / "chunk_000001.npz") as z:
        assert str(z["__tag__"]).startswith("run_many ") and str(z["__tag__"]).endswith(" chunk 1")
    assert same(jaxstop.load(a / "chunk_000001.npz", like=like), jax.tree_util.tree_map(lambda x: x[4:], want_a))


def test_chunk_files_without_a_manifest_are_refused(tmp_path):
    """Chunk files left in a directory whose manifest is gone (removed by hand after the
    'other arguments' error) were loaded as the runs of whatever study came next."""
    policy = policies.sh(NUM, T)
    tab = table(1)
    ckpt = tmp_path / "study"
    sim.run_many(policy, tab, jax.random.key(0), 8, chunk_size=4, checkpoint=ckpt, progress=False)
    os.remove(ckpt / "manifest.json")
    with pytest.raises(ValueError, match="chunk files .* but no manifest.json"):
        sim.run_many(policy, tab, jax.random.key(1), 8, chunk_size=4, checkpoint=ckpt, progress=False)
    # only the chunk files count: another file in the directory does not stop a new study
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("study of seed 1")
    want = sim.run_many(policy, tab, jax.random.key(1), 8, chunk_size=4, progress=False)
    got = sim.run_many(policy, tab, jax.random.key(1), 8, chunk_size=4, checkpoint=other, progress=False)
    assert same(got, want)


def test_processes_that_start_one_checkpoint_together_all_write_its_manifest(tmp_path):
    """Under jax.distributed every process writes the manifest of a new shared checkpoint at
    once; they shared one temporary name, so all but one failed (FileNotFoundError on the
    rename) or read a manifest another was still writing. Threads stand in for processes."""
    import threading

    from jaxstop.sim import _many

    failures = []
    for trial in range(40):
        ckpt = tmp_path / f"study{trial}"
        barrier = threading.Barrier(4)

        def start():
            barrier.wait()
            try:
                _many._manifest(ckpt, "digest", 10, 4)
            except Exception as err:  # noqa: BLE001 - every failure is collected
                failures.append(err)

        threads = [threading.Thread(target=start) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert os.listdir(ckpt) == ["manifest.json"]   # no temporary file left behind
    assert failures == []


def fixed_config_policy(config):
    """Random search whose every job trains ``config``: a user's policy built by a factory,
    its steps closures that differ only in the value they capture."""
    base = policies.random_search(NUM, max_budget=T)

    def ask(key, state, params):
        job, state = base.ask(key, state, params)
        return job._replace(config=jnp.asarray(config, jnp.int32)), state

    return policies.Policy(base.init, ask, None, base.tell, base.default_params)


def test_checkpoints_tell_apart_closures_of_one_function(tmp_path):
    tab, key = table(3), jax.random.key(0)
    ckpt = tmp_path / "study"
    one = sim.run_many(fixed_config_policy(1), tab, key, 4, chunk_size=2, checkpoint=ckpt, progress=False, max_jobs=NUM)
    assert np.asarray(one.incumbent).tolist() == [1] * 4
    # another captured value is another study (it was once resumed from this checkpoint)
    with pytest.raises(ValueError, match="other arguments"):
        sim.run_many(fixed_config_policy(2), tab, key, 4, chunk_size=2, checkpoint=ckpt, progress=False, max_jobs=NUM)
    # the same factory and value resume, in this process and in another one (the
    # fingerprint does not depend on addresses or on string hashing)
    again = sim.run_many(fixed_config_policy(1), tab, key, 4, chunk_size=2, checkpoint=ckpt, progress=False, max_jobs=NUM)
    assert same(again, one)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import jax
        jax.config.update("jax_enable_x64", True)
        from jaxstop import sim
        from test_sim_many import fixed_config_policy, table
        print(sim._many.fingerprint(fixed_config_policy(1), table(3)),
              sim._many.fingerprint(fixed_config_policy(2), table(3)))
    """)
    prints = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, JAX_PLATFORMS="cpu")
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        prints.append(out.stdout.split()[-2:])
    assert prints[0] == prints[1] and prints[0][0] != prints[0][1]
    # a checkpoint path that is a file is refused before any run
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ValueError, match="exists and is not a directory"):
        sim.run_many(fixed_config_policy(1), tab, key, 4, checkpoint=tmp_path / "a_file", progress=False, max_jobs=NUM)


def test_bad_arguments_raise():
    policy = policies.random_search(NUM, max_budget=T)
    with pytest.raises(ValueError, match="num_runs"):
        sim.run_many(policy, table(), jax.random.key(0), 0, progress=False)
    with pytest.raises(TypeError, match="key"):
        sim.run_many(policy, table(), 0, 4, progress=False)
    with pytest.raises(ValueError, match="chunk_size"):
        sim.run_many(policy, table(), jax.random.key(0), 4, chunk_size=0, progress=False)


class _Interrupt(Exception):
    pass


def test_an_exception_after_k_chunks_resumes_bit_identically(tmp_path, monkeypatch):
    """A run that raises while computing chunk k (an exception injected into the chunk
    program) leaves chunks 0 .. k-1 written (the last one's write, in flight in the
    background, completes), and a new call with the same arguments loads them, computes
    the rest and equals the uninterrupted run bit for bit. Plain SH on a float32 table
    compares losses and adds integers: the same numbers in every program."""
    from jaxstop.sim import _many

    policy = policies.sh(NUM, T)
    tab, key = table(5), jax.random.key(7)
    full = sim.run_many(policy, tab, key, 10, chunk_size=2, progress=False)
    real = _many.batch_program
    for k in (1, 3):
        ckpt = tmp_path / f"study_{k}"
        calls = []

        def failing(policy, table, keys, *args, **kwargs):
            if not isinstance(keys, jax.core.Tracer):  # a chunk, not the shapes' trace
                calls.append(1)
            if len(calls) > k:
                raise _Interrupt(f"chunk {k}")
            return real(policy, table, keys, *args, **kwargs)

        monkeypatch.setattr(_many, "batch_program", failing)
        with pytest.raises(_Interrupt):
            sim.run_many(policy, tab, key, 10, chunk_size=2, checkpoint=ckpt, progress=False)
        monkeypatch.setattr(_many, "batch_program", real)
        assert sorted(p.name for p in ckpt.glob("chunk_*.npz")) == [f"chunk_{c:06d}.npz" for c in range(k)]
        assert same(sim.run_many(policy, tab, key, 10, chunk_size=2, checkpoint=ckpt, progress=False), full)


_KILLED_RUN = textwrap.dedent("""
    import sys, time
    import jax
    jax.config.update("jax_enable_x64", sys.argv[2] == "1")
    import jax.numpy as jnp, numpy as np
    from jaxstop import policies, sim
    from jaxstop.sim import _many
    real = _many.batch_program
    def slow(*args, **kwargs):  # a long study: the kill lands between chunks or inside one
        time.sleep(0.2)
        return real(*args, **kwargs)
    _many.batch_program = slow
    values = np.load(sys.argv[3])
    sim.run_many(policies.sh(values.shape[0], values.shape[1]), sim.CurveTable(jnp.asarray(values)),
                 jax.random.key(11), 40, chunk_size=2, checkpoint=sys.argv[1], progress=False)
""")


def test_a_killed_run_resumes_bit_identically(tmp_path):
    """A subprocess running a checkpointed study is killed (SIGKILL) once some of its
    chunks are written; the same call in this process resumes from its files and equals
    the uninterrupted run bit for bit (plain SH on a float32 table: exact in every
    program). Every chunk file is complete or absent."""
    tab = table(6)
    values = tmp_path / "values.npy"
    np.save(values, np.asarray(tab.values))
    ckpt = tmp_path / "study"
    x64 = "1" if jax.config.jax_enable_x64 else "0"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(ckpt), x64, str(values)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while len(list(ckpt.glob("chunk_*.npz"))) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1].decode()[-2000:]
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()  # reaps it and closes its pipes
    written = sorted(p.name for p in ckpt.glob("chunk_*.npz"))
    assert 3 <= len(written) < 20
    policy = policies.sh(NUM, T)
    key = jax.random.key(11)
    resumed = sim.run_many(policy, tab, key, 40, chunk_size=2, checkpoint=ckpt, progress=False)
    assert same(resumed, sim.run_many(policy, tab, key, 40, chunk_size=2, progress=False))


def test_a_damaged_chunk_file_is_computed_again_with_a_warning(tmp_path):
    """A chunk file cut short or damaged outside run_many (an interrupted copy of the
    directory, a disk error) stopped every resume with an error about the file; its runs
    are now computed and the file written again, with a RuntimeWarning naming it. The
    oracle is the uninterrupted run without a checkpoint."""
    policy = policies.sh(NUM, T)
    tab, key = table(3), jax.random.key(2)
    full = sim.run_many(policy, tab, key, 10, chunk_size=4, progress=False)
    ckpt = tmp_path / "study"
    sim.run_many(policy, tab, key, 10, chunk_size=4, checkpoint=ckpt, progress=False)
    good = (ckpt / "chunk_000001.npz").read_bytes()
    mid = len(good) // 2
    flipped = good[:mid] + bytes([good[mid] ^ 0xFF]) + good[mid + 1:]  # a bad byte: the zip CRC fails
    for damage in (b"", good[:mid], b"PK\x03\x04" + bytes(200), flipped):
        (ckpt / "chunk_000001.npz").write_bytes(damage)
        with pytest.warns(RuntimeWarning, match=r"chunk_000001\.npz.* cannot be read"):
            resumed = sim.run_many(policy, tab, key, 10, chunk_size=4, checkpoint=ckpt, progress=False)
        assert same(resumed, full)
        assert (ckpt / "chunk_000001.npz").read_bytes() != damage  # written again, complete
        back = jaxstop.load(ckpt / "chunk_000001.npz", like=jax.tree_util.tree_map(lambda a: a[4:8], full))
        assert same(back, jax.tree_util.tree_map(lambda a: a[4:8], full))


def test_a_checkpoint_names_a_changed_num_runs_or_chunk_size(tmp_path):
    # the chunk size changes no run's result, so a user resuming with another one was told only
    # that "policy, table, key, num_runs, params, ... or record" differ
    policy = policies.random_search(NUM, max_budget=T)
    tab, key = table(), jax.random.key(0)
    ckpt = tmp_path / "study"
    sim.run_many(policy, tab, key, 10, chunk_size=4, checkpoint=ckpt, progress=False)
    with pytest.raises(ValueError, match=r"other arguments \(chunk_size=4, now 2: to resume, pass the same"):
        sim.run_many(policy, tab, key, 10, chunk_size=2, checkpoint=ckpt, progress=False)
    with pytest.raises(ValueError, match=r"other arguments \(num_runs=10, now 12; chunk_size=4, now 3"):
        sim.run_many(policy, tab, key, 12, chunk_size=3, checkpoint=ckpt, progress=False)
    with pytest.raises(ValueError, match=r"other arguments \(policy, table, key"):
        sim.run_many(policy, tab, jax.random.key(1), 10, chunk_size=4, checkpoint=ckpt, progress=False)


def test_runs_beyond_the_uint32_run_indices_are_refused_before_any_chunk(monkeypatch):
    # run i's key is fold_in(key, uint32 i): the last chunk's padding past 2**32 runs failed in
    # run_keys only when that chunk came, after every earlier chunk had run
    from jaxstop.sim import _many

    def never(*args, **kwargs):
        raise AssertionError("a chunk ran")

    monkeypatch.setattr(_many, "batch_program", never)
    policy = policies.random_search(NUM, max_budget=T)
    for num_runs, chunk_size in ((2**32 + 1, 2**31), (2**32, 3), (2**33, None)):
        with pytest.raises(ValueError, match=r"num_runs \(\d+\) rounded up to whole chunks of \d+ must be at most"):
            sim.run_many(policy, table(), jax.random.key(0), num_runs, chunk_size=chunk_size, progress=False)


def test_checkpoint_chunks_round_trip_the_halving_status(tmp_path):
    """HalvingInfo.ok / reason are stored in the chunk files of record="full" and load back
    bit for bit, codes other than OK included: float32 losses near 1e20 overflow the window
    variances of delta_estimate="window_var" (reason NOT_FINITE from the first UQ decision)."""
    rng = np.random.default_rng(0)
    v = (1e20 * (1.0 + 0.1 * np.arange(9))[:, None] + 3e19 * rng.standard_normal((9, 9))).astype(np.float32)
    policy = policies.sh(9, 9, uq=True, delta_estimate="window_var", dtype=jnp.float32)
    tab, key = sim.CurveTable(jnp.asarray(v)), jax.random.key(0)
    first = sim.run_many(policy, tab, key, 6, chunk_size=4, checkpoint=tmp_path / "s", progress=False)
    loaded = sim.run_many(policy, tab, key, 6, chunk_size=4, checkpoint=tmp_path / "s", progress=False)
    assert same(loaded, first)
    act = np.asarray(loaded.active)
    reason = np.asarray(loaded.infos.reason)[act]
    assert set(reason.tolist()) == {0, int(jaxstop.Reason.NOT_FINITE)}
    np.testing.assert_array_equal(np.asarray(loaded.infos.ok)[act], reason == 0)
