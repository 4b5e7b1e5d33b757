"""One init-method parser for RPC and process groups; ids packed one way; one device helper."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from tensorplay_jax.runtime import ids
from tensorplay_jax.runtime.device import aligned_empty, to_device
from tensorplay_jax.runtime.file_store import FileStore
from tensorplay_jax.runtime.init_method import release, resolve_init

VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS",
        "SLURM_JOB_NODELIST", "SLURM_NODELIST", "SLURM_JOB_ID")  # fmt: skip


@pytest.fixture
def clean_env(monkeypatch):
    for v in VARS:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


@pytest.mark.parametrize("fn", ["init_rpc", "init_process_group"])
def test_a_world_of_one_meets_itself_on_loopback(clean_env, fn):
    host, port, rank, ws = resolve_init("env://", 0, 1, fn=fn)
    assert (host, rank, ws) == ("127.0.0.1", 0, 1) and port > 0


@pytest.mark.parametrize(
    "args, msg",
    [
        (("ftp://h/x", 0, 2), "init_process_group: init_method='ftp://h/x' is not supported"),
        (("file://relative/x", 0, 2), "must look like 'file:///absolute/path/to/file'"),
        (("file:///tmp/", 0, 2), "must look like 'file:///absolute/path/to/file'"),
        (("tcp://h", 0, 2), "must look like 'tcp://host:port'"),
        (("env://", None, None), "needs MASTER_ADDR and MASTER_PORT in the environment"),
        (("tcp://h:1", None, 2), "rank was not given and RANK is not set"),
        (("tcp://h:1", 0, None), "world_size was not given and WORLD_SIZE is not set"),
        (("tcp://h:1", 2, 2), "need 0 <= rank < world_size, got rank=2, world_size=2"),
    ],
)
def test_errors_name_the_caller_and_the_fix(clean_env, args, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        resolve_init(*args, fn="init_process_group")


def test_env_reads_the_variables_then_slurm(clean_env):
    clean_env.setenv("MASTER_ADDR", "a")
    clean_env.setenv("MASTER_PORT", "5")
    clean_env.setenv("SLURM_PROCID", "1")
    clean_env.setenv("SLURM_NTASKS", "3")
    assert resolve_init("env://", -1, None) == ("a", 5, 1, 3)


def test_file_rank_0_writes_its_address_into_the_file(clean_env, tmp_path):
    path = tmp_path / "rdzv"
    host, port, rank, ws = resolve_init(f"file://{path}", 0, 2, fn="file_test_a")
    assert (host, rank, ws) == ("127.0.0.1", 0, 2) and port > 0
    reader = FileStore(str(path))
    entry = json.loads(reader.get("file_test_a/1/master", timeout=1.0))
    assert (entry["host"], entry["port"]) == (host, port)
    reader.close()
    release("file_test_a")
    assert not path.exists()  # the last handle out deleted the file


def test_file_a_rank_waits_for_rank_0_until_its_timeout(clean_env, tmp_path):
    with pytest.raises(TimeoutError, match=r"rank 0 did not write its address .* within 0.3 s"):
        resolve_init(f"file://{tmp_path / 'rdzv'}", 1, 2, fn="file_test_c", timeout=0.3)
    release("file_test_c")


def test_file_an_address_left_by_a_dead_rank_0_is_not_taken(clean_env, tmp_path):
    path = tmp_path / "rdzv"
    left = FileStore(str(path))  # a killed job's handle: never counted out
    entry = '{"host": "127.0.0.1", "port": 1, "pid": 999999999, "machine": "%s"}'
    from tensorplay_jax.runtime.init_method import _this_machine

    left.set("file_test_d/1/master", entry % _this_machine())
    with pytest.raises(TimeoutError, match="holds the address of a rank 0 that has exited"):
        resolve_init(f"file://{path}", 1, 2, fn="file_test_d", timeout=0.3)
    release("file_test_d")
    left.close()


def test_file_a_directory_is_refused(clean_env, tmp_path):
    with pytest.raises(ValueError, match=r"init_rpc: the store file .* is a directory"):
        resolve_init(f"file://{tmp_path}", 0, 2)


def test_ids_keep_their_bit_layouts():
    assert ids.CONTEXT_ID.pack(7, 9) == (7 << 48) | 9
    assert ids.PASS_ID.pack(7, 9) == (7 << 48) | 9
    assert ids.RREF_ID.pack(7, 9) == (7 << 40) | 9
    assert ids.message_key(7, 9, 1) == (7 << 41) | (9 << 1) | 1
    assert ids.CONTEXT_ID.rank(ids.CONTEXT_ID.pack(3, (1 << 48) + 5)) == 3  # serial masked


def test_to_device_places_and_keeps():
    dev = jax.devices()[0]
    x = np.arange(4, dtype=np.float32)
    y = to_device(x)
    assert not y.committed and y.tolist() == x.tolist()
    z = to_device(x, dev)
    assert z.committed and to_device(z, dev) is z
    assert aligned_empty((3, 5), np.float64).ctypes.data % 64 == 0


def test_a_dynamic_group_reads_no_world_size_from_the_environment(clean_env):
    for k, v in {"MASTER_ADDR": "a", "MASTER_PORT": "5", "RANK": "2", "WORLD_SIZE": "4"}.items():
        clean_env.setenv(k, v)
    assert resolve_init("env://", -1, None, dynamic=True) == ("a", 5, 2, None)
    assert resolve_init("env://", -1, None) == ("a", 5, 2, 4)  # a fixed-size group reads it


@pytest.mark.parametrize(
    "init_method, msg",
    [("tcp://h:1", "rank parameter missing"), ("env://", "environment variable RANK expected")],
)
def test_a_dynamic_group_needs_its_rank_as_tensorplay_says(clean_env, init_method, msg):
    clean_env.setenv("MASTER_ADDR", "a")
    clean_env.setenv("MASTER_PORT", "5")
    if init_method != "env://":
        clean_env.setenv("RANK", "1")  # only env:// reads it
    with pytest.raises(ValueError, match=msg):
        resolve_init(init_method, -1, None, dynamic=True)
