"""Gaussian-max integrals for UQ-guided hyperparameter optimisation.

Numerical kernels of the UQ-guided scheme of Liu et al. (2024), "UQ-Guided
Hyperparameter Optimization": every candidate's converged loss is modelled as an
independent ``N(mu_i, sigma_i^2)`` (Assumption 3.3), with ``mu_i`` its current
validation loss and ``sigma_i`` the standard deviation of its last few losses
(Eq. 1). From that model this module computes

* :func:`prob_best` -- the probability that each candidate has the lowest
  converged loss (the summands of Eq. 3, for heterogeneous ``sigma``),
* :func:`confidence_curve` -- the confidence curve ``P_k`` of Definition 3.5,
* :func:`leader_curve` and :func:`zeta` -- ``P_1`` among the top ``k`` and its
  change when the uncertainty shrinks (Eq. 6),
* :func:`keep_count` -- the discarding rule of Section 3.3.2 (Eq. 4-7),
* :func:`prob_better` -- the pairwise comparison used by SS+ (Section 3.5),
* :func:`problem_status` -- whether a problem is computed as given (the status
  the bare-array results above cannot carry),
* :func:`window_std` and :func:`window_delta_sigma` -- the on-the-fly
  uncertainty of Eq. 1 and its change (Appendix C).

Quadrature
----------
All integrals have the form ``p_i = int phi_i(x) prod_{j != i} S_j(x) dx`` with
``phi_i`` the density and ``S_j = 1 - Phi((x - mu_j) / sigma_j)`` the survival
function of candidate ``j``. They are evaluated with a fixed, data-dependent
rule and no adaptivity at run time, so every kernel is a static-shape program
that jits, vmaps and runs on accelerators:

* Every problem is first shifted and scaled to standard units: ``mu`` minus the
  lowest valid ``mu``, both divided by the power of two just above the largest
  valid ``sigma`` (exactly; the probabilities are invariant under a common affine
  map). Means are then ``>= 0``, spreads below 1, and the windows below are
  representable whatever the units of the input (``mu`` near 1e6 with ``sigma = 1e-3``; ``sigma = 3e38`` in
  float32, where ``mu + 9 sigma`` overflows).
* The minimum ``U = min_j X_j`` lies in ``[a, b]`` with
  ``a = min_j (mu_j - c sigma_j)`` and ``b = min_j (mu_j + c sigma_j)``,
  ``c = 9``: outside, every integrand is below ``2 Phi(-9) ~ 2e-19``.
* Every feature of every integrand sits close to ``b``: candidate ``j``
  matters only if ``mu_j - c sigma_j < b``, and as ``b <= mu_j + c sigma_j``,
  its density and its survival step live within ``2 c sigma_j`` of ``b``. The
  rule therefore uses Gauss-Legendre panels whose widths shrink geometrically
  towards ``b``, from ``b - a`` down to 4 times the smallest relevant
  ``sigma_j``; the grading ratio adapts to the data, so a candidate with
  ``sigma`` 1e-3 times the others, or candidates thousands of ``sigma``
  apart, need no more nodes (the accuracy degrades slowly beyond ~6 decades
  of ``sigma``; below ``2^-20`` of ``b - a`` the smallest relevant ``sigma`` is
  beyond the rule's resolution, which :func:`problem_status` reports, see
  :func:`prob_best`).
* Products of survival functions are sums of logs. With
  ``L(x) = sum_j log S_j(x)`` (one pass over the candidates), the integrand of
  ``p_i`` at node ``x`` is ``w phi_i S_i^-1 exp(L)``: the node factor
  ``w exp(L)`` times the candidate's hazard ``phi_i / S_i``, so the whole
  vector costs ``O(n * nodes)``, not ``O(n^2 * nodes)``, and the second pass
  is a matrix-vector product. At the nodes ``x <= b``, so
  ``S_i(x) >= Phi(-9) ~ 1e-19`` and the hazard stays below 10 / ``sigma_i``.
  ``S`` is the normal tail at ``|z|``, ``exp(-z^2 / 2) erfcx(|z| / sqrt 2) / 2``
  (or one minus it for ``z < 0``; arguments clipped at ``z = 12``, where
  ``S < 2e-33``), with the scaled complementary error function ``erfcx`` a
  polynomial in a rational map of its argument (degree 18 in float64, relative
  error 1.6e-15; degree 10 in float32; cheaper than XLA's ``erfc``, which
  evaluates an exponential of its own). In float64 ``L`` takes one logarithm
  per product of 8 survival values (each at least ``S(12)``, so the product
  stays a normal number): the logarithm is the dearest operation per element
  on CPU, and this form needs one ``exp``, one polynomial and three divisions
  per (node, candidate) pair and no per-pair logarithm (float32: one per pair).
  That logarithm is built from the exponent bits and a series, so XLA:CPU
  vectorises the pass (its own float64 ``log`` is a scalar library call).
  On CPUs with AVX-512, compiling with ``jaxstop.compiler_options()``
  (``jax.jit(f, compiler_options=jaxstop.compiler_options())``: 512-bit
  vectors) made these kernels 8-23% faster in float64 on an AVX-512 CPU.
* Only the candidates with ``mu_j - c sigma_j < b`` are evaluated: every
  other candidate has ``p_j <= 2 Phi(-9)`` and ``|log S_j| <= Phi(-9)`` at
  every node, and gets exactly 0. The relevant candidates are moved to the
  front and processed in blocks (about ``n / 8`` candidates, 32 to 256, on CPU;
  2,048 on accelerators) by a loop that stops after the last relevant block,
  so the cost follows the number of relevant candidates -- often a small
  fraction of ``n`` once candidates have separated (when the relevant blocks
  cover more than 3/4 of the candidates, one block of all of them is taken
  instead).
* Only the nodes where the minimum can still lie are evaluated. The rule is
  taken one panel at a time in ascending ``x``, and ``exp(L(x))``, the
  probability that every candidate exceeds ``x``, can only fall from one node
  to the next; once it is so small at the end of a panel that all remaining
  nodes together add less than ``1e-4 eps`` to any ``p_i`` (every hazard is
  below ``10 / sigma_i`` at the nodes), the loop stops. Crowded candidates
  push the minimum far below ``b``: with 1,000 candidates within 1% of each
  other about half of the panels, the finely graded ones next to ``b``, are
  never evaluated. Per panel, the first pass (the log-survival sum) keeps each
  block's hazards for the second (the integrals), so the working memory is
  ``O(n x 16)`` per problem for any ``n`` (:func:`leader_curve` scans the
  candidates one by one); :func:`prob_best_batch` and
  :func:`confidence_curve_batch` bound the memory of many problems with
  ``lax.map(..., batch_size=...)``. A ``vmap`` over problems runs one loop for
  the whole batch (as many blocks and panels as its most demanding problem
  needs); on CPU for groups of problems one after another, each group's tile
  within 4 MiB: a program's larger temporaries come fresh from the operating
  system at every call, and a vmapped batch of 1,024 problems paid 3x-4x per
  problem in page faults without the groups.
* :func:`prob_best` and :func:`confidence_curve` are differentiable in forward
  and reverse mode: the derivative evaluates the same sums loop-free, over all
  ``n`` candidates at once (O(n x nodes) memory). :func:`leader_curve` and
  :func:`zeta` are differentiated through their scan over the candidates. Padded
  candidates get exactly zero derivatives. Curves indexed by rank (all but
  :func:`prob_best`) are not differentiable in ``mu`` where two means tie (the
  ranking changes there); the derivative returned is that of the stable order.
  :func:`keep_count` is not differentiable (its integrals run behind branches that
  stay branches under ``vmap``, which JAX cannot differentiate; a derivative through it
  raises ``TypeError`` saying so): differentiate the functions above for its ``curve``,
  ``cost`` or ``zeta``.

float64 uses 13 panels x 16 nodes (208 nodes), float32 13 panels x 12 nodes
(156 nodes); the leader values of :func:`leader_curve` and :func:`zeta` take 13
panels on each side of their split point, in float32 with 8 nodes each (their
truncation is about 0.02 of float32's eps, ``_quadrature.leader_rule``). Measured
against ``scipy.integrate.quad`` (n <= 50, ``sigma`` spread over 3 orders of
magnitude, ties, tiny ``sigma``, far-apart ``mu``) the maximum absolute error of
:func:`prob_best` is 5.7e-11 in float64 and 6.7e-7 in float32, that of the float32
leader curve 2e-7 (see the function docstrings and the tests).

Validity
--------
Structure (ranks, shapes, dtypes, configuration) is checked eagerly and raises
``ValueError`` / ``TypeError`` naming the argument; float16 and bfloat16 are
rejected (``TypeError``): every function computes in float32 or float64. Values
(NaN ``mu``, ``sigma <= 0``) raise when the arrays are concrete; inside
``jax.jit`` such candidates are treated as padding. Padding (``mask`` False) may
hold anything, NaN and inf included: it is made inert before any arithmetic
(``checks.inert_rows``), so it has exactly no effect on values or derivatives.

Status. :class:`KeepCount` carries ``ok`` and ``reason`` (a code of
``jaxstop._src.status.Reason``): ``BAD_INPUT`` (a value had to be left out or
replaced), ``EMPTY`` (no valid candidate), ``UNREPRESENTABLE`` (the dtype cannot
carry the problem: the float spacing of a relevant ``mu`` above ``2^-10`` of its
spread against the narrowest other relevant candidate, ``hypot(sigma_j, sigma_l)``
(a lone relevant candidate is exact whatever its rounding), e.g. float32 means ``1e6``
and ``1e6 + 0.003``, which are one number;
spreads beyond the dtype's range; a ``sigma`` below ``2^-20`` of the window of
:func:`prob_best`'s rule, which it cannot resolve; a shrunk ``sigma`` that overflowed),
``NOT_FINITE``. Candidates that would make :func:`prob_best`'s problem unrepresentable
but together have a chance of being the best that the confidence curve cannot show
(``|U| Phi(-12) + prod S_i(x*)``, the product over the other candidates at the lowest
``mu_j - 12 sigma_j`` of them, at most a quarter of the dtype's ``eps``: 5.6e-17 in
float64, 3.0e-8 in float32, so that no ``P_k`` moves by half an ulp of 1) are left out: their ``p`` is exactly 0, as for the candidates outside the window, and the
problem is represented. Runs whose loss plateaus at 0.999 with ``sigma`` at a floor of
1e-6, far behind leaders whose spreads reach 0.999, are the usual case. The functions that return bare arrays or a
:class:`ConfidenceCurve` (:func:`prob_best`, :func:`confidence_curve`,
:func:`leader_curve`, :func:`zeta` and the batch forms) have no field for it:
their results are finite whatever the inputs, and :func:`problem_status` (or
``KeepCount.reason``) says whether they answer the problem as given.

API conventions (shared with :mod:`jaxstop.gp` and :mod:`jaxstop.regret`): ``mask`` is
the one name for "which candidates are real"; a result that can fail has a boolean
``ok`` field (:class:`KeepCount`, :class:`ProblemStatus`). Nothing here is random, so
no function takes a key.

Files
-----
* ``_curves.py``: :func:`prob_best`, :func:`confidence_curve`, :func:`leader_curve`,
  :func:`effective_mask`, :func:`problem_status`, :func:`prob_better` and
  :class:`ConfidenceCurve`.
* ``_keep.py``: :func:`zeta`, :func:`keep_count` and :class:`KeepCount`.
* ``_batch.py``: :func:`prob_best_batch` and :func:`confidence_curve_batch`.
* ``_window.py``: :func:`window_std` and :func:`window_delta_sigma`.
* ``_quadrature.py``: the graded rule and the kernels described under Quadrature.
* ``_standardise.py``: the shift and scale to standard units, the inert padding and
  the status of a problem (:func:`problem_status`, :class:`ProblemStatus`).
* ``_validate.py``: eager validation of the arguments.

The Gaussian tail numerics (``erfcx``, survival functions, hazards, a vectorised
float64 ``log``) live in ``jaxstop._src.numerics``.
"""

