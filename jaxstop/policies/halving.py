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
neither ever spends more than :attr:`HalvingSchedule.total_budget`. The UQ
version leaves budget unspent when its survivors reach ``max_budget`` early.

Uncertainty (``uq=True``)
-------------------------
``report`` keeps every candidate's last ``window + 1`` losses. A candidate's
``mu`` is its current loss, ``sigma = max(window_std, params.min_sigma)`` over its
last ``window`` losses (``ddof = 1``, as :func:`jaxstop.confidence.window_std`), and
``delta_sigma`` is the difference of the previous and the current window's std
(as :func:`jaxstop.confidence.window_delta_sigma`, Appendix C's on-the-fly
alternative) unless ``params.delta_sigma`` is finite (e.g. from offline profiling,
the paper's main method). At the end of a round the next round keeps
``keep_count(mu, sigma, delta_sigma, R, rule=keep_rule).keep`` with ``R`` the next
round's budget including the carry (``tau = P_{k*}`` from Eq. 7, and the smallest
``k`` with ``P_k >= tau``). With fewer than two losses a candidate has no
uncertainty estimate; a round with such a member (e.g. the first rung of a bracket
with ``r_0 = 1``) keeps the plain number ``n_{i+1}``. Without ``report`` calls
the UQ versions therefore behave like the plain ones.

Incumbent
---------
``info.incumbent`` is the configuration the run would return now: the lowest
loss among the results at the highest nominal rung budget ``r_i`` reached so far
(over all brackets; complete members that survive into a later rung count at that
rung with their final loss). Nominal budgets are the plain schedule's, so both
versions return from the same rung.

BOHB model
----------
:func:`bohb` proposes the configurations of a bracket's first rung from the rows
of a candidate table (``candidates``, unit cube, shape (num_configs, d)), without
replacement within a bracket. A fraction ``params.random_fraction`` (1/3) of the
proposals, and all of them until a model exists, are uniform. The model is BOHB's
(Falkner et al., 2018) TPE: the results at the largest rung budget with enough of
them are split into the best ``max(d + 1, floor(top_fraction * n))``
(``top_fraction`` = 0.15) and the next ``max(d + 1, floor((1 - top_fraction) n))``;
a model exists when both parts hold at least ``d + 1`` results. Each part gets a
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
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxstop._src import checks as _checks
from jaxstop import confidence
from jaxstop.policies._base import Job, Policy, Result, make_job

__all__ = [
    "Bracket",
    "HalvingInfo",
    "HalvingParams",
    "HalvingSchedule",
    "HalvingState",
    "bohb",
    "halving_schedule",
    "hyperband",
    "sh",
]

_KINDS = ("sh", "hyperband", "bohb", "subsampling")
_KEEP_RULES = ("argmax", "crossing")


class Bracket(NamedTuple):
    """One successive-halving bracket (Python ints).

    Attributes:
        sizes: Configurations per rung, ``n_i``.
        budgets: Epochs each configuration of rung ``i`` has trained at its end, ``r_i``.
        round_budgets: Budget of each round, ``C_i = n_i (r_i - r_{i-1})``.
    """

    sizes: tuple
    budgets: tuple
    round_budgets: tuple


class HalvingSchedule(NamedTuple):
    """The static schedule of a policy, computed by :func:`halving_schedule`.

    Attributes:
        brackets: The brackets in the order they run (empty for sub-sampling).
        total_budget: Epochs the plain version spends on full-length curves (the
            budget cap for sub-sampling).
        max_jobs: An upper bound on the number of jobs before the policy
            terminates, for ``sim.run(..., max_jobs=...)`` (exact for the plain
            halving policies on full-length curves).
        num_start: Configurations of the first bracket (candidates of sub-sampling).
        step: Epochs of the first rung (epochs per job of sub-sampling).
    """

    brackets: tuple
    total_budget: int
    max_jobs: int
    num_start: int
    step: int


class HalvingParams(NamedTuple):
    """Numeric hyperparameters of the halving family (a pytree; vmap over it).

    Attributes:
        min_sigma: Floor on the windowed uncertainty ``sigma``, ().
        delta_sigma: Reduction of ``sigma`` per epoch used by the keep rule; NaN
            (default) estimates it per candidate from two consecutive windows, ().
        threshold: Sub-sampling plus: a challenger is trained when
            ``Pr(l_m >= l_i) >= threshold`` (0.9), ().
        top_fraction: BOHB: fraction of results in the good density (0.15), ().
        random_fraction: BOHB: fraction of uniform proposals (1/3), ().
        min_bandwidth: BOHB: smallest KDE bandwidth (1e-3), ().
    """

    min_sigma: jax.Array
    delta_sigma: jax.Array
    threshold: jax.Array
    top_fraction: jax.Array
    random_fraction: jax.Array
    min_bandwidth: jax.Array


