"""Loaders for the real HPO data vendored in ``benchmarks/data``.

Every loader returns NumPy arrays in a ``NamedTuple``; nothing here reads outside this
folder. The arrays are written by ``tools/convert_data.py``, whose docstring
documents every conversion choice; licences and sources sit beside each data file.

* :func:`load_bo_cv` -- 380 GP-BO traces with 10-fold CV scores (Makarova et al., 2022).
* :func:`load_authors_regrets` -- the authors' regret-bound traces for those runs.
* :func:`load_authors_results` -- the authors' stopping results (their Table 3).
* :func:`load_opda` -- AlexNet / DeBERTa random-search learning curves (OPDA).
* :func:`lcbench_curves` -- learning curves from the YAHPO LCBench surrogate
  (needs ``onnxruntime``, imported lazily).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = [
    "AuthorsRegrets",
    "AuthorsResults",
    "BOCVTraces",
    "BOSearchSpace",
    "LCBENCH_CONFIG_NAMES",
    "LCBenchCurves",
    "LCBenchSpace",
    "OPDACurves",
    "bo_search_space",
    "lcbench_curves",
    "lcbench_from_unit",
    "lcbench_space",
    "load_authors_regrets",
    "load_authors_results",
    "load_bo_cv",
    "load_opda",
]

DATA = Path(__file__).resolve().parent / "data"
_BO = DATA / "bo_early_stopping"
_LCBENCH = DATA / "yahpo_lcbench"


def _load(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run tools/convert_data.py")
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


# ------------------------------------------------------------------ BO traces
class BOCVTraces(NamedTuple):
    """GP-BO runs with 10-fold cross-validation (Makarova et al., 2022, Section 5).

    T = 380 traces (19 datasets x {RF, XGB} x 10 seeds, sorted by dataset, algo,
    seed), N = 200 evaluations in the order they were made, d_max = 9.

    Attributes:
        configs: Unit-cube configurations, shape (T, N, d_max), float32, zero-padded.
        dim_mask: Valid dimensions, shape (T, d_max), bool (RF 3, XGB 9).
        values: Mean 10-fold CV metric (minimised), shape (T, N), float64.
        fold_scores: Per-fold CV metric, shape (T, N, 10), float64.
        test: Held-out test metric of each configuration, shape (T, N), float64.
        ei: Expected improvement logged when the configuration was chosen, (T, N).
        pi: Probability of improvement, likewise, shape (T, N).
        evaluation_time: Training time of each evaluation in seconds, shape (T, N).
        dataset: Dataset name, shape (T,), str.
        algo: ``"RF"`` or ``"XGB"``, shape (T,), str.
        seed: BO replicate 0..9, shape (T,), int32.
        metric: ``"error"`` or ``"rmse"``, shape (T,), str.
        names: Hyperparameter name per dimension (``""`` where padded), (T, d_max).
        run: Original folder name, shape (T,), str.
    """

    configs: np.ndarray
    dim_mask: np.ndarray
    values: np.ndarray
    fold_scores: np.ndarray
    test: np.ndarray
    ei: np.ndarray
    pi: np.ndarray
    evaluation_time: np.ndarray
    dataset: np.ndarray
    algo: np.ndarray
    seed: np.ndarray
    metric: np.ndarray
    names: np.ndarray
    run: np.ndarray


class BOSearchSpace(NamedTuple):
    """Search space of one algorithm of the BO traces.

    Attributes:
        names: Hyperparameter names in unit-cube column order, shape (d,).
        lower: Lower bound in the stored scale (natural log where ``log``), (d,).
        upper: Upper bound in the stored scale, shape (d,).
        log: Log-scale hyperparameter, shape (d,), bool.
        integer: Integer hyperparameter, shape (d,), bool.
        table1_lower: Lower bound printed in Table 1 of the paper (raw scale), (d,).
        table1_upper: Upper bound printed in Table 1 (raw scale), shape (d,).
        table1_log: Log scale as printed in Table 1, shape (d,), bool.
    """

    names: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    log: np.ndarray
    integer: np.ndarray
    table1_lower: np.ndarray
    table1_upper: np.ndarray
    table1_log: np.ndarray


def load_bo_cv() -> BOCVTraces:
    """All 380 cross-validation BO traces of Makarova et al. (2022).

    ``configs`` map the stored hyperparameters linearly into [0, 1] with the ranges of
    :func:`bo_search_space`: ``stored = lower + configs * (upper - lower)``.

    Returns:
        A :class:`BOCVTraces`.

    Example:
        >>> import numpy as np
        >>> traces = load_bo_cv()
        >>> traces.values.shape, traces.fold_scores.shape
        ((380, 200), (380, 200, 10))
        >>> bool(np.array_equal(traces.values, traces.fold_scores.mean(-1)))
        True
    """
    raw = _load(_BO / "cv_traces.npz")
    names = np.full(raw["dim_mask"].shape, "", dtype="<U20")
    for a in ("RF", "XGB"):
        sel = raw["algo"] == a
        names[np.ix_(sel, np.arange(raw[f"names_{a}"].size))] = raw[f"names_{a}"]
    return BOCVTraces(names=names, **{k: raw[k] for k in BOCVTraces._fields if k != "names"})


def bo_search_space(algo: str) -> BOSearchSpace:
    """Search space behind the unit-cube ``configs`` of :func:`load_bo_cv`.

    Args:
        algo: ``"RF"`` or ``"XGB"``.

    Returns:
        A :class:`BOSearchSpace`. RF follows the authors' code (n_estimators [1, 64]
        log, max_depth [1, 5] linear), not Table 1 as printed; see convert_data.py.

    Example:
        >>> space = bo_search_space("RF")
        >>> space.names.tolist(), np.exp(space.upper[2]).round(6)
        (['max_depth', 'min_samples_split', 'n_estimators'], np.float64(64.0))
    """
    if algo not in ("RF", "XGB"):
        raise ValueError(f"algo must be 'RF' or 'XGB', got {algo!r}")
    raw = _load(_BO / "cv_traces.npz")
    return BOSearchSpace(**{f: raw[f"{f}_{algo}"] for f in BOSearchSpace._fields})


class AuthorsRegrets(NamedTuple):
    """The authors' regret-bound traces, aligned to the 200 evaluations.

    Index i holds the authors' row computed from the first i evaluations
    (i = 20..199); ``mask`` is False and the values NaN for i < 20.

    Attributes:
        iteration: 0..199, shape (N,), int32.
        mask: Row present, shape (T, N), bool.
        regret_bound: Upper bound on the simple regret (Eq. 8), shape (T, N).
        incumbent_std: sqrt(1/10 + 1/9) * std(incumbent folds, ddof=0), (T, N).
        incumbent_val_metric: min(values[:i]), shape (T, N).
        incumbent_test_metric: Test metric of that incumbent, shape (T, N).
        total_train_time: Sum of evaluation_time over rows 20..i, shape (T, N).
        dataset: shape (T,), str.
        algo: shape (T,), str.
        seed: shape (T,), int32.
        run: shape (T,), str.
    """

    iteration: np.ndarray
    mask: np.ndarray
    regret_bound: np.ndarray
    incumbent_std: np.ndarray
    incumbent_val_metric: np.ndarray
    incumbent_test_metric: np.ndarray
    total_train_time: np.ndarray
    dataset: np.ndarray
    algo: np.ndarray
    seed: np.ndarray
    run: np.ndarray


def load_authors_regrets() -> AuthorsRegrets:
    """The authors' per-iteration regret bounds, same trace order as :func:`load_bo_cv`.

    Returns:
        An :class:`AuthorsRegrets`.

    Example:
        >>> regrets = load_authors_regrets()
        >>> regrets.regret_bound.shape, int(regrets.mask[0].sum())
        ((380, 200), 180)
    """
    return AuthorsRegrets(**_load(_BO / "authors_regrets.npz"))


class AuthorsResults(NamedTuple):
    """The authors' stopping results, one row per (algo, dataset, seed, method).

    R = 5,320 rows. Methods: ``Conv_{10,30,50,70,90}``, ``EI_1e-08``, ``EI_1e-12``,
    ``EI_1e-16``, ``PI_0.0001``, ``PI_1e-08``, ``PI_1e-12``, ``Ours_0.21``,
    ``Ours_0.5``, ``Ours_1.0``.

    Attributes:
        algo, dataset, method: shape (R,), str.
        seed: shape (R,), int32.
        stop_iter: Iteration at which the rule stopped, shape (R,), int32.
        rel_iter: RTC = (199 - stop_iter) / 199, shape (R,), float64.
        rel_val: Relative change of the incumbent validation metric, (R,).
        rel_test: RYC = (y_T - y_stop) / max(y_T, y_stop) on the test metric, (R,).
        rel_time: Relative training time saved, shape (R,).
        total_iter: 199, shape (R,), int32.
        total_time: shape (R,), float64.
        overfit_iter: First iteration >= 20 where the incumbent's test metric
            got worse (EI / PI rows only, NaN elsewhere), shape (R,).
    """

    algo: np.ndarray
    dataset: np.ndarray
    seed: np.ndarray
    method: np.ndarray
    stop_iter: np.ndarray
    rel_iter: np.ndarray
    rel_val: np.ndarray
    rel_test: np.ndarray
    rel_time: np.ndarray
    total_iter: np.ndarray
    total_time: np.ndarray
    overfit_iter: np.ndarray


def load_authors_results() -> AuthorsResults:
    """The authors' stopping results; their means per method are the paper's Table 3.

    Returns:
        An :class:`AuthorsResults`.

    Example:
        >>> res = load_authors_results()
        >>> sel = (res.method == "Ours_0.21") & (res.algo == "RF")
        >>> round(float(res.rel_iter[sel].mean()), 3)  # Table 3: RTC 0.318
        0.318
    """
    return AuthorsResults(**_load(_BO / "authors_results.npz"))


# ------------------------------------------------------------------------ OPDA
class OPDACurves(NamedTuple):
    """Random-search learning curves from OPDA (CC BY-SA 4.0).

    n runs, B budget steps, d hyperparameters.

    Attributes:
        values: Validation error (1 - accuracy), shape (n, B), float32; NaN where
            ``mask`` is False.
        mask: Budget step reached by the run, shape (n, B), bool.
        budget: Epoch (AlexNet, 1..100) or training step (DeBERTa, 1000..98000) of
            each column, shape (B,), int32.
        configs: Unit-cube configurations, shape (n, d), float32.
        names, lower, upper, log: Unit-cube dimensions, raw ranges, log flags, (d,).
        raw: Original hyperparameters, shape (n, r), float64.
        raw_names: Their names, shape (r,), str.
        iteration: Random-search iteration in the original file, shape (n,), int32.
        final_values: Error at the end of each run's training, shape (n,), float32.
        extras: Dataset-specific arrays. AlexNet: ``top5_error``, ``train_loss``,
            ``time`` (n, B) and ``epochs`` (n,). DeBERTa: ``values_mismatched`` (n, B),
            ``final_mismatched`` (n,), ``total_steps`` (n,).
    """

    values: np.ndarray
    mask: np.ndarray
    budget: np.ndarray
    configs: np.ndarray
    names: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    log: np.ndarray
    raw: np.ndarray
    raw_names: np.ndarray
    iteration: np.ndarray
    final_values: np.ndarray
    extras: dict


_OPDA_COMMON = ("values", "mask", "budget", "configs", "names", "lower", "upper", "log",
                "raw", "raw_names", "iteration")


def load_opda(name: str) -> OPDACurves:
    """Load the OPDA AlexNet (ImageNet) or DeBERTa-base (MultiNLI) learning curves.

    Args:
        name: ``"alexnet"`` (365 runs x 100 epochs, runs with NaN training loss
            removed) or ``"deberta"`` (1,024 runs x 98 evaluations every 1,000 steps).

    Returns:
        An :class:`OPDACurves`.

    Example:
        >>> curves = load_opda("alexnet")
        >>> curves.values.shape, curves.configs.shape
        ((365, 100), (365, 7))
        >>> load_opda("deberta").values.shape
        (1024, 98)
    """
    if name not in ("alexnet", "deberta"):
        raise ValueError(f"name must be 'alexnet' or 'deberta', got {name!r}")
    raw = _load(DATA / "opda" / f"{name}.npz")
    common = {k: raw.pop(k) for k in _OPDA_COMMON}
    if name == "alexnet":
        n = common["values"].shape[0]
        final = common["values"][np.arange(n), raw["epochs"] - 1]
    else:
        final = raw.pop("final_value")
    return OPDACurves(final_values=final, extras=raw, **common)


# ------------------------------------------------------------- LCBench (YAHPO)
LCBENCH_CONFIG_NAMES = ("batch_size", "learning_rate", "momentum", "weight_decay",
                        "num_layers", "max_units", "max_dropout")
_LCBENCH_MAX_EPOCH = 52


class LCBenchSpace(NamedTuple):
    """Search space of the LCBench surrogate (from ``config_space.json``).

    Attributes:
        names: ``LCBENCH_CONFIG_NAMES``, shape (7,).
        lower: Lower bounds in raw units, shape (7,).
        upper: Upper bounds in raw units, shape (7,).
        log: Log-scale hyperparameter, shape (7,), bool.
        integer: Integer hyperparameter, shape (7,), bool.
        tasks: The 34 OpenML task ids, shape (34,), str.
    """

    names: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    log: np.ndarray
    integer: np.ndarray
    tasks: np.ndarray


class LCBenchCurves(NamedTuple):
    """Surrogate learning curves; metrics have shape (n configs, E epochs), float32.

    Attributes:
        epochs: Epoch of each column, shape (E,), int32.
        time: Predicted training time in seconds.
        val_error: 1 - val_accuracy / 100 (the surrogate predicts percent).
        val_cross_entropy: Validation cross-entropy.
        val_balanced_error: 1 - val_balanced_accuracy (a fraction).
        test_cross_entropy: Test cross-entropy.
        test_balanced_error: 1 - test_balanced_accuracy.
    """

    epochs: np.ndarray
    time: np.ndarray
    val_error: np.ndarray
    val_cross_entropy: np.ndarray
    val_balanced_error: np.ndarray
    test_cross_entropy: np.ndarray
    test_balanced_error: np.ndarray


@functools.lru_cache(maxsize=1)
def lcbench_space() -> LCBenchSpace:
    """The LCBench search space, in the column order of ``LCBENCH_CONFIG_NAMES``.

    Example:
        >>> space = lcbench_space()
        >>> space.lower[:2].round(6).tolist(), len(space.tasks)
        ([16.0, 0.0001], 34)
    """
    spec = json.loads((_LCBENCH / "config_space.json").read_text())
    hps = {h["name"]: h for h in spec["hyperparameters"]}
    cols = [hps[n] for n in LCBENCH_CONFIG_NAMES]
    space = LCBenchSpace(
        names=np.array(LCBENCH_CONFIG_NAMES),
        lower=np.array([float(h["lower"]) for h in cols]),
        upper=np.array([float(h["upper"]) for h in cols]),
        log=np.array([bool(h["log"]) for h in cols]),
        integer=np.array([h["type"] == "uniform_int" for h in cols]),
        tasks=np.array(hps["OpenML_task_id"]["choices"]),
    )
    for arr in space:
        arr.flags.writeable = False  # cached: keep it immutable
    return space


def lcbench_from_unit(u: np.ndarray) -> np.ndarray:
    """Map unit-cube points to raw LCBench hyperparameters.

    Args:
        u: Points in [0, 1], shape (n, 7), columns ``LCBENCH_CONFIG_NAMES``.

    Returns:
        Raw configurations, shape (n, 7), float64; integer hyperparameters rounded.

    Example:
        >>> lcbench_from_unit(np.zeros((1, 7)))[0, :2].round(6).tolist()
        [16.0, 0.0001]
    """
    u = np.asarray(u, dtype=np.float64)
    if u.ndim != 2 or u.shape[1] != len(LCBENCH_CONFIG_NAMES):
        raise ValueError(f"u must have shape (n, 7), got {u.shape}")
    if not np.all((u >= 0) & (u <= 1)):
        raise ValueError("u must lie in [0, 1]")
    s = lcbench_space()
    lo = np.where(s.log, np.log(np.where(s.log, s.lower, 1.0)), s.lower)
    hi = np.where(s.log, np.log(s.upper), s.upper)
    x = lo + u * (hi - lo)
    x = np.where(s.log, np.exp(x), x)
    x = np.where(s.integer, np.round(x), x)
    return np.clip(x, s.lower, s.upper)


@functools.lru_cache(maxsize=4)
def _lcbench_session(num_threads: int):
    try:
        import onnxruntime as ort
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("lcbench_curves needs onnxruntime (pip install onnxruntime)") from err
    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(_LCBENCH / "model.onnx"), sess_options=options,
                                providers=["CPUExecutionProvider"])


def lcbench_curves(
    task: int | str,
    configs: np.ndarray | Mapping[str, np.ndarray],
    epochs: int | np.ndarray | None = None,
    *,
    chunk_size: int = 65536,
    num_threads: int = 1,
) -> LCBenchCurves:
    """Evaluate the YAHPO Gym LCBench surrogate on a grid of configurations x epochs.

    The surrogate (Pfisterer et al., 2022) takes ``x_cont`` = [epoch, batch_size,
    learning_rate, momentum, weight_decay, num_layers, max_units, max_dropout] in raw
    units (float32) and ``x_cat`` = the task's index in ``encoding.json`` (int32), and
    predicts [time, val_accuracy (percent), val_cross_entropy, val_balanced_accuracy,
    test_cross_entropy, test_balanced_accuracy]. Integer hyperparameters may be given
    as non-integers (the network is continuous in them); the benchmark uses integers.

    Args:
        task: OpenML task id, e.g. ``3945`` or ``"3945"`` (one of ``lcbench_space().tasks``).
        configs: Raw hyperparameters, shape (n, 7) in the order ``LCBENCH_CONFIG_NAMES``,
            or a mapping from those names to arrays of shape (n,).
        epochs: Number of epochs E (columns 1..E) or an array of epochs in 1..52;
            default all 52.
        chunk_size: Rows (configs x epochs) per surrogate call, bounds memory.
        num_threads: onnxruntime intra-op threads.

    Returns:
        An :class:`LCBenchCurves` with metrics of shape (n, E), float32.

    Example:
        >>> space = lcbench_space()
        >>> configs = lcbench_from_unit(np.full((2, 7), 0.5))
        >>> curves = lcbench_curves("3945", configs, epochs=52)
        >>> curves.val_error.shape
        (2, 52)
        >>> bool(np.all((curves.val_error > 0) & (curves.val_error < 1)))
        True
    """
    space = lcbench_space()
    task = str(task)
    if task not in space.tasks:
        raise ValueError(f"task must be one of the 34 LCBench task ids, got {task!r}")
    if isinstance(configs, Mapping):
        missing = [n for n in LCBENCH_CONFIG_NAMES if n not in configs]
        if missing:
            raise ValueError(f"configs is missing {missing}")
        configs = np.stack([np.asarray(configs[n], np.float64) for n in LCBENCH_CONFIG_NAMES],
                           axis=-1)
    configs = np.asarray(configs, dtype=np.float64)
    if configs.ndim != 2 or configs.shape[1] != len(LCBENCH_CONFIG_NAMES):
        raise ValueError(f"configs must have shape (n, 7), got {configs.shape}")
    if not np.all(np.isfinite(configs)):
        raise ValueError("configs must be finite")
    tol = 1e-6 * (space.upper - space.lower)
    bad = (configs < space.lower - tol) | (configs > space.upper + tol)
    if bad.any():
        col = int(np.nonzero(bad.any(axis=0))[0][0])
        raise ValueError(f"configs column {LCBENCH_CONFIG_NAMES[col]} must lie in "
                         f"[{space.lower[col]}, {space.upper[col]}]")
    if epochs is None:
        epochs = _LCBENCH_MAX_EPOCH
    if np.ndim(epochs) == 0:
        if int(epochs) != epochs or not 1 <= int(epochs) <= _LCBENCH_MAX_EPOCH:
            raise ValueError(f"epochs must be an integer in 1..52, got {epochs!r}")
        epochs = np.arange(1, int(epochs) + 1)
    epochs = np.asarray(epochs)
    if (epochs.ndim != 1 or epochs.size == 0 or np.any(epochs != np.round(epochs))
            or np.any((epochs < 1) | (epochs > _LCBENCH_MAX_EPOCH))):
        raise ValueError("epochs must be a non-empty 1-D array of integers in 1..52")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    encoding = json.loads((_LCBENCH / "encoding.json").read_text())["OpenML_task_id"]

    n, e = configs.shape[0], epochs.size
    x_cont = np.empty((n, e, 8), np.float32)
    x_cont[..., 0] = epochs[None, :]
    x_cont[..., 1:] = configs[:, None, :]
    x_cont = x_cont.reshape(n * e, 8)
    x_cat = np.full((n * e, 1), encoding[task], np.int32)
    session = _lcbench_session(int(num_threads))
    out = np.empty((n * e, 6), np.float32)
    for start in range(0, n * e, chunk_size):
        stop = min(start + chunk_size, n * e)
        out[start:stop] = session.run(None, {"x_cat": x_cat[start:stop],
                                             "x_cont": x_cont[start:stop]})[0]
    out = out.reshape(n, e, 6)
    return LCBenchCurves(
        epochs=epochs.astype(np.int32),
        time=out[..., 0],
        val_error=1.0 - out[..., 1] / 100.0,
        val_cross_entropy=out[..., 2],
        val_balanced_error=1.0 - out[..., 3],
        test_cross_entropy=out[..., 4],
        test_balanced_error=1.0 - out[..., 5],
    )
