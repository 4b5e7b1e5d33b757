"""Deferred recording: the recorded operations of a thread run as one compiled program.

A recorded operation (``call_op`` with an input that requires grad) does not run
at once: it is appended to its thread's *segment*, a small symbolic graph, and
its outputs are pending Tensors whose shape and dtype are known (inferred once
per operation, mask and input avals with ``jax.eval_shape`` of the operation's
forward-with-VJP, so a bad shape raises at the operation, as it does undeferred). The
segment runs when a value is needed: reading a pending Tensor's value
(``.item()``, printing, NumPy conversion, an unrecorded operation on it),
``backward()``, or when it reaches ``MAX_OPS`` operations.

A segment's operations (their entries, masks, input avals and where each input
comes from) make its *pattern* (``_pattern``: one object per sequence, from a
trie). A segment of a pattern seen fewer than ``FUSE_AFTER`` times runs
operation by operation, each with its cached per-operation program, so code
whose graph changes every step compiles nothing new; a pattern seen for the
first time whose operations are mostly new runs as one program at once (they
would be compiled anyway). A recurring pattern runs
as ONE ``jax.jit`` program returning every output and every pullback; at
``backward()`` a recurring pattern whose graph is the backward's runs forward
and backward together in one program (``_fused``).

In a loop the next operation is usually the one the pattern's trie saw next last
time: ``_replay`` checks it against that operation's ``Spec`` (same entry, input
avals and input places) and appends it without building its key; anything else
takes ``record``'s full path.

A node waiting in a segment has ``node.lazy`` set to it: the core runs it through
``Segment.flush`` and reads an output's shape through ``Segment.aval``
(``autograd._seams``).

Example:
    >>> import tensorplay_jax as tp
    >>> w = tp.ones(3, requires_grad=True)
    >>> y = (w * 2).sum()
    >>> tp.autograd.is_pending(y), y.shape
    (True, ())
    >>> y.item(), tp.autograd.is_pending(y)
    (6.0, False)
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._cache import (
    CACHE,
    LEAF,
    _Entry,
    _forward_vjp,
    forward_vjp,
    out_info_of,
)
from tensorplay_jax.autograd._node import GradientEdge, VJPNode
from tensorplay_jax.autograd._seams import PENDING
from tensorplay_jax.autograd.speedups import _host_eval, _pattern
from tensorplay_jax.autograd.speedups._kept_inputs import Layout
from tensorplay_jax.autograd.speedups._pattern import Pattern, Spec
from tensorplay_jax.autograd.speedups._state import STATE
from tensorplay_jax.runtime import xla_options

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

FUSE_AFTER = 3  # runs of one segment pattern before it runs as one compiled program
MAX_OPS = 64  # a segment this long runs at once (bounds what pending values hold alive)

_SCALARS = (int, float, complex, bool)
_Tracer = jax.core.Tracer

NO_GRAD: Any = type("NoGrad", (), {"__repr__": lambda self: "NO_GRAD"})()
"""A ``Spec.rule`` for an unrecorded operation on a pending value (:func:`defer`): it runs
forward only, has no pullback, and its outputs require no grad."""


class Segment:
    """The pending operations of one thread, with the concrete values they read.

    ``nodes[k]`` (weakly) and ``outs[k]`` (weak references to its output Tensors)
    belong to the k-th operation of ``pattern``.
    """

    __slots__ = (
        "__weakref__",
        "closed",
        "input_ids",
        "input_tensors",
        "inputs",
        "lock",
        "nodes",
        "outs",
        "pattern",
    )

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.pattern: Pattern = _pattern.root(STATE)
        # weak: a segment whose Tensors and nodes all died is freed with what it holds
        self.nodes: list[weakref.ref[VJPNode]] = []
        self.outs: list[list[weakref.ref[Tensor]]] = []
        self.inputs: list[Any] = []
        self.input_ids: dict[int, int] = {}
        self.input_tensors: list[Tensor | None] = []  # the Tensor behind each input, if any
        self.closed = False

    def flush(self) -> None:
        """Run every pending operation and give each its outputs and pullback."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            pattern = self.pattern
            if not pattern.fused:
                runs = _pattern.count(STATE, pattern)
                pattern.fused = runs >= FUSE_AFTER or (runs == 1 and _mostly_new(pattern))
            if not pattern.fused:
                outs, pbs = _run_plan(pattern.ops, self.inputs, fused=False)
                origin = None
            else:
                outs, pbs = _segment_program(pattern, tuple(self.inputs))
                origin = pattern.number
            self.finish(outs, pbs, origin)

    def aval(self, node: VJPNode, output_nr: int) -> Any:
        """The ``jax.ShapeDtypeStruct`` of output ``output_nr`` of ``node`` (pending here)."""
        return node.lazy_op.structs[output_nr]

    def finish(
        self, outs: Sequence[Sequence[Any]], pbs: Sequence[Any] | None, origin: Any = None
    ) -> None:
        """Hand each op's outputs to its live Tensors and its pullback to its node.

        ``origin`` names the program the pullbacks came from (None: each operation's
        own): a fused backward that takes them is compiled per origin.
        """
        for k, refs in enumerate(self.outs):
            for i, ref in enumerate(refs):
                t = ref()
                if t is not None:
                    t._value = outs[k][i]
                    if not t._requires_grad:  # an unrecorded operation's: a leaf now
                        t._grad_fn = None
            node = self.nodes[k]()
            if node is None:
                continue
            if pbs is not None:
                node.vjp = pbs[k]
                node.origin = origin
            node.lazy = None
        self.release()

    def release(self) -> None:
        """Drop what the segment held (it has run)."""
        self.nodes = []
        self.outs = []
        self.inputs = []
        self.input_ids = {}
        self.input_tensors = []


