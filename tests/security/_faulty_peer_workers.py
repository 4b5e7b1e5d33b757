"""Worker code for test_faulty_peer: a peer that holds the job secret but breaks the protocol.

Two settings, as in ``_shutdown_workers`` and ``_memory_workers`` (whose helpers
this reuses):

- :func:`rref_ids_never_created`: two real workers; ``w1`` uses its own agent
  to send what an honest worker never would: a FORK_ADD and a FORK_DEL for ids
  ``w0`` never created, and a call whose argument is an RRef owned by ``w0``
  with an id it never created (no FORK_ADD before it). ``w1`` reports what
  that call raised and how long ``w0`` kept any record of those ids.
- :func:`descriptor_flood` and :func:`unsealed_segment`: rank 0 is a victim
  worker in a world of one; rank 1 writes same-host frames by hand. They pass
  descriptors no frame claims (with frames that take none, with refused
  shared-memory frames, in the middle of a frame's body), or a shared-memory
  segment that is not sealed against shrinking, which they shrink once the
  victim's function runs (before the fix: SIGBUS). Each side prints one
  ``RESULT {json}`` line.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import socket
import time
from typing import Any

import msgpack
import numpy as np

from tensorplay_jax.distributed import rpc
from tensorplay_jax.rpc import _agent, _codec, _framing, _protocol
from tensorplay_jax.rpc._local import frames, segments
from tests.security import _memory_workers as M
from tests.security import _shutdown_workers as S
from tests.security._common import wait_until

# Ids no worker ever created (see _shutdown_workers.NEVER_CREATED), one per kind of message.
ADD_ID, DEL_ID, ARG_ID = S.NEVER_CREATED + 1, S.NEVER_CREATED + 2, S.NEVER_CREATED + 3
FORK = (0x7FE << 40) | 1  # the fork ids w1 makes up
CALL_WAIT_S = 8.0  # w1's own limits on its call, and on w0 forgetting the ids
INLINE_CALLS = 50  # calls that come with descriptors they do not take
FDS_PER_FRAME = 4
REFUSED_SEGMENTS = 20  # shared-memory frames whose message is malformed
MID_FRAME_PIECES = 64  # pieces of one frame's body, each sent with frames._MAX_FDS descriptors
SEGMENT_FLOATS = 100_000  # 400 KB: a real same-host call sends it through a segment
FD_SLACK = 8  # descriptors the victim may open for itself meanwhile
REPLY_WAIT_S = 10.0  # the victim answers each frame within this


# ---------------------------------------------------------------------- RRef ids


def local_value_of(rref: Any) -> Any:
    return rref.local_value()


def rref_table() -> dict[str, int]:
    """What this worker's RRef table holds: owner records and parked releases."""
    rrefs = _agent.current_agent().rrefs
    return {"owned": len(rrefs.owned_ids()), "parked": len(rrefs._parked)}


def _rref_arg(owner: int, owner_name: str, rref_id: int, fork: int) -> msgpack.ExtType:
    """An RRef as the codec writes it, with no FORK_ADD sent before it."""
    rec = _codec._pack(["RRef", [owner, owner_name, rref_id, fork]], None)
    return msgpack.ExtType(_codec._EXT_REGISTERED, rec)


def rref_ids_never_created() -> None:
    rank, _ = S._init(rpc_timeout=float(os.environ["TPJ_RPC_TIMEOUT"]))
    extra: dict[str, Any] = {}
    if rank == 1:
        agent = _agent.current_agent()
        w0 = agent.peers.by_id[0]
        t0 = time.monotonic()
        agent.call(w0, _protocol.FORK_ADD, extra=(ADD_ID, FORK)).wait(timeout=CALL_WAIT_S)
        agent.call(w0, _protocol.FORK_DEL, extra=(DEL_ID, FORK + 1)).wait(timeout=CALL_WAIT_S)
        arg = _rref_arg(0, "w0", ARG_ID, FORK + 2)
        fut = agent.call(w0, _protocol.CALL, local_value_of, args=(arg,), timeout=CALL_WAIT_S)
        try:
            extra["call"] = f"returned {fut.wait()!r}"
        except Exception as e:
            extra["call"] = f"{type(e).__name__}: {e}"
        extra["call_s"] = round(time.monotonic() - t0, 3)
        # Every record of these ids is gone from w0 within its rpc_timeout (and a bit).
        deadline = time.monotonic() + CALL_WAIT_S
        while (table := rpc.rpc_sync("w0", rref_table)) != {"owned": 0, "parked": 0}:
            if time.monotonic() > deadline:
                break
            time.sleep(S.POLL_S)
        extra["table"] = table
        extra["table_s"] = round(time.monotonic() - t0, 3)
        extra["still_serves"] = rpc.rpc_sync("w0", S.sleep, args=(0,)) == 0
    S._timed_shutdown(rank, **extra)


