"""Fuzzing ``TCPStore``'s server: random requests on one authenticated connection.

Each request (an operation's name, or not, with random arguments; waits bounded to
an instant) gets a reply, ``[0, result]`` or ``[1, kind, message]``, on the same
connection, which serves on; afterwards the store answers an ordinary client.
"""

from __future__ import annotations

import datetime
import os
import socket

import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorplay_jax.distributed as dist
from tensorplay_jax.process_group import _tcp_store
from tensorplay_jax.runtime import handshake
from tests.fuzz._fuzz import fuzz

SECRET = "fuzz-secret"
SECRET_ENV = "TENSORPLAY_JAX_RPC_SECRET"
_ARG = st.one_of(
    st.text(max_size=6),
    st.binary(max_size=6),
    st.integers(-3, 0),  # a wait's timeout too: at most an instant
    st.floats(0, 0.001),
    st.booleans(),
    st.none(),
    st.lists(st.text(max_size=3), max_size=3),
    st.lists(st.binary(max_size=3), max_size=3),
)
_OP = st.one_of(st.sampled_from(sorted(_tcp_store._OPS)), st.text(max_size=8))
_REQUEST = st.one_of(
    st.lists(_ARG, max_size=4).flatmap(lambda args: _OP.map(lambda op: [op, *args])),
    _ARG,
    st.dictionaries(st.text(max_size=3), _ARG, max_size=2),
)


@pytest.fixture(scope="module")
def conn():
    """A master store of this job (its secret set for the module) and a raw connection
    that passed the handshake."""
    old = os.environ.get(SECRET_ENV)
    os.environ[SECRET_ENV] = SECRET
    try:
        store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=5))
        sock = socket.create_connection(("127.0.0.1", store.port), timeout=5)
        handshake.authenticate(sock, SECRET.encode(), "fuzzer", _tcp_store.MAGIC)
        sock.settimeout(5)
        yield store, sock
        sock.close()
    finally:
        if old is None:
            os.environ.pop(SECRET_ENV, None)
        else:
            os.environ[SECRET_ENV] = old


@fuzz(ci=300)
@given(request=_REQUEST)
def test_every_request_gets_a_reply_and_the_connection_serves_on(conn, request):
    store, sock = conn
    _tcp_store._send(sock, request)
    reply = _tcp_store._recv(sock)
    assert isinstance(reply, list) and reply[0] in (0, 1), reply
    if reply[0] == 1:
        assert reply[1] in _tcp_store._RAISE and isinstance(reply[2], str), reply
    # the store still serves an ordinary client afterwards
    store.set("probe", b"ok")
    assert store.get("probe") == b"ok"