def _mostly_new(pattern: Pattern) -> bool:
    """Whether at least half of ``pattern``'s operations never ran before (marks them run;
    such a pattern goes in ``STATE.fresh``).

    Run by operation, such a segment would compile those operations' own programs,
    then its own program from its ``FUSE_AFTER``-th run: the same maths twice. A
    segment of operations that ran before (a loop whose graph changes from step to
    step) runs them by operation, compiling nothing.
    """
    new = 0
    for spec in pattern.ops:
        key = (spec.mask, spec.keys)
        seen = STATE.entry(spec.entry).seen
        if key not in seen:
            seen.add(key)
            new += not _host_eval.covers_vjp(spec.entry, spec.mask, spec.keys, spec.rule)
    if 2 * new < len(pattern.ops):
        return False
    STATE.fresh.put(pattern.number, None)
    return True


def _resolve(ref: tuple[int, int, int], inputs: Sequence[Any], outs: list[Any]) -> Any:
    kind, k, i = ref
    return inputs[k] if kind == 0 else outs[k][i]


def _run_plan(plan: Sequence[Spec], inputs: Sequence[Any], fused: bool) -> tuple[Any, Any]:
    outs: list[Any] = []
    pbs: list[Any] = []
    for spec in plan:
        entry, mask, rule = spec.entry, spec.mask, spec.rule
        values = [_resolve(r, inputs, outs) for r in spec.refs]
        if rule is not None:  # the forward alone: an unrecorded operation (no pullback),
            # or one with a hand-written backward (``call_rule``), which keeps the operands
            out = entry.flat_fn(*values) if fused else _forward(entry, values)
            if rule is NO_GRAD:
                outs.append(jax.tree_util.tree_leaves(out))
                pbs.append(None)
            else:
                outs.append([out])
                pbs.append(jax.tree_util.Partial(rule, *values))
            continue
        diff = tuple(v for v, m in zip(values, mask, strict=True) if m)
        other = tuple(v for v, m in zip(values, mask, strict=True) if not m)
        if fused:
            out, pb = _forward_vjp(entry.flat_fn, mask, diff, other)
            pb = _as_operations_pullback(entry, mask, diff, other, pb)
        else:
            out, pb = forward_vjp(entry, mask, diff, other)
        outs.append(jax.tree_util.tree_leaves(out))
        pbs.append(pb)
    return outs, pbs


def _forward(entry: _Entry, values: Sequence[Any]) -> Any:
    out = _host_eval.run(entry, values)
    return entry.forward(*values) if out is NotImplemented else out


def _as_operations_pullback(
    entry: _Entry, mask: tuple[bool, ...], diff: tuple[Any, ...], other: tuple[Any, ...], pb: Any
) -> Any:
    """Inside a trace: ``pb`` in the pytree of the operation's own jitted pullback.

    A pullback traced here closes over a jaxpr of its own, so ``apply_vjp`` would
    compile it again for every segment program it came from. The same function on
    the same avals gives the same residuals, so this trace's leaves go into the
    pytree that ``entry.forward_vjp`` returns (one trace, cached): the node-by-node
    backward then reuses the programs it compiled for the operation. Leaves that do
    not match in number, shape and dtype keep their own pytree.
    """
    _, like = entry.forward_vjp(mask).eval_shape(diff, other)
    want, treedef = jax.tree_util.tree_flatten(like)
    leaves = jax.tree_util.tree_leaves(pb)
    if len(want) != len(leaves) or any(
        (w.shape, w.dtype) != (v.shape, v.dtype) for w, v in zip(want, leaves, strict=True)
    ):
        return pb
    return jax.tree_util.tree_unflatten(treedef, leaves)


