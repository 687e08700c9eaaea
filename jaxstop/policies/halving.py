"""Successive halving, Hyperband and BOHB: plain baselines and UQ-guided versions.

The plain policies are the classic multi-fidelity schedulers; with ``uq=True``
they become SH+, HB+ and BOHB+ of Liu et al. (2024), "UQ-Guided Hyperparameter
Optimization for Iterative Learners", which differ from the baselines only in
how many candidates a round keeps (Section 3.3.2, Eq. 4-7, via
:func:`jaxstop.confidence.keep_count`).

Schedule
--------
Everything static is computed in Python by :func:`halving_schedule` from
``(num_configs, max_budget, eta, min_budget)``. With ``s_max`` the largest ``s``
with ``min_budget * eta**s <= max_budget``, bracket ``s`` (Li et al., 2017)
starts ``n_0`` configurations and has rungs ``i = 0..s`` with
``n_i = max(1, n_0 // eta**i)`` configurations trained to
``r_i = round(max_budget / eta**(s - i))`` epochs (half up; ``r_s = max_budget``).
:func:`sh` runs the bracket ``s_max`` with ``n_0 = min(num_configs, eta**s_max)``
(or ``num_start``); :func:`hyperband` and :func:`bohb` run the brackets
``s = s_max, ..., 0`` in sequence with ``n_0 = ceil((s_max + 1) eta**s / (s + 1))``,
clipped to ``num_configs``.

Rounds, checkpoints and budget
------------------------------
A rung is a *round* with a fixed budget ``C_i = n_i (r_i - r_{i-1})`` epochs
(``r_{-1} = 0``): promoted configurations resume from their checkpoint
(``Job.start`` = epochs already trained), so no epoch is charged twice. Both
versions share the round budgets and one rule to spend them: the round's budget
plus what the previous round could not allocate (``carry``) is split equally, in
whole epochs, among the round's members that can still train; each gets
``e = min(budget // k, max_budget - epochs)`` more epochs and the rest carries
over. A member whose curve ended (a job that came back before its budget) or that
reached ``max_budget`` is *complete*: it still competes but gets no budget. For
the plain policy on full-length curves this is exactly textbook successive
halving (``e = r_i - r_{i-1}``, nothing carried). The UQ version keeps a
data-dependent number ``k`` of candidates; when it keeps more than the round's
budget in epochs it keeps the best ``budget`` of the trainable ones (one epoch
each). When no kept member can train, every later round of the bracket would be
empty: the bracket ends at once, and the best member counts at its last rung.
Budget that cannot be allocated by the end of a bracket, and epochs allocated to
jobs whose curves ended first, are *unspent*: for both versions
``spent + unspent`` equals the schedule's budget (``HalvingInfo.unspent``), so
neither ever spends more than :attr:`HalvingSchedule.total_budget` (which includes
the profile of the UQ versions, see below). The UQ version leaves budget unspent when
its survivors reach ``max_budget`` early.

Uncertainty (``uq=True``)
-------------------------
``report`` keeps every candidate's last ``window + 1`` losses. A candidate's
``mu`` is its current loss and ``sigma = max(window_std, params.min_sigma)`` over its
last ``window`` losses (``ddof = 1``, as :func:`jaxstop.confidence.window_std`). At
the end of a round the next round keeps ``keep_count(mu, sigma, delta_sigma, R,
rule=keep_rule).keep`` with ``R`` the next round's budget including the carry
(``tau = P_{k*}`` from Eq. 7, and the smallest ``k`` with ``P_k >= tau``).

``delta_sigma`` -- ``Delta_t sigma`` of Eq. (6), how much one more epoch lowers a
candidate's ``sigma`` -- comes from the factory's ``delta_estimate`` (Appendix C):

* ``"profile"`` (default; the paper's main method): before its first bracket the
  policy trains ``num_profile`` (default 3) candidates, drawn uniformly without
  replacement, from scratch to ``max_budget``, and fits
  :func:`jaxstop.confidence.delta_sigma_profile` (the phase-wise model of the mean
  ``sigma(t)``, breakpoints at 6, 50 and 180 of 200 epochs scaled to ``max_budget``) to
  their curves; a candidate at epoch ``t`` then gets the profile's
  ``Delta_t sigma = sigma(t) - sigma(t + 1)``, which may be negative. The profiling
  jobs are the study's first jobs: in the batch protocol one batch, with
  ``policy.history = max_budget`` so that ``Result.history`` holds each profiled
  candidate's whole curve (one job at a time, ``report`` collects it). If the fit
  fails (``Profile.ok`` False: e.g. every profiled curve ended before a phase), the
  ``"window"`` estimate stands in; ``HalvingInfo.profile_ok`` says which.
* ``"window"``: Appendix C's on-the-fly alternative, the std of the previous window
  minus the current one's (:func:`jaxstop.confidence.window_delta_sigma`).
* ``"window_var"``: the same with the variances, Appendix C's formula as printed:
  ``(1/delta) sum (l - E)^2`` over the previous window minus over the current one,
  with ``delta + 1`` the window's losses (``window_delta_sigma(kind="variance")``; in
  units of ``sigma^2``).
* ``"offline"``: a given profile, ``params.delta_profile[t - 1]`` (shape
  ``(max_budget,)``, e.g. ``delta_sigma_profile(...).delta`` from an earlier launch);
  its NaN entries (the default) fall back to the ``"window"`` estimate.

A finite ``params.delta_sigma`` overrides all of them (one value for every candidate
and epoch). With fewer than two losses a candidate has no uncertainty estimate, and
the window estimates need a third (the previous window needs two losses of its own:
with two, the estimate would be 0, ``zeta`` 0, and the round would keep every
candidate with a positive probability of being best). A round with a member short of
what its estimate needs (e.g. the first rung of a bracket with ``r_0 = 1``, or
``r_0 = 2`` with a window estimate) keeps the plain number ``n_{i+1}``
(``HalvingInfo.fallback``); with a profile entry (``"profile"``, ``"offline"``) or a
given ``params.delta_sigma`` two losses suffice. Without ``report`` calls the UQ
versions therefore behave like the plain ones.

Profiling budget. The profile's ``num_profile * max_budget`` epochs come on top of
the brackets' budget: the brackets (sizes, round budgets, carry) stay the plain
schedule's, so SH+ differs from SH only in its keep rule and this known overhead;
taking the profile from the rounds is not possible in general (SH on 27 candidates and
27 epochs has 54 epochs after its first rung, a profile of three costs 81). The
profiled candidates are full evaluations: they count for the incumbent at rung
``max_budget`` (and, in BOHB, for the model), but they do not join a bracket (a bracket
draws its rows independently and may train one of them again). ``halving_schedule(...,
uq=True, num_profile=...)`` includes the profile in ``total_budget``
(``profile_budget``) and in ``max_jobs`` (``num_profile`` jobs), so
``policy.limits.max_jobs`` stays a bound and ``spent + unspent = total_budget`` at the
end of the study (a profiled curve that ends early leaves the rest unspent).

The UQ versions therefore spend more than the plain ones, and their profiled
candidates can become the answer: SH+ against SH as built compares the keep rule *plus*
``num_profile`` extra full evaluations. Which comparison each setting makes:

* default: the paper's main method as a user runs it; compare it with the plain version
  at equal budget (:func:`jaxstop.sim.compare` with a ``budget``, which restarts the
  plain version to spend the same), not at the plain schedule's;
* ``profile_incumbent=False``: the profiled candidates stay out of the answer (their
  epochs are still spent), so SH+ and SH return from the same brackets and differ only
  in the keep rule (at SH+'s cost);
* ``delta_estimate="offline"`` with ``params.delta_profile`` from an earlier launch, or a
  window estimate: no profiling jobs, the plain schedule's budget exactly; a given
  profile is not charged, so label such a row as uncharged.

Incumbent
---------
``info.incumbent`` is the configuration the run would return now: the lowest
loss among the results at the highest nominal rung budget ``r_i`` reached so far
(over all brackets; complete members that survive into a later rung count at that
rung with their final loss; profiled candidates count at ``max_budget``). Nominal
budgets are the plain schedule's, so both versions return from the same rung.

Status
------
``info.ok`` and ``info.reason`` (:class:`HalvingInfo`) are a study-wide status: False
from the first tell that met bad data on -- a non-finite loss, traced params outside
their ranges (replaced by their defaults, see :class:`HalvingParams`; outside ``jit``
they raise) -- or a UQ keep decision that :func:`jaxstop.confidence.keep_count` could not
compute as given. The study runs on either way. A ``min_sigma`` far below the spread
of the losses makes the decisions with a plateaued candidate (a flat window, ``sigma``
at the floor) ``UNREPRESENTABLE``: on the AlexNet curves (errors in [0.7, 1]) a floor of
1e-6 did in 9 of 16 Hyperband+ studies; the default ``2^-18`` (see
:class:`HalvingParams`) in none.

BOHB model
----------
:func:`bohb` proposes the configurations of a bracket's first rung from the rows
of a candidate table (``candidates``, unit cube, shape (num_configs, d)), without
replacement within a bracket. A fraction ``params.random_fraction`` (1/3) of the
proposals, and all of them until a model exists, are uniform. The model is BOHB's
(Falkner et al., 2018) TPE: the results at the largest rung budget with enough of
them are split into the best ``max(d + 1, floor(top_fraction * n))``
(``top_fraction`` = 0.15) and the next ``max(d + 1, floor((1 - top_fraction) n))``;
a model exists when both parts hold at least ``d + 1`` results. A loss that is not
finite (a diverged run's NaN, +-inf) counts as +inf, after every finite one, as in
HpBandSter's BOHB: the run is among the bad results and its region is avoided. Each part gets a
product-Gaussian KDE ``l`` (good) and ``g`` (bad) with normal-reference bandwidths
``max(1.06 std n^(-1/(d+4)), min_bandwidth)``. A model-based proposal scores
``num_samples`` (64) rows drawn uniformly without replacement from the rows not
yet in the bracket by ``l(x) / g(x)`` and takes the best: TPE's acquisition on a
finite candidate table (BOHB itself draws its candidates from a widened ``l``).

Eager use
---------
The pieces of ``init`` / ``ask`` / ``report`` / ``tell`` are jitted once per policy,
and outside ``jax.jit`` the keep decision calls :func:`jaxstop.confidence.keep_count`
directly, so a hand-written Python loop over the protocol compiles little; inside
``jit`` / ``vmap`` / ``lax.scan`` (e.g. :func:`jaxstop.sim.run`) everything is
traced into one program.

Layout
------
This file holds the public factories; the parts live in the private package
``_halving/`` (shared with :mod:`jaxstop.policies.subsampling`): ``schedule.py``
(brackets, rungs, :func:`halving_schedule`), ``engine.py`` (the rung engine: one step
function per piece of the one-job protocol), ``batch.py`` (the batch protocol),
``build.py`` (the policy from a schedule), ``state.py`` (:class:`HalvingState`,
:class:`HalvingInfo`), ``uncertainty.py`` (the windowed uncertainty and the UQ keep
decision), ``profiling.py`` (the profiling phase, :class:`HalvingProfileState`),
``bohb_density.py`` (BOHB's density-ratio model), ``params.py`` (:class:`HalvingParams`,
shared argument checks) and ``slots.py`` (ranking and sampling of slots).
"""

