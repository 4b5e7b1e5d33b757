"""RRef proxies (``rref.rpc_sync().m(...)``, ``.rpc_async()``, ``.remote()``) and type queries.

A proxy call runs ``value.m(...)`` on the RRef's owner (:func:`_invoke_on_rref`)
through ``rpc_sync``, ``rpc_async`` or ``remote``, and honours
``@rpc.functions.async_execution`` on ``m`` (a bound, static or class method):
the Future it returns is waited on the owner and its result is the reply.
``rref.remote().m`` first checks, once per RRef and name, that the value has an
attribute ``m``, so that a missing one raises ``AttributeError`` at the call
(as tensorplay's proxy does), not on a later use of the new RRef.

:func:`value_type` answers ``rref._get_type()``: the value's type, asked of the owner
once (it waits there for a pending creation) and kept.

Both send through ``_sending``, as ``rpc_sync``, ``rpc_async`` and ``remote``
do (a proxy's ``remote()`` makes its RRef with ``RRef._remote``), so this
module imports neither ``api`` nor ``_rref``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tensorplay_jax.rpc import _sending
from tensorplay_jax.rpc._call_hooks import internal_target
from tensorplay_jax.rpc._futures import Future

if TYPE_CHECKING:
    from tensorplay_jax.rpc._rref import RRef

__all__ = ["Proxy", "value_type"]


def _invoke_on_rref(rref: RRef[Any], method: str, args: tuple, kwargs: dict) -> Any:
    """A proxy's call on the owner: ``value.method(*args, **kwargs)``.

    Marked ``async_execution``, so it always returns a Future: a method marked so
    returns one, which the owner waits for (its result is the reply); any other
    method's return value (a Future included) is the result itself, handed over
    in a completed Future.
    """
    fn = getattr(rref.local_value(), method)
    out = fn(*args, **kwargs)
    if getattr(fn, "_tpj_async_execution", False):
        return out
    done: Future[Any] = Future()
    done.set_result(out)
    return done


_invoke_on_rref._tpj_async_execution = True  # type: ignore[attr-defined]


@internal_target
def _has_attribute(rref: RRef[Any], method: str) -> bool:
    """On the owner: True, or the AttributeError ``getattr(value, method)`` raises."""
    getattr(rref.local_value(), method)
    return True


@internal_target
def _type_on_owner(rref: RRef[Any]) -> type:
    """On the owner: the type of the value (waiting for its creation; its error if it failed)."""
    return type(rref.local_value())


def value_type(rref: RRef[Any], timeout: float, blocking: bool) -> Any:
    """``rref._get_type(timeout, blocking)``: the value's type, or a Future of it."""
    known = rref._type
    if known is None and rref.is_owner():
        known = rref._type = type(rref.local_value())
    if known is not None:
        if blocking:
            return known
        done: Future[Any] = Future()
        done.set_result(known)
        return done
    typed: Future[Any] = Future()
    try:
        fut = _sending.call(rref.owner(), _type_on_owner, (rref,), None, timeout, "rpc_async")
    except Exception as e:  # e.g. the RRef's creation failed before the call: still a Future
        typed.set_exception(e)
        return typed.wait() if blocking else typed

    def keep(f: Future[Any]) -> None:
        exc = f.exception()
        if exc is not None:
            typed.set_exception(exc)  # the creation's error (or the timeout) as it is
            return
        rref._type = f.value()
        typed.set_result(rref._type)

    fut.add_done_callback(keep)
    return typed.wait() if blocking else typed


class Proxy:
    """What ``rref.rpc_sync()`` / ``rpc_async()`` / ``remote()`` return: ``.m(...)`` calls ``m``."""

    __slots__ = ("_mode", "_rref", "_timeout")

    def __init__(self, rref: RRef[Any], mode: str, timeout: float) -> None:
        self._rref, self._mode, self._timeout = rref, mode, timeout

    def _mode_name(self) -> str:
        return {"sync": "rpc_sync", "async": "rpc_async", "remote": "remote"}[self._mode]

    def __getattr__(self, method: str) -> Any:
        rref, timeout, mode = self._rref, self._timeout, self._mode
        what = self._mode_name()

        def invoke(*args: Any, **kwargs: Any) -> Any:
            rref._check_created(f"rref.{self._mode_name()}().{method}")
            if self._mode == "remote" and method not in (rref._methods or ()):
                # As tensorplay's proxy: no such attribute raises here, not on a later use.
                if rref._record is not None:
                    _has_attribute(rref, method)
                else:
                    owner, attr_args = rref.owner(), (rref, method)
                    _sending.call(
                        owner, _has_attribute, attr_args, None, timeout, "rpc_sync"
                    ).wait()
                rref._methods = (rref._methods or set()) | {method}
            call_args = (rref, method, args, kwargs)
            if mode == "remote":
                agent, dest = _sending.destination(rref.owner(), _invoke_on_rref, what)
                return rref._remote(agent, dest, _invoke_on_rref, call_args, None, timeout)
            fut = _sending.call(rref.owner(), _invoke_on_rref, call_args, None, timeout, what)
            return fut.wait() if mode == "sync" else fut

        return invoke
