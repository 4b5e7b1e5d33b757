"""Which address a worker binds and advertises (runtime/address.py), checked without traffic.

The cross-host behaviour itself (two simulated hosts, no options) is in tests/multihost/.
"""

from __future__ import annotations

import ipaddress
import socket

import pytest

from tensorplay_jax.runtime import address


def _ifaces() -> dict[str, str]:
    return address.interface_addresses()


def test_loopback_job_stays_on_loopback() -> None:
    assert address.local_address("127.0.0.1", environ={}) == "127.0.0.1"
    assert address.local_address("localhost", environ={"WORLD_SIZE": "2"}) == "127.0.0.1"
    assert not address.spans_hosts("localhost", environ={"WORLD_SIZE": "2"})
    assert address.store_bind_host("127.0.0.1", environ={}) == "127.0.0.1"


def test_local_world_smaller_than_world_spans_hosts() -> None:
    env = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    assert address.spans_hosts("127.0.0.1", environ=env)
    assert not address.spans_hosts("127.0.0.1", environ={**env, "LOCAL_WORLD_SIZE": "4"})


def test_explicit_address_wins_over_everything() -> None:
    env = {"TENSORPLAY_JAX_LISTEN_ADDR": "[fd00::7]", "GLOO_SOCKET_IFNAME": "lo"}
    assert address.local_address("198.18.0.1", environ=env) == "fd00::7"


@pytest.mark.parametrize("variable", ["TENSORPLAY_JAX_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"])
def test_interface_variables_pick_that_interface(variable: str) -> None:
    assert address.local_address("198.18.0.1", environ={variable: "lo"}) == "127.0.0.1"


def test_ours_before_gloos() -> None:
    env = {"TENSORPLAY_JAX_SOCKET_IFNAME": "lo", "GLOO_SOCKET_IFNAME": "no-such-if0"}
    assert address.local_address("198.18.0.1", environ=env) == "127.0.0.1"


def test_unknown_interface_names_the_variable_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"GLOO_SOCKET_IFNAME='nope0'.*lo 127\.0\.0\.1"):
        address.local_address("198.18.0.1", environ={"GLOO_SOCKET_IFNAME": "nope0"})


def test_route_to_master_picks_a_non_loopback_interface_address() -> None:
    others = {k: v for k, v in _ifaces().items() if not ipaddress.ip_address(v).is_loopback}
    if not others:
        pytest.skip("this host has no non-loopback IPv4 interface")
    # A UDP connect only consults the routing table; nothing is sent.
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("198.18.0.1", 9))
            expected = s.getsockname()[0]
    except OSError:
        pytest.skip("no route to 198.18.0.0/15 here")
    assert address.local_address("198.18.0.1", environ={}) == expected
    assert expected in others.values()


def test_store_binds_everywhere_when_the_master_name_is_loopback_here() -> None:
    env = {"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    assert address.store_bind_host("localhost", environ=env) == "0.0.0.0"
    assert address.store_bind_host("198.18.0.1", environ=env) == "198.18.0.1"


def test_interfaces_include_loopback() -> None:
    assert _ifaces().get("lo") == "127.0.0.1"
    assert address.net_namespace() == address.net_namespace()
