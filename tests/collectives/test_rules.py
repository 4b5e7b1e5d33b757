"""Everything that states a collective's rule agrees with the one rule table.

The table is ``tensorplay_jax.collectives.rules``. Read from it: the package docstring,
the demo's printed rules and the check command's list. Checked against it here: the
guide's table (``docs/guides/collectives.md``), the tape collectives' backward table
(each rule runs the table's ``transpose`` collective), and the NumPy references (one per
collective). The references' values stay independent of the table.
"""

from __future__ import annotations

import ast
import inspect

import tensorplay_jax.collectives as C
from tensorplay_jax.collectives.rules import BY_NAME, RULES, markdown_table
from tests._procs import REPO_ROOT
from tests.collectives import _reference

PACKAGE = REPO_ROOT / "tensorplay_jax"


def test_the_table_names_every_public_collective_once() -> None:
    public = {name for name in C.__all__ if name != "ReduceOp"}
    assert [rule.name for rule in RULES] == sorted(public, key=[r.name for r in RULES].index)
    assert set(BY_NAME) == public


def test_the_guide_shows_the_table() -> None:
    guide = (REPO_ROOT / "docs" / "guides" / "collectives.md").read_text()
    assert markdown_table() in guide


def test_the_package_docstring_states_each_rule() -> None:
    for rule in RULES:
        assert f"``{rule.call}``" in C.__doc__
        assert f"backward: {rule.backward}" in C.__doc__


def test_each_tape_backward_runs_the_tables_transpose() -> None:
    tree = ast.parse((PACKAGE / "distributed" / "nn" / "functional.py").read_text())
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.target) == "_BACKWARD"
    )
    assert isinstance(table, ast.Dict)
    runs = {
        key.value: {
            n.attr
            for n in ast.walk(value)
            if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name)
            and n.value.id == "dist"
        }
        for key, value in zip(table.keys, table.values, strict=True)
        if isinstance(key, ast.Constant)
    }
    assert set(runs) == set(BY_NAME)
    for name, called in runs.items():
        assert called == {BY_NAME[name].transpose}, (name, called)


def test_every_collective_has_a_numpy_reference() -> None:
    for rule in RULES:
        assert inspect.isfunction(getattr(_reference, rule.name)), rule.name


def test_the_demo_prints_the_tables_rule() -> None:
    from tensorplay_jax.demo import _collectives

    assert _collectives._rule_text("broadcast").startswith(BY_NAME["broadcast"].formula)
    assert "(src=" in _collectives._rule_text("broadcast")
    assert "(dst=" in _collectives._rule_text("gather")
    assert "(src=" not in _collectives._rule_text("all_reduce")
