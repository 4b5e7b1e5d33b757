"""The public functions of distributed autograd besides ``context`` and ``backward``."""

from __future__ import annotations

import jax

from tensorplay_jax.distributed.autograd._context import (
    DistAutogradContext,
    current_id,
    live_contexts,
    retrieve,
)
from tensorplay_jax.distributed.autograd._engine import current_backward_passes
from tensorplay_jax.rpc import get_worker_info as _rpc_worker_info
from tensorplay_jax.rpc import is_initialized as _rpc_is_initialized
from tensorplay_jax.runtime.ids import CONTEXT_ID
from tensorplay_jax.tensors import Tensor

__all__ = ["get_gradients", "is_available", "is_initialized"]


def get_gradients(context_id: int) -> dict[Tensor, Tensor]:
    """The gradients accumulated in ``context_id`` for this worker's leaves.

    As tensorplay's, each gradient is a Tensor: a plain one (it does not require
    grad and joins no tape) that wraps the accumulated ``jax.Array`` without
    copying it. Tensor code uses it as it is (``g.to("cpu")``, ``g * lr``).
    JAX code, optax included, takes its array, ``g.value``, as for any Tensor:
    a jitted JAX function refuses a Tensor with a TypeError that names
    ``.value``, and optax's transforms run jitted functions.

    Args:
        context_id: a context id that is alive on this worker (the one from
            ``with context()``, or one an RPC brought here).

    Returns:
        A new dict ``{leaf Tensor: gradient Tensor}`` holding exactly the leaves
        of this worker that a backward pass of this context reached.

    Raises:
        RuntimeError: "Could not find autograd context with id: N".

    Example:
        >>> import optax
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.distributed.autograd as dist_autograd
        >>> from tensorplay_jax.distributed import rpc
        >>> rpc.init_rpc("gdoc", rank=0, world_size=1)
        >>> with dist_autograd.context() as ctx_id:
        ...     t = tp.ones(2, requires_grad=True)
        ...     dist_autograd.backward(ctx_id, [(t * t).sum()])
        ...     g = dist_autograd.get_gradients(ctx_id)[t]
        >>> g
        tensor([2., 2.])
        >>> g.requires_grad, g.grad_fn
        (False, None)
        >>> tx = optax.sgd(0.5)
        >>> updates, _ = tx.update(g.value, tx.init(t.value))
        >>> updates
        Array([-1., -1.], dtype=float32)
        >>> rpc.shutdown()
    """
    # built as a local backward builds .grad: a Tensor over the array itself
    return {leaf: Tensor._wrap(g) for leaf, g in retrieve(context_id).gradient_arrays().items()}


def gradient_arrays(context_id: int) -> dict[Tensor, jax.Array]:
    """``get_gradients`` with the gradients as ``jax.Array`` s (no Tensor wrappers), as
    the optimizers' jitted steps take them."""
    return retrieve(context_id).gradient_arrays()


def is_available() -> bool:
    """True: distributed autograd is built in (it needs RPC to be initialized to be used)."""
    return True


def is_initialized() -> bool:
    """True while RPC is initialized on this worker (distributed autograd rides on it)."""
    return _rpc_is_initialized()


def _current_context() -> DistAutogradContext:
    """The context this thread works in (its own, or the one of the RPC it serves)."""
    cid = current_id()
    if cid is None:
        raise RuntimeError(
            "Current thread doesn't have a valid autograd context. Please wrap your code "
            "using: `with dist_autograd.context() as context_id` to generate a valid context"
        )
    return retrieve(cid)


def _retrieve_context(context_id: int) -> DistAutogradContext:
    """The context ``context_id`` of this worker (tensorplay spelling)."""
    return retrieve(context_id)


def _get_debug_info() -> dict[str, str]:
    """tensorplay's private counters of this worker's distributed autograd, as text:
    ``num_current_backward_passes`` (passes with a share running here) and
    ``num_autograd_contexts`` (contexts alive here)."""
    return {
        "num_current_backward_passes": str(current_backward_passes()),
        "num_autograd_contexts": str(live_contexts()),
    }


def _get_max_id() -> int:
    """The largest context id this worker can make (tensorplay's private helper).

    Its rank in the high 16 bits, every serial bit set: ids this worker makes
    lie between ``rank << 48`` and this.
    """
    return CONTEXT_ID.pack(_rpc_worker_info().id, CONTEXT_ID.mask)
