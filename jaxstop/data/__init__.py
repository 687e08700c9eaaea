"""Small real-data samples shipped with jaxstop, for examples, notebooks and tests.

Two samples, converted from third-party data by ``tools/convert_data.py`` and kept
under their own licences (the files beside this module):

* :func:`bo_traces` -- 4 Bayesian-optimisation runs with 10-fold cross-validation from
  Makarova et al. (2022), *Automatic Termination for Hyperparameter Optimization*
  (Apache-2.0: ``LICENSE_bo_early_stopping``, ``NOTICE_bo_early_stopping``).
* :func:`alexnet_curves` -- 64 ImageNet AlexNet learning curves from the OPDA
  random-search data of N. Lourie (CC BY-SA 4.0: ``LICENSE_alexnet``); this adapted
  sample is distributed under the same licence.

The full tables (380 BO traces, 365 AlexNet and 1,024 DeBERTa curves, the LCBench
surrogate) are in the repository's ``benchmarks/data`` and are loaded by
``benchmarks/datasets.py``. The loaders return fresh NumPy arrays on every call.
"""

from __future__ import annotations

import io
from importlib import resources
from typing import NamedTuple

import numpy as np

__all__ = ["AlexNetCurves", "BOTraces", "alexnet_curves", "bo_traces"]


class BOTraces(NamedTuple):
    """Recorded BO runs with per-fold cross-validation scores.

    T = 4 traces (2 datasets x {RF, XGB}, seed 0), N = 200 evaluations in the order
    they were made, d_max = 9 hyperparameters (RF has 3, padded with zeros).

    Attributes:
        configs: Configurations in the unit cube, shape (T, N, d_max), float32.
            Linear in the stored scale (natural log for log-scale hyperparameters).
        dim_mask: Valid hyperparameter dimensions, shape (T, d_max), bool.
        values: Mean 10-fold CV metric, minimised, shape (T, N), float64;
            equal to ``fold_scores.mean(-1)``.
        fold_scores: Per-fold CV metric, shape (T, N, 10), float64.
        test: Held-out test metric of each configuration, shape (T, N), float64.
        dataset: Dataset name, shape (T,), str.
        algo: ``"RF"`` or ``"XGB"``, shape (T,), str.
        seed: BO replicate, shape (T,), int32.
        names: Hyperparameter name of each dimension (``""`` where padded),
            shape (T, d_max), str.
        metric: ``"error"`` (classification) or ``"rmse"`` (regression), shape (T,).
        ei: Expected improvement the authors logged when choosing each
            configuration, shape (T, N), float64 (the EI stopping baseline).
        pi: Probability of improvement, likewise, shape (T, N), float64.
    """

    configs: np.ndarray
    dim_mask: np.ndarray
    values: np.ndarray
    fold_scores: np.ndarray
    test: np.ndarray
    dataset: np.ndarray
    algo: np.ndarray
    seed: np.ndarray
    names: np.ndarray
    metric: np.ndarray
    ei: np.ndarray
    pi: np.ndarray


class AlexNetCurves(NamedTuple):
    """AlexNet-on-ImageNet learning curves from random search.

    C = 64 runs (evenly spaced through the 365 runs without NaN training loss),
    E = 100 epochs (the longest run), d = 7 hyperparameters.

    Attributes:
        values: Top-1 validation error (1 - top-1 accuracy) after each epoch,
            shape (C, E), float32; NaN where ``mask`` is False.
        mask: Epoch reached by the run (run ``i`` trained ``epochs[i]`` epochs),
            shape (C, E), bool.
        configs: Configurations in the unit cube, shape (C, d), float32.
        names: Unit-cube dimension names, shape (d,), str.
        epochs: Number of epochs each run trained (itself a hyperparameter),
            shape (C,), int32.
        time: Seconds since the start of training after each epoch, shape (C, E),
            float32; NaN where ``mask`` is False.
        raw: Original hyperparameters, shape (C, d), float64, columns ``raw_names``.
        raw_names: Original hyperparameter names, shape (d,), str.
        lower: Lower end of each unit-cube dimension in raw units, shape (d,); for
            ``lr_peak_fraction``, of the fraction ``lr_peak_epoch / epochs`` (the raw column
            holds the epoch, counted from 0), so its cube value is that fraction over ``upper``.
        upper: Upper end, shape (d,).
        log: Whether the dimension is mapped on a log scale, shape (d,), bool.
        iteration: Random-search iteration in the original file, shape (C,), int32.
        budget: Epoch number of each column, 1..E, shape (E,), int32.
    """

    values: np.ndarray
    mask: np.ndarray
    configs: np.ndarray
    names: np.ndarray
    epochs: np.ndarray
    time: np.ndarray
    raw: np.ndarray
    raw_names: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    log: np.ndarray
    iteration: np.ndarray
    budget: np.ndarray


def _load(name: str) -> dict[str, np.ndarray]:
    data = resources.files(__name__).joinpath(name).read_bytes()
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def bo_traces() -> BOTraces:
    """Four recorded BO runs with 10-fold cross-validation scores.

    From the experiments of Makarova et al. (2022), Sec. 4.1: scikit-learn
    RandomForest and XGBoost tuned by GP-BO for 200 evaluations on ``nyc-farmads``
    (classification error) and ``nyc-openml34538`` (regression RMSE), seed 0; the two
    datasets whose stopping statistics are closest to the median of the paper's 19.

    Returns:
        A :class:`BOTraces` of NumPy arrays.

    Example:
        >>> import numpy as np
        >>> from jaxstop.data import bo_traces
        >>> traces = bo_traces()
        >>> traces.values.shape, traces.fold_scores.shape, traces.configs.shape
        ((4, 200), (4, 200, 10), (4, 200, 9))
        >>> [f"{d}/{a}" for d, a in zip(traces.dataset, traces.algo)][:2]
        ['nyc-farmads/RF', 'nyc-farmads/XGB']
        >>> bool(np.allclose(traces.values, traces.fold_scores.mean(-1)))
        True
        >>> traces.names[0][traces.dim_mask[0]].tolist()
        ['max_depth', 'min_samples_split', 'n_estimators']
    """
    return BOTraces(**_load("bo_traces.npz"))


def alexnet_curves() -> AlexNetCurves:
    """Sixty-four AlexNet-on-ImageNet learning curves (top-1 validation error).

    From the OPDA random-search data (Lourie et al.): each run draws epochs in
    20..100, batch size, peak learning rate, its warm-up epoch, momentum, weight decay
    and label smoothing, and is evaluated after every epoch. Runs are padded to 100
    epochs with ``mask``.

    Returns:
        An :class:`AlexNetCurves` of NumPy arrays.

    Example:
        >>> import numpy as np
        >>> from jaxstop.data import alexnet_curves
        >>> curves = alexnet_curves()
        >>> curves.values.shape, curves.configs.shape
        ((64, 100), (64, 7))
        >>> bool(np.array_equal(curves.mask.sum(1), curves.epochs))
        True
        >>> final = curves.values[np.arange(64), curves.epochs - 1]
        >>> bool(np.all((final > 0) & (final < 1)))
        True
    """
    return AlexNetCurves(**_load("alexnet_curves.npz"))
