"""Strip outputs from the notebooks before a commit: python scripts/strip_notebooks.py [paths].

With no paths, every ``notebooks/*.ipynb``. The rule (what counts as an output) is the
one ``tests/notebooks/test_notebooks.py`` checks.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.notebooks.test_notebooks import strip  # noqa: E402


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted((ROOT / "notebooks").glob("*.ipynb"))
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        if strip(nb):
            nbformat.write(nb, path)
            print(f"stripped {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
