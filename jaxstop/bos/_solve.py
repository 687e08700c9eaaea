"""The full BOS solve of one trial (:func:`solve`) or many (:func:`solve_batch`): curve-GP
fit, simulation and backward induction, fused so that the paths are drawn, binned and
counted in chunks.

One program per trial, wherever it runs. A trial is two isolated pieces: the fit
(:func:`jaxstop.bos._curve_gp.fit_impl`) and :func:`_solve_from_gp_impl`, each behind
optimisation barriers on its inputs and outputs, so XLA cannot fuse, constant-fold or
rewrite across them. Eager :func:`solve` runs the two as their own compiled functions;
``jax.jit(solve)``, a policy's traced step and :func:`solve_batch` with ``batch_size=1``
(its default on CPU, a sequential ``lax.map``) inline the very same pieces, so they
compute the same bits. Only vectorised groups (``batch_size > 1``, or ``jax.vmap(solve)``)
run other arithmetic (batched matrix products); see :func:`solve_batch`.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax
from jax.typing import ArrayLike

from jaxstop._src import checks
from jaxstop.bos._curve_gp import fit_impl, fit_jit, posterior
from jaxstop.bos._induction import DecisionTable, decision_table, transition_counts, with_status
from jaxstop.bos._simulate import chunks, draw, factor
from jaxstop.bos._statistic import prefix_part, resolve_statistic
from jaxstop.bos._validate import check_costs, check_horizon, check_in_dtype, check_prefix, rule, screen, solve_config

# Adam's learning rate of the fit inside solve (fit_curve_gp's default).
_LEARNING_RATE = 0.1


def _solve_one(key, prefix, best_error, k1, k2, cost, xi_, bad, *, constant_mean, noise_var, fit_steps, **static):
    dtype = prefix.dtype
    gp = fit_impl(
        prefix,
        jnp.asarray(noise_var, dtype),
        jnp.asarray(_LEARNING_RATE, dtype),
        constant_mean=constant_mean,
        num_steps=fit_steps,
    )
    return _solve_from_gp_impl(key, gp, prefix, best_error, k1, k2, cost, xi_, bad, **static)


def _solve_from_gp_impl(
    key,
    gp,
    prefix,
    best_error,
    k1,
    k2,
    cost,
    xi_,
    bad,
    *,
    horizon,
    num_paths,
    num_bins,
    compat,
    statistic,
    min_count,
    rank,
    chunk_size,
):
    # Isolated (see the module docstring): the same arithmetic wherever it is inlined.
    key, gp, prefix, best_error, k1, k2, cost, xi_, bad = lax.optimization_barrier(
        (key, gp, prefix, best_error, k1, k2, cost, xi_, bad)
    )
    dtype = prefix.dtype
    n0 = prefix.shape[0]
    mean, cov = posterior(gp, prefix, horizon)
    F, dropped = factor(cov, rank)
    T = horizon - n0
    threshold = best_error if compat else best_error + xi_
    s0, c0 = prefix_part(prefix, statistic)  # the summary statistic's observed part
    num_chunks, chunk_size = chunks(num_paths, chunk_size)

    def chunk(c, key_c):
        values = draw(key_c, F, mean, chunk_size)
        real = c * chunk_size + jnp.arange(chunk_size) < num_paths
        return transition_counts(values, real, threshold, num_bins=num_bins, compat=compat, s0=s0, c0=c0)

    keys = jax.random.split(key, num_chunks)
    if num_chunks == 1:
        trans, per_step = chunk(0, keys[0])
    else:

        def body(carry, xs):
            c, key_c = xs
            t, p = chunk(c, key_c)
            return (carry[0] + t, carry[1] + p), None

        init = (jnp.zeros((T - 1, num_bins, num_bins), jnp.int32), jnp.zeros((T, 2, num_bins), jnp.int32))
        (trans, per_step), _ = lax.scan(body, init, (jnp.arange(num_chunks), keys))
    table = decision_table(
        trans,
        per_step,
        k1,
        k2,
        cost,
        jnp.asarray(min_count, dtype),
        n0,
        dropped,
        compat=compat,
        num_bins=num_bins,
        dtype=dtype,
    )
    return lax.optimization_barrier(with_status(table, bad, ~gp.ok))


_PATH_STATIC = ("horizon", "num_paths", "num_bins", "compat", "statistic", "min_count", "rank", "chunk_size")
_FIT_STATIC = ("constant_mean", "noise_var", "fit_steps")
_SOLVE_STATIC = _PATH_STATIC + _FIT_STATIC

# solve = the jitted fit (shared with fit_curve_gp) + this.
_solve_from_gp = jax.jit(_solve_from_gp_impl, static_argnames=_PATH_STATIC)


@partial(jax.jit, static_argnames=_SOLVE_STATIC + ("batch_size",))
def _solve_batch(keys, prefixes, best_error, k1, k2, cost, xi_, bad, *, batch_size, **static):
    def one(args):
        return _solve_one(*args, **static)

    args = (keys, prefixes, best_error, k1, k2, cost, xi_, bad)
    if batch_size == 1:
        # Each trial runs solve's own (unbatched) program: tables equal solve's bit for bit.
        return lax.map(one, args)
    # Pad the trials to whole groups (repeating the last trial) so that only the
    # vectorised body is compiled, not a second one for a remainder.
    num_trials = prefixes.shape[0]
    padded = -(-num_trials // batch_size) * batch_size
    if padded > num_trials:
        index = jnp.minimum(jnp.arange(padded), num_trials - 1)
        args = jax.tree.map(lambda a: a[index], args)
    out = lax.map(one, args, batch_size=batch_size)
    return jax.tree.map(lambda a: a[:num_trials], out)


def solve(
    key: jax.Array,
    prefix: ArrayLike,
    best_error: ArrayLike,
    horizon: int,
    k1: ArrayLike,
    k2: ArrayLike,
    cost: ArrayLike,
    *,
    num_paths: int = 100_000,
    num_bins: int = 99,
    mode: str = "corrected",
    min_count: float = 30,
    xi: ArrayLike = 0.0,
    noise_var: float = 1e-3,
    mean: str = "zero",
    fit_steps: int = 300,
    rank: int | None = 12,
    chunk_size: int = 10_000,
    statistic: str | None = None,
) -> DecisionTable:
    """Solve one trial's BOS problem: fit, simulate, backward induction.

    Runs :func:`fit_curve_gp` on ``prefix`` (the errors of epochs ``1..N0``),
    draws ``num_paths`` posterior paths over epochs ``N0+1..N`` as in
    :func:`simulate`, and runs :func:`backward_induction` on them, fused: the
    paths are drawn, binned and counted in chunks of ``chunk_size``, so they
    are never all in memory at once. The fit is the same compiled function as
    :func:`fit_curve_gp`, and with the same key, ``rank`` and ``chunk_size``
    :func:`simulate` draws the same paths (up to the rounding of its own
    compiled posterior), so the table is that of::

        paths = simulate(key, fit_curve_gp(prefix), prefix, horizon, num_paths,
                         rank=rank, chunk_size=chunk_size)
        backward_induction(paths.values, paths.valid, best_error, k1, k2, cost,
                           prefix=prefix, statistic=statistic)

    The same table, bit for bit, comes out of ``solve`` called eagerly, inside
    ``jax.jit`` (or a policy's traced step) and from :func:`solve_batch` with
    ``batch_size=1``: the fit and the rest are each isolated behind optimisation
    barriers, so every one of these programs compiles the same arithmetic.
    ``jax.vmap(solve)`` vectorises it instead (see :func:`solve_batch` for what
    may then differ).

    Invalid numbers: a prefix error outside (0, 1) (NaN and inf included), or a
    NaN, inf or out-of-range ``best_error``, ``k1``, ``k2``, ``cost`` or ``xi``
    raises ``ValueError`` naming the argument when concrete. Inside ``jit`` the
    table comes back void -- every action ``ACTION_FORCED_CONTINUE``, NaN losses,
    ``ok`` False, ``reason == Reason.BAD_INPUT`` -- so no bin stops on a bad
    input. A fit that finds no finite likelihood gives a void table with
    ``reason == Reason.NOT_FINITE``. float16 / bfloat16 arguments, and a ``key``
    that is not a PRNG key (an integer seed), raise ``TypeError``; NumPy scalars
    (``np.float32(0.1)``) are accepted wherever a float is. The prefix has no padding: every entry is an observed epoch.

    Args:
        key: A ``jax.random`` key.
        prefix: Errors of epochs ``1..N0``, shape (N0,), inside (0, 1), float32
            or float64.
        best_error: Incumbent error, scalar in [0, 1].
        horizon: Last epoch ``N`` (static int, ``> N0``).
        k1, k2, cost: Loss parameters (see :func:`backward_induction`).
        num_paths: Number of simulated paths (static).
        num_bins, mode, min_count, xi: See :func:`backward_induction`.
        statistic: The summary statistic, ``"all_epochs"`` (the paper's mean of epochs
            ``1..n``, ``prefix`` included; the default of ``mode="corrected"``),
            ``"after_n0"`` (the released code's mean of epochs ``N0+1..n``; the default
            of ``mode="compat"``) or ``None`` (the mode's default); see
            :func:`backward_induction` and :func:`summary_statistic`.
        noise_var, mean: See :func:`fit_curve_gp`; ``fit_steps`` its ``num_steps``.
        rank: Leading posterior directions drawn (see :func:`simulate`); the
            default 12 keeps the dropped variance at float64 round-off for this
            kernel, and ``table.dropped_variance`` reports it.
        chunk_size: Paths per chunk (static; bounds memory).

    Returns:
        The :class:`DecisionTable`, dtype of ``prefix``; ``table.ok`` says whether
        it is usable and ``table.reason`` why not.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> prefix = jnp.array([0.6, 0.5, 0.45, 0.42, 0.40, 0.39, 0.385, 0.38])
        >>> table = solve(jax.random.key(0), prefix, 0.3, 20, 100.0, 99.0, 1.0, num_paths=2000)
        >>> table.actions.shape, bool(table.ok)
        ((12, 99), True)
        >>> bad = jax.jit(lambda b: solve(jax.random.key(0), prefix, b, 20, 100.0, 99.0, 1.0,
        ...                               num_paths=2000))(jnp.nan)
        >>> bool(bad.ok), int(bad.reason), int(bad.actions.max())
        (False, 1, 0)
    """
    checks.check_key(key)
    prefix = check_prefix(prefix)
    check_horizon(horizon, prefix.shape[0])
    static = solve_config(
        horizon, num_paths, num_bins, mode, min_count, noise_var, mean, fit_steps, rank, chunk_size
    )
    static["statistic"] = resolve_statistic(statistic, mode)
    dtype = prefix.dtype
    check_in_dtype(dtype, noise_var=static["noise_var"])
    *costs, bad = check_costs(best_error, k1, k2, cost, xi, dtype, static["compat"])
    bad = bad | screen([rule("prefix", prefix)])
    fit = {k: static.pop(k) for k in _FIT_STATIC}
    gp = fit_jit(
        prefix,
        jnp.asarray(fit["noise_var"], dtype),
        jnp.asarray(_LEARNING_RATE, dtype),
        constant_mean=fit["constant_mean"],
        num_steps=fit["fit_steps"],
    )
    return _solve_from_gp(key, gp, prefix, *costs, bad, **static)


# Working memory of one group of trials in solve_batch (default batch_size).
_BATCH_BYTES = 128 * 2**20


def _trial_bytes(chunk: int, T: int, num_bins: int, dtype) -> int:
    """Rough peak working memory of one trial: a chunk of paths and the histograms."""
    paths = chunk * T * (2 * jnp.dtype(dtype).itemsize + 8)
    hist = 3 * max(T - 1, 1) * 2 * num_bins * num_bins * 4
    return paths + hist


def solve_batch(
    key: jax.Array,
    prefixes: ArrayLike,
    best_errors: ArrayLike,
    horizon: int,
    k1: ArrayLike,
    k2: ArrayLike,
    cost: ArrayLike,
    *,
    batch_size: int | None = None,
    num_paths: int = 100_000,
    num_bins: int = 99,
    mode: str = "corrected",
    min_count: float = 30,
    xi: ArrayLike = 0.0,
    noise_var: float = 1e-3,
    mean: str = "zero",
    fit_steps: int = 300,
    rank: int | None = 12,
    chunk_size: int = 10_000,
    statistic: str | None = None,
) -> DecisionTable:
    """Solve many trials' BOS problems in one call.

    :func:`solve` mapped over trials with ``lax.map``, in groups of ``batch_size``
    trials, so memory stays bounded: a trial works on one chunk of
    ``min(num_paths, chunk_size)`` paths and its transition histogram
    (``(T-1) * 2 * num_bins**2`` counts, 3.2 MB for ``T = 42``) at a time,
    whatever the number of trials. Trial ``i`` uses key
    ``jax.random.split(key, num_trials)[i]``.

    Batched versus single. With ``batch_size=1`` (the default on CPU, where
    vectorising trials gains little) the trials run one after the other, each in
    :func:`solve`'s own program, and ``tables[i]`` equals
    ``solve(jax.random.split(key, num_trials)[i], prefixes[i], ...)`` bit for bit.
    With ``batch_size > 1`` (the default on other platforms: as many trials as fit
    in about 128 MB) a group's trials are vectorised: the same keys, paths and
    rules, but batched matrix products and factorisations that round differently,
    in the fit, the posterior, its eigendecomposition and the draws. A simulated
    value then moves by a few units in the last place of that arithmetic (in
    float64 about 1e-15 relative, amplified by the conditioning of the posterior),
    and a path can change bin only where its running mean lies within that
    distance of a bin edge (or its value of 0 or 1, or its final error of the
    event threshold): counts differ by such paths only, and actions only in the
    cells whose losses those counts reach through the backward induction, or where
    a continuation loss ties a stopping loss within rounding. Where the
    likelihood of the curve GP is flat, the vectorised fit may in addition stop at
    a slightly different point of the flat ridge.

    Invalid numbers are handled per trial as in :func:`solve`: a bad value of one
    trial inside ``jit`` voids that trial's table only (``reason[i] ==
    Reason.BAD_INPUT``), concrete ones raise ``ValueError`` naming the argument
    (``prefixes``, ``best_errors``, ...).

    Args:
        key: A ``jax.random`` key.
        prefixes: Errors of epochs ``1..N0`` per trial, shape (num_trials, N0).
        best_errors: Incumbent error per trial, shape (num_trials,) or scalar.
        horizon: Last epoch ``N`` (static).
        k1, k2, cost: Loss parameters, shape (num_trials,) or scalars.
        batch_size: At most this many trials are vectorised together (static);
            default 1 on CPU, elsewhere as many as fit in about 128 MB of working
            memory. The trials are split into equal groups (the last trial
            repeated to fill the last group; the repeats are dropped).
        num_paths, num_bins, mode, min_count, xi, noise_var, mean, fit_steps,
        rank, chunk_size, statistic: See :func:`solve` (``xi`` may be per trial).

    Returns:
        A :class:`DecisionTable` whose fields have a leading (num_trials,) axis
        (``tables.ok`` per trial; look tables up with ``jax.vmap(decide)``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> prefixes = jnp.array([[0.6, 0.5, 0.45, 0.42], [0.5, 0.45, 0.43, 0.42]])
        >>> tables = solve_batch(jax.random.key(0), prefixes, jnp.array([0.3, 0.35]), 10,
        ...                      jnp.array([100.0, 105.0]), 99.0, 1.0, num_paths=1000)
        >>> tables.actions.shape, tables.ok.tolist()
        ((2, 6, 99), [True, True])
    """
    checks.check_key(key)
    prefixes = check_prefix(prefixes, name="prefixes")
    num_trials = prefixes.shape[0]
    if num_trials == 0:
        raise ValueError("prefixes must hold at least one trial, got shape (0, N0)")
    check_horizon(horizon, prefixes.shape[1])
    static = solve_config(
        horizon, num_paths, num_bins, mode, min_count, noise_var, mean, fit_steps, rank, chunk_size
    )
    static["statistic"] = resolve_statistic(statistic, mode)
    dtype = prefixes.dtype
    check_in_dtype(dtype, noise_var=static["noise_var"])
    *costs, bad = check_costs(
        best_errors, k1, k2, cost, xi, dtype, static["compat"], batch=num_trials,
        names=("best_errors", "k1", "k2", "cost", "xi"),
    )
    bad = bad | screen([rule("prefixes", prefixes, "prefix")], (num_trials,))
    if batch_size is None:
        batch_size = 1 if jax.default_backend() == "cpu" else max(
            1,
            min(
                num_trials,
                _BATCH_BYTES
                // _trial_bytes(min(num_paths, chunk_size), horizon - prefixes.shape[1], num_bins, dtype),
            ),
        )
    checks.positive_int(batch_size, "batch_size", 1)
    # Equal groups: the fewest groups of at most batch_size trials, as even as possible.
    batch_size = -(-num_trials // -(-num_trials // min(batch_size, num_trials)))
    keys = jax.random.split(key, num_trials)
    return _solve_batch(keys, prefixes, *costs, bad, batch_size=batch_size, **static)
