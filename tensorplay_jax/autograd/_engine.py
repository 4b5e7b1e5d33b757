"""The backward engine: dependency counting, then Kahn's topological order, no recursion.

``run_backward(roots, root_grads, *, retain_graph, accumulate)``:

1. Resolve each root to a ``GradientEdge`` (a Tensor's producer output, or a
   leaf's ``AccumulateGrad`` sink; distributed autograd may pass edges of its own
   nodes, e.g. a "send" node, directly).
2. Walk the graph iteratively from the roots and count, for every reachable
   node, how many edges lead into it.
3. Seed per-node input buffers with the root gradients; a node is ready when
   every edge into it has delivered (or passed ``None``). Among ready nodes the
   most recently created runs first (a heap on ``-seq``).
4. Run the ready node's backward, add the results into its inputs' buffers
   (``None`` contributes nothing; the execution backend may keep a running sum of
   small CPU gradients on the host, ``_seams``' ``sum_into``, placed before the node
   runs), free the node unless ``retain_graph``.
5. A leaf sink hands its summed gradient to ``accumulate(leaf, grad)`` once per
   call; the default adds it into ``leaf.grad``.

Before step 3 the installed backward planner (``_seams.planner``: the speed-up
layer's compiled backwards) may run the whole pass another way; it is asked once
from a lone one-element root before the walk (``run_root``) and once with the
walked graph (``run_graph``). When the graph reaches a Tensor or node with a
hook (``_hooks``), each node's summed output gradients go
through their Tensors' hooks and then the node's pre-hooks before it runs (a
leaf's before it accumulates), its post-hooks after, and the planner, whose passes
call no Python between nodes, is not asked; a leaf's post-accumulate-grad hooks run
right after it accumulates, and the callbacks hooks queued (``queue_callback``) run
once every node has run.

Nothing is global: each call keeps its own buffers, so threads may run
backward concurrently on disjoint (or retained) graphs.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import _grad_mode, _higher_order, _hooks, _seams
from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._accumulate import accumulate_into_grad, add_gradients
from tensorplay_jax.autograd._cache import ones_like
from tensorplay_jax.autograd._node import AccumulateGrad, GradientEdge, Node
from tensorplay_jax.autograd.sparse_arrays import is_sparse_array
from tensorplay_jax.runtime.device import to_device

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

Accumulate = Callable[["Tensor", jax.Array], None]


def as_array(x: Any, dtype: Any = None) -> jax.Array:
    """``jnp.asarray(x, dtype)``, with no conversion dispatched when ``x`` already is a
    ``jax.Array`` of that dtype (distributed autograd calls this per message)."""
    if isinstance(x, jax.Array) and (dtype is None or x.dtype == dtype):
        return x
    return jnp.asarray(x, dtype)


def as_cotangent(x: Any) -> Any:
    """A gradient as the tape takes it: a ``jax.Array``, or a host NumPy array as it
    arrived over RPC (node backwards are jitted and take either; no transfer first), or
    a sparse gradient (a BCOO) as it is."""
    if isinstance(x, np.ndarray | jax.Array) or is_sparse_array(x):
        return x
    return jnp.asarray(x)


def _root_edge(root: Tensor | GradientEdge, i: int) -> GradientEdge:
    if isinstance(root, GradientEdge):
        return root
    if not isinstance(root, _tc.Tensor):
        raise TypeError(
            f"run_backward: roots[{i}] is a {type(root).__name__}; expected a Tensor or a "
            "GradientEdge"
        )
    if not root.requires_grad and isinstance(root._value, jax.core.Tracer):
        raise RuntimeError(
            f"run_backward: roots[{i}] holds a JAX tracer: backward() or autograd.grad() ran "
            "inside a JAX transformation (jax.jit, jax.grad, jax.vmap, ...), where the tape "
            "records nothing (JAX owns differentiation there); differentiate with jax.grad of a "
            "function of arrays (for a module, nn.functional_call), or run the backward "
            "outside the transformation"
        )
    if not root.requires_grad:
        raise RuntimeError(
            f"run_backward: roots[{i}] does not require grad and does not have a grad_fn; "
            "make sure some input of the computation was created with requires_grad=True"
        )
    return root._gradient_edge()


def _root_grad(root: Tensor | GradientEdge, grad: Any, i: int) -> jax.Array:
    if isinstance(grad, _tc.Tensor):
        grad = grad._value
    if isinstance(root, GradientEdge):
        if grad is None:
            raise RuntimeError(f"run_backward: roots[{i}] is a GradientEdge; it needs a gradient")
        return as_cotangent(grad)
    aval = root._aval()  # a pending root's shape and dtype, without running it
    if grad is None:
        if math.prod(aval.shape) != 1:
            raise RuntimeError(
                f"grad can be implicitly created only for scalar outputs: roots[{i}] has shape "
                f"{root.shape}; pass a gradient of that shape"
            )
        return ones_like(aval)
    grad = as_array(grad, aval.dtype)
    if grad.shape != aval.shape:
        raise RuntimeError(
            f"run_backward: gradient for roots[{i}] has shape {tuple(grad.shape)}, but the root "
            f"has shape {root.shape}"
        )
    return grad


def _add(a: jax.Array | None, b: jax.Array | None) -> jax.Array | None:
    if a is None:
        return b
    if b is None:
        return a
    return add_gradients(a, b)


def _sum_into(held: Any, grad: jax.Array | None) -> Any:
    """``held + grad`` in a node's input buffer: the execution backend may keep the running
    sum on the host (a NumPy array, placed by :func:`_placed` before the node runs)."""
    if held is None:
        return grad
    if grad is None:
        return held
    strategy = _seams.strategy
    if strategy is not None:
        out = strategy.sum_into(held, grad)
        if out is not NotImplemented:
            return out
    return add_gradients(_place(held), grad)


def _place(g: Any) -> Any:
    """``g``, a host float array (a running sum) put on the device."""
    if isinstance(g, np.ndarray) and g.dtype.kind == "f":
        return to_device(np.asarray(g))
    return g


def _placed(grads: list[Any]) -> list[Any]:
    """A node's input buffer with every host running sum put on the device."""
    for i, g in enumerate(grads):
        if isinstance(g, np.ndarray):
            grads[i] = _place(g)
    return grads


