"""Transports as plug-ins (``rpc/transports``): the registry, the options, an added one."""

from __future__ import annotations

import json

import pytest

from tensorplay_jax.rpc import GrpcRpcBackendOptions, transports
from tests.rpc import _transport_workers as W


def _result(stdout: str) -> dict:
    (line,) = [ln for ln in stdout.splitlines() if ln.startswith(W.RESULT)]
    return json.loads(line[len(W.RESULT) :])


def test_the_built_in_transports_are_registered():
    assert {"local", "tcp", "grpc"} <= set(transports.registered_transports())


@pytest.mark.parametrize(
    "local, tcp, expected",
    [
        (None, None, ["local", "tcp", "grpc"]),
        ("0", None, ["tcp", "grpc"]),
        (None, "0", ["local", "grpc"]),
        ("0", "0", ["grpc"]),
    ],
)
def test_the_default_list_follows_the_environment(monkeypatch, local, tcp, expected):
    for var, value in (("TENSORPLAY_JAX_RPC_LOCAL", local), ("TENSORPLAY_JAX_RPC_TCP", tcp)):
        if value is None:
            monkeypatch.delenv(var, raising=False)
        else:
            monkeypatch.setenv(var, value)
    assert transports.default_transports() == expected


def test_options_take_a_list_of_names():
    assert GrpcRpcBackendOptions().transports is None  # the environment's defaults
    assert GrpcRpcBackendOptions(transports=("tcp", "grpc")).transports == ["tcp", "grpc"]


def test_an_unknown_transport_name_is_a_clear_error():
    with pytest.raises(ValueError) as e:
        GrpcRpcBackendOptions(transports=["grpc", "carrier-pigeon"])
    msg = str(e.value)
    assert "GrpcRpcBackendOptions: unknown transport 'carrier-pigeon'" in msg
    assert "'local'" in msg and "'tcp'" in msg and "'grpc'" in msg  # the registered ones
    assert "register_transport" in msg


@pytest.mark.parametrize("names", [[], ["tcp", "tcp"]])
def test_an_empty_or_repeating_list_is_an_error(names):
    with pytest.raises(ValueError, match="must name at least one transport, each once"):
        GrpcRpcBackendOptions(transports=names)


def test_a_name_is_registered_once():
    with pytest.raises(ValueError, match="a transport named 'grpc' is registered already"):
        transports.register_transport("grpc", object)  # type: ignore[arg-type]


def test_an_added_transport_carries_real_rpcs_between_two_processes(workers):
    res = workers(W.counted_calls, 2, timeout=180)
    for rank, r in enumerate(res):
        seen = _result(r.stdout)
        assert seen["sums"] == [rank + i for i in range(5)], seen
        assert seen["big_back"], seen
        assert seen["served"] == ["counting", "grpc"], seen
        assert seen["advertised"] == ["counting", "grpc"], seen
        assert seen["link"] == "TcpLink", seen  # through the added transport, not gRPC
        assert seen["connects"] == 1, seen  # one link to the peer, kept for every call
