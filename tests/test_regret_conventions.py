"""The conventions of :func:`jaxstop.regret.replay` against literal NumPy transcriptions of
the paper (Makarova et al., 2022) and of the authors' code.

* the fold variance of Algorithm 1, line 11 (``1/k``) and Eq. (9)-(10);
* the two ``Ours`` rules: ``sqrt((1/k + 1/(k-1)) s^2)`` and ``sqrt(0.5 s^2)`` (Sec. 4.1),
  against the authors' ``incumbent_std / 0.21 * c`` frozen at the first row
  (``src/stop_methods.py``, lines 16-22);
* the incumbent among ties (Algorithm 1, line 9: ``y_t <= y_t^*``);
* EI / PI of the BO's GP on every evaluation against SciPy on the same posterior.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from _oracles import np_posterior
from jaxstop import regret
from jaxstop.regret._conventions import with_convention


# ------------------------------------------------------------ literal transcriptions
def alg1_s2(y_i):
    """Algorithm 1, lines 8 and 11: ``y_t = (1/k) sum_i y_t^i``, ``s^2 = (1/k) sum_i (y_t - y_t^i)^2``."""
    k = len(y_i)
    y_t = sum(y_i) / k
    return sum((y_t - y) ** 2 for y in y_i) / k


def eq9_threshold(y_i, ratio=None):
    """Eq. (9)-(10): ``sqrt((1/k + |D_i| / |D_-i|) s^2)``; k equal folds: ``|D_i| / |D_-i| = 1/(k-1)``."""
    k = len(y_i)
    r = 1 / (k - 1) if ratio is None else ratio
    return math.sqrt((1 / k + r) * alg1_s2(y_i))


def alg1_incumbents(values):
    """Algorithm 1, lines 9-10: ``if y_t <= y_t^*: y_t^* = y_t, gamma_t^* = gamma_t``."""
    best, inc, out = math.inf, -1, []
    for t, y in enumerate(values):
        if y <= best:
            best, inc = y, t
        out.append(inc)
    return np.array(out)


def first_stop(bound, thr, n_eval, min_evals=20):
    """The first row with ``n >= min_evals`` and ``bound < thr`` (Eq. 10), as a number of
    evaluations; the last row's when none."""
    for t in range(len(bound)):
        if n_eval[t] >= min_evals and bound[t] < thr[t]:
            return int(n_eval[t])
    return int(n_eval[-1])


# ------------------------------------------------------------------------- tests
@pytest.mark.parametrize("k", [2, 5, 10])
def test_cv_threshold_default_is_algorithm1_line11_and_eq9(k):
    rng = np.random.default_rng(k)
    scores = 0.2 + 0.05 * rng.normal(size=(6, k))
    got = np.asarray(regret.cv_threshold(jnp.asarray(scores)))
    # sums of at most 10 float64 terms and a square root, NumPy vs XLA: a few ulps
    np.testing.assert_allclose(got, [eq9_threshold(list(s)) for s in scores], rtol=1e-13)
    got = np.asarray(regret.cv_threshold(jnp.asarray(scores), test_train_ratio=0.25))
    np.testing.assert_allclose(got, [eq9_threshold(list(s), 0.25) for s in scores], rtol=1e-13)
    if k == 10:  # the paper's 0.21 s^2
        assert 1 / 10 + 1 / 9 == pytest.approx(0.2111111111111111, rel=1e-15)