def _dependencies(starts: Sequence[Node]) -> dict[Node, int]:
    """Number of edges into each node reachable from ``starts`` (iterative DFS)."""
    deps: dict[Node, int] = {}
    seen = set(starts)
    stack = list(seen)
    while stack:
        node = stack.pop()
        for edge in node.next_edges:
            if edge is None:
                continue
            nxt = edge.node
            deps[nxt] = deps.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return deps


def run_backward(
    roots: Sequence[Tensor | GradientEdge],
    root_grads: Sequence[Any] | None = None,
    *,
    retain_graph: bool = False,
    accumulate: Accumulate | None = None,
    inputs: Sequence[Tensor] | None = None,
    capture: bool = False,
    create_graph: bool = False,
) -> None:
    """Backpropagate from ``roots`` through the local tape.

    Args:
        roots: Tensors (or ``GradientEdge`` s of nodes made with ``make_node``,
            such as an RPC "send" node) to start from.
        root_grads: one cotangent per root (``None`` = ones, for one-element
            Tensors only); Tensors or arrays of the root's shape.
        retain_graph: keep every visited node's saved values; otherwise they
            are freed and a second backward through them raises.
        accumulate: called as ``accumulate(leaf, grad)`` once per reached leaf
            with its summed gradient (a ``jax.Array``); by default it adds into
            ``leaf.grad``. Distributed autograd passes one that writes into its
            context instead.
        inputs: the Tensors whose gradients are wanted (None: every leaf reached). The
            other leaves' sinks do not run: nothing is accumulated into them and none of
            their hooks runs, and a node that leads to none of ``inputs`` does not run,
            as with torch's ``inputs=``. A non-leaf among them gets the summed gradient
            of its output (``accumulate(tensor, grad)``).
        capture: the leaves' gradients are captured, not accumulated (``autograd.grad``):
            as in torch, their ``AccumulateGrad`` nodes' hooks and post-accumulate-grad
            hooks do not run (their Tensor hooks do).
        create_graph: record the backward itself (``_higher_order``): gradients are
            Tensors on the tape, handed to ``accumulate`` as such (by default
            ``leaf.grad`` becomes, or is added to, that Tensor), so they can be
            differentiated again.

    Raises:
        RuntimeError: a root needs no grad, a non-scalar root has no gradient,
            a gradient has the wrong shape, or the graph was freed.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.autograd import run_backward
        >>> x = tp.ones(3, requires_grad=True)
        >>> grads = {}
        >>> run_backward([(x * 2).sum()], accumulate=lambda t, g: grads.__setitem__(t, g))
        >>> grads[x]
        Array([2., 2., 2.], dtype=float32)
        >>> x.grad is None
        True
    """
    roots = list(roots)
    if not roots:
        raise RuntimeError("run_backward: no roots given; pass at least one Tensor")
    grads_in = [None] * len(roots) if root_grads is None else list(root_grads)
    if len(grads_in) != len(roots):
        raise RuntimeError(f"run_backward: got {len(grads_in)} gradients for {len(roots)} roots")
    accumulate = accumulate or (accumulate_graph if create_graph else accumulate_into_grad)
    wanted = None if inputs is None else {id(t) for t in inputs}
    # a non-leaf among ``inputs``: (its node, its output) -> the Tensor
    within = {} if inputs is None else {_edge_of(t): t for t in inputs if t._grad_fn is not None}
    if wanted is not None:  # for the planner's compiled backwards; the node loop skips too
        accumulate = _only(wanted, accumulate)
    planner = None if create_graph or within else _seams.planner
    if (
        planner is not None
        and len(roots) == 1
        and grads_in[0] is None
        and not retain_graph
        and isinstance(roots[0], _tc.Tensor)
        and not _hooks.active()
        and planner.run_root(roots[0], accumulate)
    ):
        return

    buffers: dict[Node, list[jax.Array | None]] = {}
    starts: list[Node] = []
    for i, (root, g) in enumerate(zip(roots, grads_in, strict=True)):
        edge = _root_edge(root, i)
        grad = _root_grad(root, g, i)
        if create_graph:  # a given Tensor keeps its graph (a gradient of a gradient)
            keep = isinstance(g, _tc.Tensor) and g._value is grad
            grad = g if keep else _tc.Tensor._wrap(grad)
        buf = buffers.get(edge.node)
        if buf is None:
            buf = buffers[edge.node] = [None] * edge.node.num_outputs
            starts.append(edge.node)
        buf[edge.output_nr] = _add(buf[edge.output_nr], grad)

    deps = _dependencies(starts)
    hooked = _hooks.active() and _hooks.reaches(itertools.chain(starts, deps))
    if (
        not hooked
        and planner is not None
        and planner.run_graph(starts, buffers, deps, retain_graph, accumulate)
    ):
        return
    runs = None if wanted is None else _leading_to(starts, wanted, within)
    ready = [(-n.seq, id(n), n) for n in starts if deps.get(n, 0) == 0]
    heapq.heapify(ready)
    with _hooks.final_callbacks(hooked), _grad_mode.set_grad_enabled(create_graph):
        while ready:
            _, _, node = heapq.heappop(ready)
            grads = buffers.pop(node) if create_graph else _placed(buffers.pop(node))
            if (
                wanted is not None
                and isinstance(node, AccumulateGrad)
                and id(node.variable) not in wanted
            ):
                continue  # a leaf not asked for: its sink does not run
            if hooked:  # Tensor.register_hook on each output, then Node.register_prehook
                grads = _hooks.before_node(node, grads, capture, create_graph)
            if isinstance(node, AccumulateGrad):
                if grads[0] is not None:
                    accumulate(node.variable, grads[0])
                    if hooked and not capture:  # post-accumulate-grad, then Node.register_hook
                        _hooks.after_accumulate(node.variable)
                        _hooks.after_node(node, (), grads, create_graph)
                continue
            if within:  # a non-leaf asked for: its summed gradient
                for nr, g in enumerate(grads):
                    t = within.get((node, nr))
                    if t is not None and g is not None:
                        accumulate(t, g)
            if (runs is not None and node not in runs) or (
                all(g is None for g in grads) and not getattr(node, "run_without_grads", False)
            ):
                in_grads: Sequence[Any] = (None,) * len(node.next_edges)
            else:
                if create_graph:
                    in_grads = _higher_order.apply_graph(node, grads)
                else:
                    in_grads = node.apply(tuple(grads))
                if hooked:  # Node.register_hook
                    in_grads = _hooks.after_node(node, in_grads, grads, create_graph)
                if not retain_graph:
                    node.release()
            for edge, g in zip(node.next_edges, in_grads, strict=True):
                if edge is None:
                    continue
                nxt = edge.node
                buf = buffers.get(nxt)
                if buf is None:
                    buf = buffers[nxt] = [None] * nxt.num_outputs
                if g is not None:
                    held = buf[edge.output_nr]
                    if create_graph:
                        buf[edge.output_nr] = g if held is None else held + g  # recorded
                    else:
                        buf[edge.output_nr] = _sum_into(held, g)
                left = deps[nxt] - 1
                deps[nxt] = left
                if left == 0:
                    heapq.heappush(ready, (-nxt.seq, id(nxt), nxt))


