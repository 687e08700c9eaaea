"""Benchmark: jaxstop's batched simulator against the anchors outside jaxstop, in runs per second.

One run is one whole HPO study on the 64 embedded AlexNet curves (``jaxstop.data.alexnet_curves()``,
float32, ragged: 20-100 epochs), successive halving with eta = 3 (one bracket: 64 configurations
at 1, 4, 11, 33 and 100 epochs). Measured side by side in one process:

* **NumPy loop** (the anchor of plain SH): the same synchronous SH rules written as a plain
  Python / NumPy loop, one run at a time -- the same bracket, the same uniform choice of 64
  distinct rows (``rng.permutation``), the same keep rule (the ``n_{i+1}`` lowest losses,
  ties to the earlier slot), the same checkpointed budget (a promoted row resumes; a row whose
  curve ends is complete and keeps competing; unallocatable epochs carry over) and the same
  incumbent (the best loss at the highest rung reached). Before timing, the script feeds the
  rows jaxstop drew for ``--check-runs`` keys to this loop and asserts that it returns
  jaxstop's incumbent and budget for every one: both sides do the same work (the same check
  runs on a small synthetic table of tied losses and short curves, where the tie rule and
  the complete members decide).
* **jaxstop SH / SH+, batched**: ``sim.run_batch`` of ``--sh-runs`` / ``--shplus-runs`` keys
  (on CPU the studies run in blocks of ``CPU_BLOCK``), and the same keys as one vmapped batch
  (``jax.vmap(sim.run)``), with the batch protocol (the default), the whole trace returned,
  compiled ahead of time (compile time reported apart); and ``sim.run_batch`` with
  ``record="final"``, which returns each study's outcome only (incumbent, its losses, budget,
  stop step), as the NumPy loop does.
* **Optuna's pruner**: one Optuna study per run (in-memory storage, ``RandomSampler`` over
  the row index, 64 trials), each trial replaying its curve epoch by epoch through
  ``trial.report`` / ``trial.should_prune`` with ``optuna.pruners.SuccessiveHalvingPruner
  (min_resource=1, reduction_factor=3)`` (asynchronous SH: rungs at 1, 3, 9, 27, 81 epochs), and
  the same with jaxstop's ``UQSuccessiveHalvingPruner`` when ``jaxstop.integrations.optuna``
  exports it (a warm-up study first: its keep-count programs compile once per process).

* **Syne Tune's simulator** (the ``synetune`` extra): one Syne Tune study per run, ASHA
  (``syne_tune.optimizer.baselines.ASHA``, grace period 1, reduction factor 3: rungs at 1, 3,
  9, 27, 81 epochs) with one worker on its simulator backend (``UserBlackboxBackend`` over the
  curves as a ``BlackboxTabular``, a ragged curve holding its last loss; ``SimulatorCallback``,
  no sleep), stopped once 64 trials have started; left out, with the reason printed, when
  Syne Tune is not installed.

Goals: batched plain SH >= 10x the NumPy loop's runs/s; batched SH+ >= 30x Optuna's pruner.

    .venv/bin/python benchmarks/bench_sim_anchors.py                 # the full run
    .venv/bin/python benchmarks/bench_sim_anchors.py --quick         # smaller sizes

Every figure is the median of ``--repeats`` timed calls after a warm-up call. The table is
printed and written to ``--out`` (Markdown) with the machine, the command and the versions.
"""

from __future__ import annotations

import _common

_common.setup_environment()

import argparse  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxstop  # noqa: E402
from jaxstop import policies, sim  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "bench_sim_anchors.md"
ETA = 3


# ----------------------------------------------------------------------------- the NumPy loop
def _track(inc, level, value, config):
    """The incumbent after a result at rung ``level``: a finite loss at a higher rung
    replaces it, at the same rung only a strictly lower loss does. ``inc`` is
    ``(config, value, level)``."""
    if not np.isfinite(value) or level < inc[2]:
        return inc
    if level > inc[2] or value < inc[1]:
        return (int(config), value, level)
    return inc


