"""Every notebook in notebooks/ runs top to bottom and is committed with its figures.

The kernel gets a non-interactive matplotlib backend through its environment (``MPLBACKEND=Agg``), never
from the notebook, which leaves Jupyter's inline backend to users.
"""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def _outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]


def test_there_are_notebooks():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_with_figures(path):
    """Browsing the repository shows the figures: the committed file holds PNG outputs, small ones."""
    nb = nbformat.read(path, as_version=4)
    images = [o for o in _outputs(nb) if "image/png" in o.get("data", {})]
    assert images, f"{path.name} has no image output: execute it and save it with its outputs"
    assert not [o for o in _outputs(nb) if o.output_type == "error"], f"{path.name} was saved with an error"
    assert path.stat().st_size < 400_000, f"{path.name} is {path.stat().st_size} bytes: lower the figures' dpi"
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "matplotlib.use(" not in sources, "the backend is the runner's choice, not the notebook's"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_executes(path, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")           # inherited by the kernel process
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    errors = [o for o in _outputs(nb) if o.output_type == "error"]
    assert not errors, [f"{e.ename}: {e.evalue}" for e in errors]
