"""``RRef.backward(dist_autograd_ctx_id=-1, retain_graph=False)`` over real processes.

Gradients are checked against ``jax.grad`` of the same computation: a user RRef
(the pass starts on its owner), an owner RRef, ``retain_graph``, the local
backward (-1) here and on the owner, and the errors.
"""

from __future__ import annotations

from tests.distributed.autograd import _rref_workers as W


def test_rref_backward_matches_jax_grad(workers):
    res = workers(W.rref_backward, 2, timeout=180)
    out = res[0].stdout
    for line in ("USER-DIST-OK", "OWNER-DIST-OK", "LOCAL-OK", "ERRORS-OK"):
        assert line in out, res[0]
    assert all(f"DONE {r.rank}" in r.stdout for r in res)
