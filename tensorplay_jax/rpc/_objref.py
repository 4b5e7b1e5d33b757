"""Classes and functions on the wire: by reference when the receiver can import them, else by value.

A record is ``[module, qualname]`` when the object resolves to itself by that
name here (the answer is cached per object), else ``[None, cloudpickle bytes]``.
Unpickled objects are cached by their bytes (the last 256), so a function sent by
value on every call is rebuilt once.
"""

from __future__ import annotations

import collections
import importlib
from typing import Any

import cloudpickle

from tensorplay_jax.rpc._registry import DecodeError

_FUNC_CACHE_SIZE = 256


def resolve(module: str, qualname: str) -> Any:
    # import_module, not a sys.modules lookup: a module another thread is still
    # importing is in sys.modules half-initialized; import_module waits for it.
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


_by_ref_ok: dict[Any, bool] = {}


def importable(obj: Any) -> tuple[str, str] | None:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    if module == "__main__" or "<" in qualname:
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


def objref(obj: Any) -> list[Any]:
    ref = importable(obj)
    if ref is not None:
        return [ref[0], ref[1]]
    return [None, cloudpickle.dumps(obj)]


_unpickled: collections.OrderedDict[bytes, Any] = collections.OrderedDict()


def load_objref(rec: list[Any]) -> Any:
    if rec[0] is not None:
        try:
            return resolve(rec[0], rec[1])
        except Exception as e:
            raise DecodeError(
                f"cannot import {rec[0]}.{rec[1]} on this worker ({type(e).__name__}: {e}); "
                "make the module importable here (PYTHONPATH) or define it where it is used"
            ) from None
    blob = bytes(rec[1])
    obj = _unpickled.get(blob)
    if obj is None:
        obj = cloudpickle.loads(blob)
        _unpickled[blob] = obj
        if len(_unpickled) > _FUNC_CACHE_SIZE:
            _unpickled.popitem(last=False)
    return obj