class _SegmentProgram:
    """A pattern's segment as one compiled call (one per pattern, held by it)."""

    __slots__ = ("jitted", "layout")

    def __init__(self, pattern: Pattern) -> None:
        self.layout = Layout()
        self.jitted = xla_options.jit(functools.partial(self._body, pattern.ops, self.layout))

    @staticmethod
    def _body(ops: Sequence[Spec], layout: Layout, inputs: tuple[Any, ...]) -> Any:
        CACHE.trace_counts["<fused forward>"] += 1
        outs, pbs = _run_plan(ops, inputs, fused=True)
        return outs, layout.strip(pbs, inputs)


def _segment_program(pattern: Pattern, inputs: tuple[Any, ...]) -> tuple[Any, Any]:
    """The segment as one compiled call: its outputs and its pullbacks."""
    program = pattern.program
    if program is None:
        program = pattern.program = _SegmentProgram(pattern)
    outs, computed = program.jitted(inputs)
    return outs, program.layout.restore(computed, inputs)


def run_plan_traced(pattern: Pattern, inputs: Sequence[Any]) -> tuple[Any, Any]:
    """The segment's outputs and pullbacks, inside a trace (the fused forward-backward)."""
    return _run_plan(pattern.ops, inputs, fused=True)


def flush_current() -> None:
    """Run this thread's pending operations (``runtime.pending``'s runner, installed by
    ``speedups.install``: a served RPC call's recorded work runs before its reply)."""
    ref = getattr(STATE.local, "seg", None)
    seg = None if ref is None else ref()
    if seg is not None:
        seg.flush()


def aval_key(v: Any) -> Hashable | None:
    """What a segment input's compiled program depends on: shape, dtype (None: not deferrable)."""
    if isinstance(v, jax.Array):
        return (v.shape, v.dtype, getattr(v, "weak_type", False))
    if isinstance(v, np.ndarray | np.generic):
        return ("np", v.shape, v.dtype)
    if v is None:
        return "None"
    if type(v) in _SCALARS:
        return type(v)
    return None


def _infer(
    entry: _Entry, mask: tuple[bool, ...], structs: Sequence[Any], rule: Any
) -> tuple[Any, tuple[Any, ...], Any] | None:
    """Output tree, structs and ``out_info`` of ``entry`` on these input avals (raises as
    the operation would)."""
    # jit's eval_shape shares the call's trace cache: the later call does not trace again
    if rule is not None:
        out = entry.forward.eval_shape(*structs)
        if rule is NO_GRAD:  # any output dtype: nothing differentiates it
            leaves, treedef = jax.tree_util.tree_flatten(out)
            treedef = LEAF if treedef == LEAF else treedef
            return treedef, tuple(leaves), out_info_of(leaves, treedef)
    else:
        diff = tuple(s for s, m in zip(structs, mask, strict=True) if m)
        other = tuple(s for s, m in zip(structs, mask, strict=True) if not m)
        out, _ = entry.forward_vjp(mask).eval_shape(diff, other)
    leaves, treedef = jax.tree_util.tree_flatten(out)
    if not all(np.issubdtype(s.dtype, np.inexact) for s in leaves):
        return None  # a non-float output has no grad_fn to find it by: run it now
    if treedef == LEAF:
        treedef = LEAF  # the shared object: ``_push`` tells one array out by identity
    return treedef, tuple(leaves), out_info_of(leaves, treedef)


_NOT_DEFERRED = (None, ())


def record(
    entry: _Entry,
    values: Sequence[Any],
    tensors: Sequence[Tensor | None],
    mask: tuple[bool, ...],
    saves: bool,
    rule: Any = None,
) -> Any:
    """Append one recorded operation to this thread's segment; its pending output pytree.

    ``rule``: ``call_rule``'s pullback bound to ``mask`` (None: ``jax.vjp`` of the
    operation). Returns ``NotImplemented`` when the operation cannot be deferred (an
    input of an unknown kind, a non-float output): the caller then runs it at once.
    """
    while True:
        seg = _current()
        with seg.lock:
            if not seg.closed:  # else another thread ran it meanwhile: start a new one
                return _append(seg, entry, values, tensors, mask, saves, rule)


def defer(entry: _Entry, values: Sequence[Any], tensors: Sequence[Tensor | None]) -> Any:
    """Append an unrecorded operation with a pending input to this thread's segment.

    An operation that records nothing (no input requires grad, or grad mode is off)
    on a value the segment has not computed yet (a draw from a deferred policy's
    probabilities, ``argmax`` of deferred logits) would run the segment at once. It
    joins the segment instead, as a forward-only step (``NO_GRAD``): its outputs are
    pending Tensors that require no grad, and later operations on them join too, so
    the whole step runs as one program when a value is read. Returns
    ``NotImplemented`` (the caller runs it at once) for a traced input or an input of
    a kind the segment cannot hold.
    """
    for v in values:
        if isinstance(v, _Tracer):
            return NotImplemented
    mask = (False,) * len(values)
    while True:
        seg = _current()
        with seg.lock:
            if not seg.closed:
                return _append(seg, entry, values, tensors, mask, False, NO_GRAD)


