"""The one thread that runs data-parallel collectives, in the order they are handed over.

A bucket's all-reduce must not hold up the backward pass that made it ready, and
the process-group collectives block their caller (``async_op=True`` returns a
completed ``Work``). So the reducer hands each bucket (its communication hook)
to this thread and goes on; the backward pass waits for the futures at its end.
One thread for every DDP module of the process keeps the collectives of all of
them in one order, the same on every rank.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from tensorplay_jax.futures import Future

__all__ = ["submit"]

_jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
_thread: threading.Thread | None = None
_lock = threading.Lock()


def _loop() -> None:
    while True:
        fn, fut = _jobs.get()
        try:
            result = fn()
        except BaseException as e:
            fut.set_exception(e)
        else:
            fut.set_result(result)


def submit(fn: Callable[[], Any]) -> Future[Any]:
    """Run ``fn()`` on the communication thread after what was handed over before.

    Returns:
        A Future of ``fn()``'s result (or its exception).
    """
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_loop, name="ddp-comm", daemon=True)
            _thread.start()
    fut: Future[Any] = Future()
    _jobs.put((fn, fut))
    return fut
