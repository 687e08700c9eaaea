"""Tests of the Optuna pruners: BOSPruner and UQSuccessiveHalvingPruner.

Real studies (``optuna.create_study``, seeded TPE / random samplers) whose objective
replays AlexNet learning curves from the embedded data (``jaxstop.data.alexnet_curves``):
each trial picks a curve by an int parameter and reports its errors epoch by epoch.
Oracles: Optuna's own ``SuccessiveHalvingPruner`` (the plain rule), and the jaxstop
kernels (``bos.solve`` / ``bos.decide``, ``confidence.window_std`` /
``window_delta_sigma`` / ``keep_count``) called directly on inputs rebuilt from the
finished study by the rules the pruners document (the incumbent, the K1 schedule, the
rung members, their curves, the round budget).
"""

import json
import math
import os
import subprocess
import sys
import textwrap
import warnings

import jax
import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from _compiles import count_compilations
import jaxstop
from jaxstop import bos, confidence
from jaxstop.data import alexnet_curves
from jaxstop.integrations.optuna import BOSPruner
from jaxstop.integrations.optuna import UQSuccessiveHalvingPruner

optuna.logging.set_verbosity(optuna.logging.WARNING)

L, N0 = 20, 8  # epochs replayed per trial (every curve has at least 20), BOS's N0
CURVES = alexnet_curves().values[:, :L].astype(np.float64)  # top-1 validation errors
EPS = float(np.finfo(np.float64).eps)


def replay(scale=None, nan_trial=None):
    """An objective replaying curve ``curve`` step by step (``scale``: report the accuracy
    ``scale * (1 - error)`` instead of the error); trial ``nan_trial`` reports NaN from step 2."""

    def objective(trial):
        c = trial.suggest_int("curve", 0, CURVES.shape[0] - 1)
        values = CURVES[c] if scale is None else scale * (1.0 - CURVES[c])
        for step, v in enumerate(values):
            trial.report(float("nan") if trial.number == nan_trial and step >= 2 else float(v), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return float(values[-1])

    return objective


def outcome(study):
    return [(t.state, t.last_step, t.params) for t in study.trials]


# ------------------------------------------------------------------------------------------
# successive halving: the plain rule is Optuna's


@pytest.mark.parametrize("direction, settings", [
    ("minimize", dict(min_resource=1, reduction_factor=3)),
    ("maximize", dict(min_resource=2, reduction_factor=2, min_early_stopping_rate=1, bootstrap_count=2)),
])
def test_plain_rule_equals_optuna_successive_halving(direction, settings):
    objective = replay(None if direction == "minimize" else 1.0)
    runs = []
    for pruner in (optuna.pruners.SuccessiveHalvingPruner(**settings), UQSuccessiveHalvingPruner(**settings, uq=False)):
        study = optuna.create_study(direction=direction, sampler=optuna.samplers.TPESampler(seed=3), pruner=pruner)
        study.optimize(objective, n_trials=60)
        runs.append(outcome(study))
    # TPE reads the pruned states and values: one different decision would change the rest
    assert runs[0] == runs[1]
    assert {s for s, _, _ in runs[0]} == {TrialState.PRUNED, TrialState.COMPLETE}


@pytest.mark.parametrize("steps", ["sparse", "single"])
def test_plain_rule_equals_optuna_with_reports_that_skip_rungs(steps):
    # Reports at steps 0, 5, 10, 19 (each past several rungs) or a single report at step 10:
    # a rung's members are the trials decided there (a trial pruned at rung 0 whose report
    # went past rung 2 is no member of rung 2), as in Optuna's pruner; they once differed in
    # 3-8 of 30 trials.
    def objective(trial):
        c = trial.suggest_int("curve", 0, CURVES.shape[0] - 1)
        if steps == "single":
            trial.report(float(CURVES[c, 10]), 10)
            if trial.should_prune():
                raise optuna.TrialPruned()
            return float(CURVES[c, -1])
        for step in (0, 5, 10, 19):
            trial.report(float(CURVES[c, step]), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return float(CURVES[c, -1])

    plain_rule_equals_optuna(objective, dict(min_resource=1, reduction_factor=3), seed=5, n_trials=40)


def plain_rule_equals_optuna(objective, settings, seed, n_trials):
    """Random-sampler studies of ``objective`` with Optuna's pruner and the plain UQ pruner
    end with the same trials, states and last steps, some pruned and some complete."""
    runs = []
    for pruner in (optuna.pruners.SuccessiveHalvingPruner(**settings), UQSuccessiveHalvingPruner(**settings, uq=False)):
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed), pruner=pruner)
        study.optimize(objective, n_trials=n_trials)
        runs.append(outcome(study))
    assert runs[0] == runs[1]
    assert {s for s, _, _ in runs[0]} == {TrialState.PRUNED, TrialState.COMPLETE}