from jaxstop.confidence._batch import confidence_curve_batch as confidence_curve_batch
from jaxstop.confidence._batch import prob_best_batch as prob_best_batch
from jaxstop.confidence._curves import ConfidenceCurve as ConfidenceCurve
from jaxstop.confidence._curves import confidence_curve as confidence_curve
from jaxstop.confidence._curves import effective_mask as effective_mask
from jaxstop.confidence._curves import leader_curve as leader_curve
from jaxstop.confidence._curves import prob_best as prob_best
from jaxstop.confidence._curves import prob_better as prob_better
from jaxstop.confidence._curves import problem_status as problem_status
from jaxstop.confidence._keep import KeepCount as KeepCount
from jaxstop.confidence._keep import keep_count as keep_count
from jaxstop.confidence._keep import zeta as zeta
from jaxstop.confidence._profile import PHASE_FRACTIONS as PHASE_FRACTIONS
from jaxstop.confidence._profile import Profile as Profile
from jaxstop.confidence._profile import default_breakpoints as default_breakpoints
from jaxstop.confidence._profile import delta_sigma_profile as delta_sigma_profile
from jaxstop.confidence._standardise import ProblemStatus as ProblemStatus
from jaxstop.confidence._window import window_delta_sigma as window_delta_sigma
from jaxstop.confidence._window import window_std as window_std

__all__ = [
    "ConfidenceCurve",
    "KeepCount",
    "PHASE_FRACTIONS",
    "Profile",
    "ProblemStatus",
    "confidence_curve",
    "confidence_curve_batch",
    "default_breakpoints",
    "delta_sigma_profile",
    "effective_mask",
    "keep_count",
    "leader_curve",
    "prob_best",
    "prob_best_batch",
    "prob_better",
    "problem_status",
    "window_delta_sigma",
    "window_std",
    "zeta",
]
