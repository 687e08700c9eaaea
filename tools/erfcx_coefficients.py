"""Coefficients of the scaled complementary error function used by ``jaxstop.confidence``.

``erfcx(a) = exp(a^2) erfc(a)`` on ``0 <= a <= 12 / sqrt 2`` (standardised distances up
to ``jaxstop._src.numerics.ZMAX = 12``) as a polynomial in

    s = (2 t - t0 - 1) / (1 - t0),   t = (K - a) / (K + a),   t0 = (K - 12 / sqrt 2) / (K + 12 / sqrt 2),

which maps the interval onto ``[-1, 1]``. The rational map ``t`` takes the slow
``1 / (a sqrt pi)`` decay of ``erfcx`` to a function of ``s`` that a polynomial of low
degree resolves. The polynomial is the Chebyshev interpolant at the ``degree + 1``
Chebyshev points of the first kind, with function values, coefficients and the
conversion to powers of ``s`` all in 50-digit arithmetic (mpmath), so the float64
coefficients carry no cancellation error of their own. The script prints the constants
and the maximum relative error of their float64 Horner evaluation on a dense grid.

Usage (needs mpmath, which the ``bench`` extra brings): ``python tools/erfcx_coefficients.py``
for the float64 constants, ``--degree 10 --name _ERFCX_COEF32`` for the float32 ones.
"""

from __future__ import annotations

import argparse

import mpmath
import numpy as np

A_MAX = 12.0 / np.sqrt(2.0)


def fit(k: float, degree: int, digits: int = 50) -> tuple[float, list[float]]:
    """``(t0, coefficients of s^0 .. s^degree)`` of the interpolant."""
    mpmath.mp.dps = digits
    kk = mpmath.mpf(k)
    amax = 12 / mpmath.sqrt(2)
    t0 = (kk - amax) / (kk + amax)
    n = degree + 1
    nodes = [mpmath.cos(mpmath.pi * (i + mpmath.mpf(1) / 2) / n) for i in range(n)]
    values = []
    for s in nodes:
        t = t0 + (s + 1) * (1 - t0) / 2
        a = kk * (1 - t) / (1 + t)
        values.append(mpmath.erfc(a) * mpmath.exp(a * a))
    cheb = [
        2 * mpmath.fsum(v * mpmath.cos(mpmath.pi * j * (i + mpmath.mpf(1) / 2) / n) for i, v in enumerate(values)) / n
        for j in range(n)
    ]
    cheb[0] /= 2
    # T_0 = 1, T_1 = s, T_j = 2 s T_{j-1} - T_{j-2}, as power coefficients
    basis = [[mpmath.mpf(1)], [mpmath.mpf(0), mpmath.mpf(1)]]
    while len(basis) < n:
        prev, prev2 = basis[-1], basis[-2]
        nxt = [mpmath.mpf(0)] + [2 * c for c in prev]
        for i, c in enumerate(prev2):
            nxt[i] -= c
        basis.append(nxt)
    power = [mpmath.mpf(0)] * n
    for cj, tj in zip(cheb, basis):
        for i, c in enumerate(tj):
            power[i] += cj * c
    return float(t0), [float(c) for c in power]


def max_rel_error(k: float, t0: float, coef: list[float], num: int = 20001) -> float:
    """Maximum relative error of the float64 Horner evaluation against mpmath."""
    a = np.concatenate([np.linspace(0.0, A_MAX, num), np.geomspace(1e-12, 1.0, 2001)])
    ref = np.array([float(mpmath.erfc(x) * mpmath.exp(mpmath.mpf(x) ** 2)) for x in a])
    s = (2.0 * (k - a) / (k + a) - (t0 + 1.0)) / (1.0 - t0)
    r = np.full_like(s, coef[-1])
    for c in coef[-2::-1]:
        r = r * s + c
    return float(np.max(np.abs(r / ref - 1.0)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=float, default=4.0)
    parser.add_argument("--degree", type=int, default=18, help="18 for float64, 10 for float32")
    parser.add_argument("--name", default="_ERFCX_COEF", help="_ERFCX_COEF (float64) or _ERFCX_COEF32")
    args = parser.parse_args()
    t0, coef = fit(args.k, args.degree)
    print(f"_ERFCX_K = {args.k!r}")
    print(f"_ERFCX_T0 = {t0!r}")
    print(f"{args.name} = (")
    for c in coef:
        print(f"    {c!r},")
    print(")")
    print(f"# max relative error (float64 Horner, vs mpmath): {max_rel_error(args.k, t0, coef):.2e}")


if __name__ == "__main__":
    main()