def test_plain_rule_equals_optuna_with_reports_in_any_order_and_repeated_calls():
    # Each trial reports 8 of the 20 steps in a shuffled order (steps going down as well as up),
    # asks should_prune() after some reports only and twice after others: a trial is decided
    # once per rung, at the call whose last report (the largest step) reached it, with that
    # value; members compete with the value they were decided with. They once differed (a
    # second call re-decided a rung; a member's value was re-read from its reports).
    def objective(trial):
        rng = np.random.default_rng(trial.number)
        c = trial.suggest_int("curve", 0, CURVES.shape[0] - 1)
        for step in rng.permutation(L)[:8]:
            trial.report(float(CURVES[c, step] + 0.01 * rng.standard_normal()), int(step))
            for _ in range(int(rng.integers(0, 3))):  # 0, 1 or 2 calls
                if trial.should_prune():
                    raise optuna.TrialPruned()
        return float(CURVES[c, -1])

    plain_rule_equals_optuna(objective, dict(min_resource=1, reduction_factor=2), seed=7, n_trials=60)


def test_nan_at_a_rung_is_pruned_as_optuna_does():
    runs = []
    for pruner in (optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=3),
                   UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3, uq=False),
                   UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)):
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1), pruner=pruner)
        study.optimize(replay(nan_trial=4), n_trials=8)
        assert (study.trials[4].state, study.trials[4].last_step) == (TrialState.PRUNED, 2)
        runs.append(outcome(study))
    assert runs[0] == runs[1]


def _scaled_study(pruner, scale, inf_trial=None, n_trials=9, inf=math.inf):
    """A study replaying the AlexNet curves times ``scale``; ``inf_trial`` reports ``inf`` at every step."""
    def objective(trial):
        c = trial.suggest_int("curve", 0, CURVES.shape[0] - 1)
        for step, v in enumerate(CURVES[c]):
            trial.report(inf if trial.number == inf_trial else float(scale * v), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return float(scale * CURVES[c][-1])

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3), pruner=pruner)
    study.optimize(objective, n_trials=n_trials)
    return study



def test_uq_decisions_do_not_move_with_an_offset_of_the_values():
    """x64 off (float32): the AlexNet errors plus 1e8 (float32's spacing there is 8, wider than
    the curves' whole range) decide as the errors themselves: the keep rule depends on
    differences only (mu, the window std and its change), and they are taken in float64."""
    grid = np.round(CURVES * 2**20) / 2**20  # on float64's grid at 1e8 (2**-26): the shifts are exact

    def run(offset):
        pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)

        def objective(trial):
            c = trial.suggest_int("curve", 0, CURVES.shape[0] - 1)
            for step, v in enumerate(grid[c]):
                trial.report(float(offset + v), step)
                if trial.should_prune():
                    raise optuna.TrialPruned()
            return float(offset + grid[c][-1])

        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3), pruner=pruner)
        with jax.enable_x64(False):
            study.optimize(objective, n_trials=12)
        return [(d.number, d.rung, d.promoted, d.uq, d.k, d.fallback, d.reason) for d in pruner.decisions]

    plain, offset = run(0.0), run(1e8)
    assert sum(d[3] for d in plain) >= 5  # the UQ rule decides (not a fallback)
    assert offset == plain

