"""Functions the ``tensorplay_jax.testing`` tests run on workers (through ``Workers.run``)."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from tensorplay_jax.distributed import rpc


def whoami() -> tuple[str, int]:
    """This worker's RPC name and process id."""
    return rpc.get_worker_info().name, os.getpid()


def boom(message: str) -> None:
    """Raise, so that the test sees the remote error and its traceback."""
    raise ValueError(f"boom on purpose: {message}")


def last_words_then_exit(code: int) -> None:
    """Write to stderr and die at once (a crash the fixture must report with that output)."""
    print("last words before the crash", file=sys.stderr, flush=True)
    os._exit(code)


def scale_engine_gradients(factor: float) -> None:
    """Mutate this worker's distributed engine: every gradient a recv node sends back is scaled.

    The rule is ``_engine.send_from_recv`` (a recv node's backward); ``factor=1`` restores it.
    """
    from tensorplay_jax.distributed.autograd import _engine

    original = getattr(_engine, "_tpj_original_send_from_recv", _engine.send_from_recv)
    _engine._tpj_original_send_from_recv = original

    def scaled(dest: int, key: int, grads: list[Any]) -> None:
        original(dest, key, [None if g is None else np.asarray(g) * factor for g in grads])

    _engine.send_from_recv = original if factor == 1 else scaled
