"""Operations on small CPU arrays, evaluated with NumPy: no XLA program per input shape.

The speed-up layer's CPU execution backend. Each operation runs as a cached
``jax.jit`` program (its forward, its forward-with-VJP when recorded, its pullback in
the backward), and XLA compiles each program once per input shape, which an eager
loop whose lengths change (an RL episode's returns and log-probabilities, a batch of
variable size) pays every time it meets a new length. On the CPU backend, a call
whose inputs hold at most ``HOST_EAGER_MAX`` values runs here instead: its jaxpr
(traced once per input shape) is evaluated equation by equation
with NumPy, or, for an unrecorded call of an operation with a NumPy rule of its own
(``_cache.register_numpy_rule``: indexing, whose slice bounds are static arguments,
so each new bound would be a new trace), that rule runs, and the results are put on
the device without a program (:func:`run` for
an unrecorded forward, :func:`run_vjp` for a recorded one, whose pullback's
residuals come back as arrays, :func:`run_pullback` for a node's backward, and a
gradient sum). An input
shape met ``COMPILE_AFTER`` times takes its compiled program from then on: a
dispatch of a compiled call costs less than this evaluation.

Only primitives whose NumPy counterpart computes the same IEEE operation are
evaluated: arithmetic (``add``, ``sub``, ``mul``, float ``div``, ``sqrt``,
``rem``, ``abs``, ``sign``), comparisons and logic, ``max``/``min``, conversions between float,
integer and bool types (float to integer excepted: XLA and NumPy differ out of
range), shape operations (``slice``, ``pad``, ``concatenate``, ``split``, ...),
reads and writes at integer and slice indices (``dynamic_slice``,
``dynamic_update_slice``, the ``scatter`` of ``x.at[i].set``: a Tensor's ``t[i]``
and ``t[a:b] = v``, whose bounds are part of the program) and
the reductions ``sum``/``max``/``min``/``argmax``/``argmin``/``all``/``any``. The
results can still differ from a compiled program's in the last bit: XLA fuses a
multiply and an add into one rounding, adds a sum in its own order and divides by a
constant as a multiplication. Anything else (``exp``, ``dot_general``, ``gather``,
a half-precision type, a committed or non-CPU array, a tracer) runs the compiled
program, and that answer is remembered per input shape.
``TENSORPLAY_JAX_HOST_EAGER_MAX=0`` turns this off. The programs live in the
layer's state (``_state.STATE``).

Example:
    >>> import numpy as np
    >>> from tensorplay_jax.autograd import _cache
    >>> entry = _cache._Entry("sub_mean", lambda a: a - a.mean())
    >>> run(entry, [np.arange(4, dtype=np.float32)])
    Array([-1.5, -0.5,  0.5,  1.5], dtype=float32)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.extend.core import Literal

from tensorplay_jax.autograd._cache import _forward_vjp, pullback_body
from tensorplay_jax.autograd.speedups._numpy_prims import CALLS, IMPL, Fallback, qualifies
from tensorplay_jax.autograd.speedups._state import STATE
from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.device import to_device

if TYPE_CHECKING:
    from tensorplay_jax.autograd._cache import _Entry

__all__ = ["HostSum", "covers_vjp", "run", "run_pullback", "run_vjp", "sum_into"]

_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float32,
        np.float64,
    )
)
_SCALARS = (int, float, bool)
_MISSING = object()
COMPILE_AFTER = 100  # runs of one input shape here before it takes its compiled program
_MAX_PROGRAMS = 4096  # programs (and refusals) kept per operation, and for pullbacks


def _max_values() -> int:
    """Values an operation may hold to run here (0: off), read once into the state, with
    JAX's concrete array type (at first use: the backends are up by then)."""
    limit = STATE.host_limit
    if limit is None:
        value = settings.get_int(settings.HOST_EAGER_MAX_ENV) or 0
        with jax.ensure_compile_time_eval():  # a first use inside a trace: still concrete
            STATE.host_array = type(jax.device_put(np.zeros((), np.float32)))
        limit = STATE.host_limit = value if jax.default_backend() == "cpu" else 0
    return limit


def _key(values: Sequence[Any], limit: int) -> tuple[Hashable, ...] | None:
    """The input avals, or None when an input rules this call out (checked by exact type:
    ``isinstance`` against ``jax.Array`` costs a microsecond an input here)."""
    keys: list[Hashable] = []
    size = 0
    array = STATE.host_array
    for v in values:
        kind = type(v)
        if kind is array:
            shape, dtype = v.shape, v.dtype
            if dtype not in _DTYPES or v.committed:
                return None
            keys.append((shape, dtype, v.weak_type))
            size += math.prod(shape)
        elif kind is np.ndarray:
            keys.append(("np", v.shape, v.dtype))
            size += v.size
        elif kind in _SCALARS:
            keys.append(kind)
        else:  # a tracer, a key array, anything else
            return None
        if size > limit:
            return None
    return tuple(keys)


