"""Execute the notebooks and store the executed copies the documentation renders.

python scripts/store_notebooks.py [NAME.ipynb ...]   (default: every notebooks/*.ipynb)

Each notebook runs top to bottom in a fresh kernel, exactly as ``tests/notebooks``
runs it, and is written with its outputs to ``docs/notebooks/NAME.ipynb``. Run it
after changing a notebook; ``tests/notebooks`` fails while a copy's cells differ
from its notebook's.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.notebooks.test_notebooks import NOTEBOOKS_DIR, STORED_DIR, execute  # noqa: E402


def main(argv: list[str]) -> int:
    paths = [NOTEBOOKS_DIR / Path(a).name for a in argv] or sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
    STORED_DIR.mkdir(parents=True, exist_ok=True)
    for path in paths:
        start = time.monotonic()
        nb = execute(path)
        for cell in nb.cells:  # per-run timing metadata only makes diffs noisy
            cell.get("metadata", {}).pop("execution", None)
        nbformat.write(nb, STORED_DIR / path.name)
        print(f"{path.name}: {time.monotonic() - start:.0f} s -> docs/notebooks/{path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
