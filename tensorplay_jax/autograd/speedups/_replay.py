"""Recording a recurring step's operation through its known pattern (``_pattern``).

In a training loop each step records the same operations, so the segment's
pattern (``_lazy``) has seen the next operation before: ``replay`` checks the
operation against the ``Spec`` of the pattern's ``expect`` child (same entry, each
input from the same place with the same ``requires_grad`` and aval) and appends
it, without building the operation's key. A step that differs anywhere takes
``_lazy.record``'s full path, which records the new sequence in the trie.

Example:
    >>> import tensorplay_jax as tp
    >>> w = tp.ones(3, requires_grad=True)
    >>> ys = [(w * 2.0).sum() for _ in range(2)]  # the second is replayed
    >>> ys[0]._grad_fn.lazy.pattern is ys[1]._grad_fn.lazy.pattern
    True
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from tensorplay_jax.autograd import _tensor_class as _tc
from tensorplay_jax.autograd._cache import _Entry
from tensorplay_jax.autograd._grad_mode import _state as _grad_state
from tensorplay_jax.autograd._node import GradientEdge
from tensorplay_jax.autograd.speedups import _lazy, _pattern
from tensorplay_jax.autograd.speedups._state import STATE

if TYPE_CHECKING:
    from tensorplay_jax.tensors import Tensor

_Tracer = jax.core.Tracer
_tuple_new = tuple.__new__


def replay(entry: _Entry, args: Sequence[Any], saves: bool) -> Any:
    """``record`` for the operation this thread's pattern saw next last time, checked cheaply.

    ``args`` are ``call_op``'s: Tensors, arrays, scalars. The operation is appended
    when it matches the expected ``Spec``: the same entry and no custom rule, each
    input a Tensor (or value) where the spec has one, with the same
    ``requires_grad``, the same aval, and from the same place (the same earlier
    operation's output, the same segment input, or a new input in the same order).
    Grad mode must be on and no input traced. Returns ``NotImplemented`` otherwise
    (the caller takes the full path, which also records this sequence).
    """
    local = STATE.local
    ref = getattr(local, "seg", None)
    seg = None if ref is None else ref()
    if seg is None or seg.closed:
        pat = _pattern.root(STATE)
        nxt = pat.expect
        if nxt is None or nxt.ops[-1].entry is not entry:
            return NotImplemented
        seg = _lazy.Segment()
        local.seg = weakref.ref(seg)
    else:
        pat = seg.pattern
        nxt = pat.expect
        if nxt is None or nxt.ops[-1].entry is not entry:
            return NotImplemented
    spec = nxt.ops[-1]
    if spec.rule is not None or len(args) != len(spec.refs):
        return NotImplemented
    if not getattr(_grad_state, "enabled", True):  # is_grad_enabled(), without the call
        return NotImplemented
    tensor_class = _tc.Tensor
    with seg.lock:
        if seg.closed or seg.pattern is not pat:
            return NotImplemented
        ids = seg.input_ids
        n = len(seg.inputs)
        new: list[tuple[Any, Tensor | None]] = []
        edges: list[GradientEdge] = []
        saved: list[Tensor] = []
        for a, (kind, k, i), key, m, last in zip(
            args, spec.refs, spec.keys, spec.mask, spec.last, strict=True
        ):
            if isinstance(a, tensor_class):
                node = a._grad_fn
                if node is not None and node.lazy is not None:  # pending
                    if kind != 1 or node.lazy is not seg or node.lazy_index != k:
                        return NotImplemented
                    if a._output_nr != i or a._requires_grad != m:
                        return NotImplemented
                    if m:  # (a pending output of an unrecorded operation has no edge)
                        edges.append(_tuple_new(GradientEdge, (node, i)))
                    saved.append(a)
                    continue
                v = a._value
                if kind != 0 or a._requires_grad != m or type(v) is np.ndarray:
                    return NotImplemented  # (a host value: ``call_op``'s path places it)
                if m:
                    edges.append(a._gradient_edge())
                saved.append(a)
                t: Any = a
            else:
                if kind != 0 or m:
                    return NotImplemented
                v = t = a
            if isinstance(v, _Tracer):
                return NotImplemented
            j = ids.get(id(t))
            if j is None:
                for j2, (v2, t2) in enumerate(new):  # the same one twice in this operation
                    if (v2 if t2 is None else t2) is t:
                        j = n + j2
                        break
                else:
                    j = n + len(new)
                    new.append((v, None if t is v else t))
            if j != k:
                return NotImplemented
            checked = last[0]
            if checked is None or checked() is not v:  # not the array checked last time
                if _lazy.aval_key(v) != key:
                    return NotImplemented
                if isinstance(v, jax.Array):
                    last[0] = weakref.ref(v)
        for v, t in new:
            ids[id(v) if t is None else id(t)] = len(seg.inputs)
            seg.inputs.append(v)
            seg.input_tensors.append(t)
        if saves:
            return _lazy.make(seg, nxt, edges, tuple(saved), args)
        return _lazy.make(seg, nxt, edges, (), None)
