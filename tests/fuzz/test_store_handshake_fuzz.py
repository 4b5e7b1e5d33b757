"""Fuzzing what an outsider or a rank reaches before RPC runs: the handshake and the store.

- ``handshake.accept`` (every authenticated socket's server side) gets random
  client bytes over a real socket pair: it refuses them (None) within its
  timeout, never raises; ``handshake.authenticate`` (the client side) gets a
  random server: it raises one of its documented ``ConnectionError`` types.
- The rendezvous store (a real ``StoreServer`` on loopback) gets random request
  lines on one authenticated connection: each gets a reply (an error naming what
  is wrong), and the connection, and the store, go on serving.
"""

from __future__ import annotations

import json
import socket
import sys
import threading

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from tensorplay_jax.rpc import _rendezvous
from tensorplay_jax.runtime import handshake
from tests._procs import free_port
from tests.fuzz._fuzz import fuzz

SECRET = "fuzz-secret"
MAGIC = b"TPJFUZZ1"
WAIT_S = 5.0


@fuzz(ci=300)
@given(st.binary(max_size=120), st.booleans())
def test_handshake_accept_refuses_random_clients(data, close):
    a, b = socket.socketpair()
    try:
        b.sendall(data)
        if close:
            b.shutdown(socket.SHUT_WR)
        # A silent client is refused at the timeout; one that closed, at once.
        assert handshake.accept(a, SECRET.encode(), MAGIC, timeout=0.005) is None
    finally:
        a.close()
        b.close()


@fuzz(ci=300)
@given(st.one_of(st.binary(max_size=120), st.binary(max_size=80).map(lambda b: MAGIC + b)))
def test_handshake_authenticate_rejects_random_servers(data):
    a, b = socket.socketpair()
    try:
        b.sendall(data)
        b.shutdown(socket.SHUT_WR)
        with pytest.raises(ConnectionError):
            handshake.authenticate(a, SECRET.encode(), "fuzzer", MAGIC, timeout=0.5)
    finally:
        a.close()
        b.close()


# ---------------------------------------------------------------------- the store


class _Store:
    """A store on loopback and one authenticated connection to it, reading line by line."""

    def __init__(self) -> None:
        self.port = free_port()
        self.server = _rendezvous.StoreServer("127.0.0.1", self.port, SECRET)
        self.conn = self.connect()
        self.lock = threading.Lock()

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=WAIT_S)
        handshake.authenticate(sock, SECRET.encode(), "rank 0", _rendezvous.MAGIC, WAIT_S)
        sock.settimeout(WAIT_S)
        return sock

    def ask(self, sock: socket.socket, line: bytes) -> dict:
        sock.sendall(line)
        got = b""
        while not got.endswith(b"\n"):
            piece = sock.recv(65536)
            assert piece, "the store closed the connection"
            got += piece
        return json.loads(got)


@pytest.fixture(scope="module")
def store():
    s = _Store()
    yield s
    s.conn.close()
    s.server.close()


_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda c: st.one_of(
        st.lists(c, max_size=4), st.dictionaries(st.text(max_size=6), c, max_size=4)
    ),
    max_leaves=10,
)
_OPS = ["set", "setnx", "add", "wait", "wait_count", "watch", "hello", "nope", ""]


def _request(op, fields: dict, timeout) -> dict:
    req = {**fields, "op": op}
    if op in ("wait", "wait_count", "watch"):
        req["timeout"] = timeout  # a wait is the op's purpose: a short one here
    return req


requests = st.one_of(
    st.builds(
        _request,
        st.one_of(st.sampled_from(_OPS), _json),
        st.dictionaries(
            st.sampled_from(["k", "v", "keys", "n", "rank", "since"]), _json, max_size=4
        ),
        st.one_of(st.just(0.001), st.text(max_size=3), st.sampled_from([-1, float("nan"), 1e300])),
    ).map(lambda r: json.dumps(r).encode()),
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64).filter(lambda b: b"\n" not in b),
)


@fuzz(ci=300)
@given(requests)
@example(b'{"op": "set"}')  # before: the store dropped the connection without a word
@example(b"[1, 2]")  # before: TypeError in the store's thread
@example(b'{"op": "wait", "keys": {"k": 0}, "timeout": 1e300}')  # before: OverflowError
# Before, each of these had no answer: NaN seconds (a deadline never reached, a wait
# that returns at once: the store's thread spun for ever); a string or false (read as
# "no timeout": a wait for a key nobody sets).
@example(b'{"op": "wait", "keys": {"k": 0}, "timeout": NaN}')
@example(b'{"op": "wait_count", "k": "k", "n": 1, "timeout": NaN}')
@example(b'{"op": "watch", "since": 0, "timeout": NaN}')
@example(b'{"op": "wait", "keys": {"k": 0}, "timeout": ""}')
@example(b'{"op": "wait", "keys": {"k": 0}, "timeout": false}')
def test_store_answers_every_request(store, line):
    with store.lock:
        try:
            reply = store.ask(store.conn, line + b"\n")
        except OSError:
            # The connection is then stuck for every later input, the shrinker's too:
            # this first one is the input to keep (pytest shows what the test printed).
            print(f"no answer to {line!r}", file=sys.stderr)
            raise
        assert isinstance(reply, dict)
        # The connection still serves a good request.
        assert store.ask(store.conn, b'{"op": "set", "k": "fuzz/ok", "v": 1}\n') == {"ok": True}


def test_store_line_past_the_limit_is_answered_then_closed(store):
    sock = store.connect()
    try:
        sock.sendall(b"x" * (_rendezvous.RPC_STORE_MAX_LINE + 10))
        got = b""
        while piece := sock.recv(65536):
            got += piece
        assert b"longer than RPC_STORE_MAX_LINE" in got
    finally:
        sock.close()
    # The store serves on.
    assert store.ask(store.conn, b'{"op": "add", "k": "fuzz/n", "v": 2}\n')["v"] >= 2