def run(entry: _Entry, values: Sequence[Any]) -> Any:
    """``entry``'s outputs for ``values`` (an unrecorded call) with NumPy, or ``NotImplemented``.

    An operation with a NumPy rule (``_cache.register_numpy_rule``) runs it: nothing
    is traced, whatever its static arguments; otherwise its jaxpr is evaluated.
    """
    limit = _max_values()
    if not limit:
        return NotImplemented
    key = _key(values, limit)
    if key is None:
        return NotImplemented
    rule = entry.numpy
    if rule is not None:
        out = rule(*values)
        if out is not NotImplemented:
            return to_device(out)
    return _call(STATE.entry(entry).host, key, entry.plain, values, values, visible=True)


def run_vjp(
    entry: _Entry, mask: tuple[bool, ...], diff: tuple[Any, ...], other: tuple[Any, ...]
) -> Any:
    """``entry``'s outputs and pullback for ``mask`` on ``(diff, other)`` with NumPy, or
    ``NotImplemented``.

    The pullback's residuals come back as arrays in the pytree that the operation's
    compiled forward-with-VJP returns, so the pullback runs later as any other
    (:func:`run_pullback`, or compiled).
    """
    limit = _max_values()
    if not limit:
        return NotImplemented
    leaves = (*diff, *other)
    key = _key(leaves, limit)
    if key is None:
        return NotImplemented
    fn = functools.partial(_forward_vjp, entry.plain, mask)
    like = entry.forward_vjp(mask).eval_shape
    host = STATE.entry(entry).host
    return _call(host, ("vjp", mask, key), fn, (diff, other), leaves, False, like)


def covers_vjp(
    entry: _Entry, mask: tuple[bool, ...], keys: tuple[Hashable, ...], rule: Any
) -> bool:
    """Whether a recorded run of ``entry`` on inputs of aval keys ``keys`` (``_lazy.aval_key``)
    runs here rather than compiling a program of its own (``rule``: a ``call_rule``
    pullback, whose forward is the unrecorded one)."""
    host = STATE.entry(entry).host
    if rule is not None:
        return covers(host, keys, entry.plain, None)
    fn = functools.partial(_forward_vjp, entry.plain, mask)
    return covers(host, keys, fn, mask, entry.forward_vjp(mask).eval_shape)


def covers(
    programs: dict[Hashable, Any],
    keys: tuple[Hashable, ...],
    fn: Callable[..., Any],
    mask: tuple[bool, ...] | None,
    like: Callable[..., Any] | None = None,
) -> bool:
    """Whether inputs of aval keys ``keys`` run ``fn`` here: its program, built now
    (from shapes alone) if need be, exists. ``mask``: ``fn`` is a forward-with-VJP
    taking ``(diff, other)``; None: an unrecorded forward taking the inputs."""
    limit = _max_values()
    if not limit:
        return False
    size = 0
    structs: list[Any] = []
    for k in keys:
        if k in _SCALARS:
            structs.append(k(0))
            continue
        if not isinstance(k, tuple):
            return False
        shape, dtype, weak = (k[1], k[2], False) if k[0] == "np" else k
        if dtype not in _DTYPES:
            return False
        size += int(np.prod(shape, dtype=np.int64))
        # a host int64 array is an int32 one to JAX without x64 (as jit takes it), and
        # JAX warns of a struct asking for a type it would narrow
        dtype = jax.dtypes.canonicalize_dtype(dtype)
        structs.append(jax.ShapeDtypeStruct(shape, dtype, weak_type=weak))
    if size > limit:
        return False
    if mask is None:
        key: Hashable = keys
        args: Sequence[Any] = structs
    else:
        key = ("vjp", mask, keys)
        diff = tuple(v for v, m in zip(structs, mask, strict=True) if m)
        other = tuple(v for v, m in zip(structs, mask, strict=True) if not m)
        args = (diff, other)
    program = programs.get(key, _MISSING)
    if program is _MISSING:
        program = programs[key] = _build(fn, args, mask is None, like, programs)
    return program is not None and program.runs < COMPILE_AFTER


