"""Convert the third-party HPO data into the compact arrays that jaxstop vendors.

Usage (from the repository root)::

    .venv/bin/python tools/convert_data.py [SOURCE_DIR]

``SOURCE_DIR`` is the folder holding ``bo_early_stopping/``, ``opda/`` and
``yahpo_data/`` (default: ``../shared/data`` relative to the repository root).
This script is the only code that reads that folder; everything else reads the
converted files it writes:

* ``benchmarks/data/bo_early_stopping/``: ``cv_traces.npz``, ``authors_regrets.npz``,
  ``authors_results.npz`` + LICENSE, NOTICE, SOURCE.txt and a README.
* ``benchmarks/data/opda/``: ``alexnet.npz``, ``deberta.npz`` + licences, READMEs, SOURCE.txt.
* ``benchmarks/data/yahpo_lcbench/``: the LCBench ONNX surrogate, copied unchanged.
* ``jaxstop/data/``: a small sample (4 BO traces, 64 AlexNet curves) shipped in the package.

The output is byte-for-byte deterministic: inputs are read in sorted order and the
``.npz`` archives are written with fixed zip timestamps (``_save_npz``).

Conversion choices
------------------
BO traces (``bo_runs/bo_runs_cv``, Makarova et al., 2022)

* One trace per (dataset, algorithm, seed); 19 datasets x {RF, XGB} x 10 seeds = 380,
  sorted by (dataset, algo, seed). ``dataset`` is the folder name up to ``_dpp`` and
  ``algo`` is ``"RF"`` / ``"XGB"``, the spelling of the authors' results table, so the
  three files join on (dataset, algo, seed). ``seed`` is the file index ``00{seed}``
  (the ``random_seed`` field inside the rows is 0 in every trace: it is the data-split
  seed, shared by all ten BO replicates).
* Row order is the evaluation order; the CSV ``iteration`` column (2 for the first six
  rows, then 3..197) is a BO-round counter, not the row index, and is not kept.
  ``best`` equals the running minimum of ``value`` (checked) and is not kept.
* ``values`` = ``value`` (mean 10-fold CV metric, minimised); ``fold_scores`` = the 10
  ``validation_metrics[k][tuning_metric]`` (``error`` for classification, ``rmse`` for
  regression); ``test`` = ``test_value``. Checked: ``value == mean(fold_scores)`` (the
  maximum deviation is printed). ``ei`` / ``pi`` are the acquisition values the authors
  logged for each row (the EI / PI stopping baselines read them) and
  ``evaluation_time`` is the training time of each row in seconds. All float64.
* ``configs`` map ``parameters`` into the unit cube, linearly in the *stored* scale
  (log-scale hyperparameters are stored as natural logs), columns in alphabetical order
  of the hyperparameter names (the authors' order), zero-padded to d_max = 9 with
  ``dim_mask``. Ranges (stored scale = ln of the Table 1 value where the scale is log):

  XGB, exactly Table 1 of the paper: n_estimators [2, 2^9] log, learning_rate
  [1e-6, 1] log, gamma [1e-6, 2^6] log, min_child_weight [1e-6, 2^5] log, max_depth
  [2, 2^5] log, subsample [0.5, 1], colsample_bytree [0.3, 1], reg_lambda [1e-6, 2] log,
  reg_alpha [1e-6, 2] log. Stored values span these ranges exactly; no clipping.

  RF: Table 1 prints n_estimators [1, 2^8] log, min_samples_split [0.01, 0.5] log and
  max_depth [1, 5] log, but the stored values contradict two of these: max_depth is
  stored as the raw integers 1..5 (read as natural logs they would exceed ln 5 = 1.61),
  and n_estimators never exceeds ln 64. The authors' released code
  (``src/constant.py`` of amazon-research/bo-early-stopping, the commit in SOURCE.txt)
  explains both: it declares n_estimators integer [1, 64] log, min_samples_split
  [0.01, 0.5] log and max_depth integer [1, 5] *linear*, and its regret-bound GP
  normalises exactly these ranges. We use the ranges the experiments ran with
  (n_estimators [0, ln 64], min_samples_split [ln 0.01, ln 0.5], max_depth [1, 5]), so
  the domain of the regret bound is the one behind the paper's numbers; Table 1's
  printed ranges are stored beside them (``table1_*``) for anyone who wants the other
  reading. With these ranges every config lies in [0, 1] without clipping (checked).
* Integer hyperparameters are mapped like continuous ones (linear in the stored scale).

Authors' regret-bound traces (``regrets/regrets_identity_cv_top0.5``)

* The row with ``iteration == i`` (i = 20..199) was computed from the first i rows of
  the BO trace; it is stored at index i of a length-200 axis, ``mask`` is False for
  i < 20 and the masked entries are NaN. Checked: the stored incumbent value equals
  ``min(values[:i])`` and ``incumbent_std == sqrt(1/10 + 1/9) * std(fold_scores of the
  incumbent, ddof=0)``. Ties and near-ties (means ~1e-17 apart while the folds
  differ) occur in 39 traces; in two of them (openml14 XGB seed 9, openml-3892 XGB
  seed 8, iterations 22..52) the authors' incumbent is the earlier, not the smaller
  row, while elsewhere (openml-9910 XGB seed 7) it is the smaller one, so their rule
  cannot be recovered at that precision; the check accepts any row within a relative
  1e-12 of the minimum and lists the traces where argmin differs. None of this touches
  iteration 20, where the threshold of the authors' rule is taken (see below).
  ``total_train_time[i]`` equals the sum of ``evaluation_time`` over rows 20..i (checked).

Authors' results (``result_identity_cv_top0.5.csv``)

* Kept as columns (all 5,320 rows, 14 methods, in file order); ``overfit_iter`` is NaN
  where the file leaves it empty (non-EI/PI rows). Checked: the mean of ``rel_iter``
  (RTC) and ``rel_test`` (RYC) per (method, algo) reproduces the paper's Table 3 to
  its three printed decimals, and every ``stop_iter`` replays exactly from the arrays
  above: Conv-k from the incumbent values, EI / PI as the first row i >= 20 with
  ``ei[i] < t`` (``pi[i] < t``), t as in the method name, and Ours_c as the first
  i >= 20 with ``regret_bound[i] < incumbent_std[20] * c / 0.21`` -- the authors' code
  fixes the threshold at the first regret row, it does not update it (a per-iteration
  threshold changes 15 / 24 / 31 of 380 stops for c = 0.21 / 0.5 / 1.0).

OPDA AlexNet (``opda/alexnet``, ImageNet, 512 random-search configs)

* Runs flagged ``nan_train_loss`` are dropped (147), leaving 365, in file order.
* ``top_1`` is a fraction (max 0.586), so ``values = 1 - top_1`` is the top-1
  validation error in (0, 1), one column per epoch (column j = after epoch j + 1),
  padded to 100 epochs with NaN and ``mask`` False. ``top5_error``, ``train_loss``
  and ``time`` (seconds since the start of training) share that layout (float32).
* ``configs`` (unit cube, float32): epochs (e - 20) / 80; batch_size log2 scale,
  (log2 b - 7) / 3 for b in {128, ..., 1024}; lr log over [5e-3, 5e1]; lr_peak_fraction
  = lr_peak_epoch / epochs over [0, 0.8] (the run drew p ~ U[0, 0.8] and used
  floor(p * epochs), so this is the lower end of p's interval); momentum [0.7, 1];
  weight_decay log over [1e-6, 1e-3]; label_smoothing [0, 0.5]. Ranges are the sampling
  distribution in the OPDA README; ``raw`` keeps the original values.

OPDA DeBERTa-base (``opda/deberta``, MultiNLI, 1,024 random-search configs)

* The authors evaluated every 1,000 steps, at the end of every epoch and at the end of
  training. ``values`` keeps the regular grid, column j = step 1000 * (j + 1) up to
  98,000 (the longest run has 98,175 steps), as the matched-validation error
  ``1 - accuracy`` (a fraction), NaN-padded with ``mask``; ``values_mismatched`` the same
  for the mismatched set. The end-of-training point is kept as ``final_value`` /
  ``final_mismatched`` at ``total_steps``; the off-grid end-of-epoch points are dropped.
* ``configs``: num_train_epochs (e - 1) / 3; train_batch_size (b - 16) / 48;
  learning_rate log over [1e-6, 1e-3]; warmup_proportion = warmup_steps / (steps of
  one epoch = total_steps / num_train_epochs) over [0, 0.6]; cls_drop_out [0, 0.3].

YAHPO LCBench surrogate: the ``lcbench`` folder is copied unchanged (2.1 MB), with the
collection's SOURCE.txt and copyright notice.

Package sample (``jaxstop/data``)

* Two datasets, one classification and one regression, chosen as the most typical of
  the 19: for every (algo, method, statistic) with method in {Ours_0.21, Ours_0.5,
  Conv_30, EI_1e-08} and statistic in {RTC, RYC} of seed 0, each dataset gets a robust
  z-score (distance to the median over datasets / MAD); the dataset with the smallest
  mean |z| of each task type is shipped, both algorithms, seed 0.
* 64 AlexNet curves: rows ``(arange(64) * 365) // 64`` of the converted table, i.e.
  evenly spaced through the 365 kept runs.
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import io
import json
import math
import shutil
import sys
import zipfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "data"
PKG = REPO / "jaxstop" / "data"

N_ITER = 200  # evaluations per BO trace
N_FOLDS = 10
FIRST_REGRET_ITER = 20  # the authors' bound starts after 20 evaluations
D_MAX = 9

# Search spaces in the *stored* scale (natural log where `log`), names sorted.
# name: (lower, upper, log, integer), raw-scale bounds.
SPACES = {
    "RF": {
        "max_depth": (1.0, 5.0, False, True),
        "min_samples_split": (0.01, 0.5, True, False),
        "n_estimators": (1.0, 64.0, True, True),
    },
    "XGB": {
        "colsample_bytree": (0.3, 1.0, False, False),
        "gamma": (1e-6, 2.0**6, True, False),
        "learning_rate": (1e-6, 1.0, True, False),
        "max_depth": (2.0, 2.0**5, True, True),
        "min_child_weight": (1e-6, 2.0**5, True, False),
        "n_estimators": (2.0, 2.0**9, True, True),
        "reg_alpha": (1e-6, 2.0, True, False),
        "reg_lambda": (1e-6, 2.0, True, False),
        "subsample": (0.5, 1.0, False, False),
    },
}
# Table 1 of Makarova et al. (2022) as printed: (lower, upper, log), raw scale.
TABLE1 = {
    "RF": {
        "max_depth": (1.0, 5.0, True),
        "min_samples_split": (0.01, 0.5, True),
        "n_estimators": (1.0, 2.0**8, True),
    },
    "XGB": {k: v[:3] for k, v in SPACES["XGB"].items()},
}
# Table 3 of the paper: method -> (RTC RF, RTC XGB, RYC RF, RYC XGB).
TABLE3 = {
    "Conv_10": (0.840, 0.841, -0.031, -0.051),
    "Conv_30": (0.686, 0.666, -0.022, -0.026),
    "Conv_50": (0.498, 0.504, -0.015, -0.021),
    "EI_1e-08": (0.896, 0.850, -0.057, -0.052),
    "EI_1e-12": (0.895, 0.779, -0.055, -0.047),
    "EI_1e-16": (0.893, 0.718, -0.052, -0.045),
    "PI_0.0001": (0.898, 0.875, -0.059, -0.059),  # printed as PI_1e-4
    "PI_1e-08": (0.895, 0.814, -0.055, -0.052),
    "PI_1e-12": (0.894, 0.739, -0.055, -0.044),
    "Ours_0.21": (0.318, 0.144, -0.004, -0.003),
    "Ours_0.5": (0.580, 0.224, -0.013, -0.006),
}

ALEXNET_SPACE = {  # name: (lower, upper, log) in the raw scale; batch_size on log2
    "epochs": (20.0, 100.0, False),
    "batch_size": (128.0, 1024.0, True),
    "lr": (5e-3, 5e1, True),
    "lr_peak_fraction": (0.0, 0.8, False),
    "momentum": (0.7, 1.0, False),
    "weight_decay": (1e-6, 1e-3, True),
    "label_smoothing": (0.0, 0.5, False),
}
ALEXNET_RAW = ["epochs", "batch_size", "lr", "lr_peak_epoch", "momentum",
               "weight_decay", "label_smoothing"]
DEBERTA_SPACE = {
    "num_train_epochs": (1.0, 4.0, False),
    "train_batch_size": (16.0, 64.0, False),
    "learning_rate": (1e-6, 1e-3, True),
    "warmup_proportion": (0.0, 0.6, False),
    "cls_drop_out": (0.0, 0.3, False),
}
DEBERTA_RAW = ["num_train_epochs", "train_batch_size", "learning_rate",
               "warmup_steps", "cls_drop_out", "total_model_steps"]
ALEXNET_MAX_EPOCHS = 100
DEBERTA_GRID = 1000
ALEXNET_SAMPLE = 64


# --------------------------------------------------------------------------- io
def _save_npz(path: Path, **arrays) -> None:
    """Write a compressed ``.npz`` byte-for-byte reproducibly (fixed zip timestamps)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in sorted(arrays):
            arr = np.asarray(arrays[name])
            if arr.dtype == object:
                raise TypeError(f"{name}: object arrays are not allowed")
            buf = io.BytesIO()
            np.lib.format.write_array(buf, arr, allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buf.getvalue(), compresslevel=9)


