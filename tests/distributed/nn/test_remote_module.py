"""RemoteModule across three worker processes: worker0 drives, worker1 owns, worker2 borrows."""

from __future__ import annotations

from tests.distributed.nn import _workers as W


def test_remote_module_over_rpc(workers):
    res = workers(W.remote_module, 3, timeout=180)
    assert "REMOTE_MODULE_OK" in res[0].stdout, res[0]
