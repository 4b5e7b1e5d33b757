"""Classes and functions on the wire: by reference when the receiver has them, else by value.

A record is ``[module, qualname]`` when the object resolves to itself by that
name, else ``[None, cloudpickle bytes]``.

Objects of the main script (``__main__``) follow tensorplay's rule: when the
destination runs the same main script (same source, see :func:`main_identity`;
the agent compares the identities the workers publish at rendezvous), they go
by name and resolve in the destination's own ``__main__``, with its globals,
locks and module state. Elsewhere (a notebook, a REPL, ``python -c``, another
script) and for what has no name there (a lambda, a nested function) they go
by value. Inside pickled values (a ``functools.partial``, an instance of a
main-script class) the same rule holds, through :func:`dumps`. By-value code
keeps its file name (``runtime.pickling``), so a remote traceback shows the
sender's file and lines.

Costs per call: whether an object goes by reference is cached per object;
the by-value bytes of a function are cached per function while the values it
captures (globals, defaults, closure cells) are the same objects and cannot
change in place (numbers, strings, modules, importable functions and
classes); a function capturing a list or a dict is pickled on every send, so
it always carries the current values. Unpickled objects are cached by their
bytes (the last 256), so a function sent by value on every call is rebuilt once.
"""

from __future__ import annotations

import collections
import hashlib
import importlib
import io
import sys
import types
import weakref
from typing import Any

import cloudpickle

from tensorplay_jax.rpc._wire_types import DecodeError
from tensorplay_jax.runtime import pickling

_FUNC_CACHE_SIZE = 256
_MAIN_NAMES = ("__main__", "__mp_main__")  # a multiprocessing child names its main this way


def resolve(module: str, qualname: str) -> Any:
    # import_module, not a sys.modules lookup: a module another thread is still
    # importing is in sys.modules half-initialized; import_module waits for it.
    obj: Any = sys.modules["__main__"] if module in _MAIN_NAMES else importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


_main_id: list[str | None] = []


def main_identity() -> str | None:
    """What the main script is, for comparing workers: its file name and a hash of its source.

    None when ``__main__`` has no readable file (a notebook, a REPL, ``python -c``).

    Example:
      >>> main_identity() is None or ":" in main_identity()
      True
    """
    if not _main_id:
        path = getattr(sys.modules.get("__main__"), "__file__", None)
        ident = None
        if isinstance(path, str):
            try:
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()[:32]
                ident = f"{path.rsplit('/', 1)[-1]}:{digest}"
            except OSError:
                pass
        _main_id.append(ident)
    return _main_id[0]


_by_ref_ok: dict[Any, bool] = {}


