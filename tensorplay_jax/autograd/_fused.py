"""A backward pass as ONE compiled call, for graph shapes the program has run before.

The node-by-node engine (``_engine``) dispatches one compiled pullback per node.
In a training loop the same graph shape comes back every step, so once a shape
(the nodes' operations, output avals and edges, in execution order) has been
seen ``FUSE_AFTER`` times, its whole backward runs as one ``jax.jit`` function
of the nodes' pullbacks (their residuals are the arguments) and the root
cotangents, returning each reached leaf's summed gradient. A new shape (an
episode of a new length) never compiles anything here: it runs node by node
until it has recurred, so variable-length loops do not recompile per step.

Only graphs made of ``VJPNode`` s (and leaf sinks) are fused; a graph with a
Python-callable node (an RPC send/recv edge, a custom rule) or a freed node
runs node by node, which also raises the usual errors.

Nodes whose forward is still pending (``_lazy``) and wait in one segment run
their forward in the same program as the backward (``_forward_backward``). A
backward from one pending root whose whole graph lies in its segment keeps
what this module worked out for it (``_pending_plans``, keyed by the segment's
pattern and the root), so the next such backward (``try_pending``) checks that
the leaves are still leaves and dispatches, without walking the graph.
"""

from __future__ import annotations

import collections
import functools
import heapq
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from tensorplay_jax.autograd import _engine, _lazy
from tensorplay_jax.autograd._cache import _trace_counts, zero_cotangent
from tensorplay_jax.autograd._node import AccumulateGrad, Node, VJPNode

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

FUSE_AFTER = 3  # runs of one graph shape before its backward is compiled as one call
MAX_FUSED_NODES = 256  # larger graphs run node by node (compile time grows with size)
_MAX_SHAPES = 1024

_seen: collections.OrderedDict[Hashable, int] = collections.OrderedDict()

# plan = (steps, roots, n_leaves): steps[k] = (out_info, targets) for the k-th node run,
# targets[j] = (is_leaf, index, output_nr) for its j-th input; roots[i] = (k, output_nr).
Plan = tuple[Any, ...]


def _backward_body(
    plan: Plan, pullbacks: Sequence[Any], root_cts: tuple[Any, ...], held: tuple[Any, ...]
) -> Any:
    steps, roots, n_leaves = plan
    bufs: dict[tuple[int, int], Any] = {}
    for slot, ct in zip(roots, root_cts, strict=True):
        bufs[slot] = ct if slot not in bufs else bufs[slot] + ct
    leaves: list[Any] = [None] * n_leaves
    for k, ((treedef, avals), targets) in enumerate(steps):
        full = [
            bufs.pop((k, i)).astype(dtype) if (k, i) in bufs else zero_cotangent(shape, dtype)
            for i, (shape, dtype) in enumerate(avals)
        ]
        grads = pullbacks[k](jax.tree_util.tree_unflatten(treedef, full))
        for (is_leaf, idx, out_nr), g in zip(targets, grads, strict=True):
            if is_leaf:
                leaves[idx] = g if leaves[idx] is None else leaves[idx] + g
            else:
                slot = (idx, out_nr)
                bufs[slot] = g if slot not in bufs else bufs[slot] + g
    # None where the leaf held nothing: its sum is its gradient (no second output buffer)
    summed = tuple(None if h is None else h + g for h, g in zip(held, leaves, strict=True))
    return tuple(leaves), summed


@functools.partial(jax.jit, static_argnums=0)
def _fused_backward(
    plan: Plan, pullbacks: tuple[Any, ...], root_cts: tuple[Any, ...], held: tuple[Any, ...]
) -> Any:
    """Each reached leaf's gradient, and (``held``: each leaf's ``.grad`` or None) its sum
    with what the leaf already held, so accumulating costs no call of its own."""
    _trace_counts["<fused backward>"] += 1
    return _backward_body(plan, pullbacks, root_cts, held)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _forward_backward(
    segment: tuple[Any, ...],
    plan: Plan,
    sources: tuple[int, ...],
    want_pullbacks: bool,
    inputs: tuple[Any, ...],
    given: tuple[Any, ...],
    root_cts: tuple[Any, ...],
    held: tuple[Any, ...],
) -> Any:
    """A pending segment's forward (``_lazy``) and the backward through it, as one program:
    the segment's outputs (and its pullbacks, if wanted), then ``_fused_backward``'s result.
    ``sources[k]`` is the segment op of the k-th backward node, or -1: ``given[k]``."""
    _trace_counts["<fused forward-backward>"] += 1
    outs, pbs = _lazy.run_plan_traced(segment, inputs)
    pullbacks = [pbs[s] if s >= 0 else g for s, g in zip(sources, given, strict=True)]
    grads = _backward_body(plan, pullbacks, root_cts, held)
    if want_pullbacks:  # without the inputs they keep (``_lazy.with_inputs`` adds them)
        pbs = _lazy.strip_inputs((segment, plan, sources), pbs, inputs)
    return outs, (pbs if want_pullbacks else None), grads


