"""``autograd.grad``: gradients with respect to leaf Tensors, returned rather than accumulated."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._engine import run_backward

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Any = None,
    *,
    retain_graph: bool = False,
    allow_unused: bool = False,
) -> tuple[Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to the leaf Tensors ``inputs``.

    Nothing is added to any ``.grad``; the graph runs once with a collecting
    ``accumulate`` callback (see ``run_backward``).

    Args:
        outputs: the Tensor(s) to differentiate.
        inputs: leaf Tensors that require grad.
        grad_outputs: cotangents of ``outputs`` (``None`` = ones, scalar outputs only).
        retain_graph: keep the graph for another backward.
        allow_unused: return ``None`` for an input that ``outputs`` do not depend on
            (otherwise that raises).

    Returns:
        One gradient Tensor (or ``None``) per input.

    Raises:
        RuntimeError: an input is not a grad-requiring leaf, or is unused and
            ``allow_unused`` is False.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.tensor([1.0, 2.0], requires_grad=True)
        >>> (g,) = tp.autograd.grad((x**2).sum(), x)
        >>> g
        tensor([2., 4.])
        >>> x.grad is None
        True
    """
    outs = [outputs] if isinstance(outputs, _tc.Tensor) else list(outputs)
    ins = [inputs] if isinstance(inputs, _tc.Tensor) else list(inputs)
    for i, t in enumerate(ins):
        if not (isinstance(t, _tc.Tensor) and t.is_leaf and t.requires_grad):
            raise RuntimeError(
                f"autograd.grad: inputs[{i}] is not a leaf Tensor that requires grad; only "
                "leaves are supported (compute gradients of intermediates with tp.apply/jax.vjp)"
            )
    if grad_outputs is None or isinstance(grad_outputs, _tc.Tensor | jax.Array):
        grad_outputs = [grad_outputs] * len(outs) if grad_outputs is None else [grad_outputs]
    wanted = {id(t) for t in ins}
    got: dict[int, jax.Array] = {}

    def collect(leaf: Tensor, g: jax.Array) -> None:
        if id(leaf) in wanted:
            got[id(leaf)] = g

    run_backward(outs, list(grad_outputs), retain_graph=retain_graph, accumulate=collect)
    result: list[Tensor | None] = []
    for i, t in enumerate(ins):
        if id(t) in got:
            result.append(_tc.Tensor._wrap(got[id(t)]))
        elif allow_unused:
            result.append(None)
        else:
            raise RuntimeError(
                f"autograd.grad: inputs[{i}] was not used in the graph of outputs; pass "
                "allow_unused=True to get None for it"
            )
    return tuple(result)
