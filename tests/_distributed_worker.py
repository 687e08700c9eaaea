"""Worker of tests/test_sim_distributed.py: one process of a ``jax.distributed`` study.

    python _distributed_worker.py OUT PORT NUM_PROCS PROC_ID [CHECKPOINT]

With NUM_PROCS = 1 it runs without ``jax.distributed`` (the reference).
Writes the trace of ``sim.run_many`` to OUT (``np.savez``).
"""

import sys

import numpy as np

import jax


def main() -> None:
    out, port, num_procs, proc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    checkpoint = sys.argv[5] if len(sys.argv) > 5 else None
    if num_procs > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=num_procs, process_id=proc)

    import jax.numpy as jnp

    from jaxstop import policies, sim

    assert len(jax.local_devices()) == 2, jax.local_devices()
    rng = np.random.default_rng(0)
    curves = np.sort(rng.uniform(0.1, 0.9, (9, 9)), axis=1)[:, ::-1]
    table = sim.CurveTable(jnp.asarray(curves, jnp.float32))
    policy = policies.sh(9, 9, eta=3)
    trace = sim.run_many(policy, table, jax.random.key(7), 10, chunk_size=2, checkpoint=checkpoint, progress=False)
    leaves = jax.tree_util.tree_leaves(trace)
    np.savez(out, **{f"leaf{i:03d}": np.asarray(v) for i, v in enumerate(leaves)})
    if num_procs > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices("written")


if __name__ == "__main__":
    main()
