"""Worker placement: which GPUs each local worker is given (``runtime.placement``).

This host has no GPUs: the tests name GPUs through ``CUDA_VISIBLE_DEVICES``
(what the placement reads first). The started workers of a real job are
checked in ``tests/rpc/test_device_maps.py``, whose job names two GPUs.
"""

from __future__ import annotations

import pytest

from tensorplay_jax.runtime.launch import worker_env
from tensorplay_jax.runtime.placement import placement_env, visible_gpus
from tests._worker import expect

GPUS = ["0", "1", "2", "3"]


def given(env: dict[str, str]) -> str | None:
    return env.get("CUDA_VISIBLE_DEVICES")


@pytest.mark.parametrize("rank", range(4))
def test_auto_gives_each_local_worker_its_own_gpu(rank):
    env = placement_env(rank, 4, "auto", GPUS)
    assert given(env) == GPUS[rank] and env["TENSORPLAY_JAX_LOCAL_DEVICES"] == GPUS[rank]
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" not in env


def test_auto_with_fewer_gpus_than_workers_shares_them_without_preallocation():
    envs = [placement_env(r, 4, "auto", ["0", "1"]) for r in range(4)]
    assert [given(e) for e in envs] == ["0", "1", "0", "1"]
    assert all(e["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false" for e in envs)


def test_k_per_worker_gives_consecutive_gpus():
    assert [given(placement_env(r, 2, 2, GPUS)) for r in range(2)] == ["0,1", "2,3"]


def test_too_few_gpus_for_k_per_worker_raises():
    expect(ValueError, ["devices_per_worker=3", "needs 6 GPUs", "shows 4"],
           placement_env, 0, 2, 3, GPUS)  # fmt: skip


@pytest.mark.parametrize("per_worker, gpus", [(0, GPUS), ("auto", [])], ids=["zero", "no-gpus"])
def test_no_placement_with_zero_or_without_gpus(per_worker, gpus):
    assert placement_env(0, 2, per_worker, gpus) == {}


def test_a_bad_count_raises():
    expect(ValueError, ["devices_per_worker", "'auto', 0"], placement_env, 0, 2, "two", GPUS)


def test_visible_gpus_reads_cuda_visible_devices():
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-a, GPU-b"}) == ["GPU-a", "GPU-b"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_worker_env_places_by_local_rank_and_the_setting():
    extra = {"CUDA_VISIBLE_DEVICES": "4,5,6,7", "TENSORPLAY_JAX_DEVICES_PER_WORKER": "2"}
    env = worker_env(3, 1, 4, 2, "127.0.0.1", 29500, extra)
    assert given(env) == "6,7"
    assert given(worker_env(3, 1, 4, 2, "127.0.0.1", 29500, extra, devices_per_worker=0)) == (
        "4,5,6,7"
    )