from __future__ import annotations

from jax.typing import ArrayLike

from jaxstop._src import checks as _checks
from jaxstop.policies._base import Policy
from jaxstop.policies._halving.bohb_density import HalvingBOHBState as HalvingBOHBState
from jaxstop.policies._halving.build import halving_policy
from jaxstop.policies._halving.state import HalvingInfo as HalvingInfo
from jaxstop.policies._halving.state import HalvingState as HalvingState
from jaxstop.policies._halving.params import HalvingParams as HalvingParams
from jaxstop.policies._halving.params import check_candidates, float_dtype
from jaxstop.policies._halving.profiling import HalvingProfileState as HalvingProfileState
from jaxstop.policies._halving.schedule import Bracket as Bracket
from jaxstop.policies._halving.schedule import HalvingSchedule as HalvingSchedule
from jaxstop.policies._halving.schedule import DEFAULT_NUM_PROFILE as DEFAULT_NUM_PROFILE
from jaxstop.policies._halving.schedule import check_common
from jaxstop.policies._halving.schedule import halving_schedule as halving_schedule
from jaxstop.policies._halving.uncertainty import HalvingUQState as HalvingUQState
from jaxstop.policies._halving.uncertainty import DELTA_ESTIMATES as DELTA_ESTIMATES
from jaxstop.policies._halving.uncertainty import check_delta_estimate, check_keep_rule, check_window

