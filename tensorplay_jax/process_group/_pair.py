"""Send/recv between two ranks on a host engine: for groups that run without JAX's runtime.

Point-to-point calls normally run as XLA programs over the pair (``_engine_xla``),
which need JAX's multi-process runtime. A group started after JAX work has none
(``_startup.join``), so there :class:`HostPair` moves the data instead: a
broadcast from the sender over the pair's own host engine (``shm`` on one host,
``tcp`` across hosts), built on the pair's first call. That call runs in the
pair order of ``_p2p``'s queue on both ranks (building an engine is a meeting of
the two), so it cannot deadlock where the queue does not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tensorplay_jax.process_group.engine import Engine, GroupSpec, make_engine

__all__ = ["HostPair"]


class HostPair:
    """The ``send_recv`` of a pair, over a host engine of the pair made on first use.

    Attributes:
      ranks: the pair's global ranks, ascending; ``me`` is this process's index.
      timeout_s: the deadline of every wait (set by ``_p2p`` for a bounded wait).
    """

    name = "host-pair"

    def __init__(self, spec: GroupSpec) -> None:
        self.spec, self.ranks, self.me = spec, spec.ranks, spec.me
        self._timeout_s = spec.timeout_s
        self.engine: Engine | None = None

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float) -> None:
        self._timeout_s = value
        if self.engine is not None:
            self.engine.timeout_s = value  # type: ignore[attr-defined]

    def send_recv(self, fn: str, x: Any, src: int, dst: int, desc: np.ndarray) -> Any:
        """Move ``x`` from member ``src`` to member ``dst``: a broadcast from ``src``."""
        if self.engine is None:
            self.engine = make_engine(self.spec)
            self.timeout_s = self._timeout_s
        return self.engine.broadcast(x, src, desc)

    def close(self) -> None:
        """Close the pair's engine (if it was made)."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None
