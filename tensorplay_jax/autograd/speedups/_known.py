"""A known backward: a recurring backward from one pending root, one compiled call, no graph walk.

When ``_fused.try_fused`` fuses a backward from one pending root whose whole graph
lies in the root's segment (``_lazy``), what it worked out (the nodes' op indices
in run order, the leaves' segment input indices, the backward plan) is kept here,
keyed by the segment's pattern and the root (``STATE.known``). The next
backward from the same root of the same pattern (``try_pending``) checks that the
leaves are still leaves and that no saved input was written in place, and runs
the segment's forward and the backward as one compiled call.

Only what can still be seen comes back from that call: the values of the
segment's outputs that are still alive once the nodes this backward releases
have dropped what they saved (an intermediate saved only by the next operation
dies with it), and the pullbacks only when a node off the backward's graph is
alive. The programs are
compiled once per (live outputs, pullbacks wanted), with no static arguments to
hash per call.

Example:
    >>> import tensorplay_jax as tp
    >>> w = tp.ones(3, requires_grad=True)
    >>> for _ in range(5):  # the later steps run as one known program
    ...     w.grad = None
    ...     (w * 2.0).sum().backward()
    >>> w.grad
    tensor([2., 2., 2.])
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from tensorplay_jax.autograd._accumulate import (
    Accumulator,
    accumulator,
    fold_mode,
    give_back,
    split,
    take_all,
)
from tensorplay_jax.autograd._cache import CACHE, ones_like, zero_cotangent
from tensorplay_jax.autograd._node import AccumulateGrad, Node, VJPNode
from tensorplay_jax.autograd.speedups import _lazy
from tensorplay_jax.autograd.speedups._kept_inputs import Layout
from tensorplay_jax.autograd.speedups._state import STATE
from tensorplay_jax.runtime import xla_options

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

# plan = (steps, roots, n_leaves): steps[k] = (out_info, targets) for the k-th node run,
# targets[j] = (is_leaf, index, output_nr) for its j-th input; roots[i] = (k, output_nr).
Plan = tuple[Any, ...]


def backward_body(
    plan: Plan, pullbacks: Sequence[Any], root_cts: tuple[Any, ...]
) -> tuple[Any, ...]:
    """The fused backward (traced): each gradient slot's value (the reached leaves', then
    any sinks' inputs). What the accumulator holds is summed after the call
    (``add_held``), so the program does not depend on it."""
    steps, roots, n_slots = plan
    bufs: dict[tuple[int, int], Any] = {}
    for slot, ct in zip(roots, root_cts, strict=True):
        bufs[slot] = ct if slot not in bufs else bufs[slot] + ct
    leaves: list[Any] = [None] * n_slots
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
    return tuple(leaves)


@functools.partial(xla_options.jit, donate_argnums=1)
def _sums(held: tuple[Any, ...], donated: tuple[Any, ...], grads: tuple[Any, ...]) -> Any:
    """``held + grad`` per leaf (``donated``: the sum may take that buffer)."""
    return tuple((h if d is None else d) + g for h, d, g in zip(held, donated, grads, strict=True))


def add_held(
    taken: Sequence[tuple[Any, bool]], grads: Sequence[Any], sums_only: bool
) -> tuple[list[Any], list[Any]]:
    """The leaves' gradients and their sums with what the accumulator held (``taken``:
    ``Accumulator.take``'s answers; None where it held nothing), the sums by one small
    program; with ``sums_only``, a leaf that held something gets only the sum.

    A whole backward that summed in its own program would depend on what the
    accumulator holds (nothing at a context's first pass, arrays it keeps at the second,
    arrays it donates later) and compile once for each, each as long as the first;
    this program is a handful of additions.
    """
    grads_out = list(grads)
    summed: list[Any] = [None] * len(taken)
    at = [i for i, (h, _) in enumerate(taken) if h is not None]
    if at:
        held, donated = split([taken[i] for i in at])
        for i, total in zip(at, _sums(held, donated, tuple(grads[i] for i in at)), strict=True):
            summed[i] = total
            if sums_only:
                grads_out[i] = None
    return grads_out, summed


def finish(
    order: Sequence[VJPNode],
    leaves: Sequence[Tensor],
    taken: Sequence[tuple[Any, bool]],
    grads: Sequence[Any],
    summed: Sequence[Any],
    retain_graph: bool,
    accumulate: Callable[[Tensor, Any], None],
) -> None:
    """Release the nodes (unless ``retain_graph``) and hand each leaf its gradient (and its
    sum with what the accumulator held, ``taken``: ``Accumulator.take``'s answers)."""
    if not retain_graph:
        for node in order:
            node.release()
    acc = accumulator(accumulate)
    for leaf, (h, donated), g, total in zip(leaves, taken, grads, summed, strict=True):
        if acc is None:
            accumulate(leaf, g)
        else:
            acc.put(leaf, h, donated, g, total)


class _Known:
    """What ``try_fused`` worked out for a backward from one pending root whose graph lies
    in the root's segment: the backward's nodes (their op indices, in run order), the
    leaves (their segment input indices), the backward plan, the segment ops off the
    backward's graph, the root's cotangent (ones; None: not a one-element root), and
    whether the accumulator takes only the sums (``Accumulator.sums_only``)."""

    __slots__ = ("ct", "inside", "leaf_inputs", "op_indices", "plan", "programs", "sums_only")

    def __init__(
        self,
        op_indices: tuple[int, ...],
        leaf_inputs: tuple[int, ...],
        plan: Plan,
        n_ops: int,
        ct: Any,
        folds: bool | None,
    ) -> None:
        self.sums_only = bool(folds)
        self.op_indices = op_indices
        self.leaf_inputs = leaf_inputs
        self.plan = plan
        self.inside = tuple(k in op_indices for k in range(n_ops))  # on the backward's graph
        self.ct = ct
        # the live outputs (bit p: the p-th output of the segment, in op order) times 2,
        # plus 1 when the pullbacks are wanted -> (the compiled forward-backward, its
        # pullbacks' layout)
        self.programs: dict[int, tuple[Callable[..., Any], Layout]] = {}


# STATE.known: (the segment's pattern, the root's op and output, the accumulator's
# fold_mode) -> _Known
_MAX_PROGRAMS = 64  # per known backward (a new set of live outputs compiles one more)


def known_shape(
    seg: _lazy.Segment | None,
    starts: list[Node],
    order: list[VJPNode],
    sinks: list[AccumulateGrad],
    plan: Plan,
    folds: bool | None,
) -> tuple[Hashable, _Known] | None:
    """The ``STATE.known`` entry for this backward, if its whole graph is in ``seg``."""
    if seg is None or seg.closed or len(starts) != 1 or len(plan[1]) != 1:
        return None
    if any(n.lazy is not seg for n in order):
        return None
    at = {id(t): k for k, t in enumerate(seg.input_tensors) if t is not None}
    leaf_inputs = tuple(at.get(id(s.variable), -1) for s in sinks)
    if -1 in leaf_inputs:
        return None
    root = starts[0]
    out_nr = plan[1][0][1]
    aval = root.lazy_op.structs[out_nr]
    ct = ones_like(aval) if math.prod(aval.shape) == 1 else None
    key = (seg.pattern, root.lazy_index, out_nr, folds)
    known = _Known(
        tuple(n.lazy_index for n in order), leaf_inputs, plan, len(seg.pattern.ops), ct, folds
    )
    return key, known


def _pending_program(
    pattern: _lazy.Pattern,
    plan: Plan,
    sources: tuple[int, ...],
    want_pullbacks: bool,
    where: tuple[tuple[int, int], ...],
    layout: Layout,
    inputs: tuple[Any, ...],
    root_ct: Any,
) -> Any:
    """``_forward_backward`` for ``try_pending``: only the outputs at ``where`` (the live
    Tensors') come back, and the pullbacks only if wanted."""
    CACHE.trace_counts["<fused forward-backward>"] += 1
    outs, pbs = _lazy.run_plan_traced(pattern, inputs)
    grads = backward_body(plan, [pbs[s] for s in sources], (root_ct,))
    if want_pullbacks:  # without the inputs they keep (``layout.restore`` adds them)
        pbs = layout.strip(pbs, inputs)
    return [outs[k][i] for k, i in where], (pbs if want_pullbacks else None), grads


def try_pending(root: Tensor, accumulate: Callable[[Tensor, Any], None]) -> bool:
    """``root.backward()`` as one compiled call when ``root`` (one element) is pending in a
    segment whose backward from ``root`` ran before (``STATE.known``): no graph walk
    (False: not so)."""
    node = root._grad_fn
    seg = None if node is None else node.lazy
    if seg is None:
        return False
    acc = accumulator(accumulate)
    with seg.lock:
        known = STATE.known.get((seg.pattern, node.lazy_index, root._output_nr, fold_mode(acc)))
        if known is None or known.ct is None:
            return False
        ran = _run_known(seg, known, known.ct, acc)
    if ran is None:
        return False
    finish(*ran, False, accumulate)
    return True


def run_remembered(
    seg: _lazy.Segment,
    known: tuple[Hashable, _Known],
    root_ct: Any,
    accumulate: Callable[[Tensor, Any], None],
) -> bool:
    """Keep ``known_shape``'s entry (the first one kept for its key: it holds the compiled
    programs) and run it from ``root_ct`` (False: it cannot run; take the general path)."""
    key, entry = known
    entry = STATE.known.put(key, entry)
    with seg.lock:
        ran = _run_known(seg, entry, root_ct, accumulator(accumulate))
    if ran is None:
        return False
    finish(*ran, False, accumulate)
    return True


def _run_known(seg: _lazy.Segment, known: _Known, root_ct: Any, acc: Accumulator | None) -> Any:
    """Run ``seg``'s forward and the ``known`` backward through it as one compiled call, with
    ``seg.lock`` held; only what can still be seen comes back: the live Tensors' values,
    and the pullbacks when a node off the backward's graph is alive. The backward's nodes
    are released here. Returns ``finish``'s first arguments (None: ``seg`` ran already,
    or a leaf of the known graph now has a producer)."""
    if seg.closed:
        return None
    inputs = seg.input_tensors
    leaves = [inputs[k] for k in known.leaf_inputs]
    if any(t._grad_fn is not None for t in leaves):  # type: ignore[union-attr]
        return None  # an input that was a leaf now has a producer: a larger graph
    nodes = [ref() for ref in seg.nodes]
    want = False
    for n, inside in zip(nodes, known.inside, strict=True):
        if inside:
            n.check_saved()  # type: ignore[union-attr]  # raises torch's error
        else:
            want = want or n is not None
    # The nodes this backward releases drop what they saved now (they would after the
    # call): an output that only they held (an intermediate the next operation saved)
    # dies here, and only the outputs still alive get their values back.
    for n, inside in zip(nodes, known.inside, strict=True):
        if inside:
            n.saved = n.versions = ()  # type: ignore[union-attr]
    live = []
    bits, p = 0, 1
    for refs in seg.outs:
        for ref in refs:
            t = ref()
            if t is not None:
                live.append(t)
                bits |= p
            p <<= 1
    fkey = bits << 1 | want
    made = known.programs.get(fkey)
    if made is None:
        made = _program(seg, known, fkey)
    program, layout = made
    seg.closed = True
    args = tuple(seg.inputs)
    taken = take_all(acc, leaves)
    try:
        values, pbs, grads = program(args, root_ct)
        grads, summed = add_held(taken, grads, known.sums_only)
    except BaseException:
        give_back(acc, leaves, taken)
        raise
    if pbs is not None:
        pbs = layout.restore(pbs, args)
    for t, v in zip(live, values, strict=True):
        t._value = v
    for k, (n, inside) in enumerate(zip(nodes, known.inside, strict=True)):
        if n is not None:
            n.lazy = None
            if inside:
                n.release()  # the backward ran through it (no retain_graph)
            elif pbs is not None:
                n.vjp = pbs[k]
    seg.release()
    return (), leaves, taken, grads, summed


def _program(seg: _lazy.Segment, known: _Known, fkey: int) -> tuple[Callable[..., Any], Layout]:
    """The compiled forward-backward for ``_run_known``'s ``fkey`` and the layout of the
    pullbacks it returns, made once."""
    if len(known.programs) >= _MAX_PROGRAMS:
        known.programs.clear()
    places = [(k, i) for k, refs in enumerate(seg.outs) for i in range(len(refs))]
    where = tuple(at for p, at in enumerate(places) if fkey >> (p + 1) & 1)
    layout = Layout()
    program = xla_options.jit(
        functools.partial(
            _pending_program,
            seg.pattern,
            known.plan,
            known.op_indices,
            bool(fkey & 1),
            where,
            layout,
        )
    )
    known.programs[fkey] = (program, layout)
    return program, layout