__all__ = [
    "Bracket",
    "DEFAULT_NUM_PROFILE",
    "DELTA_ESTIMATES",
    "HalvingBOHBState",
    "HalvingInfo",
    "HalvingParams",
    "HalvingProfileState",
    "HalvingSchedule",
    "HalvingState",
    "HalvingUQState",
    "bohb",
    "halving_schedule",
    "hyperband",
    "sh",
]


def _uq_options(uq, window, keep_rule, delta_estimate, num_profile, profile_incumbent):
    """Checks the UQ options; returns them with the number of profiled candidates for
    :func:`halving_schedule` (``None``: its default)."""
    _checks.boolean(uq, "uq")
    if not _checks.boolean(profile_incumbent, "profile_incumbent") and (delta_estimate != "profile" or not uq):
        raise ValueError('profile_incumbent is an option of uq=True with delta_estimate="profile"')
    window = check_window(window)
    keep_rule = check_keep_rule(keep_rule)
    delta_estimate = check_delta_estimate(delta_estimate)
    if delta_estimate != "profile" or not uq:
        if num_profile:
            raise ValueError('num_profile is an option of uq=True with delta_estimate="profile"')
        num_profile = 0
    elif num_profile is not None and num_profile == 0:
        raise ValueError('delta_estimate="profile" needs num_profile >= 1 (or another delta_estimate)')
    return window, keep_rule, delta_estimate, num_profile


