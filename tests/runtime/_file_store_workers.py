"""Worker code for the file-store tests: each function runs in every rank (``tests._procs``)."""

from __future__ import annotations

import sys

from tensorplay_jax.runtime.file_store import FileStore
from tests._worker import rank_and_world_size, report

ADDS = 200


def count_together() -> None:
    """Every rank adds 1 to one counter ``ADDS`` times, at once; reports the total it sees."""
    rank, n = rank_and_world_size()
    store = FileStore(sys.argv[1], timeout=60.0)
    for _ in range(ADDS):
        store.add("n", 1)
    store.set(f"done/{rank}", b"1")
    store.wait([f"done/{r}" for r in range(n)])
    report(total=store.add("n", 0))
    store.close()
