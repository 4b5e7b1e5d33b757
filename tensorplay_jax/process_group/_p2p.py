"""Point-to-point calls: send, recv, isend, irecv, ``batch_isend_irecv`` with ``P2POp``.

Data between two ranks moves as an XLA program over the pair (``_group.pair_engine``),
which both ranks run together, one call at a time. So that the usual shapes of
tensorplay code match (both ranks ``isend`` then ``irecv``; a ring where everyone
sends first), calls are not run where they are issued: each is queued on its
process, and the queue runs when a handle is waited on (``Work.wait``,
``is_completed``, ``result``, the future's ``wait``/``value``/``done``), when a
blocking ``send``/``recv`` is called, or before any collective or barrier. A run
takes the queued calls in one canonical order, the same on both ranks of a pair:
by the pair of global ranks, then the lower rank's sends before the higher rank's,
then issue order. Every rank thus meets its peers pair by pair in ascending
order, which cannot deadlock when each call is matched by its peer's.

Departures from tensorplay (gloo): ``tag`` is accepted and not matched (calls
between two ranks match in order, per direction); a send completes when its
receiver has the data, not when the data is buffered; ``src=None`` (receive from
any rank) is not supported; ``recv`` returns the received array, not the sender.

Example (two ranks exchange, as in tensorplay):
  >>> ops = [dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, buf, peer)]  # doctest: +SKIP
  >>> for w in dist.batch_isend_irecv(ops): w.wait()  # doctest: +SKIP
  >>> got = w.result()  # the irecv's handle holds the array  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tensorplay_jax.process_group._collectives import _array, _call, _desc, _root
from tensorplay_jax.process_group._group import (
    ProcessGroup,
    members_only,
    pair_engine,
    resolve,
    run_pending,
    world,
)
from tensorplay_jax.process_group._work import Future, Work

__all__ = ["P2POp", "batch_isend_irecv", "irecv", "isend", "recv", "send"]

_ISSUED = itertools.count()


class _Queued:
    """One queued send or receive: run by ``_group.run_pending`` in ``key`` order."""

    def __init__(self, fn: str, key: tuple, eng: Any, run: Callable[[], Any], future: Future):
        self.fn, self.key, self.eng, self.run, self.future = fn, key, eng, run, future

    def __call__(self, timeout: float | None, err: BaseException | None) -> BaseException | None:
        if err is not None:
            self.cancel(f"an earlier send/recv of the same run failed ({err})")
            return err
        eng = self.eng
        saved = eng.timeout_s
        if timeout is not None:
            eng.timeout_s = min(saved, float(timeout))
        try:
            value = self.run()
        except Exception as e:
            self.future.set_exception(e)
            return e
        finally:
            eng.timeout_s = saved
        self.future.set_result(value)
        return None

    def cancel(self, why: str) -> None:
        self.future.set_exception(RuntimeError(f"{self.fn}: not run: {why}."))


def _peer(
    fn: str, arg: str, peer: int | None, group: ProcessGroup | None, group_peer: int | None
) -> tuple[ProcessGroup, int]:
    """The group and the peer's global rank (from ``peer``, or ``group_peer`` in the group)."""
    g = resolve(fn, group, p2p=True)
    if group_peer is not None:
        if peer is not None:
            raise ValueError(f"{fn}: pass {arg} or group_{arg}, not both.")
        if not isinstance(group_peer, int) or not 0 <= group_peer < g.size():
            raise ValueError(f"{fn}: group_{arg}={group_peer!r} is not a rank of the group.")
        peer = g.ranks[group_peer]
    if peer is None:
        raise ValueError(
            f"{fn}: {arg} is required (receiving from any rank is not supported here)."
        )
    _root(fn, arg, peer, g)
    if peer == world().rank:
        raise ValueError(f"{fn}: {arg}={peer} is this process's own rank.")
    return g, int(peer)


def _queue(fn: str, tensor: Any, src: int, dst: int) -> Work:
    x = _array(fn, tensor)
    if isinstance(x, np.ndarray):
        x = x.copy()  # tensorplay lets the caller reuse its buffer once wait() returns
    me = world().rank
    eng = pair_engine(src, dst)
    s, r = eng.ranks.index(src), eng.ranks.index(dst)
    d = _desc("send/recv", ProcessGroup(eng.ranks, -1, eng), x, root=s)
    lo, hi = eng.ranks

    # While profiling, a span "pg.send" or "pg.recv" (isend and irecv too), as tensorplay
    # names its point-to-point events ("gloo:send", "gloo:recv").
    span = "send" if src == me else "recv"

    def run() -> Any:
        y = _call(span, lambda v: eng.send_recv(fn, v, s, r, d), x)
        return y if dst == me else None

    future = Future(drive=run_pending)
    key = (lo, hi, 0 if src == lo else 1, next(_ISSUED))
    world().pending.append(_Queued(fn, key, eng, run, future))
    return Work(future)


