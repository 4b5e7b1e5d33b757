"""What RemoteModule runs on the module's owner: build, call, switch mode, list parameters."""

from __future__ import annotations

from typing import Any

import jax

from tensorplay_jax.autograd import no_grad
from tensorplay_jax.distributed.nn.api._interface import check_implements
from tensorplay_jax.nn import Module
from tensorplay_jax.rpc import RRef, get_worker_info
from tensorplay_jax.runtime.device import present_devices, resolve_device

__all__ = ["call_method", "check_module", "create_module", "parameter_rrefs", "set_training"]


def _jax_device(device: str) -> Any:
    try:
        return resolve_device(device, "RemoteModule")
    except RuntimeError:
        raise RuntimeError(
            f"RemoteModule: worker {get_worker_info().name!r} has no device {device!r} "
            f"(its JAX devices: {present_devices()})"
        ) from None


def _place(module: Module, device: str) -> None:
    if device == "cpu":
        return
    target = _jax_device(device)
    with no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            t.data = jax.device_put(t.value, target)


def create_module(
    module_cls: Any, args: tuple, kwargs: dict[str, Any], device: str, iface: type | None
) -> RRef[Module]:
    """Build ``module_cls(*args, **kwargs)`` here, place it on ``device``, return an RRef to it.

    Raises:
      ValueError: the result is not a ``tensorplay_jax.nn.Module`` (torch's message).
      TypeError: it lacks an interface method.
      RuntimeError: this worker has no such device.
    """
    module = module_cls(*args, **kwargs)
    if not isinstance(module, Module):
        raise ValueError(
            "Expect `module_cls(*args, **kwargs)` returns an instance of <class nn.Module>, but "
            f"it returns an instance of {type(module)}: RemoteModule: module_cls="
            f"{getattr(module_cls, '__qualname__', module_cls)!r} built a "
            f"{type(module).__qualname__}, not a tensorplay_jax.nn.Module; pass a Module "
            "subclass (or a function returning a Module)"
        )
    if iface is not None:
        check_implements(module, iface)
    _place(module, device)
    return RRef(module)


def check_module(module_rref: RRef[Any], iface: type | None) -> bool:
    """Validate the module behind ``module_rref`` (a Module, implementing ``iface``); its mode."""
    module = module_rref.local_value()
    if not isinstance(module, Module):
        raise TypeError(
            f"RemoteModule.init_from_module_rref: module_rref holds a {type(module).__qualname__}, "
            "not a tensorplay_jax.nn.Module"
        )
    if iface is not None:
        check_implements(module, iface)
    return module.training


def call_method(module_rref: RRef[Module], name: str, /, *args: Any, **kwargs: Any) -> Any:
    """``module.name(*args, **kwargs)`` on the owner (``forward`` goes through ``__call__``)."""
    module = module_rref.local_value()
    if name == "forward":
        return module(*args, **kwargs)
    return getattr(module, name)(*args, **kwargs)


def set_training(module_rref: RRef[Module], mode: bool) -> None:
    """``module.train(mode)`` on the owner."""
    module_rref.local_value().train(mode)


def parameter_rrefs(module_rref: RRef[Module], recurse: bool) -> list[RRef[Any]]:
    """An owner RRef per parameter of the module (each parameter once)."""
    return [RRef(p) for p in module_rref.local_value().parameters(recurse=recurse)]
