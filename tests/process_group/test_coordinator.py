"""The process group's coordinator process: a port it cannot take is named, not a crash."""

from __future__ import annotations

import socket

import pytest

from tensorplay_jax.process_group import _coordinator


def test_a_taken_coordinator_port_is_named_in_the_error():
    # jaxlib's coordination service dies of SIGSEGV when it cannot listen; the
    # coordinator must say which port is taken instead of "it did not answer".
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(RuntimeError, match=rf"port {port} on 127\.0\.0\.1 is taken"):
            _coordinator.start(f"127.0.0.1:{port}", f"127.0.0.1:{port}", 1, 10, 10)


def test_an_outgoing_connection_on_the_port_is_named_too():
    # What a busy host does: a client socket of another program holds the port.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as client:
            port = client.getsockname()[1]
            with pytest.raises(RuntimeError, match=rf"port {port} on 127\.0\.0\.1 is taken"):
                _coordinator.start(f"127.0.0.1:{port}", f"127.0.0.1:{port}", 1, 10, 10)