@members_only
def isend(
    tensor: Any,
    dst: int | None = None,
    group: ProcessGroup | None = None,
    tag: int = 0,
    group_dst: int | None = None,
) -> Work:
    """Queue sending ``tensor`` to global rank ``dst`` (or ``group_dst`` of ``group``).

    Returns:
      A ``Work``; waiting on it runs the queued calls (see the module docstring).

    Example:
      >>> dist.isend(jnp.ones(4), dst=1).wait()  # doctest: +SKIP
      True
    """
    fn = "isend"
    _, peer = _peer(fn, "dst", dst, group, group_dst)
    return _queue(fn, tensor, world().rank, peer)


@members_only
def irecv(
    tensor: Any,
    src: int | None = None,
    group: ProcessGroup | None = None,
    tag: int = 0,
    group_src: int | None = None,
) -> Work:
    """Queue receiving from global rank ``src``; ``tensor`` gives the shape and dtype.

    Returns:
      A ``Work`` whose ``result()`` is the received array.

    Example:
      >>> w = dist.irecv(jnp.zeros(4), src=0)  # doctest: +SKIP
      >>> y = w.result()  # doctest: +SKIP
    """
    fn = "irecv"
    _, peer = _peer(fn, "src", src, group, group_src)
    return _queue(fn, tensor, peer, world().rank)


@members_only
def send(
    tensor: Any,
    dst: int | None = None,
    group: ProcessGroup | None = None,
    tag: int = 0,
    group_dst: int | None = None,
    async_op: bool = False,
) -> Any:
    """Send ``tensor`` to rank ``dst``, which must call :func:`recv` with ``src`` = this rank.

    Blocks until ``dst`` has the data (as gloo's send does once matched); queued
    isend/irecv of this process run with it, in their canonical order.
    ``async_op=True`` is :func:`isend`.

    Example:
      >>> dist.send(x, dst=1)  # doctest: +SKIP
    """
    fn = "send"
    _, peer = _peer(fn, "dst", dst, group, group_dst)
    work = _queue(fn, tensor, world().rank, peer)
    if async_op:
        return work
    work.wait()
    return None


@members_only
def recv(
    tensor: Any,
    src: int | None = None,
    group: ProcessGroup | None = None,
    tag: int = 0,
    group_src: int | None = None,
    async_op: bool = False,
) -> Any:
    """Receive from rank ``src``; ``tensor`` gives the expected shape and dtype.

    ``async_op=True`` is :func:`irecv`.

    Returns:
      The received array (``tensor`` itself is not modified).

    Example:
      >>> y = dist.recv(jnp.zeros(4), src=0)  # doctest: +SKIP
    """
    fn = "recv"
    _, peer = _peer(fn, "src", src, group, group_src)
    work = _queue(fn, tensor, peer, world().rank)
    return work if async_op else work.result()


@dataclasses.dataclass
class P2POp:
    """One point-to-point call for :func:`batch_isend_irecv`.

    Args:
      op: :func:`isend` or :func:`irecv` (tensorplay_jax's or tensorplay's name of them).
      tensor: what to send, or the shape and dtype to receive.
      peer: the other rank (global); or ``group_peer``, its rank in ``group``.
      group: the group (default: all processes).
      tag: accepted, not matched (see the module docstring).

    Example:
      >>> P2POp(isend, np.ones(2), peer=1).op is isend
      True
    """

    op: Callable[..., Work]
    tensor: Any
    peer: int | None = None
    group: ProcessGroup | None = None
    tag: int = 0
    group_peer: int | None = None

    def __post_init__(self) -> None:
        if getattr(self.op, "__name__", None) not in ("isend", "irecv"):
            raise ValueError(
                f"P2POp: op={self.op!r} must be tensorplay_jax.distributed.isend or irecv."
            )


def batch_isend_irecv(p2p_op_list: Sequence[P2POp]) -> list[Work]:
    """Queue each ``P2POp``; one ``Work`` per op, in order.

    The ops run, with any other queued isend/irecv of this process, when one of the
    handles is waited on (or before the next collective), in the canonical order of
    the module docstring: the order of the list does not matter.

    Raises:
      ValueError: an empty list or an item that is not a P2POp.

    Example:
      >>> works = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, 1)])  # doctest: +SKIP
    """
    fn = "batch_isend_irecv"
    ops = list(p2p_op_list)
    if not ops or not all(isinstance(p, P2POp) for p in ops):
        raise ValueError(f"{fn}: p2p_op_list must be a non-empty list of P2POp.")
    queue = {"isend": isend, "irecv": irecv}
    pending = world().pending
    before = len(pending)
    try:
        return [queue[p.op.__name__](p.tensor, p.peer, p.group, p.tag, p.group_peer) for p in ops]
    except BaseException:  # a bad op: none of this batch stays queued
        for q in pending[before:]:
            q.cancel("another op of its batch_isend_irecv was refused")
        del pending[before:]
        raise
