"""A malformed frame from an authenticated peer gets an answer at once, on every transport.

The worker either skips the frame and answers with an error naming what was
wrong (the stream's framing is intact), or, where the framing is lost (a
declared length no host could hold), answers so and closes the connection:
the peer never waits out a timeout. Either way the worker goes on serving.
Frames are written by hand over real sockets (``tests/fuzz/_peers``) to a
real worker process (``w1`` of a two-worker job whose ``w0`` is this process).
"""

from __future__ import annotations

import contextlib
import struct
import time

import pytest

from tensorplay_jax import rpc
from tensorplay_jax.rpc import _codec, _framing, _local
from tensorplay_jax.rpc._local import frames
from tests.fuzz import _peers as P
from tests.rpc import _targets
from tests.rpc._jobs import rpc_job

ANSWER_S = 5.0  # the peer hears back within this (a loaded 2-core machine included)
GOOD_MID = 7


def _envelope_cases() -> dict[str, tuple[bytes, bytes]]:
    env, header = P.call_message(GOOD_MID + 1)
    return {
        "invalid envelope": (b"\xc1not msgpack", header),
        "envelope not a list": (_codec.dumps_small("call"), header),
        "envelope of wrong types": (_codec.dumps_small(["1", None, 3]), header),
        "undecodable header": (env, b"\xc1\xc1"),
    }


def _socket_cases(transport: str) -> dict[str, tuple[bytes, str]]:
    env, header = P.call_message(GOOD_MID + 1)
    msg = b"".join(_framing.pack_message(env, header, []))
    cases = {
        "length 2^62": (P.frame(frames._INLINE, b"", length=1 << 62), str(1 << 62)),
        "unknown frame kind": (P.frame(99, b"junk"), "unknown frame kind 99"),
        "truncated INLINE": (P.frame(frames._INLINE, msg[:-3]), "truncated"),
        "INLINE prelude only": (P.frame(frames._INLINE, msg[:5]), "malformed"),
        "empty INLINE": (P.frame(frames._INLINE, b""), "malformed"),
    }
    for name, (e, h) in _envelope_cases().items():
        cases[name] = (P.inline(e, h), "malformed")
    if transport == "local":
        cases["RELEASE of unknown segments"] = (
            P.frame(frames._RELEASE, struct.pack("<2Q", 12345, 1 << 63)),
            "unknown segment",
        )
        cases["RELEASE of odd length"] = (P.frame(frames._RELEASE, b"abc"), "multiple of 8")
        cases["SHM without its segment"] = (
            P.frame(frames._SHM, struct.pack("<Q", 1) + msg),
            "without its segment",
        )
    else:
        cases["unknown kind 2"] = (P.frame(2, b"x" * 16), "unknown frame kind 2")
    return cases


def _grpc_cases() -> dict[str, tuple[bytes, str]]:
    env, header = P.call_message(GOOD_MID + 1)
    small = P.small_packet(env, header)
    cases = {
        "empty packet": (b"", "empty packet"),
        "unknown packet kind": (b"\x09junk", "unknown packet kind 9"),
        "truncated SMALL": (small[:-3], "truncated"),
        "CHUNK of unknown transfer": (
            _framing._CHUNK_HDR.pack(_framing._CHUNK, 99, 0, 0) + b"x",
            "unknown transfer 99",
        ),
        "BEGIN with 2^62 buffers": (
            _framing._BEGIN_HDR.pack(_framing._BEGIN, 5) + struct.pack("<III", 1, 1, 1 << 30),
            "malformed",
        ),
    }
    for name, (e, h) in _envelope_cases().items():
        cases[name] = (P.small_packet(e, h), "malformed")
    return cases


def _cases(transport: str) -> dict[str, tuple[bytes, str]]:
    return _grpc_cases() if transport == "grpc" else _socket_cases(transport)


TRANSPORTS = [t for t in ("local", "tcp", "grpc") if t != "local" or _local.available()]


class _Victims:
    """One job at a time (this process can join one): ``w1`` of the job on ``transport``."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self.transport = ""
        self.entry = None

    def on(self, transport: str) -> object:
        """``w1``'s address on ``transport`` (the job on another transport ends first)."""
        if transport != self.transport:
            self.close()
            self._stack.enter_context(rpc_job(2, transport))
            entry = rpc.rpc_sync("w1", _advertised)[transport]
            self.entry = entry[1] if transport == "local" else entry
            if transport == "tcp" and not isinstance(entry, str):
                self.entry = f"{entry[0]}:{entry[1]}"
            self.transport = transport
        return self.entry

    def close(self) -> None:
        self.transport = ""
        self._stack.close()


@pytest.fixture(scope="module")
def victims():
    v = _Victims()
    yield v
    v.close()


def _advertised() -> dict:
    from tensorplay_jax.rpc import _agent

    return _agent.current_agent().connections.advertised()


CASES = [(t, name) for t in TRANSPORTS for name in _cases(t)]


