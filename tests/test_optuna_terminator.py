"""Tests of jaxstop.integrations.optuna's terminator on real Optuna studies.

Oracles: the unit-cube encoding against closed forms written out here; the bound against
:func:`jaxstop.regret.fit_regret_bound` called on data encoded here (the same jitted program
on the same inputs: equal to the last bit); the threshold against NumPy's Eq. (10); the
records of two processes sharing an SQLite study against a reconstruction from the study.
Every study has the same search space (16 padded columns) and at most 32 trials, so the
bound compiles once for the whole file.
"""

import json
import math
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from _compiles import count_compilations
from jaxstop import regret
from jaxstop.integrations.optuna import (
    CV_SCORES_KEY,
    RegretBoundTerminator,
    TerminatorCallback,
    plot_terminator_improvement,
    report_cross_validation_scores,
    search_space,
    terminator_improvement,
)

optuna.logging.set_verbosity(optuna.logging.WARNING)

OPTIONS = regret.FitOptions(fit_steps=10, refine_steps=0)
SETTINGS = dict(min_n_trials=12, min_top_trials=10, candidates=256, options=OPTIONS)
CHOICES = ["adam", "sgd", "rmsprop"]


def objective(trial, sign=1.0, noise=0.5):
    """A noisy quadratic over a mixed space with 5 CV folds (noise seeded by the trial number)."""
    x = trial.suggest_float("x", -2.0, 2.0)
    lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
    layers = trial.suggest_int("layers", 1, 4)
    width = trial.suggest_int("width", 8, 256, log=True)
    drop = trial.suggest_float("drop", 0.0, 0.5, step=0.1)
    opt = trial.suggest_categorical("opt", CHOICES)
    f = (x - 0.5) ** 2 + 0.1 * (np.log10(lr) + 2.5) ** 2 + 0.05 * (layers - 2) ** 2
    f += 0.02 * np.log2(width / 32) ** 2 + drop + 0.1 * (opt == "rmsprop")
    if opt == "sgd":  # conditional parameter
        f += (trial.suggest_float("mom", 0.0, 0.9) - 0.6) ** 2
    folds = f + noise * np.random.default_rng(trial.number).normal(size=5)
    report_cross_validation_scores(trial, (sign * folds).tolist())
    return float(sign * folds.mean())


def encode_by_hand(trials):
    """The documented encoding, written out: columns sorted by parameter name."""
    rows = []
    for t in trials:
        p = t.params
        row = [(p["drop"] + 0.05) / 0.6,                                           # step 0.1: [-0.05, 0.55]
               (p["layers"] - 0.5) / 4.0,                                          # int: [0.5, 4.5]
               (math.log(p["lr"]) - math.log(1e-4)) / (math.log(1e-1) - math.log(1e-4))]  # log float
        row += [p["mom"] / 0.9, 1.0] if "mom" in p else [0.5, 0.0]                 # fill + presence
        row += [float(p["opt"] == c) for c in CHOICES]                             # one-hot
        row += [(math.log(p["width"]) - math.log(7.5)) / (math.log(256.5) - math.log(7.5)),  # log int
                (p["x"] + 2.0) / 4.0]
        rows.append(row)
    return np.array(rows)


class Recording(RegretBoundTerminator):
    """Keeps the inputs of every fit (test instrumentation only)."""

    def inputs(self, study, trials=None):
        out = super().inputs(study, trials)
        self.seen = getattr(self, "seen", []) + [out]
        return out


def run_study(sampler, direction, n_trials=32, **kw):
    term = Recording(**{**SETTINGS, **kw})
    study = optuna.create_study(sampler=sampler, direction=direction)
    sign = 1.0 if direction == "minimize" else -1.0
    study.optimize(lambda t: objective(t, sign), n_trials=n_trials, callbacks=[TerminatorCallback(term)])
    return study, term


def direct_bound(i, X):
    """fit_regret_bound on data ``X`` encoded here, with the terminator's other inputs."""
    Xp = np.zeros(i.X.shape)
    Xp[: X.shape[0], : X.shape[1]] = X
    return regret.fit_regret_bound(i.key, Xp, i.y, i.mask, init=i.init, init_inv_hessian=i.init_inv_hessian,
                                   dim_mask=i.dim_mask, candidates=i.candidates, fraction=i.fraction,
                                   min_points=i.min_points, beta_t=i.beta_t, options=i.options)


