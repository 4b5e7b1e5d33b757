"""``RRef.backward``: backward from an RRef's value (a scalar Tensor), run on its owner.

With a context id, the owner starts that context's distributed backward pass
from the value (``backward(ctx_id, value)``); with -1, a local autograd
backward (the leaves' ``.grad`` on the owner). A user RRef asks its owner by
an RPC that carries the RRef, so a creation that failed or was not confirmed
in time fails it. RPC calls :func:`rref_backward` through the hook registered
with ``rpc.internal.register_rref_backward`` when this package is imported.
"""

from __future__ import annotations

from typing import Any

from tensorplay_jax.distributed.autograd._context import retrieve
from tensorplay_jax.distributed.autograd._engine import backward
from tensorplay_jax.rpc import RRef, rpc_sync
from tensorplay_jax.rpc.internal import internal_target
from tensorplay_jax.tensors import Tensor

__all__ = ["RRefBackwardTypeError", "rref_backward"]


class RRefBackwardTypeError(RuntimeError, TypeError):
    """``RRef.backward`` on an RRef whose value is not a Tensor (tensorplay: RuntimeError)."""


def rref_backward(rref: RRef[Any], context_id: int, retain_graph: bool) -> None:
    """``rref.backward(context_id, retain_graph)``: on the owner here, else by RPC to it.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.distributed import rpc
        >>> rpc.init_rpc("rrbdoc", rank=0, world_size=1)
        >>> w = tp.ones(2, requires_grad=True)
        >>> rref_backward(rpc.RRef((3 * w).sum()), -1, False)
        >>> w.grad
        tensor([3., 3.])
        >>> rpc.shutdown()
    """
    if isinstance(context_id, bool) or not isinstance(context_id, int):
        raise TypeError(
            f"RRef.backward: dist_autograd_ctx_id={context_id!r} must be an int "
            "(a context id, or -1 for a local backward)"
        )
    if rref.is_owner():
        _backward_here(rref.local_value(), context_id, bool(retain_graph))
    else:
        rpc_sync(rref.owner(), _backward_on_owner, args=(rref, context_id, bool(retain_graph)))


@internal_target
def _backward_on_owner(rref: RRef[Any], context_id: int, retain_graph: bool) -> None:
    """RPC target: ``rref.backward`` on the owner of ``rref``."""
    _backward_here(rref.local_value(), context_id, retain_graph)


def _backward_here(value: Any, context_id: int, retain_graph: bool) -> None:
    if not isinstance(value, Tensor):
        raise RRefBackwardTypeError(
            f"RRef.backward: the RRef holds a {type(value).__name__}: RRef should contain a "
            "tensor for .backward() (a scalar Tensor)"
        )
    if not value.requires_grad:
        raise RuntimeError(
            "RRef.backward: element 0 of tensors does not require grad and does not have a "
            "grad_fn (no input of the RRef's Tensor's computation has requires_grad=True); "
            "nothing to differentiate"
        )
    if value.numel() != 1:
        raise RuntimeError(
            f"RRef.backward: grad can be implicitly created only for scalar outputs: the RRef "
            f"holds a Tensor of shape {tuple(value.shape)}; reduce it first, e.g. loss.sum()"
        )
    if context_id == -1:
        value.backward(retain_graph=retain_graph)
        return
    retrieve(context_id)  # "Could not find autograd context with id: N" if unknown here
    backward(context_id, value, retain_graph=retain_graph)
