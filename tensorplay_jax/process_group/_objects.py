"""Object collectives: any picklable Python object, between the ranks of one job.

``all_gather_object``, ``broadcast_object_list``, ``gather_object``,
``scatter_object_list``, ``send_object_list`` and ``recv_object_list``, with
tensorplay's signatures: each fills the list it is given in place. An object
travels as its cloudpickle bytes in a ``uint8`` array over the group's own
collectives (sizes first, then the bytes padded to the longest).

**Unpickling runs code.** An object is whatever a peer of the job sent, and
loading it can run any code that peer chose; call these only with ranks you
trust as you trust your own code. What we make sure of: the bytes come from a
rank of this job. Each payload carries an HMAC-SHA256 under the job secret
(``tensorplay_jax.runtime.secret``) of the call (group, sequence number, sender)
and the bytes, checked before anything is unpickled, because not every engine's
transport is itself authenticated (XLA's gloo traffic is not); a payload that
fails is refused with an error and never loaded.

Example (the signed encoding, without a job; ``key`` stands for the job secret):
  >>> _loads(_dumps({"lr": 0.1}, b"call", "key"), b"call", "example", 0, "key")
  {'lr': 0.1}
  >>> x = _dumps({"lr": 0.1}, b"call", "key")
  >>> _loads(x, b"other call", "example", 0, "key")  # doctest: +ELLIPSIS
  Traceback (most recent call last):
  RuntimeError: example: refused the object from rank 0: it is not signed ...
"""

from __future__ import annotations

import hmac
import pickle
from collections.abc import MutableSequence
from typing import Any

import cloudpickle
import numpy as np

from tensorplay_jax.process_group import _kv
from tensorplay_jax.process_group._collectives import all_gather, broadcast, gather, scatter
from tensorplay_jax.process_group._group import ProcessGroup, members_only, resolve, world
from tensorplay_jax.process_group._p2p import _peer, recv, send
from tensorplay_jax.runtime import secret as _secret

__all__ = [
    "all_gather_object",
    "broadcast_object_list",
    "gather_object",
    "recv_object_list",
    "scatter_object_list",
    "send_object_list",
]

_MAC = 32
_SEQ: dict[str, int] = {}  # per group (collectives) or per direction (send/recv)


def _dumps(obj: Any, ctx: bytes, key: str | None = None) -> np.ndarray:
    """``obj``'s cloudpickle bytes behind their HMAC under the job secret (or ``key``)."""
    data = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    tag = _secret.mac(key or _kv.job_secret(), b"tpjax-obj\0" + ctx + b"\0", data)
    return np.frombuffer(tag + data, np.uint8)


def _loads(buf: np.ndarray, ctx: bytes, fn: str, sender: int, key: str | None = None) -> Any:
    """The object in ``buf``, unpickled only once its HMAC for ``ctx`` checks."""
    raw = np.asarray(buf, np.uint8).tobytes()
    tag, data = raw[:_MAC], raw[_MAC:]
    want = _secret.mac(key or _kv.job_secret(), b"tpjax-obj\0" + ctx + b"\0", data)
    if len(raw) < _MAC or not hmac.compare_digest(tag, want):
        raise RuntimeError(
            f"{fn}: refused the object from rank {sender}: it is not signed with this job's "
            "secret for this call (a different secret, calls out of order, or bytes that did "
            "not come from a rank of this job); it was not unpickled."
        )
    try:
        return pickle.loads(data)
    except Exception as e:
        raise RuntimeError(
            f"{fn}: the object from rank {sender} is signed for this call but does not "
            f"unpickle here ({type(e).__name__}: {e}); do all ranks run the same code?"
        ) from e


def _ctx(kind: str, *parts: object) -> bytes:
    name = "/".join([world().prefix, kind, *map(str, parts)])
    _SEQ[name] = _SEQ.get(name, 0) + 1
    return f"{name}/{_SEQ[name]}".encode()


def _call(g: ProcessGroup) -> bytes:
    """The context of this rank's next object collective on ``g`` (after validation)."""
    return _ctx("g", g.gid)


def _sender(ctx: bytes, rank: int) -> bytes:
    return ctx + f"/from{rank}".encode()


def _list(fn: str, arg: str, value: Any, n: int | None = None) -> None:
    if not isinstance(value, MutableSequence) or (n is not None and len(value) < n):
        want = "a list" if n is None else f"a list of size at least {n}"
        raise ValueError(f"{fn}: Expected argument {arg} to be {want}. Got {value!r:.80}.")