def sh(
    num_configs: int,
    max_budget: int,
    eta: int = 3,
    uq: bool = False,
    *,
    num_start: int | None = None,
    min_budget: int = 1,
    window: int = 10,
    keep_rule: str = "argmax",
    delta_estimate: str = "profile",
    num_profile: int | None = None,
    profile_incumbent: bool = True,
    candidates: ArrayLike | None = None,
    dtype=None,
) -> Policy:
    """Successive halving (SH) or, with ``uq=True``, SH+ of Liu et al. (2024).

    One bracket (see the module docstring for the schedule, the checkpoint and
    budget accounting and the incumbent): ``num_start`` configurations drawn
    uniformly without replacement from the ``num_configs`` table rows train
    ``r_0`` epochs; each round keeps the best ``n_{i+1}`` (plain) or the
    UQ-guided count of Eq. (4)-(7) (``uq=True``) and resumes them. The study
    terminates after the last rung.

    Args:
        num_configs: Rows of the candidate table.
        max_budget: Epochs of the last rung.
        eta: Halving rate, an int >= 2.
        uq: Use the UQ-guided keep rule (SH+).
        num_start: Configurations of the first rung (default
            ``min(num_configs, eta**s_max)``).
        min_budget: Fewest epochs of the first rung.
        window: Losses in the uncertainty window (``uq=True``).
        keep_rule: ``"argmax"`` or ``"crossing"``, see
            :func:`jaxstop.confidence.keep_count`.
        delta_estimate: How the UQ keep rule gets ``Delta_t sigma`` (module
            docstring, Uncertainty): ``"profile"`` (default, Appendix C's main
            method: the policy first trains ``num_profile`` candidates to
            ``max_budget`` and fits :func:`jaxstop.confidence.delta_sigma_profile`),
            ``"window"`` (the std difference of two consecutive windows),
            ``"window_var"`` (Appendix C's variance difference, as printed) or
            ``"offline"`` (``params.delta_profile``).
        num_profile: Candidates profiled with ``delta_estimate="profile"`` (default
            ``min(DEFAULT_NUM_PROFILE, num_configs)`` = 3 on tables of 3 or more rows).
        profile_incumbent: Whether the profiled candidates (fully trained) can be the
            incumbent, as in the paper (default). ``False`` keeps them out of the answer
            (their epochs are still spent): SH+ then differs from SH only in its keep rule
            and the profile's cost, the comparison that isolates the keep rule (module
            docstring, Profiling budget).
        candidates: Optional configuration vectors of the rows, shape
            (num_configs, d), returned as ``job.x``.
        dtype: Floating dtype of losses in the state (default: JAX's default float).

    Returns:
        A :class:`~jaxstop.policies.Policy` with :class:`HalvingParams`; ``report``
        is None for the plain version. ``policy.limits.max_jobs`` (=
        ``halving_schedule("sh", ..., uq, num_profile=...).max_jobs``) bounds its
        number of jobs.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import sim
        >>> from jaxstop.policies.halving import sh
        >>> final = jnp.linspace(0.9, 0.1, 9)
        >>> table = sim.CurveTable(final[:, None] + 1.0 / jnp.arange(1, 10)[None, :])
        >>> trace = sim.run(sh(9, max_budget=9, eta=3), table, jax.random.key(0), max_jobs=13)
        >>> int(trace.incumbent), int(trace.budget), int(trace.num_jobs)   # 9 x 1 + 3 x 2 + 1 x 6
        (8, 21, 13)
    """
    num_configs, max_budget, eta, min_budget = check_common(num_configs, max_budget, eta, min_budget)
    window, keep_rule, delta_estimate, num_profile = _uq_options(uq, window, keep_rule, delta_estimate, num_profile,
                                                                 profile_incumbent)
    fdtype = float_dtype(dtype)
    cand = check_candidates(candidates, num_configs, fdtype, False, "sh")
    sched = halving_schedule("sh", num_configs, max_budget, eta, uq, num_start=num_start, min_budget=min_budget,
                             num_profile=num_profile)
    return halving_policy(sched, num_configs, max_budget, bool(uq), window, keep_rule, cand, fdtype, "uniform", 0,
                          delta_estimate, profile_incumbent)