def numpy_sh(values, lengths, rows, bracket, max_budget):
    """One run of plain synchronous SH, one bracket, on the rows ``rows`` (slot order).

    The rules of :mod:`jaxstop.policies.halving`: round ``i`` has the budget
    ``C_i = n_i (r_i - r_{i-1})`` plus what the previous round could not allocate, split
    equally among the kept members that can still train (at most ``max_budget`` epochs);
    a member whose curve ended, or that reached ``max_budget``, is complete and competes
    without training. Keeps the ``n_{i+1}`` lowest losses (ties: the earlier slot). The
    table's losses are finite (``sim.CurveTable`` checks it), so no NaN handling.

    Returns:
        ``(incumbent, epochs spent)``.
    """
    sizes, budgets, round_budgets = bracket
    n0 = rows.shape[0]
    epochs = np.zeros(n0, np.int64)
    mu = np.full(n0, np.inf, values.dtype)
    complete = np.zeros(n0, bool)
    members = np.arange(n0)            # slots, ascending
    train = members                    # the slots that train this round
    alloc, carry, spent = round_budgets[0] // n0, 0, 0
    inc = (-1, np.inf, -1)
    last = len(sizes) - 1
    for i in range(len(sizes)):
        if train.size:
            c = rows[train]
            start = epochs[train]
            want = start + alloc
            end = np.minimum(want, lengths[c])
            val = values[c, end - 1]
            spent += int((end - start).sum())
            complete[train] |= (end < want) | (end >= max_budget)
            epochs[train] = end
            mu[train] = val
            b = int(np.argmin(val))
            inc = _track(inc, budgets[i], val[b], c[b])
        if i == last:
            break
        # the keep rule, then the next round's allocation
        keep = np.sort(members[np.argsort(mu[members], kind="stable")[:sizes[i + 1]]])
        budget = round_budgets[i + 1] + carry
        trainable = keep[~complete[keep]]
        if trainable.size > budget:    # fewer epochs than members: the best `budget` of them
            drop = trainable[np.argsort(mu[trainable], kind="stable")[budget:]]
            keep = np.setdiff1d(keep, drop)
            trainable = np.setdiff1d(trainable, drop)
        ktr = trainable.size
        alloc = min(budget // ktr, int((max_budget - epochs[trainable]).min())) if ktr else 0
        carry = budget - alloc * ktr
        members = keep
        train = trainable if alloc > 0 else trainable[:0]
        done = keep[complete[keep]]    # complete members carried into the next rung compete there
        if done.size:
            b = done[np.argmin(mu[done])]
            inc = _track(inc, budgets[i + 1], mu[b], rows[b])
        if not train.size:             # nobody can train: the bracket ends here
            break
    done = members[complete[members]]
    if done.size:
        b = done[np.argmin(mu[done])]
        inc = _track(inc, budgets[-1], mu[b], rows[b])
    return inc[0], spent


def numpy_study(rng, values, lengths, bracket, max_budget):
    """One run with its own uniform choice of ``n_0`` distinct rows."""
    rows = rng.permutation(values.shape[0])[:bracket[0][0]]
    return numpy_sh(values, lengths, rows, bracket, max_budget)


def alexnet_table():
    """The embedded AlexNet curves as ``(values, lengths, table)``: float32 losses (0 past a
    curve's end), each curve's length and the :class:`sim.CurveTable` jaxstop plays."""
    curves = jaxstop.data.alexnet_curves()
    mask = np.asarray(curves.mask, bool)
    values = np.where(mask, np.asarray(curves.values, np.float32), 0.0).astype(np.float32)
    return values, mask.sum(1).astype(np.int64), sim.CurveTable(jnp.asarray(values), jnp.asarray(mask))


# ----------------------------------------------------------------------------- the contenders
# Each is ``(call, compile s, epochs)``: ``call()`` runs the contender's runs once (the
# first call already made), ``epochs()`` the mean epochs per run (of the last call for
# jaxstop, whose calls repeat the same keys; of every study after the warm-up for Optuna).
def batched_call(policy, table, num_runs, runner="run_batch", record="full"):
    """``num_runs`` keys through ``sim.run_batch`` (``runner="run_batch"``: the studies in
    blocks of ``batching.CPU_BLOCK`` on CPU) or through ``jax.vmap(sim.run)`` (``"vmap"``: one
    vmapped batch) with the default (batch) protocol, compiled ahead of time; the whole
    trace returned, or with ``record="final"`` the outcome only (incumbent, its losses,
    budget, stop step: what the NumPy loop returns)."""
    keys = jax.random.split(jax.random.key(0), num_runs)
    if runner == "run_batch":
        fn = lambda k: sim.run_batch(policy, table, k, record=record)  # noqa: E731
    else:
        fn = lambda k: jax.vmap(lambda kk: sim.run(policy, table, kk))(k)  # noqa: E731
    compiled, seconds = _common.compile_timed(fn, keys)
    last = {"traces": jax.block_until_ready(compiled(keys))}

    def call():
        last["traces"] = compiled(keys)
        return last["traces"]

    return call, seconds, lambda: float(np.mean(np.asarray(last["traces"].budget))), last


def check_same_work(traces, values, lengths, bracket, max_budget, num_runs):
    """Asserts that the NumPy loop, given the rows jaxstop drew in the first ``num_runs`` of
    ``traces`` (batched SH), returns jaxstop's incumbent and budget for every one of them."""
    n0 = bracket[0][0]
    rows = np.asarray(traces.jobs.config[:num_runs, :n0])  # the first round: every slot, in slot order
    incumbents, budgets = np.asarray(traces.incumbent), np.asarray(traces.budget)
    for r in range(num_runs):
        inc, spent = numpy_sh(values, lengths, rows[r], bracket, max_budget)
        if inc != int(incumbents[r]) or spent != int(budgets[r]):
            raise AssertionError(f"run {r}: NumPy loop (incumbent {inc}, budget {spent}) differs from jaxstop "
                                 f"(incumbent {int(incumbents[r])}, budget {int(budgets[r])})")
    return num_runs


def check_ties(num_runs):
    """The same check on a small table built for ties and short curves: 40 curves of 40
    epochs, losses on a grid of quarters, lengths geometric (mean 8), plain SH with
    eta = 3 (27 rows). Returns how many runs it checked."""
    rng = np.random.default_rng(0)
    n, t = 40, 40
    lengths = np.minimum(rng.geometric(1 / 8, n), t).astype(np.int64)
    mask = np.arange(t)[None, :] < lengths[:, None]
    values = np.round(rng.uniform(0, 1, (n, 1)) * np.linspace(1, 0.5, t)[None, :] * 4) / 4
    values = np.where(mask, values, 0.0).astype(np.float32)
    table = sim.CurveTable(jnp.asarray(values), jnp.asarray(mask))
    b = policies.halving_schedule("sh", n, t, ETA).brackets[0]
    policy = policies.sh(n, t, eta=ETA)
    traces = jax.jit(jax.vmap(lambda k: sim.run(policy, table, k)))(jax.random.split(jax.random.key(2), num_runs))
    return check_same_work(traces, values, lengths, (b.sizes, b.budgets, b.round_budgets), t, num_runs)


def numpy_call(values, lengths, bracket, max_budget, num_runs):
    """The NumPy loop, ``num_runs`` runs one at a time, each with its own choice of rows."""
    rng = np.random.default_rng(0)
    last = {}

    def call():
        last["out"] = [numpy_study(rng, values, lengths, bracket, max_budget) for _ in range(num_runs)]
        return None

    call()
    return call, 0.0, lambda: float(np.mean([s for _, s in last["out"]]))


def optuna_call(optuna, make_pruner, values, lengths, num_trials, num_runs):
    """``num_runs`` Optuna studies of ``num_trials`` trials each (in-memory storage, a
    ``RandomSampler`` over the row index, a new seed per study), replaying the curves through
    ``trial.report`` / ``trial.should_prune``; one warm-up study first."""
    vals = values.astype(float)
    epochs = []

    def objective(trial):
        c = trial.suggest_int("config", 0, vals.shape[0] - 1)
        for e in range(1, int(lengths[c]) + 1):
            trial.report(vals[c, e - 1], e)
            if trial.should_prune():
                epochs[-1] += e
                raise optuna.TrialPruned()
        epochs[-1] += int(lengths[c])
        return vals[c, lengths[c] - 1]

    seeds = iter(range(10**6))

    def one():
        epochs.append(0)
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=next(seeds)), pruner=make_pruner())
        study.optimize(objective, n_trials=num_trials)

    def call():
        for _ in range(num_runs):
            one()
        return None

    one()  # warm-up: imports, and the UQ pruner's programs compile
    call()
    return call, 0.0, lambda: float(np.mean(epochs[1:]))  # every timed study


