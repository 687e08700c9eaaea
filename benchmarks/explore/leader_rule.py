"""How many Gauss-Legendre nodes per panel do the float32 quadratures need? The rules of
``confidence.prob_best`` and of the leader values (``leader_curve``, ``zeta``) at 12 levels and
several orders, against the float64 rule (12 levels, 16 nodes).

Two measures per order:

* truncation: the rule evaluated in float64 arithmetic against the float64 rule, on ordinary
  problems of the keep rule (30 candidates, ``mu`` in [0.2, 0.4], ``sigma`` in [0.005, 0.05],
  ``delta_sigma`` in [0, 0.003]): the largest change of a ``zeta`` and of a ``p_i``, in units of
  float32's eps. What the float32 program adds to float32 rounding.
* float32 error: the float32 program against the float64 rule on the same float32-rounded
  input, over harder problems (2 to 256 candidates, ``sigma`` over up to 6 decades, a
  candidate up to 1e-6 times narrower than the leader, ties), leaving out the problems
  float32 cannot represent (``problem_status``): the largest absolute error of a leader value
  and of a ``p_i``.

The rule is read when a function is traced, so each order is a fresh trace
(``jax.clear_caches``). Accuracy only, no timing.

Usage (from the repository root)::

    python benchmarks/explore/leader_rule.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _common  # noqa: E402

_common.setup_environment()

import argparse  # noqa: E402

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxstop import confidence  # noqa: E402
from jaxstop.confidence import _keep, _quadrature  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps)
RULE, LEADER_RULE = _quadrature.rule, _quadrature.leader_rule


def ordinary(rng, num):
    for _ in range(num):
        yield tuple(rng.uniform(lo, hi, 30) for lo, hi in ((0.2, 0.4), (0.005, 0.05), (0.0, 0.003)))


def hard(rng):
    for n in (2, 5, 22, 64, 256):
        for _ in range(6):
            yield np.sort(rng.normal(size=n)) * 10 ** rng.uniform(-2, 1), 10 ** rng.uniform(-4, 2, n)
    for r in (1e-2, 1e-3, 1e-4, 1e-5, 1e-6):
        for off in (0.0, 0.5, 3.0, 8.5):
            yield np.array([0.0, off, off + 1, 2.0]), np.array([1.0, r, r, 1.0])
            yield np.array([0.0, off * r, 1.0, 2.0]), np.array([r, 1.0, 2.0, 1.0])
            yield np.array([0.0, off, 0.1]), np.array([1.0, r, 3.0])
    yield np.array([0.0, 0.0, 0.0, 0.1, 0.1, 0.5]), np.array([1.0, 0.1, 0.01, 0.001, 1.0, 0.3])


def set_rules(prob_best_order, leader_order):
    """The float32 rules (float64 keeps its own); a fresh trace for every function."""
    _quadrature.rule = lambda d: RULE(d) if jnp.dtype(d) == jnp.float64 else (12, prob_best_order)
    _quadrature.leader_rule = lambda d: RULE(d) if jnp.dtype(d) == jnp.float64 else (12, leader_order)
    jax.clear_caches()


def kernels(mu, sigma, delta):
    """prob_best and zeta as keep_count computes them, in the arrays' dtype, with the rules
    of the moment (called with float64 arrays and the float32 rules: truncation only)."""
    valid = jnp.ones(mu.shape, bool)
    order = jnp.argsort(mu, stable=True)
    p = _quadrature.prob_best_kernel(mu, sigma, valid)
    return p / jnp.sum(p), _keep._zeta_sorted(mu[order], sigma[order], valid, delta[order])[0]


def truncation(problems, order):
    """Largest change of p and of zeta, the float32 rules in float64 arithmetic against float64's."""
    _quadrature.rule = _quadrature.leader_rule = lambda d: (12, 16)
    jax.clear_caches()
    ref = [jax.jit(kernels)(*p) for p in problems]
    _quadrature.rule = _quadrature.leader_rule = lambda d: (12, order)
    jax.clear_caches()
    low = [jax.jit(kernels)(*p) for p in problems]
    dp = max(float(np.max(np.abs(np.asarray(a[0]) - np.asarray(b[0])))) for a, b in zip(ref, low))
    dz = max(float(np.max(np.abs(np.asarray(a[1]) - np.asarray(b[1])))) for a, b in zip(ref, low))
    return dp, dz


def float32_error(problems, order):
    """Largest error of a float32 p and of a float32 leader value (both rules at ``order``)
    against the float64 rule on the same float32-rounded input, representable problems only."""
    set_rules(order, order)
    worst_p = worst_l = 0.0
    for mu, sigma in problems:
        m32, s32 = mu.astype(np.float32), sigma.astype(np.float32)
        if not bool(confidence.problem_status(m32, s32).ok):
            continue
        m64, s64 = m32.astype(np.float64), s32.astype(np.float64)
        p = np.asarray(confidence.prob_best(m32, s32), float)
        worst_p = max(worst_p, float(np.max(np.abs(p - np.asarray(confidence.prob_best(m64, s64))))))
        c32 = np.asarray(confidence.leader_curve(m32, s32)[0], float)
        worst_l = max(worst_l, float(np.max(np.abs(c32 - np.asarray(confidence.leader_curve(m64, s64)[0])))))
    return worst_p, worst_l


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--orders", type=int, nargs="+", default=[12, 10, 8, 6])
    ap.add_argument("--ordinary", type=int, default=200, help="ordinary problems for the truncation")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    easy = [tuple(np.asarray(a) for a in p) for p in ordinary(rng, args.ordinary)]
    tough = list(hard(rng))
    print(_common.report_header("The float32 rules' nodes per panel"))
    print(f"truncation over {len(easy)} ordinary problems (float64 arithmetic, against 16 nodes); float32 error over "
          f"the representable ones of {len(tough)} harder problems (against float64 on the rounded input)\n")
    rows = []
    for order in args.orders:
        dp, dz = truncation(easy, order)
        ep, el = float32_error(tough, order)
        rows.append([order, f"{dp / EPS32:.2g}", f"{dz / EPS32:.2g}", f"{ep:.2g}", f"{el:.2g}"])
        print("# " + " | ".join(map(str, rows[-1])), flush=True)
    print(_common.markdown_table(["nodes per panel", "truncation of p (eps32)", "truncation of zeta (eps32)",
                                  "float32 error of p", "float32 error of a leader value"], rows))


if __name__ == "__main__":
    main()
