"""``remote(..., timeout=t)``: a creation not confirmed within ``t`` fails the next use.

Every kind of use (``to_here``, the three proxies, passing the RRef on to
``rpc_sync``/``rpc_async``/``remote``) raises an ``RpcTimeoutError`` naming the
owner, the function and the timeout, whether it started before the deadline or
after; within the timeout every use works; the owner frees the values all the
same once the user drops its RRefs.
"""

from __future__ import annotations

from tests.rpc import _rref_workers as W


def test_remote_timeout_fails_every_later_use_and_leaks_nothing(workers):
    res = workers(W.remote_timeout, 3, timeout=180)
    out = res[0].stdout
    for line in ("OVERDUE-OK", "LATE-OK", "IN-TIME-OK", "NO-LEAK-OK"):
        assert line in out, res[0]
    assert all(f"DONE {r.rank}" in r.stdout for r in res)
