"""``autograd.grad`` (gradients of leaves, returned) and ``autograd.backward`` (accumulated)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._engine import run_backward

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    only_inputs: bool = True,
    allow_unused: bool | None = None,
    is_grads_batched: bool = False,
    materialize_grads: bool = False,
) -> tuple[Tensor | None, ...]:
    """The gradients of ``outputs`` with respect to ``inputs`` (torch's ``autograd.grad``).

    Nothing is added to any ``.grad``; the graph runs once with a collecting
    ``accumulate`` callback (see ``run_backward``), and only the nodes that lead to
    ``inputs`` run.

    Args:
        outputs: the Tensor(s) to differentiate.
        inputs: Tensors that require grad: leaves, or results of recorded operations
            (the summed gradient of that result).
        grad_outputs: cotangents of ``outputs`` (``None`` = ones, scalar outputs only);
            with ``create_graph`` a cotangent that requires grad is differentiated too.
        retain_graph: keep the graph for another backward (default: ``create_graph``).
        create_graph: record the backward, so the gradients returned are on the tape
            and can be differentiated again (``_higher_order``).
        only_inputs: ignored, as in torch (kept for old code).
        allow_unused: return ``None`` for an input that ``outputs`` do not depend on
            (otherwise that raises); default ``materialize_grads``.
        is_grads_batched: not supported (``jax.vmap`` over ``jax.vjp`` does it).
        materialize_grads: zeros instead of ``None`` for an unused input.

    Returns:
        One gradient Tensor (or ``None``) per input.

    Raises:
        RuntimeError: an input does not require grad, or is unused and
            ``allow_unused`` is False.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.tensor([1.0, 2.0], requires_grad=True)
        >>> (g,) = tp.autograd.grad((x**2).sum(), x)
        >>> g
        tensor([2., 4.])
        >>> x.grad is None
        True
        >>> (g,) = tp.autograd.grad((x**3).sum(), x, create_graph=True)
        >>> tp.autograd.grad(g.sum(), x)  # the second derivative, 6 x
        (tensor([ 6., 12.]),)
    """
    if is_grads_batched:
        raise NotImplementedError(
            "autograd.grad: is_grads_batched=True is not supported; for a batch of "
            "cotangents use jax.vmap over jax.vjp of the function (tp.apply)"
        )
    if allow_unused is None:
        allow_unused = materialize_grads
    elif materialize_grads and not allow_unused:
        raise ValueError(
            "Expected allow_unused to be True or not passed when materialize_grads=True, "
            "but got: allow_unused=False."
        )
    if retain_graph is None:
        retain_graph = create_graph
    outs = [outputs] if isinstance(outputs, _tc.Tensor) else list(outputs)
    ins = [inputs] if isinstance(inputs, _tc.Tensor) else list(inputs)
    for i, t in enumerate(ins):
        if not isinstance(t, _tc.Tensor):
            raise TypeError(
                f"autograd.grad: inputs[{i}] is a {type(t).__name__}; expected a Tensor"
            )
        if not t.requires_grad:
            raise RuntimeError(
                f"One of the differentiated Tensors does not require grad (inputs[{i}]); "
                "create it with requires_grad=True or call requires_grad_() on it"
            )
    if grad_outputs is None or isinstance(grad_outputs, _tc.Tensor | jax.Array):
        grad_outputs = [grad_outputs] * len(outs) if grad_outputs is None else [grad_outputs]
    got: dict[int, Any] = {}

    def collect(t: Tensor, g: Any) -> None:
        got[id(t)] = g

    run_backward(
        outs,
        list(grad_outputs),
        retain_graph=retain_graph,
        accumulate=collect,
        inputs=ins,
        capture=True,
        create_graph=create_graph,
    )
    result: list[Tensor | None] = []
    for i, t in enumerate(ins):
        if id(t) in got:
            g = got[id(t)]
            result.append(g if isinstance(g, _tc.Tensor) else _tc.Tensor._wrap(g))
        elif materialize_grads:
            result.append(_tc.Tensor._wrap(jnp.zeros(t.shape, t.dtype)))
        elif allow_unused:
            result.append(None)
        else:
            raise RuntimeError(
                f"The differentiated Tensor at index {i} appears to not have been used in the "
                "graph. Set allow_unused=True if this is the desired behavior."
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
        create_graph: record the backward: each ``.grad`` is a Tensor on the tape,
            which can be differentiated again (``_higher_order``).
        grad_variables: the old name of ``grad_tensors``.
        inputs: accumulate only into these Tensors (the other leaves are left alone,
            none of their hooks runs, and nodes that lead to none of them do not run).

    Raises:
        RuntimeError: a Tensor needs no grad, a non-scalar one has no
            cotangent, or the graph was freed.

    Example:
        >>> import tensorplay_jax as tp
        >>> a = tp.ones(2, requires_grad=True)
        >>> tp.autograd.backward([(a * 2).sum(), a * 3], [None, tp.ones(2)])
        >>> a.grad
        tensor([5., 5.])
    """
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
    if retain_graph is None:
        retain_graph = create_graph
    run_backward(roots, grads, retain_graph=retain_graph, inputs=only, create_graph=create_graph)