def test_ours_rules_paper_text_and_authors_code():
    """``Stops.ours`` of the paper's rules (Eq. 9; sqrt(0.5 s^2)) and of the authors' code
    (``c / 0.21`` times the standard deviation, frozen at the first row) against the
    literal rules on the same bound and incumbents."""
    rng = np.random.default_rng(0)
    T, k = 80, 10
    values = 0.3 + 0.05 * rng.uniform(size=T)
    folds = values[:, None] + 0.01 * rng.normal(size=(T, k))
    inc = alg1_incumbents(values)
    n = np.arange(1, T + 1)
    thr = np.array([eq9_threshold(list(folds[i])) for i in inc])
    s2 = np.array([alg1_s2(list(folds[i])) for i in inc])
    bound = np.geomspace(0.2, 1e-4, T) * (1 + 0.3 * np.sin(np.arange(T)))
    best = np.minimum.accumulate(values)
    args = (jnp.asarray(bound), jnp.asarray(thr), jnp.asarray(best), jnp.asarray(n))
    paper = regret.stop_iterations(*args, variance=jnp.asarray(s2), **_rules("paper"))
    want = [first_stop(bound, thr, n), first_stop(bound, np.sqrt(0.5 * s2), n)]
    assert np.asarray(paper.ours).tolist() == want
    assert want[0] != want[1]  # the two rules differ on this trace
    # sqrt(0.5 s^2) is Eq. (9)'s threshold times sqrt(0.5 / (1/k + 1/(k-1))), 1.54 for k = 10
    np.testing.assert_allclose(np.sqrt(0.5 * s2) / thr, math.sqrt(0.5 / (1 / k + 1 / (k - 1))), rtol=1e-13)

    # The authors' code: std = incumbent_std / 0.21 * c, set at the first row (iteration
    # 20) and never updated; stop at the first row with regret < std.
    auth = regret.stop_iterations(*args, fixed_threshold=True, **_rules("authors"))
    first = int(np.argmax(n >= 20))
    want = [first_stop(bound, np.full(T, thr[first] / 0.21 * c), n) for c in (0.21, 0.5)]
    assert np.asarray(auth.ours).tolist() == want
    # No decision sits within rounding of its threshold (the thresholds are NumPy's).
    for t in (thr, np.sqrt(0.5 * s2), thr[first], thr[first] * 0.5 / 0.21):
        assert np.min(np.abs(bound - t) / t) > 1e-10


def _rules(convention):
    opts = with_convention(regret.ReplayOptions(), regret.CONVENTIONS[convention])
    return dict(ours_scales=opts.ours_scales, ours_variances=opts.ours_variances)


def test_convention_rule_defaults_and_overrides():
    assert _rules("paper") == dict(ours_scales=(1.0,), ours_variances=(0.5,))
    assert _rules("authors") == dict(ours_scales=(1.0, 0.5 / 0.21), ours_variances=())
    assert _rules("optuna") == dict(ours_scales=(1.0,), ours_variances=())
    # one form given: exactly the rules given
    opts = with_convention(regret.ReplayOptions(ours_scales=(2.0,)), regret.CONVENTIONS["paper"])
    assert (opts.ours_scales, opts.ours_variances) == ((2.0,), ())
    opts = with_convention(regret.ReplayOptions(ours_variances=(0.3,)), regret.CONVENTIONS["authors"])
    assert (opts.ours_scales, opts.ours_variances) == ((), (0.3,))
    for name, conv in regret.CONVENTIONS.items():
        assert set(conv) <= set(regret.ReplayOptions._fields), name
        assert set(conv) == set(regret.CONVENTIONS["paper"]), name
        assert conv["ddof"] == 0  # s^2 with 1/k: Algorithm 1 line 11, np.std, np.var
        assert conv["acq_gp"] == "all"
    assert regret.CONVENTIONS["paper"]["ties"] == "last" and regret.CONVENTIONS["authors"]["ties"] == "first"


T_P, K_P = 24, 4


@pytest.fixture(scope="module")
def paper_replay():
    """One small trace with a tie (evaluation 15 repeats the value of evaluation 9 with
    other folds), replayed with the paper's convention."""
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(T_P, 1))
    f = 0.3 + (X[:, 0] - 0.4) ** 2
    folds = f[:, None] + 0.02 * rng.normal(size=(T_P, K_P))
    values = folds.mean(axis=1)
    i = int(np.argmin(values[:15]))
    values[15] = values[i]  # an exact tie with the incumbent; its folds differ
    values[16:] = np.maximum(values[16:], values[i] + 1e-3)  # it stays the incumbent
    opts = regret.ReplayOptions(candidates=32, num_segments=1, first_fit_steps=4, fit_steps=2, refine_steps=2)
    res = regret.replay(jax.random.key(0), jnp.asarray(X), jnp.asarray(values), jnp.asarray(folds), min_points=6,
                        options=opts)
    return jax.tree_util.tree_map(np.asarray, res), values, folds, i