def hyperband(
    num_configs: int,
    max_budget: int,
    eta: int = 3,
    uq: bool = False,
    *,
    min_budget: int = 1,
    window: int = 10,
    keep_rule: str = "argmax",
    delta_estimate: str = "profile",
    num_profile: int | None = None,
    profile_incumbent: bool = True,
    candidates: ArrayLike | None = None,
    dtype=None,
) -> Policy:
    """Hyperband (HB) or, with ``uq=True``, HB+ of Liu et al. (2024).

    The SH brackets ``s = s_max, ..., 0`` of Li et al. (2017) run in sequence,
    each with configurations drawn uniformly without replacement from the table
    rows (independently per bracket); HB+ uses the UQ-guided keep rule inside
    every bracket. The study terminates after the last bracket.

    Args:
        num_configs, max_budget, eta, uq, min_budget, window, keep_rule,
        delta_estimate, num_profile, profile_incumbent, candidates, dtype: As in
            :func:`sh` (the profile runs once, before the first bracket).

    Returns:
        A :class:`~jaxstop.policies.Policy`; ``halving_schedule("hyperband", ...)``
        gives its brackets and ``max_jobs``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import sim
        >>> from jaxstop.policies.halving import halving_schedule, hyperband
        >>> final = jnp.linspace(0.9, 0.1, 9)
        >>> table = sim.CurveTable(final[:, None] + 1.0 / jnp.arange(1, 10)[None, :])
        >>> sched = halving_schedule("hyperband", 9, 9)
        >>> trace = sim.run(hyperband(9, 9), table, jax.random.key(0), max_jobs=sched.max_jobs)
        >>> int(trace.incumbent), int(trace.budget) == sched.total_budget
        (8, True)
    """
    num_configs, max_budget, eta, min_budget = check_common(num_configs, max_budget, eta, min_budget)
    window, keep_rule, delta_estimate, num_profile = _uq_options(uq, window, keep_rule, delta_estimate, num_profile,
                                                                 profile_incumbent)
    fdtype = float_dtype(dtype)
    cand = check_candidates(candidates, num_configs, fdtype, False, "hyperband")
    sched = halving_schedule("hyperband", num_configs, max_budget, eta, uq, min_budget=min_budget,
                             num_profile=num_profile)
    return halving_policy(sched, num_configs, max_budget, bool(uq), window, keep_rule, cand, fdtype, "uniform", 0,
                          delta_estimate, profile_incumbent)


