"""One rank of one conformance test: load torch's suite with its imports changed, run one test.

Run by ``benchmarks/conformance.py`` as ``python _conformance_world.py SUITE CLASS TEST OUT``
in each of a world's processes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``
and the init method in the environment). The suite's source is read from the installed
torch and its imports are rewritten in memory (the AST, not the text): ``torch.X`` becomes
``tensorplay_jax.X``, ``torch.testing._internal.*`` becomes ``_conformance_fixture``. A
name that tensorplay_jax lacks becomes a :class:`Missing` placeholder, so the module
still loads and only the tests that use that name fail, naming it. The rank writes its
verdict (pass, fail with the error, or skip) as JSON to OUT.
"""

from __future__ import annotations

import ast
import importlib
import json
import os
import sys
import threading
import time
import traceback
import types
import unittest
from pathlib import Path
from typing import Any

SUITE_MODULE = "tpj_conformance_suite"
_FIXTURE = "_conformance_fixture"
# Torch names that are test scaffolding, not API: the fixture supplies them.
_SCAFFOLDING = {("torch.distributed.rpc.internal", "RPCExecMode")}
_missed: list[str] = []
_importing = threading.Event()


class MissingAPI(Exception):
    """A test reached a torch name that tensorplay_jax does not have."""


class Missing:
    """A torch name that tensorplay_jax lacks: any use of it fails the test, naming it.

    While the suite module loads, calls are deferred (a module-level decorator such as
    ``@torch.jit.script`` gives another placeholder), so only tests that use it fail.
    """

    def __init__(self, path: str) -> None:
        object.__setattr__(self, "_path", path)

    def __repr__(self) -> str:
        return f"<missing {self._path}>"

    def __getattr__(self, name: str) -> Missing:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Missing(f"{self._path}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _importing.is_set():
            return Missing(f"{self._path}(...)")
        self._fail()

    def __eq__(self, other: object) -> bool:
        self._fail()

    __hash__ = object.__hash__

    def _fail(self) -> Any:
        _missed.append(self._path)
        raise MissingAPI(f"tensorplay_jax has no {self._path.replace('torch.', '', 1)}")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        path = self._path

        class MissingBase:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                _missed.append(path)
                raise MissingAPI(f"tensorplay_jax has no {path}")

        return (MissingBase,)


class Facade(types.ModuleType):
    """A tensorplay_jax module seen under its torch name; absent names are :class:`Missing`."""

    def __init__(self, real: types.ModuleType, path: str) -> None:
        super().__init__(path)
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name: str) -> Any:
        real = object.__getattribute__(self, "_real")
        path = f"{self.__name__}.{name}"
        try:
            value = getattr(real, name)
        except AttributeError:
            if name.startswith("__"):
                raise
            try:
                value = importlib.import_module(f"{real.__name__}.{name}")
            except ImportError:
                return Missing(path)
        return Facade(value, path) if isinstance(value, types.ModuleType) else value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(object.__getattribute__(self, "_real"), name, value)


def resolve(path: str) -> Any:
    """The object a torch module path stands for here."""
    if path.startswith("torch.testing._internal"):
        return Facade(importlib.import_module(_FIXTURE), path)
    target = "tensorplay_jax" + path[len("torch") :]
    try:
        return Facade(importlib.import_module(target), path)
    except ImportError:
        return Missing(path)


def _import_name(module: str, name: str) -> Any:
    """``from module import name`` under the torch-to-tensorplay_jax map."""
    if (module, name) in _SCAFFOLDING:
        return getattr(importlib.import_module(_FIXTURE), name)
    return getattr(resolve(module), name)


class _RewriteImports(ast.NodeTransformer):
    """``import torch...`` / ``from torch... import`` become calls to :func:`resolve`."""

    @staticmethod
    def _assign(target: str, value: ast.expr, like: ast.stmt) -> ast.stmt:
        node = ast.Assign(targets=[ast.Name(target, ast.Store())], value=value)
        return ast.copy_location(node, like)

    def visit_Import(self, node: ast.Import) -> Any:
        if not any(a.name.split(".")[0] == "torch" for a in node.names):
            return node
        out: list[ast.stmt] = []
        for alias in node.names:
            if alias.name.split(".")[0] != "torch":
                out.append(ast.copy_location(ast.Import(names=[alias]), node))
                continue
            path = alias.name if alias.asname else "torch"
            call = ast.Call(ast.Name("__tpj_resolve__", ast.Load()), [ast.Constant(path)], [])
            out.append(self._assign(alias.asname or "torch", call, node))
        return out

    def visit_ImportFrom(self, node: ast.ImportFrom) -> Any:
        if not node.module or node.module.split(".")[0] != "torch" or node.level:
            return node
        out: list[ast.stmt] = []
        for alias in node.names:
            args = [ast.Constant(node.module), ast.Constant(alias.name)]
            call = ast.Call(ast.Name("__tpj_import_name__", ast.Load()), args, [])
            out.append(self._assign(alias.asname or alias.name, call, node))
        return out


def load_suite(path: Path) -> types.ModuleType:
    """Execute torch's suite file with its imports rewritten, as module ``SUITE_MODULE``."""
    tree = ast.fix_missing_locations(_RewriteImports().visit(ast.parse(path.read_text())))
    module = types.ModuleType(SUITE_MODULE)
    module.__file__ = str(path)
    module.__dict__.update(__tpj_resolve__=resolve, __tpj_import_name__=_import_name)
    sys.modules[SUITE_MODULE] = module
    _importing.set()
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)
    finally:
        _importing.clear()
    return module


def run_one(suite: Path, class_name: str, test_name: str) -> dict[str, Any]:
    """Run ``class_name.test_name`` of ``suite`` in this process; the verdict as a dict."""
    from _conformance_fixture import TorchTestCase

    started = time.monotonic()
    verdict: dict[str, Any] = {"rank": int(os.environ["RANK"])}
    try:
        module = load_suite(suite)
        case = type(class_name, (getattr(module, class_name), TorchTestCase), {})
        getattr(case(methodName=test_name), test_name)()
        if _missed:
            raise MissingAPI(f"tensorplay_jax has no {_missed[0]} (the test caught the error)")
        verdict["status"] = "pass"
    except unittest.SkipTest as e:
        verdict.update(status="skip", error=str(e))
    except BaseException as e:
        verdict.update(
            status="fail",
            error=f"{type(e).__name__}: {e}"[:2000],
            traceback=traceback.format_exc()[-6000:],
            missing=list(_missed),
        )
    verdict["seconds"] = round(time.monotonic() - started, 2)
    verdict["finished"] = time.time()
    return verdict


def main() -> None:
    suite, class_name, test_name, out = sys.argv[1:5]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    verdict = run_one(Path(suite), class_name, test_name)
    Path(out).write_text(json.dumps(verdict))
    sys.stdout.flush()
    sys.stderr.flush()
    # A test that fails may leave RPC threads running: the verdict is written, leave now.
    os._exit(0)


if __name__ == "__main__":
    main()
