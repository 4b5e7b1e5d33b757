"""The engine plug-in point: the ``Engine`` protocol, the ``GroupSpec`` factories get, the registry.

Each process group owns one engine, the data mover behind its blocking
collectives. Every collective takes this rank's array (a ``jax.Array`` or a numpy
array, already validated), the normalised op or the root as a group index, and
the call's descriptor (an int64 vector from ``_descriptor.encode``, which the
engine compares across ranks before data moves); it returns this rank's result as
a ``jax.Array`` on this process's device. Converting to and from host memory is
the engine's own business, so the callers never branch per engine.

Adding an engine is one module and one call: write a class whose constructor
takes a :class:`GroupSpec` and which has every method of :class:`Engine`, then
:func:`register_engine` it (``tests/test_layering.py`` checks that every
registered engine implements every collective). ``engine="auto"`` picks, among
the engines whose ``applies`` holds for the group, the one of highest
``priority``; the built-in ones (registered from one table,
``process_group/_builtin_engines.py``) are ``shm`` (priority 20: a gloo group
on one host), ``tcp`` (10: a gloo group across hosts) and ``xla`` (0: any group).

Point-to-point (``send``/``recv``) runs on a *pair engine* of the two ranks,
chosen the same way from its own table (:func:`register_pair_engine`,
:func:`make_pair_engine`): a :class:`PairEngine` has ``send_recv``. The built-in
ones are ``xla`` (priority 10: an XLA program over the pair, where JAX's
multi-process runtime runs) and ``host`` (0: a broadcast over the pair's host
engine, for a group started without that runtime).

Example:
  >>> engines()
  ('shm', 'tcp', 'xla')
  >>> spec = GroupSpec("g", (0, 1), 0, 5.0, ("cpu0", "cpu1"), ("host-a", "host-b"))
  >>> choose(spec), choose(dataclasses.replace(spec, hosts=("host-a", "host-a")))
  ('tcp', 'shm')
  >>> choose(dataclasses.replace(spec, backend="nccl"))
  'xla'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import jax
import numpy as np

from tensorplay_jax.collectives.reduce_op import ReduceOp

__all__ = [
    "OPS",
    "Engine",
    "EngineEntry",
    "GroupSpec",
    "PairEngine",
    "choose",
    "choose_pair",
    "engines",
    "make_engine",
    "make_pair_engine",
    "pair_engines",
    "register_engine",
    "register_pair_engine",
    "registration",
    "unregister_engine",
    "unusable",
]


@dataclasses.dataclass(frozen=True)
class GroupSpec:
    """One group as this member sees it: everything an engine factory is given.

    Attributes:
      key: a coordination-store key prefix unique to this group (engines put their
        own keys below it).
      ranks: the members' global ranks, ascending; ``me`` is this process's index.
      me: this process's index in ``ranks``.
      timeout_s: the deadline of every wait.
      devices: one device per member, in ``ranks`` order.
      hosts: each member's host id (equal ids: one machine, shared memory).
      backend: ``"gloo"`` or ``"nccl"``.
      master: the rendezvous host (``MASTER_ADDR``); sockets bind on the route to it.
      secret: the job secret that connections prove and stored values are signed with.
      fn: the public function creating the group (named in errors).

    Example:
      >>> spec = GroupSpec("g0", (0, 1), 1, 5.0, ("cpu0", "cpu1"), ("h", "h"))
      >>> spec.n, spec.device, spec.one_host
      (2, 'cpu1', True)
    """

    key: str
    ranks: tuple[int, ...]
    me: int
    timeout_s: float
    devices: tuple[Any, ...]
    hosts: tuple[str, ...]
    backend: str = "gloo"
    master: str = "127.0.0.1"
    secret: str = ""
    fn: str = "new_group"

    @property
    def n(self) -> int:
        """Number of members."""
        return len(self.ranks)

    @property
    def device(self) -> Any:
        """This process's device (engines return their results on it)."""
        return self.devices[self.me]

    @property
    def one_host(self) -> bool:
        """Whether every member runs on this host."""
        return len(set(self.hosts)) == 1


