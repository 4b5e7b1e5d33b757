"""RPC targets of ``test_rref_semantics.py`` (importable, so they travel by reference)."""

from __future__ import annotations

import time
from typing import Any

from tensorplay_jax.distributed import rpc


class Box:
    """A value with a method and state, to be owned through an RRef."""

    def __init__(self, v: Any) -> None:
        self.v = v

    def get(self) -> Any:
        return self.v


SHARED = Box(7)  # a module-level object: its identity says whether a value was copied


def shared() -> Box:
    """``SHARED`` itself (on the worker that runs it)."""
    return SHARED


def slow_box(seconds: float) -> Box:
    """A Box, made after ``seconds`` (a slow creation on the owner)."""
    time.sleep(seconds)
    return Box(seconds)


def add(x: Any, y: Any) -> Any:
    return x + y


def fail(msg: str) -> None:
    raise ValueError(msg)


def add_rref_to_value(rref: rpc.RRef, v: Any) -> Any:
    """The RRef's value (fetched here) plus ``v``."""
    return rref.to_here().v + v


def confirmed(rref: rpc.RRef) -> bool:
    return rref.confirmed_by_owner()


def own(v: Any) -> rpc.RRef:
    """An RRef this worker owns, returned to the caller."""
    return rpc.RRef(Box(v))


@rpc.functions.async_execution
def async_add_with_future_ctor(to: str, x: Any, y: Any, z: Any) -> rpc.Future:
    """``x + y`` on ``to``, then ``+ z``, through a Future made here (tensorplay's test's)."""
    out: rpc.Future = rpc.Future()
    rpc.rpc_async(to, add, args=(x, y)).then(lambda f: out.set_result(f.wait() + z))
    return out


class AsyncExecutionClass:
    """``async_execution`` on a static, a class and a bound method (tensorplay's test's)."""

    @staticmethod
    @rpc.functions.async_execution
    def static_async_add(to: str, x: Any, y: Any, z: Any) -> rpc.Future:
        return rpc.rpc_async(to, add, args=(x, y)).then(lambda f: f.wait() + z)

    @classmethod
    @rpc.functions.async_execution
    def class_async_add(cls, to: str, x: Any, y: Any, z: Any) -> rpc.Future:
        out: rpc.Future = rpc.Future()
        rpc.rpc_async(to, add, args=(x, y)).then(lambda f: out.set_result(f.wait() + z))
        return out

    @rpc.functions.async_execution
    def bound_async_add(self, to: str, x: Any, y: Any, z: Any) -> rpc.Future:
        return rpc.rpc_async(to, add, args=(x, y)).then(lambda f: f.wait() + z)

    def plain_future(self) -> rpc.Future:
        """A Future returned by a method *not* marked ``async_execution``."""
        f: rpc.Future = rpc.Future()
        f.set_result(1)
        return f
