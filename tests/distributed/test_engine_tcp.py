"""The tcp engine's own pieces: its authenticated mesh, and all_reduce across "hosts".

Its collectives on 2, 3 and 4 processes, mismatches and lost peers are tested with
the other engines' (``test_process_group.py``, ``test_process_group_errors.py``).
"""

import socket
import threading
import time

import ml_dtypes
import numpy as np
import pytest

from tensorplay_jax.process_group._tcp_mesh import MAGIC, connect_mesh
from tensorplay_jax.runtime import handshake
from tests._procs import run_and_collect
from tests.distributed import _pg_workers as W


def test_mesh_rejects_a_connection_without_the_secret():
    lst = socket.create_server(("127.0.0.1", 0))
    addr = lst.getsockname()
    got, errors = {}, []

    def serve():
        try:
            got.update(connect_mesh(0, 2, lst, {}, b"job", time.monotonic() + 20))
        except Exception as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=serve)
    t.start()
    rogue = socket.create_connection(addr, timeout=10)
    with pytest.raises(ConnectionError):
        handshake.authenticate(rogue, b"not-the-job", "1", MAGIC)
    rogue.close()
    # The mesh still waits for (and takes) the real member 1.
    real = connect_mesh(1, 2, socket.create_server(("127.0.0.1", 0)), {0: addr}, b"job",
                        time.monotonic() + 20)  # fmt: skip
    t.join(timeout=30)
    assert not errors and list(got) == [1] and list(real) == [0], (errors, got, real)
    for s in [*got.values(), *real.values(), lst]:
        s.close()


def test_member_with_another_secret_cannot_join():
    lst = socket.create_server(("127.0.0.1", 0))
    waited = []

    def serve():
        try:
            connect_mesh(0, 2, lst, {}, b"job", time.monotonic() + 3)
        except TimeoutError as e:
            waited.append(e)

    t = threading.Thread(target=serve)
    t.start()
    with pytest.raises(RuntimeError, match="could not join member 0 of the group"):
        connect_mesh(1, 2, socket.create_server(("127.0.0.1", 0)),
                     {0: lst.getsockname()}, b"other", time.monotonic() + 5)  # fmt: skip
    t.join(timeout=30)
    assert waited, "member 0 accepted a member without the secret"
    lst.close()


def test_mesh_times_out_naming_the_missing_members():
    lst = socket.create_server(("127.0.0.1", 0))
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"no connection from \[1, 2\]"):
        connect_mesh(0, 3, lst, {}, b"job", time.monotonic() + 0.5)
    assert time.monotonic() - t0 < 5
    lst.close()


@pytest.fixture(scope="module")
def hierarchical(tmp_path_factory) -> list[dict]:
    """Every rank's results of one ``tcp_hierarchical`` job: 4 ranks, 2 per "host"."""
    out = tmp_path_factory.mktemp("hier")
    return run_and_collect(W.tcp_hierarchical, 4, out, timeout=240)


def test_hierarchical_engine_has_a_local_group_per_host(hierarchical):
    assert [got["local_n"] for got in hierarchical] == [2, 2, 2, 2]


@pytest.mark.parametrize("dtype", W.HIER_DTYPES, ids=lambda d: np.dtype(d).name)
def test_hierarchical_all_reduce_matches_numpy(hierarchical, dtype):
    n = len(hierarchical)
    tol = 2e-2 if dtype == ml_dtypes.bfloat16 else 1e-6
    for shape in W.HIER_SHAPES:
        stack = np.stack([W.hier_input(k, shape, dtype) for k in range(n)])
        answers = {"sum": stack.sum(0), "max": stack.max(0), "min": stack.min(0)}
        if dtype != np.int32:
            answers["avg"] = stack.astype(np.float64).mean(0)
        for r, got in enumerate(hierarchical):
            for name, want in answers.items():
                y = got[f"{np.dtype(dtype).name}{shape}/{name}"]
                assert y.shape == shape and y.dtype == dtype, (r, shape, name, y.shape, y.dtype)
                np.testing.assert_allclose(
                    y.astype(np.float64), want, rtol=tol, err_msg=f"rank {r} {shape} {name}"
                )


def test_all_reduce_result_held_by_the_caller_survives_the_next_call(hierarchical):
    n = len(hierarchical)
    total = sum(W.hier_input(k, W.HELD_SHAPE, np.float32) for k in range(n))
    for r, got in enumerate(hierarchical):
        for key, scale in (("held/first", 1), ("held/second", 2), ("held/third", 3)):
            np.testing.assert_array_equal(got[key], scale * total, err_msg=f"rank {r} {key}")


def _address(a: np.ndarray) -> int:
    """Where ``a``'s data starts (``a.ctypes`` would tie ``a`` into a reference cycle)."""
    return a.__array_interface__["data"][0]


class _PoolOnly:
    """What ``TcpEngine._result`` reads and writes of an engine: its pool."""

    def __init__(self) -> None:
        self.pool: list = []


def test_a_pooled_result_buffer_is_lent_again_only_once_its_result_is_dropped():
    import gc

    import jax

    from tensorplay_jax.process_group._engine_tcp import TcpEngine
    from tensorplay_jax.runtime.device import to_device

    eng, shape, f32 = _PoolOnly(), (1 << 19,), np.dtype(np.float32)
    first = TcpEngine._result(eng, shape, f32)
    first_at = _address(first)
    held = to_device(first, jax.devices("cpu")[0])  # a jax.Array that may alias it
    del first
    second = TcpEngine._result(eng, shape, f32)
    assert _address(second) != first_at  # the first result is still held
    del held
    gc.collect()  # jax lets go of a host buffer it aliased once its array is collected
    third = TcpEngine._result(eng, shape, f32)
    assert _address(third) == first_at  # dropped: its buffer serves again
    assert not np.shares_memory(second, third)