class Engine(Protocol):
    """The collectives of one group, run by every member with the same arguments.

    Attributes:
      name: the name the engine is registered under (``"shm"``, ``"tcp"``, ``"xla"``...).
      ranks: the members' global ranks; ``me`` is this process's index in it.
    """

    name: str
    ranks: tuple[int, ...]
    me: int

    def close(self) -> None:
        """Release what the engine holds (segments, connections, cached programs)."""

    def all_reduce(self, x: Any, op: ReduceOp, desc: np.ndarray) -> jax.Array:
        """The reduction of every member's ``x``."""

    def broadcast(self, x: Any, src: int, desc: np.ndarray) -> jax.Array:
        """Member ``src``'s ``x`` (``src``'s own input on ``src``)."""

    def reduce(self, x: Any, dst: int, op: ReduceOp, desc: np.ndarray) -> jax.Array:
        """The reduction on member ``dst``; zeros elsewhere."""

    def all_gather(self, x: Any, desc: np.ndarray) -> jax.Array:
        """Every member's ``x`` stacked to ``(n, ...)``."""

    def gather(self, x: Any, dst: int, desc: np.ndarray) -> jax.Array:
        """Every member's ``x`` stacked on member ``dst``; zeros elsewhere."""

    def scatter(self, x: Any, src: int, desc: np.ndarray) -> jax.Array:
        """Slice ``me`` of member ``src``'s ``(n, ...)`` ``x``."""

    def reduce_scatter(self, x: Any, op: ReduceOp, desc: np.ndarray) -> jax.Array:
        """Slice ``me`` of the reduction of every member's ``(n, ...)`` ``x``."""

    def all_to_all(self, x: Any, desc: np.ndarray) -> jax.Array:
        """Slice ``me`` of every member's ``(n, ...)`` ``x``, stacked."""

    def all_to_all_single(self, x: Any, desc: np.ndarray) -> jax.Array:
        """Rows split as the descriptors say, exchanged, concatenated in member order."""


# The collectives every engine runs: the protocol's methods, in their order (the
# descriptors' wire codes follow it).
OPS: tuple[str, ...] = tuple(
    name for name in vars(Engine) if not name.startswith("_") and name != "close"
)


class PairEngine(Protocol):
    """Point-to-point between the two members of a pair (``spec.ranks``, ascending).

    Attributes:
      name: the name it is registered under (``"xla"``, ``"host"``...).
      ranks: the pair's global ranks; ``me`` is this process's index in it.
      timeout_s: the deadline of every wait (``send``/``recv`` may bound it lower).
    """

    name: str
    ranks: tuple[int, ...]
    me: int
    timeout_s: float

    def close(self) -> None:
        """Release what the engine holds."""

    def send_recv(self, fn: str, x: Any, src: int, dst: int, desc: np.ndarray) -> Any:
        """Move ``x`` from member ``src`` to member ``dst``; ``dst`` gets it (a ``jax.Array``)."""


def unusable(fn: str, broken: str) -> RuntimeError:
    """The error of a call on a group that an earlier failure (``broken``) left unusable.

    An engine whose wait failed midway cannot tell where its peers' streams or
    slots stand, so every later call raises this (``if self.broken: raise
    unusable(fn, self.broken)``).

    Example:
      >>> print(unusable("all_reduce", "lost rank 1"))
      all_reduce: this process group is unusable after an earlier failure (lost rank 1); call destroy_process_group() and init_process_group() again.
    """  # noqa: E501
    return RuntimeError(
        f"{fn}: this process group is unusable after an earlier failure "
        f"({broken}); call destroy_process_group() and init_process_group() again."
    )


@dataclasses.dataclass(frozen=True)
class EngineEntry:
    """A registered engine (see :func:`register_engine` for the fields)."""

    name: str
    factory: Callable[[GroupSpec], Engine]
    applies: Callable[[GroupSpec], bool] | None
    requires: Callable[[GroupSpec], str | None] | None
    priority: int


_REGISTRY: dict[str, EngineEntry] = {}
_PAIRS: dict[str, EngineEntry] = {}  # the pair engines (point-to-point), by name


def register_engine(
    name: str,
    factory: Callable[[GroupSpec], Engine],
    *,
    applies: Callable[[GroupSpec], bool] | None = None,
    requires: Callable[[GroupSpec], str | None] | None = None,
    priority: int = 0,
) -> None:
    """Make ``name`` an engine that ``init_process_group`` and ``new_group`` accept.

    Args:
      name: what ``engine=`` (and ``TENSORPLAY_JAX_PG_ENGINE``) names it by.
      factory: called by every member with its :class:`GroupSpec`, collectively,
        returning the group's engine; usually the engine class itself.
      applies: whether ``engine="auto"`` may pick it for a group; None: only by name.
      requires: the reason it cannot run a group (the ValueError's message), or None
        when it can; checked when it is named or picked.
      priority: ``auto`` picks the applicable engine of the highest priority.

    Raises:
      ValueError: ``name`` is ``"auto"`` or already registered.

    Example:
      >>> class Local:  # a sketch: a real engine implements every method of Engine
      ...     name = "local"
      ...     def __init__(self, spec: GroupSpec):
      ...         self.ranks, self.me = spec.ranks, spec.me
      >>> register_engine("local", Local, applies=lambda spec: spec.n == 1, priority=30)
      >>> choose(GroupSpec("g", (0,), 0, 1.0, ("cpu",), ("h",)))
      'local'
      >>> unregister_engine("local")
    """
    if name == "auto" or name in _REGISTRY:
        raise ValueError(
            f"register_engine: name={name!r} is "
            + ("reserved" if name == "auto" else "already registered")
            + f"; registered: {engines()}."
        )
    _REGISTRY[name] = EngineEntry(name, factory, applies, requires, priority)


