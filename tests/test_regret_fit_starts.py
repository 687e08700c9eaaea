"""Tests of the regret bound's fit starts: several starts per fit (``num_starts``, AutoGluon
0.1's restarts in the authors' code), the prior's start, and replay rows fitted afresh
(``ReplayOptions(warm_start=False)``, the authors' code's new GP per iteration).

Oracles: Monte Carlo moments and clipping shares of the drawn starts; single-start fits from
each drawn start (the best of them is the multi-start fit); a Python loop of cold
``fit_regret_bound`` calls against the scanned replay.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jaxstop import regret
from jaxstop._src import gp_core, gp_starts, termination
from jaxstop.regret._conventions import with_convention

jax.config.update("jax_enable_x64", True)


def test_perturbed_starts_are_the_start_plus_unit_normal_draws_clipped_to_the_box():
    """Start 0 is ``init``; the others add N(0, 1) to the real dimensions' log lengthscales,
    the log noise and (warped) ``log a`` / ``log b``, clipped to the fit's box; padded
    dimensions, the amplitude and the mean stay. Moments against their Monte Carlo bounds,
    and the share of draws clipped at a face near the start against Phi."""
    num, d = 4001, 3
    dim_mask = jnp.array([True, True, False])
    init = gp_core.with_warping(gp_core.default_init(d, jnp.float64), True)
    init = init._replace(log_noise=jnp.asarray(-35.5))  # 0.5 above the box's lower face (-36)
    s = gp_starts.perturbed_starts(jax.random.key(3), init, num, dim_mask)
    for field in init._fields:
        np.testing.assert_array_equal(np.asarray(getattr(s, field))[0], np.asarray(getattr(init, field)))
    np.testing.assert_array_equal(np.asarray(s.log_amplitude), float(init.log_amplitude))
    np.testing.assert_array_equal(np.asarray(s.mean), float(init.mean))
    for field in ("log_lengthscales", "log_warp_a", "log_warp_b"):
        a = np.asarray(getattr(s, field))[1:]
        np.testing.assert_array_equal(a[:, 2], np.asarray(getattr(init, field))[2])  # padded: unmoved
    # lengthscales: unclipped within [-12, 12] from log 0.5; mean and std of 4,000 N(0, 1)
    # draws are within 0.063 and 0.045 of 0 and 1 (4.5 standard errors)
    z = np.asarray(s.log_lengthscales)[1:, :2] - math.log(0.5)
    assert np.all(np.abs(z.mean(0)) < 0.071) and np.all(np.abs(z.std(0) - 1) < 0.05)
    # warping: clipped to [-log 4, log 4] (P(|Z| > log 4) = 0.166 of the draws sit on a face)
    w = np.asarray(s.log_warp_a)[1:, :2]
    assert np.all(np.abs(w) <= math.log(4) + 1e-12)
    share = np.mean(np.isclose(np.abs(w), math.log(4)))
    p = 2 * scipy.stats.norm.sf(math.log(4))
    assert abs(share - p) < 4.5 * math.sqrt(p * (1 - p) / w.size)
    # noise: the draws below -36 are clipped onto it, P(Z < -0.5) of them
    noise = np.asarray(s.log_noise)[1:]
    assert noise.min() == -36.0
    share = np.mean(noise == -36.0)
    p = scipy.stats.norm.cdf(-0.5)
    assert abs(share - p) < 4.5 * math.sqrt(p * (1 - p) / noise.size)


def test_joint_starts_also_draw_the_amplitude_and_the_mean():
    """With ``joint`` (the joint fit, where the amplitude and the mean are coordinates like
    the others, as in AutoGluon's restarts) the amplitude's log and the mean get N(0, 1)
    draws too: moments of 4,000 draws within 4.5 standard errors; the lengthscales' draws
    are those of the profiled starts (the same keys)."""
    num, d = 4001, 2
    init = gp_core.default_init(d, jnp.float64)
    mask = jnp.array([True, True])
    s = gp_starts.perturbed_starts(jax.random.key(5), init, num, mask, joint=True)
    for field in ("log_amplitude", "mean"):
        a = np.asarray(getattr(s, field))
        assert a[0] == float(getattr(init, field))
        z = a[1:] - float(getattr(init, field))
        assert abs(z.mean()) < 0.071 and abs(z.std() - 1) < 0.05
    p = gp_starts.perturbed_starts(jax.random.key(5), init, num, mask)
    np.testing.assert_array_equal(np.asarray(s.log_lengthscales), np.asarray(p.log_lengthscales))


def _bumpy(seed, n=28):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    y = np.sin(9 * X[:, 0]) * np.cos(5 * X[:, 1]) + 0.4 * X[:, 1] + 0.1 * rng.normal(size=n)
    return X, y


def test_fit_with_several_starts_is_the_best_single_start_fit():
    """``FitOptions(num_starts=5)``: the result is the single-start fit, from the start the
    multi-start fit drew, with the least objective; ``fit_info.restart`` names it. The
    given start (lengthscales e, noise 1) leads into a worse optimum than one of the drawn
    starts, so the choice is visible. Both sides converge (fit_tol 1e-7, float64) to the
    stationary point of each start's basin, so they are two programs agreeing to the fit's
    tolerance: objective values to 1e-8 relative (the objective's error is quadratic in the
    gradient tolerance), the hyperparameters to 1e-4 (first order over the Hessian's
    smallest eigenvalue)."""
    X, y = _bumpy(0)
    key = jax.random.key(1)
    init = termination.default_params(2, jnp.ones(2, bool), jnp.float64, prior="autogluon")
    init = init._replace(log_lengthscales=jnp.ones(2), log_noise=jnp.zeros(()))
    common = dict(fit_steps=300, fit_tol=1e-7, refine_steps=0, prior="autogluon")
    kw = dict(fraction=1.0, min_points=len(y), candidates=64)
    multi = regret.fit_regret_bound(key, X, y, init=init, **kw, options=regret.FitOptions(num_starts=5, **common))
    assert bool(multi.ok)
    # the starts the fit drew: the first half of its key, around its start
    k_start, _ = jax.random.split(key)
    starts = gp_starts.perturbed_starts(k_start, init, 5, jnp.ones(2, bool))
    singles = [regret.fit_regret_bound(key, X, y, init=jax.tree_util.tree_map(lambda a: a[i], starts), **kw,
                                       options=regret.FitOptions(**common)) for i in range(5)]
    objectives = np.array([float(f.fit_info.objective) for f in singles])
    best = int(np.argmin(objectives))
    # one start reaches a better optimum than the given one and than every other start
    assert best != 0 and np.sort(objectives)[1] - objectives[best] > 1e-3
    assert int(multi.fit_info.restart) == best
    np.testing.assert_allclose(float(multi.fit_info.objective), objectives[best], rtol=1e-8)
    np.testing.assert_allclose(np.asarray(multi.params.log_lengthscales),
                               np.asarray(singles[best].params.log_lengthscales), rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="num_starts"):
        regret.fit_regret_bound(key, X, y, options=regret.FitOptions(num_starts=0))


def test_cold_replay_rows_are_fresh_fits_from_the_prior_start():
    """``ReplayOptions(warm_start=False)``: every row is ``fit_regret_bound`` from the prior's
    start (AutoGluon's: noise 1e-3, lengthscales 1) with ``first_fit_steps`` steps and the
    row's key, whatever the rows before it; with ``num_starts`` each row keeps its best start.
    The loop and the scan are different programs over the same steps; rows do not carry
    anything, so their rounding differences are those of one fit (relative 1e-6, as in the
    warm replay's loop test)."""
    T, key = 26, jax.random.key(5)
    rng = np.random.default_rng(1)
    X = rng.uniform(size=(T, 2))
    folds = (np.sum((X - 0.4) ** 2, axis=1) + 0.1 * np.sin(7 * X[:, 1]))[:, None] + 0.05 * rng.normal(size=(T, 5))
    values = folds.mean(1)
    rec = np.full(T, 1.0)  # recorded EI / PI: only the bound's GP is fitted
    paper = regret.CONVENTIONS["paper"]
    res = regret.replay(key, X, values, folds, ei=rec, pi=rec, min_points=10, min_evaluations=20,
                        options=regret.ReplayOptions(candidates=128, num_segments=1, prior="autogluon",
                                                     warm_start=False, num_starts=3, first_fit_steps=25))
    opts = regret.FitOptions(fit_steps=25, refine_steps=paper["refine_steps"], fit_mean=paper["fit_mean"],
                             prior="autogluon", num_starts=3)
    loop = [regret.fit_regret_bound(jax.random.fold_in(key, t), X, values, jnp.arange(T) < t + 1, fraction=0.5,
                                    min_points=10, candidates=128, beta_t=paper["beta_t"], options=opts)
            for t in range(19, T)]
    np.testing.assert_allclose(np.asarray(res.bound)[19:], [float(f.bound.bound) for f in loop], rtol=1e-6)
    assert all(bool(f.ok) for f in loop) and np.all(np.asarray(res.ok)[19:])
    # three starts: some row keeps a start other than the first
    assert any(int(f.fit_info.restart) > 0 for f in loop)
    with pytest.raises(TypeError, match="warm_start"):
        regret.replay(key, X, values, folds, options=regret.ReplayOptions(warm_start=1))


# Loop against scan with AutoGluon's priors and joint fits: the noise variance sits on its floor,
# 1e-9, against an amplitude of about 1, so the n x n kernel matrices (n <= 12 here) have
# condition numbers up to about n / 1e-9 ~ 1e10 and the two programs' solves differ by up to
# about 1e10 * 1.1e-16 ~ 1e-6 of themselves; the bound is the difference of the UCB and LCB
# extremes, up to about 10x smaller than they are on these traces, so its relative difference
# can reach ~1e-5 (observed: up to 1.2e-5 on one row, depending on the CPU's threading).
FLOOR_RTOL = 1e-4


def test_replay_with_given_candidates_and_joint_fits_is_a_loop_of_such_fits():
    """``replay(..., candidates=C)`` with ``ReplayOptions(joint=True, warm_start=False)``:
    every row is ``fit_regret_bound`` with ``candidates=C`` (the same points at every row,
    as the authors' code draws them) and the joint fit, from the prior's start. Loop and scan
    are different programs over the same steps; AutoGluon's Gamma(0.1, 1) noise prior puts
    the noise on its floor (see ``FLOOR_RTOL``). Candidates of the wrong shape or outside the
    cube raise, naming the argument."""
    T, key = 22, jax.random.key(7)
    rng = np.random.default_rng(2)
    X = rng.uniform(size=(T, 2))
    folds = np.sum((X - 0.6) ** 2, axis=1)[:, None] + 0.05 * rng.normal(size=(T, 4))
    values = folds.mean(1)
    cand = np.round(rng.uniform(size=(64, 2)) * 4) / 4  # a grid, as an integer hyperparameter's
    rec = np.full(T, 1.0)
    paper = regret.CONVENTIONS["paper"]
    ropts = regret.ReplayOptions(num_segments=1, prior="autogluon", warm_start=False, first_fit_steps=40,
                                 joint=True, min_noise=1e-9)
    res = regret.replay(key, X, values, folds, ei=rec, pi=rec, min_points=10, candidates=cand, options=ropts)
    opts = regret.FitOptions(fit_steps=40, refine_steps=paper["refine_steps"], fit_mean=paper["fit_mean"],
                             prior="autogluon", joint=True, min_noise=1e-9)
    loop = [regret.fit_regret_bound(jax.random.fold_in(key, t), X, values, jnp.arange(T) < t + 1, fraction=0.5,
                                    min_points=10, candidates=cand, beta_t=paper["beta_t"], options=opts)
            for t in range(19, T)]
    np.testing.assert_allclose(np.asarray(res.bound)[19:], [float(f.bound.bound) for f in loop], rtol=FLOOR_RTOL)
    assert np.all(np.asarray(res.ok)[19:])
    with pytest.raises(ValueError, match="candidates"):
        regret.replay(key, X, values, folds, candidates=cand[:, :1], options=ropts)
    with pytest.raises(ValueError, match="candidates"):
        regret.replay(key, X, values, folds, candidates=cand + 1.5, options=ropts)


def test_authors_preset_is_the_codes_fit_on_one_set_of_candidates():
    """``convention="authors"`` with no fit options fits every row as the authors' code does
    (AutoGluon's priors, afresh from its start, 5 starts, the amplitude and the mean joint,
    the noise variance floored at 1e-9, up to 60 steps per start to a gradient of 1e-3) and
    takes the minimum LCB over one set of random candidates, ``uniform(fold_in(key, T),
    (candidates, d))``, at every row (``redraw=False``): each row equals
    ``fit_regret_bound`` with those settings and those points, written out here. Loop and
    scan are different programs over the same steps, the noise on its floor (``FLOOR_RTOL``);
    both run all 60 steps (``fit_tol=0`` on both sides: with the preset's 1e-3, rounding
    could end the two fits a step apart). ``redraw=True`` draws other points at every row,
    which moves the bounds by far more than that tolerance."""
    preset = with_convention(regret.ReplayOptions(), regret.CONVENTIONS["authors"])
    assert (preset.prior, preset.warm_start, preset.num_starts, preset.joint, preset.min_noise,
            preset.first_fit_steps, preset.fit_tol, preset.redraw) == ("autogluon", False, 5, True, 1e-9, 60, 1e-3,
                                                                      False)
    T, m, key = 24, 64, jax.random.key(11)
    rng = np.random.default_rng(4)
    X = rng.uniform(size=(T, 2))
    folds = (np.sum((X - 0.3) ** 2, axis=1) + 0.1 * np.cos(5 * X[:, 0]))[:, None] + 0.05 * rng.normal(size=(T, 4))
    values = folds.mean(1)
    rec = np.full(T, 1.0)  # recorded EI / PI: only the bound's GP is fitted
    ropts = regret.ReplayOptions(candidates=m, num_segments=1, fit_tol=0.0)
    res = regret.replay(key, X, values, folds, ei=rec, pi=rec, convention="authors", min_points=10, options=ropts)
    cand = jax.random.uniform(jax.random.fold_in(key, T), (m, 2), jnp.float64)
    opts = regret.FitOptions(fit_steps=60, fit_tol=0.0, refine_steps=0, fit_mean=True, prior="autogluon",
                             num_starts=5, joint=True, min_noise=1e-9)
    # lag 1: row t uses the first t evaluations; rows from t = min_evaluations = 20 on
    loop = [regret.fit_regret_bound(jax.random.fold_in(key, t), X, values, jnp.arange(T) < t, fraction=0.5,
                                    min_points=10, candidates=cand, beta_t="fitted", options=opts)
            for t in range(20, T)]
    assert all(bool(f.ok) for f in loop) and np.all(np.asarray(res.ok)[20:])
    np.testing.assert_allclose(np.asarray(res.bound)[20:], [float(f.bound.bound) for f in loop], rtol=FLOOR_RTOL)
    redrawn = regret.replay(key, X, values, folds, ei=rec, pi=rec, convention="authors", min_points=10,
                            options=ropts._replace(redraw=True))
    assert np.max(np.abs(np.asarray(redrawn.bound)[20:] / np.asarray(res.bound)[20:] - 1)) > 100 * FLOOR_RTOL
    with pytest.raises(TypeError, match="redraw"):
        regret.replay(key, X, values, folds, options=ropts._replace(redraw=0))