def synetune_call(values, lengths, num_trials, num_runs):
    """``num_runs`` Syne Tune studies (``syne_tune.optimizer.baselines.ASHA``, grace period 1,
    reduction factor 3, one worker, on its simulator backend: ``UserBlackboxBackend`` over the
    table as a ``BlackboxTabular``, ``SimulatorCallback``, ``sleep_time=0``), each stopped
    after ``num_trials`` trials started; a new seed per study, one warm-up study first. Or
    ``None`` and the reason when Syne Tune is not installed (the ``synetune`` extra)."""
    try:
        import logging

        import pandas as pd
        from syne_tune import StoppingCriterion, Tuner
        from syne_tune.backend.simulator_backend.simulator_callback import SimulatorCallback
        from syne_tune.blackbox_repository.blackbox_tabular import BlackboxTabular
        from syne_tune.blackbox_repository.simulated_tabular_backend import UserBlackboxBackend
        from syne_tune.config_space import choice, randint
        from syne_tune.optimizer.baselines import ASHA
    except ImportError as err:
        return None, f"not measured: Syne Tune is not installed ({err}; `pip install -e '.[synetune]'`)"
    import atexit
    import shutil
    import tempfile

    logging.getLogger("syne_tune").setLevel(logging.ERROR)
    n, t = values.shape
    # a ragged curve holds its last loss after it ends, and a job reports the curve's length
    # as elapsed time (the simulator's clock: one unit per epoch)
    held = values.astype(float).copy()
    for i in range(n):
        held[i, lengths[i]:] = values[i, lengths[i] - 1]
    elapsed = np.broadcast_to(np.arange(1, t + 1, dtype=float), (n, t))
    # the row index is the configuration; Syne Tune's tabular lookup needs two columns with
    # pandas 3 (a single-column index does not take its tuple key), so a constant is added
    space = {"row": randint(0, n - 1), "const": choice([0])}
    bb = BlackboxTabular(hyperparameters=pd.DataFrame({"row": np.arange(n), "const": np.zeros(n, int)}),
                         configuration_space=space, fidelity_space={"epoch": randint(1, t)},
                         objectives_evaluations=np.stack([held, elapsed], -1)[:, None],
                         fidelity_values=np.arange(1, t + 1), objectives_names=["loss", "elapsed"])
    seeds = iter(range(10**6))
    epochs = []
    tmp = tempfile.mkdtemp(prefix="bench_synetune_")  # the tuners' result folders, removed at exit
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)

    def one():
        seed = next(seeds)
        tuner = Tuner(trial_backend=UserBlackboxBackend(blackbox=bb, elapsed_time_attr="elapsed"),
                      scheduler=ASHA({**space, "epoch": t}, metric="loss", time_attr="epoch", max_t=t,
                                     do_minimize=True, random_seed=seed, grace_period=1, reduction_factor=ETA),
                      stop_criterion=StoppingCriterion(max_num_trials_started=num_trials), n_workers=1,
                      sleep_time=0, callbacks=[SimulatorCallback()], print_update_interval=10**9,
                      save_tuner=False, tuner_name=f"{tmp}/study-{seed}")
        tuner.run()
        df = tuner.tuning_status.get_dataframe()
        epochs.append(float(df["epoch"].sum()))

    def call():
        for _ in range(num_runs):
            one()
        return None

    one()  # warm-up
    call()
    return (call, 0.0, lambda: float(np.mean(epochs[1:]))), ""


