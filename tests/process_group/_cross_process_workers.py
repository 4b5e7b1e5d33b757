"""Worker code for tests/process_group/test_cross_process_programs.py."""

from __future__ import annotations

import numpy as np

import tensorplay_jax.distributed as dist
from tests._worker import hand_back


def _blocking_send(x: np.ndarray) -> None:
    dist.send(x, dst=1)


def _queued_recv(like: np.ndarray) -> np.ndarray:
    w = dist.irecv(like, src=0)
    w.wait()
    return np.asarray(w.result())


def collectives_and_p2p() -> None:
    """An all-reduce, then a send and its receive reached through different functions
    (so the two ranks trace the pair's program from different stacks); hands back
    what each rank got."""
    dist.init_process_group("gloo", timeout=30, engine="xla")
    r = dist.get_rank()
    got: dict[str, object] = {}
    got["all_reduce"] = np.asarray(dist.all_reduce(np.full(3, r + 1.0, np.float32)))
    if r == 0:
        _blocking_send(np.arange(4, dtype=np.float32))
    else:
        got["recv"] = _queued_recv(np.zeros(4, np.float32))
    dist.destroy_process_group()
    hand_back(got)
