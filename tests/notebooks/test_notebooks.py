"""Every notebook in ``notebooks/`` runs top to bottom in a real Jupyter kernel.

Each notebook is executed with ``nbclient`` in a fresh ``python3`` kernel (this
interpreter, through ``ipykernel``), with ``notebooks/`` as its working directory,
as ``jupyter lab notebooks/`` would run it. A cell that raises fails the test with
the cell's traceback. Each notebook must draw at least one figure (a PNG output) and
finish within its budget; the committed files carry no outputs (``strip`` below).
The documentation renders executed copies kept in ``docs/notebooks/``
(``scripts/store_notebooks.py`` writes them with :func:`execute`); a test checks that
each copy has the notebook's cells, all run, with figures and no error.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests._procs import REPO_ROOT

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
# The executed copies the documentation site renders (scripts/store_notebooks.py).
STORED_DIR = REPO_ROOT / "docs" / "notebooks"
# Each notebook takes at most 2 minutes on a quiet 2-core machine; the suite runs them
# beside other multi-process tests, so the test allows twice that.
BUDGET_S = 120.0
LOADED_BUDGET_S = 2 * BUDGET_S


def strip(nb) -> bool:
    """Clear outputs, execution counts and per-run metadata in place; True if anything changed.

    ``python scripts/strip_notebooks.py`` applies it to every notebook before a commit.
    """
    changed = False
    for cell in nb.cells:
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs") or cell.get("execution_count") is not None:
            cell["outputs"], cell["execution_count"] = [], None
            changed = True
        for key in ("execution", "collapsed", "scrolled"):
            if key in cell.get("metadata", {}):
                del cell["metadata"][key]
                changed = True
    for key in ("widgets",):
        if key in nb.metadata:
            del nb.metadata[key]
            changed = True
    return changed


def test_there_are_notebooks():
    assert len(NOTEBOOKS) >= 4, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_stripped(path: Path):
    nb = nbformat.read(path, as_version=4)
    assert not strip(nb), f"{path.name} has outputs: run python scripts/strip_notebooks.py"


def execute(path: Path, timeout: float = LOADED_BUDGET_S):
    """Run the notebook at ``path`` top to bottom in a fresh kernel; return it with outputs.

    The kernel inherits this environment (minus any launcher variables), with the
    repository on ``PYTHONPATH``, and runs in ``notebooks/``.
    """
    nb = nbformat.read(path, as_version=4)
    env_keep = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK"))}
    client = nbclient.NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    )
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env_keep)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO_ROOT), saved.get("PYTHONPATH", "")) if p
    )
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return nb


def _images(nb) -> list:
    return [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if "image/png" in out.get("data", {})
    ]


def _cells(nb) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in nb.cells]


@pytest.mark.timeout(LOADED_BUDGET_S + 60)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path):
    start = time.monotonic()
    nb = execute(path)
    wall = time.monotonic() - start
    assert _images(nb), f"{path.name} draws no figure"
    assert wall < LOADED_BUDGET_S, f"{path.name} took {wall:.0f} s (budget {BUDGET_S:.0f} s)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_documentation_copy_is_current(path: Path):
    """The site renders ``docs/notebooks/NAME.ipynb``, an executed copy of the notebook:
    its cells must be the notebook's, every code cell run, with figures and no error."""
    fix = "run: python scripts/store_notebooks.py " + path.name
    stored_path = STORED_DIR / path.name
    assert stored_path.exists(), f"docs/notebooks/{path.name} is missing; {fix}"
    stored = nbformat.read(stored_path, as_version=4)
    source = nbformat.read(path, as_version=4)
    assert _cells(stored) == _cells(source), f"docs/notebooks/{path.name} is out of date; {fix}"
    code = [c for c in stored.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), f"not every cell ran; {fix}"
    errors = [o for c in code for o in c.outputs if o.get("output_type") == "error"]
    assert not errors, f"docs/notebooks/{path.name} holds an error output; {fix}"
    assert _images(stored), f"docs/notebooks/{path.name} has no figure; {fix}"