def _root(fn: str, arg: str, g: ProcessGroup, rank: int | None, group_rank: int | None) -> int:
    if group_rank is not None:
        if rank is not None:
            raise ValueError(f"{fn}: pass {arg} or group_{arg}, not both.")
        if not isinstance(group_rank, int) or not 0 <= group_rank < g.size():
            raise ValueError(f"{fn}: group_{arg}={group_rank!r} is not a rank of the group.")
        return g.ranks[group_rank]
    return g.ranks[0] if rank is None else rank


def _padded(datas: list[np.ndarray], width: int) -> np.ndarray:
    out = np.zeros((len(datas), width), np.uint8)
    for i, d in enumerate(datas):
        out[i, : d.size] = d
    return out


@members_only
def all_gather_object(object_list: list[Any], obj: Any, group: ProcessGroup | None = None) -> None:
    """``object_list[i]`` becomes group rank i's ``obj``, on every rank.

    Args:
      object_list: a list of at least the group's size; filled in place.
      obj: this rank's object (picklable by cloudpickle).
      group: the group (default: all processes).

    Example:
      >>> out = [None] * dist.get_world_size()  # doctest: +SKIP
      >>> dist.all_gather_object(out, {"rank": dist.get_rank()})  # doctest: +SKIP
    """
    fn = "all_gather_object"
    g = resolve(fn, group)
    n, me = g.size(), g.rank()
    _list(fn, "object_list", object_list, n)
    ctx = _call(g)
    data = _dumps(obj, _sender(ctx, g.ranks[me]))
    sizes = np.asarray(all_gather(np.array([data.size], np.int32), group=g)).reshape(n)
    rows = np.asarray(all_gather(_padded([data], int(sizes.max()))[0], group=g))
    for i in range(n):
        object_list[i] = _loads(rows[i, : sizes[i]], _sender(ctx, g.ranks[i]), fn, g.ranks[i])


@members_only
def broadcast_object_list(
    object_list: list[Any],
    src: int | None = None,
    group: ProcessGroup | None = None,
    device: Any = None,
    group_src: int | None = None,
) -> None:
    """Every rank's ``object_list`` becomes ``src``'s (the lists have one length everywhere).

    Args:
      object_list: on ``src`` the objects to send; elsewhere a list of the same
        length, filled in place.
      src: the sender's global rank (default: the group's first rank); or
        ``group_src``, its rank in ``group``.
      group: the group (default: all processes).
      device: accepted for tensorplay compatibility, unused.

    Example:
      >>> objs = [{"seed": 7}] if dist.get_rank() == 0 else [None]  # doctest: +SKIP
      >>> dist.broadcast_object_list(objs, src=0)  # doctest: +SKIP
    """
    fn = "broadcast_object_list"
    g = resolve(fn, group)
    _list(fn, "object_list", object_list)
    root = _root(fn, "src", g, src, group_src)
    ctx = _sender(_call(g), root)
    k, mine = len(object_list), world().rank == root
    datas = [_dumps(o, ctx + b"/%d" % i) for i, o in enumerate(object_list)] if mine else []
    sizes = np.array([d.size for d in datas] if mine else [0] * k, np.int32)
    sizes = np.asarray(broadcast(sizes, root, group=g)).astype(np.int64)
    flat = np.concatenate(datas) if datas else np.zeros(int(sizes.sum()), np.uint8)
    flat = np.asarray(broadcast(flat, root, group=g))
    if not mine:
        ends = np.cumsum(sizes)
        for i in range(k):
            piece = flat[ends[i] - sizes[i] : ends[i]]
            object_list[i] = _loads(piece, ctx + b"/%d" % i, fn, root)


@members_only
def gather_object(
    obj: Any,
    object_gather_list: list[Any] | None = None,
    dst: int | None = None,
    group: ProcessGroup | None = None,
    group_dst: int | None = None,
) -> None:
    """On ``dst``, ``object_gather_list[i]`` becomes group rank i's ``obj``.

    Args:
      obj: this rank's object.
      object_gather_list: on ``dst`` a list of at least the group's size, filled in
        place; elsewhere None (ignored).
      dst: the receiver's global rank (default: the group's first rank); or
        ``group_dst``.
      group: the group (default: all processes).

    Example:
      >>> out = [None] * dist.get_world_size() if dist.get_rank() == 0 else None  # doctest: +SKIP
      >>> dist.gather_object(dist.get_rank() ** 2, out, dst=0)  # doctest: +SKIP
    """
    fn = "gather_object"
    g = resolve(fn, group)
    n, me = g.size(), g.rank()
    root = _root(fn, "dst", g, dst, group_dst)
    if world().rank == root:
        _list(fn, "object_gather_list", object_gather_list, n)
    ctx = _call(g)
    data = _dumps(obj, _sender(ctx, g.ranks[me]))
    sizes = np.asarray(all_gather(np.array([data.size], np.int32), group=g)).reshape(n)
    rows = np.asarray(gather(_padded([data], int(sizes.max()))[0], root, group=g))
    if world().rank == root:
        for i in range(n):
            sender = g.ranks[i]
            object_gather_list[i] = _loads(rows[i, : sizes[i]], _sender(ctx, sender), fn, sender)


