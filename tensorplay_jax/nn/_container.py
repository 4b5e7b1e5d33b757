"""Containers: ``Sequential``, ``ModuleList``, ``ModuleDict``."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from tensorplay_jax.nn._module import Module


class Sequential(Module):
    """Modules called in order, each on the previous one's output.

    Build it from modules (named ``"0"``, ``"1"``, ...) or from an ``OrderedDict``.

    Example:
        >>> import tensorplay_jax as tp
        >>> net = tp.nn.Sequential(tp.nn.Linear(4, 8), tp.nn.ReLU(), tp.nn.Linear(8, 2))
        >>> net(tp.ones(3, 4)).shape
        (3, 2)
        >>> net[0]
        Linear(in_features=4, out_features=8, bias=True)
    """

    def __init__(self, *args: Any) -> None:
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, m in args[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def __getitem__(self, idx: int | slice) -> Any:
        items = list(self._modules.items())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(items[idx]))
        return items[idx][1]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def append(self, module: Module) -> Sequential:
        """Add ``module`` at the end."""
        self.add_module(str(len(self)), module)
        return self

    def forward(self, input: Any) -> Any:
        for m in self._modules.values():
            input = m(input)
        return input


class ModuleList(Module):
    """A list of modules whose parameters are registered (names ``"0"``, ``"1"``, ...)."""

    def __init__(self, modules: Iterable[Module] | None = None) -> None:
        super().__init__()
        for m in modules or ():
            self.append(m)

    def append(self, module: Module) -> ModuleList:
        """Add ``module`` at the end."""
        self.add_module(str(len(self._modules)), module)
        return self

    def __getitem__(self, idx: int) -> Any:
        return list(self._modules.values())[idx]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())


class ModuleDict(Module):
    """A dict of modules whose parameters are registered under their keys."""

    def __init__(self, modules: Mapping[str, Module] | None = None) -> None:
        super().__init__()
        for k, m in (modules or {}).items():
            self.add_module(k, m)

    def __getitem__(self, key: str) -> Any:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def keys(self) -> Iterable[str]:
        """The names."""
        return self._modules.keys()

    def items(self) -> Iterable[tuple[str, Module]]:
        """``(name, module)`` pairs."""
        return self._modules.items()

    def values(self) -> Iterable[Module]:
        """The modules."""
        return self._modules.values()
