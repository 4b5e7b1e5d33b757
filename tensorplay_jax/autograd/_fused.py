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
backward from one pending root whose whole graph lies in its segment is kept
(``_known``), and it and the next such backward run without the graph walk.
"""

from __future__ import annotations

import collections
import functools
import heapq
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from tensorplay_jax.autograd import _engine, _known, _lazy
from tensorplay_jax.autograd._cache import _trace_counts
from tensorplay_jax.autograd._known import Plan, backward_body, finish, held_grad, known_shape
from tensorplay_jax.autograd._node import AccumulateGrad, Node, VJPNode
from tensorplay_jax.runtime import xla_options

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

FUSE_AFTER = 3  # runs of one graph shape before its backward is compiled as one call
MAX_FUSED_NODES = 256  # larger graphs run node by node (compile time grows with size)
_MAX_SHAPES = 1024

_seen: collections.OrderedDict[Hashable, int] = collections.OrderedDict()


@functools.partial(xla_options.jit, static_argnums=0)
def _fused_backward(
    plan: Plan, pullbacks: tuple[Any, ...], root_cts: tuple[Any, ...], held: tuple[Any, ...]
) -> Any:
    """Each reached leaf's gradient, and (``held``: each leaf's ``.grad`` or None) its sum
    with what the leaf already held, so accumulating costs no call of its own."""
    _trace_counts["<fused backward>"] += 1
    return backward_body(plan, pullbacks, root_cts, held)


@functools.partial(xla_options.jit, static_argnums=(0, 1, 2, 3))
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
    grads = backward_body(plan, pullbacks, root_cts, held)
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
                    (n := ref()) is not None and n not in in_order for ref in seg.nodes
                )
                sources = tuple(n.lazy_index if n.lazy is seg else -1 for n in order)
                given = tuple(None if n.lazy is seg else n.vjp for n in order)
                seg.closed = True
                key, inputs = (seg.pattern, plan, sources), tuple(seg.inputs)
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
        seg.pattern if seg is not None else None,
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
    known = known_shape(seg, starts, order, sinks, plan, into_grad) if not retain_graph else None
    if known is not None and _known.run_remembered(seg, known, root_cts[0], accumulate):  # type: ignore[arg-type]
        return True
    held = tuple(held_grad(s.variable) for s in sinks) if into_grad else (None,) * len(sinks)
    grads, summed = _with_forward(order, plan, tuple(root_cts), held, retain_graph)
    finish(order, [s.variable for s in sinks], held, grads, summed, retain_graph, accumulate)
    return True
