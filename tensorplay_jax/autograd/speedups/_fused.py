"""A backward pass as ONE compiled call, for graph shapes the program has run before.

The node-by-node engine (``_engine``) dispatches one compiled pullback per node.
In a training loop the same graph shape comes back every step, so once a shape
(the nodes' operations, output avals and edges, in execution order) has been
seen ``FUSE_AFTER`` times, its whole backward runs as one ``jax.jit`` function
of the nodes' pullbacks (their residuals are the arguments) and the root
cotangents, returning each reached leaf's summed gradient. A new shape (an
episode of a new length) never compiles anything here: it runs node by node
until it has recurred, so variable-length loops do not recompile per step.

Only graphs made of ``VJPNode`` s and their ends are fused. An end is a leaf,
or a *sink*: a Python-callable node with no inputs of its own (distributed
autograd's recv node, whose backward sends the gradient to the worker the
Tensor came from). The program returns the cotangents flowing into each sink,
and the sink runs on them right after the program, before the leaves take
their gradients, so a gradient bound for a peer leaves as early as it would
node by node. A graph with any other Python-callable node (a custom rule, a
node with inputs) or a freed node runs node by node, which also raises the
usual errors.

A backward through segments whose program was compiled at their first run
(``STATE.fresh``: their operations were new) is fused at its first run too:
node by node it would compile a program per pullback.

Nodes whose forward is still pending (``_lazy``) and wait in one segment run
their forward in the same program as the backward (``_forward_backward``). A
backward from one pending root whose whole graph lies in its segment is kept
(``_known``), and it and the next such backward run without the graph walk.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tensorplay_jax.autograd._accumulate import accumulator, fold_mode, give_back, take_all
from tensorplay_jax.autograd._cache import CACHE
from tensorplay_jax.autograd._node import AccumulateGrad, Node, VJPNode
from tensorplay_jax.autograd.speedups import _known, _lazy
from tensorplay_jax.autograd.speedups._kept_inputs import Layout
from tensorplay_jax.autograd.speedups._known import (
    Plan,
    add_held,
    backward_body,
    finish,
    known_shape,
)
from tensorplay_jax.autograd.speedups._state import STATE
from tensorplay_jax.runtime import xla_options

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

FUSE_AFTER = 3  # runs of one graph shape before its backward is compiled as one call
MAX_FUSED_NODES = 256  # larger graphs run node by node (compile time grows with size)


@functools.partial(xla_options.jit, static_argnums=0)
def _fused_backward(plan: Plan, pullbacks: tuple[Any, ...], root_cts: tuple[Any, ...]) -> Any:
    """Each gradient slot's value (the reached leaves', then the sinks' inputs')."""
    CACHE.trace_counts["<fused backward>"] += 1
    return backward_body(plan, pullbacks, root_cts)


def _forward_backward(
    segment: Any,
    plan: Plan,
    sources: tuple[int, ...],
    want_pullbacks: bool,
    layout: Layout,
    inputs: tuple[Any, ...],
    given: tuple[Any, ...],
    root_cts: tuple[Any, ...],
) -> Any:
    """A pending segment's forward (``_lazy``) and the backward through it, as one program:
    the segment's outputs (and its pullbacks, if wanted), then ``_fused_backward``'s result.
    ``sources[k]`` is the segment op of the k-th backward node, or -1: ``given[k]``."""
    CACHE.trace_counts["<fused forward-backward>"] += 1
    outs, pbs = _lazy.run_plan_traced(segment, inputs)
    pullbacks = [pbs[s] if s >= 0 else g for s, g in zip(sources, given, strict=True)]
    grads = backward_body(plan, pullbacks, root_cts)
    if want_pullbacks:  # without the inputs they keep (``layout.restore`` adds them)
        pbs = layout.strip(pbs, inputs)
    return outs, (pbs if want_pullbacks else None), grads


def _forward_backward_program(key: tuple[Any, ...]) -> tuple[Any, Layout]:
    """The compiled ``_forward_backward`` for ``key`` (its static arguments) and the
    layout of its pullbacks, made once per key (``STATE.programs``)."""
    made = STATE.programs.get(key)
    if made is None:
        layout = Layout()
        program = xla_options.jit(
            functools.partial(_forward_backward, *key, layout),
        )
        made = STATE.programs.put(key, (program, layout))
    return made


def _pending_segment(order: list[VJPNode]) -> _lazy.Segment | None:
    """The one segment that ``order``'s pending nodes wait in (None: none, or several)."""
    segs = {n.lazy for n in order if n.lazy is not None}
    return segs.pop() if len(segs) == 1 else None


