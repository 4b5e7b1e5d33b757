"""All mutable state of the speed-up layer, in one object per process (``STATE``).

Every table the layer fills is a :class:`Bounded` dict (it forgets its oldest
entries past a size) or lives on an object that one of them holds, so a long run
of ever-new shapes or graphs holds a bounded amount. ``STATE.clear()`` forgets it
all: later work records, compiles and counts as if it were the first.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Hashable
from typing import Any, Generic, TypeVar

__all__ = ["STATE", "Bounded", "LayerState"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MAX_ENTRIES = 4096  # per-operation records (the compile cache holds as many operations)
MAX_SHAPES = 1024  # backward graph shapes counted (``_fused``)
MAX_KNOWN = 1024  # known backwards kept (``_known``)
MAX_HOST_PROGRAMS = 4096  # NumPy programs of node backwards (``_host_eval``)
MAX_FRESH = 1024  # patterns whose program compiled at their first run
MAX_PROGRAMS = 1024  # fused forward-backward programs (``_fused``)


class Bounded(dict, Generic[K, V]):  # type: ignore[type-arg]
    """A dict that forgets its oldest entries (by insertion) beyond ``maxsize``.

    ``get`` and ``[]`` are a plain dict's (no cost on a hit); :meth:`put` and
    :meth:`hit` enforce the bound.
    """

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def put(self, key: K, value: V) -> V:
        """Store ``value`` under ``key`` (or keep what is there) and return the stored one."""
        value = self.setdefault(key, value)
        self._trim()
        return value

    def hit(self, key: K, value: V) -> None:
        """Store ``value`` under ``key`` as the newest entry (a recently used one stays)."""
        self.pop(key, None)
        self[key] = value
        self._trim()

    def _trim(self) -> None:
        while len(self) > self.maxsize:
            try:
                self.pop(next(iter(self)), None)
            except (StopIteration, RuntimeError):  # another thread changed it meanwhile
                return


class EntryState:
    """What the layer keeps per cached operation (a ``_cache._Entry``)."""

    __slots__ = ("avals", "host", "seen")

    def __init__(self) -> None:
        # (mask, input avals) -> (output tree, output structs), or None: not deferrable
        self.avals: dict[Hashable, Any] = {}
        # (mask, input avals) of the runs in a segment so far (``_lazy``: first sights)
        self.seen: set[Hashable] = set()
        # input avals -> NumPy program of a run, or None (``_host_eval``)
        self.host: dict[Hashable, Any] = {}


class LayerState:
    """The speed-up layer's tables and counters; one per process (:data:`STATE`).

    Attributes:
        local: per thread, ``seg``: a weak reference to its open segment (``_lazy``;
            not learned state: ``clear`` keeps it, so open segments still run at a
            served call's end).
        entries: per cached operation, its :class:`EntryState`.
        pattern_root: the empty pattern, root of the trie of segment patterns
            (``_pattern``); ``patterns_made`` counts patterns made since it was new.
        fresh: the numbers of the patterns whose program compiled at their first run.
        seen_shapes: backward graph shape -> how often it ran (``_fused``).
        programs: fused forward-backward programs by key (``_fused``).
        known: the known backwards (``_known``).
        host_pullbacks: NumPy programs of node backwards (``_host_eval``).
        compiled_pullbacks: the node backwards (pullback structure, absent
            cotangents, outputs) that run compiled from now on (``_host_eval``).
        assigned: id of a Tensor ``assign`` gave a pending value -> (a weak
            reference to it, the pending Tensor) (``_assign``).
        host_limit: values an operation may hold to run with NumPy (None: not read yet).
        host_array: JAX's concrete array type, read with ``host_limit``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._ids = itertools.count()
        self.local = threading.local()
        self.clear()

    def clear(self) -> None:
        """Forget everything the layer learned: patterns, counts, kept plans and programs.

        Pending work is not touched (a pending Tensor still runs when read). Tests
        call it to start from a known state; it also frees the compiled programs
        these tables hold.
        """
        from tensorplay_jax.autograd.speedups._pattern import Pattern

        with self.lock:
            self.entries: Bounded[Any, EntryState] = Bounded(MAX_ENTRIES)
            self.pattern_root = Pattern((), self.next_id())
            self.patterns_made = 0
            self.fresh: Bounded[int, None] = Bounded(MAX_FRESH)
            self.seen_shapes: Bounded[Hashable, int] = Bounded(MAX_SHAPES)
            self.programs: Bounded[Hashable, Any] = Bounded(MAX_PROGRAMS)
            self.known: Bounded[Hashable, Any] = Bounded(MAX_KNOWN)
            self.host_pullbacks: Bounded[Hashable, Any] = Bounded(MAX_HOST_PROGRAMS)
            self.compiled_pullbacks: Bounded[Hashable, None] = Bounded(MAX_HOST_PROGRAMS)
            self.assigned: dict[int, Any] = {}  # one per live Tensor (weakly held)
            self.host_limit: int | None = None
            self.host_array: type | None = None  # JAX's concrete array type (``_host_eval``)

    def next_id(self) -> int:
        """A number no pattern of this process had before."""
        return next(self._ids)

    def entry(self, entry: Any) -> EntryState:
        """The layer's record of the cached operation ``entry`` (made on first use)."""
        st = self.entries.get(entry)
        if st is None:
            st = self.entries.put(entry, EntryState())
        return st


STATE = LayerState()
"""The process's speed-up layer state."""