def _edge_of(t: Tensor) -> tuple[Node, int]:
    return (t._grad_fn, t._output_nr)  # type: ignore[return-value]


def _leading_to(
    starts: Sequence[Node], wanted: set[int], within: dict[tuple[Node, int], Tensor]
) -> set[Node]:
    """The nodes with an edge into a wanted leaf's sink or a wanted non-leaf's node, or
    into a node that has one: those a backward for ``inputs`` runs (torch runs no other)."""
    targets = {node for node, _ in within}
    runs: set[Node] = set()
    done: set[Node] = set()
    stack: list[tuple[Node, bool]] = [(n, False) for n in starts]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            for edge in node.next_edges:
                if edge is None:
                    continue
                nxt = edge.node
                if (
                    nxt in runs
                    or nxt in targets
                    or (isinstance(nxt, AccumulateGrad) and id(nxt.variable) in wanted)
                ):
                    runs.add(node)
                    break
            continue
        if node in done:
            continue
        done.add(node)
        stack.append((node, True))
        stack.extend((e.node, False) for e in node.next_edges if e is not None)
    return runs


def accumulate_graph(leaf: Tensor, grad: Tensor) -> None:
    """``create_graph``'s ``accumulate``: ``leaf.grad`` becomes ``grad`` (a Tensor on the
    tape), or ``leaf.grad + grad``, recorded, as torch's does."""
    with _grad_mode.enable_grad():
        leaf._grad = grad if leaf._grad is None else leaf._grad + grad