def run_pullback(pullback: Any, cts: tuple[Any, ...], out_info: Any) -> Any:
    """``pullback_body(pullback, cts, out_info)`` (one node's backward) with NumPy, or
    ``NotImplemented``.

    A pullback's tree structure holds its trace, so the structure, which cotangents
    are absent and the outputs fix the program: once that program is left to the
    compiled one (NumPy cannot run it, or it recurred ``COMPILE_AFTER`` times), the
    same structure goes there at once, without keying its residuals again (a
    backward through 500 steps of one policy meets each of its nodes' structures
    500 times).
    """
    limit = _max_values()
    if not limit:
        return NotImplemented
    leaves, treedef = jax.tree_util.tree_flatten(pullback)
    structure = (treedef, tuple(c is None for c in cts), out_info)
    if structure in STATE.compiled_pullbacks:
        return NotImplemented
    given = [c for c in cts if c is not None]
    key = _key((*leaves, *given), limit)
    if key is None:
        return NotImplemented
    key = (*structure, key)
    fn = functools.partial(pullback_body, out_info=out_info)
    programs = STATE.host_pullbacks
    out = _call(programs, key, fn, (pullback, cts), (*leaves, *given), visible=False)
    if out is NotImplemented and programs.get(key, _MISSING) is None:
        STATE.compiled_pullbacks.put(structure, None)
    return out


class HostSum(np.ndarray):
    """A running sum of one tensor's gradients, kept on the host by :func:`sum_into`.

    Its own type says the buffer is the backward's, made by :func:`sum_into`, so a later
    gradient is added into it in place; any other host array (one that came over
    RPC) may be seen elsewhere and is never written.
    """


_SUM_DTYPES = frozenset({np.dtype(np.float32), np.dtype(np.float64)})


def _summable(x: Any, limit: int) -> bool:
    """A float32/float64 array of at most ``limit`` values on the CPU: a host array, or an
    uncommitted ``jax.Array`` on the default (CPU) device."""
    kind = type(x)
    if kind is not STATE.host_array and kind is not np.ndarray and kind is not HostSum:
        return False
    if x.dtype not in _SUM_DTYPES or x.size > limit:
        return False
    return kind is not STATE.host_array or not x.committed


def sum_into(held: Any, grad: Any) -> Any:
    """``held + grad`` (two gradients of one tensor, in a backward's buffer) with NumPy, as
    a :class:`HostSum`; ``NotImplemented`` for arrays this backend does not take.

    A leaf reached by many paths (a parameter used at each of 500 steps) gets one
    gradient per path; added as they come, each sum would be one compiled call. Here
    the sum stays on the host, each gradient added into it in place, and the engine
    puts it on the device once, when the node runs. The additions are the same
    IEEE operations in the same order as the compiled ones (float32 and float64,
    same shape and dtype), so the sum is the same, bit for bit.

    Example:
        >>> import numpy as np
        >>> total = sum_into(np.ones(2, np.float32), np.ones(2, np.float32))
        >>> type(total).__name__, sum_into(total, np.ones(2, np.float32)).tolist()
        ('HostSum', [3.0, 3.0])
    """
    limit = _max_values()
    if not limit or held.shape != grad.shape or held.dtype != grad.dtype:
        return NotImplemented
    if not _summable(grad, limit):
        return NotImplemented
    if type(held) is HostSum:
        np.add(held, np.asarray(grad), out=held)
        return held
    if not _summable(held, limit):
        return NotImplemented
    return np.add(np.asarray(held), np.asarray(grad)).view(HostSum)


def _call(
    programs: dict[Hashable, Any],
    key: Hashable,
    fn: Callable[..., Any],
    args: Sequence[Any],
    leaves: Sequence[Any],
    visible: bool,
    like: Callable[..., Any] | None = None,
) -> Any:
    """Run the program ``programs[key]`` (built from ``fn(*args)`` on first sight) on ``leaves``.

    ``visible``: the outputs are the user's values, so a weak-typed one (which NumPy
    cannot give) rules the program out; residuals and gradients are not shown.
    ``like``: the compiled program's ``eval_shape``, whose output pytree the results
    take (see :func:`_build`).
    """
    program = programs.get(key, _MISSING)
    if program is _MISSING:
        program = programs[key] = _build(fn, args, visible, like, programs)
    if program is None:
        return NotImplemented
    if program.runs >= COMPILE_AFTER:  # a recurring shape: its compiled program is faster
        programs[key] = None
        return NotImplemented
    program.runs += 1
    try:
        return program(leaves)
    except Fallback:
        return NotImplemented


