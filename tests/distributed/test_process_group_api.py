"""What tensorplay scripts call beside the collectives, on 2 and 4 real processes.

Async work handles on every collective, isend/irecv and batch_isend_irecv, the
object collectives, all_gather_into_tensor / reduce_scatter_tensor, rank maps,
new_subgroups, monitored_barrier, GroupMember.WORLD: one launch per world size
runs them all (``_pg_api_workers.api``), each checked against numpy computed from
every rank's input. Engines: XLA programs and TCP on 2 ranks, shared memory on 4.
"""

import numpy as np
import pytest

import tensorplay_jax.distributed as dist
from tests._procs import run_workers
from tests.distributed import _pg_api_workers as W


@pytest.mark.parametrize("nprocs, engine", [(2, "xla"), (4, "shm"), (2, "tcp")])
def test_process_group_api_matches_numpy(nprocs, engine):
    res = run_workers(W.api, nprocs, args=[engine], timeout=280)
    for w in res:
        assert f"API-OK {w.rank}" in w.stdout, str(w)


@pytest.mark.parametrize(
    "call",
    [
        lambda: dist.isend(np.ones(2), dst=1),
        lambda: dist.irecv(np.ones(2), src=1),
        lambda: dist.all_gather_object([None], 1),
        lambda: dist.all_gather_into_tensor(np.ones(2), np.ones(2)),
        lambda: dist.get_process_group_ranks(None),
        lambda: dist.monitored_barrier(),
        lambda: dist.new_subgroups(1),
    ],
)
def test_call_before_init_process_group_raises(call):
    assert not dist.is_initialized() and dist.GroupMember.WORLD is None and dist.is_available()
    with pytest.raises(RuntimeError, match=r"call tensorplay_jax\.distributed\.init_process_group"):
        call()


def test_work_and_future_without_a_job():
    w = dist.Work.completed(3)
    assert w.wait() is True and w.is_completed() and w.result() == 3
    f = dist.Future()
    g = f.then(lambda fut: fut.value() + 1)
    h = g.then(lambda fut: 1 / 0)
    assert not f.done() and not g.done()
    f.set_result(1)
    assert g.wait() == 2 and h.done()
    with pytest.raises(ZeroDivisionError):
        h.wait()
    with pytest.raises(RuntimeError, match="already completed"):
        f.set_result(2)
    # a queued send/recv's future runs the queue when waited on; one that stays pending
    # after that raises (nothing else will set it); a plain Future blocks as torch's does
    with pytest.raises(RuntimeError, match="not done, and nothing in this process will set it"):
        dist.Future(drive=lambda timeout: None).wait()
    with pytest.raises(TimeoutError, match="not done after 0 seconds"):
        dist.Future().wait(timeout=0)
    with pytest.raises(ValueError, match=r"must be tensorplay_jax\.distributed\.isend or irecv"):
        dist.P2POp(print, np.ones(2), 1)