def importable(obj: Any) -> tuple[str, str] | None:
    """``(module, qualname)`` if ``obj`` is itself by that name in a module (not main)."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module in _MAIN_NAMES or "<" in qualname:
        return None
    try:
        cached = _by_ref_ok.get(obj)
    except TypeError:  # unhashable callable
        return None
    if cached is None:
        try:
            cached = resolve(module, qualname) is obj
        except Exception:
            cached = False
        if cached:
            _by_ref_ok[obj] = True
    return (module, qualname) if cached else None


_main_names: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def main_name(obj: Any) -> str | None:
    """The qualname of a main-script object that is itself by that name in ``__main__``.

    Example:
      >>> main_name(len) is None
      True
    """
    qualname = getattr(obj, "__qualname__", None)
    if (
        not isinstance(qualname, str)
        or "<" in qualname
        or getattr(obj, "__module__", None) not in _MAIN_NAMES
    ):
        return None
    try:
        return _main_names[obj]
    except KeyError:
        pass
    except TypeError:  # unhashable or not weakly referenceable: look it up every time
        return qualname if _reachable(qualname, obj) else None
    name = qualname if _reachable(qualname, obj) else None
    _main_names[obj] = name
    return name


def _reachable(qualname: str, obj: Any) -> bool:
    try:
        return resolve("__main__", qualname) is obj
    except Exception:
        return False


def objref(obj: Any, main: bool = False) -> list[Any]:
    """The wire record of a class or function (see the module docstring).

    Args:
      obj: the class or function.
      main: the destination runs this process's main script (main-script objects go by name).

    Example:
      >>> objref(len)
      ['builtins', 'len']
    """
    ref = importable(obj)
    if ref is not None:
        return [ref[0], ref[1]]
    if main:
        name = main_name(obj)
        if name is not None:
            return ["__main__", name]
    return [None, by_value(obj, main)]


def load_objref(rec: list[Any]) -> Any:
    if rec[0] is not None:
        try:
            return resolve(rec[0], rec[1])
        except Exception as e:
            if rec[0] in _MAIN_NAMES:
                raise DecodeError(
                    f"cannot find {rec[1]} in this worker's main script ({type(e).__name__}: "
                    f"{e}); define it at the top level of the script, before init_rpc and "
                    "outside `if __name__ == '__main__':`"
                ) from None
            raise DecodeError(
                f"cannot import {rec[0]}.{rec[1]} on this worker ({type(e).__name__}: {e}); "
                "the RPC pickler does not serialize the code of a function the caller can "
                "import: make the module importable here (PYTHONPATH) or define it where it "
                "is used"
            ) from None
    return loads(bytes(rec[1]))


# ---------------------------------------------------------------------------
# By value


class _MainPickler(pickling.Pickler):
    """cloudpickle that sends main-script functions and classes by name (file names kept)."""

    def reducer_override(self, obj: Any) -> Any:
        if callable(obj):  # functions, classes, jitted functions, custom_vjp ...
            name = main_name(obj)
            if name is not None:
                return resolve, ("__main__", name)
        return super().reducer_override(obj)


def dumps(obj: Any, main: bool = False) -> bytes:
    """Pickle ``obj``; with ``main``, main-script functions and classes inside go by name.

    Example:
      >>> import functools
      >>> loads(dumps(functools.partial(max, 0)))(-5)
      0
    """
    if not main:
        return pickling.dumps(obj)
    buf = io.BytesIO()
    _MainPickler(buf).dump(obj)
    return buf.getvalue()


_unpickled: collections.OrderedDict[bytes, Any] = collections.OrderedDict()


def loads(blob: bytes) -> Any:
    """Unpickle what :func:`dumps` made (pickled functions are cached by their bytes)."""
    obj = _unpickled.get(blob)
    if obj is None:
        obj = cloudpickle.loads(blob)
        _unpickled[blob] = obj
        if len(_unpickled) > _FUNC_CACHE_SIZE:
            _unpickled.popitem(last=False)
    return obj


# The by-value bytes of a function, with the captured values they were made from.
_values: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], bool, bytes]] = (
    weakref.WeakKeyDictionary()
)
_FIXED = (type(None), bool, int, float, complex, str, bytes, types.ModuleType)
_MISSING = object()


_names: weakref.WeakKeyDictionary[types.CodeType, tuple[str, ...]] = weakref.WeakKeyDictionary()


def _code_names(code: types.CodeType) -> tuple[str, ...]:
    """The global names ``code`` and the functions nested in it may read (cached)."""
    names = _names.get(code)
    if names is None:
        found = list(code.co_names)
        for c in code.co_consts:
            if isinstance(c, types.CodeType):
                found += _code_names(c)
        names = _names[code] = tuple(dict.fromkeys(found))
    return names


def _captured(fn: types.FunctionType, out: list[Any], seen: set[int]) -> bool:
    """Append what ``fn``'s pickle is made of to ``out``; False if one may change in place."""
    if id(fn) in seen:
        return True
    seen.add(id(fn))
    if fn.__dict__ or fn.__kwdefaults__:
        return False
    g = fn.__globals__
    values = [g.get(n, _MISSING) for n in _code_names(fn.__code__)]
    values += fn.__defaults__ or ()
    try:
        values += [c.cell_contents for c in fn.__closure__ or ()]
    except ValueError:  # an empty cell
        return False
    out += values
    for v in values:
        if v is _MISSING or isinstance(v, _FIXED):
            continue
        if isinstance(v, type | types.FunctionType | types.BuiltinFunctionType):
            if importable(v) is not None:
                continue
            if isinstance(v, types.FunctionType) and _captured(v, out, seen):
                continue
        return False
    return True


def by_value(obj: Any, main: bool = False) -> bytes:
    """``obj`` pickled, cached for a function whose captured values cannot change.

    Raises:
      TypeError: ``obj`` cannot be pickled; the message names it and says what to do.

    Example:
      >>> loads(by_value(lambda x: x + 1))(1)
      2
    """
    state: list[Any] | None = None
    if type(obj) is types.FunctionType:
        state = []
        if _captured(obj, state, set()):
            hit = _values.get(obj)
            if (
                hit is not None
                and hit[1] == main
                and len(hit[0]) == len(state)
                and all(a is b for a, b in zip(hit[0], state, strict=True))
            ):
                return hit[2]
        else:
            state = None
    try:
        blob = dumps(obj, main)
    except Exception as e:
        raise TypeError(_unsendable(obj, main, e)) from e
    if state is not None:
        _values[obj] = (tuple(state), main, blob)
    return blob


def _unsendable(obj: Any, main: bool, err: Exception) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or repr(obj)
    if "<" in qualname:
        why = "it is a lambda or a nested function, which has no name to import"
    elif module not in _MAIN_NAMES:
        why = f"{module}.{qualname} is not importable by that name"
    elif main:
        why = f"it is not reachable as {qualname} in the main script"
    elif main_identity() is None:
        why = "this process has no main script file (a notebook, a REPL or `python -c`)"
    else:
        why = "the destination does not run the same main script"
    return (
        f"rpc: cannot send {qualname} to another worker: {why}, so it must travel by "
        f"value, and pickling it failed ({type(err).__name__}: {err}). Define it in a "
        "module every worker can import, or run the same main script on every worker "
        "(then its functions and classes go by name)"
    )