def test_uq_a_diverged_member_is_the_worst_and_leaves_the_uq_problem():
    # a member whose rung loss is +inf (a run that diverged; -inf in a maximised study) is
    # left out of the UQ problem and not promoted, as the policies' keep rule leaves out
    # non-finite losses; the others are decided by the UQ rule on the finite members (it used
    # to be the plain rule for every decision at that rung). The oracle rebuilds keep_count's
    # inputs from the study.
    pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    study = _scaled_study(pruner, 1.0, inf_trial=4, n_trials=12)
    by_number = {t.number: t for t in study.trials}
    assert (by_number[4].state, by_number[4].last_step) == (TrialState.PRUNED, 2)
    with_inf = [d for d in pruner.decisions if 4 in d.members and d.rung == 0]
    assert len(with_inf) >= 5
    capacity = Capacity()
    for d in with_inf:
        assert (d.uq, d.fallback) == (True, "")
        assert (d.promoted, d.uq, d.k) == oracle_decision(by_number, d.members, d.rung, capacity)[:3]
    # maximised: -inf is the diverged run
    pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=3), pruner=pruner)

    def objective(trial):
        c = trial.suggest_int("curve", 0, CURVES.shape[0] - 1)
        for step, v in enumerate(CURVES[c]):
            trial.report(-math.inf if trial.number == 4 else float(1.0 - v), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return float(1.0 - CURVES[c][-1])

    study.optimize(objective, n_trials=12)
    assert (study.trials[4].state, study.trials[4].last_step) == (TrialState.PRUNED, 2)
    with_inf = [d for d in pruner.decisions if 4 in d.members and d.rung == 0]
    assert len(with_inf) >= 5 and all(d.uq and d.fallback == "" for d in with_inf)


def test_uq_fallbacks_say_why_and_decide_by_the_plain_rule():
    # a member whose rung loss is -inf, better than every finite one: "not_finite"; the
    # decision is the plain rule's on the same rung values
    pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    study = _scaled_study(pruner, 1.0, inf_trial=0, inf=-math.inf)
    values = {t.number: t.intermediate_values for t in study.trials}
    with_inf = [d for d in pruner.decisions if 0 in d.members and d.rung == 0]
    assert len(with_inf) >= 5
    for d in with_inf:
        assert (d.uq, d.fallback, d.reason) == (False, "not_finite", 0)
        rung_values = [values[m][d.step] for m in d.members]
        assert d.promoted == (rung_values[-1] <= sorted(rung_values)[max(len(rung_values) // 3 - 1, 0)])
    # finite values beyond float32's range (x64 off: the pruner computes in float32) are not
    # cast to inf: the keep count's status says the dtype cannot represent the problem
    with jax.enable_x64(False):
        pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
        study = _scaled_study(pruner, 1e39)
    decided = [d for d in pruner.decisions if d.fallback == "status"]
    assert len(decided) >= 5
    assert all(d.reason == int(jaxstop.Reason.UNREPRESENTABLE) and not d.uq for d in decided)
    values = {t.number: t.intermediate_values for t in study.trials}
    for d in decided:
        # Optuna's rule written out: promoted iff at most the max(1, n // eta)-th smallest rung value
        rung_values = [values[m][min(s for s in values[m] if s >= d.step)] for m in d.members]
        assert d.promoted == (rung_values[-1] <= sorted(rung_values)[max(len(rung_values) // 3 - 1, 0)])
    # the keep count takes the values minus the best rung loss (in float64): a member's window of
    # values up to the rung (11: window 10 and one more for Delta sigma) beyond float32's range
    # then is the UNREPRESENTABLE fallback, and the UQ rule decides only where all lie within it
    top = float(np.finfo(np.float32).max)
    beyond = 0
    for d in pruner.decisions:
        if d.fallback in ("", "status"):
            steps = [min(s for s in values[m] if s >= d.step) for m in d.members]
            ref = min(values[m][s] for m, s in zip(d.members, steps))
            window = [values[m][k] - ref for m, s in zip(d.members, steps) for k in range(max(0, s - 10), s + 1)]
            if max(abs(v) for v in window) > top:
                beyond += 1
                assert (d.uq, d.fallback, d.reason) == (False, "status", int(jaxstop.Reason.UNREPRESENTABLE))
    assert beyond >= 3
    # the same values in float64 are usable: the UQ rule decides (except where a member's
    # constant curve puts its sigma at the absolute floor min_sigma, below the spacing of 1e39)
    pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    _scaled_study(pruner, 1e39)
    assert sum(d.uq for d in pruner.decisions) >= 5


# ------------------------------------------------------------------------------------------
# successive halving: the UQ rule is keep_count's on the rung's members


class Capacity:
    """The pruner pads its keep-count problem to a capacity (32, doubled when outgrown);
    the oracle pads to the same capacity so that both sides run the same compiled
    program and the decisions can be compared exactly."""

    def __init__(self):
        self.cap = 32

    def __call__(self, n):
        while self.cap < n:
            self.cap *= 2
        return self.cap


def oracle_decision(by_number, members, rung, capacity, min_resource=2, eta=3, window=10):
    """(promoted, uq, k, plain rule's promoted) of the trial ``members[-1]`` at ``rung`` among ``members``, rebuilt
    from the study: each member's errors at steps 0..S_r (every trial reports every step)."""
    step_r = min_resource * eta**rung
    curves = np.array([[by_number[m].intermediate_values[s] for s in range(step_r + 1)] for m in members])
    mu = curves[:, -1]
    n = len(mu)
    plain = bool(mu[-1] <= np.sort(mu)[max(n // eta, 1) - 1])  # Optuna's top-1/eta rule, written out
    if step_r + 1 < 3:  # the window estimate of delta_sigma needs three values
        return plain, False, max(1, n // eta), plain
    cap = capacity(n)
    pad = np.full((cap, step_r + 1), np.nan)
    pad[:n] = curves
    epochs = np.where(np.arange(cap) < n, step_r + 1, 0).astype(np.int32)
    # a member whose rung loss is +inf (diverged) is not part of the UQ problem
    mask = (np.arange(cap) < n) & np.isfinite(np.resize(mu, cap))
    # sigma floored at the pruner's documented default min_sigma, 2^-18
    sigma = np.where(mask, np.maximum(np.asarray(confidence.window_std(pad, epochs, window)), 2.0**-18), 1.0)
    delta = np.where(mask, np.asarray(confidence.window_delta_sigma(pad, epochs, window)), 0.0)
    # R: the steps the plain rule would give the promoted members up to the next rung
    budget = max(1, n // eta) * (min_resource * eta ** (rung + 1) - step_r)
    res = confidence.keep_count(np.where(mask, np.resize(mu, cap), 0.0), sigma, delta, np.float64(budget), mask=mask)
    if not bool(res.ok):
        return plain, False, max(1, n // eta), plain
    return bool(res.keep[n - 1]), True, int(res.k), plain


def test_uq_decisions_equal_keep_count_on_the_same_inputs():
    pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=0), pruner=pruner)
    study.optimize(replay(), n_trials=40)
    trials = study.trials
    capacity = Capacity()
    kept = dropped = partial = differs = 0
    first_drop = {}
    for d in pruner.decisions:
        step_r = 2 * 3**d.rung
        # sequential study: the members are the earlier trials that reported the rung step, then the trial
        earlier = tuple(t.number for t in trials[: d.number] if step_r in t.intermediate_values)
        assert (d.step, d.members) == (step_r, earlier + (d.number,))
        promoted, uq, k, plain = oracle_decision({t.number: t for t in trials}, d.members, d.rung, capacity)
        assert (d.promoted, d.uq, d.k) == (promoted, uq, k)
        kept += uq and promoted
        dropped += uq and not promoted
        partial += uq and 1 < k < len(d.members)
        differs += uq and promoted != plain
        if not d.promoted:
            first_drop.setdefault(d.number, d.step)
    # the study did what the decisions said
    for t in trials:
        if t.number in first_drop:
            assert (t.state, t.last_step) == (TrialState.PRUNED, first_drop[t.number])
        else:
            assert (t.state, t.last_step) == (TrialState.COMPLETE, L - 1)
    # both outcomes, a rung that keeps some but not all, and decisions the plain rule would not take
    assert kept and dropped and partial and differs


def test_uq_pruner_compiles_once_per_capacity():
    pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2), pruner=pruner)
    study.optimize(replay(), n_trials=12)
    with count_compilations() as compiled:
        study.optimize(replay(), n_trials=12)  # at most 24 members: capacity 32 throughout
    assert sum(d.uq for d in pruner.decisions) > 12
    assert compiled.total() == 0, compiled


WORKER = textwrap.dedent("""
    import json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import optuna
    from jaxstop.integrations.optuna import UQSuccessiveHalvingPruner
    sys.path.insert(0, {tests!r})
    from test_optuna_pruners import replay
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3)
    study = optuna.load_study(study_name="shared", storage={url!r}, pruner=pruner,
                              sampler=optuna.samplers.RandomSampler(seed=int(sys.argv[1])))
    study.optimize(replay(), n_trials=8)
    print(json.dumps([[d.rung, list(d.members), d.promoted, d.uq, d.k] for d in pruner.decisions]))
""")


def test_sqlite_study_from_two_processes(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="shared", storage=url, sampler=optuna.samplers.RandomSampler(seed=0),
                                pruner=UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3))
    study.optimize(replay(), n_trials=4)
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(tests=os.path.dirname(__file__), url=url))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root] + sys.path), "OPENBLAS_NUM_THREADS": "1",
           "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    procs = [subprocess.Popen([sys.executable, str(script), str(s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for s in (10, 11)]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
    trials = optuna.load_study(study_name="shared", storage=url).trials
    assert len(trials) == 20 and {t.state for t in trials} == {TrialState.COMPLETE, TrialState.PRUNED}
    # every decision of either process is rebuilt from the shared study alone (the members it
    # saw: which trials had reached the rung then depends on the interleaving of the processes)
    by_number = {t.number: t for t in trials}
    decisions = [d for out, _ in outs for d in json.loads(out.strip().splitlines()[-1])]
    assert sum(d[3] for d in decisions) > 10
    for rung, members, promoted, uq, k in decisions:
        expected = oracle_decision(by_number, members, rung, Capacity())  # at most 20 members: capacity 32
        assert (promoted, uq, k) == expected[:3]
        if not promoted:
            assert by_number[members[-1]].state == TrialState.PRUNED


# ------------------------------------------------------------------------------------------
# BOS


def to_error(v, scale):
    """The pruner's documented normalisation: errors as given, or (hi - v) / (hi - lo)."""
    return np.asarray(v, np.float64) if scale is None else (scale - np.asarray(v, np.float64)) / scale


@pytest.mark.parametrize("scale, incumbent", [(None, "all"), (100.0, "complete")])
def test_bos_decisions_equal_bos_kernels(scale, incumbent):
    """Minimised errors with the paper's incumbent over all evaluations; maximised accuracies
    in percent (``value_range=(0, 100)``) with the incumbent over complete trials."""
    settings = dict(n_startup_trials=3, incumbent=incumbent, num_paths=2000, seed=5)
    pruner = BOSPruner(N0, max_steps=L, value_range=(0.0, 1.0 if scale is None else scale), **settings)
    inner, tables = replay(scale), {}

    def objective(trial):
        try:
            return inner(trial)
        finally:  # the table solved for this trial, before it is dropped
            tables[trial.number] = pruner.table(trial.number)

    study = optuna.create_study(direction="minimize" if scale is None else "maximize",
                                sampler=optuna.samplers.TPESampler(seed=1), pruner=pruner)
    study.optimize(objective, n_trials=16)
    pruned = completed_active = 0
    for tr in study.trials:
        earlier = study.trials[: tr.number]  # sequential: every earlier trial has finished
        record = pruner.records[tr.number]
        if len(earlier) < 3:  # startup: never pruned
            assert not record.active and tr.state == TrialState.COMPLETE and tables[tr.number] is None
            continue
        finals = [t.value for t in earlier if t.state == TrialState.COMPLETE]
        if incumbent == "all":
            finals += [t.intermediate_values[t.last_step] for t in earlier if t.state == TrialState.PRUNED]
        best = float(np.clip(np.min(to_error(finals, scale)), EPS, 1 - EPS))
        t = len(earlier) - 3 + 1  # BO iteration: finished trials after the startup ones
        errors = np.clip(to_error(CURVES[tr.params["curve"]] if scale is None
                                  else scale * (1 - CURVES[tr.params["curve"]]), scale), EPS, 1 - EPS)
        key = jax.random.fold_in(jax.random.key(5), tr.number)
        f = np.float64
        table = bos.solve(key, errors[:N0], f(best), L, np.asarray(bos.k1_schedule(t, 100.0, 0.95), f), f(99.0),
                          f(1.0), num_paths=2000, xi=f(0.0))
        assert (record.t, record.best_error) == (t, best)
        # same program, same inputs: the same table
        np.testing.assert_array_equal(np.asarray(tables[tr.number].actions), np.asarray(table.actions))
        stops = [n for n in range(N0 + 1, L)
                 if int(bos.decide(table, n, np.cumsum(errors[:n])[-1] / n)) == bos.ACTION_STOP]  # Sec. 3.2, summed in order
        if stops:
            assert (tr.state, tr.last_step) == (TrialState.PRUNED, stops[0] - 1)  # epoch n is step n - 1
            pruned += 1
        else:
            assert (tr.state, tr.last_step) == (TrialState.COMPLETE, L - 1)
            completed_active += 1
    assert pruned and completed_active


def test_bos_pruner_solves_once_per_trial_without_recompiling():
    pruner = BOSPruner(N0, max_steps=L, n_startup_trials=2, num_paths=2000)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=4), pruner=pruner)
    study.optimize(replay(), n_trials=5)
    with count_compilations() as compiled:
        study.optimize(replay(), n_trials=5)
    assert sum(r.active for r in pruner.records.values()) == 8 and compiled.total() == 0, compiled


# ------------------------------------------------------------------------------------------
# bad use


def test_bos_incumbent_skips_pruned_runs_that_diverged():
    # A run that diverged (NaN, or a loss beyond value_range) and was pruned by the objective
    # itself offers no incumbent value; every later trial once failed on its value.
    pruner = BOSPruner(n_startup_steps=2, max_steps=6, n_startup_trials=1, num_paths=500)
    study = optuna.create_study(pruner=pruner)
    bad = {1: float("nan"), 2: 5.0}

    def objective(trial):
        for step in range(6):
            err = bad[trial.number] if trial.number in bad and step == 1 else 0.5 - 0.02 * step + 0.01 * trial.number
            trial.report(err, step)
            if trial.number in bad and step == 1:
                raise optuna.TrialPruned()
            if trial.should_prune():
                raise optuna.TrialPruned()
        return err

    study.optimize(objective, n_trials=6)
    assert not any(t.state == TrialState.FAIL for t in study.trials)
    # the incumbent of trial 3's problem: trial 0's final error (0.4), not NaN or 5.0
    rec = pruner.records[3]
    assert rec.active and rec.best_error == pytest.approx(0.5 - 0.02 * 5, abs=1e-12)


def test_bos_pruner_prunes_a_run_that_diverged():
    # A NaN report (a diverged run) raised ValueError about value_range from should_prune(),
    # which failed the trial and stopped study.optimize. It now prunes the trial, as Optuna's
    # SuccessiveHalvingPruner prunes a NaN (test_nan_at_a_rung_is_pruned_as_optuna_does), once
    # the startup trials have finished; during the startup it is not pruned.
    for nan_trial, state, last_step in ((4, TrialState.PRUNED, 2), (1, TrialState.COMPLETE, L - 1)):
        pruner = BOSPruner(N0, max_steps=L, n_startup_trials=2, num_paths=500)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1), pruner=pruner)
        study.optimize(replay(nan_trial=nan_trial), n_trials=6)  # raised before
        assert len(study.trials) == 6
        assert (study.trials[nan_trial].state, study.trials[nan_trial].last_step) == (state, last_step)
        assert nan_trial not in pruner.records  # no BOS problem is solved on a NaN prefix


@pytest.mark.parametrize("make", [lambda: UQSuccessiveHalvingPruner(min_resource=2, reduction_factor=3),
                                  lambda: BOSPruner(8, max_steps=L, n_startup_trials=2, num_paths=500)])
def test_studies_with_the_pruners_pickle_and_go_on_alike(make):
    # Optuna saves a study with its pruner (pickle, joblib.dump); the pruners' locks could
    # not be pickled. A saved and loaded study goes on exactly as the original does.
    import copy
    import pickle

    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=4), pruner=make())
    study.optimize(replay(), n_trials=6)
    loaded = pickle.loads(pickle.dumps(study))
    clone = copy.deepcopy(study.pruner)
    assert type(clone) is type(study.pruner) and clone._lock is not study.pruner._lock
    for s in (study, loaded):
        s.optimize(replay(), n_trials=6)
    assert outcome(loaded) == outcome(study)
    assert {s for s, _, _ in outcome(study)} == {TrialState.PRUNED, TrialState.COMPLETE}


