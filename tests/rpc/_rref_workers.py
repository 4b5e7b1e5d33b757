"""What ``test_remote_timeout.py`` runs on the owner: a value made slowly, and its live count."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import numpy as np

from tensorplay_jax.distributed import rpc

_made: list[weakref.ref] = []
_lock = threading.Lock()


class Slow:
    """A value that took a while to make; its owner counts the live ones."""

    def __init__(self, n: int) -> None:
        self.data = np.arange(n)

    def total(self) -> int:
        return int(self.data.sum())


def make_slowly(delay: float, n: int) -> Slow:
    time.sleep(delay)
    s = Slow(n)
    with _lock:
        _made.append(weakref.ref(s))
    return s


def made_and_alive() -> tuple[int, int]:
    gc.collect()
    with _lock:
        return len(_made), sum(r() is not None for r in _made)


def fetch_total(r: rpc.RRef) -> int:
    return r.to_here().total()


def owner_records() -> list[tuple[int, list[int], bool, bool]]:
    """This owner's records: (id, forks, created, value set), after a garbage collection."""
    from tensorplay_jax.rpc import _agent

    gc.collect()
    rrefs = _agent.current_agent().rrefs
    with rrefs._lock:
        recs = list(rrefs._owners.values())
        return [(r.id, sorted(r.forks), r.created, r.value.done()) for r in recs]
