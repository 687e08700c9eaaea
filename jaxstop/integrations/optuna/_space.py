"""An Optuna search space encoded into the unit cube, padded to fixed capacities.

The regret bound of :mod:`jaxstop.regret` needs the evaluated configurations as points of
``[0, 1]^d``. :func:`search_space` collects the parameters of a list of trials from their
distributions and :func:`encode` turns the trials into rows of an array, one or more columns
per parameter (sorted by name, so every process builds the same layout):

* ``FloatDistribution`` / ``IntDistribution``, one column. Linear: ``(v - lo) / (hi - lo)``;
  ``log=True``: the same on ``log v``. With a step ``s`` (every ``IntDistribution`` has one,
  ``s = 1`` by default) the range is widened by half a step on each side,
  ``lo = low - s/2``, ``hi = high + s/2`` (on the log scale for ``log=True``), so the ``K``
  points of the step grid sit at the centres of ``K`` equal cells of ``[0, 1]`` (the
  normalisation of Optuna's GP sampler). A range of one point encodes as 0.5.
* ``CategoricalDistribution`` with ``K`` choices: ``K`` one-hot columns (1 for the chosen
  choice, 0 for the others), so every pair of distinct choices is equally far apart.
* Conditional parameters (absent from some of the trials): the numeric column holds the
  fill value 0.5 (the centre) where the parameter is absent, and one extra *presence*
  column is 1 where it is present and 0 where not; a categorical parameter's one-hot
  columns are all 0 where it is absent (that already says "absent": no presence column).

A parameter whose distribution differs between trials (a dynamic range) is merged:
numeric ranges take the union, on a grid holding every trial's grid (ints: the gcd of the
steps and of the lows' offsets; floats: the common step when the grids coincide, else
continuous), categorical choices the union in order of first appearance. Distributions of different
kinds, or linear and log, raise ``ValueError`` naming the parameter.

The domain of the bound's LCB minimum is sampled with :func:`sample_candidates`: valid
configurations only (numeric values on their step grid, one choice per categorical,
presence patterns drawn from those observed in the trials, with their frequencies). It is
two steps, so that a caller deciding again and again pays only the second: the
configurations, drawn once for a layout (:func:`candidate_draws`), and the presence
patterns, given to them per decision (:meth:`CandidateDraws.apply`).

Arrays are padded to capacities that double (:func:`capacity`): rows of trials and
columns of the encoding, with masks marking the real ones; a study compiles the bound once
per doubling, not once per trial.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any, NamedTuple, Sequence

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

__all__ = ["FILL", "CandidateDraws", "Encoding", "IncrementalEncoder", "assemble", "candidate_draws", "capacity",
           "encode", "parse", "sample_candidates", "search_space"]

#: Value of a numeric column where its parameter is absent (the centre of the cube).
FILL = 0.5


def capacity(n: int, minimum: int) -> int:
    """The smallest power of two times ``minimum`` that holds ``n`` rows.

    Example:
        >>> capacity(20, 32), capacity(33, 32), capacity(200, 32)
        (32, 64, 256)
    """
    cap = max(int(minimum), 1)
    while cap < n:
        cap *= 2
    return cap


def search_space(trials: Sequence[Any]) -> dict[str, BaseDistribution]:
    """The union of the trials' distributions, by parameter name (sorted).

    Args:
        trials: ``optuna.trial.FrozenTrial`` objects (anything with a ``distributions`` dict).

    Returns:
        ``{name: distribution}`` sorted by name; a parameter seen with several
        compatible distributions gets their merge (see the module docstring).

    Raises:
        ValueError: Incompatible distributions for one parameter (naming it).

    Example:
        >>> import optuna
        >>> t = optuna.trial.create_trial(params={"b": 2, "a": 0.1}, value=1.0, distributions={
        ...     "a": optuna.distributions.FloatDistribution(1e-3, 1.0, log=True),
        ...     "b": optuna.distributions.IntDistribution(1, 4)})
        >>> list(search_space([t]))
        ['a', 'b']
    """
    merged: dict[str, BaseDistribution] = {}
    for trial in sorted(trials, key=lambda t: t.number):
        for name, dist in trial.distributions.items():
            merged[name] = dist if name not in merged else _merge(name, merged[name], dist)
    return {name: merged[name] for name in sorted(merged)}


def _merge(name: str, a: BaseDistribution, b: BaseDistribution) -> BaseDistribution:
    if a is b or (type(a) is type(b) and a.__dict__ == b.__dict__) or a == b:  # cheap checks first
        return a
    if isinstance(a, CategoricalDistribution) and isinstance(b, CategoricalDistribution):
        extra = [c for c in b.choices if c not in a.choices]
        return CategoricalDistribution(list(a.choices) + extra)
    for cls in (FloatDistribution, IntDistribution):
        if isinstance(a, cls) and isinstance(b, cls) and a.log == b.log:
            return cls(min(a.low, b.low), max(a.high, b.high), log=a.log, step=_union_step(a, b))
    raise ValueError(f"parameter {name!r} has incompatible distributions in different trials: {a} and {b} "
                     "(the encoding needs one kind and one scale per parameter)")


def _union_step(a, b):
    """The step of the grid holding both numeric distributions' grids: for ints the gcd of
    the steps and of the lows' offset (so that every value either range allows is on it),
    for floats the common step when the grids are one (the lows an exact multiple of it
    apart), else none (continuous)."""
    if isinstance(a, IntDistribution):
        return math.gcd(a.step, b.step, abs(a.low - b.low))
    if a.step is None or a.step != b.step:
        return None
    offset = Decimal(str(b.low)) - Decimal(str(a.low))
    return a.step if offset % Decimal(str(a.step)) == 0 else None


class Encoding(NamedTuple):
    """Trials encoded into the unit cube (see the module docstring).

    Attributes:
        space: ``{name: distribution}``, sorted by name.
        columns: A label per column: ``"name"`` (numeric), ``"name=choice"`` (one-hot) or
            ``"name?"`` (presence of a conditional parameter); a tuple, so two encodings
            with equal columns have the same layout.
        X: The encoded trials, shape (n, len(columns)), float64 in [0, 1].
        patterns: The distinct presence patterns of the trials, shape (p, len(space)) bool.
        pattern_counts: How many trials have each pattern, shape (p,).
    """

    space: dict[str, BaseDistribution]
    columns: tuple[str, ...]
    X: np.ndarray
    patterns: np.ndarray
    pattern_counts: np.ndarray

    @property
    def conditional(self) -> tuple[bool, ...]:
        """Per parameter: whether it has a presence column (numeric, absent somewhere)."""
        return _conditional(self.space, self.patterns)

    @property
    def num_params(self) -> int:
        """Number of hyperparameters (the ``|Gamma|`` of the paper's beta)."""
        return len(self.space)


def _scale(dist) -> tuple[float, float, float, bool]:
    """``(lo, hi, step, log)`` of a numeric column: the cube's end points on the encoded scale."""
    step = float(dist.step or 0.0)
    lo, hi = dist.low - 0.5 * step, dist.high + 0.5 * step
    if dist.log:
        lo, hi = math.log(lo), math.log(hi)
    return lo, hi, step, bool(dist.log)


def _to_unit(values: np.ndarray, dist) -> np.ndarray:
    lo, hi, _, log = _scale(dist)
    v = np.log(values) if log else values
    if hi == lo:
        return np.full_like(v, 0.5)
    return np.clip((v - lo) / (hi - lo), 0.0, 1.0)


def _from_unit(u: np.ndarray, dist) -> np.ndarray:
    lo, hi, _, log = _scale(dist)
    v = lo + u * (hi - lo)
    return np.exp(v) if log else v


def encode(trials: Sequence[Any], space: dict[str, BaseDistribution] | None = None) -> Encoding:
    """Encodes ``trials`` (in the given order) into the unit cube.

    Args:
        trials: ``optuna.trial.FrozenTrial`` objects.
        space: The search space; default :func:`search_space` of ``trials``.

    Returns:
        An :class:`Encoding`.

    Example:
        >>> import optuna
        >>> FD, CD = optuna.distributions.FloatDistribution, optuna.distributions.CategoricalDistribution
        >>> dists = {"lr": FD(1e-4, 1e-2, log=True), "opt": CD(["adam", "sgd"])}
        >>> t0 = optuna.trial.create_trial(params={"lr": 1e-3, "opt": "sgd"}, distributions=dists, value=0.0)
        >>> enc = encode([t0])
        >>> enc.columns, [round(float(v), 6) for v in enc.X[0]]
        (('lr', 'opt=adam', 'opt=sgd'), [0.5, 0.0, 1.0])
    """
    trials = list(trials)
    space = search_space(trials) if space is None else space
    present, values = parse(trials, space)
    return assemble(space, present, values)


def parse(trials: Sequence[Any], space: dict[str, BaseDistribution]) -> tuple[np.ndarray, np.ndarray]:
    """The Python half of :func:`encode`: which parameters each trial has, shape (n, p)
    bool, and their values, shape (n, p) float (a numeric parameter's value, a
    categorical's index in its distribution's choices; NaN where absent). Rows depend
    only on their trial and ``space``."""
    names = list(space)
    present = np.zeros((len(trials), len(names)), bool)
    values = np.full((len(trials), len(names)), np.nan)
    for j, (name, dist) in enumerate(space.items()):
        categorical = isinstance(dist, CategoricalDistribution)
        for i, t in enumerate(trials):
            params = t.params
            if name in params:
                present[i, j] = True
                v = params[name]
                values[i, j] = dist.to_internal_repr(v) if categorical else float(v)
    return present, values


def assemble(space: dict[str, BaseDistribution], present: np.ndarray, values: np.ndarray) -> Encoding:
    """The NumPy half of :func:`encode`: the :class:`Encoding` of parsed trials
    (:func:`parse`)."""
    conditional = _conditional(space, present)
    X, columns = _rows(space, present, values, conditional)
    patterns, counts = (np.unique(present, axis=0, return_counts=True) if present.shape[0]
                        else (np.ones((1, len(space)), bool), np.ones(1, int)))
    return Encoding(space, columns, X, patterns, counts)


def _conditional(space: dict[str, BaseDistribution], present: np.ndarray) -> tuple[bool, ...]:
    """Per parameter: whether it gets a presence column (numeric and absent somewhere)."""
    return tuple(not isinstance(dist, CategoricalDistribution) and not bool(present[:, j].all())
                 for j, dist in enumerate(space.values()))


def _rows(space, present, values, conditional) -> tuple[np.ndarray, tuple[str, ...]]:
    """The encoded rows of parsed trials in the layout ``conditional`` (which parameters
    have a presence column), and that layout's column labels."""
    n = present.shape[0]
    columns: list[str] = []
    blocks: list[np.ndarray] = []
    for j, (name, dist) in enumerate(space.items()):
        here = present[:, j]
        if isinstance(dist, CategoricalDistribution):
            onehot = np.zeros((n, len(dist.choices)))
            rows = np.flatnonzero(here)
            onehot[rows, values[rows, j].astype(int)] = 1.0
            blocks.append(onehot)
            columns += [f"{name}={c}" for c in dist.choices]
            continue
        col = np.full(n, FILL)
        col[here] = _to_unit(values[here, j], dist)
        blocks.append(col[:, None])
        columns.append(name)
        if conditional[j]:
            blocks.append(here[:, None].astype(float))
            columns.append(f"{name}?")
    X = np.concatenate(blocks, axis=1) if blocks else np.zeros((n, 0))
    return X, tuple(columns)


def _identity(trial) -> tuple:
    """What tells a finished trial from another one of the same number (of another study, or
    built anew): its number, storage id and start time."""
    return trial.number, getattr(trial, "_trial_id", None), trial.datetime_start


class IncrementalEncoder:
    """:func:`encode` of a growing list of trials, parsing and encoding each trial once.

    ``encoder(trials)`` equals ``encode(trials)`` for any list (the same arrays, bit for
    bit). A study's finished trials never change, so while a call's trials are the previous
    call's (the same trials: number, storage id and start time; trials of another study with
    the same numbers are not) plus trials of higher numbers, the search space is merged with the new trials
    only and, as long as it and the layout (which parameters have a presence column) are
    unchanged, only the new trials are parsed and encoded, and the presence patterns
    counted; otherwise (another list, a trial of a lower number finishing late, a new
    choice or range, a parameter absent for the first time) it starts again from the
    trials given.

    Example:
        >>> import optuna
        >>> dists = {"x": optuna.distributions.FloatDistribution(0.0, 2.0)}
        >>> ts = [optuna.trial.create_trial(params={"x": v}, distributions=dists, value=v) for v in (0.5, 1.0)]
        >>> for i, t in enumerate(ts):
        ...     t.number = i
        >>> enc = IncrementalEncoder()
        >>> enc(ts[:1]).X.tolist(), enc(ts).X.tolist()
        ([[0.25]], [[0.25], [0.5]])
    """

    def __init__(self):
        self._numbers: list[tuple] = []  # trial identities (_identity), in number order
        self._space: dict[str, BaseDistribution] = {}
        self._present = np.zeros((0, 0), bool)
        self._values = np.zeros((0, 0))
        self._enc: Encoding | None = None
        self._counts: dict[tuple[bool, ...], int] = {}

    def __call__(self, trials: Sequence[Any]) -> Encoding:
        trials = sorted(trials, key=lambda t: t.number)
        numbers = [_identity(t) for t in trials]
        k = len(self._numbers)
        grows = numbers[:k] == self._numbers and k > 0
        if grows:
            space = dict(self._space)
            for trial in trials[k:]:
                for name, dist in trial.distributions.items():
                    space[name] = dist if name not in space else _merge(name, space[name], dist)
            space = {name: space[name] for name in sorted(space)}
        else:
            space = search_space(trials)
        enc = None
        if grows and list(space.items()) == list(self._space.items()):
            new_present, new_values = parse(trials[k:], space)
            present = np.concatenate([self._present, new_present])
            values = np.concatenate([self._values, new_values])
            old = self._enc
            layout = _conditional(space, present)
            if layout == _conditional(space, self._present):
                X_new, _ = _rows(space, new_present, new_values, layout)
                for row in map(tuple, new_present.tolist()):
                    self._counts[row] = self._counts.get(row, 0) + 1
                enc = Encoding(space, old.columns, np.concatenate([old.X, X_new]), *self._patterns(len(space)))
        else:
            present, values = parse(trials, space)
        if enc is None:
            enc = assemble(space, present, values)
            self._counts = dict(zip(map(tuple, enc.patterns.tolist()), enc.pattern_counts.tolist()))
        self._numbers, self._space, self._present, self._values, self._enc = numbers, space, present, values, enc
        return enc

    def _patterns(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """The counted presence patterns in :func:`numpy.unique`'s order (rows sorted
        lexicographically, False before True) and their counts."""
        rows = sorted(self._counts)
        return np.array(rows, bool).reshape(len(rows), p), np.array([self._counts[r] for r in rows])


class CandidateDraws(NamedTuple):
    """Random configurations drawn once for a layout; :meth:`apply` gives them the presence
    patterns of the trials (see :func:`candidate_draws`).

    Attributes:
        full: Every parameter present, shape (m, len(columns)): numeric values on their
            grid, one choice per categorical, presence columns 1.
        fill: What each column holds where its parameter is absent, shape (len(columns),):
            :data:`FILL` for a numeric column, 0 for one-hot and presence columns.
        param: The parameter (index into ``space``) of each column, shape (len(columns),).
        u: Uniform numbers choosing each candidate's presence pattern, shape (m,).
    """

    full: np.ndarray
    fill: np.ndarray
    param: np.ndarray
    u: np.ndarray

    def apply(self, patterns: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The candidates, shape (m, len(columns)): candidate i takes the pattern whose
        cumulative frequency interval holds ``u[i]`` (patterns drawn with their frequencies
        ``counts``), its absent parameters' columns hold ``fill``."""
        cum = np.cumsum(counts) / np.sum(counts)
        which = np.minimum(np.searchsorted(cum, self.u, side="right"), len(counts) - 1)
        present = patterns[which][:, self.param]
        return np.where(present, self.full, self.fill)


def candidate_draws(rng: np.random.Generator, space: dict[str, BaseDistribution], columns: Sequence[str],
                    m: int, conditional: Sequence[bool] | None = None) -> CandidateDraws:
    """``m`` random configurations of ``space`` laid out as ``columns`` (an
    :class:`Encoding`'s), before presence patterns are applied.

    Numeric values are uniform in the cube and then rounded to their step grid (Optuna's
    rounding: to the grid point whose cell holds the value); each categorical takes one
    uniform choice. Drawn once, they serve every later set of presence patterns, so a
    caller that keeps them (the terminator, per layout) pays only :meth:`CandidateDraws.apply`
    per decision. ``conditional`` (:attr:`Encoding.conditional`) says which parameters have a
    presence column; without it, those whose ``"name?"`` is a column (ambiguous only when a
    parameter is itself named so).
    """
    full, fill, param = [], [], []
    for j, (name, dist) in enumerate(space.items()):
        if isinstance(dist, CategoricalDistribution):
            onehot = np.zeros((m, len(dist.choices)))
            onehot[np.arange(m), rng.integers(len(dist.choices), size=m)] = 1.0
            full.append(onehot)
            fill += [0.0] * len(dist.choices)
            param += [j] * len(dist.choices)
            continue
        u = rng.uniform(size=m)
        if dist.step:
            v = _from_unit(u, dist)
            v = np.clip(np.floor((v - dist.low + 0.5 * dist.step) / dist.step) * dist.step + dist.low,
                        dist.low, dist.high)
            u = _to_unit(v, dist)
        full.append(u[:, None])
        fill.append(FILL)
        param.append(j)
        if conditional[j] if conditional is not None else f"{name}?" in columns:
            full.append(np.ones((m, 1)))
            fill.append(0.0)
            param.append(j)
    full_arr = np.concatenate(full, axis=1) if full else np.zeros((m, 0))
    if len(param) != len(columns):
        raise ValueError(f"columns {tuple(columns)} are not a layout of the space {list(space)}")
    return CandidateDraws(full_arr, np.asarray(fill, float), np.asarray(param, int), rng.uniform(size=m))


def sample_candidates(rng: np.random.Generator, enc: Encoding, m: int) -> np.ndarray:
    """``m`` random valid configurations, encoded like :func:`encode`: shape (m, len(columns)).

    :func:`candidate_draws` applied to the trials' presence patterns: each candidate takes
    the presence pattern of a random trial (patterns drawn with their frequencies), numeric
    values uniform in the cube and then rounded to their step grid, one uniform choice per
    present categorical; absent parameters hold the encoding's fill.

    Example:
        >>> import numpy as np, optuna
        >>> dists = {"n": optuna.distributions.IntDistribution(1, 4)}
        >>> t0 = optuna.trial.create_trial(params={"n": 2}, distributions=dists, value=0.0)
        >>> c = sample_candidates(np.random.default_rng(0), encode([t0]), 1000)
        >>> sorted(set(np.round(c[:, 0], 3).tolist()))          # the centres of 4 cells
        [0.125, 0.375, 0.625, 0.875]
    """
    draws = candidate_draws(rng, enc.space, enc.columns, m, enc.conditional)
    return draws.apply(enc.patterns, enc.pattern_counts)