def eq10(folds, ddof):
    k = len(folds)
    return math.sqrt((1 / k + 1 / (k - 1)) * np.var(folds, ddof=ddof))


@pytest.mark.parametrize("sampler,direction", [
    (optuna.samplers.TPESampler(seed=1), "minimize"),
    (optuna.samplers.RandomSampler(seed=2), "maximize"),
])
def test_callback_stops_with_the_direct_bound_and_threshold(sampler, direction):
    study, term = run_study(sampler, direction)
    last = term.last
    assert len(study.trials) < 32 and last.terminate and last.n_trials == len(study.trials)
    assert not any(r.terminate for r in term.history[:-1]) and len(term.history) == len(study.trials) - 11
    assert last.bound < last.threshold and last.ok
    i = term.seen[-1]
    trials = sorted(study.get_trials(states=(TrialState.COMPLETE,)), key=lambda t: t.number)
    X = encode_by_hand(trials)
    assert i.encoding.columns == ("drop", "layers", "lr", "mom", "mom?", "opt=adam", "opt=sgd", "opt=rmsprop",
                                  "width", "x")
    np.testing.assert_allclose(np.asarray(i.X)[: len(trials), :10], X, rtol=0, atol=1e-15)  # log rounding
    sign = 1.0 if direction == "minimize" else -1.0
    np.testing.assert_array_equal(np.asarray(i.y)[: len(trials)],  # shifted by the incumbent's value
                                  sign * np.array([t.value for t in trials]) - sign * i.best_value)
    assert not np.asarray(i.X)[len(trials):].any() and not np.asarray(i.X)[:, 10:].any()
    # the same program on the same inputs: equal to the last bit
    assert float(direct_bound(i, np.asarray(i.X)).bound.bound) == last.bound
    # on the data encoded here (equal up to 1e-15, the rounding of the logarithms): the bound is
    # smooth in X while the top set (fixed by y) and the fit's step count do not change, and the
    # Gram matrix, its noise at least 1e-6 of its amplitude, amplifies a relative change of X by at
    # most its condition number, ~1e6 * 32 rows: 1e-15 * 3.2e7 = 3.2e-8 < 1e-7
    assert float(direct_bound(i, X).bound.bound) == pytest.approx(last.bound, rel=1e-7)
    best = study.best_trial
    assert last.best_number == best.number and last.best_value == best.value
    folds = best.user_attrs[CV_SCORES_KEY]
    # the terminator runs cv_threshold compiled (one program), here it runs eagerly: the same
    # float64 operations on 5 scores (sum, squares, sqrt), fused or not, differ by a few ulps
    assert last.threshold == pytest.approx(float(regret.cv_threshold(np.asarray(folds), ddof=0)), rel=1e-14)
    assert last.threshold == pytest.approx(eq10(folds, 0), rel=1e-13)  # NumPy's rounding of the same formula
    # the warm start is carried: the last fit started from the previous fit's optimum
    assert np.asarray(i.init_inv_hessian).any()


