"""``Module``: parameters, buffers and submodules registered by attribute, as in tensorplay.

Parameters are ``Parameter`` Tensors (grad-requiring leaves); buffers are
plain Tensors; submodules are Modules. ``state_dict`` / ``load_state_dict`` /
``named_parameters`` use dotted names (``"0.weight"``). ``functional_call``
overlays values on a module per thread (``_overlay``) without touching it.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import jax.numpy as jnp

from tensorplay_jax.autograd import RemovableHandle, no_grad
from tensorplay_jax.nn._parameter import Parameter
from tensorplay_jax.runtime.device import device as device_type
from tensorplay_jax.runtime.device import resolve_device, to_device
from tensorplay_jax.runtime.x64 import check_dtype
from tensorplay_jax.tensors import Tensor

_overlay = threading.local()
_hook_ids = itertools.count()


_MISSING = object()


def _overlay_get(module: Module, name: str) -> Any:
    stack = getattr(_overlay, "stack", None)
    if stack:
        return stack[-1].get((id(module), name), _MISSING)
    return _MISSING


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict`` could not match."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """Base class of every layer: assign parameters/submodules in ``__init__``, write ``forward``.

    Example:
        >>> import tensorplay_jax as tp
        >>> class Net(tp.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.fc = tp.nn.Linear(3, 2)
        ...     def forward(self, x):
        ...         return self.fc(x).relu()
        >>> net = Net()
        >>> [name for name, _ in net.named_parameters()]
        ['fc.weight', 'fc.bias']
        >>> net(tp.ones(4, 3)).shape
        (4, 2)
    """

    training: bool

    def __init__(self) -> None:
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())

    # ----------------------------------------------------------------- attribute registration
    def __setattr__(self, name: str, value: Any) -> None:
        params = self.__dict__.get("_parameters")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove_from(name, self.__dict__, self._buffers, self._modules)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                    "(tp.nn.Parameter or None expected)"
                )
            params[name] = None
        elif isinstance(value, Module):
            if params is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove_from(name, self.__dict__, params, self._buffers)
            self._modules[name] = value
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' "
                    "(tp.nn.Module or None expected)"
                )
            self._modules[name] = None
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                    "(Tensor or None expected)"
                )
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    @staticmethod
    def _remove_from(name: str, *dicts: Any) -> None:
        for d in dicts:
            if name in d:
                del d[name]

    def __getattr__(self, name: str) -> Any:
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            table = d.get(store)
            if table is not None and name in table:
                if store != "_modules":
                    over = _overlay_get(self, name)
                    if over is not _MISSING:
                        return over
                return table[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._buffers, self._modules):
            if name in store:
                del store[name]
                self._non_persistent_buffers.discard(name)
                return
        object.__delattr__(self, name)

    def _check_name(self, kind: str, name: str) -> None:
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f'{kind} name must be a non-empty string without ".", got {name!r}')
        if name in self.__dict__ and not any(
            name in s for s in (self._parameters, self._buffers, self._modules)
        ):
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Add a parameter (or a ``None`` placeholder) under ``name``."""
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        self._check_name("parameter", name)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(
                f"cannot assign '{type(param).__name__}' object to parameter '{name}' "
                "(tp.nn.Parameter or None required)"
            )
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Any, persistent: bool = True) -> None:
        """Add a non-parameter Tensor (saved in ``state_dict`` when ``persistent``)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        self._check_name("buffer", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            tensor = Tensor(tensor)
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers.discard(name)
        else:
            self._non_persistent_buffers.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        """Add a child module under ``name``."""
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._check_name("module", name)
        self._modules[name] = module

    register_module = add_module

    # ----------------------------------------------------------------- traversal
    def named_modules(self, prefix: str = "", memo: set[int] | None = None) -> Iterator[Any]:
        """``(dotted_name, module)`` for this module and every descendant, each once."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self) -> Iterator[Module]:
        """This module and every descendant."""
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """``(name, module)`` for the direct children."""
        for name, m in self._modules.items():
            if m is not None:
                yield name, m

    def children(self) -> Iterator[Module]:
        """The direct children."""
        for _, m in self.named_children():
            yield m

    def _named_members(self, store: str, prefix: str, recurse: bool) -> Iterator[Any]:
        seen: set[int] = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for name, value in getattr(mod, store).items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True) -> Iterator[Any]:
        """``(dotted_name, Parameter)`` pairs, each parameter once.

        Example:
            >>> import tensorplay_jax as tp
            >>> [n for n, _ in tp.nn.Linear(2, 3).named_parameters()]
            ['weight', 'bias']
        """
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        """Every parameter (each once)."""
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True) -> Iterator[Any]:
        """``(dotted_name, Tensor)`` for every buffer."""
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        """Every buffer."""
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ----------------------------------------------------------------- state
    def state_dict(self, *, prefix: str = "", keep_vars: bool = False) -> OrderedDict[str, Any]:
        """Parameters and persistent buffers by dotted name (detached unless ``keep_vars``).

        Example:
            >>> import tensorplay_jax as tp
            >>> list(tp.nn.Sequential(tp.nn.Linear(2, 2)).state_dict())
            ['0.weight', '0.bias']
        """
        out: OrderedDict[str, Any] = OrderedDict()
        for mod_prefix, mod in self.named_modules(prefix.rstrip(".")):
            p = f"{mod_prefix}." if mod_prefix else ""
            for name, param in mod._parameters.items():
                if param is not None:
                    out[p + name] = param if keep_vars else param.detach()
            for name, buf in mod._buffers.items():
                if buf is not None and name not in mod._non_persistent_buffers:
                    out[p + name] = buf if keep_vars else buf.detach()
        return out

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True
    ) -> IncompatibleKeys:
        """Copy values (Tensors or arrays) into the parameters and buffers of the same names.

        Parameters keep their identity (and ``requires_grad``); values are cast
        to each parameter's dtype. Also the way back from ``get_parameters`` /
        ``functional_call`` training: ``model.load_state_dict(params)``.

        Raises:
            RuntimeError: shapes differ, or (``strict``) keys are missing or unexpected.
        """
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        if strict:
            if missing:
                errors.append(
                    "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing)
                )
            if unexpected:
                errors.append(
                    "Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected)
                )
        updates = []
        for key, target in own.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            value = value.value if isinstance(value, Tensor) else jnp.asarray(value)
            if tuple(value.shape) != target.shape:
                errors.append(
                    f"size mismatch for {key}: copying a param with shape {tuple(value.shape)} "
                    f"from checkpoint, the shape in current model is {target.shape}."
                )
                continue
            updates.append((target, value))
        if errors:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                + "\n\t".join(errors)
            )
        with no_grad():
            for target, value in updates:
                target.data = value.astype(target.dtype)
        return IncompatibleKeys(missing, unexpected)

    # ----------------------------------------------------------------- modes and grads
    def train(self, mode: bool = True) -> Module:
        """Set training mode (dropout active) on this module and its descendants."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        # Like tensorplay: set this module's flag, then ask each child to switch itself,
        # so a child that is a handle to a remote module (RemoteModule) switches remotely.
        object.__setattr__(self, "training", mode)
        for child in self.children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        """Set evaluation mode (``train(False)``)."""
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset every parameter's ``.grad`` (to None, or to zeros)."""
        for p in self.parameters():
            if p.grad is not None:
                p.grad = None if set_to_none else jnp.zeros(p.shape, p.dtype)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        """Set ``requires_grad`` on every parameter."""
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def apply(self, fn: Callable[[Module], None]) -> Module:
        """Call ``fn`` on every descendant, then on this module (e.g. custom initialisation)."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    def to(self, *args: Any, device: Any = None, dtype: Any = None) -> Module:
        """Move parameters and buffers to a device and/or floating ones to a dtype, in place.

        As tensorplay's: ``to(device)``, ``to(dtype)``, ``to(device, dtype)``, ``to(tensor)``;
        devices as ``Tensor.to`` names them (``"cpu"``, ``"cuda:1"``, ``"cpu:1"``, a
        ``tp.device``, a ``jax.Device``); an absent device raises, naming those present.
        As with ``Tensor.to``, a value already on that device is kept as it is: moving
        it would commit it to the device (``jax.device_put``), and JAX compiles a
        program again for arguments that differ only in being committed, so a model
        moved to the device its values are on would compile each program of its first
        step twice (once with the committed weights, once with what its step returned).
        """
        for a in args:
            if isinstance(a, Tensor):
                device, dtype = next(iter(a.value.devices())), a.dtype
            elif isinstance(a, str | device_type) or hasattr(a, "platform"):
                device = a
            else:
                dtype = a
        dev = None if device is None else resolve_device(device, "Module.to")
        with no_grad():
            for t in [*self.parameters(), *self.buffers()]:
                v = t.value
                if dtype is not None and jnp.issubdtype(t.dtype, jnp.floating):
                    check_dtype(dtype, "Module.to")
                    v = v.astype(jnp.dtype(dtype))
                t.data = v if dev is None or v.devices() == {dev} else to_device(v, dev)
        return self

    def float(self) -> Module:
        """Convert floating parameters and buffers to float32."""
        return self.to(jnp.float32)

    def double(self) -> Module:
        """Convert floating parameters and buffers to float64 (needs ``jax_enable_x64``)."""
        return self.to(jnp.float64)

    def cpu(self) -> Module:
        """Move parameters and buffers to the first CPU device."""
        return self.to("cpu")

    def cuda(self, device: Any = None) -> Module:
        """Move parameters and buffers to a GPU (``device``: its index; default the first)."""
        return self.to("cuda" if device is None else f"cuda:{device}")

    # ----------------------------------------------------------------- calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The computation; subclasses override it. Call the module, not ``forward``."""
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for hook in list(self._forward_pre_hooks.values()):
            res = hook(self, args)
            if res is not None:
                args = res if isinstance(res, tuple) else (res,)
        out = self.forward(*args, **kwargs)
        for hook in list(self._forward_hooks.values()):
            res = hook(self, args, out)
            if res is not None:
                out = res
        return out

    def register_forward_pre_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """``hook(module, args)`` runs before ``forward``; a non-None result replaces ``args``."""
        hid = next(_hook_ids)
        self._forward_pre_hooks[hid] = hook
        return RemovableHandle(self._forward_pre_hooks, hid)

    def register_forward_hook(self, hook: Callable[..., Any]) -> RemovableHandle:
        """``hook(module, args, output)`` runs after ``forward``; a non-None result replaces it."""
        hid = next(_hook_ids)
        self._forward_hooks[hid] = hook
        return RemovableHandle(self._forward_hooks, hid)

    # ----------------------------------------------------------------- repr
    def extra_repr(self) -> str:
        """The text inside this module's parentheses in ``repr``."""
        return ""

    def __repr__(self) -> str:
        lines = [f"({name}): " + repr(m).replace("\n", "\n  ") for name, m in self.named_children()]
        extra = self.extra_repr()
        if not lines:
            return f"{type(self).__name__}({extra})"
        body = "\n  ".join(([extra] if extra else []) + lines)
        return f"{type(self).__name__}(\n  {body}\n)"

    def __dir__(self) -> list[str]:
        return sorted(
            set(super().__dir__()) | set(self._parameters) | set(self._buffers) | set(self._modules)
        )
