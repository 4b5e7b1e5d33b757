"""Generates the API reference and the configuration table from the code, at build time.

The API reference has one page per public module (a module whose dotted path has no
``_`` part and that defines ``__all__``, plus every module named in some ``__all__``).
Every name in a module's ``__all__`` gets an entry on that page: the object is
documented (autodoc) on the page of the first module, in :data:`PREFERRED` order, that
exports it, and every other module that re-exports it links there. So each public name
has one place, and the pages stay few enough to build in seconds.

The configuration table is written from ``tensorplay_jax.runtime.settings.SETTINGS``,
the one list of environment variables the package reads.

Both are written into ``docs/api/`` and ``docs/_generated/`` (neither is committed)
when Sphinx starts (``builder-inited``). ``tests/docs`` checks the built pages on its
own reading of every ``__all__``: each name has an entry or a link to one.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
PACKAGE = "tensorplay_jax"

# Where a re-exported object is documented: the first module of this list (then the
# others, by name) whose ``__all__`` holds it. The spellings users write come first.
PREFERRED = [
    "tensorplay_jax",
    "tensorplay_jax.nn",
    "tensorplay_jax.nn.functional",
    "tensorplay_jax.nn.init",
    "tensorplay_jax.optim",
    "tensorplay_jax.distributions",
    "tensorplay_jax.futures",
    "tensorplay_jax.collectives",
    "tensorplay_jax.distributed",
    "tensorplay_jax.distributed.rpc",
    "tensorplay_jax.distributed.autograd",
    "tensorplay_jax.distributed.nn",
    "tensorplay_jax.distributed.nn.api",
    "tensorplay_jax.distributed.nn.functional",
    "tensorplay_jax.distributed.optim",
    "tensorplay_jax.profiler",
    "tensorplay_jax.testing",
    "tensorplay_jax.check",
    "tensorplay_jax.run",
]

# The sections of the reference index, by module prefix (first match wins).
GROUPS = [
    ("Tensors, the local tape and modules", ("tensorplay_jax", "tensorplay_jax.nn",
     "tensorplay_jax.optim", "tensorplay_jax.distributions", "tensorplay_jax.futures",
     "tensorplay_jax.autograd", "tensorplay_jax.tensors")),
    ("Differentiable collectives", ("tensorplay_jax.collectives",)),
    ("Distributed", ("tensorplay_jax.distributed", "tensorplay_jax.rpc",
     "tensorplay_jax.process_group")),
    ("Profiling, testing and tools", ("tensorplay_jax.profiler", "tensorplay_jax.testing",
     "tensorplay_jax.check", "tensorplay_jax.run")),
    ("Runtime (the layer every other stands on)", ("tensorplay_jax.runtime",)),
]  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One name of one module's ``__all__``: where it is documented (``target``)."""

    module: str
    name: str
    kind: str  # "module", "class", "function", "data"
    target: str  # dotted path of the documented object (or module)
    home: bool  # documented on this module's page (else a link to ``target``)
    foreign: bool  # defined outside the package (documented by a line, not autodoc)


def _is_public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def public_modules() -> list[str]:
    """Every public module, in documentation order."""
    found: set[str] = set()
    pkg = importlib.import_module(PACKAGE)
    names = [PACKAGE] + [m.name for m in pkgutil.walk_packages(pkg.__path__, PACKAGE + ".")]
    for name in names:
        if not _is_public(name) or name.startswith(PACKAGE + ".demo"):
            continue
        module = importlib.import_module(name)
        if hasattr(module, "__all__"):
            found.add(name)
    for name in list(found):  # modules that an __all__ names
        module = importlib.import_module(name)
        for member in module.__all__:
            value = getattr(module, member, None)
            if value is None:
                value = importlib.import_module(f"{name}.{member}")
            if isinstance(value, types.ModuleType) and value.__name__.startswith(PACKAGE):
                found.add(value.__name__ if _is_public(value.__name__) else f"{name}.{member}")
    rank = {m: i for i, m in enumerate(PREFERRED)}
    return sorted(found, key=lambda m: (rank.get(m, len(rank)), m))


def _member(module: types.ModuleType, name: str):
    if hasattr(module, name):
        return getattr(module, name)
    return importlib.import_module(f"{module.__name__}.{name}")  # a submodule named in __all__


