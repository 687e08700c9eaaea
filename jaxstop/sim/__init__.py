"""Simulation studies: play a policy against a table of real learning curves.

:func:`run` plays one whole HPO run inside one jitted loop; ``jax.vmap``
over keys (or params) gives many runs, and :func:`run_batch` does that and
spreads the runs over all local devices with ``jax.sharding``. :func:`run_many`
runs a large study in chunks of bounded memory, sharded, with progress and
resumable checkpoints. :func:`compare` plays several policies on the same keys at an
equal budget (restarting a policy that ends early) and reports regret against budget
with paired intervals (:class:`Comparison`). :func:`summarize` turns traces into regret against
budget (per study and aggregated) and :func:`plot_regret` draws several
policies on one figure. :meth:`CurveTable.from_long` builds a table from a long
table of records, :meth:`CurveTable.save` / :meth:`CurveTable.load` store it, and
:func:`cli` is the ``python -m jaxstop simulate`` command line, :func:`compare_cli`
``python -m jaxstop compare``.

Files: ``_table.py`` (the curve table, its checks, tables from long records
and files), ``_run.py`` (the trace, one study, a sharded batch), ``_many.py``
(chunked, resumable studies), ``_compare.py`` (fair comparisons), ``_summary.py`` (regret against budget), ``_plot.py``
(the figure), ``_cli.py`` and ``_compare_cli.py`` (the command lines).

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

from jaxstop.sim._cli import cli as cli
from jaxstop.sim._compare import Comparison as Comparison
from jaxstop.sim._compare import compare as compare
from jaxstop.sim._compare_cli import compare_cli as compare_cli
from jaxstop.sim._many import run_keys as run_keys
from jaxstop.sim._many import run_many as run_many
from jaxstop.sim._plot import plot_regret as plot_regret
from jaxstop.sim._run import Trace as Trace
from jaxstop.sim._run import run as run
from jaxstop.sim._run import run_batch as run_batch
from jaxstop.sim._summary import Metrics as Metrics
from jaxstop.sim._summary import Summary as Summary
from jaxstop.sim._summary import summarize as summarize
from jaxstop.sim._table import CurveTable as CurveTable
from jaxstop.sim._table import curve_lengths as curve_lengths

__all__ = ["CurveTable", "Trace", "run", "run_batch", "run_many", "run_keys", "curve_lengths",
           "Metrics", "Summary", "summarize", "Comparison", "compare", "plot_regret", "cli", "compare_cli"]
