"""torch's names under tensorplay_jax: the import map the conformance suites load with.

``import torch.X`` in a suite becomes ``resolve("torch.X")``: the module
``tensorplay_jax.X`` seen through a :class:`Facade`, or ``_conformance_fixture`` for
``torch.testing._internal.*``. A name tensorplay_jax lacks is a :class:`Missing`
placeholder, so the suite still loads and only the tests that use it fail, naming it.
Facades pickle as a call to :func:`resolve`, so a suite's classes and functions that
refer to them travel over RPC.
"""

from __future__ import annotations

import ast
import importlib
import threading
import types
from typing import Any

_FIXTURE = "_conformance_fixture"
# Torch names that are test scaffolding, not API: the fixture supplies them.
_SCAFFOLDING = {
    ("torch.distributed.rpc.internal", "RPCExecMode"),
    ("torch._utils_internal", "TEST_MASTER_ADDR"),
    ("torch._utils_internal", "TEST_MASTER_PORT"),
}
missed: list[str] = []
importing = threading.Event()


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
        if importing.is_set():
            return Missing(f"{self._path}(...)")
        self._fail()

    def __eq__(self, other: object) -> bool:
        self._fail()

    __hash__ = object.__hash__

    def __instancecheck__(self, obj: Any) -> bool:
        return False  # nothing is an instance of a class tensorplay_jax lacks

    def _fail(self) -> Any:
        missed.append(self._path)
        raise MissingAPI(f"tensorplay_jax has no {self._path.replace('torch.', '', 1)}")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        path = self._path

        class MissingBase:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                missed.append(path)
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

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return resolve, (self.__name__,)


def resolve(path: str) -> Any:
    """The object a torch module path stands for here."""
    if path.startswith("torch.testing._internal"):
        return Facade(importlib.import_module(_FIXTURE), path)
    target = "tensorplay_jax" + path[len("torch") :]
    try:
        return Facade(importlib.import_module(target), path)
    except ImportError:
        return Missing(path)


def import_name(module: str, name: str) -> Any:
    """``from module import name`` under the torch-to-tensorplay_jax map."""
    if (module, name) in _SCAFFOLDING:
        return getattr(importlib.import_module(_FIXTURE), name)
    return getattr(resolve(module), name)


class RewriteImports(ast.NodeTransformer):
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
            if not alias.asname and alias.name != "torch":
                # ``import torch.a.b`` imports torch.a.b (a module that registers
                # something on import does it) and binds ``torch``.
                load = ast.Call(
                    ast.Name("__tpj_resolve__", ast.Load()), [ast.Constant(alias.name)], []
                )
                out.append(ast.copy_location(ast.Expr(load), node))
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
