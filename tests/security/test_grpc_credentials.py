"""The gRPC stream credential proves the secret without carrying it, and works only once.

A real gRPC server on loopback (the one each worker runs) and a raw client:
someone who recorded a stream's metadata (no TLS) must not be able to open
another stream with it, to this worker or to any other.
"""

from __future__ import annotations

import time

import grpc
import pytest

from tensorplay_jax.rpc import _grpc

SECRET = "the-job-secret"


@pytest.fixture
def server():
    closed: list = []
    srv = _grpc.Server(
        secret=SECRET,
        on_message=lambda *a: None,
        on_malformed=lambda *a: None,
        on_closed=lambda link, reason: closed.append(link.peer),
        max_streams=8,
    )
    port = srv.start("127.0.0.1", 0)
    address = f"127.0.0.1:{port}"
    srv.expect_target(address)
    yield address, closed
    srv.stop(0)


OPENED = grpc.StatusCode.DEADLINE_EXCEEDED  # an accepted stream stays open until our deadline


def _open(address: str, metadata) -> grpc.StatusCode:
    """Open a stream with ``metadata``, send nothing, return how it ended (within 2 s)."""
    with grpc.insecure_channel(address) as channel:
        stream = channel.stream_stream(_grpc.METHOD_PATH)
        try:
            for _ in stream(iter(()), metadata=metadata, timeout=2):
                pass
        except grpc.RpcError as e:
            return e.code()
    return grpc.StatusCode.OK


def test_a_fresh_credential_opens_a_stream_and_names_the_caller(server):
    address, closed = server
    assert _open(address, _grpc.auth_metadata(SECRET, "w7", address)) == OPENED
    deadline = time.monotonic() + 10
    while "w7" not in closed:
        assert time.monotonic() < deadline, closed
        time.sleep(0.02)


def test_the_secret_is_not_in_the_metadata():
    md = dict(_grpc.auth_metadata(SECRET, "w0", "198.18.0.1:1234"))
    assert all(SECRET not in v for v in md.values())


def test_a_recorded_credential_cannot_be_replayed(server):
    address, _ = server
    md = _grpc.auth_metadata(SECRET, "w0", address)
    assert _open(address, md) == OPENED
    assert _open(address, md) == grpc.StatusCode.UNAUTHENTICATED


def test_a_credential_for_another_worker_or_name_is_refused(server):
    address, _ = server
    other = _grpc.auth_metadata(SECRET, "w0", "127.0.0.1:1")  # made for another server
    assert _open(address, other) == grpc.StatusCode.UNAUTHENTICATED
    renamed = dict(_grpc.auth_metadata(SECRET, "w0", address))
    renamed["tpj-worker"] = "w1"  # the caller's name is signed too
    assert _open(address, tuple(renamed.items())) == grpc.StatusCode.UNAUTHENTICATED


def test_stale_wrong_empty_and_missing_credentials_are_refused(server, monkeypatch):
    address, _ = server
    for md in [
        (),
        (("tpj-secret", SECRET),),  # the old clear-text form
        _grpc.auth_metadata("wrong", "w0", address),
        _grpc.auth_metadata("", "w0", address),
        (("tpj-auth", "v1 1 2 3"),),
    ]:
        assert _open(address, md) == grpc.StatusCode.UNAUTHENTICATED, md
    real = time.time
    monkeypatch.setattr(_grpc.time, "time", lambda: real() - 3600)  # an hour-old recording
    stale = _grpc.auth_metadata(SECRET, "w0", address)
    monkeypatch.setattr(_grpc.time, "time", real)
    assert _open(address, stale) == grpc.StatusCode.UNAUTHENTICATED