@pytest.mark.parametrize(("transport", "case"), CASES, ids=[f"{t}-{c}" for t, c in CASES])
def test_malformed_frame_is_answered_at_once_and_the_worker_serves_on(victims, transport, case):
    entry = victims.on(transport)
    data, named = _cases(transport)[case]
    peer = P.RawPeer(transport, entry)
    try:
        t0 = time.monotonic()
        peer.send_raw(data)
        with contextlib.suppress(OSError):  # the worker may have hung up already
            peer.send_call(GOOD_MID, 20, 22)
        errors, value = peer.outcome(GOOD_MID, timeout=ANSWER_S, errors_first=True)
        took = time.monotonic() - t0
    finally:
        peer.close()
    # Skipped and answered (the call after it ran), or answered and closed: never silence.
    assert errors, (case, value, peer.reason)
    assert named in errors[0], (case, errors)
    assert value in (42, None), (case, value)
    if value is None:
        assert peer.closed.is_set()
    assert took < ANSWER_S
    # The worker still serves: a new raw connection, and this process's own agent.
    again = P.RawPeer(transport, entry)
    try:
        again.send_call(GOOD_MID, 1, 2)
        assert again.outcome(GOOD_MID, timeout=ANSWER_S) == ([], 3)
    finally:
        again.close()
    assert rpc.rpc_sync("w1", _targets.add, args=(2, 3), timeout=ANSWER_S) == 5


def _garbage_on(link: object, transport: str) -> None:
    """Send what ``w1`` cannot read on this process's own link to it."""
    if transport == "grpc":
        # The outbox sends it as a batch of small messages whose first one is 3 bytes long:
        # too short for a message's prelude.
        link.outbox._q.put(_framing._U32.pack(3) + b"abc")
    else:
        link._write(P.frame(99, b"junk"), -1)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_peer_whose_message_was_unreadable_fails_its_pending_calls_at_once(victims, transport):
    # Before: the worker answered with an error for message id 0, which the caller dropped;
    # its pending call on that link waited out its timeout.
    victims.on(transport)
    from tensorplay_jax.rpc import _agent

    agent = _agent.current_agent()
    # w1 has imported the function (an import would hold up its answer to the garbage).
    assert rpc.rpc_sync("w1", _targets.sleep, args=(0.0,), timeout=ANSWER_S) == 0.0
    fut = rpc.rpc_async("w1", _targets.sleep, args=(2.0,), timeout=60)
    link = agent.peers.links[agent.resolve("w1", "test").id]
    t0 = time.monotonic()
    _garbage_on(link, transport)
    with pytest.raises(rpc.RpcPeerError) as info:
        fut.wait()
    took = time.monotonic() - t0
    assert took < 1.5, took
    msg = str(info.value)
    assert "protocol error: worker 'w1' could not read a message" in msg, msg
    assert "malformed" in msg, msg
    # A new link to w1 serves.
    assert rpc.rpc_sync("w1", _targets.add, args=(2, 3), timeout=ANSWER_S) == 5


def _worker_counts() -> dict[str, int]:
    """w1's open descriptors, and its threads for connections from the fuzzer (their names
    hold the peer's name; the pools' threads, which stay, do not)."""
    import os
    import threading

    mine = [t.name for t in threading.enumerate() if P.ME in t.name]
    return {"fds": len(os.listdir("/proc/self/fd")), "fuzzer_threads": len(mine)}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_random_frames_through_a_real_socket_leave_the_worker_serving(victims, transport):
    from hypothesis import given

    from tests.fuzz import test_framing_fuzz as F
    from tests.fuzz._fuzz import fuzz

    entry = victims.on(transport)
    checker = P.RawPeer(transport, entry)
    mids = iter(range(1000, 1 << 62))
    before = rpc.rpc_sync("w1", _worker_counts, timeout=ANSWER_S)

    @fuzz(ci=40)
    @given(F.st.lists(F.packets if transport == "grpc" else F.frames, max_size=4))
    def feed(seq):
        peer = P.RawPeer(transport, entry)
        try:
            for data in seq:
                with contextlib.suppress(OSError):  # the worker may hang up
                    peer.send_raw(data)
        finally:
            peer.close()  # a frame left half-sent ends with the connection
        mid = next(mids)
        checker.send_call(mid, mid, 1)
        assert checker.outcome(mid, timeout=ANSWER_S)[1] == mid + 1

    try:
        feed()
    finally:
        checker.close()
    assert rpc.rpc_sync("w1", _targets.add, args=(2, 3), timeout=ANSWER_S) == 5
    # What the connections held is gone: their descriptors and threads.
    deadline = time.monotonic() + 2 * ANSWER_S
    while True:
        after = rpc.rpc_sync("w1", _worker_counts, timeout=ANSWER_S)
        if after["fds"] <= before["fds"] and after["fuzzer_threads"] == 0:
            break
        assert time.monotonic() < deadline, (before, after)
        time.sleep(0.05)
