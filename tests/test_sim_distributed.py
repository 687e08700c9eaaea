"""``sim.run_many`` across processes: a 2-process ``jax.distributed`` run on localhost
(2 CPU devices each, collectives over gloo) against a one-process run.

Both sides run the same compiled program per chunk (chunk of 2 runs sharded over 2
devices of one process), so the traces must be equal bit for bit. The 10 runs make 5
chunks: process 0 runs 3, process 1 runs 2 (the uneven split is padded for the gather).
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np

WORKER = Path(__file__).with_name("_distributed_worker.py")


def _env():
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _load(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def test_two_processes_equal_one_process(tmp_path):
    env = _env()
    ref = tmp_path / "ref.npz"
    subprocess.run([sys.executable, str(WORKER), str(ref), "0", "1", "0"], env=env, check=True, timeout=300,
                   capture_output=True)
    port = str(_free_port())
    ckpt = tmp_path / "ckpt"
    outs = [tmp_path / f"proc{p}.npz" for p in range(2)]
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(outs[p]), port, "2", str(p), str(ckpt)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for p in range(2)]
    logs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    want = _load(ref)
    for out in outs:  # every process returns the whole study
        got = _load(out)
        assert set(got) == set(want)
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    # Each chunk was written once, by the process that ran it; a one-process run resumes from them all.
    assert sorted(f.name for f in ckpt.glob("chunk_*.npz")) == [f"chunk_{c:06d}.npz" for c in range(5)]
    again = tmp_path / "again.npz"
    subprocess.run([sys.executable, str(WORKER), str(again), "0", "1", "0", str(ckpt)], env=env, check=True,
                   timeout=300, capture_output=True)
    got = _load(again)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
