"""Bayesian optimal stopping of one training run (BO-BOS).

Numerical kernels of the Bayesian optimal stopping (BOS) step of BO-BOS
(Dai et al., "Bayesian Optimization Meets Bayesian Optimal Stopping", ICML 2019):

* :class:`ExpDecayKernel` -- the learning-curve kernel
  ``k(n, n') = beta**alpha / (n + n' + beta)**alpha`` (Eq. (5) of Dai et al.;
  the freeze-thaw kernel of Swersky et al., 2014) as a ``tinygp`` kernel.
* :func:`fit_curve_gp` -- maximum-likelihood fit of ``alpha`` and ``beta`` on the
  first ``N0`` validation errors (fixed noise variance ``1e-3``, zero mean or an
  optional constant asymptote).
* :func:`simulate` -- joint posterior draws of the errors in epochs
  ``N0+1..N`` (the forward simulation of Appendix B); paths that leave (0, 1) are
  masked, not dropped.
* :func:`backward_induction` -- the approximate backward induction of Appendix B
  with the 0-K loss (Eqs. (2)-(4)) on a grid of the running-mean statistic, in two
  modes: ``"compat"`` reproduces the authors' released code decision for decision,
  ``"corrected"`` (default) follows the paper's formulation.
* :func:`summary_statistic` -- that statistic on an observed curve, in its two
  settings (``statistic=``): ``"all_epochs"``, the paper's mean of epochs ``1..n``
  (Section 3.2; the default of ``"corrected"``), and ``"after_n0"``, the released
  code's mean of epochs ``N0+1..n`` (the default of ``"compat"``;
  :func:`resolve_statistic`). One definition (``_statistic.py``) serves the
  simulated paths and the lookup.
* :func:`solve` / :func:`solve_batch` -- fit + simulate + induction for one or many
  trials; :func:`decide` -- table lookup during training.
* :func:`k1_schedule` and :func:`xi` -- the ``K1_t`` and ``xi_t`` schedules of
  Theorems 1-2.

Invalid numbers and status. Structure (shapes, static settings) and float16 /
bfloat16 arrays raise ``ValueError`` / ``TypeError`` naming the argument. Values
(NaN, inf, out of range) raise ``ValueError`` naming the argument when concrete;
inside ``jit`` they make the result void with ``ok`` False and ``reason ==
Reason.BAD_INPUT`` (:class:`DecisionTable`, :class:`Paths` and :class:`CurveGP`
carry an int32 ``reason`` field; a void table holds only forced continues, and
:func:`decide` never stops on a table that is not ``ok``). Padded paths
(``mask`` False in :func:`backward_induction`) are replaced before any arithmetic.
:func:`solve` gives the same bits eagerly, under ``jit`` and as a trial of
:func:`solve_batch` with ``batch_size=1`` (the CPU default); vectorised groups may
count paths that lie within rounding of a bin edge differently.

Action codes (shared by both modes, and equal to the released code's)::

    ACTION_FORCED_CONTINUE = 0   # too few simulated paths (or none): keep training
    ACTION_D2 = 1                # d2: "the final error will beat the incumbent"; keep training
    ACTION_STOP = 2              # d1: "it will not"; stop training
    ACTION_CONTINUE = 3          # d0: continue (the continuation loss is smallest)

Only ``ACTION_STOP`` stops training (Section 3.2: a d2 decision does not stop, as
stopping a winner would not serve BO).

How the backward pass is organised. The paths enter only through counts: a scan
over steps accumulates each path's running mean, bins it, and scatters the
combined index ``(step, event, bin_k, bin_{k+1})`` of all paths into one
histogram (``event`` = on which side of the incumbent the path's final error
lies). From those
counts the induction is a recursion of ``(num_bins x num_bins)`` matrix-vector
products over the steps, so its cost does not depend on the number of paths.
Counts are exact integers, so the recursion forms the same sums as the per-path
loops of the released code, up to the order of floating-point additions.
:func:`solve` draws, bins and counts the paths in chunks, so memory does not grow
with ``num_paths``.

Files: ``_curve_gp.py`` (kernel, fit, posterior; the kernel-agnostic GP math --
masked conditioning, likelihood and gradient, posterior moments, the multistart and
projected-Adam loops -- is that of ``jaxstop._src.gp_likelihood`` and
``jaxstop._src.optim``, shared with :mod:`jaxstop.gp`), ``_simulate.py`` (forward
simulation), ``_statistic.py`` (the summary statistic), ``_induction.py`` (binning,
transition counts, the backward recursion, the decision table and its status),
``_backward.py`` (:func:`backward_induction` on given paths), ``_decide.py`` (the lookup), ``_solve.py``
(the fused solve of one or many trials), ``_schedules.py`` (``K_{1,t}`` and
``xi_t``; the formulas are shared with :mod:`jaxstop.policies.bo_bos` through
``jaxstop._src.schedules``) and ``_validate.py`` (argument checks: structure, and
``screen``, the one value check that raises when concrete and becomes a ``bad``
flag when traced).
"""

from __future__ import annotations

from jaxstop.bos._curve_gp import CurveGP as CurveGP
from jaxstop.bos._curve_gp import ExpDecayKernel as ExpDecayKernel
from jaxstop.bos._curve_gp import curve_posterior as curve_posterior
from jaxstop.bos._curve_gp import fit_curve_gp as fit_curve_gp
from jaxstop.bos._induction import ACTION_CONTINUE as ACTION_CONTINUE
from jaxstop.bos._induction import ACTION_D2 as ACTION_D2
from jaxstop.bos._induction import ACTION_FORCED_CONTINUE as ACTION_FORCED_CONTINUE
from jaxstop.bos._induction import ACTION_STOP as ACTION_STOP
from jaxstop.bos._induction import DecisionTable as DecisionTable
from jaxstop.bos._backward import backward_induction as backward_induction
from jaxstop.bos._decide import decide as decide
from jaxstop.bos._schedules import k1_schedule as k1_schedule
from jaxstop.bos._schedules import xi as xi
from jaxstop.bos._simulate import Paths as Paths
from jaxstop.bos._simulate import simulate as simulate
from jaxstop.bos._solve import solve as solve
from jaxstop.bos._solve import solve_batch as solve_batch
from jaxstop.bos._statistic import STATISTICS as STATISTICS
from jaxstop.bos._statistic import resolve_statistic as resolve_statistic
from jaxstop.bos._statistic import summary_statistic as summary_statistic

__all__ = [
    "ACTION_CONTINUE",
    "ACTION_D2",
    "ACTION_FORCED_CONTINUE",
    "ACTION_STOP",
    "STATISTICS",
    "CurveGP",
    "DecisionTable",
    "ExpDecayKernel",
    "Paths",
    "backward_induction",
    "curve_posterior",
    "decide",
    "fit_curve_gp",
    "k1_schedule",
    "resolve_statistic",
    "simulate",
    "solve",
    "solve_batch",
    "summary_statistic",
    "xi",
]
