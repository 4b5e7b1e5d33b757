"""``interface``: declare the method set a RemoteModule exposes, checked at construction."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["check_implements", "interface", "interface_methods"]

C = TypeVar("C", bound=type)
_ATTR = "__remote_interface_methods__"


def interface(cls: C) -> C:
    """Mark ``cls`` as a remote-module interface: its public methods are the remote method set.

    Pass the class as ``module_interface_cls`` to ``RemoteModule``: the module
    built on the owner must implement every declared method (same parameter
    names; ``*args``/``**kwargs`` accept anything), and the handle gets
    ``name(...)`` (blocking) and ``name_async(...)`` (a Future) for each.

    Args:
      cls: a class whose body defines the methods (bodies are ignored; ``...`` is fine).

    Returns:
      ``cls`` itself, marked.

    Raises:
      TypeError: ``cls`` is not a class, or declares no public method.

    Example:
      >>> from tensorplay_jax.distributed.nn.api import interface
      >>> @interface
      ... class Scorer:
      ...     def forward(self, x): ...
      ...     def reset(self) -> None: ...
      >>> interface_methods(Scorer)
      ('forward', 'reset')
    """
    if not isinstance(cls, type):
        raise TypeError(f"interface: expected a class, got {cls!r}")
    names = tuple(
        name
        for name, value in vars(cls).items()
        if not name.startswith("_") and inspect.isfunction(value)
    )
    if not names:
        raise TypeError(
            f"interface: {cls.__qualname__} declares no public method; define at least one "
            "(e.g. `def forward(self, x): ...`)"
        )
    setattr(cls, _ATTR, names)
    return cls


def interface_methods(cls: Any) -> tuple[str, ...]:
    """The method names ``cls`` declares.

    Raises:
      TypeError: ``cls`` was not decorated with :func:`interface`.
    """
    names = vars(cls).get(_ATTR) if isinstance(cls, type) else None
    if names is None:
        raise TypeError(
            f"RemoteModule: module_interface_cls={cls!r} is not an interface; decorate it with "
            "@tensorplay_jax.distributed.nn.api.interface"
        )
    return names


def _params(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        ps = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    return ps


def check_implements(module: Any, iface: type) -> None:
    """Check that ``module`` has every method of ``iface`` with compatible parameters.

    Raises:
      TypeError: a method is missing, not callable, or lacks a declared parameter.
    """
    cls_name = type(module).__qualname__
    for name in interface_methods(iface):
        impl = getattr(module, name, None)
        if impl is None or not callable(impl):
            raise TypeError(
                f"RemoteModule: {cls_name} does not implement method `{name}` declared by "
                f"interface {iface.__qualname__}; add `def {name}(self, ...)` to {cls_name}"
            )
        declared = _params(getattr(iface, name))
        got = _params(impl)
        if declared is None or got is None:
            continue
        kinds = {p.kind for p in got}
        if inspect.Parameter.VAR_POSITIONAL in kinds and inspect.Parameter.VAR_KEYWORD in kinds:
            continue
        have = {p.name for p in got}
        for p in declared[1:]:  # skip self
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                if p.kind not in kinds:
                    raise TypeError(
                        f"RemoteModule: {cls_name}.{name} does not accept "
                        f"{'*' if p.kind == p.VAR_POSITIONAL else '**'}{p.name} declared by "
                        f"interface {iface.__qualname__}"
                    )
            elif p.name not in have and inspect.Parameter.VAR_KEYWORD not in kinds:
                sig = inspect.signature(getattr(iface, name))
                raise TypeError(
                    f"RemoteModule: {cls_name}.{name} has no parameter {p.name!r} declared by "
                    f"interface {iface.__qualname__}.{name}{sig}"
                )
