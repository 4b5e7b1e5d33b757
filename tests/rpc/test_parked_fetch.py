"""An owner's parked fetches (``rpc/_rref_table.RRefTable.fetch``) end with their link.

A FETCH of a value not created yet is parked until the value comes; when the requester's
link closes, ``requester_gone`` fails it. The serve that parks it may run after the link
closed (it was queued behind other work): such a fetch must fail at once, or nothing
would ever end it and shutdown would wait on it (``tests/security/test_shutdown_bounds``
saw that on a busy machine: ``shutdown`` timed out with one request outstanding).
"""

from __future__ import annotations

from types import SimpleNamespace

from tensorplay_jax.rpc._errors import RpcPeerError
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._rref_table import RRefTable, _OwnerRecord
from tensorplay_jax.rpc._types import GrpcRpcBackendOptions, WorkerInfo


def _table() -> RRefTable:
    return RRefTable(WorkerInfo("w0", 0), GrpcRpcBackendOptions(), call=lambda *a, **k: None)


def test_a_fetch_whose_link_already_closed_fails_at_once_and_parks_nothing():
    table, record = _table(), _OwnerRecord(7, Future())
    link = SimpleNamespace(peer="w1", alive=False)
    answer = table.fetch(record, link, timeout=0)
    assert answer.done()
    err = answer.exception()
    assert isinstance(err, RpcPeerError) and "'w1' disconnected" in str(err)
    assert record.fetches == 0


def test_a_parked_fetch_fails_when_its_link_closes():
    table, record = _table(), _OwnerRecord(8, Future())
    link = SimpleNamespace(peer="w1", alive=True)
    answer = table.fetch(record, link, timeout=0)
    assert not answer.done() and record.fetches == 1
    link.alive = False
    table.requester_gone(link)
    assert isinstance(answer.exception(), RpcPeerError)
    assert record.fetches == 0