def uq_pruner_class():
    """jaxstop's ``UQSuccessiveHalvingPruner`` from its public module, or the reason it is not there."""
    try:
        from jaxstop.integrations.optuna import UQSuccessiveHalvingPruner
    except ImportError as err:
        return None, f"not measured: `from jaxstop.integrations.optuna import UQSuccessiveHalvingPruner` fails ({err})"
    return UQSuccessiveHalvingPruner, ""


# ----------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sh-runs", type=int, default=5000, help="vmapped keys of batched SH")
    ap.add_argument("--shplus-runs", type=int, default=1000, help="vmapped keys of batched SH+")
    ap.add_argument("--numpy-runs", type=int, default=2000, help="runs of the NumPy loop per timed call")
    ap.add_argument("--optuna-runs", type=int, default=10, help="Optuna studies per timed call")
    ap.add_argument("--uq-optuna-runs", type=int, default=2, help="studies with the UQ pruner per timed call")
    ap.add_argument("--synetune-runs", type=int, default=5, help="Syne Tune studies per timed call")
    ap.add_argument("--check-runs", type=int, default=256, help="runs checked against the NumPy loop")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a fifth of the runs, 1 Optuna study per call")
    ap.add_argument("--pin", type=int, default=None, help="pin the process to this CPU core")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.quick:
        args.sh_runs, args.shplus_runs, args.numpy_runs = args.sh_runs // 5, args.shplus_runs // 5, args.numpy_runs // 5
        args.optuna_runs, args.uq_optuna_runs, args.check_runs = 1, 1, min(args.check_runs, 64)
        args.synetune_runs = 1
    _common.pin(args.pin)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    values, lengths, table = alexnet_table()
    n, max_budget = values.shape
    sh, shplus = policies.sh(n, max_budget, eta=ETA), policies.sh(n, max_budget, eta=ETA, uq=True)
    b = policies.halving_schedule("sh", n, max_budget, ETA).brackets[0]
    bracket = (b.sizes, b.budgets, b.round_budgets)
    n0 = b.sizes[0]

    contenders = []  # (what, runs per call, (call, compile s, epochs), size)
    sh_contender = batched_call(sh, table, args.sh_runs)
    checked = check_same_work(sh_contender[3]["traces"], values, lengths, bracket, max_budget,
                              min(args.check_runs, args.sh_runs))
    ties = check_ties(args.check_runs)
    print(f"# same work: the NumPy loop returns jaxstop's incumbent and budget on {checked} of {checked} runs "
          f"(fed jaxstop's rows), and on {ties} of {ties} runs of a table of ties and short curves", flush=True)
    contenders.append(("NumPy loop, plain SH, one run at a time", args.numpy_runs,
                       numpy_call(values, lengths, bracket, max_budget, args.numpy_runs),
                       f"{args.numpy_runs} runs per call"))
    contenders.append(("jaxstop SH, batched", args.sh_runs, sh_contender[:3],
                       f"`sim.run_batch` of {args.sh_runs} keys"))
    contenders.append(("jaxstop SH, batched, outcome only", args.sh_runs,
                       batched_call(sh, table, args.sh_runs, record="final")[:3],
                       f"`sim.run_batch(..., record='final')` of {args.sh_runs} keys"))
    contenders.append(("jaxstop SH, one vmapped batch", args.sh_runs,
                       batched_call(sh, table, args.sh_runs, "vmap")[:3], f"`jax.vmap(sim.run)` over {args.sh_runs} keys"))
    contenders.append(("jaxstop SH+, batched", args.shplus_runs, batched_call(shplus, table, args.shplus_runs)[:3],
                       f"`sim.run_batch` of {args.shplus_runs} keys; profile of 3 x {max_budget} epochs included"))
    contenders.append(("jaxstop SH+, batched, outcome only", args.shplus_runs,
                       batched_call(shplus, table, args.shplus_runs, record="final")[:3],
                       f"`sim.run_batch(..., record='final')` of {args.shplus_runs} keys"))
    contenders.append(("jaxstop SH+, one vmapped batch", args.shplus_runs,
                       batched_call(shplus, table, args.shplus_runs, "vmap")[:3],
                       f"`jax.vmap(sim.run)` over {args.shplus_runs} keys"))
    contenders.append(("Optuna SuccessiveHalvingPruner", args.optuna_runs,
                       optuna_call(optuna, lambda: optuna.pruners.SuccessiveHalvingPruner(
                           min_resource=1, reduction_factor=ETA), values, lengths, n0, args.optuna_runs),
                       f"{args.optuna_runs} studies of {n0} trials per call"))
    st_call, st_note = synetune_call(values, lengths, n0, args.synetune_runs)
    st_modules = (__import__("syne_tune"),) if st_call is not None else ()
    if st_call is not None:
        contenders.append(("Syne Tune ASHA, simulator backend", args.synetune_runs, st_call,
                           f"{args.synetune_runs} studies of {n0} trials started per call"))
    else:
        print(f"# Syne Tune {st_note}", flush=True)
    uq_cls, uq_note = uq_pruner_class()
    if uq_cls is not None:
        contenders.append(("Optuna with jaxstop UQSuccessiveHalvingPruner", args.uq_optuna_runs,
                           optuna_call(optuna, lambda: uq_cls(min_resource=1, reduction_factor=ETA), values,
                                       lengths, n0, args.uq_optuna_runs),
                           f"{args.uq_optuna_runs} studies of {n0} trials per call, after a warm-up study"))
    else:
        print(f"# UQSuccessiveHalvingPruner {uq_note}", flush=True)
    times, _ = _common.interleaved_seconds([c[2][0] for c in contenders], args.repeats)
    rows, rate = [], {}
    for (what, runs, (_, compile_s, epochs), size), t in zip(contenders, times):
        rate[what] = runs / t
        rows.append([what, f"{runs / t:,.1f}", f"{epochs():,.0f}", f"{compile_s:.1f}" if compile_s else "", size])
        print(f"# {what}: {runs / t:,.1f} runs/s", flush=True)

    goals = [["batched SH / NumPy loop", "jaxstop SH, batched", "NumPy loop, plain SH, one run at a time", 10.0],
             ["batched SH, outcome only / NumPy loop", "jaxstop SH, batched, outcome only",
              "NumPy loop, plain SH, one run at a time", 10.0],
             ["one vmapped batch of SH / NumPy loop", "jaxstop SH, one vmapped batch",
              "NumPy loop, plain SH, one run at a time", None],
             ["batched SH / one vmapped batch", "jaxstop SH, batched", "jaxstop SH, one vmapped batch", None],
             ["batched SH+ / one vmapped batch", "jaxstop SH+, batched", "jaxstop SH+, one vmapped batch", None],
             ["batched SH+ / Optuna's pruner", "jaxstop SH+, batched", "Optuna SuccessiveHalvingPruner", 30.0],
             ["batched SH+, outcome only / Optuna's pruner", "jaxstop SH+, batched, outcome only",
              "Optuna SuccessiveHalvingPruner", 30.0],
             ["batched SH / Optuna's pruner", "jaxstop SH, batched", "Optuna SuccessiveHalvingPruner", None]]
    if st_call is not None:
        goals += [["batched SH / Syne Tune's ASHA", "jaxstop SH, batched", "Syne Tune ASHA, simulator backend", None],
                  ["batched SH+ / Syne Tune's ASHA", "jaxstop SH+, batched", "Syne Tune ASHA, simulator backend",
                   None]]
    if uq_cls is not None:
        goals.append(["batched SH+ / Optuna with the UQ pruner", "jaxstop SH+, batched",
                      "Optuna with jaxstop UQSuccessiveHalvingPruner", None])
    ratios = []
    for name, num, den, goal in goals:
        x = rate[num] / rate[den]
        ratios.append([name, f"{x:,.1f}x", "" if goal is None else f">= {goal:g}x",
                       "" if goal is None else ("met" if x >= goal else "not met")])
    text = "\n\n".join([
        _common.report_header("Simulation studies against the NumPy loop, Optuna's pruner and Syne Tune",
                              packages=(optuna,) + st_modules),
        f"AlexNet table ({n} curves x {max_budget} epochs, ragged, float32), eta = {ETA}; SH runs {n0} rows at "
        f"{', '.join(map(str, b.budgets))} epochs. The NumPy loop returned jaxstop's incumbent and budget on "
        f"{checked} / {checked} runs fed jaxstop's rows (and on {ties} / {ties} runs of a synthetic table of ties and "
        "short curves, where the tie rule decides). "
        f"Median of {args.repeats} timed calls after a warm-up, the contenders timed in turn (one call of each per "
        "round, so all see the same machine load); compile time apart.",
        _common.markdown_table(["what", "runs/s", "epochs per run", "compile s", "size"], rows),
        _common.markdown_table(["ratio", "value", "goal", ""], ratios),
    ] + ([f"UQSuccessiveHalvingPruner {uq_note}"] if uq_cls is None else [])
      + ([f"Syne Tune {st_note}"] if st_call is None else []))
    print(text)
    _common.write_report(args.out, text)


if __name__ == "__main__":
    main()