def sgd_first_study(seed):
    """A random-sampler study whose first trial has the conditional parameter: the layout of
    all 10 columns from the start (one compiled program for the whole file)."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    study.enqueue_trial({"opt": "sgd"})
    return study


def test_candidates_are_valid_configurations():
    study = sgd_first_study(3)
    study.optimize(objective, n_trials=8)
    assert {t.params["opt"] == "sgd" for t in study.trials} == {True, False}  # both presence patterns
    c = np.asarray(RegretBoundTerminator(**SETTINGS).inputs(study).candidates)
    assert c.shape == (256, 16) and not c[:, 10:].any() and np.all((c >= 0) & (c <= 1))
    np.testing.assert_allclose(np.round(c[:, 0] * 6 - 0.5), c[:, 0] * 6 - 0.5, atol=1e-9)  # drop: 6 cells
    np.testing.assert_allclose(np.round(c[:, 1] * 4 - 0.5), c[:, 1] * 4 - 0.5, atol=1e-9)  # layers: 4 cells
    width = np.exp(math.log(7.5) + c[:, 8] * (math.log(256.5) - math.log(7.5)))
    np.testing.assert_allclose(width, np.round(width), atol=1e-9)                        # integer widths
    assert set(c[:, 5:8].sum(axis=1)) == {1.0}  # opt is in every trial: one choice each
    present = c[:, 4]
    assert set(present) == {0.0, 1.0}  # both observed patterns are drawn
    assert set(c[present == 0, 3]) == {0.5} and len(set(c[present == 1, 3])) == int((present == 1).sum())



def test_a_range_changed_between_trials_covers_every_trials_grid():
    """Dynamic ranges on shifted grids: every value either range allows is a grid point of the
    union (encoded at the centre of its cell, drawn as a candidate); no value is clipped."""
    ID, FD = optuna.distributions.IntDistribution, optuna.distributions.FloatDistribution
    study = optuna.create_study(study_name="shifted")
    for n, x, dn, dx in ((0, 0.0, ID(0, 10, step=2), FD(0.0, 1.0, step=0.1)),
                         (9, 1.05, ID(1, 9, step=2), FD(0.05, 1.05, step=0.1)),
                         (4, 0.5, ID(0, 10, step=2), FD(0.0, 1.0, step=0.1))):
        study.add_trial(optuna.trial.create_trial(params={"n": n, "x": x}, distributions={"n": dn, "x": dx},
                                                  value=float(n)))
    i = RegretBoundTerminator(threshold=0.1, candidates=512).inputs(study)
    assert i.encoding.columns == ("n", "x")
    # n: the integers 0..10 (step 2 on both grids, shifted by 1), 11 cells of [-0.5, 10.5]
    np.testing.assert_allclose(i.encoding.X[:, 0], (np.array([0, 9, 4]) + 0.5) / 11, rtol=0, atol=1e-12)
    cells = np.asarray(i.candidates)[:, 0] * 11 - 0.5
    assert set(np.round(cells).astype(int).tolist()) == set(range(11))  # odd values are candidates too
    # x: two grids 0.05 apart are no one grid: continuous on [0, 1.05], 1.05 kept (not clipped to 1)
    np.testing.assert_allclose(i.encoding.X[:, 1], np.array([0.0, 1.05, 0.5]) / 1.05, rtol=0, atol=1e-12)
    # equal grids keep their step; int ranges on one grid keep theirs
    same = [optuna.trial.create_trial(params={"n": v, "x": 0.3}, value=0.0, distributions={
        "n": ID(lo, hi, step=2), "x": FD(lo / 10, hi / 10, step=0.1)}) for v, lo, hi in ((2, 0, 4), (6, 2, 8))]
    for k, t in enumerate(same):
        t.number = k
    space = search_space(same)
    assert space["n"] == ID(0, 8, step=2) and space["x"] == FD(0.0, 0.8, step=0.1)


@pytest.mark.parametrize("conditional", ["x", "x?"])
def test_a_parameter_named_like_a_presence_column(conditional):
    """Parameters "x" and "x?" (either one conditional): the layout is read from the trials'
    presence, not from the labels, so the candidates are valid configurations."""
    def objective(trial):
        other = "x?" if conditional == "x" else "x"
        v = trial.suggest_float(other, 0.0, 1.0)
        if trial.number % 2:
            v += trial.suggest_float(conditional, 0.0, 1.0)
        return v

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(objective, n_trials=6)
    i = RegretBoundTerminator(threshold=0.1, min_n_trials=1, candidates=256).inputs(study)
    cols = i.encoding.columns
    assert cols == (("x", "x?", "x?") if conditional == "x" else ("x", "x?", "x??"))
    pos = 0 if conditional == "x" else 1  # the conditional parameter's column; its presence follows
    c = np.asarray(i.candidates)[:, :3]
    present = c[:, pos + 1]
    assert set(present.tolist()) == {0.0, 1.0}                   # both observed patterns drawn
    assert set(c[present == 0, pos].tolist()) == {0.5}           # absent: the fill value
    assert len(set(c[present == 1, pos].tolist())) == int((present == 1).sum())  # present: uniform draws
    always = 2 if conditional == "x" else 0
    assert len(set(c[:, always].tolist())) == 256               # the other parameter: in every candidate
    assert RegretBoundTerminator(threshold=0.1, min_n_trials=1, candidates=256).evaluate(study).ok


def test_values_and_folds_near_1e8_keep_their_spread_in_float32():
    """Values 1e8 + v (v in [0, 0.65]) and folds 1e8 + v + f collapse in a float32 cast (its
    spacing at 1e8 is 8); the terminator shifts them in float64 first, so in float32 the bound
    equals the bound of v itself and the threshold Eq. (10) of the folds."""
    f = np.array([0.125, 0.5, 0.875, 0.25, 0.75])

    def study_of(offset):
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))

        def objective(trial):
            v = (trial.suggest_float("x", 0.0, 1.0) - 0.3) ** 2 + 0.05 * trial.suggest_int("k", 1, 3)
            v = round(v * 2**20) / 2**20  # on float64's grid at 1e8 (2**-26): 1e8 + v - (1e8 + w) is exact
            report_cross_validation_scores(trial, (offset + v + f).tolist())
            return offset + v

        study.optimize(objective, n_trials=20)
        return study

    with jax.enable_x64(False):
        records = [RegretBoundTerminator(candidates=256, warm_start=False).evaluate(study_of(offset))
                   for offset in (0.0, 1e8)]
    plain, shifted = records
    assert plain.ok and shifted.ok
    # the shifted values are v - v_best exactly in both studies: the same float32 problem, the
    # same bound to the last bit
    assert shifted.bound == plain.bound
    exact = math.sqrt((1 / 5 + 1 / 4) * np.var(f))  # Eq. (10), ddof=0, in float64
    np.testing.assert_allclose([plain.threshold, shifted.threshold], exact, rtol=1e-6)  # float32 rounding

def test_ask_tell_loop_compiles_once_and_carries_the_warm_start():
    study = sgd_first_study(4)
    term = RegretBoundTerminator(**SETTINGS, threshold=1e-9)  # never stops: every trial decides
    for _ in range(14):
        trial = study.ask()
        study.tell(trial, objective(trial))
        term.should_terminate(study)
    assert len(term.history) == 3
    with count_compilations() as compiled:
        for _ in range(6):
            trial = study.ask()
            study.tell(trial, objective(trial))
            assert not term.should_terminate(study)
            assert np.asarray(term._warm[2]).any()  # a curvature carried from the previous fit
    assert compiled.total() == 0, compiled
    assert len(term.history) == 9 and all(r.ok for r in term.history)


def test_include_pruned_uses_the_last_intermediate_value():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    for k in range(6):
        trial = study.ask()
        v = objective(trial)
        if k % 3 == 2:
            trial.report(v + 1.0, 0)
            trial.report(v + 0.5, 3)
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, v)
    study.enqueue_trial({"x": 0.0})
    study.ask()  # a RUNNING trial
    failed = study.ask()
    study.tell(failed, state=TrialState.FAIL)
    pruned = [t for t in study.trials if t.state == TrialState.PRUNED]
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    only = RegretBoundTerminator(threshold=0.1).inputs(study)
    assert only.numbers == tuple(t.number for t in complete) and only.num_complete == 4
    both = RegretBoundTerminator(threshold=0.1, include_pruned=True).inputs(study)
    rows = sorted(complete + pruned, key=lambda t: t.number)
    assert both.numbers == tuple(t.number for t in rows)
    expect = [t.value if t.state == TrialState.COMPLETE else t.intermediate_values[3] for t in rows]
    np.testing.assert_array_equal(np.asarray(both.y)[: len(rows)], np.array(expect) - study.best_value)
    assert both.best_number == study.best_trial.number  # the incumbent is a COMPLETE trial


def test_plot_records_replay_the_callback():
    import matplotlib

    matplotlib.use("Agg")
    study, term = run_study(optuna.samplers.TPESampler(seed=1), "minimize")
    records = terminator_improvement(study, term)
    # the same chain of warm-started fits on the same prefixes: the same records
    assert [r for _, r in records] == term.history
    assert [n for n, _ in records] == [t.number for t in study.trials][11:]
    ax = plot_terminator_improvement(study, term, records=records)
    bound, thr = ax.get_lines()[:2]
    np.testing.assert_array_equal(bound.get_ydata(), [r.bound for r in term.history])
    np.testing.assert_array_equal(thr.get_ydata(), [r.threshold for r in term.history])
    assert ax.get_lines()[2].get_xdata()[0] == study.trials[-1].number  # the stop
    matplotlib.pyplot.close("all")


def tagged_objective(trial):
    """:func:`objective`, recording the process that ran the trial."""
    trial.set_user_attr("pid", os.getpid())
    return objective(trial)


WORKER = textwrap.dedent("""
    import json, os, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import optuna
    sys.path.insert(0, {tests!r})
    from test_optuna_terminator import Recording, SETTINGS, tagged_objective
    from jaxstop.integrations.optuna import TerminatorCallback, enable_compilation_cache
    enable_compilation_cache({cache!r})
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="shared", storage={url!r}, sampler=optuna.samplers.RandomSampler(seed=10))
    term = Recording(**SETTINGS, warm_start=False)
    study.optimize(tagged_objective, n_trials=10, callbacks=[TerminatorCallback(term)])
    print(json.dumps([[list(i.numbers), r.bound, r.threshold, r.terminate] for i, r in zip(term.seen, term.history)]))