class _Program:
    """A traced jaxpr as a list of NumPy steps over numbered slots (nested calls inlined)."""

    __slots__ = ("inputs", "outputs", "runs", "slots", "steps", "treedef")

    def __init__(self, closed: Any, treedef: Any) -> None:
        self.treedef = treedef
        self.runs = 0
        self.slots: list[Any] = []  # constants and literals in place; the rest filled per run
        self.steps: list[tuple[Any, ...]] = []
        self.inputs = [self._slot() for _ in closed.jaxpr.invars]
        self.outputs = self._lower(closed.jaxpr, closed.consts, self.inputs)

    def _slot(self, value: Any = None) -> int:
        self.slots.append(value)
        return len(self.slots) - 1

    def _lower(self, jaxpr: Any, consts: Sequence[Any], inputs: Sequence[int]) -> list[Any]:
        where: dict[Any, int] = dict(zip(jaxpr.invars, inputs, strict=True))
        for var, c in zip(jaxpr.constvars, consts, strict=True):
            where[var] = self._slot(np.asarray(c))

        def slot_of(v: Any) -> int:
            if type(v) is Literal:
                return self._slot(np.asarray(v.val, dtype=v.aval.dtype))
            return where[v]

        for eqn in jaxpr.eqns:
            ins = [slot_of(v) for v in eqn.invars]
            if eqn.primitive.name in CALLS:
                inner = _inner(eqn)
                outs = self._lower(inner.jaxpr, inner.consts, ins)
            else:
                outs = [self._slot() for _ in eqn.outvars]
                dtypes = tuple(v.aval.dtype for v in eqn.outvars)
                multiple = eqn.primitive.multiple_results
                self.steps.append((IMPL[eqn.primitive.name], eqn, ins, outs, dtypes, multiple))
            where.update(zip(eqn.outvars, outs, strict=True))
        return [slot_of(v) for v in jaxpr.outvars]

    def __call__(self, values: Sequence[Any]) -> Any:
        env = list(self.slots)
        for i, v in zip(self.inputs, values, strict=True):
            env[i] = np.asarray(v)
        with np.errstate(all="ignore"):
            for impl, eqn, ins, outs, dtypes, multiple in self.steps:
                result = impl(eqn, *[env[i] for i in ins])
                results = result if multiple else (result,)
                for i, value, dtype in zip(outs, results, dtypes, strict=True):
                    same = getattr(value, "dtype", None) == dtype
                    env[i] = value if same else np.asarray(value, dtype)
        arrays = [to_device(np.asarray(env[i], order="C")) for i in self.outputs]
        return jax.tree_util.tree_unflatten(self.treedef, arrays)


def _build(
    fn: Callable[..., Any],
    args: Sequence[Any],
    visible: bool,
    like: Callable[..., Any] | None,
    programs: dict[Hashable, Any],
) -> _Program | None:
    """``fn``'s program for ``args``, or None when NumPy cannot run it.

    With ``like``, the results take the pytree of the compiled program's outputs
    (a pullback is a ``Partial`` over its trace's function): pullbacks made here and
    by the compiled forward are then the same pytree, so the programs keyed by it (a
    compiled pullback, a fused backward) serve both, before and after a shape moves
    to its compiled program.
    """
    if len(programs) >= _MAX_PROGRAMS:  # shapes without end (lengths): start over
        programs.clear()
    closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
    if not _supported(closed.jaxpr):
        return None
    if visible and any(getattr(s, "weak_type", False) for s in jax.tree_util.tree_leaves(shapes)):
        return None
    treedef = jax.tree_util.tree_structure(shapes)
    if like is not None:
        compiled = like(*args)
        ours = [(s.shape, s.dtype) for s in jax.tree_util.tree_leaves(shapes)]
        if [(s.shape, s.dtype) for s in jax.tree_util.tree_leaves(compiled)] == ours:
            treedef = jax.tree_util.tree_structure(compiled)
    return _Program(closed, treedef)


def _inner(eqn: Any) -> Any:
    """The closed jaxpr a call-like equation runs (None: not a call)."""
    for name in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        inner = eqn.params.get(name)
        if inner is not None and hasattr(inner, "jaxpr"):
            return inner
    return None


def _supported(jaxpr: Any) -> bool:
    avals = [v.aval for v in (*jaxpr.invars, *jaxpr.outvars, *jaxpr.constvars)]
    for eqn in jaxpr.eqns:
        avals.extend(v.aval for v in (*eqn.invars, *eqn.outvars))
        name = eqn.primitive.name
        if name in CALLS:
            inner = _inner(eqn)
            if inner is None or not _supported(inner.jaxpr):
                return False
        elif not qualifies(eqn):
            return False
    return all(getattr(a, "dtype", None) in _DTYPES for a in avals)
