"""One settings table, and only runtime/ reads the environment.

The documentation's Configuration page is generated from the table; ``tests/docs``
checks that the built page lists every variable.
"""

from __future__ import annotations

import ast
import doctest

import pytest

import tensorplay_jax
from tensorplay_jax import runtime
from tensorplay_jax.runtime import settings
from tests._procs import REPO_ROOT

PACKAGE = REPO_ROOT / "tensorplay_jax"
TABLE = {s.env for s in settings.SETTINGS}

ALLOWED: set[tuple[str, str]] = set()  # (module, variable) pairs read outside runtime/


def test_settings_table_has_one_row_per_variable_with_a_meaning():
    names = [s.env for s in settings.SETTINGS]
    assert len(names) == len(set(names))
    assert all(s.doc and s.type in (str, int, float, bool) for s in settings.SETTINGS)


def test_a_name_outside_the_table_is_refused():
    with pytest.raises(KeyError, match="add a Setting row"):
        settings.raw("TENSORPLAY_JAX_NO_SUCH_VARIABLE")


def _is_os_environ(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "environ"
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
    )


def _environ_reads(tree: ast.Module) -> list[tuple[int, ast.AST | None]]:
    """(line, key expression) of every read of os.environ / os.getenv (key None: the whole map)."""
    reads: list[tuple[int, ast.AST | None]] = []
    written = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_os_environ(node.value):
            written.add(id(node.value))
            if isinstance(node.ctx, ast.Load):
                reads.append((node.lineno, node.slice))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            if _is_os_environ(f.value):
                written.add(id(f.value))
                if f.attr in ("get", "pop"):
                    reads.append((node.lineno, node.args[0] if node.args else None))
            elif f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os":
                reads.append((node.lineno, node.args[0] if node.args else None))
        elif isinstance(node, ast.Compare) and any(_is_os_environ(c) for c in node.comparators):
            written.update(id(c) for c in node.comparators)
            reads.append((node.lineno, node.left))
    for node in ast.walk(tree):  # e.g. ``env = os.environ``: reads keys we cannot see
        if _is_os_environ(node) and id(node) not in written and not _copied(tree, node):
            reads.append((node.lineno, None))
    return reads


def _copied(tree: ast.Module, environ: ast.AST) -> bool:
    """``dict(os.environ)`` / ``os.environ.items()`` etc.: a copy for a child process."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and environ in node.args:
            return isinstance(node.func, ast.Name) and node.func.id == "dict"
        if isinstance(node, ast.Attribute) and node.value is environ:
            return node.attr in ("items", "update", "setdefault", "copy")
    return False


def _constants(tree: ast.Module) -> dict[str, str]:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if isinstance(t, ast.Name) and isinstance(node.value.value, str):
                    out[t.id] = node.value.value
    return out


def test_only_runtime_reads_the_environment():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("runtime/"):
            continue
        tree = ast.parse(path.read_text())
        consts = _constants(tree)
        for line, key in _environ_reads(tree):
            if isinstance(key, ast.Constant):
                name = key.value
            elif isinstance(key, ast.Name) and key.id in consts:
                name = consts[key.id]
            else:
                bad.append(f"{rel}:{line}: reads os.environ with a key this test cannot see")
                continue
            if name in TABLE and (rel, name) not in ALLOWED:
                bad.append(f"{rel}:{line}: reads {name}; use tensorplay_jax.runtime.settings")
    assert not bad, "\n".join(bad)


def test_runtime_imports_no_other_folder_of_the_package():
    bad = []
    for path in sorted((PACKAGE / "runtime").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for n in names:
                if n.startswith("tensorplay_jax") and not n.startswith("tensorplay_jax.runtime"):
                    bad.append(f"{path.name}: imports {n}")
    assert not bad, bad


@pytest.mark.parametrize("name", runtime.__all__)
def test_runtime_docstring_examples_run(name):
    module = getattr(runtime, name)
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and (result.attempted > 0 or name == "secret")


def test_runtime_package_docstring_example_runs():
    assert doctest.testmod(runtime).failed == 0
    assert tensorplay_jax.runtime is runtime
