"""Simulation studies: play a policy against a table of real learning curves.

:func:`run` plays one whole HPO run inside one jitted loop; ``jax.vmap``
over keys (or params) gives many runs, and :func:`run_batch` does that and
spreads the runs over all local devices with ``jax.sharding``. :func:`run_many`
runs a large study in chunks of bounded memory, sharded, with progress and
resumable checkpoints.

Files: ``_run.py`` (the table, the trace, one study, a sharded batch) and
``_many.py`` (chunked, resumable studies).

Example:
    >>> import jax, jax.numpy as jnp
    >>> from jaxstop import policies, sim
    >>> curves = jnp.array([[0.9, 0.5, 0.4], [0.8, 0.7, 0.6], [0.95, 0.3, 0.2]])
    >>> table = sim.CurveTable(curves)
    >>> policy = policies.random_search(3, max_budget=3)
    >>> traces = jax.vmap(lambda k: sim.run(policy, table, k, max_jobs=3))(
    ...     jax.random.split(jax.random.key(0), 4))
    >>> traces.incumbent.tolist()   # every run evaluates all 3 and returns the best
    [2, 2, 2, 2]
"""

from jaxstop.sim._many import run_keys as run_keys
from jaxstop.sim._many import run_many as run_many
from jaxstop.sim._run import CurveTable as CurveTable
from jaxstop.sim._run import Trace as Trace
from jaxstop.sim._run import curve_lengths as curve_lengths
from jaxstop.sim._run import run as run
from jaxstop.sim._run import run_batch as run_batch

__all__ = ["CurveTable", "Trace", "run", "run_batch", "run_many", "run_keys", "curve_lengths"]
