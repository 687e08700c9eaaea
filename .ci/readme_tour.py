"""Runs the README's Python blocks against an installed jaxstop.

Usage: ``python .ci/readme_tour.py README.md``, from a directory outside the repository and with an
interpreter whose jaxstop is an installed wheel: a module or data file missing from the package then
fails here. The blocks are found as ``tests/test_readme.py`` finds them (every fenced ``python``
block, in order) and run in one namespace each; a few results are checked for sanity.
"""

import math
import re
import sys
import time
from pathlib import Path


def blocks(readme: Path) -> list[str]:
    """The README's fenced ``python`` blocks, in order."""
    found = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.S)
    if not found:
        raise SystemExit(f"{readme}: no python block")
    return found


def main(readme: Path) -> None:
    import jaxstop

    installed = Path(jaxstop.__file__).resolve()
    if readme.resolve().parent in installed.parents:
        raise SystemExit(f"jaxstop was imported from the source tree ({installed}), not from the installed wheel")
    print(f"jaxstop {jaxstop.__version__} from {installed.parent}")
    for i, code in enumerate(blocks(readme)):
        start = time.perf_counter()
        namespace: dict = {"__name__": f"readme_block_{i}"}
        exec(compile(code, f"{readme}:python block {i}", "exec"), namespace)
        print(f"README python block {i}: ran in {time.perf_counter() - start:.1f} s")
        if "traces" in namespace:                       # the tour: 1,000 simulated studies
            values = namespace["traces"].incumbent_value
            if not all(math.isfinite(float(v)) for v in values):
                raise SystemExit("the tour's simulated studies returned non-finite incumbents")
        if "fb" in namespace:                           # the three methods
            if not bool(namespace["fb"].bound.ok):
                raise SystemExit("the README's regret bound is not ok")
    print("README tour passed against the installed package")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python readme_tour.py PATH/TO/README.md")
    main(Path(sys.argv[1]))
