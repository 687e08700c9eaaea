"""The README's code runs as written."""

import re
from pathlib import Path

import numpy as np

from jaxstop import bos

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_tour_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python block"
    namespace: dict = {}
    exec(compile(blocks[0], str(README), "exec"), namespace)
    assert namespace["mean"].shape == (2048,) and np.all(np.asarray(namespace["var"]) >= 0)
    assert bool(namespace["info"].finite)
    regret = np.asarray(namespace["traces"].incumbent_value)
    assert regret.shape == (1000,) and np.all(np.isfinite(regret))


def test_readme_methods_block_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 2, "README has no block for the three methods"
    ns: dict = {}
    exec(compile(blocks[1], str(README), "exec"), ns)
    assert np.isfinite(float(ns["fb"].bound.bound)) and float(ns["fb"].bound.bound) >= 0
    # the warm-started fit after the 61st trial: 30 top points of 61, within its 5 steps
    nxt = ns["fb_next"]
    assert bool(nxt.bound.ok) and int(nxt.num_top) == 30 and 1 <= int(nxt.fit_info.steps) <= 5
    folds = np.asarray(ns["folds"])
    threshold = np.sqrt((1 / 10 + 1 / 9) * folds.var(ddof=0))   # Eq. (9)-(10); s^2 with 1/k (Algorithm 1, line 11)
    assert bool(ns["stop_now"]) == (float(ns["fb"].bound.bound) < threshold)
    curve = np.asarray(ns["curve"])
    assert np.all(np.diff(curve) >= -1e-12) and abs(curve[-1] - 1) < 1e-9
    kc = ns["kc"]
    assert 1 <= int(kc.k) <= 4 and int(np.sum(kc.keep)) == int(kc.k)
    # the kept candidates are the k lowest losses
    assert set(np.flatnonzero(np.asarray(kc.keep))) == set(np.argsort(np.asarray(ns["mu"]))[: int(kc.k)])
    # a usable table (ok) and epoch 12 inside N0 + 1 .. N - 1: a real decision, never the forced continue
    assert bool(ns["table"].ok)
    assert int(ns["action"]) in (bos.ACTION_STOP, bos.ACTION_CONTINUE, bos.ACTION_D2)
    # the README looks the decision up with Sec. 3.2's statistic: the mean error of epochs 1..12
    np.testing.assert_allclose(float(bos.summary_statistic(ns["errors"], 12, 8)), np.mean(np.asarray(ns["errors"])[:12]),
                               rtol=2 * 11 * np.finfo(np.asarray(ns["errors"]).dtype).eps)  # two orders of a 12-term positive sum: (n-1) eps each


def test_readme_shows_the_two_commands_first():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [["make", "demo"], ["make", "test"]]
