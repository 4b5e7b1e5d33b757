"""The Markdown the project documents itself in (README.md, docs/**/*.md) and its code blocks."""

from __future__ import annotations

import re
from pathlib import Path

from tests._procs import REPO_ROOT

DOCS = REPO_ROOT / "docs"
_SKIP = ("_build", "_generated", "api")  # built or generated, not written


def markdown_files() -> list[Path]:
    """README.md, then every Markdown page of the site, in a stable order."""
    pages = [p for p in sorted(DOCS.rglob("*.md")) if p.relative_to(DOCS).parts[0] not in _SKIP]
    return [REPO_ROOT / "README.md", *pages]


def python_blocks() -> dict[str, list[str]]:
    """Each distinct ```python block -> where it appears ("path:index"), in file order."""
    blocks: dict[str, list[str]] = {}
    for path in markdown_files():
        found = re.findall(r"^```python\n(.*?)^```", path.read_text(), re.S | re.M)
        for i, code in enumerate(found):
            blocks.setdefault(code, []).append(f"{path.relative_to(REPO_ROOT)}:{i}")
    return blocks


def block(marker: str) -> str:
    """The one distinct ```python block that starts with ``marker``."""
    (code,) = [code for code in python_blocks() if code.startswith(marker)]
    return code
