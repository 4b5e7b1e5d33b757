"""Every notebook in ``notebooks/`` runs top to bottom in a real Jupyter kernel.

Each notebook is executed with ``nbclient`` in a fresh ``python3`` kernel (this
interpreter, through ``ipykernel``), with ``notebooks/`` as its working directory,
as ``jupyter lab notebooks/`` would run it. A cell that raises fails the test with
the cell's traceback. Each notebook must draw at least one figure (a PNG output) and
finish within its budget; the committed files carry no outputs (``strip`` below).
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


@pytest.mark.timeout(LOADED_BUDGET_S + 60)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path):
    nb = nbformat.read(path, as_version=4)
    env_keep = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "RANK"))}
    start = time.monotonic()
    client = nbclient.NotebookClient(
        nb,
        timeout=LOADED_BUDGET_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS_DIR)}},
    )
    # The kernel inherits this environment (minus any launcher variables).
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
    wall = time.monotonic() - start
    images = [
        out
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if "image/png" in out.get("data", {})
    ]
    assert images, f"{path.name} draws no figure"
    assert wall < LOADED_BUDGET_S, f"{path.name} took {wall:.0f} s (budget {BUDGET_S:.0f} s)"