@members_only
def scatter_object_list(
    scatter_object_output_list: list[Any],
    scatter_object_input_list: list[Any] | None = None,
    src: int | None = None,
    group: ProcessGroup | None = None,
    group_src: int | None = None,
) -> None:
    """Group rank i's ``scatter_object_output_list[0]`` becomes ``src``'s input item i.

    Args:
      scatter_object_output_list: a non-empty list; item 0 is set in place.
      scatter_object_input_list: on ``src``, one object per group rank; elsewhere
        ignored.
      src: the sender's global rank (default: the group's first rank); or ``group_src``.
      group: the group (default: all processes).

    Example:
      >>> out = [None]  # doctest: +SKIP
      >>> items = ["a", "b"] if dist.get_rank() == 0 else None  # doctest: +SKIP
      >>> dist.scatter_object_list(out, items, src=0)  # doctest: +SKIP
    """
    fn = "scatter_object_list"
    g = resolve(fn, group)
    n, me = g.size(), g.rank()
    _list(fn, "scatter_object_output_list", scatter_object_output_list, 1)
    root = _root(fn, "src", g, src, group_src)
    mine = world().rank == root
    if mine:
        _list(fn, "scatter_object_input_list", scatter_object_input_list, n)
    ctx = _sender(_call(g), root)
    if mine:
        items = list(scatter_object_input_list)[:n]
        datas = [_dumps(o, ctx + b"/%d" % i) for i, o in enumerate(items)]
    sizes = np.array([d.size for d in datas] if mine else [0] * n, np.int32)
    sizes = np.asarray(broadcast(sizes, root, group=g))
    width = int(sizes.max())
    rows = _padded(datas, width) if mine else np.zeros((n, width), np.uint8)
    row = np.asarray(scatter(rows, root, group=g))
    scatter_object_output_list[0] = _loads(row[: sizes[me]], ctx + b"/%d" % me, fn, root)


@members_only
def send_object_list(
    object_list: list[Any],
    dst: int | None = None,
    group: ProcessGroup | None = None,
    device: Any = None,
    group_dst: int | None = None,
    use_batch: bool = False,
) -> None:
    """Send the objects of ``object_list`` to rank ``dst`` (which calls :func:`recv_object_list`).

    Example:
      >>> dist.send_object_list([{"step": 3}], dst=1)  # doctest: +SKIP
    """
    fn = "send_object_list"
    _list(fn, "object_list", object_list)
    _, peer = _peer(fn, "dst", dst, group, group_dst)
    me = world().rank
    ctx = _ctx("p2p", me, peer)
    datas = [_dumps(o, ctx + b"/%d" % i) for i, o in enumerate(object_list)]
    send(np.array([d.size for d in datas], np.int32), peer)
    send(np.concatenate(datas) if datas else np.zeros(0, np.uint8), peer)


@members_only
def recv_object_list(
    object_list: list[Any],
    src: int | None = None,
    group: ProcessGroup | None = None,
    device: Any = None,
    group_src: int | None = None,
    use_batch: bool = False,
) -> int:
    """Fill ``object_list`` (of the sender's length) with the objects rank ``src`` sends.

    Returns:
      The sender's global rank.

    Example:
      >>> got = [None]  # doctest: +SKIP
      >>> dist.recv_object_list(got, src=0)  # doctest: +SKIP
      0
    """
    fn = "recv_object_list"
    _list(fn, "object_list", object_list)
    _, peer = _peer(fn, "src", src, group, group_src)
    ctx = _ctx("p2p", peer, world().rank)
    sizes = np.asarray(recv(np.zeros(len(object_list), np.int32), peer)).astype(np.int64)
    flat = np.asarray(recv(np.zeros(int(sizes.sum()), np.uint8), peer))
    ends = np.cumsum(sizes)
    for i in range(len(object_list)):
        object_list[i] = _loads(flat[ends[i] - sizes[i] : ends[i]], ctx + b"/%d" % i, fn, peer)
    return peer
