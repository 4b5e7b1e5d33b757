"""The package's layering, checked by reading its source (``ast``), not by importing it.

Two rules from the documentation's Architecture page (``docs/architecture.md``):

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
  :data:`LAYERS` (and itself), so the picture in ``docs/architecture.md`` stays true.
* **No import cycles.** No module of the package is in a run-time import cycle:
  the graph counts every import a module runs, at its top or inside a function
  (but not under ``if TYPE_CHECKING:``).
* **The tape's core stands alone.** The core modules of ``autograd/`` (:data:`AUTOGRAD_CORE`)
  import nothing from its speed-up layer (``autograd/speedups/``), which plugs into
  the core's seams (``autograd/_seams.py``); only ``autograd/__init__`` installs it,
  and no other folder imports it.
* **Transports are named in one place.** No module outside the table of built-in
  transports (``rpc/transports.py``) and the transports' own modules imports a
  transport's module or names a built-in transport (a string such as ``"grpc"``).

One more seam is checked here, by importing the engine registry: every registered
process-group engine implements every collective of the ``Engine`` protocol, which
covers every collective the differentiable collectives' rule table (``_BACKWARD`` in
``distributed/nn/functional.py``) runs.
"""

from __future__ import annotations

import ast
import inspect
import pathlib
import re
import typing

import pytest

import tensorplay_jax
from tensorplay_jax.process_group import engine
from tensorplay_jax.rpc import transports

PACKAGE = pathlib.Path(tensorplay_jax.__file__).parent

# What distributed/ stands on; the top layers (demo/, testing/) stand on it and on distributed/.
_UNDER_DISTRIBUTED = {
    "runtime",
    "futures",
    "autograd",
    "tensors",
    "collectives",
    "nn",
    "optim",
    "rpc",
    "process_group",
}

# folder -> the folders it may import (besides itself). Lower layers first.
LAYERS: dict[str, set[str]] = {
    "runtime": set(),
    # futures.py: the one Future (torch.futures), for RPC and process groups alike; no JAX.
    "futures": set(),
    "autograd": {"runtime"},
    "tensors": {"runtime", "autograd"},
    "collectives": {"runtime"},
    "nn": {"runtime", "autograd", "tensors"},
    "distributions": {"runtime", "autograd", "tensors"},
    # optim/: torch's local optimizers; a step writes Tensors (tensors.overwrite), nothing more.
    "optim": {"runtime", "autograd", "tensors"},
    # utils/: torch.utils.data; DistributedSampler reads the process group's rank and size.
    "utils": {"runtime", "autograd", "tensors", "process_group", "collectives", "futures"},
    "rpc": {"runtime", "futures"},
    # process groups need only the runtime and ReduceOp (collectives/reduce_op.py), and
    # "futures", the one public Future module that process groups and RPC return.
    "process_group": {"runtime", "collectives", "futures"},
    "distributed": set(_UNDER_DISTRIBUTED),
    "demo": {*_UNDER_DISTRIBUTED, "distributed", "profiler"},
    "run": {"runtime"},
    # check.py (python -m tensorplay_jax.check) drives every layer, as a user's first job would.
    "check": {*_UNDER_DISTRIBUTED, "distributed", "testing"},
    # testing/ is a top layer like demo/: its worker jobs and check_dist_grads drive RPC and
    # distributed autograd. (Its pytest plugin, tensorplay_jax_pytest.py beside the package,
    # imports none of it at import time.)
    "testing": {*_UNDER_DISTRIBUTED, "distributed"},
    # profiler/ is a top layer too: its trace() drives every worker over RPC. What records
    # (the flag, the buffer, spans) is runtime/trace.py, so every layer below can record.
    # Its profile() is autograd.profiler's one-process profile with torch.profiler's API.
    "profiler": {"runtime", "futures", "rpc", "autograd"},
}

_DOTTED = re.compile(r"^tensorplay_jax(\.\w+)+$")


