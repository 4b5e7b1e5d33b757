"""``create_graph=True``: each node's backward runs as recorded operations on the tape.

A backward pass with ``create_graph=True`` (``Tensor.backward``,
``autograd.backward``, ``autograd.grad``) hands each node its output gradients as
Tensors and records what the node's backward computes, so the gradients it
returns can be differentiated again (gradient penalties, Hessian-vector
products, meta-learning's inner steps). :func:`apply_graph` is the engine's
call, one per node:

* A ``VJPNode`` with a ``recipe`` (an operation whose backward reads its
  operands): its backward, as a function of the operands and the output
  cotangents (``jax.vjp`` of the operation, or ``call_rule``'s pullback), becomes
  ONE recorded operation whose differentiated inputs are the node's own
  (edges: its ``next_edges``) and the cotangents that require grad. The new
  node has a recipe too, so gradients of any order follow. Compiled once per
  operation, mask and shapes, like every recorded operation (``_cache``).
* A ``VJPNode`` without one (``saves=False``: an operation linear in what it
  differentiates, such as ``add``, reshapes, indexing): its pullback is recorded
  as an operation of the cotangents alone; its residuals depend on nothing that
  requires grad.
* A custom ``Function``'s node (``function.BackwardCFunction.apply_graph``): its
  ``backward`` runs in grad mode on the Tensors, so what it computes is recorded;
  one marked ``once_differentiable`` gives gradients whose own backward raises.
* Any other node (an RPC edge, a device copy, a Python rule of ``make_node``): its
  backward runs on arrays; where a cotangent requires grad, its results get a node
  whose backward raises torch's error for a derivative that is not implemented,
  naming the node, rather than a silent zero.

Example:
    >>> import tensorplay_jax as tp
    >>> x = tp.tensor([1.0, 2.0], requires_grad=True)
    >>> (g,) = tp.autograd.grad((x**3).sum(), x, create_graph=True)
    >>> g  # 3 x**2
    tensor([ 3., 12.], grad_fn=<PowBackwardBackward>)
    >>> g.sum().backward()
    >>> x.grad  # 6 x
    tensor([ 6., 12.])
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from tensorplay_jax.autograd import _cache
from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._node import FunctionNode, GradientEdge, Node, VJPNode

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

__all__ = ["apply_graph", "not_differentiable"]

TensorGrads = tuple["Tensor | None", ...]


def apply_graph(node: Node, grads: Sequence[Tensor | None]) -> TensorGrads:
    """``node``'s backward on Tensor cotangents, recorded: one gradient Tensor (or None)
    per entry of ``node.next_edges``, each on the tape where it depends on anything that
    requires grad."""
    if node.released:
        node.apply(())  # raises torch's "backward through the graph a second time"
    if isinstance(node, VJPNode):
        out = _vjp_node(node, grads)
    else:
        own = getattr(node, "apply_graph", None)  # a custom Function's node
        out = tuple(own(grads)) if own is not None else _opaque(node, grads)
    if len(out) != len(node.next_edges):
        raise RuntimeError(
            f"{node.name}: backward returned {len(out)} gradients for {len(node.next_edges)} inputs"
        )
    return out


def _vjp_node(node: VJPNode, grads: Sequence[Tensor | None]) -> TensorGrads:
    seg = node.lazy
    if seg is not None:
        seg.flush()
    node.check_saved()
    present = tuple(g is not None for g in grads)
    cts = [g for g in grads if g is not None]
    recipe = node.recipe
    if recipe is None:  # linear in what it differentiates: record the pullback as it is
        key: Any = ("create_graph", None, present, node.out_info)
        entry = _cache.lookup(
            key, f"{node.name}Backward", lambda: _linear_backward(present, node.out_info)
        )
        return _record(entry, [node.vjp], (False,), [], cts, node.saved)
    op, mask, rule, operands = recipe
    values = [o._value if isinstance(o, _tc.Tensor) else o for o in operands]
    key = ("create_graph", op, mask, rule, present, node.out_info)
    entry = _cache.lookup(
        key,
        f"{node.name}Backward",
        lambda: _backward(op.flat_fn, mask, rule, present, node.out_info),
    )
    return _record(entry, values, mask, node.next_edges, cts, node.saved)


def _record(
    entry: _cache._Entry,
    values: list[Any],
    mask: tuple[bool, ...],
    edges: Sequence[GradientEdge | None],
    cts: list[Tensor],
    saved: tuple[Tensor, ...],
) -> TensorGrads:
    """Run ``entry`` on ``values`` and the cotangents' values as one recorded node: the
    ``mask`` positions of ``values`` go to ``edges``, each cotangent that requires grad
    to its own producer. Unrecorded when nothing it reads requires grad."""
    full = [*values, *(g._value for g in cts)]
    full_mask = (*mask, *(g._requires_grad for g in cts))
    if not any(full_mask):
        out = _cache.forward(entry, full)
        return tuple(_tc.Tensor._wrap(o) for o in out)
    diff = tuple(v for v, m in zip(full, full_mask, strict=True) if m)
    other = tuple(v for v, m in zip(full, full_mask, strict=True) if not m)
    out, pullback = _cache.forward_vjp(entry, full_mask, diff, other)
    all_edges = [*edges, *(g._gradient_edge() for g in cts if g._requires_grad)]
    leaves, treedef = jax.tree_util.tree_flatten(out)
    node = VJPNode(
        entry.name,
        pullback,
        _cache.out_info_of(leaves, treedef),
        all_edges,
        len(leaves),
        (*saved, *cts),
    )
    node.recipe = (entry, full_mask, None, full)
    return tuple(_tc.Tensor._wrap_output(leaf, node, i) for i, leaf in enumerate(leaves))


def _backward(
    flat_fn: Callable[..., Any],
    mask: tuple[bool, ...],
    rule: Any,
    present: tuple[bool, ...],
    out_info: _cache.OutInfo,
) -> Callable[..., Any]:
    """The backward of an operation as a function of its operands, then the cotangents
    present: one gradient per differentiated operand."""
    n = len(mask)

    def backward(*args: Any) -> tuple[Any, ...]:
        values, given = args[:n], iter(args[n:])
        cts = tuple(next(given) if p else None for p in present)
        if rule is not None:  # call_rule's pullback on the operands
            pullback: Any = functools.partial(rule, *values)
        else:

            def f(*diff: Any) -> Any:
                it = iter(diff)
                return flat_fn(*[next(it) if m else v for v, m in zip(values, mask, strict=True)])

            _, pullback = jax.vjp(f, *(v for v, m in zip(values, mask, strict=True) if m))
        return tuple(_cache.pullback_body(pullback, cts, out_info))

    return backward


def _linear_backward(present: tuple[bool, ...], out_info: _cache.OutInfo) -> Callable[..., Any]:
    """A held pullback (the first argument) on the cotangents present."""

    def backward(pullback: Any, *given: Any) -> tuple[Any, ...]:
        it = iter(given)
        cts = tuple(next(it) if p else None for p in present)
        return tuple(_cache.pullback_body(pullback, cts, out_info))

    return backward


def _opaque(node: Node, grads: Sequence[Tensor | None]) -> TensorGrads:
    """A node whose backward is Python of its own: run on arrays; results that would
    depend on a cotangent requiring grad get a node that raises when differentiated."""
    arrays = tuple(None if g is None else g._value for g in grads)
    if all(a is None for a in arrays) and not getattr(node, "run_without_grads", False):
        return (None,) * len(node.next_edges)
    out = node.apply(arrays)
    needing = [g for g in grads if g is not None and g._requires_grad]
    results = tuple(None if o is None else _tc.Tensor._wrap(o) for o in out)
    if not needing:
        return results
    why = (
        f"the derivative of {node.name}'s backward is not implemented: a backward with "
        f"create_graph=True went through {node.name}, which computes its gradient outside "
        "the tape; differentiate this part with jax.grad (tp.apply) instead"
    )
    return not_differentiable(results, needing, why)


def not_differentiable(
    results: Sequence[Tensor | None], inputs: Sequence[Tensor], why: str
) -> TensorGrads:
    """``results`` on the tape after ``inputs``, through a node whose backward raises
    ``RuntimeError(why)``: a gradient that cannot be differentiated again says so when
    it is, instead of giving a silent zero."""

    def refuse(_: Any) -> Any:
        raise RuntimeError(why)

    edges = [t._gradient_edge() for t in inputs]
    node = FunctionNode("NotImplemented", refuse, edges, len(results))
    return tuple(
        None if r is None else _tc.Tensor._wrap_output(r._value, node, i)
        for i, r in enumerate(results)
    )