def _pending_segment(order: list[VJPNode]) -> _lazy.Segment | None:
    """The one segment that ``order``'s pending nodes wait in (None: none, or several)."""
    segs = {n.lazy for n in order if n.lazy is not None}
    return segs.pop() if len(segs) == 1 else None


def _with_forward(
    order: list[VJPNode], plan: Plan, root_cts: tuple[Any, ...], held: tuple[Any, ...], retain: bool
) -> Any:
    """The fused backward's result; when ``order``'s pending nodes wait in one segment,
    that segment's forward runs in the same program."""
    seg = _pending_segment(order)
    if seg is not None:
        with seg.lock:
            if not seg.closed:
                in_order = set(order)
                want = retain or any(
                    (n := op.node()) is not None and n not in in_order for op in seg.ops
                )
                sources = tuple(n.lazy_index if n.lazy is seg else -1 for n in order)
                given = tuple(None if n.lazy is seg else n.vjp for n in order)
                seg.closed = True
                key, inputs = (seg.plan(), plan, sources), tuple(seg.inputs)
                outs, pbs, grads = _forward_backward(*key, want, inputs, given, root_cts, held)
                if want:
                    pbs = _lazy.with_inputs(key, pbs, inputs)
                seg.finish(outs, pbs)
                return grads
    for n in order:
        if n.lazy is not None:
            n.lazy.flush()
    return _fused_backward(plan, tuple(n.vjp for n in order), root_cts, held)


def _schedule(
    starts: list[Node], buffers: dict[Node, list[Any]], deps: dict[Node, int]
) -> tuple[list[VJPNode], list[AccumulateGrad]] | None:
    """The nodes the engine would run, in its order, and the leaves it would reach.

    None when a node that would run is not a live ``VJPNode``. The order is the
    engine's (ready nodes, latest created first); which nodes receive a gradient
    depends only on the graph, since a VJP node returns one for every input.
    """
    pending = dict(deps)
    reached = {n for n in starts if any(g is not None for g in buffers[n])}
    ready = [(-n.seq, id(n), n) for n in starts if pending.get(n, 0) == 0]
    heapq.heapify(ready)
    order: list[VJPNode] = []
    leaves: list[AccumulateGrad] = []
    while ready:
        _, _, node = heapq.heappop(ready)
        if isinstance(node, AccumulateGrad):
            if node in reached:
                leaves.append(node)
            continue
        if node in reached:
            if type(node) is not VJPNode or node.released:
                return None
            order.append(node)
        for edge in node.next_edges:
            if edge is None:
                continue
            nxt = edge.node
            if node in reached:
                reached.add(nxt)
            left = pending[nxt] - 1
            pending[nxt] = left
            if left == 0:
                heapq.heappush(ready, (-nxt.seq, id(nxt), nxt))
    return order, leaves


def try_fused(
    starts: list[Node],
    buffers: dict[Node, list[Any]],
    deps: dict[Node, int],
    retain_graph: bool,
    accumulate: Callable[[Tensor, Any], None],
) -> bool:
    """Run the backward as one compiled call if its graph shape recurs (False: node by node)."""
    if len(deps) > MAX_FUSED_NODES:
        return False
    scheduled = _schedule(starts, buffers, deps)
    if scheduled is None:
        return False
    order, sinks = scheduled
    if not order or any(n not in order for n in starts):
        return False
    index: dict[Node, int] = {node: k for k, node in enumerate(order)}
    leaf_index = {sink: i for i, sink in enumerate(sinks)}
    steps = []
    for node in order:
        targets = tuple(
            (True, leaf_index[e.node], 0)
            if isinstance(e.node, AccumulateGrad)
            else (False, index[e.node], e.output_nr)
            for e in node.next_edges
            if e is not None
        )
        steps.append((node.out_info, targets))
    roots, root_cts = [], []
    for node in starts:
        for out_nr, g in enumerate(buffers[node]):
            if g is not None:
                roots.append((index[node], out_nr))
                root_cts.append(g)
    plan = (tuple(steps), tuple(roots), len(sinks))
    seg = _pending_segment(order)
    shape_key = (
        plan,
        tuple((n.name, n.origin) for n in order),
        seg.plan() if seg is not None else None,
    )
    count = _seen.pop(shape_key, 0) + 1
    _seen[shape_key] = count
    while len(_seen) > _MAX_SHAPES:
        _seen.popitem(last=False)
    if count < FUSE_AFTER:
        return False
    for node in order:
        node.check_saved()
    into_grad = accumulate is _engine.accumulate_into_grad
    held = tuple(_held_grad(s.variable) for s in sinks) if into_grad else (None,) * len(sinks)
    known = _known_shape(seg, starts, order, sinks, plan, into_grad) if not retain_graph else None
    grads, summed = _with_forward(order, plan, tuple(root_cts), held, retain_graph)
    if known is not None:
        _pending_plans[known[0]] = known[1]
        while len(_pending_plans) > _MAX_SHAPES:
            del _pending_plans[next(iter(_pending_plans))]
    _finish(order, [s.variable for s in sinks], held, grads, summed, retain_graph, accumulate)
    return True