def _modules() -> list[pathlib.Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


def _folder(parts: list[str]) -> str:
    """Top-level folder (or top-level module) of a dotted path below ``tensorplay_jax``."""
    return parts[0] if parts else ""


def _imports(path: pathlib.Path, *, strings: bool = True) -> list[tuple[int, list[str]]]:
    """(line, dotted path below tensorplay_jax, imported name appended) for each import;
    with ``strings``, dotted module paths written as strings count too."""
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
            strings
            and isinstance(node, ast.Constant)
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
    assert me in LAYERS, f"{me!r} is a new folder: add it to LAYERS and docs/architecture.md"
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


def test_architecture_diagram_matches_layers() -> None:
    """The Architecture page's diagram (mermaid) allows exactly what LAYERS allows."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    diagram = page.split("```{mermaid}", 1)[1].split("```", 1)[0]
    edges: dict[str, set[str]] = {name: set() for name in LAYERS}
    for a, b in re.findall(r"^\s*(\w+)(?:\[[^\]]*\])?\s*-->\s*(\w+)", diagram, re.M):
        edges.setdefault(a, set()).add(b)
    assert _closure(edges) == LAYERS


def test_process_groups_take_only_reduce_op_from_collectives() -> None:
    """process_group/ needs ReduceOp and its reductions, not the SPMD collectives."""
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}: tensorplay_jax.{'.'.join(target)}"
        for path in sorted((PACKAGE / "process_group").glob("*.py"))
        for line, target in _imports(path)
        if target[:1] == ["collectives"] and target[:2] != ["collectives", "reduce_op"]
    ]
    assert not bad, "process_group/ imports from collectives/ beyond reduce_op:\n  " + "\n  ".join(
        bad
    )


def _engine_calls() -> dict[str, set[str]]:
    """Each public process-group collective -> the engine methods it calls (``g.engine.<op>``)."""
    tree = ast.parse((PACKAGE / "process_group" / "_collectives.py").read_text())
    calls: dict[str, set[str]] = {}
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef) and not fn.name.startswith("_"):
            calls[fn.name] = {
                node.attr
                for node in ast.walk(fn)
                if isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "engine"
            }
    return calls


def _backward_table_ops() -> set[str]:
    """The engine methods the ``_BACKWARD`` rule table reaches: its forward collectives
    (its keys) and the ``dist.<collective>`` its rules run, through ``_engine_calls``."""
    tree = ast.parse((PACKAGE / "distributed" / "nn" / "functional.py").read_text())
    table = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.AnnAssign | ast.Assign)
        and "_BACKWARD" in ast.unparse(node.target if isinstance(node, ast.AnnAssign) else node)
    )
    assert isinstance(table, ast.Dict), "_BACKWARD is no longer a dict literal: update this scan"
    names = {key.value for key in table.keys if isinstance(key, ast.Constant)}
    names |= {
        node.attr
        for node in ast.walk(table)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
        and node.value.id == "dist"
    }  # fmt: skip
    calls = _engine_calls()
    return set().union(*(calls[name] for name in names if name in calls))


def test_the_engine_protocol_covers_the_backward_table() -> None:
    ops = _backward_table_ops()
    assert {"all_reduce", "reduce_scatter", "all_to_all_single"} <= ops  # the scan sees it
    assert ops <= set(engine.OPS), (
        f"the _BACKWARD rules run {sorted(ops - set(engine.OPS))}, which the Engine protocol "
        "(process_group/engine.py) does not declare"
    )


def _engine_class(name: str) -> type:
    factory = engine.registration(name).factory
    return factory if inspect.isclass(factory) else typing.get_type_hints(factory)["return"]


@pytest.mark.parametrize("name", engine.engines())
def test_every_engine_implements_every_op(name: str) -> None:
    cls = _engine_class(name)
    missing, differ = [], []
    for op in ("close", *engine.OPS):
        method = getattr(cls, op, None)
        if method is None or method is getattr(engine.Engine, op):
            missing.append(op)
            continue
        want = list(inspect.signature(getattr(engine.Engine, op)).parameters)
        got = list(inspect.signature(method).parameters)  # follows on_host's __wrapped__
        if got != want:
            differ.append(f"{op}{tuple(got)} (the protocol: {tuple(want)})")
    assert not missing and not differ, (
        f"engine {name!r} ({cls.__module__}.{cls.__qualname__}) does not implement the Engine "
        f"protocol: missing {missing}; other parameters: {differ}"
    )


# ------------------------------------------------------------------ import cycles


def _module_name(path: pathlib.Path) -> str:
    """``rpc._agent`` for ``rpc/_agent.py``, ``rpc`` for ``rpc/__init__.py``."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports when it runs (``from a import b`` names
    ``a.b`` when that is a module, else ``a``; compiled extensions are leaves)."""
    names = {_module_name(p) for p in MODULES} | {""}
    graph: dict[str, set[str]] = {}
    for path in MODULES:
        me, out = _module_name(path), set()
        for _, target in _imports(path, strings=False):  # a string names, it does not run
            for n in (len(target), len(target) - 1):
                name = ".".join(target[:n])
                if n > 0 and name in names:
                    out.add(name)
                    break
        graph[me] = out - {me}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
    deps = _import_graph()
    assert "rpc._agent" in deps["rpc.api"]  # the graph sees the imports


def test_no_module_is_in_an_import_cycle() -> None:
    graph = _import_graph()
    cycles = _cycles(graph)
    lines = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c)
        for c in cycles
    ]
    assert not cycles, (
        "modules in a run-time import cycle (move what both need into a module they both "
        "import, or pass it in):\n  " + "\n  ".join(lines)
    )


# ------------------------------------------------------------------ the tape's core and its layer

# The core tape: every module of autograd/ but its __init__ (which installs the layer) and
# the speed-up layer (autograd/speedups/).
AUTOGRAD_CORE = [
    "_accumulate",
    "_cache",
    "_compile",
    "_custom",
    "_engine",
    "_grad",
    "_grad_mode",
    "_higher_order",
    "_hooks",
    "_lift",
    "_node",
    "_node_hooks",
    "_op_errors",
    "_seams",
    "_tensor_class",
    "function",
    "functional",  # torch.autograd.functional: jacobian, hessian, vjp, jvp, hvp, vhp
    "gradcheck",  # torch.autograd.gradcheck / gradgradcheck: the tape against differences
    "profiler",  # torch.autograd.profiler: reads runtime/trace's spans
    "sparse_arrays",
]


def test_every_autograd_module_is_core_or_layer() -> None:
    """A new module of autograd/ says which side it is on (add it above or to speedups/)."""
    top = {p.stem for p in (PACKAGE / "autograd").glob("*.py")} - {"__init__"}
    assert top == set(AUTOGRAD_CORE)
    assert (PACKAGE / "autograd" / "speedups" / "__init__.py").is_file()


@pytest.mark.parametrize("name", AUTOGRAD_CORE)
def test_the_core_tape_imports_nothing_from_the_speed_up_layer(name: str) -> None:
    path = PACKAGE / "autograd" / f"{name}.py"
    bad = [
        f"autograd/{name}.py:{line}: tensorplay_jax.{'.'.join(target)}"
        for line, target in _imports(path)
        if target[:2] == ["autograd", "speedups"]
    ]
    assert not bad, (
        "a core module of the tape imports its speed-up layer (plug the speed-up into a "
        "seam of autograd/_seams.py instead):\n  " + "\n  ".join(bad)
    )


def test_only_autograd_installs_its_speed_up_layer() -> None:
    bad = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in MODULES
        if _own_folder(path) != "autograd"
        for line, target in _imports(path)
        if target[:2] == ["autograd", "speedups"]
    ]
    assert not bad, "modules outside autograd/ import autograd.speedups:\n  " + "\n  ".join(bad)


def test_the_core_scan_sees_the_layer() -> None:
    """The scan itself: autograd/__init__ is seen importing the layer it installs."""
    found = [t for _, t in _imports(PACKAGE / "autograd" / "__init__.py")]
    assert ["autograd", "speedups"] in found


# ------------------------------------------------------------------ transports named once


def _transport_modules() -> set[pathlib.Path]:
    """The built-in transports' own modules: each factory's module, and the whole private
    subpackage it sits in (``rpc/_local/``)."""
    own: set[pathlib.Path] = set()
    for _, factory, _ in transports.BUILTIN_TRANSPORTS:
        parts = factory.__module__.split(".")[1:]
        own.add(PACKAGE.joinpath(*parts[:2]) if len(parts) > 2 else PACKAGE.joinpath(*parts))
    return own


def _in(path: pathlib.Path, own: set[pathlib.Path]) -> bool:
    return any(path == o.with_suffix(".py") or o in path.parents for o in own)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants in ``tree`` (text for people, not code)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _names_of_transports(path: pathlib.Path, builtin: set[str]) -> list[str]:
    """Where ``path``'s code names a built-in transport: a string that is one's name."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    return [
        f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.value!r}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and node.value in builtin and id(node) not in docs
    ]


