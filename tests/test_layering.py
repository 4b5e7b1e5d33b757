"""The package's layering, checked by reading its source (``ast``), not by importing it.

Two rules from the README's "Architecture" section:

* **No side doors.** A module never imports a private module or a private name
  (one starting with ``_``) of another top-level folder of ``tensorplay_jax``
  (``rpc/``, ``distributed/``, ``autograd/``...). Inside one folder anything
  goes. What a folder offers its siblings lives in its ``__init__`` or in a
  public-named module (``rpc/internal.py``, ``collectives/reduce_op.py``,
  ``runtime/*``). Imports under ``if TYPE_CHECKING:`` never run and are not
  counted. The top-level ``tensorplay_jax/__init__.py``, the public
  facade, is the one exception. Dotted module paths written as strings (for
  ``importlib``) count as imports.
* **Layers point down.** Each folder imports only the folders listed for it in
  :data:`LAYERS` (and itself), so the picture in the README stays true.
"""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

import tensorplay_jax

PACKAGE = pathlib.Path(tensorplay_jax.__file__).parent

# What distributed/ stands on; the top layers (demo/, testing/) stand on it and on distributed/.
_UNDER_DISTRIBUTED = {"runtime", "futures", "autograd", "tensors", "collectives", "nn", "rpc"}

# folder -> the folders it may import (besides itself). Lower layers first.
LAYERS: dict[str, set[str]] = {
    "runtime": set(),
    # futures.py: the one Future (torch.futures), for RPC and process groups alike; no JAX.
    "futures": set(),
    "autograd": {"runtime"},
    "tensors": {"runtime", "autograd"},
    "collectives": {"runtime"},
    "nn": {"runtime", "autograd", "tensors"},
    "rpc": {"runtime", "futures"},
    "distributed": set(_UNDER_DISTRIBUTED),
    "demo": {*_UNDER_DISTRIBUTED, "distributed", "profiler"},
    "run": {"runtime"},
    # testing/ is a top layer like demo/: its worker jobs and check_dist_grads drive RPC and
    # distributed autograd. (Its pytest plugin, tensorplay_jax_pytest.py beside the package,
    # imports none of it at import time.)
    "testing": {*_UNDER_DISTRIBUTED, "distributed"},
    # profiler/ is a top layer too: its trace() drives every worker over RPC. What records
    # (the flag, the buffer, spans) is runtime/trace.py, so every layer below can record.
    "profiler": {"runtime", "futures", "rpc"},
}

_DOTTED = re.compile(r"^tensorplay_jax(\.\w+)+$")


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


def _folder(parts: list[str]) -> str:
    """Top-level folder (or top-level module) of a dotted path below ``tensorplay_jax``."""
    return parts[0] if parts else ""


def _imports(path: pathlib.Path) -> list[tuple[int, list[str]]]:
    """(line, dotted path below tensorplay_jax, imported name appended) for each import."""
    rel = path.relative_to(PACKAGE).with_suffix("").parts
    package = list(rel[:-1])  # the package this module sits in, below tensorplay_jax
    found: list[tuple[int, list[str]]] = []
    tree = ast.parse(path.read_text(), str(path))
    for block in ast.walk(tree):  # imports for type checkers only never run: skip them
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test):
            block.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                base += node.module.split(".") if node.module else []
            elif node.module and node.module.split(".")[0] == "tensorplay_jax":
                base = node.module.split(".")[1:]
            else:
                continue
            found += [(node.lineno, [*base, alias.name]) for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "tensorplay_jax":
                    found.append((node.lineno, alias.name.split(".")[1:]))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and _DOTTED.match(node.value)
        ):
            found.append((node.lineno, node.value.split(".")[1:]))
    return found


def _own_folder(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE).with_suffix("").parts[0]


def _private(part: str) -> bool:
    return part.startswith("_") and not part.startswith("__")


MODULES = _modules()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_private_import_across_folders(path: pathlib.Path) -> None:
    me = _own_folder(path)
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: tensorplay_jax.{'.'.join(target)}"
        for line, target in _imports(path)
        if target and _folder(target) != me and any(map(_private, target))
    ]
    assert not bad, (
        "imports of another folder's private module or name (import a public name from its "
        "__init__ or a public-named module instead):\n  " + "\n  ".join(bad)
    )


def _is_layer(name: str) -> bool:
    """A folder, or a top-level module standing as a layer of its own (``futures.py``)."""
    return (PACKAGE / name).is_dir() or (PACKAGE / f"{name}.py").is_file()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_layers_point_down(path: pathlib.Path) -> None:
    me = _own_folder(path)
    assert me in LAYERS, f"{me!r} is a new folder: add it to LAYERS and the README's Architecture"
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: {me} imports {_folder(target)}"
        for line, target in _imports(path)
        if target
        and _folder(target) not in ({me} | LAYERS[me])
        # ``import tensorplay_jax`` alone, or a name of the top-level facade: not a layer
        and _is_layer(_folder(target))
    ]
    assert not bad, "imports against the layering (see LAYERS):\n  " + "\n  ".join(bad)


def test_the_scan_sees_imports() -> None:
    """The scanner itself: it finds each import form, so the rules above can fail."""
    found = [t for _, t in _imports(PACKAGE / "collectives" / "reduce_op.py")]
    assert ["collectives", "_axis", "axis_index"] in found
    every = [t for p in MODULES for _, t in _imports(p)]
    assert len(every) > 200


def _closure(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    reach = {k: set(v) for k, v in edges.items()}
    changed = True
    while changed:
        changed = False
        for k in reach:
            more = set().union(*(reach.get(v, set()) for v in reach[k])) - reach[k]
            if more:
                reach[k] |= more
                changed = True
    return reach


def test_readme_diagram_matches_layers() -> None:
    """The README's Architecture diagram (mermaid) allows exactly what LAYERS allows."""
    readme = (PACKAGE.parent / "README.md").read_text()
    section = readme.split("## Architecture", 1)[1]
    diagram = section.split("```mermaid", 1)[1].split("```", 1)[0]
    edges: dict[str, set[str]] = {name: set() for name in LAYERS}
    for a, b in re.findall(r"^\s*(\w+)(?:\[[^\]]*\])?\s*-->\s*(\w+)", diagram, re.M):
        edges.setdefault(a, set()).add(b)
    assert _closure(edges) == LAYERS
