"""Simulated hosts on one Linux machine: network namespaces joined by a bridge.

Each host is a network namespace with one interface, ``eth0``, on a private
bridge, an address from ``198.18.0.0/15`` (RFC 2544's benchmarking range,
never routed), its own host name, and its own ``/etc/hosts`` in which that
name resolves to ``127.0.1.1``, as on a stock Debian machine (so a program
that advertises its host name's address fails here as it would there).
Commands run inside a host through :meth:`Cluster.command`
(``ip netns exec`` + ``unshare --uts``). Needs root and ``ip``; see
:func:`unavailable`.

Names are unique per cluster (``tpj<pid>x<n>``), so concurrent runs do not
collide, and :meth:`Cluster.down` always removes everything (it also runs at
interpreter exit, and a new cluster removes the leftovers of dead owners).

From a shell::

    python -m tensorplay_jax.testing.netns up --hosts 2     # prints the names
    ip netns exec tpj123x0h0 unshare --uts sh -c 'hostname tpj123x0h0; exec bash'
    python -m tensorplay_jax.testing.netns down tpj123x0

Example:
    >>> c = Cluster(2)
    >>> c.addresses
    ['198.18.0.1', '198.18.0.2']
    >>> c.command(1, ["python", "-V"])[:4] == ["ip", "netns", "exec", c.hosts[1]]
    True
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import itertools
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence

from tensorplay_jax.runtime.launch import pid_alive

__all__ = ["Cluster", "unavailable"]

_NETWORK = "198.18.0"  # /24 on each cluster's own bridge (namespaces isolate clusters)
_NAME = re.compile(r"^tpj(\d+)x(\d+)")
_count = itertools.count()


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def unavailable() -> str | None:
    """Why simulated hosts cannot be built here (None when they can).

    Example:
      >>> unavailable() is None or "root" in unavailable() or "ip" in unavailable()
      True
    """
    if sys.platform != "linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"network namespaces need the '{tool}' command"
    return None


class Cluster:
    """``hosts`` simulated hosts, ``<name>h0``, ``<name>h1``..., at ``198.18.0.1``, ``.2``...

    Use as a context manager (``with Cluster(2) as c:``) or call :meth:`up` and
    :meth:`down`. Host ``i``'s interface is ``eth0`` inside its namespace and
    ``<name>v<i>`` on the bridge side.
    """

    def __init__(self, hosts: int, name: str | None = None) -> None:
        if not 1 <= hosts <= 250:
            raise ValueError(f"Cluster: hosts={hosts} must be in [1, 250]")
        self.name = name or f"tpj{os.getpid()}x{next(_count)}"
        if len(self.name) > 11:
            raise ValueError(f"Cluster: name {self.name!r} is longer than 11 characters")
        self.hosts = [f"{self.name}h{i}" for i in range(hosts)]
        self.addresses = [f"{_NETWORK}.{i + 1}" for i in range(hosts)]
        self.bridge = f"{self.name}br"
        self._up = False

    def __enter__(self) -> Cluster:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> Cluster:
        """Create the bridge, the namespaces, their links and ``/etc/hosts`` files."""
        why = unavailable()
        if why:
            raise RuntimeError(f"Cluster.up: {why}")
        reap()
        self._up = True
        atexit.register(self.down)
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("link", "set", self.bridge, "up")
            table = "".join(f"{a} {h}\n" for a, h in zip(self.addresses, self.hosts, strict=False))
            for i, (host, addr) in enumerate(zip(self.hosts, self.addresses, strict=False)):
                _ip("netns", "add", host)
                _ip(
                    "link",
                    "add",
                    self.veth(i),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    "eth0",
                    "netns",
                    host,
                )
                _ip("link", "set", self.veth(i), "master", self.bridge, "up")
                _ip("-n", host, "addr", "add", f"{addr}/24", "dev", "eth0")
                _ip("-n", host, "link", "set", "eth0", "up")
                _ip("-n", host, "link", "set", "lo", "up")
                os.makedirs(f"/etc/netns/{host}", exist_ok=True)
                with open(f"/etc/netns/{host}/hosts", "w") as f:
                    f.write(f"127.0.0.1 localhost\n127.0.1.1 {host}\n::1 localhost\n{table}")
        except BaseException:
            self.down()
            raise
        return self

    def veth(self, i: int) -> str:
        """The bridge-side interface of host ``i`` (take it down to cut the host off)."""
        return f"{self.name}v{i}"

    def command(self, i: int, argv: Sequence[str]) -> list[str]:
        """``argv`` to run on host ``i``: in its namespace, with its own host name.

        Example:
          >>> Cluster(1, name="tpjdoc").command(0, ["true"])[-3:]
          ['hostname "$0" && exec "$@"', 'tpjdoch0', 'true']
        """
        host = self.hosts[i]
        return ["ip", "netns", "exec", host, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', host, *argv]  # fmt: skip

    def link(self, i: int, up: bool) -> None:
        """Connect (``up=True``) or cut off host ``i`` from the bridge."""
        _ip("link", "set", self.veth(i), "up" if up else "down")

    def kill(self, i: int, sig: int = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every process on host ``i``; returns their pids."""
        got = _ip("netns", "pids", self.hosts[i], check=False).stdout.split()
        pids = [int(p) for p in got]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    def down(self) -> None:
        """Kill what runs on the hosts and remove the namespaces, links and files (idempotent)."""
        if not self._up:
            return
        self._up = False
        _remove(self.name, len(self.hosts))


def _remove(name: str, hosts: int | None = None) -> None:
    listed = _ip("netns", "list", check=False).stdout.split()
    mine = [n for n in listed if re.fullmatch(rf"{re.escape(name)}h\d+", n)]
    for host in mine:
        for pid in _ip("netns", "pids", host, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "del", host, check=False)
        shutil.rmtree(f"/etc/netns/{host}", ignore_errors=True)
    _ip("link", "del", f"{name}br", check=False)


def reap() -> list[str]:
    """Remove the clusters whose owning process is gone; returns their names."""
    gone: set[str] = set()
    for n in _ip("netns", "list", check=False).stdout.split():
        m = _NAME.match(n)
        if m and not pid_alive(int(m.group(1))):
            gone.add(f"tpj{m.group(1)}x{m.group(2)}")
    for name in sorted(gone):
        _remove(name)
    return sorted(gone)


def main(argv: Sequence[str] | None = None) -> int:
    """``up --hosts N`` (keeps the cluster until ``down NAME``), ``down NAME`` or ``reap``."""
    p = argparse.ArgumentParser(prog="python -m tensorplay_jax.testing.netns")
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="create N simulated hosts and print how to use them")
    up.add_argument("--hosts", type=int, default=2)
    down = sub.add_parser("down", help="remove a cluster made by 'up'")
    down.add_argument("name")
    sub.add_parser("reap", help="remove clusters whose owner process is gone")
    a = p.parse_args(argv)
    if a.cmd == "down":
        _remove(a.name)
        return 0
    if a.cmd == "reap":
        print(" ".join(reap()))
        return 0
    # The name must not look owned by this short-lived process, or the next reap removes it.
    c = Cluster(a.hosts, name=f"tpj0x{os.getpid() % 100000}").up()
    atexit.unregister(c.down)
    for i, (host, addr) in enumerate(zip(c.hosts, c.addresses, strict=False)):
        print(f"host {i}: {host} at {addr}: {shlex.join(c.command(i, ['bash']))}")
    print(f"remove with: python -m tensorplay_jax.testing.netns down {c.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