def test_no_module_outside_the_transport_table_names_a_transport() -> None:
    table = PACKAGE / "rpc" / "transports.py"
    own = _transport_modules()
    builtin = {name for name, _, _ in transports.BUILTIN_TRANSPORTS}
    own_modules = {".".join(p.relative_to(PACKAGE).with_suffix("").parts) for p in own}
    # The socket base the same-host and TCP transports share is theirs too (no other
    # folder may import rpc's private modules at all: see the first rule).
    theirs = own | {PACKAGE / "rpc" / "_socket"}
    bad = []
    for path in MODULES:
        if path == table or _in(path, theirs):
            continue
        bad += [
            f"{path.relative_to(PACKAGE)}:{line}: imports tensorplay_jax.{'.'.join(target)}"
            for line, target in _imports(path)
            if any(f"{'.'.join(target)}.".startswith(f"{m}.") for m in own_modules)
        ]
        # In rpc/, a transport's name means the transport (elsewhere "tcp" is also a
        # process-group engine and an init_method scheme, "local" an ordinary word).
        if _own_folder(path) == "rpc":
            bad += _names_of_transports(path, builtin)
    assert not bad, (
        "a built-in transport is named outside its table (rpc/transports.py: "
        "BUILTIN_TRANSPORTS) and its own modules; ask the registry instead:\n  " + "\n  ".join(bad)
    )


def test_the_transport_scan_sees_the_table() -> None:
    table = PACKAGE / "rpc" / "transports.py"
    builtin = {name for name, _, _ in transports.BUILTIN_TRANSPORTS}
    assert builtin == {"local", "tcp", "grpc"}
    assert len(_names_of_transports(table, builtin)) >= 3
    assert _in(PACKAGE / "rpc" / "_local" / "server.py", _transport_modules())


@pytest.mark.parametrize("name", engine.pair_engines())
def test_every_pair_engine_implements_send_recv(name: str) -> None:
    factory = engine._PAIRS[name].factory
    cls = factory if inspect.isclass(factory) else typing.get_type_hints(factory)["return"]
    missing = [op for op in ("close", "send_recv") if getattr(cls, op, None) is None]
    assert not missing, f"pair engine {name!r} ({cls.__qualname__}) lacks {missing}"
