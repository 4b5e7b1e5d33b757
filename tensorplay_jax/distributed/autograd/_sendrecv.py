"""Recording RPCs inside a context: send edges and recv nodes, keyed by (context id, message).

An :class:`~tensorplay_jax.rpc.RpcHooks` subclass watches every RPC of this
worker. Inside a context (``_context.current_id()``: this thread's
``with context()``, or the context of the RPC this thread is serving) it

* adds the context id to the request metadata, so the callee records under
  the same id, and notes the peer in the context (for release);
* on the side that sends grad-requiring Tensors (request arguments, or a
  reply/``to_here`` result), stores their gradient edges under the message
  key: gradients for that message continue from there;
* on the side that receives them, makes one recv node per message whose
  outputs replace the received leaves; its backward sends the cotangents
  (zeros where none arrived, as tensorplay does) back to the sender.

Calls to targets marked ``internal_target`` (this package's gradient and
release messages) carry no context and record nothing; only queued releases
ride on them.

A message key is one int: ``(caller rank << 41) | (message id << 1) | dir``,
``dir`` 0 for the request's arguments and 1 for its result; ``(caller rank,
message id)`` is unique in the job, so the key is too.

Tensors are found in lists, tuples (namedtuples included), dict values and
dataclass fields, in the order the wire format encodes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import attach_outputs, make_node, sparse_arrays
from tensorplay_jax.distributed.autograd import _context, _engine
from tensorplay_jax.rpc import get_worker_info
from tensorplay_jax.rpc.internal import CallInfo, RpcHooks, is_internal_target
from tensorplay_jax.runtime import ids
from tensorplay_jax.runtime.shards import is_sharded
from tensorplay_jax.tensors import Tensor

__all__ = ["AutogradHooks", "message_key"]

_REQUEST, _REPLY = 0, 1


def message_key(caller: int, message_id: int, direction: int) -> int:
    """The context-wide key of the Tensors of one message (see the module docstring)."""
    return ids.message_key(caller, message_id, direction)


# --------------------------------------------------------------------- finding Tensors
def _collect(obj: Any, out: list[Tensor]) -> None:
    t = type(obj)
    if isinstance(obj, Tensor):
        if obj._requires_grad:
            out.append(obj)
    elif t is list or t is tuple or (isinstance(obj, tuple) and hasattr(t, "_fields")):
        for x in obj:
            _collect(x, out)
    elif t is dict:
        for x in obj.values():
            _collect(x, out)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            _collect(getattr(obj, f.name), out)


def _replace(obj: Any, new: Iterator[Tensor]) -> Any:
    t = type(obj)
    if isinstance(obj, Tensor):
        return next(new) if obj._requires_grad else obj
    if t is list:
        return [_replace(x, new) for x in obj]
    if t is tuple:
        return tuple(_replace(x, new) for x in obj)
    if isinstance(obj, tuple) and hasattr(t, "_fields"):
        return t(*(_replace(x, new) for x in obj))
    if t is dict:
        return {k: _replace(v, new) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            object.__setattr__(obj, f.name, _replace(getattr(obj, f.name), new))
    return obj


def _grad_tensors(obj: Any) -> list[Tensor]:
    out: list[Tensor] = []
    _collect(obj, out)
    return out


# --------------------------------------------------------------------- send / recv
def _record_send(ctx: _context.DistAutogradContext, key: int, tensors: list[Tensor]) -> None:
    ctx.add_send(key, [_placing_edge(t) for t in tensors])


def _placing_edge(t: Tensor) -> Any:
    """``t``'s gradient edge; for a value committed to a device, through a node that puts
    the gradient (which arrives as host data) back on that device first."""
    value = t._value
    if not (isinstance(value, jax.Array) and value.committed):
        return t._gradient_edge()
    sharding = value.sharding

    def back(grads: tuple[Any, ...]) -> tuple[Any]:
        (g,) = grads
        return (None if g is None else jax.device_put(g, sharding),)

    node = make_node(back, [t], name="RpcDeviceBackward")
    if is_sharded(value):
        _engine.placing[node] = sharding  # a sharded gradient arrives as shards: put them here
    (placed,) = attach_outputs(node, [value])
    return placed._gradient_edge()


def _recv_node(
    ctx: _context.DistAutogradContext, key: int, sender: int, tensors: list[Tensor]
) -> list[Tensor]:
    """Replace received leaves by outputs of one recv node whose backward answers ``sender``."""
    meta = [(t._value.shape, t._value.dtype, t.is_sparse, _sharding(t._value)) for t in tensors]

    def recv_backward(grads: tuple[jax.Array | None, ...]) -> tuple[()]:
        filled = [
            _like(g if g is not None else _zeros(shape, dtype, sparse), sharding)
            for g, (shape, dtype, sparse, sharding) in zip(grads, meta, strict=True)
        ]
        _engine.send_from_recv(sender, key, filled)
        return ()

    node = make_node(recv_backward, (), num_outputs=len(tensors), name="RecvRpcBackward")
    ctx.add_recv(key, node)
    return list(attach_outputs(node, [t._value for t in tensors]))


def _sharding(value: Any) -> Any:
    """The sharding of a sharded received value (None for any other)."""
    return value.sharding if isinstance(value, jax.Array) and is_sharded(value) else None


def _like(g: Any, sharding: Any) -> Any:
    """Gradient ``g`` sharded as the value it is for arrived (its shards then match the
    sender's, which puts them on its own devices: ``HostShards``); resharded on device."""
    if sharding is None or not isinstance(g, jax.Array) or g.sharding == sharding:
        return g
    return jax.device_put(g, sharding)


def _zeros(shape: tuple[int, ...], dtype: Any, sparse: bool) -> Any:
    """The gradient sent for a Tensor none reached: zeros, stored as nothing for a sparse one."""
    if not sparse:
        return _engine.filled_array(0, shape, dtype)
    empty = (jnp.zeros((0,), dtype), jnp.zeros((0, len(shape)), jnp.int32))  # nothing stored
    return sparse_arrays.bcoo_class()(empty, shape=tuple(shape))


def _attach(ctx: _context.DistAutogradContext, key: int, sender: int, value: Any) -> Any:
    tensors = _grad_tensors(value)
    if not tensors:
        return value
    return _replace(value, iter(_recv_node(ctx, key, sender, tensors)))


class AutogradHooks(RpcHooks):
    """The RPC hooks of distributed autograd (installed once per process on import)."""

    def on_send_request(self, info: CallInfo, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if info.kind != "fetch":
            _context.release_pending(info.peer.id, info.metadata)
        cid = _context.current_id()
        if cid is None or is_internal_target(info.func):
            return args, kwargs
        _context.carry(info.metadata, cid)
        ctx = _context.lookup(cid, create=True)
        ctx.add_known(info.peer.id)
        if info.kind != "fetch":
            tensors = _grad_tensors((args, kwargs))
            if tensors:
                key = message_key(get_worker_info().id, info.message_id, _REQUEST)
                _record_send(ctx, key, tensors)
        return args, kwargs

    def on_receive_request(self, info: CallInfo, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        _context.release_carried(info.metadata, sender=info.peer.id)
        cid = _context.carried_id(info.metadata)
        if cid is None:
            return args, kwargs
        ctx = _context.lookup(cid, create=True)
        ctx.add_known(info.peer.id)
        key = message_key(info.peer.id, info.message_id, _REQUEST)
        return _attach(ctx, key, info.peer.id, (args, kwargs))

    def on_send_response(self, info: CallInfo, result: Any, response_metadata: dict) -> Any:
        cid = _context.carried_id(info.metadata)
        if cid is None or info.kind == "remote":
            return result
        ctx = _context.lookup(cid, create=True)  # a to_here() reaches the owner here first
        ctx.add_known(info.peer.id)
        tensors = _grad_tensors(result)
        if tensors:
            _record_send(ctx, message_key(info.peer.id, info.message_id, _REPLY), tensors)
        return result

    def on_receive_response(self, info: CallInfo, result: Any, response_metadata: dict) -> Any:
        cid = _context.carried_id(info.metadata)
        if cid is None or info.kind == "remote":
            return result
        ctx = _context.lookup(cid)
        if ctx is None:  # released while the call was in flight
            return result
        key = message_key(get_worker_info().id, info.message_id, _REPLY)
        return _attach(ctx, key, info.peer.id, result)