def test_paper_replay_threshold_ties_and_rules(paper_replay):
    res, values, folds, tied = paper_replay
    inc = alg1_incumbents(values)
    assert inc[15] == 15 and inc[14] == tied  # line 9: the newer of the tied evaluations
    np.testing.assert_array_equal(res.incumbent, inc)
    # s^2 with 1/k and Eq. (9) of the incumbent of every row (a few ulps: NumPy vs XLA sums)
    np.testing.assert_allclose(res.variance, [alg1_s2(list(folds[i])) for i in inc], rtol=1e-13)
    np.testing.assert_allclose(res.threshold, [eq9_threshold(list(folds[i])) for i in inc], rtol=1e-13)
    assert res.threshold[15] != res.threshold[14]  # the tie changed the threshold
    n = res.num_evaluations
    np.testing.assert_array_equal(n, np.arange(1, T_P + 1))  # row t after t + 1 evaluations
    assert not res.computed[18] and res.computed[19:].all() and res.ok[19:].all()
    want = [first_stop(res.bound, res.threshold, n), first_stop(res.bound, np.sqrt(0.5 * res.variance), n)]
    assert res.stops.ours.tolist() == want
    # EI / PI of the BO's GP: finite where computed, +inf elsewhere
    assert np.all(np.isfinite(res.ei[19:])) and np.all(np.isinf(res.ei[:19]))
    assert np.all((res.pi[19:] >= 0) & (res.pi[19:] <= 1))


def test_bo_gp_ei_pi_match_scipy_on_the_same_posterior():
    """The BO's GP of the EI / PI baselines is fitted on every evaluation (``fraction = 1``):
    its maximum EI / PI over the candidates and the evaluated points equal SciPy's on the
    NumPy posterior of the same hyperparameters and standardised values, with the
    incumbent's standardised value as ``best``."""
    rng = np.random.default_rng(1)
    n, d = 25, 2
    X = rng.uniform(size=(n, d))
    y = 0.2 + np.sum((X - 0.35) ** 2, axis=1) + 0.01 * rng.normal(size=n)
    C = rng.uniform(size=(64, d))
    fb = regret.fit_regret_bound(jax.random.key(2), jnp.asarray(X), jnp.asarray(y), fraction=1.0, min_points=1,
                                 candidates=jnp.asarray(C), options=regret.FitOptions(fit_steps=8, refine_steps=0))
    assert int(fb.num_top) == n and bool(fb.ok)
    z = (y - y.mean()) / y.std()  # standardised over every evaluation
    p = jax.tree_util.tree_map(np.asarray, fb.params)
    predict = np_posterior(X, z, float(np.exp(p.log_amplitude)), np.exp(p.log_lengthscales),
                           float(np.exp(p.log_noise)), mean=float(p.mean))
    mu, var = predict(np.concatenate([C, X]))
    sd = np.sqrt(var)
    u = (z.min() - mu) / sd
    ei = sd * (u * scipy.stats.norm.cdf(u) + scipy.stats.norm.pdf(u))
    pi = scipy.stats.norm.cdf(u)
    # two float64 programs on one posterior (Cholesky of a 25 x 25 Gram matrix): the
    # posterior moments agree to ~1e-12 relative; EI and PI at their maxima (u > -2) are
    # smooth in them
    assert float(fb.ei_max) == pytest.approx(ei.max(), rel=1e-8)
    assert float(fb.pi_max) == pytest.approx(pi.max(), rel=1e-8)
    assert u[np.argmax(ei)] > -2


def test_convention_settings_are_validated():
    X = np.linspace(0, 1, 6)[:, None]
    folds = np.tile([0.1, 0.2, 0.3], (6, 1))
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="acq_gp"):
        regret.replay(key, X, folds.mean(1), folds, options=regret.ReplayOptions(acq_gp="mine"))
    with pytest.raises(ValueError, match="ties"):
        regret.replay(key, X, folds.mean(1), folds, options=regret.ReplayOptions(ties="middle"))
    with pytest.raises(ValueError, match="ours_variances"):
        regret.replay(key, X, folds.mean(1), folds, options=regret.ReplayOptions(ours_variances=(-0.5,)))
    n = jnp.arange(1, 7)
    with pytest.raises(ValueError, match="variance"):
        regret.stop_iterations(jnp.ones(6), jnp.ones(6), jnp.ones(6), n, ours_variances=(0.5,))
    with pytest.raises(ValueError, match="variance must have shape"):
        regret.stop_iterations(jnp.ones(6), jnp.ones(6), jnp.ones(6), n, variance=jnp.ones(5), ours_variances=(0.5,))