def bohb(
    num_configs: int,
    max_budget: int,
    eta: int = 3,
    uq: bool = False,
    *,
    candidates: ArrayLike,
    min_budget: int = 1,
    window: int = 10,
    keep_rule: str = "argmax",
    delta_estimate: str = "profile",
    num_profile: int | None = None,
    profile_incumbent: bool = True,
    num_samples: int = 64,
    dtype=None,
) -> Policy:
    """BOHB (Falkner et al., 2018) or, with ``uq=True``, BOHB+ of Liu et al. (2024).

    Hyperband's brackets with model-based proposals: the first rung of every
    bracket is filled one configuration at a time by the density-ratio model
    described in the module docstring, fitted to all results so far; the rest is
    :func:`hyperband` (BOHB+ uses the UQ-guided keep rule).

    Args:
        num_configs, max_budget, eta, uq, min_budget, window, keep_rule,
        delta_estimate, num_profile, profile_incumbent, dtype: As in :func:`sh` (the
            profiled candidates are drawn uniformly; their results enter the model, with
            ``profile_incumbent=False`` too).
        candidates: Configuration vectors of the table rows in the unit cube,
            shape (num_configs, d), d >= 1 (required: the model lives on them).
        num_samples: Rows a model-based proposal scores by the density ratio
            ``l(x) / g(x)`` (good over bad), drawn uniformly without replacement
            from the rows not yet in the bracket.

    Returns:
        A :class:`~jaxstop.policies.Policy`; its ``ask`` uses the key.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxstop import sim
        >>> from jaxstop.policies.halving import bohb, halving_schedule
        >>> x = jnp.linspace(0.0, 1.0, 9)[:, None]
        >>> table = sim.CurveTable((x - 0.7) ** 2 + 1.0 / jnp.arange(1, 10)[None, :], configs=x)
        >>> policy = bohb(9, 9, candidates=x)
        >>> sched = halving_schedule("bohb", 9, 9)
        >>> trace = sim.run(policy, table, jax.random.key(0), max_jobs=sched.max_jobs)
        >>> int(trace.budget) == sched.total_budget
        True
    """
    num_configs, max_budget, eta, min_budget = check_common(num_configs, max_budget, eta, min_budget)
    window, keep_rule, delta_estimate, num_profile = _uq_options(uq, window, keep_rule, delta_estimate, num_profile,
                                                                 profile_incumbent)
    num_samples = _checks.positive_int(num_samples, "num_samples")
    fdtype = float_dtype(dtype)
    cand = check_candidates(candidates, num_configs, fdtype, True, "bohb")
    sched = halving_schedule("bohb", num_configs, max_budget, eta, uq, min_budget=min_budget,
                             num_profile=num_profile)
    return halving_policy(sched, num_configs, max_budget, bool(uq), window, keep_rule, cand, fdtype, "tpe",
                          num_samples, delta_estimate, profile_incumbent)