def _kind(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return "module"
    if inspect.isclass(obj):
        return "class"
    if callable(obj) and hasattr(obj, "__name__") and hasattr(obj, "__module__"):
        return "function"  # functions, builtins, and wrapped callables that keep a name
    return "data"


def entries() -> list[Entry]:
    """Every (module, name) of every public ``__all__``, with where it is documented."""
    out: list[Entry] = []
    homes: dict[int, str] = {}
    for mod_name in public_modules():
        module = importlib.import_module(mod_name)
        for name in getattr(module, "__all__", []):
            obj = _member(module, name)
            kind = _kind(obj)
            here = f"{mod_name}.{name}"
            if kind == "module":
                target = obj.__name__ if _is_public(obj.__name__) else here
                out.append(Entry(mod_name, name, kind, target, False, False))
                continue
            owner = getattr(obj, "__module__", None) or ""
            foreign = kind != "data" and not owner.startswith(PACKAGE)
            if kind == "data":  # values (ints, strings) are not unique objects: one entry each
                out.append(Entry(mod_name, name, kind, here, True, False))
                continue
            home = homes.setdefault(id(obj), here)
            out.append(Entry(mod_name, name, kind, home, home == here, foreign))
    return out


def _under(module: str, prefix: str) -> bool:
    return module == prefix or (prefix != PACKAGE and module.startswith(prefix + "."))


def _title(text: str, char: str = "=") -> str:
    return f"{text}\n{char * len(text)}\n"


def _summary(obj) -> str:
    """The first sentence-paragraph of ``obj``'s own docstring, on one line ("" if none)."""
    doc = obj.__doc__ if inspect.isclass(obj) or callable(obj) else None
    if not doc or (inspect.isclass(obj) and doc is type(obj).__doc__):
        return ""
    first = inspect.cleandoc(doc).split("\n\n", 1)[0].replace("\n", " ").strip()
    return first[:-1] if first.endswith("::") else first


def _module_page(mod_name: str, items: list[Entry]) -> str:
    module = importlib.import_module(mod_name)
    lines = [_title(f"``{mod_name}``"), f".. automodule:: {mod_name}", "   :no-members:", ""]
    if not hasattr(module, "__all__"):  # a module named in an __all__ that has none itself
        lines += [f".. automodule:: {mod_name}", "   :members:", "   :no-index:", ""]
        return "\n".join(lines)
    lines += [".. list-table::", "   :widths: 30 70", ""]
    for e in items:
        if e.kind == "module":
            ref = f":py:mod:`{e.name} <{e.target}>`"
            what = "module"
        else:
            ref = f":py:obj:`{e.name} <{e.target}>`"
            what = _summary(_member(module, e.name)) if e.home else f"see ``{e.target}``"
        lines += [f"   * - {ref}", f"     - {what}"]
    lines.append("")
    for e in items:
        if not e.home:
            continue
        path = f"{e.module}.{e.name}"
        if e.foreign:
            obj = _member(module, e.name)
            origin = f"{obj.__module__}.{getattr(obj, '__qualname__', e.name)}"
            directive = "py:class" if e.kind == "class" else "py:function"
            lines += [f".. {directive}:: {path}", "", f"   ``{origin}``, re-exported.", ""]
        elif e.kind == "class":
            lines += [f".. autoclass:: {path}", "   :members:", ""]
        elif e.kind == "function":
            lines += [f".. autofunction:: {path}", ""]
        else:
            lines += [f".. autodata:: {path}", ""]
    return "\n".join(lines)


def write_api(out_dir: Path) -> None:
    """The reference: ``index.rst`` and one page per public module."""
    out_dir.mkdir(parents=True, exist_ok=True)
    all_entries = entries()
    modules = public_modules()
    pages = {}
    for mod_name in modules:
        items = [e for e in all_entries if e.module == mod_name]
        pages[mod_name] = _module_page(mod_name, items)
    index = [
        _title("API reference"),
        "Every name of every public module's ``__all__``, from its docstring. A name that",
        "several modules export is documented once, under the first spelling below, and",
        "listed with a link on the other modules' pages.",
        "",
    ]
    placed: set[str] = set()
    for title, prefixes in GROUPS:
        group = [m for m in modules if m not in placed and any(_under(m, p) for p in prefixes)]
        if not group:
            continue
        placed.update(group)
        index += [_title(title, "-"), ".. toctree::", "   :maxdepth: 1", ""]
        index += [f"   {m}" for m in group]
        index.append("")
    rest = [m for m in modules if m not in placed]
    if rest:
        index += [_title("Other", "-"), ".. toctree::", "   :maxdepth: 1", ""]
        index += [f"   {m}" for m in rest] + [""]
    wanted = {f"{m}.rst": text for m, text in pages.items()}
    wanted["index.rst"] = "\n".join(index)
    for path in out_dir.glob("*.rst"):
        if path.name not in wanted:
            path.unlink()
    for name, text in wanted.items():
        _write_if_changed(out_dir / name, text)


def configuration_table() -> str:
    """The Markdown table of every environment variable the package reads."""
    from tensorplay_jax.runtime.settings import SETTINGS

    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for s in SETTINGS:
        default = "unset" if s.default is None else f"`{s.default}`"
        rows.append(f"| `{s.env}` | {default} | {s.doc.replace('|', '&#124;')} |")
    return "\n".join(rows) + "\n"


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:  # keep mtimes: incremental builds
        path.write_text(text)


def generate(app=None) -> None:
    write_api(DOCS / "api")
    (DOCS / "_generated").mkdir(exist_ok=True)
    _write_if_changed(DOCS / "_generated" / "configuration_table.md", configuration_table())


def setup(app):
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
