"""Does a vmapped batch of confidence problems pay per problem as it grows? ``jax.vmap`` of
``confidence.prob_best`` and of ``confidence.keep_count`` at batches of 1 to 4,096 problems.

``prob_best``'s vmap rule stacks the problems as rows of one quadrature loop. On CPU it
integrates them in groups of rows whose tile (rows x nodes of a step x block of candidates)
stays within ``_quadrature._TILE_BYTES``; the anchor, timed in the same run, is the same
code with the budget lifted (one group of every row: the program before the groups). Per
problem: mean and sd of ``mu`` 0.3 / 0.05 and ``sigma`` 0.02 / 0.005 (every candidate
relevant, the dense pass), ``keep_count`` with ``delta_sigma`` 0.001 and a round budget of 20.

Each call is compiled ahead of time and timed apart from its compile: the median of 5 calls,
each waited on. A batch of 1 is one call without ``vmap``. Beside each time, the process's
minor page faults per call: the temporaries of one group of every row are memory fresh from the
operating system at each call, and writing them faults once per page.

Usage (from the repository root; the other core idle)::

    python benchmarks/explore/vmap_rows.py --pin 1
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: E402

_common.setup_environment()

import argparse  # noqa: E402
import resource  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxstop import confidence  # noqa: E402
from jaxstop.confidence import _quadrature  # noqa: E402


def problems(rng, batch, n, dtype):
    mu = jnp.asarray(rng.normal(0.3, 0.05, (batch, n)), dtype)
    sigma = jnp.asarray(np.abs(rng.normal(0.02, 0.005, (batch, n))) + 1e-3, dtype)
    delta = jnp.full((batch, n), 0.001, dtype)
    return mu, sigma, delta


def per_problem_us(name, batch, args, grouped: bool, repeats: int):
    """``(median microseconds per problem, page faults per call)`` of ``name`` over the batch
    (compiled first; the faults are the process's minor faults over three more calls)."""
    _quadrature._TILE_BYTES = ORIGINAL if grouped else 2**62  # read when traced
    jax.clear_caches()
    if name == "prob_best":
        one = lambda m, s, d: confidence.prob_best(m, s)  # noqa: E731
    else:
        one = lambda m, s, d: confidence.keep_count(m, s, d, jnp.asarray(20.0, m.dtype)).keep  # noqa: E731
    if batch == 1:
        fn, call_args = one, tuple(a[0] for a in args)
    else:
        fn, call_args = jax.vmap(one), args
    compiled, _ = _common.compile_timed(fn, *call_args)
    seconds = _common.median_seconds(lambda: compiled(*call_args), repeats)[0]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(3):
        jax.block_until_ready(compiled(*call_args))
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 3
    return seconds / batch * 1e6, faults


ORIGINAL = _quadrature._TILE_BYTES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[22, 64, 200])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 128, 1024, 4096])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pin", type=int, default=None, help="pin the process to this core")
    args = ap.parse_args()
    if args.pin is not None:
        _common.pin(args.pin)
    print(_common.report_header("vmapped confidence problems against the batch size"))
    rng = np.random.default_rng(0)
    head = ["function", "dtype", "n"] + [f"batch {b:,}: grouped / one group, us per problem (page faults per call)"
                                         for b in args.batches]
    rows = []
    for name in ("prob_best", "keep_count"):
        for dtype in (jnp.float32, jnp.float64):
            for n in args.sizes:
                cells = [name, jnp.dtype(dtype).name, n]
                for batch in args.batches:
                    data = problems(rng, batch, n, dtype)
                    (new, new_f), (old, old_f) = (per_problem_us(name, batch, data, g, args.repeats)
                                                  for g in (True, False))
                    cells.append(f"{new:.1f} / {old:.1f} ({new_f:,.0f} / {old_f:,.0f})")
                rows.append(cells)
                print("# " + " | ".join(map(str, cells)), flush=True)
    _quadrature._TILE_BYTES = ORIGINAL
    print(_common.markdown_table(head, rows))


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    main()
