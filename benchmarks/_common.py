"""What the benchmark scripts share: their environment, timing, the machine header, the studies.

Every script in ``benchmarks/`` and ``benchmarks/explore/`` imports this module and no
other script (``datasets.py``, the loaders of the vendored data, is a module, not a
script). It imports nothing heavy at module level, so that :func:`setup_environment`
runs before NumPy and JAX load::

    import _common

    _common.setup_environment()

    import jax  # noqa: E402

**Environment** (:func:`setup_environment`). One choice for every script, the project's
(Makefile, ``tests/conftest.py``, README): one thread for OpenBLAS, OpenMP and MKL, and
``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`` (XLA:CPU's multithreaded Eigen pool can
wedge on vmapped loop graphs, and one thread makes jaxstop and its anchors comparable on
one core). Values already set in the environment win, so a run can change them from the
shell; the scripts that report their environment print what they ran with. The
termination scripts used to add ``intra_op_parallelism_threads=1`` to ``XLA_FLAGS``: that
is no XLA flag (XLA ignores a word without ``--``), so the measured configuration is the
same. Compile options (``jaxstop.compiler_options()``) are per program, not environment:
``bench_confidence.py`` passes them to :func:`compile_timed`.

**Timing.** :func:`compile_timed` compiles a jitted function ahead of time, so compile
and run are timed apart; :func:`median_seconds` is the median wall time of several calls,
each waited on with ``jax.block_until_ready`` (JAX dispatches asynchronously; NumPy
results pass through it unchanged); :func:`round_robin_seconds` times several calls in
turn, so that every one sees the same machine load (:func:`interleaved_seconds` the same for
calls already warmed up, keeping their outputs).

**Machine header.** :func:`cpu` and :func:`describe` name the processor, with its CPU
family and model numbers: ``platform.processor()`` is empty on many Linux hosts, and
virtual machines often report a generic model name ("Intel(R) Xeon(R) Processor"), while
the family and model tell, say, an AMD EPYC of family 25 from one of family 26, whose
speeds differ. :func:`pin` pins the process to one core.

**Reports.** :func:`report_header` opens a Markdown report with the machine, the exact
command (:func:`command_line`), the versions and the date; :func:`markdown_table` formats
one table; :func:`write_report` writes the report to a script's ``--out``.

**Studies.** :func:`termination_study` (the synthetic studies of the regret-bound
scripts), :func:`gp_studies` (those of the GP scripts), and for the real-curve studies
(``uq_real.py``, ``bobos_real.py``) :class:`CurveData`, :func:`load_curves` and the
summaries :func:`anytime_error`, :func:`fraction_to_match`, :func:`se`.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

__all__ = [
    "THREAD_VARIABLES",
    "XLA_FLAGS",
    "setup_environment",
    "compile_timed",
    "median_seconds",
    "round_robin_seconds",
    "interleaved_seconds",
    "cpu",
    "describe",
    "pin",
    "command_line",
    "markdown_table",
    "report_header",
    "write_report",
    "termination_study",
    "GP_N",
    "GP_D",
    "GP_QUERIES",
    "gp_studies",
    "CurveData",
    "load_curves",
    "anytime_error",
    "fraction_to_match",
    "se",
]

BENCHMARKS = Path(__file__).resolve().parent
REPO = BENCHMARKS.parent
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false"


# ----------------------------------------------------------------------------- environment
def setup_environment() -> None:
    """One thread for OpenBLAS / OpenMP / MKL and XLA's single-threaded Eigen, unless the
    environment already says otherwise. Call it before NumPy or JAX is imported."""
    for name in THREAD_VARIABLES:
        os.environ.setdefault(name, "1")
    os.environ.setdefault("XLA_FLAGS", XLA_FLAGS)


# ----------------------------------------------------------------------------- timing
def compile_timed(fn, *args, options=None):
    """``(compiled, seconds)``: ``fn`` jitted, lowered for ``args`` and compiled, with the time
    that took; ``options``: XLA compiler options (``None``: XLA's defaults)."""
    import jax

    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile(compiler_options=options or None)
    return compiled, time.perf_counter() - start


def median_seconds(fn, repeats, *, warmup=1, min_seconds=0.0, max_runs=200):
    """``(median seconds, last output)`` of ``fn()``, each call waited on with
    ``jax.block_until_ready``: ``warmup`` untimed calls first (they pay one-off costs), then
    at least ``repeats`` timed calls, more (up to ``max_runs``) until they add up to
    ``min_seconds`` (short runs are noisy)."""
    import jax

    for _ in range(warmup):
        jax.block_until_ready(fn())
    times, out = [], None
    while len(times) < repeats or (sum(times) < min_seconds and len(times) < max_runs):
        start = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def round_robin_seconds(calls, repeats):
    """Median seconds of each ``(fn, args)`` in ``calls`` after one warm-up call of each,
    timed round-robin (one call of each in turn, ``repeats`` rounds) so that every call
    sees the same machine load."""
    import jax

    for fn, args in calls:
        jax.block_until_ready(fn(*args))
    times = [[] for _ in calls]
    for _ in range(repeats):
        for (fn, args), out in zip(calls, times):
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            out.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def interleaved_seconds(fns, repeats):
    """``(medians, outputs)``: the median seconds and the last output of each zero-argument
    call in ``fns``, timed one call of each in turn (``repeats`` rounds, each call waited on
    with ``jax.block_until_ready``) so that every call sees the same machine load. No
    warm-up: make the first (compiling) call of each before."""
    import jax

    times, outs = [[] for _ in fns], [None] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            outs[i] = jax.block_until_ready(fn())
            times[i].append(time.perf_counter() - start)
    return [statistics.median(t) for t in times], outs


# ----------------------------------------------------------------------------- machine
def cpu() -> str:
    """The CPU's model name with its family and model numbers, and the number of logical CPUs."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model") and key not in fields:
                fields[key] = value.strip()
            if not line.strip() and fields:
                break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return f"{name}, {os.cpu_count()} logical CPUs"


def describe() -> str:
    """:func:`cpu` and the operating system."""
    return f"{cpu()}, {platform.system()} {platform.release()}"


def pin(core) -> None:
    """Pins this process to CPU ``core`` (where the OS allows it; ``None``: no pinning)."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})


# ----------------------------------------------------------------------------- reports
def command_line() -> str:
    """The command that runs this process, as typed from the repository root
    (``python benchmarks/script.py --flag value``)."""
    import shlex
    import sys

    script = Path(sys.argv[0])
    try:
        script = script.resolve().relative_to(REPO)
    except ValueError:
        pass
    return " ".join(["python", shlex.quote(str(script))] + [shlex.quote(a) for a in sys.argv[1:]])


def markdown_table(header, rows) -> str:
    """A Markdown table: ``header`` a sequence of column names, ``rows`` of cells (any
    value, formatted with ``str``)."""
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def report_header(title, *, packages=()) -> str:
    """The opening lines of a Markdown report: ``title``, the machine (:func:`cpu`), the
    command, the jax version (and that of every module in ``packages``), the thread
    settings and the date (UTC)."""
    from datetime import datetime, timezone

    import jax

    versions = [f"jax {jax.__version__}"] + [f"{m.__name__} {m.__version__}" for m in packages]
    threads = ", ".join(f"{v}={os.environ.get(v, '')}" for v in THREAD_VARIABLES + ("XLA_FLAGS",))
    return "\n".join([
        f"# {title}",
        "",
        f"- machine: {cpu()}, {platform.system()} {platform.release()}",
        f"- command: `{command_line()}`",
        f"- versions: {', '.join(versions)}; {threads}",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
    ])


def write_report(path, text) -> None:
    """Writes ``text`` to ``path`` (creating its folder) and says where."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")
    print(f"wrote {path}")


# ----------------------------------------------------------------------------- synthetic studies
def termination_study(rng, n, d):
    """One synthetic study of the regret-bound scripts: ``n`` uniform points in ``[0, 1]^d``,
    a sum of squares plus a sine plus noise; ``rng`` a NumPy generator."""
    import numpy as np

    X = rng.uniform(size=(n, d))
    y = np.sum((X - 0.3) ** 2, axis=1) + 0.3 * np.sin(5 * X[:, 0]) + 0.05 * rng.normal(size=n)
    return X, y


GP_N, GP_D, GP_QUERIES = 100, 9, 2048


def gp_studies(key, batch, dtype):
    """``(X, y, Xq)``: ``batch`` studies of the GP scripts, ``GP_N`` observations in
    ``GP_D`` dimensions and ``GP_QUERIES`` query points each; ``key`` a JAX key."""
    import jax
    import jax.numpy as jnp

    kx, kn, kq = jax.random.split(key, 3)
    X = jax.random.uniform(kx, (batch, GP_N, GP_D), dtype)
    y = jnp.sin(6 * X[..., 0]) + jnp.cos(4 * X[..., 1]) * X[..., 2] + 0.1 * jax.random.normal(kn, (batch, GP_N), dtype)
    Xq = jax.random.uniform(kq, (batch, GP_QUERIES, GP_D), dtype)
    return X, y, Xq


# ----------------------------------------------------------------------------- real learning curves
class CurveData:
    """Curves (validation error per epoch) with their mask and unit-cube configs, ready for
    :func:`jaxstop.sim.run` as ``self.table``."""

    def __init__(self, name, values, mask, configs):
        import numpy as np

        from jaxstop import sim

        self.name = name
        self.values = np.asarray(values, np.float32)
        self.mask = np.asarray(mask, bool)
        self.configs = np.clip(np.asarray(configs, np.float32), 0.0, 1.0)
        lengths = self.mask.sum(1)
        self.final = self.values[np.arange(len(lengths)), lengths - 1]
        self.best = float(self.final.min())
        self.table = sim.CurveTable(np.where(self.mask, self.values, 0.0).astype(np.float32), self.mask,
                                    None, self.configs)

    @property
    def shape(self):
        return self.values.shape


def load_curves(name, rng, lcbench_epochs):
    """``alexnet`` / ``deberta`` (OPDA), or ``lcbench-<task>``: 1,000 uniform configurations
    of the LCBench surrogate, ``lcbench_epochs`` epochs of validation error."""
    import numpy as np

    from datasets import lcbench_curves, lcbench_from_unit, load_opda

    if name in ("alexnet", "deberta"):
        c = load_opda(name)
        return CurveData(name, c.values, c.mask, c.configs)
    task = name.split("-", 1)[1]
    u = rng.uniform(size=(1000, 7))
    curves = lcbench_curves(task, lcbench_from_unit(u), epochs=lcbench_epochs)
    return CurveData(name, curves.val_error, np.ones(curves.val_error.shape, bool), u)


def anytime_error(run, data, grid):
    """Fully-trained error of the incumbent at each budget of ``grid``, per run; before the
    first incumbent, the table's mean final error (a random pick)."""
    import numpy as np

    res = np.empty((run["spent"].shape[0], grid.size))
    for i in range(res.shape[0]):
        idx = np.searchsorted(run["spent"][i], grid, side="right") - 1
        inc = np.where(idx >= 0, run["incumbents"][i][np.maximum(idx, 0)], -1)
        res[i] = np.where(inc >= 0, data.final[np.maximum(inc, 0)], data.final.mean())
    return res


def fraction_to_match(curve, target, grid, reference):
    """Smallest budget (relative to ``reference``) from which ``curve`` stays <= ``target``
    (NaN if it does not end there)."""
    import numpy as np

    ok = curve <= target + 1e-12
    if not ok[-1]:
        return float("nan")
    bad = np.flatnonzero(~ok)
    first = 0 if bad.size == 0 else bad[-1] + 1
    return float(grid[first] / reference)


def se(x):
    """Standard error of the mean."""
    import numpy as np

    return float(np.std(x, ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")
