"""Devices for Tensors: ``Tensor.to``, ``.cpu()``, ``.cuda()`` and the factories' ``device=``.

Device names are tensorplay's (``"cpu"``, ``"cuda:1"``, ``"gpu"``, ``"tpu"``,
or a ``jax.Device``), read by ``runtime.device.resolve_device``: ``"cuda"``
and ``"gpu"`` are JAX's gpu platform, the index counts its local devices. A
move is ``jax.device_put`` and records a node: the gradient goes back to the
device the value came from. A device that is not here raises an error naming
those that are.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import attach_outputs, is_grad_enabled, make_node
from tensorplay_jax.runtime.device import device as device_type
from tensorplay_jax.runtime.device import parse_device, resolve_device, to_device
from tensorplay_jax.tensors import _ops
from tensorplay_jax.tensors._tensor import Tensor

__all__ = ["cpu", "cuda", "place", "to"]


def place(value: jax.Array, device: Any, what: str) -> jax.Array:
    """``value`` on ``device`` (a factory's ``device=``; None: left where JAX put it).

    Example:
        >>> import jax.numpy as jnp
        >>> place(jnp.ones(2), "cpu", "tp.ones").devices() == {jax.devices("cpu")[0]}
        True
    """
    if device is None:
        return value
    return to_device(value, resolve_device(device, what))


def _is_device(arg: Any) -> bool:
    if isinstance(arg, jax.Device | device_type):
        return True
    if not isinstance(arg, str):
        return False
    try:
        parse_device(arg)
    except ValueError:
        return False
    return True


def _move(input: Tensor, device: Any) -> Tensor:
    """``input`` on JAX device ``device``, recorded: its gradient moves back."""
    value = input.value
    if isinstance(value, jax.core.Tracer):  # inside a JAX transformation: JAX differentiates
        return Tensor._wrap(jax.device_put(value, device))
    if value.devices() == {device}:
        return input
    source = value.sharding  # where the gradient goes back to
    out = to_device(value, device)
    if not (input.requires_grad and is_grad_enabled()):
        return Tensor._wrap(out)

    def back(grads: Any) -> tuple[Any]:
        (g,) = grads
        return (None if g is None else jax.device_put(g, source),)

    node = make_node(back, [input], name="ToCopyBackward")
    (moved,) = attach_outputs(node, [out])
    return moved


def to(input: Tensor, *args: Any, **kwargs: Any) -> Tensor:
    """Convert to a device and/or a dtype: ``to(device)``, ``to(dtype)``, ``to(device, dtype)``.

    Also ``to(other)`` (``other``'s device and dtype) and the keywords
    ``device=``, ``dtype=``, ``non_blocking=`` (ignored) and ``copy=`` (a new
    Tensor even when nothing changes). Returns ``input`` itself when it is on
    that device with that dtype already. Gradients flow back through the
    move (to the device the value came from) and through float casts.

    Raises:
        RuntimeError: the device is not present here (the message names those that are).
        ValueError: an unknown device name.
        TypeError: more than two positional arguments, or a bad keyword.

    Example:
        >>> import jax, tensorplay_jax as tp
        >>> x = tp.ones(2, requires_grad=True)
        >>> y = x.to("cpu:1") if len(jax.devices("cpu")) > 1 else x.to("cpu")
        >>> (y * 2).sum().backward()
        >>> x.grad
        tensor([2., 2.])
        >>> x.to(jax.numpy.int32).dtype
        dtype('int32')
    """
    device = kwargs.pop("device", None)
    dtype = kwargs.pop("dtype", None)
    copy = bool(kwargs.pop("copy", False))
    kwargs.pop("non_blocking", None)
    kwargs.pop("memory_format", None)
    if kwargs:
        raise TypeError(f"Tensor.to: unexpected keyword argument(s) {sorted(kwargs)}")
    if len(args) > 2:
        raise TypeError(f"Tensor.to: takes at most a device and a dtype, got {len(args)} arguments")
    for arg in args:
        if isinstance(arg, Tensor):
            device, dtype = arg.device, arg.dtype
        elif _is_device(arg):
            device = arg
        else:
            dtype = arg
    out = input
    if dtype is not None and jnp.dtype(dtype) != input.dtype:
        out = _ops.astype(out, dtype)
    if device is not None:
        out = _move(out, resolve_device(device, "Tensor.to"))
    if copy and out is input:
        out = _ops.clone(input)
    return out


def cpu(input: Tensor) -> Tensor:
    """``input`` on the CPU (``cpu:0``); itself when it is there already.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.ones(2)
        >>> x.cpu().device.platform
        'cpu'
    """
    return to(input, "cpu")


def cuda(input: Tensor, device: Any = None, non_blocking: bool = False) -> Tensor:
    """``input`` on a GPU: ``cuda()`` (``cuda:0``), ``cuda(1)``, ``cuda("cuda:1")``.

    Raises:
        RuntimeError: no such GPU here (the message names the devices present).

    Example:
        >>> import tensorplay_jax as tp
        >>> try:  # a GPU where there is one, else the error naming the devices here
        ...     ok = tp.ones(2).cuda().device.platform == "gpu"
        ... except RuntimeError as e:
        ...     ok = "is not available here; devices: cpu:0" in str(e)
        >>> ok
        True
    """
    if device is None:
        device = "cuda"
    elif isinstance(device, int) and not isinstance(device, bool):
        device = f"cuda:{device}"
    return to(input, device)