def _with_forward(order: list[VJPNode], plan: Plan, root_cts: tuple[Any, ...], retain: bool) -> Any:
    """The fused backward's gradients; when ``order``'s pending nodes wait in one segment,
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
                inputs = tuple(seg.inputs)
                program, layout = _forward_backward_program((seg.pattern, plan, sources, want))
                outs, pbs, grads = program(inputs, given, root_cts)
                if want:
                    pbs = layout.restore(pbs, inputs)
                seg.finish(outs, pbs)
                return grads
    for n in order:
        if n.lazy is not None:
            n.lazy.flush()
    return _fused_backward(plan, tuple(n.vjp for n in order), root_cts)


def _is_sink(node: Node) -> bool:
    """A Python-callable node the fused program can end at: one with no inputs to pass
    gradients on to (distributed autograd's recv node, whose backward sends the
    gradient to the worker the Tensor came from), not freed, and not one the engine
    calls without gradients."""
    return (
        type(node) is not VJPNode
        and not isinstance(node, AccumulateGrad)
        and not node.released
        and not getattr(node, "run_without_grads", False)
        and all(e is None for e in node.next_edges)
    )


def _schedule(
    starts: list[Node], buffers: dict[Node, list[Any]], deps: dict[Node, int]
) -> tuple[list[VJPNode], list[AccumulateGrad], list[Node]] | None:
    """The nodes the engine would run, in its order, the leaves it would reach, and the
    Python-callable sinks (``_is_sink``) it would reach.

    None when a node that would run is neither a live ``VJPNode`` nor a sink, or a
    sink is a start. The order is the engine's (ready nodes, latest created first);
    which nodes receive a gradient depends only on the graph, since a VJP node returns
    one for every input.
    """
    pending = dict(deps)
    reached = {n for n in starts if any(g is not None for g in buffers[n])}
    ready = [(-n.seq, id(n), n) for n in starts if pending.get(n, 0) == 0]
    heapq.heapify(ready)
    order: list[VJPNode] = []
    leaves: list[AccumulateGrad] = []
    sinks: list[Node] = []
    while ready:
        _, _, node = heapq.heappop(ready)
        if isinstance(node, AccumulateGrad):
            if node in reached:
                leaves.append(node)
            continue
        if type(node) is not VJPNode and _is_sink(node) and node not in starts:
            if node in reached:
                sinks.append(node)
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
    return order, leaves, sinks


def _fresh(order: list[VJPNode]) -> bool:
    """Whether most of ``order``'s pullbacks are distinct and new: a backward through
    segments whose program was compiled at their first run (``STATE.fresh``).

    Node by node, such a backward would compile a program for each distinct
    pullback; one program for the whole backward compiles in less time and serves
    every later run of its shape. A graph that repeats a segment (a loop over the
    steps of an episode) has few distinct pullbacks for its size: it runs node by
    node. Each segment counts as fresh for one backward only.
    """
    fresh = STATE.fresh
    new = {(n.origin, n.lazy_index) for n in order if n.origin in fresh}
    for n in order:
        fresh.pop(n.origin, None)
    return 2 * len(new) >= len(order)


def _in_edge_order(order: list[VJPNode], ends: list[Any]) -> list[Any]:
    """``ends`` (leaves or sinks) in the order ``order``'s edges first reach them.

    The plan numbers them, and the plan is the compiled program's key. The engine
    meets them in creation order, which for the same graph shape differs from step
    to step (a leaf's sink is made when a pass first needs it and lives as long as a
    graph holds it); the edges' order is the graph's own.
    """
    wanted = set(ends)
    out: list[Any] = []
    for node in order:
        for edge in node.next_edges:
            if edge is not None and edge.node in wanted:
                wanted.discard(edge.node)
                out.append(edge.node)
    return out


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
    order, leaves, sinks = scheduled
    if not order or any(n not in order for n in starts):
        return False
    leaves = _in_edge_order(order, leaves)
    sinks = _in_edge_order(order, sinks)
    index: dict[Node, int] = {node: k for k, node in enumerate(order)}
    # the program's gradient outputs: one per leaf, then one per output of each sink
    slot: dict[tuple[Node, int], int] = {(leaf, 0): i for i, leaf in enumerate(leaves)}
    for sink in sinks:
        for out_nr in range(sink.num_outputs):
            slot[(sink, out_nr)] = len(slot)
    steps = []
    for node in order:
        targets = tuple(
            (False, index[e.node], e.output_nr)
            if e.node in index
            else (True, slot[(e.node, e.output_nr)], 0)
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
    plan = (tuple(steps), tuple(roots), len(slot))
    seg = _pending_segment(order)
    shape_key = (
        plan,
        tuple((n.name, n.origin) for n in order),
        tuple(n.name for n in sinks),
        seg.pattern if seg is not None else None,
    )
    seen = STATE.seen_shapes
    count = seen.get(shape_key, 0) + 1
    seen.hit(shape_key, count)
    if count == 1 and _fresh(order):
        count = seen[shape_key] = FUSE_AFTER
    if count < FUSE_AFTER:
        return False
    for node in order:
        node.check_saved()
    acc = accumulator(accumulate)
    known = None
    if not retain_graph and not sinks:
        known = known_shape(seg, starts, order, leaves, plan, fold_mode(acc))
    if known is not None and _known.run_remembered(seg, known, root_cts[0], accumulate):  # type: ignore[arg-type]
        return True
    n = len(leaves)
    variables = [s.variable for s in leaves]
    taken = take_all(acc, variables)
    try:
        grads = _with_forward(order, plan, tuple(root_cts), retain_graph)
        leaf_grads, summed = add_held(taken, grads[:n], bool(fold_mode(acc)))
    except BaseException:
        give_back(acc, variables, taken)
        raise
    at = n
    for sink in sinks:  # before the leaves: a gradient bound for a peer leaves first
        sink.apply(tuple(grads[at : at + sink.num_outputs]))
        at += sink.num_outputs
        if not retain_graph:
            sink.release()
    finish(order, variables, taken, leaf_grads, summed, retain_graph, accumulate)
    return True
