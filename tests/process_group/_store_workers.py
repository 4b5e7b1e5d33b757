"""Worker code for tests/process_group/test_stores.py: stores across real processes.

Rank 0 serves a ``TCPStore`` on ``MASTER_PORT`` (``MASTER_PORT + 1`` is left to
``init_process_group``'s own port pair, chosen by rank 0 through the store).
"""

from __future__ import annotations

import datetime
import os
import time

import numpy as np

import tensorplay_jax.distributed as dist
from tests._worker import hand_back


def _store(rank: int, world: int) -> dist.TCPStore:
    port = int(os.environ["MASTER_PORT"])
    timeout = datetime.timedelta(seconds=30)
    return dist.TCPStore("127.0.0.1", port, world, rank == 0, timeout=timeout)


def meet() -> None:
    """Three processes meet through one TCPStore, start two process groups from it, then
    one from a FileStore."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = _store(rank, world)
    got: dict[str, object] = {}
    # A get waits for a key another process sets later.
    if rank == 1:
        time.sleep(0.5)
        store.set("late", f"from {rank}")
    t0 = time.monotonic()
    got["late"] = store.get("late")
    got["late/waited_s"] = time.monotonic() - t0
    got["tickets"] = store.add("tickets", 1)  # each process draws one number
    store.set(f"done/{rank}", "1")
    store.wait([f"done/{r}" for r in range(world)])
    got["count"] = store.get("tickets")
    # The group's address travels through the store; two groups, one after the other.
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    got["all_reduce"] = np.asarray(dist.all_reduce(np.full(2, rank + 1.0, np.float32)))
    dist.destroy_process_group()
    again = dist.PrefixStore("second", store)
    dist.init_process_group("gloo", store=again, rank=rank, world_size=world)
    got["all_reduce/again"] = np.asarray(dist.all_reduce(np.full(1, 10.0, np.float32)))
    dist.destroy_process_group()
    # And from a file every process opens.
    files = dist.FileStore(os.environ["TPJ_STORE_FILE"], world)
    dist.init_process_group("gloo", store=files, rank=rank, world_size=world)
    got["all_reduce/file"] = np.asarray(dist.all_reduce(np.full(1, rank * 1.0, np.float32)))
    dist.destroy_process_group()
    store.set(f"left/{rank}", "1")
    if rank == 0:  # the master serves until everyone is done with it
        store.wait([f"left/{r}" for r in range(world)])
    hand_back(got)