def test_bos_pruner_errors_name_the_argument():
    def run(values, pruner=None, steps=None, setup=None):
        study = optuna.create_study(pruner=pruner or BOSPruner(2, max_steps=6, n_startup_trials=0, num_paths=500))
        if setup:
            setup(study)

        def objective(trial):
            for step, v in zip(steps or range(len(values)), values):
                trial.report(v, step)
                if trial.should_prune():
                    raise optuna.TrialPruned()
            return values[-1]

        study.optimize(objective, n_trials=1)

    with pytest.raises(ValueError, match=r"1\.5 lies outside value_range=\(0\.0, 1\.0\)"):
        run([0.5, 1.5])
    with pytest.raises(ValueError, match="-0.5 lies outside value_range"):
        run([0.5, -0.5])
    with pytest.raises(ValueError, match="80.0 lies outside value_range"):  # accuracies in percent, unmapped
        run([80.0, 85.0], BOSPruner(2, max_steps=6, num_paths=500))
    with pytest.raises(ValueError, match="no value at step 1"):
        run([0.5, 0.4, 0.3], steps=[0, 2, 3])
    with pytest.raises(ValueError, match="reported step 6, but max_steps=6"):
        run([0.5] * 7)
    with pytest.raises(ValueError, match="the incumbent value 2.0 lies outside value_range"):
        run([0.5, 0.4, 0.3], setup=lambda s: s.optimize(lambda t: 2.0, n_trials=1))
    with pytest.raises(ValueError, match="n_startup_steps"):
        BOSPruner(6, max_steps=6)
    with pytest.raises(ValueError, match="value_range"):
        BOSPruner(2, max_steps=6, value_range=(1.0, 0.0))
    for bad in ("01", {0: 1, 1: 0}, (0.0, 0.5, 1.0)):  # read as (0, 1) once
        with pytest.raises(TypeError, match="value_range must be a pair"):
            BOSPruner(2, max_steps=6, value_range=bad)
    with pytest.raises(ValueError, match="incumbent"):
        BOSPruner(2, max_steps=6, incumbent="best")
    assert BOSPruner(2, max_steps=6, seed=np.int64(3))._seed == 3
    with pytest.raises(ValueError, match="seed must be a 64-bit signed integer"):
        BOSPruner(2, max_steps=6, seed=2**64)
    with pytest.raises(TypeError, match="seed must be an int"):
        BOSPruner(2, max_steps=6, seed=1.5)


