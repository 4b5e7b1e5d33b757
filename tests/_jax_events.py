"""JAX's monitoring events (compilations, traces) counted while a block runs, in this process."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

COMPILE = "/jax/core/compile/backend_compile_duration"  # one XLA compilation
TRACE = "/jax/core/compile/jaxpr_trace_duration"  # one function traced to a jaxpr


@contextlib.contextmanager
def events(name: str) -> Iterator[list[float]]:
    """The seconds of each ``name`` event JAX reports inside the block."""
    seconds: list[float] = []

    def listener(event: str, secs: float, **kwargs: object) -> None:
        if event == name:
            seconds.append(secs)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        yield seconds
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