def _finish(
    order: Sequence[VJPNode],
    leaves: Sequence[Tensor],
    held: tuple[Any, ...],
    grads: Sequence[Any],
    summed: Sequence[Any],
    retain_graph: bool,
    accumulate: Callable[[Tensor, Any], None],
) -> None:
    if not retain_graph:
        for node in order:
            node.release()
    into_grad = accumulate is _engine.accumulate_into_grad
    for leaf, h, g, total in zip(leaves, held, grads, summed, strict=True):
        total = g if total is None else total
        if not into_grad or not _engine.replace_grad(leaf, h, total):
            accumulate(leaf, g)


# A backward from one pending root whose graph lies in the root's segment: the segment's
# plan, the root's op and output, and whether grads go into .grad -> what try_fused
# computed for it (op indices in run order, the leaves' input indices, the backward plan).
_pending_plans: dict[Hashable, tuple[tuple[int, ...], tuple[int, ...], Plan]] = {}


def _known_shape(
    seg: _lazy.Segment | None,
    starts: list[Node],
    order: list[VJPNode],
    sinks: list[AccumulateGrad],
    plan: Plan,
    into_grad: bool,
) -> tuple[Hashable, Any] | None:
    """The ``_pending_plans`` entry for this backward, if its whole graph is in ``seg``."""
    if seg is None or seg.closed or len(starts) != 1 or len(plan[1]) != 1:
        return None
    if any(n.lazy is not seg for n in order):
        return None
    at = {id(t): k for k, t in enumerate(seg.input_tensors) if t is not None}
    leaf_inputs = tuple(at.get(id(s.variable), -1) for s in sinks)
    if -1 in leaf_inputs:
        return None
    root = starts[0]
    key = (seg.plan(), root.lazy_index, plan[1][0][1], into_grad)
    return key, (tuple(n.lazy_index for n in order), leaf_inputs, plan)


def try_pending(root: Tensor, accumulate: Callable[[Tensor, Any], None]) -> bool:
    """``root.backward()`` as one compiled call when ``root`` is pending in a segment whose
    backward from ``root`` ran before (``_pending_plans``): no graph walk (False: not so)."""
    node = root._grad_fn
    seg = None if node is None else node.lazy
    if seg is None:
        return False
    into_grad = accumulate is _engine.accumulate_into_grad
    with seg.lock:
        if seg.closed:
            return False
        known = _pending_plans.get((seg.plan(), node.lazy_index, root._output_nr, into_grad))
        if known is None:
            return False
        op_indices, leaf_inputs, plan = known
        leaves = [seg.input_tensors[k] for k in leaf_inputs]
        if any(t._grad_fn is not None for t in leaves):  # type: ignore[union-attr]
            return False  # an input that was a leaf now has a producer: a larger graph
        order = [seg.ops[j].node() for j in op_indices]
        for n in order:
            n.check_saved()  # type: ignore[union-attr]
        aval = seg.ops[node.lazy_index].structs[root._output_nr]
        held = tuple(_held_grad(t) for t in leaves) if into_grad else (None,) * len(leaves)
        in_order = set(order)
        want = any((n := op.node()) is not None and n not in in_order for op in seg.ops)
        seg.closed = True
        key, inputs = (seg.plan(), plan, op_indices), tuple(seg.inputs)
        given, cts = (None,) * len(order), (_engine.ones_like(aval),)
        outs, pbs, (grads, summed) = _forward_backward(*key, want, inputs, given, cts, held)
        if want:
            pbs = _lazy.with_inputs(key, pbs, inputs)
        seg.finish(outs, pbs)
    _finish(order, leaves, held, grads, summed, False, accumulate)  # type: ignore[arg-type]
    return True


def _held_grad(leaf: Tensor) -> Any:
    grad = leaf._grad
    return None if grad is None else grad._value