def test_uq_pruner_argument_errors():
    with pytest.raises(ValueError, match="reduction_factor"):
        UQSuccessiveHalvingPruner(reduction_factor=1)
    with pytest.raises(ValueError, match="keep_rule"):
        UQSuccessiveHalvingPruner(keep_rule="median")
    with pytest.raises(ValueError, match="window"):
        UQSuccessiveHalvingPruner(window=1)
    with pytest.raises(TypeError, match="uq must be a bool"):
        UQSuccessiveHalvingPruner(uq="False")  # would otherwise count as True


def test_bos_pruner_serves_one_study():
    """Its records and tables are per trial number, which a second study's trials share: a
    second study is refused (it once decided there with the first study's incumbent)."""
    pruner = BOSPruner(2, max_steps=6, n_startup_trials=0, num_paths=500)

    def objective(trial):
        for step, v in enumerate([0.5, 0.4, 0.3, 0.2]):
            trial.report(v, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return 0.2

    first = optuna.create_study(pruner=pruner)
    first.optimize(objective, n_trials=2)
    first.optimize(objective, n_trials=1)  # the same study again: fine
    second = optuna.create_study(pruner=pruner)
    with pytest.raises(ValueError, match="give each study its own BOSPruner"):
        second.optimize(objective, n_trials=1)


@pytest.mark.parametrize("pruner", [BOSPruner(2, max_steps=6), UQSuccessiveHalvingPruner()],
                         ids=["bos", "uq"])
def test_multi_objective_study_is_refused(pruner):
    study = optuna.create_study(study_name="two-goals", directions=["minimize", "maximize"])
    trial = optuna.trial.create_trial(state=TrialState.RUNNING, intermediate_values={0: 0.5, 1: 0.4})
    with pytest.raises(ValueError, match="study 'two-goals' has 2 objectives"):
        pruner.prune(study, trial)


def test_uq_decides_in_float32_when_a_members_sigma_shrinks_below_its_spacing():
    """x64 off (float32): a member whose window delta_sigma exceeds its sigma has its shrunk
    sigma at 1e-3 of it in zeta (~4e-6 here, below 2^10 float32 spacings of a loss ~0.15),
    but it competes with members 1e-2 wide, whose spread its rounding does not touch. The
    keep count is ok and the UQ rule decides: no "status" fallback."""
    finals = np.random.default_rng(0).uniform(0.1, 1.0, 24)

    def objective(trial):
        i = trial.number
        trial.suggest_float("x", 0.0, 1.0)
        noise = np.random.default_rng(i).normal(0.0, 0.01, 40)
        for s in range(1, 40):
            trial.report(float(finals[i] + 1.0 / s + noise[s]), s)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return float(finals[i] + 1.0 / 39 + noise[39])

    with jax.enable_x64(False):
        pruner = UQSuccessiveHalvingPruner(min_resource=3, reduction_factor=3, window=4)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), pruner=pruner)
        study.optimize(objective, n_trials=24)
    assert sum(d.rung >= 1 for d in pruner.decisions) >= 10
    assert [d for d in pruner.decisions if d.fallback] == []
    assert all(d.uq for d in pruner.decisions)


