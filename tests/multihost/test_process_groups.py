"""Process groups and SPMD programs over ``jax.distributed`` across simulated hosts.

A world that spans hosts runs the TCP engine (``engine="auto"``); a group of the
ranks on one host, the shared-memory one; a group made with ``engine="xla"``, and
send/recv, XLA's gloo collectives on the routable address. Then a ``shard_map`` psum
over the devices of every process.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests._procs import collected, run_on_hosts
from tests._worker import OUT_DIR
from tests.multihost import _workers as W

LAYOUTS = {"1-per-host": ([0, 1], 2), "2-per-host": ([0, 0, 1, 1], 1)}  # hosts, devices


@pytest.fixture(scope="module", params=list(LAYOUTS))
def job(request, cluster, tmp_path_factory) -> tuple[list[int], int, list[dict]]:
    """``(hosts, devices per process, every rank's results)`` of one ``process_groups`` job."""
    hosts, devices = LAYOUTS[request.param]
    out = tmp_path_factory.mktemp(f"pg-{request.param}")
    res = run_on_hosts(
        cluster, W.process_groups, hosts, timeout=180, devices_per_process=devices,
        env={OUT_DIR: str(out)},
    )  # fmt: skip
    return hosts, devices, collected(out, res)


def _close(got: object, want: object) -> None:
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)


def test_world_collectives_across_hosts(job):
    hosts, _, got = job
    xs = [W.pg_input(k) for k in range(len(hosts))]
    for seen in got:
        _close(seen["all_reduce"], np.sum(xs, 0))
        _close(seen["all_reduce_max"], np.max(xs, 0))
        for root, y in enumerate(seen["broadcast"]):
            _close(y, xs[root])
        _close(seen["all_gather"], np.stack(xs))


def test_group_of_the_ranks_on_one_host(job):
    hosts, _, got = job
    for r, seen in enumerate(got):
        members = [k for k in range(len(hosts)) if hosts[k] == hosts[r]]
        _close(seen["host_all_reduce"], np.sum([W.pg_input(k) for k in members], 0))


def test_explicit_xla_group_and_send_recv_across_hosts(job):
    hosts, _, got = job
    n = len(hosts)
    for seen in got:
        _close(seen["xla_all_reduce"], np.sum([W.pg_input(k) for k in range(n)], 0))
    _close(got[n - 1]["recv"], W.pg_input(0))


def test_engines_tcp_across_hosts_shm_on_one_xla_when_asked(job):
    for r, seen in enumerate(job[2]):
        engines = {k.split("/")[1]: v for k, v in seen.items() if k.startswith("engine/")}
        assert engines == {"world": "tcp", "host": "shm", "explicit": "xla"}, r


def test_spmd_psum_over_the_devices_of_every_process(job):
    hosts, devices, got = job
    nd = len(hosts) * devices
    for seen in got:
        assert seen["devices"] == [nd, devices]
        assert len(seen["spmd_shards"]) == devices
        for shard in seen["spmd_shards"]:
            _close(shard, W.spmd_blocks(nd).sum(0, keepdims=True))