def _copy(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def _read_gz_csv(path: Path) -> list[dict]:
    with gzip.open(path, "rt", newline="") as fh:
        return list(csv.DictReader(fh))


def _unit(x: np.ndarray, lower: float, upper: float, log: bool) -> np.ndarray:
    if log:
        x, lower, upper = np.log(x), math.log(lower), math.log(upper)
    return (x - lower) / (upper - lower)


# ------------------------------------------------------------- bo_early_stopping
def _stored_bounds(algo: str) -> tuple[list[str], np.ndarray, np.ndarray]:
    names = sorted(SPACES[algo])
    lo = [math.log(SPACES[algo][n][0]) if SPACES[algo][n][2] else SPACES[algo][n][0]
          for n in names]
    hi = [math.log(SPACES[algo][n][1]) if SPACES[algo][n][2] else SPACES[algo][n][1]
          for n in names]
    return names, np.array(lo), np.array(hi)


def _parse_run(run_dir: Path) -> tuple[str, str]:
    name = run_dir.name
    dataset = name[: name.find("_dpp")]
    algo = "XGB" if "_XGB_" in name else "RF"
    if "_RandomForest_" not in name and algo == "RF":
        raise ValueError(f"unexpected run folder {name}")
    return dataset, algo


def convert_bo_traces(src: Path) -> dict[str, np.ndarray]:
    """Read all 380 CV traces into arrays (see the module docstring)."""
    root = src / "bo_early_stopping" / "bo_runs" / "bo_runs_cv"
    runs = sorted(p for p in root.iterdir() if p.is_dir())
    keys = sorted((*_parse_run(r), seed, r) for r in runs for seed in range(10))
    n = len(keys)
    out = {
        "configs": np.zeros((n, N_ITER, D_MAX), np.float32),
        "dim_mask": np.zeros((n, D_MAX), bool),
        "values": np.zeros((n, N_ITER)),
        "fold_scores": np.zeros((n, N_ITER, N_FOLDS)),
        "test": np.zeros((n, N_ITER)),
        "ei": np.zeros((n, N_ITER)),
        "pi": np.zeros((n, N_ITER)),
        "evaluation_time": np.zeros((n, N_ITER)),
    }
    dataset, algo, seed, metric, run_names = [], [], [], [], []
    max_dev = 0.0
    pre_clip = {a: [np.inf, -np.inf] for a in SPACES}
    for t, (ds, al, sd, run) in enumerate(keys):
        rows = _read_gz_csv(run / f"{sd:03d}.csv.gz")
        if len(rows) != N_ITER:
            raise ValueError(f"{run.name}/{sd:03d}: {len(rows)} rows, expected {N_ITER}")
        names, lo, hi = _stored_bounds(al)
        d = len(names)
        raw = np.empty((N_ITER, d))
        metrics = set()
        best = np.empty(N_ITER)
        for i, row in enumerate(rows):
            params = ast.literal_eval(row["parameters"])
            sig = ast.literal_eval(row["additional_signals"])
            if sorted(params) != names:
                raise ValueError(f"{run.name}: parameters {sorted(params)} != {names}")
            raw[i] = [params[k] for k in names]
            key = sig["tuning_metric"]
            metrics.add(key)
            folds = [m[key] for m in sig["validation_metrics"]]
            if len(folds) != N_FOLDS:
                raise ValueError(f"{run.name}: {len(folds)} folds")
            out["values"][t, i] = float(row["value"])
            out["fold_scores"][t, i] = folds
            out["test"][t, i] = sig["test_value"]
            out["ei"][t, i] = sig["ei"]
            out["pi"][t, i] = sig["pi"]
            out["evaluation_time"][t, i] = float(row["evaluation_time"])
            best[i] = float(row["best"])
        if len(metrics) != 1:
            raise ValueError(f"{run.name}: several tuning metrics {metrics}")
        if not np.array_equal(best, np.minimum.accumulate(out["values"][t])):
            raise ValueError(f"{run.name}/{sd:03d}: best is not the running minimum")
        max_dev = max(max_dev, float(np.max(np.abs(
            out["fold_scores"][t].mean(axis=1) - out["values"][t]))))
        u = (raw - lo) / (hi - lo)
        pre_clip[al][0] = min(pre_clip[al][0], float(u.min()))
        pre_clip[al][1] = max(pre_clip[al][1], float(u.max()))
        out["configs"][t, :, :d] = u
        out["dim_mask"][t, :d] = True
        dataset.append(ds)
        algo.append(al)
        seed.append(sd)
        metric.append(metrics.pop())
        run_names.append(run.name)

    for arr in ("values", "fold_scores", "test", "ei", "pi", "evaluation_time"):
        if not np.all(np.isfinite(out[arr])):
            raise ValueError(f"non-finite entries in {arr}")
    # value is the mean of the ten fold scores (the authors stored it that way)
    tol = 8 * np.finfo(np.float64).eps * np.max(np.abs(out["values"]))
    assert max_dev <= tol, f"value != mean(fold_scores): max deviation {max_dev}"
    print(f"[bo] {n} traces; max |value - mean(fold_scores)| = {max_dev:.3g}")
    for a, (lo_u, hi_u) in pre_clip.items():
        print(f"[bo] {a}: unit-cube configs span [{lo_u:.6g}, {hi_u:.6g}] before clipping")
        assert lo_u >= -1e-12 and hi_u <= 1 + 1e-12, f"{a} configs leave the unit cube"
    out["configs"] = np.clip(out["configs"], 0.0, 1.0)  # only float rounding, see above
    out.update(
        dataset=np.array(dataset),
        algo=np.array(algo),
        seed=np.array(seed, np.int32),
        metric=np.array(metric),
        run=np.array(run_names),
    )
    for a in SPACES:
        names, lo, hi = _stored_bounds(a)
        out[f"names_{a}"] = np.array(names)
        out[f"lower_{a}"] = lo
        out[f"upper_{a}"] = hi
        out[f"log_{a}"] = np.array([SPACES[a][k][2] for k in names])
        out[f"integer_{a}"] = np.array([SPACES[a][k][3] for k in names])
        out[f"table1_lower_{a}"] = np.array([TABLE1[a][k][0] for k in names])
        out[f"table1_upper_{a}"] = np.array([TABLE1[a][k][1] for k in names])
        out[f"table1_log_{a}"] = np.array([TABLE1[a][k][2] for k in names])
    return out


def convert_authors_regrets(src: Path, traces: dict) -> dict[str, np.ndarray]:
    """Align the authors' bound traces to the 200-evaluation axis of ``traces``."""
    root = src / "bo_early_stopping" / "regrets" / "regrets_identity_cv_top0.5"
    cols = ["regret_bound", "incumbent_std", "incumbent_val_metric",
            "incumbent_test_metric", "total_train_time"]
    n = len(traces["run"])
    out = {c: np.full((n, N_ITER), np.nan) for c in cols}
    mask = np.zeros((n, N_ITER), bool)
    decay = math.sqrt(1 / N_FOLDS + 1 / (N_FOLDS - 1))
    worst_val, worst_std = 0.0, 0.0
    ambiguous, tied = set(), set()
    for t in range(n):
        rows = _read_gz_csv(root / traces["run"][t] / f"{traces['seed'][t]:03d}.csv.gz")
        it = np.array([int(r["iteration"]) for r in rows])
        if not np.array_equal(it, np.arange(FIRST_REGRET_ITER, N_ITER)):
            raise ValueError(f"{traces['run'][t]}: unexpected iterations {it[:3]}...")
        for c in cols:
            out[c][t, it] = [float(r[c]) for r in rows]
        mask[t, it] = True
        v = traces["values"][t]
        inc = np.array([np.argmin(v[:i]) for i in it])
        rel = np.abs(v[inc] - out["incumbent_val_metric"][t, it]) / np.abs(v[inc])
        worst_val = max(worst_val, float(rel.max()))
        # incumbent_std is that of the incumbent's folds; under near-ties (see the
        # module docstring) any row within a relative 1e-12 of the minimum is accepted.
        std_all = decay * traces["fold_scores"][t].std(axis=1)
        for k, i in enumerate(it):
            cand = np.nonzero(v[:i] <= v[:i].min() + 1e-12 * abs(v[:i].min()))[0]
            target = out["incumbent_std"][t, i]
            dev = np.abs(std_all[cand] - target) / max(abs(target), 1e-300)
            worst_std = max(worst_std, float(dev.min()))
            if cand.size > 1:
                tied.add(t)
            if dev[cand == inc[k]][0] > 1e-9:
                ambiguous.add(t)
    assert worst_val < 1e-12, worst_val
    assert worst_std < 1e-9, worst_std
    # total_train_time[i] sums evaluation_time over rows 20..i (the authors' loop)
    cum = np.cumsum(traces["evaluation_time"][:, FIRST_REGRET_ITER:], axis=1)
    dev = np.max(np.abs(cum - out["total_train_time"][:, FIRST_REGRET_ITER:]) / cum)
    assert dev < 1e-9, f"total_train_time: relative deviation {dev}"
    amb = [f"{traces['run'][t]}/{traces['seed'][t]:03d}" for t in sorted(ambiguous)]
    print(f"[regrets] {n} traces, rows 20..199; incumbent value rel. dev {worst_val:.2g}, "
          f"incumbent_std rel. dev {worst_std:.2g}; near-tied incumbent where the authors "
          f"did not take argmin: {amb}; traces with near-ties: {len(tied)}")
    out.update(mask=mask, iteration=np.arange(N_ITER, dtype=np.int32))
    for k in ("dataset", "algo", "seed", "run"):
        out[k] = traces[k]
    return out


def convert_authors_results(src: Path) -> dict[str, np.ndarray]:
    """All rows of the authors' results table as columns."""
    path = src / "bo_early_stopping" / "result_identity_cv_top0.5.csv"
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = {
        "algo": np.array([r["algo"] for r in rows]),
        "dataset": np.array([r["dataset"] for r in rows]),
        "seed": np.array([int(r["seed"]) for r in rows], np.int32),
        "method": np.array([r["method"] for r in rows]),
    }
    for c in ("stop_iter", "total_iter"):
        out[c] = np.array([int(float(r[c])) for r in rows], np.int32)
    for c in ("rel_iter", "rel_val", "rel_test", "rel_time", "total_time", "overfit_iter"):
        out[c] = np.array([float(r[c]) if r[c] != "" else np.nan for r in rows])
    print(f"[results] {len(rows)} rows; methods: {sorted(set(map(str, out['method'])))}")
    return out


def check_table3(res: dict) -> None:
    """Averages of the results table against the paper's Table 3."""
    worst = 0.0
    print("[table3] method      RTC RF  RTC XGB  RYC RF  RYC XGB   (paper in brackets)")
    for m, paper in TABLE3.items():
        got = []
        for stat in ("rel_iter", "rel_test"):
            for a in ("RF", "XGB"):
                sel = (res["method"] == m) & (res["algo"] == a)
                assert sel.sum() == 190, (m, a, sel.sum())
                got.append(float(res[stat][sel].mean()))
        worst = max(worst, max(abs(g - p) for g, p in zip(got, paper)))
        print(f"[table3] {m:10s} " + "  ".join(
            f"{g:6.3f} [{p:6.3f}]" for g, p in zip(got, paper)))
    assert worst <= 0.0005 + 1e-12, f"Table 3 not reproduced: max deviation {worst}"
    print(f"[table3] reproduced to the printed precision (max |diff| = {worst:.1e})")


def check_replays(traces: dict, regrets: dict, res: dict) -> None:
    """Replay every stopping rule of the results table from the converted arrays."""
    index = {(a, d, int(s)): t for t, (a, d, s) in
             enumerate(zip(traces["algo"], traces["dataset"], traces["seed"]))}
    its = np.arange(FIRST_REGRET_ITER, N_ITER)
    mismatches, changed = {}, {}
    for k in range(len(res["method"])):
        t = index[(res["algo"][k], res["dataset"][k], int(res["seed"][k]))]
        method = str(res["method"][k])
        kind, arg = method.split("_")
        if kind == "Conv":
            val = regrets["incumbent_val_metric"][t, its]
            best, count, stop = np.inf, 0, its[-1]
            for i, v in zip(its, val):
                if v < best:
                    best, count = v, 0
                else:
                    count += 1
                if count == int(arg):
                    stop = i
                    break
        else:
            if kind == "Ours":
                sig = regrets["regret_bound"][t, its]
                thr = regrets["incumbent_std"][t, FIRST_REGRET_ITER] / 0.21 * float(arg)
                live = np.nonzero(sig < regrets["incumbent_std"][t, its] / 0.21 * float(arg))[0]
                live_stop = its[live[0]] if live.size else its[-1]
                changed[method] = changed.get(method, 0) + int(live_stop != res["stop_iter"][k])
            else:
                sig = traces[kind.lower()][t, its]
                thr = float(arg)
            hit = np.nonzero(sig < thr)[0]
            stop = its[hit[0]] if hit.size else its[-1]
        test = regrets["incumbent_test_metric"][t]
        rel_test = (test[-1] - test[stop]) / max(test[-1], test[stop])
        bad = (stop != res["stop_iter"][k]
               or abs((N_ITER - 1 - stop) / (N_ITER - 1) - res["rel_iter"][k]) > 1e-12
               or abs(rel_test - res["rel_test"][k]) > 1e-9)
        mismatches[method] = mismatches.get(method, 0) + int(bad)
    print(f"[replay] mismatching rows per method: {mismatches}")
    print(f"[replay] stops that a per-iteration threshold would change: {changed}")
    assert not any(mismatches.values()), mismatches


def pick_sample_datasets(traces: dict, res: dict) -> list[str]:
    """One classification and one regression dataset with the most typical seed-0 stats."""
    datasets = sorted(set(traces["dataset"]))
    task = {d: traces["metric"][traces["dataset"] == d][0] for d in datasets}
    z = np.zeros(len(datasets))
    count = 0
    for a in ("RF", "XGB"):
        for m in ("Ours_0.21", "Ours_0.5", "Conv_30", "EI_1e-08"):
            for stat in ("rel_iter", "rel_test"):
                sel = (res["algo"] == a) & (res["method"] == m) & (res["seed"] == 0)
                by = {d: v for d, v in zip(res["dataset"][sel], res[stat][sel])}
                x = np.array([by[d] for d in datasets])
                med = np.median(x)
                mad = np.median(np.abs(x - med)) or np.std(x) or 1.0
                z += np.abs(x - med) / mad
                count += 1
    z /= count
    chosen = []
    for kind in ("error", "rmse"):
        cands = [(z[i], d) for i, d in enumerate(datasets) if task[d] == kind]
        chosen.append(str(min(cands)[1]))
    ranking = ", ".join(f"{d} {s:.2f}" for s, d in sorted(zip(z, datasets))[:6])
    print(f"[sample] typicality (mean robust |z|, lowest first): {ranking}")
    print(f"[sample] chosen: {chosen}")
    return chosen


# ------------------------------------------------------------------------ opda
def _read_jsonl(path: Path) -> list[dict]:
    with open(path) as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _unit_configs(raw: dict[str, np.ndarray], space: dict) -> np.ndarray:
    cols = []
    for name, (lo, hi, log) in space.items():
        u = _unit(raw[name], lo, hi, log)
        if u.min() < -1e-9 or u.max() > 1 + 1e-9:
            raise ValueError(f"{name} leaves its range: [{u.min()}, {u.max()}]")
        cols.append(np.clip(u, 0.0, 1.0))
    return np.stack(cols, axis=1).astype(np.float32)


def _space_arrays(space: dict) -> dict[str, np.ndarray]:
    return {
        "names": np.array(list(space)),
        "lower": np.array([v[0] for v in space.values()]),
        "upper": np.array([v[1] for v in space.values()]),
        "log": np.array([v[2] for v in space.values()]),
    }


def convert_alexnet(src: Path) -> dict[str, np.ndarray]:
    recs = _read_jsonl(src / "opda" / "alexnet" / "alexnet_tuning.results.jsonl")
    kept = [r for r in recs if not r["nan_train_loss"]]
    n, E = len(kept), ALEXNET_MAX_EPOCHS
    arrays = {k: np.full((n, E), np.nan, np.float32)
              for k in ("values", "top5_error", "train_loss", "time")}
    mask = np.zeros((n, E), bool)
    for i, r in enumerate(kept):
        lc = r["learning_curve"]
        if len(lc) != r["epochs"] or [e["epoch"] for e in lc] != list(range(len(lc))):
            raise ValueError(f"alexnet iteration {r['iteration']}: incomplete curve")
        top1 = np.array([e["top_1"] for e in lc])
        if top1.max() > 1.0:
            raise ValueError("top_1 is expected to be a fraction")
        arrays["values"][i, : len(lc)] = 1.0 - top1
        arrays["top5_error"][i, : len(lc)] = [1.0 - e["top_5"] for e in lc]
        arrays["train_loss"][i, : len(lc)] = [e["train_loss"] for e in lc]
        arrays["time"][i, : len(lc)] = [e["time"] for e in lc]
        mask[i, : len(lc)] = True
    raw = {k: np.array([r[k] for r in kept], float) for k in ALEXNET_RAW}
    raw["lr_peak_fraction"] = raw["lr_peak_epoch"] / raw["epochs"]
    configs = _unit_configs(raw, ALEXNET_SPACE)
    if not np.array_equal(np.isfinite(arrays["values"]), mask):
        raise ValueError("alexnet: mask and finite values disagree")
    err = arrays["values"][mask]
    print(f"[alexnet] kept {n} of {len(recs)} runs (dropped {len(recs) - n} nan_train_loss); "
          f"top-1 error in [{err.min():.4f}, {err.max():.4f}]")
    return {
        **arrays,
        "mask": mask,
        "configs": configs,
        **_space_arrays(ALEXNET_SPACE),
        "raw": np.stack([raw[k] for k in ALEXNET_RAW], axis=1),
        "raw_names": np.array(ALEXNET_RAW),
        "epochs": raw["epochs"].astype(np.int32),
        "iteration": np.array([r["iteration"] for r in kept], np.int32),
        "budget": np.arange(1, E + 1, dtype=np.int32),
    }


def convert_deberta(src: Path) -> dict[str, np.ndarray]:
    recs = _read_jsonl(src / "opda" / "deberta" / "deberta-base_tuning.results.jsonl")
    n = len(recs)
    total = np.array([r["total_model_steps"] for r in recs], np.int32)
    G = int(total.max()) // DEBERTA_GRID
    steps = DEBERTA_GRID * np.arange(1, G + 1, dtype=np.int32)
    vals = {k: np.full((n, G), np.nan, np.float32) for k in ("values", "values_mismatched")}
    final = {k: np.zeros(n, np.float32) for k in ("final_value", "final_mismatched")}
    mask = steps[None, :] <= total[:, None]
    for i, r in enumerate(recs):
        for split, vk, fk in (("matched", "values", "final_value"),
                              ("mismatched", "values_mismatched", "final_mismatched")):
            curve = r["learning_curves"][split]
            s = np.array([c[0] for c in curve])
            acc = np.array([c[1] for c in curve])
            if s[-1] != total[i] or acc.max() > 1.0:
                raise ValueError(f"deberta iteration {r['iteration']}: unexpected curve")
            on_grid = s % DEBERTA_GRID == 0
            cols = s[on_grid] // DEBERTA_GRID - 1
            if not np.array_equal(cols, np.arange(total[i] // DEBERTA_GRID)):
                raise ValueError(f"deberta iteration {r['iteration']}: missing grid steps")
            vals[vk][i, cols] = 1.0 - acc[on_grid]
            final[fk][i] = 1.0 - acc[-1]
    raw = {k: np.array([r[k] for r in recs], float) for k in DEBERTA_RAW}
    raw["warmup_proportion"] = raw["warmup_steps"] / (raw["total_model_steps"]
                                                      / raw["num_train_epochs"])
    print(f"[deberta] warmup_proportion spans [{raw['warmup_proportion'].min():.4f}, "
          f"{raw['warmup_proportion'].max():.4f}] (sampled on [0, 0.6])")
    configs = _unit_configs(raw, DEBERTA_SPACE)
    if not np.array_equal(np.isfinite(vals["values"]), mask):
        raise ValueError("deberta: mask and finite values disagree")
    print(f"[deberta] {n} runs, grid of {G} evaluations every {DEBERTA_GRID} steps; "
          f"error in [{np.nanmin(vals['values']):.4f}, {np.nanmax(vals['values']):.4f}]")
    return {
        **vals,
        **final,
        "mask": mask,
        "configs": configs,
        **_space_arrays(DEBERTA_SPACE),
        "raw": np.stack([raw[k] for k in DEBERTA_RAW], axis=1),
        "raw_names": np.array(DEBERTA_RAW),
        "total_steps": total,
        "iteration": np.array([r["iteration"] for r in recs], np.int32),
        "budget": steps,
    }


# ---------------------------------------------------------------------- writing
BO_README = """\
# bo_early_stopping (converted)

Converted from the data of *Automatic Termination for Hyperparameter Optimization*
(Makarova et al., AutoML 2022), Apache-2.0; see LICENSE, NOTICE and SOURCE.txt.
These files are modified (converted) versions of the original CSV files; the
conversion is `tools/convert_data.py`, whose docstring documents every choice.
Load them with `benchmarks/datasets.py`. T = 380 traces = 19 datasets x {RF, XGB} x
10 seeds, sorted by (dataset, algo, seed); N = 200 evaluations; d_max = 9.

## cv_traces.npz (BO with 10-fold cross-validation, `bo_runs/bo_runs_cv`)

| array | shape, dtype | meaning |
|---|---|---|
| configs | (T, N, 9) float32 | configuration in the unit cube, zero-padded |
| dim_mask | (T, 9) bool | valid dimensions (RF: 3, XGB: 9) |
| values | (T, N) float64 | mean 10-fold CV metric (minimised) = mean(fold_scores) |
| fold_scores | (T, N, 10) float64 | per-fold metric (`error` or `rmse`) |
| test | (T, N) float64 | held-out test metric of each configuration |
| ei, pi | (T, N) float64 | acquisition values logged by the authors (EI / PI baselines) |
| evaluation_time | (T, N) float64 | training time of each evaluation, seconds |
| dataset, algo, run | (T,) str | dataset name, "RF" / "XGB", original folder |
| seed | (T,) int32 | BO replicate 0..9 |
| metric | (T,) str | "error" (classification) or "rmse" (regression) |
| names_A, lower_A, upper_A, log_A, integer_A | (d,) | search space of algo A: lower/upper in the stored scale (natural log where log_A) |
| table1_lower_A, table1_upper_A, table1_log_A | (d,) | Table 1 of the paper as printed (raw scale) |

configs = (stored - lower) / (upper - lower) per dimension, columns in name order.
RF ranges follow the authors' code, not Table 1 (see convert_data.py): n_estimators
[1, 64] log, min_samples_split [0.01, 0.5] log, max_depth [1, 5] linear.

## authors_regrets.npz (`regrets/regrets_identity_cv_top0.5`)

regret_bound, incumbent_std, incumbent_val_metric, incumbent_test_metric,
total_train_time: (T, N) float64, where index i holds the authors' row `iteration == i`
(computed from the first i evaluations); `mask` (T, N) bool is False for i < 20, where
the arrays are NaN. `iteration` (N,) int32 = 0..199; dataset, algo, seed, run as above.

## authors_results.npz (`result_identity_cv_top0.5.csv`)

One entry per (algo, dataset, seed, method), 5,320 rows in file order: algo, dataset,
method (str), seed, stop_iter, total_iter (int32), rel_iter (= RTC), rel_val, rel_test
(= RYC), rel_time, total_time, overfit_iter (float64, NaN where empty). Methods:
Conv_{10,30,50,70,90}, EI_1e-08, EI_1e-12, EI_1e-16, PI_0.0001, PI_1e-08, PI_1e-12,
Ours_0.21, Ours_0.5, Ours_1.0.
"""

OPDA_README = """\
# opda (converted)

Adapted from the OPDA hyperparameter tuning data by Nicholas Lourie (AlexNet on
ImageNet, DeBERTa-base on MultiNLI), licensed under CC BY-SA 4.0; see LICENSE (the two
licence notices), README_alexnet.md, README_deberta.md (the original READMEs) and
SOURCE.txt. Changes: runs with NaN training loss removed (AlexNet), accuracies turned
into errors (1 - accuracy), curves padded into arrays, hyperparameters mapped to the
unit cube; DeBERTa's off-grid end-of-epoch evaluations removed. These adapted data are
distributed under the same licence, CC BY-SA 4.0. The conversion is
`tools/convert_data.py`; load with `benchmarks/datasets.py`.

Common arrays (n runs, B budget steps, d hyperparameters):

| array | shape, dtype | meaning |
|---|---|---|
| values | (n, B) float32 | validation error (1 - accuracy), NaN where mask is False |
| mask | (n, B) bool | budget step reached by the run |
| budget | (B,) int32 | epochs 1..100 (AlexNet) / steps 1000..98000 (DeBERTa) |
| configs | (n, d) float32 | unit-cube configuration |
| names, lower, upper, log | (d,) | unit-cube dimensions and their raw ranges |
| raw, raw_names | (n, r) float64, (r,) str | the original hyperparameters |
| iteration | (n,) int32 | random-search iteration in the original file |

alexnet.npz (n = 365 of 512, B = 100, d = 7): also top5_error, train_loss, time
(seconds since the start of training) with the layout of values, and epochs (n,) int32.
Dimensions: epochs [20, 100], batch_size [128, 1024] (log2), lr [5e-3, 50] (log),
lr_peak_fraction = lr_peak_epoch / epochs [0, 0.8], momentum [0.7, 1], weight_decay
[1e-6, 1e-3] (log), label_smoothing [0, 0.5].

deberta.npz (n = 1024, B = 98, d = 5): values_mismatched (n, B); final_value,
final_mismatched (n,) float32, the error at the end of training (total_steps (n,) int32).
Dimensions: num_train_epochs [1, 4], train_batch_size [16, 64], learning_rate
[1e-6, 1e-3] (log), warmup_proportion = warmup_steps / steps per epoch [0, 0.6],
cls_drop_out [0, 0.3].
"""

LCBENCH_README = """\
# yahpo_lcbench

The LCBench surrogate of YAHPO Gym v1.0 (Pfisterer et al., 2022), copied unchanged from
slds-lmu/yahpo_data (see SOURCE.txt; Apache-2.0, see LICENSE and LICENSE-2.0.txt;
README.txt is the original note). A model of real learning curves, not measured data.
Evaluate with `benchmarks.datasets.lcbench_curves` (needs onnxruntime):
inputs `x_cat` int32 (batch, 1) = task index from encoding.json, `x_cont` float32
(batch, 8) = [epoch, batch_size, learning_rate, momentum, weight_decay, num_layers,
max_units, max_dropout] in raw units (ranges in config_space.json); output float32
(batch, 6) = [time, val_accuracy (percent), val_cross_entropy, val_balanced_accuracy,
test_cross_entropy, test_balanced_accuracy].
"""

PKG_README = """\
# jaxstop.data

Small real-data samples for examples and tests, loaded by `jaxstop.data`.

* `bo_traces.npz`: 4 Bayesian-optimisation traces with 10-fold cross-validation scores
  (2 datasets x {RF, XGB}, seed 0), converted from the data of Makarova et al. (2022),
  *Automatic Termination for Hyperparameter Optimization*. Apache-2.0: see
  LICENSE_bo_early_stopping, NOTICE_bo_early_stopping, SOURCE_bo_early_stopping.txt.
  The arrays are modified (converted) versions of the original CSV files.
* `alexnet_curves.npz`: 64 AlexNet-on-ImageNet learning curves (top-1 validation error
  per epoch), adapted from the OPDA data by Nicholas Lourie, CC BY-SA 4.0: see
  LICENSE_alexnet, README_alexnet.md, SOURCE_alexnet.txt. Changes: subset of the runs,
  accuracy turned into error, padding to 100 epochs, unit-cube configurations. This
  adapted sample is distributed under CC BY-SA 4.0.

Both are produced by `tools/convert_data.py` of the jaxstop repository.
"""


def write_all(src: Path) -> None:
    bo_src = src / "bo_early_stopping"
    bo_dst = OUT / "bo_early_stopping"
    for f in ("LICENSE", "NOTICE", "SOURCE.txt"):
        _copy(bo_src / f, bo_dst / f)
    _write_text(bo_dst / "README.md", BO_README)

    traces = convert_bo_traces(src)
    regrets = convert_authors_regrets(src, traces)
    results = convert_authors_results(src)
    check_table3(results)
    check_replays(traces, regrets, results)
    _save_npz(bo_dst / "cv_traces.npz", **traces)
    _save_npz(bo_dst / "authors_regrets.npz", **regrets)
    _save_npz(bo_dst / "authors_results.npz", **results)

    op_src = src / "opda"
    op_dst = OUT / "opda"
    licence = "\n".join((op_src / m / "LICENSE").read_text().strip() + "\n"
                        for m in ("alexnet", "deberta"))
    _write_text(op_dst / "LICENSE", licence)
    _copy(op_src / "alexnet" / "README.md", op_dst / "README_alexnet.md")
    _copy(op_src / "deberta" / "README.md", op_dst / "README_deberta.md")
    _copy(op_src / "SOURCE.txt", op_dst / "SOURCE.txt")
    _write_text(op_dst / "README.md", OPDA_README)
    alexnet = convert_alexnet(src)
    deberta = convert_deberta(src)
    _save_npz(op_dst / "alexnet.npz", **alexnet)
    _save_npz(op_dst / "deberta.npz", **deberta)

    y_src = src / "yahpo_data"
    y_dst = OUT / "yahpo_lcbench"
    size = (y_src / "lcbench" / "model.onnx").stat().st_size
    print(f"[lcbench] model.onnx is {size / 2**20:.2f} MiB")
    assert size < 8 * 2**20, "the LCBench surrogate is too large to vendor"
    for f in ("model.onnx", "config_space.json", "encoding.json", "LICENSE-2.0.txt",
              "README.txt"):
        _copy(y_src / "lcbench" / f, y_dst / f)
    _copy(y_src / "SOURCE.txt", y_dst / "SOURCE.txt")
    _copy(y_src / "LICENSE", y_dst / "LICENSE")
    _write_text(y_dst / "README.md", LCBENCH_README)

    # ---- package sample
    chosen = pick_sample_datasets(traces, results)
    rows = [t for d in chosen for a in ("RF", "XGB")
            for t in np.nonzero((traces["dataset"] == d) & (traces["algo"] == a)
                                & (traces["seed"] == 0))[0]]
    names = np.full((len(rows), D_MAX), "", dtype="<U20")
    for j, t in enumerate(rows):
        nm = traces[f"names_{traces['algo'][t]}"]
        names[j, : len(nm)] = nm
    sample = {k: traces[k][rows] for k in
              ("configs", "dim_mask", "values", "fold_scores", "test", "ei", "pi",
               "dataset", "algo", "seed", "metric")}
    sample["names"] = names
    _save_npz(PKG / "bo_traces.npz", **sample)
    _copy(bo_src / "LICENSE", PKG / "LICENSE_bo_early_stopping")
    _copy(bo_src / "NOTICE", PKG / "NOTICE_bo_early_stopping")
    _copy(bo_src / "SOURCE.txt", PKG / "SOURCE_bo_early_stopping.txt")

    n = alexnet["values"].shape[0]
    sel = (np.arange(ALEXNET_SAMPLE) * n) // ALEXNET_SAMPLE
    a_sample = {k: (v[sel] if v.ndim and v.shape[0] == n else v) for k, v in alexnet.items()
                if k not in ("top5_error", "train_loss")}
    _save_npz(PKG / "alexnet_curves.npz", **a_sample)
    _copy(op_src / "alexnet" / "LICENSE", PKG / "LICENSE_alexnet")
    _copy(op_src / "alexnet" / "README.md", PKG / "README_alexnet.md")
    _copy(op_src / "SOURCE.txt", PKG / "SOURCE_alexnet.txt")
    _write_text(PKG / "README.md", PKG_README)

    for folder in (bo_dst, op_dst, y_dst, PKG):
        total = sum(p.stat().st_size for p in folder.iterdir() if p.is_file()
                    and p.suffix != ".py")
        print(f"[size] {folder.relative_to(REPO)}: {total / 2**20:.2f} MiB")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", nargs="?", default=str(REPO.parent / "shared" / "data"),
                        help="folder with bo_early_stopping/, opda/, yahpo_data/")
    args = parser.parse_args(argv)
    src = Path(args.source).resolve()
    if not (src / "bo_early_stopping").is_dir():
        sys.exit(f"{src} does not contain bo_early_stopping/")
    write_all(src)


if __name__ == "__main__":
    main()
