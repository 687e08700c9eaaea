"""Large simulation studies: many runs in chunks, sharded, with progress and resumable checkpoints."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import sys
import time
import types
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxstop._src import checks as _checks
from jaxstop._src import io as _io
from jaxstop.policies import Policy
from jaxstop.sim._run import Trace, batch_program, check_record, check_run_args, resolve_params
from jaxstop.sim._table import CurveTable

__all__ = ["run_many", "run_keys"]

_MANIFEST = "manifest.json"
_FORMAT = 1
_DEFAULT_CHUNK = 1024


@functools.partial(jax.jit, static_argnums=2)
def _fold_range(key: jax.Array, start: jax.Array, count: int) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(key, i))(start + jnp.arange(count, dtype=jnp.uint32))


def run_keys(key: jax.Array, start: int, count: int) -> jax.Array:
    """The keys of runs ``start .. start + count - 1`` of a study: ``fold_in(key, i)``.

    A run's key depends on its index only, never on how the study is chunked. One compiled
    program per ``count`` (``start`` is an argument of it), so the chunks of a study share it.
    ``key`` is one PRNG key (``TypeError`` otherwise); ``start`` and ``count`` are ints with
    ``start >= 0``, ``count >= 1`` and ``start + count <= 2**32`` (``ValueError`` otherwise).

    Example:
        >>> import jax
        >>> from jaxstop import sim
        >>> keys = sim.run_keys(jax.random.key(0), 8, 4)
        >>> bool((jax.random.key_data(keys[1]) == jax.random.key_data(jax.random.fold_in(jax.random.key(0), 9))).all())
        True
    """
    _checks.check_key(key)
    count = _checks.positive_int(count, "count")
    start = _checks.positive_int(start, "start", minimum=0)
    if start > 2**32 - count:
        raise ValueError(f"runs start .. start + count - 1 must be indices in [0, 2**32), got start={start}, "
                         f"count={count}")
    return _fold_range(key, jnp.uint32(start), count)


def _feed(h, x, seen: frozenset = frozenset()) -> None:
    """Feeds a stable description of ``x`` (arrays by content; a Python function by its
    name, its code, its defaults and the values it closes over) to ``h``."""
    if isinstance(x, (jax.Array, np.ndarray)) and not isinstance(x, jax.core.Tracer):
        if _checks.is_prng_key(x) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            h.update(f"key:{jax.random.key_impl(x)}".encode())
            x = jax.random.key_data(x)
        a = np.asarray(x)
        h.update(f"array{a.shape}{a.dtype.str}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    elif isinstance(x, Policy):
        # tell_batch_last is another form of tell_batch (the same study): left out, so that a
        # checkpoint written before the field existed still resumes
        fields = [v for k, v in zip(x._fields, x) if k != "tell_batch_last"]
        h.update(f"Policy[{len(fields)}](".encode())
        for v in fields:
            _feed(h, v, seen)
        h.update(b")")
    elif isinstance(x, (list, tuple)):
        h.update(f"{type(x).__name__}[{len(x)}](".encode())
        for v in x:
            _feed(h, v, seen)
        h.update(b")")
    elif isinstance(x, (set, frozenset)):  # in an order that does not depend on hashing
        h.update(f"set[{len(x)}]".encode() + repr(sorted(repr(v) for v in x)).encode())
    elif isinstance(x, dict):
        h.update(b"dict(")
        for k in sorted(x, key=repr):
            _feed(h, k, seen)
            _feed(h, x[k], seen)
        h.update(b")")
    elif callable(x) and hasattr(x, "__qualname__") and not hasattr(x, "static"):
        h.update(f"fn:{getattr(x, '__module__', '')}.{x.__qualname__}".encode())
        own = getattr(x, "__module__", "").startswith("jaxstop.")
        if isinstance(x, types.FunctionType) and not own and id(x) not in seen:
            # two closures of one function differ by what they capture (a policy's steps
            # built by a factory of the user's): their code, defaults and cells count.
            # jaxstop's own functions go by name (their configuration is the static value
            # beside them), so that a checkpoint resumes under a later version
            seen = seen | {id(x)}
            _feed_code(h, x.__code__)
            _feed(h, (x.__defaults__, x.__kwdefaults__), seen)
            for cell in x.__closure__ or ():
                try:
                    _feed(h, cell.cell_contents, seen)
                except ValueError:  # an empty cell
                    h.update(b"empty-cell")
    elif hasattr(x, "static") and hasattr(x, "fn"):  # a policy step or its default params
        _feed(h, (getattr(x, "name", "params"), x.fn, x.static.value), seen)
    else:
        text = repr(x)
        h.update(re.sub(r" at 0x[0-9a-fA-F]+", "", text).encode())


def _feed_code(h, code: types.CodeType) -> None:
    """Feeds a function's bytecode, the names it uses and its constants (nested code too)."""
    h.update(code.co_code)
    h.update(repr(code.co_names).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(h, const)
        elif isinstance(const, frozenset):  # `x in {...}`: its order depends on string hashing
            h.update(repr(sorted(repr(v) for v in const)).encode())
        else:
            h.update(repr(const).encode())


def fingerprint(*args) -> str:
    """A hex digest of ``args`` that is stable across processes (arrays by content)."""
    h = hashlib.sha256()
    _feed(h, args)
    return h.hexdigest()


def _write_atomic(tree, path: Path, tag: str) -> None:
    """Saves ``tree`` to ``path`` (compact encoding, bit for bit) with its ``tag`` so that
    ``path`` is either absent or complete, and on disk before it appears."""
    _io.save_tagged(tree, path, tag, compact=True, sync=True)


def _chunk_tag(digest: str, c: int) -> str:
    """The tag of chunk ``c``'s file: the study's fingerprint (the manifest's) and ``c``."""
    return f"run_many {digest} chunk {c}"


def _load_chunk(path: Path, like, digest: str, c: int):
    """Chunk ``c`` from its file; ``None`` (with a warning) for a file that cannot be read as
    its runs: a file cut short or damaged outside ``run_many`` (an interrupted copy of the
    directory, a disk error), whose runs are then computed and written again. A file whose
    tag says it holds another study's runs or another chunk's is refused (``ValueError``
    naming the file); a file without a tag (written before chunk files had one) is taken as
    before."""
    try:
        out, tag = _io.load_tagged(path, like)
    except ValueError as err:
        warnings.warn(f"checkpoint chunk {str(path)!r} cannot be read ({err}); its runs are computed and the file "
                      "written again", RuntimeWarning, stacklevel=3)
        return None
    if tag is not None and tag != _chunk_tag(digest, c):
        parts = tag.split(" ")
        if len(parts) == 4 and parts[:3] == ["run_many", digest, "chunk"]:
            why = f"it holds the runs of chunk {parts[3]}, not of chunk {c} (a renamed or copied chunk file)"
        else:
            why = ("it was written by run_many with other arguments (a chunk file of another study, copied "
                   "or left in this directory)")
        raise ValueError(f"checkpoint chunk file {str(path)!r} does not belong to this study: {why}; remove it "
                         "(run_many computes the chunk again) or use another directory")
    return jax.device_get(out)


def _manifest(directory: Path, digest: str, num_runs: int, chunk_size: int) -> None:
    """Writes the manifest of a new checkpoint, or refuses one written with other arguments."""
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"checkpoint {str(directory)!r} exists and is not a directory")
    path = directory / _MANIFEST
    want = {"format": _FORMAT, "fingerprint": digest, "num_runs": num_runs, "chunk_size": chunk_size}
    if path.exists():
        try:
            have = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"checkpoint {str(directory)!r} has an unreadable {_MANIFEST}") from err
        if have != want:
            # num_runs and chunk_size are stored as such: name the one that differs (chunk_size
            # changes no run's result, but the chunk files hold runs of the chunk size they name)
            named = [f"{k}={have.get(k)!r}, now {want[k]}" for k in ("num_runs", "chunk_size")
                     if isinstance(have, dict) and have.get(k) != want[k]]
            raise ValueError(
                f"checkpoint {str(directory)!r} was written by run_many with other arguments ("
                + ("; ".join(named) + ": to resume, pass the same (if nothing else changed)" if named else
                   "policy, table, key, num_runs, params, max_jobs, chunk_size, batched or record differ")
                + "); use another directory or remove it"
            )
        return
    # chunk files without a manifest come from a study whose arguments are unknown (a manifest
    # removed by hand): they would be loaded as this study's runs
    stray = sorted(directory.glob("chunk_*.npz")) if directory.is_dir() else []
    if stray:
        raise ValueError(f"checkpoint {str(directory)!r} holds chunk files ({stray[0].name}, ...) but no "
                         f"{_MANIFEST}: they were written with arguments that cannot be checked; use another "
                         "directory or remove it")
    directory.mkdir(parents=True, exist_ok=True)
    # a temporary name of this writer's own: processes of a jax.distributed run that start a
    # shared checkpoint together each write the (same) manifest without touching another's file
    tmp = path.with_name(f"{_MANIFEST}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        tmp.write_text(json.dumps(want))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


class _Progress:
    """One line on stderr: runs done, runs per second, time left."""

    def __init__(self, total: int, enabled: bool, label: str = "run_many"):
        self.total, self.enabled, self.start, self.computed = total, enabled, time.perf_counter(), 0
        self.label = label

    def update(self, done: int, computed: int) -> None:
        self.computed += computed
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.start
        rate = self.computed / elapsed if elapsed > 0 and self.computed else float("nan")
        left = (self.total - done) / rate if rate == rate and rate > 0 else float("nan")
        eta = f"{left:.0f} s" if left == left else "?"
        sys.stderr.write(f"\r{self.label}: {done}/{self.total} runs, {rate:.1f} runs/s, ETA {eta}   ")
        if done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def run_many(
    policy: Policy,
    table: CurveTable,
    key: jax.Array,
    num_runs: int,
    *,
    params: Any = None,
    max_jobs: int | None = None,
    chunk_size: int | None = None,
    checkpoint: str | os.PathLike | None = None,
    progress: bool = True,
    devices=None,
    batched: bool | None = None,
    record: str = "full",
) -> Trace:
    """``num_runs`` independent studies of ``policy`` on ``table``, in chunks.

    Each chunk of ``chunk_size`` runs is one call of the same compiled program (the
    runs vmapped and sharded over ``devices`` as in :func:`run_batch`), so memory is
    bounded by the chunk, not by ``num_runs``; the last chunk is padded to full size
    (one program) and the padding dropped. Run ``i`` uses the key ``fold_in(key, i)``
    (:func:`run_keys`), whatever the chunking.

    With ``checkpoint=DIR`` every finished chunk is written to ``DIR`` atomically (a
    chunk file is complete or absent), by a background thread while the next chunk runs;
    the call returns once every file is written. Called again with the same arguments after an
    interruption, ``run_many`` loads the chunks that exist and computes the others
    (a chunk file that cannot be read, cut short or damaged outside ``run_many``, is
    computed and written again, with a ``RuntimeWarning``):
    the result is bit-identical to an uninterrupted run on the same machine. A
    directory written with other arguments is refused (``ValueError``), and so is a chunk
    file whose fingerprint (stored in it) is not this study's and this chunk's: another
    study's file copied or left in the directory, or a renamed one. The arguments are
    compared by a digest: arrays by content; jaxstop's policies by their steps' names and
    static configuration; a step function of your own by its name, its bytecode, its
    defaults and the values it closes over (not by the globals it reads: change a global
    that a step reads and use a new directory).

    Across hosts: called by every process of a ``jax.distributed`` program (same
    arguments), process ``p`` of ``P`` runs chunks ``p, p + P, ...`` on its own
    devices, and the chunks are all-gathered with JAX's multi-process runtime, so every
    process returns the whole result, equal to a one-process run with the same
    ``chunk_size`` and devices per process. With ``checkpoint`` on a file system all
    processes share, the chunk files are written once each and any later run (with any
    number of processes) resumes from them. On CPU hosts, JAX's collectives need
    ``jax.config.update("jax_cpu_collectives_implementation", "gloo")`` before
    ``jax.distributed.initialize``.

    Args:
        policy, table, params, max_jobs, batched, record: As in :func:`run` (``params``
            shared by every run: for a sweep over params, ``jax.vmap`` :func:`run` over them).
        key: PRNG key of the whole study.
        num_runs: Number of runs (rounded up to whole chunks, at most ``2**32``).
        chunk_size: Runs per chunk (a multiple of the number of devices); default
            ``min(num_runs, 1024)`` rounded up to such a multiple.
        checkpoint: Directory for resumable chunk files, or ``None``.
        progress: Print runs done, runs per second and the time left to stderr.
        devices: Devices of this process to shard each chunk over; default
            ``jax.local_devices()``.

    Returns:
        A :class:`Trace` whose leaves are NumPy arrays with a leading (num_runs,) axis.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import policies, sim
        >>> table = sim.CurveTable(jnp.array([[0.9, 0.5], [0.8, 0.7], [0.95, 0.3]]))
        >>> traces = sim.run_many(policies.random_search(3, max_budget=2), table,
        ...                       jax.random.key(0), 10, chunk_size=4, progress=False)
        >>> traces.incumbent.tolist() == [2] * 10
        True
    """
    table, max_jobs, batched = check_run_args(policy, table, max_jobs, batched)
    progress = _checks.boolean(progress, "progress")
    record = check_record(record)
    num_runs = _checks.positive_int(num_runs, "num_runs")
    _checks.check_key(key)
    params = resolve_params(policy, params)
    num_procs, proc = jax.process_count(), jax.process_index()
    devices = list(jax.local_devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must name at least one device (or be None: this process's devices)")
    if any(d.process_index != proc for d in devices):
        raise ValueError("devices must be devices of this process (jax.local_devices()); under jax.distributed "
                         "each process runs its own chunks on its own devices")
    nd = len(devices)
    if chunk_size is None:
        chunk_size = -(-min(num_runs, _DEFAULT_CHUNK) // nd) * nd
    chunk_size = _checks.positive_int(chunk_size, "chunk_size")
    if chunk_size % nd:
        raise ValueError(f"chunk_size ({chunk_size}) must be a multiple of the number of devices ({nd})")
    num_chunks = math.ceil(num_runs / chunk_size)
    if num_chunks * chunk_size > 2**32:  # run indices, the last chunk's padding included, are uint32
        raise ValueError(f"num_runs ({num_runs}) rounded up to whole chunks of {chunk_size} must be at most 2**32 "
                         "(the runs' keys are fold_in(key, i) with a uint32 index i); split the study over keys")

    mesh = jax.sharding.Mesh(np.asarray(devices), ("runs",))
    sharded = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("runs"))

    def compute(c: int):
        keys = jax.device_put(run_keys(key, c * chunk_size, chunk_size), sharded)
        return jax.device_get(batch_program(policy, table, keys, params, max_jobs, batched, mesh, record))

    directory = digest = None
    like = None
    if checkpoint is not None or num_procs > 1:
        shapes = jax.eval_shape(lambda k: batch_program(policy, table, k, params, max_jobs, batched, mesh, record),
                                run_keys(key, 0, chunk_size))
        like = jax.tree_util.tree_map(lambda sd: np.zeros(sd.shape, sd.dtype), shapes)
    if checkpoint is not None:
        directory = Path(checkpoint)
        # record joins the fingerprint only when not the default, so that checkpoints
        # written before it existed still resume
        digest = fingerprint(policy, table, key, num_runs, params, max_jobs, chunk_size, batched,
                             *(() if record == "full" else (record,)))
        _manifest(directory, digest, num_runs, chunk_size)

    # Under jax.distributed, process p runs chunks p, p + P, p + 2P, ... (P processes).
    mine = range(proc, num_chunks, num_procs)
    label = "run_many" if num_procs == 1 else f"run_many [process {proc}/{num_procs}]"
    bar = _Progress(len(mine) * chunk_size if num_procs > 1 else num_runs, progress, label)
    chunks = []
    # a chunk's file is written by one background thread while the next chunk runs (at
    # most one write in flight: a write's error surfaces at the next chunk or at the end)
    with ThreadPoolExecutor(max_workers=1) as writer:
        writing = None
        for i, c in enumerate(mine):
            path = None if directory is None else directory / f"chunk_{c:06d}.npz"
            out = _load_chunk(path, like, digest, c) if path is not None and path.exists() else None
            if out is not None:
                computed = 0
            else:
                out = compute(c)
                if path is not None:
                    if writing is not None:
                        writing.result()
                    writing = writer.submit(_write_atomic, out, path, _chunk_tag(digest, c))
                computed = chunk_size
            chunks.append(out)
            done = (i + 1) * chunk_size if num_procs > 1 else min((c + 1) * chunk_size, num_runs)
            bar.update(done, computed)
        if writing is not None:
            writing.result()
    if num_procs > 1:
        chunks = _gather_chunks(chunks, like, num_chunks, num_procs)
    return jax.tree_util.tree_map(lambda *xs: np.concatenate([np.asarray(x) for x in xs])[:num_runs], *chunks)


def _gather_chunks(local: list, like, num_chunks: int, num_procs: int) -> list:
    """Every process's chunks, in chunk order, on every process (JAX's multi-process
    all-gather; each process pads its list to the same length with zero chunks)."""
    from jax.experimental import multihost_utils

    per_proc = math.ceil(num_chunks / num_procs)
    padded = list(local) + [like] * (per_proc - len(local))
    stacked = jax.tree_util.tree_map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *padded)
    gathered = multihost_utils.process_allgather(stacked, tiled=False)  # (P, per_proc, chunk, ...)
    return [jax.tree_util.tree_map(lambda a, c=c: np.asarray(a[c % num_procs, c // num_procs]), gathered)
            for c in range(num_chunks)]
