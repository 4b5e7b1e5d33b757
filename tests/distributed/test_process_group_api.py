"""What tensorplay scripts call beside the collectives, on 2 and 4 real processes.

Async work handles on every collective, isend/irecv and batch_isend_irecv, the
object collectives, all_gather_into_tensor / reduce_scatter_tensor, rank maps,
new_subgroups, monitored_barrier, GroupMember.WORLD: one launch per world size
runs them all (``_pg_api_workers.api``), each checked against numpy computed from
every rank's input. Two engines: XLA programs on 2 ranks, shared memory on 4.
"""

import pytest

from tests._procs import run_workers
from tests.distributed import _pg_api_workers as W


@pytest.mark.parametrize("nprocs, engine", [(2, "xla"), (4, "shm")])
def test_process_group_api_matches_numpy(nprocs, engine):
    res = run_workers(W.api, nprocs, args=[engine], timeout=280)
    for w in res:
        assert f"API-OK {w.rank}" in w.stdout, str(w)