# ---------------------------------------------------------------------- the same-host socket


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def _send_with_fds(sock: socket.socket, data: bytes, fds: list[int]) -> None:
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
    assert sock.sendmsg([data], anc) == len(data)


def _frame(kind: int, body: bytes) -> bytes:
    return frames._FRAME.pack(len(body), kind) + body


def _call_frame(mid: int) -> bytes:
    env, header = M._request(mid)
    return _frame(frames._INLINE, b"".join(_framing.pack_message(env, header, [])))


def _replies(peer: M._LocalPeer, n: int) -> list[tuple[int, int]]:
    """(kind, message id) of the peer's next ``n`` replies."""
    out = []
    for _ in range(n):
        env = _codec.loads_small(peer.replies.get(timeout=REPLY_WAIT_S))
        out.append((env[0], env[1]))
    return out


def _measure_fds(base: float, agent: Any) -> dict[str, Any]:
    M._wait_for("connected")
    before = fd_count()
    M._mark("counted")
    M._wait_for("sent")
    # Everything sent was read (the peer's probe was answered); the dropped link may
    # still be closing: give its descriptors a few seconds to go.
    deadline = time.monotonic() + 5.0
    while fd_count() > before + FD_SLACK and time.monotonic() < deadline:
        time.sleep(M.POLL_S)
    return {"before": before, "after": fd_count()}


def _attack_fds() -> None:
    peer = M._connect()
    peer.probe()  # the link is up: the victim counts its descriptors with it open
    M._mark("connected")
    M._wait_for("counted")
    spare = os.open("/dev/null", os.O_RDONLY)
    sealed = os.memfd_create("tpj-test-junk", os.MFD_CLOEXEC)
    # 1. Calls (and releases) that take no descriptor come with some: the victim serves
    # the calls and keeps none of the descriptors.
    for mid in range(1, INLINE_CALLS + 1):
        _send_with_fds(peer.sock, _call_frame(mid), [spare] * FDS_PER_FRAME)
    _send_with_fds(peer.sock, _frame(frames._RELEASE, frames._U64.pack(12345)), [spare] * 2)
    # 2. Shared-memory frames with their segment, whose message is malformed: refused,
    # and their segment's descriptor closed.
    for sid in range(REFUSED_SEGMENTS):
        body = frames._U64.pack(sid) + b"not a message"
        _send_with_fds(peer.sock, _frame(frames._SHM, body), [sealed])
    _send_with_fds(peer.sock, _frame(frames._SHM, b"short"), [sealed])  # no segment id
    peer.frame(99, 4, b"junk")  # as M._LocalPeer.probe: its error comes after all the above
    got = _replies(peer, INLINE_CALLS + REFUSED_SEGMENTS + 2)
    # 3. Descriptors in the middle of one frame's body: past a few, the victim drops
    # the link (closing all it got).
    other = M._connect()
    other.probe()
    piece = b"\0" * 1024
    with contextlib.suppress(OSError):  # the victim may have hung up already
        other.sock.sendall(frames._FRAME.pack(len(piece) * MID_FRAME_PIECES, 99))
        for _ in range(MID_FRAME_PIECES):
            _send_with_fds(other.sock, piece, [spare] * frames._MAX_FDS)
    wait_until(lambda: not other.link.alive, REPLY_WAIT_S, "the victim dropping the link")
    os.close(spare)
    os.close(sealed)
    peer.probe()  # the first link still works
    result = {
        "served": sorted(m for k, m in got if k == _protocol.OK),
        "refused": sum(1 for k, m in got if k == _protocol.ERR and m == 0),
        "dropped": not other.link.alive,
    }
    print("RESULT " + json.dumps(result), flush=True)
    M._mark("sent")
    M._wait_for("measured")
    peer.close()


