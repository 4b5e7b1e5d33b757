"""Process groups and SPMD programs over ``jax.distributed`` across simulated hosts.

A world that spans hosts runs the TCP engine (``engine="auto"``); a group of the
ranks on one host, the shared-memory one; a group made with ``engine="xla"``, and
send/recv, XLA's gloo collectives on the routable address. Then a ``shard_map`` psum
over the devices of every process.
"""

from __future__ import annotations

import re

import pytest

from tests.multihost import _workers as W


@pytest.mark.parametrize(
    ("hosts", "devices"), [([0, 1], 2), ([0, 0, 1, 1], 1)], ids=["1-per-host", "2-per-host"]
)
def test_collectives_across_hosts(on_hosts, hosts, devices):
    res = on_hosts(W.process_groups, hosts, timeout=180, devices_per_process=devices)
    n = len(hosts)
    for r in res:
        assert f"PG-OK {r.rank}" in r.stdout, str(r)
        assert f"SPMD {r.rank} {n * devices} devices" in r.stdout, str(r)
        groups = dict(re.findall(r"^GROUP (\S+) (\w+)$", r.stdout, re.M))
        assert groups == {"world": "tcp", "host": "shm", "explicit": "xla"}, str(r)