class HalvingState(NamedTuple):
    """State of :func:`sh`, :func:`hyperband` and :func:`bohb`.

    ``cap`` is the largest bracket size (slots), ``W = window + 1`` (0 for the
    plain versions), ``M`` the record capacity of BOHB (0 otherwise).

    Attributes:
        round: Global round index over all brackets, int32 ().
        configs: Table row of each slot, shape (cap,) int32 (-1 unassigned).
        member: Slots in the current round, shape (cap,) bool.
        pending: Members still to be trained this round, shape (cap,) bool.
        complete: Slots that cannot train further, shape (cap,) bool.
        epochs: Epochs trained per slot, shape (cap,) int32.
        mu: Current loss per slot (inf before the first result), shape (cap,).
        sigma: Windowed uncertainty per slot (0 with fewer than two losses), (cap,).
        delta: Estimated per-epoch reduction of ``sigma``, shape (cap,).
        recent: Last ``window + 1`` losses per slot, oldest first, shape (cap, W).
        count: Losses reported per slot, shape (cap,) int32.
        alloc: Epochs each job of the current round adds, int32 ().
        carry: Budget the current round could not allocate, int32 ().
        current: Slot of the outstanding job, int32 ().
        order: Sampling order of table rows per bracket, shape (brackets, cap) int32.
        chosen: BOHB: rows already in the current bracket, shape (num_configs,) bool.
        rec_config: BOHB: table row of every result, shape (M,) int32.
        rec_level: BOHB: rung-budget index of every result, shape (M,) int32.
        rec_loss: BOHB: loss of every result, shape (M,).
        rec_count: BOHB: number of results recorded, int32 ().
        spent: Epochs charged so far, int32 ().
        unspent: Budget released by the schedule but not spent: round budget that
            could not be allocated by the end of a bracket, plus epochs allocated to
            jobs whose curves ended first, int32 (). ``spent + unspent`` equals the
            released budget at the end of every bracket.
        inc_level: Nominal rung budget of the incumbent (-1 before any), int32 ().
        inc_value: Loss of the incumbent, ().
        inc_config: Table row of the incumbent (-1 before any), int32 ().
        done: The schedule is finished, bool ().
    """

    round: jax.Array
    configs: jax.Array
    member: jax.Array
    pending: jax.Array
    complete: jax.Array
    epochs: jax.Array
    mu: jax.Array
    sigma: jax.Array
    delta: jax.Array
    recent: jax.Array
    count: jax.Array
    alloc: jax.Array
    carry: jax.Array
    current: jax.Array
    order: jax.Array
    chosen: jax.Array
    rec_config: jax.Array
    rec_level: jax.Array
    rec_loss: jax.Array
    rec_count: jax.Array
    spent: jax.Array
    unspent: jax.Array
    inc_level: jax.Array
    inc_value: jax.Array
    inc_config: jax.Array
    done: jax.Array


class HalvingInfo(NamedTuple):
    """What ``tell`` of the halving family returns.

    Attributes:
        terminate: The whole schedule is done, bool ().
        incumbent: Configuration the run would return now, int32 ().
        incumbent_value: Its loss at the rung it was compared at, ().
        round: Global round index after this tell, int32 ().
        decisions: Whether this tell ended a round with a keep decision (0 or 1), int32 ().
        kept: Members kept by the last decision of this tell (-1 without), int32 ().
        fallback: The last decision used the plain count for lack of
            uncertainty estimates (always True for the plain versions), bool ().
        tau: The threshold ``P_{k*}`` of the last UQ decision (NaN otherwise), ().
        round_budget: Budget ``R`` of the round that decision was for, int32 ().
        spent: Epochs charged so far, int32 ().
        unspent: ``HalvingState.unspent`` after this tell, int32 ().
    """

    terminate: jax.Array
    incumbent: jax.Array
    incumbent_value: jax.Array
    round: jax.Array
    decisions: jax.Array
    kept: jax.Array
    fallback: jax.Array
    tau: jax.Array
    round_budget: jax.Array
    spent: jax.Array
    unspent: jax.Array


# --------------------------------------------------------------------------
# static schedule


def _check_eta(eta) -> int:
    if isinstance(eta, bool) or not isinstance(eta, (int, np.integer)):
        raise TypeError(f"eta must be an int, got {type(eta).__name__}")
    if eta < 2:
        raise ValueError(f"eta must be >= 2, got {eta}")
    return int(eta)


def _check_common(num_configs, max_budget, eta, min_budget):
    num_configs = _checks.positive_int(num_configs, "num_configs")
    max_budget = _checks.positive_int(max_budget, "max_budget")
    eta = _check_eta(eta)
    min_budget = _checks.positive_int(min_budget, "min_budget")
    if min_budget > max_budget:
        raise ValueError(f"min_budget must be <= max_budget ({max_budget}), got {min_budget}")
    return num_configs, max_budget, eta, min_budget


def _s_max(max_budget: int, min_budget: int, eta: int) -> int:
    s = 0
    while min_budget * eta ** (s + 1) <= max_budget:
        s += 1
    return s


