"""Modules stay small: one job each, about 600 lines at most.

The limit is a hint to find a seam, not a count to cut to: a module that grows
past it is split by job (what a newcomer would look for), never at a line number.
A module may run longer only when its docstring says why, in a paragraph that
starts with ``Why this module is long:`` (for example one protocol whose parts
must be read together). Where code belongs is checked by the layering test
(``tests/test_layering.py``).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import tensorplay_jax

PACKAGE = pathlib.Path(tensorplay_jax.__file__).parent
LIMIT = 600
REASON = "Why this module is long:"


@pytest.mark.parametrize(
    "path",
    sorted(PACKAGE.rglob("*.py")),
    ids=lambda p: str(p.relative_to(PACKAGE)),
)
def test_module_is_short_or_says_why(path: pathlib.Path) -> None:
    source = path.read_text()
    lines = len(source.splitlines())
    if lines <= LIMIT:
        return
    doc = ast.get_docstring(ast.parse(source)) or ""
    assert REASON in doc, (
        f"{path.relative_to(PACKAGE)} has {lines} lines (limit {LIMIT}): split it by job, "
        f"or say in its docstring why not, in a paragraph starting {REASON!r}"
    )
