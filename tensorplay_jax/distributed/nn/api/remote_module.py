"""``RemoteModule``: a handle on a ``tensorplay_jax.nn.Module`` built and run on another worker."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tensorplay_jax.distributed.nn.api import _owner
from tensorplay_jax.distributed.nn.api._device import parse_remote_device
from tensorplay_jax.distributed.nn.api._interface import interface_methods
from tensorplay_jax.nn import Module
from tensorplay_jax.rpc import Future, RRef, WorkerInfo, get_worker_info, rpc_async, rpc_sync

__all__ = ["RemoteModule"]

# Module methods that would read or change local state, which a handle does not have.
_UNSUPPORTED: tuple[str, ...] = (
    "to",
    "cuda",
    "cpu",
    "float",
    "double",
    "half",
    "bfloat16",
    "type",
    "register_buffer",
    "register_parameter",
    "add_module",
    "register_module",
    "apply",
    "state_dict",
    "load_state_dict",
    "named_parameters",
    "buffers",
    "named_buffers",
    "children",
    "named_children",
    "modules",
    "named_modules",
    "zero_grad",
    "requires_grad_",
    "share_memory",
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_backward_hook",
    "register_full_backward_hook",
    "register_full_backward_pre_hook",
    "register_state_dict_pre_hook",
    "register_load_state_dict_post_hook",
    "extra_repr",
)


def _resolve_interface(module_interface_cls: Any, legacy: Any) -> tuple[Any, tuple[str, ...]]:
    if module_interface_cls is not None and legacy is not None:
        raise TypeError(
            "RemoteModule: pass module_interface_cls or _module_interface_cls, not both"
        )
    iface = module_interface_cls if module_interface_cls is not None else legacy
    if iface is None:
        return None, ("forward",)
    return iface, interface_methods(iface)


# A dataclass so that the RPC codec carries a handle by its fields (on, device,
# module_rref, generated_methods, training) and imports this module on demand on
# the receiving worker: a RemoteModule passed to a third worker works there.
@dataclasses.dataclass(init=False, repr=False, eq=False)
class RemoteModule(Module):
    """A module built on a remote worker; ``forward`` and declared methods run there over RPC.

    Inside a ``tensorplay_jax.distributed.autograd.context()`` the calls are
    differentiable: ``dist_autograd.backward`` reaches the module's parameters
    on the owner, whose gradients land in the owner's part of the context (train
    them with ``DistributedOptimizer(tx, rm.remote_parameters())``). The handle
    holds no parameters: methods that would read or change local module state
    raise ``ValueError``.

    Args:
      remote_device: ``"worker/device"`` or ``"rank:N/device"``; the device is
        optional (``"cpu"``), e.g. ``"worker1/cpu"``, ``"rank:1"``, ``"ps/cuda:0"``.
      module_cls: a ``tensorplay_jax.nn.Module`` subclass (or a function
        returning a Module), importable on the owner or picklable by value.
      args: positional arguments for ``module_cls``.
      kwargs: keyword arguments for ``module_cls``.
      module_interface_cls: a class marked with ``@interface``: its methods are
        checked on the built module and exposed on the handle as ``name(...)``
        and ``name_async(...)``. Without one, the handle exposes ``forward``.
      _module_interface_cls: the same, under the name tensorplay's code uses.

    Attributes:
      on: the ``WorkerInfo`` of the worker ``remote_device`` names (the owner,
        unless a handle from :meth:`init_from_module_rref` names another).
      device: the device on the owner (``"cpu"``, ``"cuda:0"``, ...).
      module_rref: the RRef of the module on the owner.
      generated_methods: the method names callable on the handle.

    Raises:
      TypeError: ``module_cls`` is not callable or misses an interface method.
      ValueError: a malformed ``remote_device``, an unknown worker, or
        ``module_cls`` does not build a Module (torch's message).
      RpcNotInitializedError: RPC is not initialized.

    Example (one worker that owns the module itself; in a real job the owner
    is another worker)::

      >>> import tensorplay_jax as tp
      >>> from tensorplay_jax.distributed import rpc
      >>> rpc.init_rpc("worker1", rank=0, world_size=1)
      >>> remote_linear = RemoteModule("worker1/cpu", tp.nn.Linear, args=(16, 8))
      >>> out = remote_linear(tp.randn(4, 16))             # runs on worker1
      >>> out.shape
      (4, 8)
      >>> param_rrefs = remote_linear.remote_parameters()  # RRefs, not arrays
      >>> [r.to_here().shape for r in param_rrefs]
      [(8, 16), (8,)]
      >>> remote_linear.get_module_rref().owner_name()
      'worker1'
      >>> rpc.shutdown()
    """

    on: WorkerInfo
    device: str
    module_rref: RRef[Any]
    generated_methods: tuple[str, ...]
    training: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> RemoteModule:
        # The codec rebuilds a handle with cls.__new__ and its fields, bypassing __init__;
        # give every instance the (empty) Module state so Module methods behave on it too.
        self = super().__new__(cls)
        Module.__init__(self)
        return self

    def __init__(
        self,
        remote_device: str,
        module_cls: Callable[..., Module],
        args: tuple | list | None = None,
        kwargs: dict[str, Any] | None = None,
        *,
        module_interface_cls: type | None = None,
        _module_interface_cls: type | None = None,
    ) -> None:
        super().__init__()
        spec = parse_remote_device(remote_device)
        if not callable(module_cls):
            raise TypeError(
                f"RemoteModule: module_cls={module_cls!r} is not callable; pass a "
                "tensorplay_jax.nn.Module subclass such as tp.nn.Linear"
            )
        if kwargs is not None and not isinstance(kwargs, dict):
            raise TypeError(f"RemoteModule: kwargs must be a dict or None, got {kwargs!r}")
        iface, methods = _resolve_interface(module_interface_cls, _module_interface_cls)
        on = get_worker_info(spec.destination)  # type: ignore[arg-type]
        rref = rpc_sync(
            on,
            _owner.create_module,
            args=(module_cls, tuple(args or ()), dict(kwargs or {}), spec.device, iface),
        )
        self._set_handle(on, spec.device, rref, methods, training=True)

    def _set_handle(
        self, on: WorkerInfo, device: str, rref: RRef[Any], methods: tuple[str, ...], training: bool
    ) -> None:
        for k, v in (
            ("on", on),
            ("device", device),
            ("module_rref", rref),
            ("generated_methods", methods),
            ("training", training),
        ):
            object.__setattr__(self, k, v)

    @classmethod
    def init_from_module_rref(
        cls,
        remote_device: str,
        module_rref: RRef[Any],
        _module_interface_cls: type | None = None,
        *,
        module_interface_cls: type | None = None,
    ) -> RemoteModule:
        """A second handle on an existing remote module (e.g. from ``get_module_rref()``).

        As in torch, ``remote_device`` becomes the handle's ``on`` and ``device`` and
        need not name ``module_rref``'s owner; the handle's calls run where the module
        is, on that owner.

        Args:
          remote_device: a worker and a device, as for the constructor.
          module_rref: an RRef to a ``tensorplay_jax.nn.Module``.
          _module_interface_cls / module_interface_cls: as for the constructor.

        Raises:
          ValueError: a malformed ``remote_device`` or an unknown worker.
          TypeError: ``module_rref`` is not an RRef of a Module (or misses an interface method).

        Example::

            twin = RemoteModule.init_from_module_rref("worker1/cpu", rm.get_module_rref())
            twin(x)  # the same module, the same parameters
        """
        spec = parse_remote_device(remote_device)
        if not isinstance(module_rref, RRef):
            raise TypeError(
                f"RemoteModule.init_from_module_rref: module_rref must be an RRef, got "
                f"{type(module_rref).__qualname__}"
            )
        iface, methods = _resolve_interface(module_interface_cls, _module_interface_cls)
        on = get_worker_info(spec.destination)  # type: ignore[arg-type]
        training = rpc_sync(module_rref.owner(), _owner.check_module, args=(module_rref, iface))
        self = cls.__new__(cls)
        self._set_handle(on, spec.device, module_rref, methods, training)
        return self

    # ---------------------------------------------------------------- calling
    def _where(self) -> WorkerInfo:
        """Where the module is, which runs every call: ``module_rref``'s owner."""
        return self.module_rref.owner()

    def __reduce__(self) -> Any:
        raise RuntimeError(
            "Cannot pickle RemoteModule in python pickler. RemoteModule can only be pickled "
            "when using RPC: pass it as an RPC argument or result (tp.save and pickle cannot "
            "carry it)"
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the module's forward on the owner and return its output (blocking)."""
        return rpc_sync(
            self._where(),
            _owner.call_method,
            args=(self.module_rref, "forward", *args),
            kwargs=kwargs,
        )

    def forward_async(self, *args: Any, **kwargs: Any) -> Future[Any]:
        """Like :meth:`forward`, returning a Future of the output."""
        return rpc_async(
            self._where(),
            _owner.call_method,
            args=(self.module_rref, "forward", *args),
            kwargs=kwargs,
        )

    def __getattr__(self, name: str) -> Any:
        methods = self.__dict__.get("generated_methods", ())
        base, is_async = (
            (name[: -len("_async")], True) if name.endswith("_async") else (name, False)
        )
        if base in methods:
            call = rpc_async if is_async else rpc_sync
            on, rref = self._where(), self.module_rref

            def method(*args: Any, **kwargs: Any) -> Any:
                return call(on, _owner.call_method, args=(rref, base, *args), kwargs=kwargs)

            method.__name__ = name
            return method
        raise AttributeError(
            f"'RemoteModule' object has no attribute {name!r} (remote methods: "
            f"{', '.join(m + suffix for m in methods for suffix in ('', '_async'))}; declare "
            "more with module_interface_cls=@interface class)"
        )

    # ---------------------------------------------------------------- module state
    def remote_parameters(self, recurse: bool = True) -> list[RRef[Any]]:
        """RRefs of the remote module's parameters (for ``DistributedOptimizer``).

        Args:
          recurse: include the parameters of submodules.
        """
        return rpc_sync(self._where(), _owner.parameter_rrefs, args=(self.module_rref, recurse))

    def get_module_rref(self) -> RRef[Any]:
        """The RRef of the module on the owner."""
        return self.module_rref

    def train(self, mode: bool = True) -> RemoteModule:
        """Set the remote module's training mode (and this handle's ``training``)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        rpc_sync(self._where(), _owner.set_training, args=(self.module_rref, mode))
        object.__setattr__(self, "training", mode)
        return self

    def eval(self) -> RemoteModule:
        """``train(False)`` on the remote module."""
        return self.train(False)

    def parameters(self, recurse: bool = True) -> Any:
        """Not supported: raises ValueError (use :meth:`remote_parameters`)."""
        raise ValueError(
            "Method ``parameters`` not supported for RemoteModule. "
            "Please use ``remote_parameters`` instead."
        )

    def __repr__(self) -> str:
        return f"RemoteModule(on={self.on.name!r}, device={self.device!r})"


def _unsupported(name: str) -> Callable[..., Any]:
    def method(self: RemoteModule, *args: Any, **kwargs: Any) -> Any:
        raise ValueError(f"Method ``{name}`` not supported for RemoteModule")

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Not supported on a RemoteModule: raises ValueError (``{name}``)."
    return method


for _name in _UNSUPPORTED:
    setattr(RemoteModule, _name, _unsupported(_name))
del _name