def descriptor_flood() -> None:
    """Rank 1 passes descriptors no frame claims; rank 0 counts its own descriptors."""
    M._run(_measure_fds, _attack_fds)


def hold_then_sum(x: np.ndarray) -> float:
    """Runs on the victim: tells the peer it started, waits until it shrank the segment
    (or a few seconds), then reads the array."""
    M._mark("started")
    with contextlib.suppress(AssertionError):
        M._wait_for("shrunk", timeout=5.0)
    return float(x.sum())


def _segment(n: int, *, sealed: bool) -> int:
    flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealed else 0)
    fd = os.memfd_create("tpj-test-segment", flags)
    os.ftruncate(fd, -(-n // segments._SEGMENT_GRAIN) * segments._SEGMENT_GRAIN)
    if sealed:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def _shm_call(
    peer: M._LocalPeer, mid: int, fn: Any, fd: int, x: np.ndarray, *, fill: bool = True
) -> None:
    """A call of ``fn(x)`` whose array travels in segment ``fd`` (written here if ``fill``)."""
    enc = _codec.encode([fn, [x], {}])
    if fill:
        segments._fill_by_pwrite(fd, enc.buffers)  # a raw descriptor: the plain path
    env = _codec.dumps_small([_protocol.CALL, mid, {}])
    msg = _framing.pack_message(env, enc.header, enc.buffers, with_buffers=False)
    body = frames._U64.pack(mid) + b"".join(msg)
    peer.frame(frames._SHM, len(body), body, fd)


def _first_reply(peer: M._LocalPeer, fd: int) -> tuple[int, int] | None:
    """The victim's first reply; shrinks segment ``fd`` once the victim's function runs."""
    deadline = time.monotonic() + REPLY_WAIT_S
    while time.monotonic() < deadline and peer.link.alive:
        if fd >= 0 and (M._tmp() / "started").exists() and not (M._tmp() / "shrunk").exists():
            os.ftruncate(fd, 0)
            M._mark("shrunk")
        with contextlib.suppress(Exception):
            env = _codec.loads_small(peer.replies.get(timeout=M.POLL_S))
            return env[0], env[1]
    return None


def _measure_nothing(base: float, agent: Any) -> dict[str, Any]:
    M._wait_for("sent")
    return {}


def _attack_unsealed() -> None:
    peer = M._connect()
    x = np.arange(SEGMENT_FLOATS, dtype=np.float32)
    result: dict[str, Any] = {}
    # A segment the peer can still shrink: refused as malformed (an error for message 0).
    fd = _segment(x.nbytes, sealed=False)
    _shm_call(peer, 1, hold_then_sum, fd, x)
    result["unsealed"] = _first_reply(peer, fd)
    os.close(fd)
    # Sealed, but never written: still refused (no memory for bytes that never came).
    y = np.zeros(2 << 20, np.float32)
    fd = _segment(y.nbytes, sealed=True)
    _shm_call(peer, 2, hold_then_sum, fd, y, fill=False)
    result["unwritten"] = _first_reply(peer, fd)
    os.close(fd)
    # A well-formed call through a segment the transport itself made (sealed), then a
    # small one: both served.
    enc = _codec.encode([_sum, [x], {}])
    peer.link.send(_codec.dumps_small([_protocol.CALL, 3, {}]), enc.header, enc.buffers)
    result["sealed"] = _first_reply(peer, -1)
    peer.link.send(*M._request(4))
    result["small"] = _first_reply(peer, -1)
    print("RESULT " + json.dumps(result), flush=True)
    M._mark("sent")
    M._wait_for("measured")
    peer.close()


def _sum(x: np.ndarray) -> float:
    return float(x.sum())


def unsealed_segment() -> None:
    """Rank 1 passes an unsealed segment and shrinks it; rank 0 must refuse it and go on."""
    M._run(_measure_nothing, _attack_unsealed)