def test_uq_falls_back_when_a_members_window_std_overflows():
    """x64 off (float32): finite values alternating +-3e38 have a window std of ~3.5e38, beyond
    float32's range. The pruner raised keep_count's ValueError about a ``sigma`` the objective
    never passed (ending the study); the decision is now the plain rule's, labelled
    ``"status"`` / UNREPRESENTABLE, as for values beyond the range themselves."""
    def objective(trial):
        trial.suggest_float("x", 0.0, 1.0)
        for step in range(12):
            trial.report((3e38 if step % 2 else -3e38) * (1.0 - 0.01 * trial.number), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return 0.0

    with jax.enable_x64(False):
        pruner = UQSuccessiveHalvingPruner(min_resource=3, reduction_factor=3, window=3)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), pruner=pruner)
        study.optimize(objective, n_trials=5)
    assert all(t.state != TrialState.FAIL for t in study.trials)
    decided = [d for d in pruner.decisions if len(d.members) >= 2]
    assert len(decided) >= 5
    values = {t.number: t.intermediate_values for t in study.trials}
    for d in decided:
        assert (d.uq, d.fallback, d.reason) == (False, "status", int(jaxstop.Reason.UNREPRESENTABLE))
        # Optuna's rule written out on the rung values (every trial reports every step)
        rung_values = [values[m][d.step] for m in d.members]
        assert d.promoted == (rung_values[-1] <= sorted(rung_values)[max(len(rung_values) // 3 - 1, 0)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bos_pruner_warns_of_errors_below_the_curve_gp_noise(monkeypatch, dtype):
    # Validation errors of about 1% (a good model): the curve GP (noise std 0.03 on the (0, 1)
    # scale) reads them as noise around 0 and its continuations leave (0, 1) -- every one in
    # float32 (table EMPTY), all but a few in float64 -- so the pruner never prunes. That was
    # silent (only records showed it); it now warns once, naming value_range, and records the
    # share of paths the table rests on. A value_range spanning the values cures it.
    from jaxstop.integrations.optuna import _bos_pruner

    monkeypatch.setattr(_bos_pruner, "float_dtype", lambda: np.dtype(dtype))  # float32: JAX without x64
    n0, steps, paths = 8, 20, 1000
    curve = 0.01 + 0.004 * np.exp(-0.5 * np.arange(steps))

    def objective(trial):
        c = curve * (1.0 + 0.2 * trial.suggest_float("x", 0.0, 1.0))
        for step, v in enumerate(c):
            trial.report(float(v), step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return float(c[-1])

    def run(value_range):
        pruner = BOSPruner(n0, max_steps=steps, n_startup_trials=1, num_paths=paths, value_range=value_range)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2), pruner=pruner)
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            study.optimize(objective, n_trials=3)
        ours = [w for w in rec if "BOSPruner" in str(w.message)]
        return pruner, [r for r in pruner.records.values() if r.active], ours

    pruner, active, ours = run((0.0, 1.0))
    assert len(active) == 2 and len(ours) == 1  # once per pruner, though both tables are bad
    assert ours[0].category is RuntimeWarning and "value_range=(lo, hi)" in str(ours[0].message)
    for r in active:
        # oracle: the share of simulate's paths (solve draws these very paths: same key, rank 12)
        prefix = r.prefix.astype(dtype)
        key = jax.random.fold_in(jax.random.key(0), r.number)
        sim = bos.simulate(key, bos.fit_curve_gp(prefix), prefix, steps, paths, rank=12)
        share = float(np.mean(np.asarray(sim.valid)))
        assert abs(r.valid_share - share) <= 0.01  # paths within rounding of 0 may flip
        # the paths that stay inside (0, 1) are the collapsed posterior: a curve at 0
        assert np.max(np.asarray(sim.values)[np.asarray(sim.valid)], initial=0.0) < 1e-6
        if dtype == np.float32:
            assert (r.ok, r.reason) == (False, int(jaxstop.Reason.EMPTY)) and r.valid_share == 0.0
    # errors spread over (0, 1): usable tables, no warning
    pruner, active, ours = run((0.0, 0.05))
    assert not ours and len(active) == 2
    assert all(r.ok and r.valid_share >= 0.5 for r in active), active