""")


def test_sqlite_study_from_two_processes(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="shared", storage=url, sampler=optuna.samplers.RandomSampler(seed=6))
    study.enqueue_trial({"opt": "sgd"})
    study.optimize(objective, n_trials=8)
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(tests=os.path.dirname(__file__), cache=str(tmp_path / "cache"), url=url))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(os.path.dirname(__file__))] + sys.path)}
    worker = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    # this process runs its trials while the worker runs (and compiles) its own
    term = Recording(**SETTINGS, warm_start=False)
    study.sampler = optuna.samplers.RandomSampler(seed=11)
    study.optimize(tagged_objective, n_trials=10, callbacks=[TerminatorCallback(term)])
    out, err = worker.communicate(timeout=240)
    assert worker.returncode == 0, err[-2000:]
    study = optuna.load_study(study_name="shared", storage=url)
    pids = {t.user_attrs.get("pid") for t in study.trials} - {None}
    assert len(pids) == 2 and len(study.trials) <= 28
    assert os.listdir(tmp_path / "cache")  # the worker wrote its program to the persistent cache
    # every decision of the worker is reconstructed here from the shared study alone
    by_number = {t.number: t for t in study.trials}
    decisions = json.loads(out.strip().splitlines()[-1])
    assert decisions
    check = RegretBoundTerminator(**SETTINGS, warm_start=False)
    for numbers, bound, threshold, terminate in decisions:
        r = check.evaluate(study, [by_number[n] for n in numbers])
        # same program, same inputs, same machine: the same bits
        assert (r.bound, r.threshold, r.terminate) == (bound, threshold, terminate)


def test_bad_use_gives_clear_errors():
    term = RegretBoundTerminator(**SETTINGS)
    multi = optuna.create_study(study_name="two-goals", directions=["minimize", "maximize"])
    with pytest.raises(ValueError, match="'two-goals' has 2 objectives"):
        term.should_terminate(multi)
    with pytest.raises(ValueError, match="'two-goals' has 2 objectives"):
        TerminatorCallback(term)(multi, None)
    empty = optuna.create_study(study_name="empty")
    assert term.should_terminate(empty) is False  # before min_n_trials: documented False
    with pytest.raises(ValueError, match="'empty' has no COMPLETE trial"):
        term.evaluate(empty)
    # a NaN objective fails the trial in Optuna: failed trials never enter
    nan = optuna.create_study(study_name="nan")
    nan.optimize(lambda t: t.suggest_float("x", 0, 1) * float("nan"), n_trials=3)
    assert {t.state for t in nan.trials} == {TrialState.FAIL} and term.should_terminate(nan) is False
    with pytest.raises(ValueError, match="'nan' has no COMPLETE trial"):
        term.evaluate(nan)
    # an infinite value is COMPLETE in Optuna: named, with its trial
    inf = optuna.create_study(study_name="inf")
    inf.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    inf.add_trial(optuna.trial.create_trial(params={"x": 0.5}, distributions=inf.trials[0].distributions,
                                            value=float("inf")))
    with pytest.raises(ValueError, match=r"'inf': trial\(s\) \[2\] have non-finite objective values"):
        RegretBoundTerminator(threshold=0.1).evaluate(inf)
    with pytest.raises(ValueError, match="incumbent, trial 0, has no cross-validation scores"):
        RegretBoundTerminator().evaluate(inf, inf.trials[:1])
    # finite values beyond float32's range, with x64 off: named as given, not as the inf a
    # float32 cast made of them; with x64 on the same study gives a bound
    huge = optuna.create_study(study_name="huge", sampler=optuna.samplers.RandomSampler(seed=0))
    values = iter([1e39, 2e39, 3e39, 4e39])
    huge.optimize(lambda t: (t.suggest_float("x", 0, 1), next(values))[1], n_trials=4)
    with jax.enable_x64(False):
        with pytest.raises(ValueError, match=r"'huge': trial\(s\) \[0, 1, 2, 3\] have objective values beyond the "
                                             r"range of float32.*e\.g\. 1e\+39"):
            RegretBoundTerminator(threshold=0.1, min_n_trials=1).evaluate(huge)
    assert np.isfinite(RegretBoundTerminator(threshold=0.1, min_n_trials=1).evaluate(huge).bound)
    inf.add_trial(optuna.trial.create_trial(params={"x": 0.5}, distributions=inf.trials[0].distributions,
                                            value=-1.0, user_attrs={CV_SCORES_KEY: [0.1, float("nan")]}))
    with pytest.raises(ValueError, match=r"scores of the incumbent, trial 3, must be at least 2 finite"):
        RegretBoundTerminator().evaluate(inf, [inf.trials[3]])
    trial = optuna.create_study().ask()
    with pytest.raises(ValueError, match="scores must be finite"):
        report_cross_validation_scores(trial, [0.1, float("nan")])
    with pytest.raises(ValueError, match="at least 2"):
        report_cross_validation_scores(trial, [0.1])
    with pytest.raises(ValueError, match="sequence of numbers"):  # a string's characters are no scores
        report_cross_validation_scores(trial, "12")
    with pytest.raises(TypeError, match="min_n_trials must be an int"):
        RegretBoundTerminator(min_n_trials=2.0)
    with pytest.raises(ValueError, match="top_trials_ratio"):
        RegretBoundTerminator(top_trials_ratio=True)
    for bad in (dict(min_n_trials=0), dict(threshold=-1.0), dict(beta_t="iterations"), dict(ddof=2),
                dict(top_trials_ratio=0.0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RegretBoundTerminator(**bad)
    with pytest.raises(ValueError, match="not both"):
        TerminatorCallback(term, min_n_trials=3)
    # checked when built, not at the first decision deep inside study.optimize
    with pytest.raises(ValueError, match="seed must be >= 0"):
        RegretBoundTerminator(seed=-1)
    for seed in (1.7, "a"):
        with pytest.raises(TypeError, match="seed must be an int"):
            RegretBoundTerminator(seed=seed)
    with pytest.raises(TypeError, match="terminator must have a should_terminate"):
        TerminatorCallback("x")


def test_terminator_pickles_and_decides_alike():
    # Optuna saves studies with their callbacks' objects; the terminator's lock could not be
    # pickled. A pickled terminator (and a deep copy) gives the same decision on a study.
    import copy
    import pickle

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    study.optimize(lambda t: (t.suggest_float("x", 0, 1) - 0.3) ** 2, n_trials=12)
    term = RegretBoundTerminator(threshold=1e-3, min_n_trials=5)
    first = term.evaluate(study)
    for other in (pickle.loads(pickle.dumps(TerminatorCallback(term))).terminator, copy.deepcopy(term)):
        assert other._lock is not term._lock
        again = other.evaluate(study)
        assert float(again.bound) == float(term.evaluate(study).bound)
    assert np.isfinite(float(first.bound))


def test_incremental_encoding_equals_encoding_every_call():
    """The terminator parses each finished trial once; every call's encoding equals the
    whole encoding of that call's trials (the hand-written one, and _space.encode), also
    when a trial of a lower number finishes late, a categorical choice or a wider range
    appears, a conditional parameter first shows up, or the trials given are a prefix."""
    from jaxstop.integrations.optuna import _space

    FD, CD = optuna.distributions.FloatDistribution, optuna.distributions.CategoricalDistribution

    def trial(number, x, opt=None, wide=False, choices=("a", "b")):
        params, dists = {"x": x}, {"x": FD(0.0, 4.0 if wide else 2.0)}
        if opt is not None:
            params["opt"], dists["opt"] = opt, CD(list(choices))
        t = optuna.trial.create_trial(params=params, distributions=dists, value=x)
        t.number = number
        return t

    ts = [trial(0, 0.5), trial(1, 1.0), trial(2, 1.5, "a"), trial(4, 0.25, "b"), trial(3, 1.75, "a"),
          trial(5, 3.0, "c", wide=True, choices=("a", "b", "c")), trial(6, 0.75, "b")]
    calls = [ts[:1], ts[:2], ts[:3], ts[:4], ts[:5], ts[:6], ts[:7], ts[:2], ts[:7], ts[:7]]
    enc = _space.IncrementalEncoder()
    for call in calls:
        got, ref = enc(call), _space.encode(sorted(call, key=lambda t: t.number))
        assert got.columns == ref.columns and got.space == ref.space
        np.testing.assert_array_equal(got.X, ref.X)
        np.testing.assert_array_equal(got.patterns, ref.patterns)
        np.testing.assert_array_equal(got.pattern_counts, ref.pattern_counts)
    # the last call, written out: x on [0, 4], presence of opt, one-hot a / b / c
    last = enc(ts)
    assert last.columns == ("opt=a", "opt=b", "opt=c", "x")
    by_number = sorted(ts, key=lambda t: t.number)
    want = [[float(t.params.get("opt") == c) for c in "abc"] + [t.params["x"] / 4.0] for t in by_number]
    np.testing.assert_array_equal(last.X, np.array(want))
    # a real study: every call of the terminator sees the encoding of all its trials
    study, term = run_study(optuna.samplers.RandomSampler(seed=4), "minimize", n_trials=20)
    for i in term.seen:
        trials = [t for t in study.trials if t.number in i.numbers]
        np.testing.assert_array_equal(i.encoding.X, _space.encode(trials).X)
        # values in [0, 1] from at most a log, a subtraction and a division on each side:
        # a few ulp (~1e-15) apart; 1e-12 leaves room and still catches any wrong column
        np.testing.assert_allclose(i.encoding.X, encode_by_hand(trials), rtol=0, atol=1e-12)


def test_candidates_take_presence_patterns_with_their_frequencies():
    """The candidates are drawn once per layout and mapped to the trials' presence patterns
    at each decision: pattern k is taken by the candidates whose uniform u falls in its
    cumulative-frequency interval, so its share is binomial(m, count_k / n). Checked on
    20,000 candidates against that distribution (5 standard deviations), the numeric values
    of a present parameter being the same draws under every frequency, and the terminator
    reusing its device array while the frequencies do not change."""
    from jaxstop.integrations.optuna import _space

    FD = optuna.distributions.FloatDistribution
    space = {"a": FD(0.0, 1.0), "b": FD(0.0, 1.0)}
    columns = ("a", "b", "b?")
    draws = _space.candidate_draws(np.random.default_rng(0), space, columns, 20_000)
    patterns = np.array([[True, False], [True, True]])
    for counts in ([1, 3], [7, 2], [1, 1]):
        c = draws.apply(patterns, np.array(counts))
        share = c[:, 2].mean()  # the presence column of b: 1 where pattern 2 was taken
        p = counts[1] / sum(counts)
        assert abs(share - p) <= 5 * math.sqrt(p * (1 - p) / 20_000)
        assert set(c[c[:, 2] == 0, 1]) == {_space.FILL}  # b absent: the fill
        np.testing.assert_array_equal(c[:, 0], draws.full[:, 0])  # a: always present, the same draws
        np.testing.assert_array_equal(c[c[:, 2] == 1, 1], draws.full[c[:, 2] == 1, 1])
    # an unconditional space: one pattern, so one candidate array for every decision
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=5))
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2 + t.suggest_float("y", 0, 1), n_trials=6)
    term = RegretBoundTerminator(**SETTINGS, threshold=0.0)
    first = term.inputs(study).candidates
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2 + t.suggest_float("y", 0, 1), n_trials=2)
    assert term.inputs(study).candidates is first
    # a new layout (a third parameter, absent before: z and its presence column) draws again
    study.optimize(lambda t: t.suggest_float("x", 0, 1) + t.suggest_float("z", 0, 1), n_trials=1)
    again = term.inputs(study).candidates
    assert np.asarray(first).shape == (256, 4) and np.asarray(again).shape == (256, 8)


def test_one_terminator_reads_each_study_it_is_given():
    """A terminator asked about a second study (whose trials have the same numbers) encodes
    that study's own parameters and decides as a fresh terminator does; with include_pruned,
    a pruned trial whose last value is NaN (a diverged run) is left out instead of refused."""
    def study_of(seed, centre, n):
        s = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
        s.optimize(lambda t: (t.suggest_float("x", -1, 1) - centre) ** 2, n_trials=n)
        return s

    a, b = study_of(0, 0.9, 14), study_of(1, -0.9, 16)
    shared = RegretBoundTerminator(threshold=0.05, warm_start=False, **SETTINGS)
    shared.inputs(a)
    shared.should_terminate(a)
    fresh = RegretBoundTerminator(threshold=0.05, warm_start=False, **SETTINGS)
    got, want = shared.inputs(b), fresh.inputs(b)
    np.testing.assert_array_equal(got.X, want.X)
    xs = np.array([t.params["x"] for t in sorted(b.trials, key=lambda t: t.number)])
    np.testing.assert_allclose(np.asarray(got.X)[: len(xs), 0], (xs + 1) / 2, rtol=0, atol=1e-15)
    assert shared.evaluate(b) == fresh.evaluate(b)

    trial = b.ask()
    trial.report(float("nan"), 0)
    b.tell(trial, state=TrialState.PRUNED)
    with_pruned = RegretBoundTerminator(threshold=0.05, include_pruned=True, warm_start=False, **SETTINGS)
    assert with_pruned.inputs(b).numbers == fresh.inputs(b).numbers  # the diverged trial left out
    with pytest.raises(TypeError, match="include_pruned"):
        RegretBoundTerminator(threshold=0.05, include_pruned="no")


def test_the_stop_is_logged_like_optunas_terminator():
    # Optuna's TerminatorCallback logs the stop at INFO through Optuna's logger (shown at
    # Optuna's default verbosity); the line went to a logger outside Optuna's tree, which has
    # no handler, so it was never shown. It now follows optuna.logging's verbosity.
    import logging

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    root = logging.getLogger("optuna")
    root.addHandler(handler)
    try:
        study = optuna.create_study(study_name="logged", sampler=optuna.samplers.RandomSampler(seed=0))
        optuna.logging.set_verbosity(optuna.logging.INFO)
        study.optimize(objective, n_trials=20, callbacks=[TerminatorCallback(**SETTINGS, threshold=1e9)])
        assert len(study.trials) == SETTINGS["min_n_trials"]  # any bound is below 1e9
        assert any("'logged' stopped by the regret-bound terminator after trial 11" in m for m in seen)
        seen.clear()
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # silenced as Optuna's own lines
        study.optimize(objective, n_trials=1, callbacks=[TerminatorCallback(**SETTINGS, threshold=1e9)])
        assert not any("stopped" in m for m in seen)
    finally:
        root.removeHandler(handler)
        optuna.logging.set_verbosity(optuna.logging.WARNING)
