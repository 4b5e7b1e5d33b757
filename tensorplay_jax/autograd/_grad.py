"""``autograd.grad`` (gradients of leaves, returned) and ``autograd.backward`` (accumulated)."""

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
    got: dict[int, jax.Array] = {}

    def collect(leaf: Tensor, g: jax.Array) -> None:
        got[id(leaf)] = g

    run_backward(
        outs,
        list(grad_outputs),
        retain_graph=retain_graph,
        accumulate=collect,
        inputs=ins,
        capture=True,
    )
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


def backward(
    tensors: Tensor | Sequence[Tensor],
    grad_tensors: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    grad_variables: Any = None,
    inputs: Tensor | Sequence[Tensor] | None = None,
) -> None:
    """torch's ``autograd.backward``: accumulate gradients of ``tensors`` into leaves' ``.grad``.

    Args:
        tensors: the Tensor(s) to differentiate.
        grad_tensors: one cotangent per Tensor (``None`` entries: ones, for
            one-element Tensors only); a single Tensor when ``tensors`` is one.
        retain_graph: keep the graph for another backward.
        create_graph: not supported (higher-order gradients: use ``jax.grad``
            through ``nn.functional_call`` or ``tp.apply``).
        grad_variables: the old name of ``grad_tensors``.
        inputs: accumulate only into these leaves (the others are left alone, and
            none of their hooks runs).

    Raises:
        RuntimeError: a Tensor needs no grad, a non-scalar one has no
            cotangent, or the graph was freed.
        NotImplementedError: ``create_graph=True``.

    Example:
        >>> import tensorplay_jax as tp
        >>> a = tp.ones(2, requires_grad=True)
        >>> tp.autograd.backward([(a * 2).sum(), a * 3], [None, tp.ones(2)])
        >>> a.grad
        tensor([5., 5.])
    """
    if create_graph:
        raise NotImplementedError(
            "autograd.backward: create_graph=True is not supported; for higher-order "
            "gradients use jax.grad over nn.functional_call or tp.apply"
        )
    if grad_variables is not None:
        if grad_tensors is not None:
            raise RuntimeError(
                "autograd.backward: got both grad_tensors and grad_variables; pass only "
                "grad_tensors"
            )
        grad_tensors = grad_variables
    roots = [tensors] if isinstance(tensors, _tc.Tensor) else list(tensors)
    if grad_tensors is None:
        grads: list[Any] = [None] * len(roots)
    elif isinstance(grad_tensors, _tc.Tensor | jax.Array):
        grads = [grad_tensors]
    else:
        grads = list(grad_tensors)
    if len(grads) != len(roots):
        raise RuntimeError(
            f"autograd.backward: got {len(grads)} grad_tensors for {len(roots)} tensors; pass "
            "one per Tensor (None for a one-element Tensor)"
        )
    only = None
    if inputs is not None:
        only = [inputs] if isinstance(inputs, _tc.Tensor) else list(inputs)
        if not only:
            raise RuntimeError("autograd.backward: inputs= is empty; pass at least one leaf")
    run_backward(roots, grads, retain_graph=bool(retain_graph), inputs=only)
