"""The static schedule of the halving family: brackets, rungs and round budgets.

Everything here is plain Python ints, computed once per policy from
``(num_configs, max_budget, eta, min_budget)`` (the rules are in the docstring of
:mod:`jaxstop.policies.halving`): :func:`halving_schedule` gives the brackets and
the budget, and :func:`round_table` lays the rounds of all brackets out as NumPy
columns that the engine (:mod:`jaxstop.policies._halving.engine`) indexes by the
global round.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from jaxstop._src import checks as _checks

__all__ = ["DEFAULT_NUM_PROFILE", "Bracket", "HalvingSchedule", "RoundTable", "check_common", "check_num_profile",
           "halving_schedule", "round_jobs", "round_table"]

_KINDS = ("sh", "hyperband", "bohb", "subsampling")
#: Candidates a UQ halving policy profiles by default (``delta_estimate="profile"``):
#: Appendix C's "a few"; three is the fewest whose mean ``sigma(t)`` is not dominated by
#: one or two curves, and costs ``3 * max_budget`` epochs.
DEFAULT_NUM_PROFILE = 3


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
        total_budget: Epochs the plain version spends on full-length curves, plus
            the profile's ``profile_budget`` (the budget cap for sub-sampling).
        max_jobs: An upper bound on the number of jobs before the policy
            terminates, for ``sim.run(..., max_jobs=...)`` (exact for the plain
            halving policies on full-length curves); it counts the profiling jobs.
        num_start: Configurations of the first bracket (candidates of sub-sampling).
        step: Epochs of the first rung (epochs per job of sub-sampling).
        num_profile: Candidates a UQ policy with ``delta_estimate="profile"`` trains
            to ``max_budget`` before its first bracket (0 otherwise).
        profile_budget: Their epochs, ``num_profile * max_budget``, on top of the
            brackets' budget.
    """

    brackets: tuple
    total_budget: int
    max_jobs: int
    num_start: int
    step: int
    num_profile: int = 0
    profile_budget: int = 0


def _check_eta(eta) -> int:
    if isinstance(eta, bool) or not isinstance(eta, (int, np.integer)):
        raise TypeError(f"eta must be an int, got {type(eta).__name__}")
    if eta < 2:
        raise ValueError(f"eta must be >= 2, got {eta}")
    return int(eta)


def check_common(num_configs, max_budget, eta, min_budget):
    """Checks the arguments every halving-family factory shares; returns them as ints."""
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


def round_jobs(bracket: Bracket, uq: bool) -> list:
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
    num_profile: int | None = None,
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
        num_profile: Candidates profiled to ``max_budget`` before the first bracket
            (the UQ halving policies with ``delta_estimate="profile"``). Default: the
            factories' default, ``min(DEFAULT_NUM_PROFILE, num_configs)`` with
            ``uq=True`` for ``sh`` / ``hyperband`` / ``bohb``, else 0; pass 0 to
            describe a UQ policy with another ``delta_estimate``.

    Returns:
        A :class:`HalvingSchedule`.

    Example:
        >>> from jaxstop.policies.halving import halving_schedule
        >>> sched = halving_schedule("sh", 27, 27)
        >>> sched.brackets[0].sizes, sched.brackets[0].budgets, sched.total_budget
        ((27, 9, 3, 1), (1, 3, 9, 27), 81)
        >>> [b.sizes[0] for b in halving_schedule("hyperband", 27, 27).brackets]
        [27, 12, 6, 4]
        >>> plus = halving_schedule("sh", 27, 27, uq=True)   # 3 profiled candidates x 27 epochs
        >>> plus.num_profile, plus.total_budget, plus.total_budget - plus.profile_budget
        (3, 162, 81)
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    num_configs, max_budget, eta, min_budget = check_common(num_configs, max_budget, eta, min_budget)
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
        _check_int32(total, "budget")
        jobs = total // stp + 2 * n0 + 1
        if num_profile:
            raise ValueError("num_profile is an option of the UQ halving policies (sh, hyperband, bohb), "
                             "not subsampling")
        return HalvingSchedule((), total, jobs, n0, stp)
    if budget is not None or step is not None:
        raise ValueError(f"budget and step are options of subsampling only, not {kind}")
    uq = _checks.boolean(uq, "uq")
    num_profile = check_num_profile(num_profile, num_configs, uq)
    jobs = sum(sum(round_jobs(b, uq)) for b in brackets) + num_profile
    profile_budget = num_profile * max_budget
    _check_int32(sh_budget + profile_budget, "the schedule's total budget")
    return HalvingSchedule(brackets, sh_budget + profile_budget, jobs, brackets[0].sizes[0], brackets[0].budgets[0],
                           num_profile, profile_budget)


def _check_int32(total: int, what: str) -> None:
    """The policies count epochs (spent, unspent, round budgets) in int32."""
    if total > np.iinfo(np.int32).max:
        raise ValueError(f"{what} ({total} epochs) exceeds the int32 range (2**31 - 1) in which the policies "
                         "count epochs; use a coarser budget unit")


def check_num_profile(num_profile, num_configs: int, uq: bool) -> int:
    """Checks the number of profiled candidates (``None``: the default for ``uq``)."""
    if num_profile is None:
        return min(DEFAULT_NUM_PROFILE, num_configs) if uq else 0
    num_profile = _checks.positive_int(num_profile, "num_profile", minimum=0)
    if num_profile and not uq:
        raise ValueError("num_profile is an option of the UQ versions (uq=True)")
    if num_profile > num_configs:
        raise ValueError(f"num_profile must be <= num_configs ({num_configs}), got {num_profile}")
    return num_profile




class RoundTable(NamedTuple):
    """The rounds of all brackets of a schedule, one NumPy entry per global round.

    Attributes:
        last: The round is its bracket's last rung, bool.
        bracket: Index of the round's bracket.
        n0: Configurations of the bracket's first rung.
        size_next: Plain keep count ``n_{i+1}`` (0 for a last rung).
        c: The round's budget ``C_i``.
        c_next: The next round's budget (0 for a last rung).
        level: The round's rung budget ``r_i``.
        level_next: The next rung budget (``r_i`` for a last rung).
        level_idx: Index of ``r_i`` in ``levels``.
        final_level: The bracket's last rung budget.
        rest: Budget of the bracket's later rounds.
        next_start: First global round of the next bracket (``len(last)`` after the last).
        levels: The distinct rung budgets of all brackets, ascending (a Python list).
    """

    last: np.ndarray
    bracket: np.ndarray
    n0: np.ndarray
    size_next: np.ndarray
    c: np.ndarray
    c_next: np.ndarray
    level: np.ndarray
    level_next: np.ndarray
    level_idx: np.ndarray
    final_level: np.ndarray
    rest: np.ndarray
    next_start: np.ndarray
    levels: list


def round_table(brackets: tuple) -> RoundTable:
    """Lays out the rounds of ``brackets`` (run in sequence) by global round index."""
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
    col = lambda k, dt=np.int32: np.array([r[k] for r in rows], dt)  # noqa: E731
    return RoundTable(
        last=col("last", bool), bracket=col("bracket"), n0=col("n0"),
        size_next=col("size_next"), c=col("c"), c_next=col("c_next"),
        level=col("level"), level_next=col("level_next"), level_idx=col("level_idx"),
        final_level=col("final_level"), rest=col("rest"), next_start=col("next_start"),
        levels=levels,
    )
