"""Programs compiled ahead of their first call, on one background thread.

Some programs are known before they are called: when distributed autograd sends
a Tensor, the backward through it comes back later, and its fused program
(``_fused.prepare``) can be traced, lowered and compiled at once. Compiling it
on another thread overlaps XLA's work with what this process and its peers do
meanwhile: in a pipeline, stage 1 compiles its backward while stage 2 compiles
its forward, instead of after it. The call itself then finds the compiled
program in JAX's caches (the same function with arguments of the same types).

:data:`AHEAD` holds one future per program (by key, at most ``MAX_AHEAD``):
``submit`` starts a compilation unless its key is there, and the call ``wait`` s
for its key first (at most ``AHEAD_WAIT_S``), so a program is never compiled
twice at once. A compilation that fails is dropped: the call compiles the
program itself and raises what it raises.

Example:
    >>> import jax, jax.numpy as jnp
    >>> f = jax.jit(lambda x: x * 2)
    >>> ahead = Ahead(limit=4)
    >>> arg = jax.ShapeDtypeStruct((3,), jnp.float32)
    >>> ahead.submit("double", lambda: f.lower(arg).compile())
    True
    >>> ahead.submit("double", lambda: f.lower(arg).compile())  # already there
    False
    >>> ahead.started
    1
    >>> ahead.wait("double")
    >>> f(jnp.ones(3)).tolist()
    [2.0, 2.0, 2.0]
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

log = logging.getLogger(__name__)

MAX_AHEAD = 64  # programs submitted and not yet waited for, at most
AHEAD_WAIT_S = 300.0  # a call waits this long for its program's compilation, then compiles


class Ahead:
    """Compilations started ahead of their call, by key, on one thread started on first use.

    Args:
        limit: keys held at once; a submission beyond it (all still compiling) is refused.
    """

    def __init__(self, limit: int = MAX_AHEAD) -> None:
        self.limit = limit
        self.started = 0  # compilations submitted so far
        self._lock = threading.Lock()
        self._futures: dict[Hashable, concurrent.futures.Future[Any]] = {}
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def submit(self, key: Hashable, compile_program: Callable[[], Any]) -> bool:
        """Start ``compile_program()`` on the background thread; False if ``key`` is there
        already or ``limit`` compilations are still running."""
        with self._lock:
            if key in self._futures:
                return False
            if len(self._futures) >= self.limit:
                for k in [k for k, f in self._futures.items() if f.done()]:
                    del self._futures[k]  # compiled, and no call came for it
                if len(self._futures) >= self.limit:
                    return False
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="tpj-compile-ahead"
                )
            self._futures[key] = self._pool.submit(compile_program)
            self.started += 1
            return True

    def wait(self, key: Hashable) -> None:
        """Wait for ``key``'s compilation (if one was submitted) to end, at most
        ``AHEAD_WAIT_S``; a failed one is logged and dropped."""
        with self._lock:
            future = self._futures.pop(key, None)
        if future is None:
            return
        try:
            future.result(timeout=AHEAD_WAIT_S)
        except concurrent.futures.TimeoutError:
            log.debug("compile-ahead: %s still compiling after %ss", key, AHEAD_WAIT_S)
        except Exception:  # the call compiles it itself, and raises what it raises
            log.debug("compile-ahead: compiling %s failed", key, exc_info=True)

    def clear(self) -> None:
        """Forget every key (compilations under way run to their end)."""
        with self._lock:
            self._futures.clear()


AHEAD = Ahead()
"""The process's compilations ahead of their calls."""
