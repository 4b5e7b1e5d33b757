"""Which address a worker binds and advertises: loopback on one host, a routable one across hosts.

A job *spans hosts* when its rendezvous host (``MASTER_ADDR``) is not a loopback
address, or when fewer processes run on this node than in the job
(``LOCAL_WORLD_SIZE < WORLD_SIZE``, as the launcher sets them). Then every
server a worker runs (the RPC server, gloo's sockets) must listen on, and
publish, an address its peers can reach. :func:`local_address` picks it, first
match wins:

1. ``TENSORPLAY_JAX_LISTEN_ADDR`` (the launcher's ``--listen-addr``): that address;
2. ``TENSORPLAY_JAX_SOCKET_IFNAME`` or ``GLOO_SOCKET_IFNAME`` (``--ifname``): that
   interface's address;
3. a job on one host: ``127.0.0.1``;
4. the source address of this host's route to ``MASTER_ADDR`` (a UDP ``connect``,
   which sends nothing);
5. when ``MASTER_ADDR`` names this very host but resolves to loopback here (the
   master node of a Debian machine, whose name maps to ``127.0.1.1``): the one
   non-loopback interface that is up; with none or several, a clear error
   naming the variables that choose.

Example:
    >>> local_address("127.0.0.1", environ={})
    '127.0.0.1'
    >>> local_address("127.0.0.1", environ={"TENSORPLAY_JAX_LISTEN_ADDR": "198.18.0.7"})
    '198.18.0.7'
"""

from __future__ import annotations

import array
import fcntl
import ipaddress
import os
import socket
import struct
import sys
from collections.abc import Mapping

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.secret import is_loopback
from tensorplay_jax.runtime.settings import LISTEN_ADDR_ENV, SOCKET_IFNAME_ENV

__all__ = [
    "interface_addresses",
    "local_address",
    "net_namespace",
    "spans_hosts",
    "store_bind_host",
]

_SIOCGIFADDR = 0x8915
_SIOCGIFFLAGS = 0x8913
_IFF_UP = 0x1
_IFF_LOOPBACK = 0x8
_CHOOSE = (
    f"set {SOCKET_IFNAME_ENV} (or GLOO_SOCKET_IFNAME) to the interface peers reach this "
    f"host on, or {LISTEN_ADDR_ENV} to its address (launcher: --ifname / --listen-addr)"
)


def spans_hosts(master_addr: str, environ: Mapping[str, str] | None = None) -> bool:
    """True when the job may have workers on other hosts.

    Example:
      >>> spans_hosts("127.0.0.1", environ={})
      False
      >>> spans_hosts("198.18.0.1", environ={})
      True
      >>> spans_hosts("localhost", environ={"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
      True
    """
    if not is_loopback(master_addr):
        return True
    world = settings.get_int("WORLD_SIZE", environ)
    local = settings.get_int("LOCAL_WORLD_SIZE", environ)
    return world is not None and local is not None and local < world


def net_namespace() -> str:
    """This process's network namespace (its inode; empty where unknown).

    Two processes on one kernel but in different network namespaces are, to the
    network, on different hosts (they reach each other only through interfaces).

    Example:
      >>> net_namespace() == net_namespace()
      True
    """
    try:
        return str(os.stat("/proc/self/ns/net").st_ino)
    except OSError:
        return ""


def _ioctl(sock: socket.socket, request: int, name: str) -> bytes:
    buf = array.array("B", struct.pack("256s", name.encode()[:15]))
    fcntl.ioctl(sock.fileno(), request, buf)
    return buf.tobytes()


def interface_addresses(up_only: bool = True) -> dict[str, str]:
    """``{interface name: IPv4 address}`` of this host's interfaces (Linux), loopback included.

    Example:
      >>> interface_addresses().get("lo", "127.0.0.1").startswith("127.")
      True
    """
    out: dict[str, str] = {}
    if not sys.platform.startswith("linux"):
        return out
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                (flags,) = struct.unpack_from("H", _ioctl(s, _SIOCGIFFLAGS, name), 16)
                if up_only and not flags & _IFF_UP:
                    continue
                out[name] = socket.inet_ntoa(_ioctl(s, _SIOCGIFADDR, name)[20:24])
            except OSError:  # no IPv4 address
                continue
    return out


def _interface(name: str, variable: str) -> str:
    found = interface_addresses(up_only=False)
    if name not in found:
        raise ValueError(
            f"{variable}={name!r}: this host has no interface {name!r} with an IPv4 address "
            f"(it has: {', '.join(f'{k} {v}' for k, v in sorted(found.items())) or 'none'})"
        )
    return found[name]


def _route_source(host: str, port: int) -> str | None:
    """The local address the kernel would send from to reach ``host`` (nothing is sent)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    except OSError:
        return None
    for family, _, _, _, sockaddr in infos:
        try:
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect(sockaddr)
                return s.getsockname()[0]
        except OSError:
            continue
    return None


def _only_interface(master_addr: str) -> str:
    up = {k: v for k, v in interface_addresses().items() if not ipaddress.ip_address(v).is_loopback}
    if len(up) == 1:
        return next(iter(up.values()))
    listed = ", ".join(f"{k} {v}" for k, v in sorted(up.items())) or "none"
    raise ValueError(
        f"MASTER_ADDR={master_addr!r} resolves to a loopback address on this host, but the job "
        f"spans hosts, and this host has {len(up)} non-loopback interfaces up ({listed}), "
        f"so the one its peers reach is unclear; {_CHOOSE}"
    )


def local_address(master_addr: str, port: int = 9, environ: Mapping[str, str] | None = None) -> str:
    """The address this worker binds and advertises in a job that meets at ``master_addr``.

    Args:
      master_addr: the rendezvous host (``MASTER_ADDR``).
      port: the rendezvous port (only used to pick a route; nothing is sent).
      environ: the variables to read (default: the process environment).

    Raises:
      ValueError: a named interface does not exist, or the choice is ambiguous
        (the message names the variables that settle it).

    Example:
      >>> local_address("localhost", environ={"GLOO_SOCKET_IFNAME": "lo"})
      '127.0.0.1'
    """
    given = settings.raw(LISTEN_ADDR_ENV, environ)
    if given:
        return given.strip().strip("[]")
    for variable in (SOCKET_IFNAME_ENV, "GLOO_SOCKET_IFNAME"):
        name = settings.raw(variable, environ)
        if name:
            return _interface(name.split(",")[0].strip(), variable)
    if not spans_hosts(master_addr, environ):
        return "127.0.0.1"
    source = _route_source(master_addr.strip("[]"), port)
    if source is not None and not ipaddress.ip_address(source.split("%")[0]).is_loopback:
        return source
    return _only_interface(master_addr)


def store_bind_host(master_addr: str, environ: Mapping[str, str] | None = None) -> str:
    """Where rank 0's rendezvous store listens: ``master_addr``, or every interface when
    the job spans hosts and ``master_addr`` is a name that resolves to loopback here
    (as a Debian host's own name does: other hosts reach it at another address).

    Example:
      >>> store_bind_host("127.0.0.1", environ={})
      '127.0.0.1'
      >>> store_bind_host("localhost", environ={"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"})
      '0.0.0.0'
    """
    if not spans_hosts(master_addr, environ):
        return master_addr
    host = master_addr.strip("[]")
    try:
        ipaddress.ip_address(host)
        return host  # an address: bind exactly it (it must be one of this host's)
    except ValueError:
        pass
    try:
        resolved = [i[4][0] for i in socket.getaddrinfo(host, None)]
    except OSError:
        return master_addr
    if any(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in resolved):
        return "0.0.0.0"
    return master_addr
