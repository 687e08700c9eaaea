"""The README's code runs as written."""

import re
from pathlib import Path

import numpy as np

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


def test_readme_shows_the_two_commands_first():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S).group(1)
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [["make", "demo"], ["make", "test"]]