def _only(wanted: set[int], accumulate: Accumulate) -> Accumulate:
    """``accumulate`` for the leaves whose ids are in ``wanted``; the others get nothing."""

    def only(leaf: Tensor, grad: jax.Array) -> None:
        if id(leaf) in wanted:
            accumulate(leaf, grad)

    return only


def release_graph(roots: Sequence[Tensor | GradientEdge | Node]) -> int:
    """Free every node reachable from ``roots`` (as a backward without ``retain_graph`` would).

    For a distributed context that ran several backward passes with
    ``retain_graph=True`` and is now done. Leaf sinks are left alone.

    Returns:
        How many nodes were released.
    """
    starts: list[Node] = []
    for r in roots:
        if isinstance(r, Node):
            starts.append(r)
        elif isinstance(r, GradientEdge):
            starts.append(r.node)
        elif isinstance(r, _tc.Tensor) and r.grad_fn is not None:
            starts.append(r.grad_fn)
    seen = set(starts)
    stack = list(starts)
    count = 0
    while stack:
        node = stack.pop()
        if not isinstance(node, AccumulateGrad) and not node.released:
            node.release()
            count += 1
        for edge in node.next_edges:
            if edge is not None and edge.node not in seen:
                seen.add(edge.node)
                stack.append(edge.node)
    return count
