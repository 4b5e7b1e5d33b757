"""Per-call metadata and the hooks other packages (distributed autograd) use to observe RPC traffic.

Every request (``rpc_sync``/``rpc_async``, ``remote``, ``RRef.to_here``, the
RRef proxies) carries a small metadata dict of msgpack-able values, and every
reply carries one back.

Caller side: ``with call_metadata(key=value): ...`` adds items to every call
made in the block (it is a contextvar, so threads and asyncio tasks keep their
own); a registered :class:`RpcHooks` may also add items in
``on_send_request`` by mutating ``info.metadata``.

Callee side: while the function runs (and while ``on_send_response`` hooks
run), :func:`current_call_metadata` returns the request's metadata, and
:func:`current_caller` the calling worker.

Hooks see arguments and results at four points, in this order for one call::

    caller: on_send_request(info, args, kwargs) -> (args, kwargs)   before encoding
    callee: on_receive_request(info, args, kwargs) -> (args, kwargs) after decoding
    callee: on_send_response(info, result, response_metadata) -> result
    caller: on_receive_response(info, result, response_metadata) -> result

``info`` is a :class:`CallInfo`: the peer's WorkerInfo, the message kind
("call", "remote", "fetch"), the function's qualified name, the message id
(unique per caller; ``(caller id, message id)`` is unique in the job), the
request metadata and the function itself. An exception raised by a hook fails
that call.

A package's own RPC targets (gradient and release messages of distributed
autograd) carry the :func:`internal_target` mark, so its hooks can tell them
from user calls by the function object (:func:`is_internal_target`), not by
name.

The RPC layer imports no package that plugs into it: a package registers its
hooks when it is imported, and ``tensorplay_jax/__init__.py`` imports the ones
that every worker needs (distributed autograd), so they are in place before
the first RPC. Other packages use this module through
``tensorplay_jax.rpc.internal``.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

__all__ = [
    "CallInfo",
    "RpcHooks",
    "call_metadata",
    "current_call_metadata",
    "current_caller",
    "internal_target",
    "is_internal_target",
    "register_hooks",
]

F = TypeVar("F", bound=Callable[..., Any])

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_outgoing: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "tpj_rpc_outgoing_metadata", default=_EMPTY
)
_incoming: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "tpj_rpc_incoming_metadata", default=_EMPTY
)
_caller: contextvars.ContextVar[Any] = contextvars.ContextVar("tpj_rpc_caller", default=None)


class CallInfo(NamedTuple):
    """What a hook learns about one call."""

    peer: Any  # WorkerInfo of the other side
    kind: str  # "call", "remote" or "fetch"
    func_name: str
    message_id: int
    metadata: dict[str, Any]
    func: Any = None  # the function called (None for "fetch", and before it is decoded)


class RpcHooks:
    """Base class for RPC observers; override the methods you need (each defaults to a no-op)."""

    def on_send_request(self, info: CallInfo, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, kwargs

    def on_receive_request(self, info: CallInfo, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        return args, kwargs

    def on_send_response(self, info: CallInfo, result: Any, response_metadata: dict) -> Any:
        return result

    def on_receive_response(self, info: CallInfo, result: Any, response_metadata: dict) -> Any:
        return result


_hooks: tuple[RpcHooks, ...] = ()
_hooks_lock = threading.Lock()


def register_hooks(hooks: RpcHooks) -> Callable[[], None]:
    """Install ``hooks`` on this process; returns a function that removes them.

    Example:
      >>> class Count(RpcHooks):
      ...     n = 0
      ...     def on_send_request(self, info, args, kwargs):
      ...         Count.n += 1
      ...         return args, kwargs
      >>> remove = register_hooks(Count())
      >>> remove()
    """
    global _hooks
    with _hooks_lock:
        _hooks = (*_hooks, hooks)

    def remove() -> None:
        global _hooks
        with _hooks_lock:
            _hooks = tuple(h for h in _hooks if h is not hooks)

    return remove


def active_hooks() -> tuple[RpcHooks, ...]:
    return _hooks


_INTERNAL_MARK = "_tpj_internal_target"


def internal_target(fn: F) -> F:
    """Mark ``fn`` as an RPC target of a package's own machinery (not a user call).

    Hooks see the mark through :func:`is_internal_target` on ``info.func``; a
    rename of ``fn`` keeps it, and so does a ``functools.wraps`` wrapper such
    as ``async_execution`` (on either side of it).

    Example:
      >>> @internal_target
      ... def _drop(ids):
      ...     return None
      >>> is_internal_target(_drop), is_internal_target(print)
      (True, False)
    """
    setattr(fn, _INTERNAL_MARK, True)
    return fn


def is_internal_target(fn: Any) -> bool:
    """Whether ``fn`` carries the :func:`internal_target` mark (False for None).

    Example:
      >>> is_internal_target(None), is_internal_target(internal_target(lambda: 0))
      (False, True)
    """
    return getattr(fn, _INTERNAL_MARK, False) is True


@contextlib.contextmanager
def call_metadata(**items: Any) -> Iterator[None]:
    """Attach ``items`` to the metadata of every RPC made inside the block (nests; inner wins).

    Example:
      >>> with call_metadata(autograd_context_id=7):
      ...     pass  # rpc_sync(...) here carries {"autograd_context_id": 7}
    """
    token = _outgoing.set(MappingProxyType({**_outgoing.get(), **items}))
    try:
        yield
    finally:
        _outgoing.reset(token)


def outgoing_metadata() -> dict[str, Any]:
    return dict(_outgoing.get())


def current_call_metadata() -> Mapping[str, Any]:
    """The metadata of the RPC being served by this thread; empty outside an RPC."""
    return _incoming.get()


def current_caller() -> Any:
    """The WorkerInfo of the worker whose RPC this thread is serving, or None."""
    return _caller.get()


class serving:  # lowercase: used like a function, ``with serving(meta, caller):``
    """While serving a call: its metadata and caller for :func:`current_call_metadata` and
    :func:`current_caller` (a plain class: this runs twice per served call)."""

    __slots__ = ("_caller", "_metadata", "_tokens")

    def __init__(self, metadata: Mapping[str, Any], caller: Any) -> None:
        self._metadata, self._caller = metadata, caller

    def __enter__(self) -> None:
        self._tokens = (
            _incoming.set(MappingProxyType(dict(self._metadata))),
            _caller.set(self._caller),
        )

    def __exit__(self, *exc: object) -> None:
        t1, t2 = self._tokens
        _caller.reset(t2)
        _incoming.reset(t1)
