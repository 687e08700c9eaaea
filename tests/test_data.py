"""Checks of the real-data sample shipped in ``jaxstop.data``.

Oracles: the arithmetic that defines the stored quantities (a CV value is the mean of
its folds), the published search spaces (Table 1 / the authors' code for the BO traces,
the OPDA README for AlexNet), the authors' own regret files (their incumbents were
computed independently of our conversion) and the full vendored tables.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import jaxstop.data as jd

REPO = Path(__file__).resolve().parents[1]
PKG = REPO / "jaxstop" / "data"


@pytest.fixture(scope="module")
def traces():
    return jd.bo_traces()


@pytest.fixture(scope="module")
def curves():
    return jd.alexnet_curves()


@pytest.fixture(scope="module")
def datasets():
    spec = importlib.util.spec_from_file_location(
        "_jaxstop_bench_datasets", REPO / "benchmarks" / "datasets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ BO traces
def test_bo_shapes_and_dtypes(traces):
    assert traces.configs.shape == (4, 200, 9) and traces.configs.dtype == np.float32
    assert traces.fold_scores.shape == (4, 200, 10)
    for name in ("values", "test", "ei", "pi"):
        arr = getattr(traces, name)
        assert arr.shape == (4, 200) and arr.dtype == np.float64, name
    assert traces.seed.dtype == np.int32 and np.all(traces.seed == 0)
    assert sorted(zip(traces.dataset, traces.algo)) == list(zip(traces.dataset, traces.algo))
    assert len(set(traces.dataset)) == 2
    assert set(traces.algo) == {"RF", "XGB"} and set(traces.metric) == {"error", "rmse"}


def test_bo_value_is_mean_of_folds(traces):
    assert np.all(np.isfinite(traces.fold_scores))
    ref = np.sum(traces.fold_scores, axis=-1) / 10.0
    np.testing.assert_allclose(traces.values, ref, rtol=1e-13, atol=0)


def test_bo_metrics_in_range(traces):
    for t in range(4):
        if traces.metric[t] == "error":
            assert np.all((traces.fold_scores[t] >= 0) & (traces.fold_scores[t] <= 1))
            assert np.all((traces.test[t] >= 0) & (traces.test[t] <= 1))
        else:
            assert np.all(traces.fold_scores[t] > 0) and np.all(traces.test[t] > 0)
    assert np.all((traces.pi >= 0) & (traces.pi <= 1)) and np.all(traces.ei >= 0)


def test_bo_configs_unit_cube_and_padding(traces):
    assert np.all((traces.configs >= 0) & (traces.configs <= 1))
    expected = {"RF": 3, "XGB": 9}
    for t in range(4):
        d = expected[traces.algo[t]]
        assert traces.dim_mask[t].tolist() == [True] * d + [False] * (9 - d)
        assert np.all(traces.configs[t][:, d:] == 0)
        assert np.all(traces.names[t][d:] == "") and np.all(traces.names[t][:d] != "")
        assert list(traces.names[t][:d]) == sorted(traces.names[t][:d])
        # a real search covers its domain: every used dimension varies
        assert np.all(traces.configs[t][:, :d].std(axis=0) > 0.05)


def test_bo_configs_decode_to_search_space(traces):
    """Undo the documented mapping and compare with the published search spaces."""
    for t in range(4):
        names = list(traces.names[t][traces.dim_mask[t]])
        u = traces.configs[t][:, : len(names)].astype(np.float64)
        col = dict(zip(names, u.T))
        if traces.algo[t] == "RF":
            depth = 1 + 4 * col["max_depth"]  # integer 1..5, linear (authors' code)
            np.testing.assert_allclose(depth, np.round(depth), atol=1e-5)
            assert set(np.round(depth).astype(int)) <= {1, 2, 3, 4, 5}
            trees = np.exp(np.log(64.0) * col["n_estimators"])
            assert trees.min() >= 1 - 1e-4 and trees.max() <= 64 * (1 + 1e-4)
            split = np.exp(np.log(0.01) + np.log(50.0) * col["min_samples_split"])
            assert split.min() >= 0.01 * (1 - 1e-4) and split.max() <= 0.5 * (1 + 1e-4)
        else:  # Table 1: subsample [0.5, 1] and colsample_bytree [0.3, 1], linear
            sub = 0.5 + 0.5 * col["subsample"]
            assert 0.5 <= sub.min() and sub.max() <= 1.0
            lr = np.exp(np.log(1e-6) * (1 - col["learning_rate"]))
            assert lr.min() >= 1e-6 * (1 - 1e-4) and lr.max() <= 1 + 1e-4


def test_bo_sample_matches_full_tables(traces, datasets):
    full = datasets.load_bo_cv()
    for t in range(4):
        (row,) = np.nonzero((full.dataset == traces.dataset[t]) & (full.algo == traces.algo[t])
                            & (full.seed == traces.seed[t]))[0]
        for name in ("configs", "dim_mask", "values", "fold_scores", "test", "ei", "pi",
                     "names", "metric"):
            np.testing.assert_array_equal(getattr(traces, name)[t], getattr(full, name)[row])


def test_bo_sample_agrees_with_authors_regret_files(traces, datasets):
    """The authors computed incumbents from their CSVs; ours must give the same ones."""
    regrets = datasets.load_authors_regrets()
    decay = np.sqrt(1 / 10 + 1 / 9)
    for t in range(4):
        (row,) = np.nonzero((regrets.dataset == traces.dataset[t])
                            & (regrets.algo == traces.algo[t]) & (regrets.seed == 0))[0]
        mask = regrets.mask[row]
        assert np.array_equal(mask, np.arange(200) >= 20)
        assert np.array_equal(np.isfinite(regrets.regret_bound[row]), mask)
        v = traces.values[t]
        for i in np.nonzero(mask)[0]:
            best = v[:i].min()
            np.testing.assert_allclose(regrets.incumbent_val_metric[row, i], best, rtol=1e-12)
            tied = np.nonzero(v[:i] <= best + 1e-12 * abs(best))[0]
            stds = decay * traces.fold_scores[t, tied].std(axis=1)
            assert np.min(np.abs(stds - regrets.incumbent_std[row, i])) <= 1e-9 * stds.max()
            assert regrets.incumbent_test_metric[row, i] in traces.test[t, tied]


# -------------------------------------------------------------------- AlexNet
def test_alexnet_mask_and_range(curves):
    v, m = curves.values, curves.mask
    assert v.shape == m.shape == (64, 100) and v.dtype == np.float32
    assert np.array_equal(np.isfinite(v), m)
    assert np.array_equal(np.isfinite(curves.time), m)
    # each run is a prefix of epochs whose length is its `epochs` hyperparameter
    assert np.array_equal(m, np.arange(100)[None, :] < curves.epochs[:, None])
    assert np.all((curves.epochs >= 20) & (curves.epochs <= 100))
    np.testing.assert_array_equal(curves.epochs, curves.raw[:, 0])
    assert np.all((v[m] > 0) & (v[m] < 1))
    assert np.array_equal(curves.budget, np.arange(1, 101))


def test_alexnet_curves_learn_on_average(curves):
    v = curves.values
    mean_first20 = v[:, :20].mean(axis=0)  # every run has at least 20 epochs
    assert np.mean(np.diff(mean_first20) < 0) >= 0.8
    last = v[np.arange(64), curves.epochs - 1]
    assert last.mean() < v[:, 0].mean() - 0.05
    assert last.min() < 0.6  # the best runs reach ImageNet-AlexNet error levels
    # time is seconds since the start of training: increasing along epochs
    for i in range(64):
        assert np.all(np.diff(curves.time[i, : curves.epochs[i]]) > 0)


def test_alexnet_configs_follow_opda_ranges(curves):
    """Reference mapping from the sampling distribution in the OPDA README."""
    raw = dict(zip(curves.raw_names, curves.raw.T))
    ref = np.stack([
        (raw["epochs"] - 20) / 80,
        (np.log2(raw["batch_size"]) - 7) / 3,
        (np.log(raw["lr"]) - np.log(5e-3)) / (np.log(50) - np.log(5e-3)),
        raw["lr_peak_epoch"] / raw["epochs"] / 0.8,
        (raw["momentum"] - 0.7) / 0.3,
        (np.log(raw["weight_decay"]) - np.log(1e-6)) / (np.log(1e-3) - np.log(1e-6)),
        raw["label_smoothing"] / 0.5,
    ], axis=1)
    np.testing.assert_allclose(curves.configs, ref, atol=1e-6)
    assert np.all((curves.configs >= 0) & (curves.configs <= 1))
    assert set(raw["batch_size"]) <= {128, 256, 512, 1024}


def test_alexnet_sample_matches_full_table(curves, datasets):
    full = datasets.load_opda("alexnet")
    rows = np.searchsorted(full.iteration, curves.iteration)
    np.testing.assert_array_equal(full.iteration[rows], curves.iteration)
    np.testing.assert_array_equal(full.values[rows], curves.values)
    np.testing.assert_array_equal(full.mask[rows], curves.mask)
    np.testing.assert_array_equal(full.configs[rows], curves.configs)
    np.testing.assert_array_equal(full.extras["time"][rows], curves.time)


def test_licences_ship_with_the_sample():
    for name in ("LICENSE_bo_early_stopping", "NOTICE_bo_early_stopping",
                 "SOURCE_bo_early_stopping.txt", "LICENSE_alexnet", "README_alexnet.md",
                 "SOURCE_alexnet.txt"):
        assert (PKG / name).stat().st_size > 0, name
    assert "Apache License" in (PKG / "LICENSE_bo_early_stopping").read_text()
    assert "CC BY-SA 4.0" in (PKG / "LICENSE_alexnet").read_text()
    total = sum(p.stat().st_size for p in PKG.iterdir() if p.is_file())
    assert total < 1_000_000
