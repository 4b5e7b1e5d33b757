"""Sending a message again when it could not reach its peer: the RRef protocol's and
distributed autograd's bookkeeping messages, as tensorplay's agent retries them.

A user call fails when its message is lost; a bookkeeping message must not, or an
owner keeps a value no one holds (a lost release, ``FORK_DEL``), frees one a user
still holds, or a peer keeps a finished autograd context. tensorplay retries those
messages (``RREF_FORK_REQUEST``, ``RREF_USER_DELETE``,
``CLEANUP_AUTOGRAD_CONTEXT_REQ``, ...) with a growing pause; :func:`with_retries`
does the same for any send: it sends again when an attempt fails with
``RpcPeerError`` (the message did not reach the peer, or the link broke before the
reply), after ``RETRY_S``, then 1.5 times longer each time, ``MAX_RETRIES`` times at
most. Any other error (the peer's own, a timeout, RPC shut down) ends it at once.

A message whose reply was lost may arrive twice; the owner's table takes that (see
``_rref_table``): a fork registered twice while held is one fork (a set), and what a
late copy leaves (a placeholder for a fork already released, a release parked for a
fork it no longer holds) is dropped after ``rpc_timeout``.

Retries waiting for their turn count as work in the graceful shutdown's barrier
(:func:`waiting`), so a release in its pause is sent before the workers leave.

Example:
    >>> from tensorplay_jax.rpc._futures import Future
    >>> def send():
    ...     f = Future()
    ...     f.set_result("ok")
    ...     return f
    >>> with_retries(send, "a release").wait()
    'ok'
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any

from tensorplay_jax.rpc._errors import RpcPeerError
from tensorplay_jax.rpc._futures import Future

__all__ = ["MAX_RETRIES", "RETRY_BACKOFF", "RETRY_S", "waiting", "with_retries"]

log = logging.getLogger(__name__)

# tensorplay's RpcRetryOptions defaults: 5 retries, the first after 1 s, each pause 1.5x.
MAX_RETRIES = 5
RETRY_S = 1.0
RETRY_BACKOFF = 1.5

_waiting = 0
_lock = threading.Lock()


def waiting() -> int:
    """How many messages wait to be sent again."""
    return _waiting


def _count(n: int) -> None:
    global _waiting
    with _lock:
        _waiting += n


def with_retries(send: Callable[[], Future[Any]], what: str) -> Future[Any]:
    """``send()``'s Future, or, where an attempt fails with ``RpcPeerError``, the next
    attempt's (see the module docstring); ``what`` names the message in the log.

    An attempt that raises instead of returning a Future (RPC shut down) raises here
    the first time and ends the retries later.
    """
    retrying = _Retrying(send, what)
    retrying.attempt(0, RETRY_S)
    return retrying.out


class _Retrying:
    """One message's attempts. Nothing refers back to it but the pending attempt's
    Future or timer, so it (and what ``send`` holds) goes as soon as it is done."""

    def __init__(self, send: Callable[[], Future[Any]], what: str) -> None:
        self.send, self.what = send, what
        self.out: Future[Any] = Future()

    def attempt(self, n: int, pause: float) -> None:
        try:
            fut = self.send()
        except Exception as exc:
            if n == 0:
                raise
            self.out._try_set_exception(exc)
            return
        # In the completing thread (the reply's reader): short, and no task for the pool
        # that serves calls, for every fork an RRef passed on registers.
        fut._when_done(functools.partial(self._settled, n, pause))

    def _settled(self, n: int, pause: float, f: Future[Any]) -> None:
        exc = f.exception()
        if exc is None:
            self.out._try_set_result(f.value())
        elif not isinstance(exc, RpcPeerError) or n >= MAX_RETRIES:
            self.out._try_set_exception(exc)
        else:
            log.debug("rpc: %s failed (%s); sending it again in %.2f s", self.what, exc, pause)
            _count(1)
            timer = threading.Timer(pause, self._again, (n + 1, pause * RETRY_BACKOFF))
            timer.daemon = True
            timer.start()

    def _again(self, n: int, pause: float) -> None:
        try:
            self.attempt(n, pause)
        finally:
            _count(-1)