def _bracket(n0: int, s: int, max_budget: int, eta: int) -> Bracket:
    budgets = []
    for i in range(s + 1):
        x = Fraction(max_budget, eta ** (s - i))
        budgets.append(max(1, math.floor(x + Fraction(1, 2))))
    budgets[-1] = max_budget
    sizes = [max(1, n0 // eta**i) for i in range(s + 1)]
    prev, rounds = 0, []
    for n, r in zip(sizes, budgets):
        rounds.append(n * (r - prev))
        prev = r
    return Bracket(tuple(sizes), tuple(budgets), tuple(rounds))


def _round_jobs(bracket: Bracket, uq: bool) -> list:
    """Most jobs of each round of a bracket. Plain: ``n_i``. UQ: round i has at most
    min(n_0, budget available to it) jobs, as every job trains at least one epoch."""
    if not uq:
        return list(bracket.sizes)
    n0 = bracket.sizes[0]
    jobs, avail = [n0], 0
    for c in bracket.round_budgets[1:]:
        avail += c
        jobs.append(min(n0, avail))
    return jobs


def halving_schedule(
    kind: str,
    num_configs: int,
    max_budget: int,
    eta: int = 3,
    uq: bool = False,
    *,
    num_start: int | None = None,
    min_budget: int = 1,
    budget: int | None = None,
    step: int | None = None,
) -> HalvingSchedule:
    """The static schedule of a halving-family policy.

    Takes the arguments of :func:`sh`, :func:`hyperband`, :func:`bohb` or
    :func:`~jaxstop.policies.subsampling` (``kind`` names which) and returns the
    brackets, the budget and a bound on the number of jobs for
    ``sim.run(..., max_jobs=schedule.max_jobs)``.

    Args:
        kind: ``"sh"``, ``"hyperband"``, ``"bohb"`` or ``"subsampling"``.
        num_configs: Rows of the candidate table.
        max_budget: Most epochs a configuration trains.
        eta: Halving rate, an int >= 2.
        uq: Bound the jobs of the UQ version (it may run more, smaller jobs).
        num_start: Configurations of the SH bracket / sub-sampling candidates.
        min_budget: Fewest epochs of a first rung.
        budget: Sub-sampling: total budget (default: the plain SH budget).
        step: Sub-sampling: epochs per job (default: the SH first-rung budget).

    Returns:
        A :class:`HalvingSchedule`.

    Example:
        >>> from jaxstop.policies.halving import halving_schedule
        >>> sched = halving_schedule("sh", 27, 27)
        >>> sched.brackets[0].sizes, sched.brackets[0].budgets, sched.total_budget
        ((27, 9, 3, 1), (1, 3, 9, 27), 81)
        >>> [b.sizes[0] for b in halving_schedule("hyperband", 27, 27).brackets]
        [27, 12, 6, 4]
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    num_configs, max_budget, eta, min_budget = _check_common(num_configs, max_budget, eta, min_budget)
    s_max = _s_max(max_budget, min_budget, eta)
    if kind in ("sh", "subsampling"):
        if num_start is None:
            n0 = min(num_configs, eta**s_max)
        else:
            n0 = _checks.positive_int(num_start, "num_start")
            if n0 > num_configs:
                raise ValueError(f"num_start must be <= num_configs ({num_configs}), got {n0}")
        brackets = (_bracket(n0, s_max, max_budget, eta),)
    else:
        if num_start is not None:
            raise ValueError(f"num_start is not an option of {kind}; bracket sizes follow Hyperband")
        brackets = tuple(
            _bracket(min(num_configs, -(-(s_max + 1) * eta**s // (s + 1))), s, max_budget, eta)
            for s in range(s_max, -1, -1)
        )
    sh_budget = sum(sum(b.round_budgets) for b in brackets)
    if kind == "subsampling":
        first = brackets[0]
        n0 = first.sizes[0]
        total = sh_budget if budget is None else _checks.positive_int(budget, "budget")
        stp = first.budgets[0] if step is None else _checks.positive_int(step, "step")
        if stp > max_budget:
            raise ValueError(f"step must be <= max_budget ({max_budget}), got {stp}")
        jobs = total // stp + 2 * n0 + 1
        return HalvingSchedule((), total, jobs, n0, stp)
    if budget is not None or step is not None:
        raise ValueError(f"budget and step are options of subsampling only, not {kind}")
    jobs = sum(sum(_round_jobs(b, uq)) for b in brackets)
    return HalvingSchedule(brackets, sh_budget, jobs, brackets[0].sizes[0], brackets[0].budgets[0])


# --------------------------------------------------------------------------
# shared helpers (also used by subsampling.py)


def _default_params(fdtype) -> HalvingParams:
    f = lambda v: jnp.asarray(v, fdtype)  # noqa: E731
    return HalvingParams(
        min_sigma=f(1e-6),
        delta_sigma=f(jnp.nan),
        threshold=f(0.9),
        top_fraction=f(0.15),
        random_fraction=f(1.0 / 3.0),
        min_bandwidth=f(1e-3),
    )


def _check_window(window) -> int:
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
        raise TypeError(f"window must be an int, got {type(window).__name__}")
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    return int(window)


def _check_candidates(candidates, num_configs, dtype, required: bool, who: str):
    if candidates is None:
        if required:
            raise ValueError(f"{who} needs candidates, the configuration vectors of the table rows, "
                             "shape (num_configs, d) in the unit cube")
        return None
    cand = _checks.float_array(candidates, "candidates", dtype)
    _checks.check_rank(cand, 2, "candidates", "with shape (num_configs, d)")
    _checks.check_unit_cube(cand, "candidates")
    if cand.shape[0] != num_configs:
        raise ValueError(f"num_configs ({num_configs}) must equal len(candidates) ({cand.shape[0]})")
    if required and cand.shape[1] < 1:
        raise ValueError(f"candidates must have at least one column, got shape {cand.shape}")
    return cand


def _push(recent, count, slot, value):
    """Appends ``value`` to the chronological buffer of ``slot``."""
    width = recent.shape[1]
    row = recent[slot]
    c = count[slot]
    appended = row.at[jnp.minimum(c, width - 1)].set(value)
    shifted = jnp.concatenate([row[1:], value[None]])
    row = jnp.where(c < width, appended, shifted)
    return recent.at[slot].set(row), count.at[slot].add(1)


def _masked_std(x, mask):
    """Sample standard deviation (ddof = 1) of each row of ``x`` over ``mask``; 0 with < 2."""
    n = jnp.sum(mask, axis=1)
    zero = jnp.zeros((), x.dtype)
    xs = jnp.where(mask, x, zero)
    mean = jnp.sum(xs, axis=1) / jnp.maximum(n, 1).astype(x.dtype)
    dev = jnp.where(mask, x - mean[:, None], zero)
    var = jnp.sum(dev * dev, axis=1) / jnp.maximum(n - 1, 1).astype(x.dtype)
    return jnp.where(n >= 2, jnp.sqrt(var), zero), n


def _uncertainty(recent, count, window: int, params):
    """(sigma, delta, has) of every slot from its recent losses (Eq. 1, App. C).

    ``recent`` holds the last ``min(count, window + 1)`` losses left-aligned, oldest
    first. The window statistics equal ``confidence.window_std(recent, cnt, window)``
    and ``confidence.window_delta_sigma(recent, cnt, window)`` (``ddof = 1``), written
    out for this layout because they run after every simulated job.
    """
    width = recent.shape[1]
    cnt = jnp.minimum(count, width)[:, None]
    j = jnp.arange(width)[None, :]
    finite = jnp.isfinite(recent)
    now, n_now = _masked_std(recent, finite & (j < cnt) & (j >= cnt - window))
    prev, n_prev = _masked_std(recent, finite & (j < cnt - 1) & (j >= cnt - 1 - window))
    fdtype = recent.dtype
    zero = jnp.zeros((), fdtype)
    has = count >= 2
    sigma = jnp.where(has, jnp.maximum(now, params.min_sigma.astype(fdtype)), zero)
    given = params.delta_sigma.astype(fdtype)
    delta = jnp.where((n_now >= 2) & (n_prev >= 2), prev - now, zero)
    delta = jnp.where(has, jnp.where(jnp.isfinite(given), given, delta), zero)
    return sigma, delta, has


def _ranks(key):
    """Rank of every entry of ``key`` (stable: ties by index), int32.

    Pairwise comparisons, O(n^2) for the few slots of a bracket: much cheaper to
    compile than a sort, which matters inside every simulated step.
    """
    n = key.shape[0]
    i = jnp.arange(n)
    before = (key[None, :] < key[:, None]) | ((key[None, :] == key[:, None]) & (i[None, :] < i[:, None]))
    return jnp.sum(before, axis=1).astype(jnp.int32)


def _sample_rows(key, num_configs: int, k: int, batch: tuple = ()):
    """``k`` distinct rows of ``range(num_configs)`` in uniformly random order
    (independently for each of ``batch``), from one draw of random bits."""
    u = jax.random.uniform(key, batch + (num_configs,))
    return lax.top_k(u, k)[1].astype(jnp.int32)


def _cond(pred, true_fn, false_fn, *operands):
    """``lax.cond``, or plain Python branching when ``pred`` is concrete (eager
    calls then run only the branch taken and compile nothing new)."""
    if _checks.is_concrete(pred):
        return true_fn(*operands) if bool(pred) else false_fn(*operands)
    return lax.cond(pred, true_fn, false_fn, *operands)


def _rank_key(mu, mask):
    """Sort key: mu where selected and not NaN, +inf elsewhere."""
    return jnp.where(mask & ~jnp.isnan(mu), mu, jnp.inf)


def _first(mask):
    return jnp.argmax(mask).astype(jnp.int32)


# --------------------------------------------------------------------------
# BOHB's density-ratio model over table rows


def _log_kde(points, data, weight, bw):
    """log of the mean product-Gaussian density of ``data[weight]`` at ``points``."""
    z = (points[:, None, :] - data[None, :, :]) / bw[None, None, :]
    log_k = jnp.sum(-0.5 * z * z - jnp.log(bw)[None, None, :], axis=-1)
    log_k = jnp.where(weight[None, :], log_k, -jnp.inf)
    top = jnp.max(log_k, axis=1)
    top = jnp.where(jnp.isfinite(top), top, jnp.zeros((), top.dtype))
    n = jnp.maximum(jnp.sum(weight), 1).astype(points.dtype)
    return jnp.log(jnp.sum(jnp.exp(log_k - top[:, None]), axis=1)) + top - jnp.log(n)


def _bandwidth(data, weight, params):
    """Normal-reference bandwidths 1.06 std n^(-1/(d+4)), floored."""
    d = data.shape[1]
    n = jnp.maximum(jnp.sum(weight), 1).astype(data.dtype)
    w = weight.astype(data.dtype)[:, None]
    mean = jnp.sum(w * data, axis=0) / n
    std = jnp.sqrt(jnp.sum(w * (data - mean[None, :]) ** 2, axis=0) / n)
    bw = 1.06 * std * n ** (-1.0 / (d + 4))
    return jnp.maximum(bw, params.min_bandwidth.astype(data.dtype))


def _propose(key, cand, state, params, num_levels: int, num_samples: int, per_level: int):
    """One BOHB proposal: a table row not yet in the bracket (see the module docstring)."""
    fdtype = cand.dtype
    n_rows, d = cand.shape
    u = jax.random.uniform(key, (n_rows + 1,), fdtype, minval=jnp.finfo(fdtype).tiny)
    avail = ~state.chosen
    gumbel = jnp.where(avail, -jnp.log(-jnp.log(u[:n_rows])), -jnp.inf)
    rows = lax.top_k(gumbel, num_samples)[1]  # uniform, distinct; rows[0] is a uniform row
    # the model: good / bad split of the results at the largest budget with enough of them
    m = state.rec_config.shape[0]
    valid = (jnp.arange(m) < state.rec_count) & jnp.isfinite(state.rec_loss)
    n_min = d + 1
    gamma = params.top_fraction.astype(fdtype)
    counts = jnp.sum(valid[None, :] & (state.rec_level[None, :] == jnp.arange(num_levels)[:, None]), axis=1)
    usable = (counts - jnp.maximum(n_min, jnp.floor(gamma * counts).astype(jnp.int32))) >= n_min
    level = (num_levels - 1 - jnp.argmax(usable[::-1])).astype(jnp.int32)
    at = valid & (state.rec_level == level)
    n = jnp.sum(at)
    n_good = jnp.maximum(n_min, jnp.floor(gamma * n).astype(jnp.int32))
    n_bad = jnp.maximum(n_min, jnp.floor((1 - gamma) * n).astype(jnp.int32))
    # the (at most per_level) results at that level, best first
    order = lax.top_k(-_rank_key(state.rec_loss, at), per_level)[1]
    rank = jnp.arange(per_level)
    good = (rank < n) & (rank < n_good)
    bad = (rank < n) & (rank >= n_good) & (rank < n_good + n_bad)
    data = cand[jnp.clip(state.rec_config[order], 0, n_rows - 1)]
    x = cand[rows]
    score = _log_kde(x, data, good, _bandwidth(data, good, params)) - _log_kde(x, data, bad, _bandwidth(data, bad, params))
    score = jnp.where(avail[rows], score, -jnp.inf)
    model_row = rows[jnp.argmax(score)]
    use_random = ~jnp.any(usable) | (u[n_rows] < params.random_fraction.astype(fdtype))
    return jnp.where(use_random, rows[0], model_row).astype(jnp.int32)


# --------------------------------------------------------------------------
# the engine shared by SH, HB and BOHB


def _halving_policy(
    schedule: HalvingSchedule,
    num_configs: int,
    max_budget: int,
    uq: bool,
    window: int,
    keep_rule: str,
    cand,
    fdtype,
    sampler: str,
    num_samples: int,
) -> Policy:
    brackets = schedule.brackets
    nb = len(brackets)
    cap = max(b.sizes[0] for b in brackets)
    levels = sorted({r for b in brackets for r in b.budgets})
    rows = []  # one row per global round
    first_round = np.cumsum([0] + [len(b.sizes) for b in brackets])  # first global round of each bracket
    for bi, b in enumerate(brackets):
        s = len(b.sizes)
        for i in range(s):
            last = i == s - 1
            rows.append(dict(
                bracket=bi,
                last=last,
                n0=b.sizes[0],
                size_next=0 if last else b.sizes[i + 1],
                c=b.round_budgets[i],
                c_next=0 if last else b.round_budgets[i + 1],
                level=b.budgets[i],
                level_next=b.budgets[i] if last else b.budgets[i + 1],
                level_idx=levels.index(b.budgets[i]),
                final_level=b.budgets[-1],
                rest=sum(b.round_budgets[i + 1:]),
                next_start=first_round[bi + 1],
            ))
    G = len(rows)
    col = lambda k, dt=np.int32: np.array([r[k] for r in rows], dt)  # noqa: E731
    R_LAST, R_BRACKET, R_N0 = col("last", bool), col("bracket"), col("n0")
    R_SIZE_NEXT, R_C, R_C_NEXT = col("size_next"), col("c"), col("c_next")
    R_LEVEL, R_LEVEL_NEXT, R_LEVEL_IDX = col("level"), col("level_next"), col("level_idx")
    R_FINAL_LEVEL, R_REST, R_NEXT_START = col("final_level"), col("rest"), col("next_start")
    tpe = sampler == "tpe"
    width = window + 1 if uq else 0
    m_rec = schedule.max_jobs if tpe else 0
    samples = min(num_samples, num_configs)
    per_level = {}
    for b in brackets:
        for r, j in zip(b.budgets, _round_jobs(b, uq)):
            per_level[r] = per_level.get(r, 0) + j
    per_level = max(per_level.values())
    slots = np.arange(cap, dtype=np.int32)
    table = lambda arr, g: jnp.asarray(arr)[g]  # noqa: E731

    def start_bracket(s: HalvingState, g) -> HalvingState:
        n0 = table(R_N0, g)
        member = jnp.asarray(slots) < n0
        if tpe:
            cfg = jnp.full((cap,), -1, jnp.int32)
        else:
            cfg = jnp.where(member, s.order[table(R_BRACKET, g)], -1).astype(jnp.int32)
        return s._replace(
            round=jnp.asarray(g, jnp.int32),
            configs=cfg,
            member=member,
            pending=member,
            complete=jnp.zeros((cap,), bool),
            epochs=jnp.zeros((cap,), jnp.int32),
            mu=jnp.full((cap,), jnp.inf, fdtype),
            sigma=jnp.zeros((cap,), fdtype),
            delta=jnp.zeros((cap,), fdtype),
            recent=jnp.full((cap, width), jnp.nan, fdtype),
            count=jnp.zeros((cap,), jnp.int32),
            alloc=(table(R_C, g) // n0).astype(jnp.int32),
            carry=jnp.zeros((), jnp.int32),
            chosen=jnp.zeros_like(s.chosen),
        )

    def update_incumbent(s, level, value, config, ok):
        better = ok & jnp.isfinite(value) & (
            (level > s.inc_level) | ((level == s.inc_level) & (value < s.inc_value))
        )
        return s._replace(
            inc_level=jnp.where(better, level, s.inc_level).astype(jnp.int32),
            inc_value=jnp.where(better, value, s.inc_value).astype(fdtype),
            inc_config=jnp.where(better, config, s.inc_config).astype(jnp.int32),
        )

    # ---- the pieces of tell; each is jitted so that eager calls stay cheap

    def record(s: HalvingState, job: Job, result: Result, params):
        """Bookkeeping of one result; returns the state and (round over, last round)."""
        slot = s.current
        active = ~s.done & s.pending[slot]
        value = jnp.asarray(result.value).astype(fdtype)
        epoch = jnp.asarray(result.epoch).astype(jnp.int32)
        budget = jnp.asarray(job.budget).astype(jnp.int32)
        start = jnp.clip(jnp.asarray(job.start).astype(jnp.int32), 0, epoch)
        ended = (epoch < budget) | (epoch >= max_budget)
        upd = lambda new, old: jnp.where(active, new, old)  # noqa: E731
        cost = epoch - start
        s = s._replace(
            epochs=s.epochs.at[slot].set(upd(epoch, s.epochs[slot])),
            mu=s.mu.at[slot].set(upd(value, s.mu[slot])),
            complete=s.complete.at[slot].set(upd(s.complete[slot] | ended, s.complete[slot])),
            pending=s.pending.at[slot].set(s.pending[slot] & ~active),
            spent=(s.spent + jnp.where(active, cost, 0)).astype(jnp.int32),
            unspent=(s.unspent + jnp.where(active, s.alloc - cost, 0)).astype(jnp.int32),
        )
        if uq:
            sigma, delta, _ = _uncertainty(s.recent, s.count, window, params)
            s = s._replace(sigma=sigma, delta=delta)
        if tpe:
            i = jnp.minimum(s.rec_count, m_rec - 1)
            s = s._replace(
                rec_config=s.rec_config.at[i].set(upd(s.configs[slot], s.rec_config[i])),
                rec_level=s.rec_level.at[i].set(upd(table(R_LEVEL_IDX, s.round), s.rec_level[i])),
                rec_loss=s.rec_loss.at[i].set(upd(value, s.rec_loss[i])),
                rec_count=(s.rec_count + jnp.where(active & (s.rec_count < m_rec), 1, 0)).astype(jnp.int32),
            )
        s = update_incumbent(s, table(R_LEVEL, s.round), value, s.configs[slot], active)
        round_over = ~s.done & ~jnp.any(s.pending)
        last = table(R_LAST, s.round)
        return s, round_over & ~last, round_over & last

    def keep_inputs(s: HalvingState, params):
        """Arguments of keep_count for the decision at the end of the current round."""
        ok = s.member & jnp.isfinite(s.mu) & (s.sigma > 0)
        zero, one = jnp.zeros((), fdtype), jnp.ones((), fdtype)
        budget = (table(R_C_NEXT, s.round) + s.carry).astype(fdtype)
        return (jnp.where(ok, s.mu, zero), jnp.where(ok, s.sigma, one), jnp.where(ok, s.delta, zero),
                budget, ok)

    def apply_keep(s: HalvingState, uq_keep, uq_tau, params):
        """Keeps members (plain count, or the UQ mask), allocates the next round."""
        g = s.round
        budget = (table(R_C_NEXT, g) + s.carry).astype(jnp.int32)
        plain_keep = s.member & (_ranks(_rank_key(s.mu, s.member)) < table(R_SIZE_NEXT, g))
        if uq:
            fallback = jnp.any(s.member & (s.count < 2))
            ok = s.member & jnp.isfinite(s.mu) & (s.sigma > 0)
            keep = jnp.where(fallback, plain_keep, uq_keep & ok)
            tau = jnp.where(fallback, jnp.nan, uq_tau).astype(fdtype)
        else:
            fallback = jnp.asarray(True)
            keep = plain_keep
            tau = jnp.asarray(jnp.nan, fdtype)
        trainable = keep & ~s.complete
        # more trainable members than epochs: keep the best `budget` of them
        too_many = trainable & (_ranks(_rank_key(s.mu, trainable)) >= budget)
        keep = keep & ~too_many
        trainable = trainable & ~too_many
        ktr = jnp.sum(trainable).astype(jnp.int32)
        room = jnp.min(jnp.where(trainable, max_budget - s.epochs, max_budget)).astype(jnp.int32)
        e = jnp.where(ktr > 0, jnp.minimum(budget // jnp.maximum(ktr, 1), room), 0).astype(jnp.int32)
        s = s._replace(
            round=(g + 1).astype(jnp.int32),
            member=keep,
            pending=trainable & (e > 0),
            alloc=e,
            carry=(budget - e * ktr).astype(jnp.int32),
        )
        # complete members carried into the new rung compete at its level
        done_keep = keep & s.complete
        best = jnp.argmin(_rank_key(s.mu, done_keep))
        s = update_incumbent(s, table(R_LEVEL_NEXT, g), s.mu[best], s.configs[best], done_keep[best])
        close = ~jnp.any(s.pending)
        return s, (jnp.sum(keep).astype(jnp.int32), fallback, tau, budget), close

    def end_bracket(s: HalvingState) -> HalvingState:
        """Closes the bracket of the current round: after its last round, or earlier
        when no member can train (every later round would be empty: their budget is
        unspent and the best member reaches the bracket's last rung)."""
        g = s.round
        members = s.member & s.complete
        best = jnp.argmin(_rank_key(s.mu, members))
        s = update_incumbent(s, table(R_FINAL_LEVEL, g), s.mu[best], s.configs[best], members[best])
        s = s._replace(
            unspent=(s.unspent + s.carry + table(R_REST, g)).astype(jnp.int32),
            carry=jnp.zeros((), jnp.int32),
        )
        # the next bracket starts at its own first round, also when this one ended early
        following = table(R_NEXT_START, g)
        final = following >= G
        nxt = start_bracket(s, jnp.minimum(following, G - 1))
        return jax.tree_util.tree_map(lambda a, b: jnp.where(final, a, b), s._replace(done=jnp.asarray(True)), nxt)

    record_j, keep_inputs_j, apply_keep_j, end_bracket_j = (
        jax.jit(record), jax.jit(keep_inputs), jax.jit(apply_keep), jax.jit(end_bracket))

    def decide(s: HalvingState, params):
        if uq:
            mu, sigma, delta, budget, ok = keep_inputs_j(s, params)
            # outside jit this runs keep_count's own compiled kernel (shared by all policies)
            res = confidence.keep_count(mu, sigma, delta, budget, mask=ok, rule=keep_rule)
            return apply_keep_j(s, res.keep, res.tau, params)
        return apply_keep_j(s, jnp.zeros((cap,), bool), jnp.asarray(jnp.nan, fdtype), params)

    def no_decision(s: HalvingState, params):
        return s, (jnp.asarray(-1, jnp.int32), jnp.asarray(not uq), jnp.asarray(jnp.nan, fdtype),
                   jnp.zeros((), jnp.int32)), jnp.asarray(False)

    # ---- protocol

    def _init(key, params):
        if tpe:
            order = jnp.zeros((nb, 0), jnp.int32)
        else:
            order = _sample_rows(key, num_configs, cap, (nb,))
        s = HalvingState(
            round=jnp.zeros((), jnp.int32),
            configs=jnp.full((cap,), -1, jnp.int32),
            member=jnp.zeros((cap,), bool),
            pending=jnp.zeros((cap,), bool),
            complete=jnp.zeros((cap,), bool),
            epochs=jnp.zeros((cap,), jnp.int32),
            mu=jnp.full((cap,), jnp.inf, fdtype),
            sigma=jnp.zeros((cap,), fdtype),
            delta=jnp.zeros((cap,), fdtype),
            recent=jnp.full((cap, width), jnp.nan, fdtype),
            count=jnp.zeros((cap,), jnp.int32),
            alloc=jnp.zeros((), jnp.int32),
            carry=jnp.zeros((), jnp.int32),
            current=jnp.zeros((), jnp.int32),
            order=order,
            chosen=jnp.zeros((num_configs if tpe else 0,), bool),
            rec_config=jnp.full((m_rec,), -1, jnp.int32),
            rec_level=jnp.full((m_rec,), -1, jnp.int32),
            rec_loss=jnp.full((m_rec,), jnp.nan, fdtype),
            rec_count=jnp.zeros((), jnp.int32),
            spent=jnp.zeros((), jnp.int32),
            unspent=jnp.zeros((), jnp.int32),
            inc_level=jnp.asarray(-1, jnp.int32),
            inc_value=jnp.asarray(jnp.inf, fdtype),
            inc_config=jnp.asarray(-1, jnp.int32),
            done=jnp.asarray(False),
        )
        return start_bracket(s, 0)

    def _ask(key, state: HalvingState, params):
        slot = _first(state.pending)
        row = state.configs[slot]
        active = state.pending[slot] & ~state.done
        if tpe:
            fresh = (row < 0) & active
            proposed = lax.cond(
                fresh,
                lambda: _propose(key, cand, state, params, len(levels), samples, per_level),
                lambda: jnp.zeros((), jnp.int32),
            )
            row = jnp.where(fresh, proposed, row).astype(jnp.int32)
            safe = jnp.clip(row, 0, num_configs - 1)
            state = state._replace(
                configs=state.configs.at[slot].set(row),
                chosen=state.chosen.at[safe].set(state.chosen[safe] | fresh),
            )
        start = state.epochs[slot]
        budget = start + jnp.where(active, state.alloc, 0)
        x = cand[jnp.clip(row, 0, num_configs - 1)] if cand is not None else jnp.zeros((0,), fdtype)
        return make_job(row, x, budget, start), state._replace(current=slot)

    def _report(state: HalvingState, job: Job, epoch, value, params):
        v = jnp.asarray(value).astype(fdtype)
        recent, count = _push(state.recent, state.count, state.current, v)
        return state._replace(recent=recent, count=count), jnp.asarray(False)

    init_j, ask_j, report_j = jax.jit(_init), jax.jit(_ask), jax.jit(_report)
    default = lambda: _default_params(fdtype)  # noqa: E731

    def init(key, params=None):
        return init_j(key, default() if params is None else params)

    def ask(key, state: HalvingState, params=None):
        return ask_j(key, state, default() if params is None else params)

    def report(state: HalvingState, job: Job, epoch, value, params=None):
        return report_j(state, job, epoch, value, default() if params is None else params)

    def tell(state: HalvingState, job: Job, result: Result, params=None):
        if params is None:
            params = default()
        s, decided, finished = record_j(state, job, result, params)
        s, (kept, fallback, tau, rbudget), empty = _cond(
            decided, lambda s: decide(s, params), lambda s: no_decision(s, params), s)
        s = _cond(finished | empty, end_bracket_j, lambda s: s, s)
        info = HalvingInfo(
            terminate=s.done,
            incumbent=s.inc_config,
            incumbent_value=s.inc_value,
            round=s.round,
            decisions=jnp.asarray(decided, jnp.int32),
            kept=kept,
            fallback=fallback,
            tau=tau,
            round_budget=rbudget,
            spent=s.spent,
            unspent=s.unspent,
        )
        return s, info

    return Policy(init, ask, report if uq else None, tell, default)


def _float_dtype(dtype):
    return jnp.dtype(dtype) if dtype is not None else jnp.result_type(float)


def _check_keep_rule(keep_rule):
    if keep_rule not in _KEEP_RULES:
        raise ValueError(f"keep_rule must be one of {_KEEP_RULES}, got {keep_rule!r}")
    return keep_rule


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
        candidates: Optional configuration vectors of the rows, shape
            (num_configs, d), returned as ``job.x``.
        dtype: Floating dtype of losses in the state (default: JAX's default float).

    Returns:
        A :class:`~jaxstop.policies.Policy` with :class:`HalvingParams`; ``report``
        is None for the plain version. ``halving_schedule("sh", ...).max_jobs``
        bounds its number of jobs.

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
    num_configs, max_budget, eta, min_budget = _check_common(num_configs, max_budget, eta, min_budget)
    window = _check_window(window)
    keep_rule = _check_keep_rule(keep_rule)
    fdtype = _float_dtype(dtype)
    cand = _check_candidates(candidates, num_configs, fdtype, False, "sh")
    sched = halving_schedule("sh", num_configs, max_budget, eta, uq, num_start=num_start, min_budget=min_budget)
    return _halving_policy(sched, num_configs, max_budget, bool(uq), window, keep_rule, cand, fdtype, "uniform", 0)


def hyperband(
    num_configs: int,
    max_budget: int,
    eta: int = 3,
    uq: bool = False,
    *,
    min_budget: int = 1,
    window: int = 10,
    keep_rule: str = "argmax",
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
        candidates, dtype: As in :func:`sh`.

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
    num_configs, max_budget, eta, min_budget = _check_common(num_configs, max_budget, eta, min_budget)
    window = _check_window(window)
    keep_rule = _check_keep_rule(keep_rule)
    fdtype = _float_dtype(dtype)
    cand = _check_candidates(candidates, num_configs, fdtype, False, "hyperband")
    sched = halving_schedule("hyperband", num_configs, max_budget, eta, uq, min_budget=min_budget)
    return _halving_policy(sched, num_configs, max_budget, bool(uq), window, keep_rule, cand, fdtype, "uniform", 0)


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
    num_samples: int = 64,
    dtype=None,
) -> Policy:
    """BOHB (Falkner et al., 2018) or, with ``uq=True``, BOHB+ of Liu et al. (2024).

    Hyperband's brackets with model-based proposals: the first rung of every
    bracket is filled one configuration at a time by the density-ratio model
    described in the module docstring, fitted to all results so far; the rest is
    :func:`hyperband` (BOHB+ uses the UQ-guided keep rule).

    Args:
        num_configs, max_budget, eta, uq, min_budget, window, keep_rule, dtype:
            As in :func:`sh`.
        candidates: Configuration vectors of the table rows in the unit cube,
            shape (num_configs, d), d >= 1 (required: the model lives on them).
        num_samples: Points drawn from the good density per proposal.

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
    num_configs, max_budget, eta, min_budget = _check_common(num_configs, max_budget, eta, min_budget)
    window = _check_window(window)
    keep_rule = _check_keep_rule(keep_rule)
    num_samples = _checks.positive_int(num_samples, "num_samples")
    fdtype = _float_dtype(dtype)
    cand = _check_candidates(candidates, num_configs, fdtype, True, "bohb")
    sched = halving_schedule("bohb", num_configs, max_budget, eta, uq, min_budget=min_budget)
    return _halving_policy(sched, num_configs, max_budget, bool(uq), window, keep_rule, cand, fdtype, "tpe",
                           num_samples)
