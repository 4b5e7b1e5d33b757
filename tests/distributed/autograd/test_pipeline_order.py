"""The distributed backward overlaps across stages: a stage's gradient for one micro-batch
leaves before that stage's backward of the next micro-batch ends.

Three processes: this one (the driver), w1 (stage A) and w2 (stage B). Two micro-batches
go driver -> A -> B. In the backward, B runs one micro-batch after the other; the second
one blocks (bounded) until A has started the first one's backward, which it can only do if
B sent that gradient on before finishing the second. A backward that held B's gradients
until B's work was done would leave B waiting out its bound.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tests.distributed.autograd import _pipeline_workers as W

pytestmark = pytest.mark.workers(3, names=["w0", "w1", "w2"], timeout=60)


def _story() -> str:
    """Why B waited out its bound: both stages' timelines, and w2's stacks at the time."""
    (a, _), (b, stacks) = (rpc.rpc_sync(w, W.events) for w in ("w1", "w2"))
    t0 = min(t for t, _ in a + b)
    lines = [f"{t - t0:8.3f} s  {what}" for t, what in sorted(a + b)]
    head = "stage B's second backward waited out its bound for stage A:"
    return "\n".join([head, *lines, *stacks])


def test_stage_b_sends_a_micro_batch_gradient_on_before_its_next_backward_ends(
    dist_workers_module,
):
    rpc.rpc_sync("w2", W.reset)
    xs = [tp.tensor(np.full(3, m + 1.0, np.float32), requires_grad=True) for m in (0, 1)]
    with dist_autograd.context() as ctx:
        ys = [rpc.rpc_sync("w1", W.stage_a, args=(x, m)) for m, x in enumerate(xs)]
        dist_autograd.backward(ctx, [(ys[0] + ys[1]).sum()])
        grads = dist_autograd.get_gradients(ctx)
    order, saw = rpc.rpc_sync("w2", W.what_b_saw)
    assert sorted(order) == [0, 1]
    assert saw == [True], _story()
    for x in xs:  # d/dx sum(3 * 2 x) = 6, by hand
        np.testing.assert_allclose(np.asarray(grads[x]), [6.0, 6.0, 6.0])
