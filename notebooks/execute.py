"""Re-executes notebooks and saves them with their outputs (``make notebooks``).

The figures are drawn by Jupyter's inline backend, as a user sees them; the committed files then render
when browsed. Usage: ``python notebooks/execute.py [NOTEBOOK ...]`` (default: every notebook here).
"""

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def execute(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    if errors:
        raise SystemExit(f"{path.name}: {errors[0].ename}: {errors[0].evalue}")
    for cell in nb.cells:
        cell.metadata.pop("execution", None)        # timestamps: no diff when nothing else changed
    nbformat.write(nb, path)
    print(f"{path.name}: executed in {time.perf_counter() - start:.0f} s, {path.stat().st_size // 1024} KiB")


if __name__ == "__main__":
    os.environ.pop("MPLBACKEND", None)              # the inline backend, which records the figures
    here = Path(__file__).resolve().parent
    for arg in sys.argv[1:] or sorted(here.glob("*.ipynb")):
        execute(Path(arg).resolve())