def engines() -> tuple[str, ...]:
    """The registered engines' names, sorted (what ``engine=`` accepts besides ``"auto"``)."""
    return tuple(sorted(_REGISTRY))


def registration(name: str) -> EngineEntry:
    """How engine ``name`` was registered (a KeyError when it was not).

    Example:
      >>> registration("xla").priority
      0
    """
    return _REGISTRY[name]


def unregister_engine(name: str) -> None:
    """Forget engine ``name`` (to replace a built-in one, or after a test).

    Groups that already run on it keep their engine.
    """
    if _REGISTRY.pop(name, None) is None:
        raise ValueError(f"unregister_engine: {name!r} is not registered; registered: {engines()}.")


def _choose(table: dict[str, EngineEntry], what: str, spec: GroupSpec, pref: str) -> str:
    if pref == "auto":
        fits = [e for e in table.values() if e.applies is not None and e.applies(spec)]
        if not fits:
            raise ValueError(
                f"{spec.fn}: no registered {what} applies to group {list(spec.ranks)} "
                f"(backend {spec.backend!r}); name one of {tuple(sorted(table))}."
            )
        pref = max(fits, key=lambda e: e.priority).name
    reason = table[pref].requires(spec) if table[pref].requires else None
    if reason:
        raise ValueError(reason)
    return pref


def choose(spec: GroupSpec, pref: str = "auto") -> str:
    """The engine that runs ``spec``'s group: ``pref``, or for ``"auto"`` the registry's pick.

    Raises:
      ValueError: the chosen engine's ``requires`` refuses the group, or ``auto``
        finds no engine that applies.
    """
    return _choose(_REGISTRY, "engine", spec, pref)


def make_engine(spec: GroupSpec, pref: str = "auto") -> Engine:
    """The engine of ``spec``'s group, chosen by :func:`choose` and built by its factory."""
    return _REGISTRY[choose(spec, pref)].factory(spec)


def register_pair_engine(
    name: str,
    factory: Callable[[GroupSpec], PairEngine],
    *,
    applies: Callable[[GroupSpec], bool] | None = None,
    requires: Callable[[GroupSpec], str | None] | None = None,
    priority: int = 0,
) -> None:
    """Make ``name`` a pair engine: what runs ``send``/``recv`` between two ranks.

    The arguments are :func:`register_engine`'s; ``factory`` gets the pair's
    :class:`GroupSpec` (two members) and returns a :class:`PairEngine`. Every
    point-to-point call takes the applicable pair engine of the highest priority.

    Raises:
      ValueError: ``name`` is ``"auto"`` or already registered as a pair engine.
    """
    if name == "auto" or name in _PAIRS:
        raise ValueError(
            f"register_pair_engine: name={name!r} is "
            + ("reserved" if name == "auto" else "already registered")
            + f"; registered: {pair_engines()}."
        )
    _PAIRS[name] = EngineEntry(name, factory, applies, requires, priority)  # type: ignore[arg-type]


def pair_engines() -> tuple[str, ...]:
    """The registered pair engines' names, sorted.

    Example:
      >>> pair_engines()
      ('host', 'xla')
    """
    return tuple(sorted(_PAIRS))


def choose_pair(spec: GroupSpec, pref: str = "auto") -> str:
    """The pair engine that runs ``spec``'s pair: ``pref``, or for ``"auto"`` the pick.

    Example:
      >>> pair = GroupSpec("p", (0, 1), 0, 5.0, ("cpu0", "cpu1"), ("h", "h"))
      >>> choose_pair(pair), choose_pair(dataclasses.replace(pair, devices=(None, None)))
      ('xla', 'host')
    """
    return _choose(_PAIRS, "pair engine", spec, pref)


def make_pair_engine(spec: GroupSpec, pref: str = "auto") -> PairEngine:
    """The pair engine of ``spec``'s pair, chosen by :func:`choose_pair`, built by its factory."""
    return _PAIRS[choose_pair(spec, pref)].factory(spec)  # type: ignore[return-value]
