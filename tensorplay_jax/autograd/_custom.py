"""Nodes whose backward is any Python callable: the hooks for RPC send/recv edges.

- A **recv** edge (a Tensor that arrived over RPC and must send its gradient
  back): ``node = make_node(send_grads_back, inputs=(), num_outputs=k)`` then
  ``outs = attach_outputs(node, arrays)``; the engine calls
  ``send_grads_back(grads)`` when the local backward reaches it (return ``()``:
  the node has no local inputs).
- A **send** edge (Tensors this worker sent, whose gradients come back later):
  ``node = make_node(lambda grads: grads, inputs=sent_tensors,
  num_outputs=len(sent_tensors))``; when gradients arrive, run
  ``run_backward([GradientEdge(node, i) for i ...], grads, accumulate=...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._grad_mode import is_grad_enabled
from tensorplay_jax.autograd._node import FunctionNode, GradientEdge, Grads
from tensorplay_jax.autograd.sparse_arrays import is_sparse_array

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor


def get_gradient_edge(tensor: Tensor) -> GradientEdge:
    """Where gradients for ``tensor`` go: ``(grad_fn, output_nr)``, or its leaf sink.

    Raises:
        RuntimeError: ``tensor`` does not require grad.
    """
    if not tensor.requires_grad:
        raise RuntimeError("get_gradient_edge: the Tensor does not require grad")
    return tensor._gradient_edge()


def make_node(
    backward: Callable[[Grads], Sequence[jax.Array | None]],
    inputs: Sequence[Tensor] = (),
    *,
    num_outputs: int = 1,
    name: str = "FunctionBackward",
    run_without_grads: bool = False,
) -> FunctionNode:
    """A graph node whose backward is the Python callable ``backward``.

    Args:
        backward: maps one cotangent per output (a ``jax.Array`` or ``None`` when
            no gradient reached that output) to one cotangent per input (``None``
            allowed). It runs on the thread that runs backward.
        inputs: the Tensors the node depends on; those that do not require grad
            get no edge (their cotangent is ignored).
        num_outputs: how many outputs the node has.
        name: the node's name in reprs and errors.
        run_without_grads: call ``backward`` (with all ``None``) even when no
            gradient reached the node in a backward pass that visits it.

    Returns:
        The node; give it outputs with ``attach_outputs`` or use its
        ``GradientEdge`` s as roots of ``run_backward``.

    Example:
        >>> import jax.numpy as jnp
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.autograd import attach_outputs, make_node
        >>> x = tp.ones(2, requires_grad=True)
        >>> node = make_node(lambda g: (g[0] * 10,), [x])
        >>> (y,) = attach_outputs(node, [x.value * 3])
        >>> y.sum().backward()
        >>> x.grad
        tensor([10., 10.])
    """
    edges = [t._gradient_edge() if t.requires_grad else None for t in inputs]
    return FunctionNode(name, backward, edges, num_outputs, run_without_grads=run_without_grads)


def attach_outputs(
    node: FunctionNode, values: Sequence[Any], *, requires_grad: bool = True
) -> tuple[Tensor, ...]:
    """Tensors for ``values`` produced by ``node`` (output ``i`` is ``values[i]``).

    Float outputs require grad (unless ``requires_grad=False`` or grad mode is
    off, in which case they are plain leaves).
    """
    if len(values) != node.num_outputs:
        raise ValueError(
            f"attach_outputs: node {node.name} has {node.num_outputs} outputs, got "
            f"{len(values)} values"
        )
    record = requires_grad and is_grad_enabled()
    outs = []
    for i, v in enumerate(values):
        if isinstance(v, _tc.Tensor):
            v = v._value
        elif not isinstance(v, np.ndarray | jax.Array | jax.core.Tracer) and not is_sparse_array(v):
            v = jnp.asarray(v)
        # A NumPy array stays on the host until used (as a Tensor that arrived over RPC).
        outs.append(_tc.Tensor._wrap_output(v, node, i) if record else _tc.Tensor._wrap(v))
    return tuple(outs)
