"""Groups that start late, beside RPC, or through a file, in real processes (as tensorplay's gloo).

tensorplay's RPC suites call ``init_process_group(backend="gloo", init_method=...)``
after RPC is up and tensors were made, often with the same init method as the RPC
(a ``file://`` name by default). Here: a group on the shm and tcp engines started
after JAX work (collectives checked against numpy); the clear error of what needs
JAX's runtime then (the xla engine, nccl); RPC and a group over one ``tcp://``
address or one file, in either order; ``file://`` for both, a second job reusing
the file after a clean shutdown, and files that cannot be used.
"""

from __future__ import annotations

import os
import re
import time

import numpy as np
import pytest

import tensorplay_jax.distributed as dist
from tensorplay_jax.distributed import rpc
from tests._procs import run_and_collect
from tests.distributed import _pg_late_workers as W

N = 2


def _x(rank: int) -> np.ndarray:
    return np.arange(6.0, dtype=np.float32).reshape(2, 3) * (rank + 1)


SUM = sum(_x(r) for r in range(N))


@pytest.fixture(scope="module", params=["shm", "tcp"])
def late(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"late-{request.param}")
    return request.param, run_and_collect(
        W.group_after_jax_work, N, out, args=["tcp", request.param], timeout=180
    )


def test_a_group_started_after_jax_work_runs_on_the_engine_asked_for(late):
    engine, got = late
    assert [g["engine"] for g in got] == [engine] * N


def test_all_reduce_after_jax_work_matches_numpy(late):
    _, got = late
    for g in got:
        np.testing.assert_array_equal(g["all_reduce"], SUM)


def test_barrier_and_send_recv_after_jax_work(late):
    _, got = late
    for r, g in enumerate(got):
        assert g["barrier"]
        np.testing.assert_array_equal(g["recv"], np.full(4, 10.0 * ((r - 1) % N), np.float32))


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
    return run_and_collect(W.runtime_refused_after_jax_work, N, tmp_path_factory.mktemp("refused"))


@pytest.mark.parametrize("what", ["xla", "nccl"])
def test_what_needs_jax_runtime_after_jax_work_names_the_alternative(refused, what):
    asked = "engine='xla'" if what == "xla" else "backend='nccl'"
    for g in refused:
        assert g[what].startswith(f"RuntimeError: init_process_group: {asked} needs JAX's")
        assert "call init_process_group(...) before any JAX work" in g[what]
        assert "use backend='gloo' with engine='auto', 'shm' or 'tcp'" in g[what]
        assert not g[f"{what}/initialized"]


def test_after_the_refusal_a_gloo_group_starts(refused):
    for g in refused:
        np.testing.assert_array_equal(g["auto"], SUM)


def test_a_group_started_while_a_served_call_starts_jax_runs(tmp_path):
    # tensorplay's test_deadlock: rank 2 starts JAX in a served call while it starts the
    # group, and rank 1 waits for that call before it starts the group.
    n = 3
    start = time.monotonic()
    got = run_and_collect(W.group_beside_a_served_first_jax_call, n, tmp_path, timeout=120)
    assert time.monotonic() - start < 60  # the group's timeout: nothing waited it out
    np.testing.assert_array_equal(got[1]["slow_add"], [2.0, 2.0])
    for g in got:
        assert not g["runtime"]  # RPC was up: no rank started JAX's runtime
        np.testing.assert_array_equal(g["all_reduce"], np.full(3, 6.0))


def test_ranks_that_differ_in_jax_work_start_the_group_the_same_way(tmp_path):
    got = run_and_collect(W.group_of_ranks_that_differ_in_jax_work, N, tmp_path, timeout=120)
    assert [g["runtime"] for g in got] == [False] * N
    assert [g["engine"] for g in got] == ["shm"] * N
    for g in got:
        np.testing.assert_array_equal(g["all_reduce"], np.full(3, 3.0))


def test_ranks_without_jax_work_or_rpc_start_jax_runtime(tmp_path):
    got = run_and_collect(W.group_before_jax_work, N, tmp_path, timeout=120)
    assert [(g["runtime"], g["engine"]) for g in got] == [(True, "xla")] * N
    for g in got:
        np.testing.assert_array_equal(g["all_reduce"], np.full(3, 3.0))


@pytest.mark.parametrize("order", ["rpc_then_pg", "pg_then_rpc"])
@pytest.mark.parametrize("where", ["tcp", "file"])
def test_rpc_and_a_group_share_one_init_method(tmp_path, where, order):
    path, out = str(tmp_path / "rdzv"), tmp_path / "out"
    out.mkdir()
    got = run_and_collect(
        W.rpc_and_group, N, out, args=[path if where == "file" else "tcp", order],
        timeout=180,
    )  # fmt: skip
    for r, g in enumerate(got):
        assert tuple(g["rpc"]) == divmod(7 + r, 2)
        np.testing.assert_array_equal(g["all_reduce"], SUM)
    assert not os.path.exists(path)


@pytest.fixture(scope="module")
def file_jobs(tmp_path_factory):
    """A group job, then an RPC job, meeting in one file (pre-created empty, owner-only,
    as tensorplay's test harness hands it over)."""
    base = tmp_path_factory.mktemp("file-jobs")
    path = base / "rdzv"
    path.write_bytes(b"")
    path.chmod(0o600)
    (base / "pg").mkdir()
    (base / "rpc").mkdir()
    first = run_and_collect(W.group_after_jax_work, N, base / "pg", args=[str(path), "auto"])
    left_after_first = path.exists()
    second = run_and_collect(W.rpc_over_file, N, base / "rpc", args=[str(path)])
    return first, left_after_first, second, path.exists()


def test_file_init_process_group_runs_collectives(file_jobs):
    first, _, _, _ = file_jobs
    assert [g["engine"] for g in first] == ["shm"] * N
    for g in first:
        np.testing.assert_array_equal(g["all_reduce"], SUM)


def test_file_is_deleted_after_a_clean_shutdown(file_jobs):
    _, left_after_first, _, left_after_second = file_jobs
    assert not left_after_first and not left_after_second


def test_file_init_rpc_in_a_second_job_reusing_the_file(file_jobs):
    _, _, second, _ = file_jobs
    assert [tuple(g["rpc"]) for g in second] == [divmod(7 + r, 2) for r in range(N)]


def _bad_files(tmp_path):
    afile = tmp_path / "afile"
    afile.write_bytes(b"")
    return {
        "directory": (str(tmp_path), "is a directory; name a file"),
        "unwritable": (str(afile / "store"), "cannot open or create the store file"),
    }


@pytest.mark.parametrize("bad", ["directory", "unwritable"])
def test_init_process_group_bad_file_path_is_a_clear_error(tmp_path, bad):
    path, msg = _bad_files(tmp_path)[bad]
    with pytest.raises(ValueError, match=f"init_process_group: .*{re.escape(msg)}"):
        dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    assert not dist.is_initialized()


@pytest.mark.parametrize("bad", ["directory", "unwritable"])
def test_init_rpc_bad_file_path_is_a_clear_error(tmp_path, bad):
    path, msg = _bad_files(tmp_path)[bad]
    opts = rpc.GrpcRpcBackendOptions(init_method=f"file://{path}")
    with pytest.raises(ValueError, match=f"init_rpc: .*{re.escape(msg)}"):
        rpc.init_rpc("w0", rank=0, world_size=1, rpc_backend_options=opts)
