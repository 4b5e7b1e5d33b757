"""tensorplay's small queries of the launch and the backends: what torch 2.13 answers.

The expected values are torch's (read from it on this machine; the values and words
are written here, so the tests run without torch).
"""

import jax
import pytest

import tensorplay_jax.distributed as dist


def test_get_node_local_rank_reads_local_rank(monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "2")
    assert dist.get_node_local_rank(fallback_rank=3) == 2


def test_get_node_local_rank_falls_back_or_says_what_is_missing(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("SLURM_LOCALID", raising=False)
    assert dist.get_node_local_rank(fallback_rank=3) == 3
    with pytest.raises(RuntimeError, match=r"LOCAL_RANK is not in the environment\. Consider"):
        dist.get_node_local_rank()


def test_is_torchelastic_launched_is_torchrun_s_run_id(monkeypatch):
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert dist.is_torchelastic_launched() is False
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    assert dist.is_torchelastic_launched() is True


def test_the_default_backend_of_a_device():
    assert dist.get_default_backend_for_device("cpu") == "gloo"
    assert dist.get_default_backend_for_device("cuda") == "nccl"
    assert dist.get_default_backend_for_device("cuda:1") == "nccl"
    assert dist.get_default_backend_for_device(jax.devices("cpu")[0]) == "gloo"
    with pytest.raises(ValueError, match="Default backend not registered for device : meta"):
        dist.get_default_backend_for_device("meta")


def test_supports_complex_is_sum_and_avg_only():
    yes = [dist.ReduceOp.SUM, dist.ReduceOp.AVG]
    no = [dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT, dist.ReduceOp.BAND]
    no += [dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
    assert [dist.supports_complex(op) for op in yes] == [True, True]
    assert [dist.supports_complex(op) for op in no] == [False] * 6


def test_the_error_classes_are_tensorplay_s():
    for name in ("DistBackendError", "DistNetworkError", "DistStoreError"):
        cls = getattr(dist, name)
        assert [c.__name__ for c in cls.__mro__[1:3]] == ["DistError", "RuntimeError"], name


def test_no_process_group_counts_zero():
    assert not dist.is_initialized()
    assert dist.get_pg_count() == 0