def _current() -> Segment:
    """This thread's open segment (held weakly: its pending Tensors keep it alive)."""
    local = STATE.local
    ref = getattr(local, "seg", None)
    seg = None if ref is None else ref()
    if seg is None or seg.closed:
        seg = Segment()
        local.seg = weakref.ref(seg)
    return seg


def _append(
    seg: Segment,
    entry: _Entry,
    values: Sequence[Any],
    tensors: Sequence[Tensor | None],
    mask: tuple[bool, ...],
    saves: bool,
    rule: Any,
) -> Any:
    refs: list[tuple[int, int, int]] = []
    keys: list[Hashable] = []
    structs: list[Any] = []
    for v, t in zip(values, tensors, strict=True):
        if v is PENDING:
            node = t._grad_fn  # type: ignore[union-attr]
            if node.lazy is seg:
                s = node.lazy_op.structs[t._output_nr]  # type: ignore[union-attr]
                refs.append((1, node.lazy_index, t._output_nr))  # type: ignore[union-attr]
                keys.append((s.shape, s.dtype, s.weak_type))
                structs.append(s)
                continue
            v = t._value  # type: ignore[union-attr]  # pending elsewhere: run that first
        key = aval_key(v)
        if key is None:
            return NotImplemented
        ident = id(v) if t is None else id(t)  # one input per Tensor (or per bare value)
        k = seg.input_ids.get(ident)
        if k is None:
            k = seg.input_ids[ident] = len(seg.inputs)
            seg.inputs.append(v)
            seg.input_tensors.append(t)
        refs.append((0, k, 0))
        keys.append(key)
        structs.append(v)
    akey = (mask, tuple(keys))
    avals = STATE.entry(entry).avals
    info = avals.get(akey, _NOT_DEFERRED)
    if info is _NOT_DEFERRED:
        info = avals[akey] = _infer(entry, mask, structs, rule)
    if info is None:
        return NotImplemented
    tkeys, trefs = tuple(keys), tuple(refs)
    pattern = _pattern.child(
        STATE,
        seg.pattern,
        (entry, mask, tkeys, trefs, rule),
        lambda: Spec(entry, mask, trefs, tkeys, info, rule),
    )
    operands = None
    if saves:  # a pending operand is read from its Tensor (``VJPNode.recipe``)
        operands = [t if v is PENDING else v for v, t in zip(values, tensors, strict=True)]
    return _push(seg, pattern, tensors, saves, operands)


def _push(
    seg: Segment,
    pattern: Pattern,
    tensors: Sequence[Tensor | None],
    saves: bool,
    operands: Sequence[Any] | None,
) -> Any:
    """Make the node and pending outputs of ``pattern``'s last operation, appended to ``seg``."""
    edges = [t._gradient_edge() for t, m in zip(tensors, pattern.ops[-1].mask, strict=True) if m]  # type: ignore[union-attr]
    saved = tuple(t for t in tensors if t is not None) if saves else ()
    return make(seg, pattern, edges, saved, operands)


def make(
    seg: Segment,
    pattern: Pattern,
    edges: list[GradientEdge],
    saved: tuple[Any, ...],
    operands: Sequence[Any] | None,
) -> Any:
    """The node and pending outputs of ``pattern``'s last operation, appended to ``seg``;
    ``operands`` (Tensors or values, None for an operation that saves nothing) make the
    node's ``recipe``."""
    spec = pattern.ops[-1]
    node = VJPNode(spec.entry.name, None, spec.out_info, edges, spec.n_out, saved)
    if operands is not None and spec.rule is not NO_GRAD:
        node.recipe = (spec.entry, spec.mask, spec.rule, operands)
    node.lazy = seg
    node.lazy_index = len(seg.nodes)
    node.lazy_op = spec
    seg.pattern = pattern
    seg.nodes.append(weakref.ref(node))
    grad = spec.rule is not NO_GRAD
    if spec.treedef is LEAF:  # one array out (most operations): no pytree work
        out = _tc.Tensor._pending(node, 0, grad)
        seg.outs.append([weakref.ref(out)])
        if len(seg.nodes) >= MAX_OPS:
            seg.flush()
        return out
    wrapped = [_tc.Tensor._pending(node, i, grad) for i in range(spec.n_out)]
    seg.outs.append([weakref.ref(t) for t in wrapped])
    if len(seg.nodes) >= MAX_OPS:
        seg.flush()
    return jax.tree_util.tree_unflatten(spec.treedef, wrapped)
