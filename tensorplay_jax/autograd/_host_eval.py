"""Unrecorded operations on small CPU arrays, evaluated with NumPy: no program per shape.

An operation that records nothing (no input requires grad) runs as its cached
``jax.jit`` program, and XLA compiles that program once per input shape: 15-40 ms
of compilation for a ``mean`` or a ``sub`` on this machine, which an eager loop
whose lengths change (an episode's returns, a batch of variable size) pays every
time it meets a new length. On the CPU backend, an operation whose inputs hold at
most ``HOST_EAGER_MAX`` values runs here instead: its jaxpr (traced once per input
shape, about a millisecond) is evaluated equation by equation with NumPy, and the
result is put on the device without a program.

Only primitives whose NumPy counterpart gives the same values are evaluated:
IEEE arithmetic (``add``, ``sub``, ``mul``, float ``div``, ``sqrt``, ``rem``),
comparisons and logic, ``max``/``min``, conversions between float, integer and
bool types (float to integer excepted: XLA and NumPy differ out of range), shape
operations and the reductions ``sum``/``max``/``min``/``argmax``/``argmin``/
``all``/``any``. A sum of float32 values adds them in NumPy's order, which can
differ from XLA's in the last bit. Anything else (``exp``, ``dot_general``,
``gather``, a half-precision type, a committed or non-CPU array, a tracer) runs
the compiled program as before, and that answer is remembered per input shape.
``TENSORPLAY_JAX_HOST_EAGER_MAX=0`` turns this off.

Example:
    >>> import numpy as np
    >>> from tensorplay_jax.autograd import _cache
    >>> entry = _cache._Entry("sub_mean", lambda a: a - a.mean())
    >>> run(entry, [np.arange(4, dtype=np.float32)])
    Array([-1.5, -0.5,  0.5,  1.5], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from jax.extend.core import Literal

from tensorplay_jax.runtime import settings
from tensorplay_jax.runtime.device import to_device

if TYPE_CHECKING:
    from tensorplay_jax.autograd._cache import _Entry

__all__ = ["run"]

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
_limit: int | None = None  # values an operation may hold to run here (0: off); set at first use


class _Fallback(Exception):
    """This call runs the compiled program (an input NumPy would treat otherwise)."""


def _max_values() -> int:
    global _limit
    if _limit is None:
        value = settings.get_int(settings.HOST_EAGER_MAX_ENV) or 0
        _limit = value if jax.default_backend() == "cpu" else 0
    return _limit


def _key(values: Sequence[Any], limit: int) -> tuple[Hashable, ...] | None:
    """The input avals, or None when an input rules this call out."""
    keys: list[Hashable] = []
    size = 0
    for v in values:
        if isinstance(v, jax.Array):
            if isinstance(v, jax.core.Tracer) or v.dtype not in _DTYPES or v.committed:
                return None
            keys.append((v.shape, v.dtype, v.weak_type))
            size += v.size
        elif type(v) is np.ndarray:
            keys.append(("np", v.shape, v.dtype))
            size += v.size
        elif type(v) in _SCALARS:
            keys.append(type(v))
        else:
            return None
        if size > limit:
            return None
    return tuple(keys)


def run(entry: _Entry, values: Sequence[Any]) -> Any:
    """``entry``'s outputs for ``values`` evaluated with NumPy, or ``NotImplemented``."""
    limit = _max_values()
    if not limit:
        return NotImplemented
    key = _key(values, limit)
    if key is None:
        return NotImplemented
    program = entry.host.get(key, _MISSING)
    if program is _MISSING:
        program = entry.host[key] = _build(entry.flat_fn, values)
    if program is None:
        return NotImplemented
    if program.runs >= COMPILE_AFTER:  # a recurring shape: its compiled program is faster
        entry.host[key] = None
        return NotImplemented
    program.runs += 1
    try:
        return program(values)
    except _Fallback:
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
            if eqn.primitive.name in _CALLS:
                inner = _inner(eqn)
                outs = self._lower(inner.jaxpr, inner.consts, ins)
            else:
                outs = [self._slot() for _ in eqn.outvars]
                dtypes = tuple(v.aval.dtype for v in eqn.outvars)
                multiple = eqn.primitive.multiple_results
                self.steps.append((_IMPL[eqn.primitive.name], eqn, ins, outs, dtypes, multiple))
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


def _build(flat_fn: Callable[..., Any], values: Sequence[Any]) -> _Program | None:
    closed, shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*values)
    if not _supported(closed.jaxpr) or any(v.aval.weak_type for v in closed.jaxpr.outvars):
        return None
    return _Program(closed, jax.tree_util.tree_structure(shapes))


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
        if name in _CALLS:
            inner = _inner(eqn)
            if inner is None or not _supported(inner.jaxpr):
                return False
        elif name not in _IMPL or not _CHECKS.get(name, _always)(eqn):
            return False
    return all(getattr(a, "dtype", None) in _DTYPES for a in avals)


# ------------------------------------------------------------------ the primitives
def _always(eqn: Any) -> bool:
    return True


def _float_out(eqn: Any) -> bool:
    return np.issubdtype(eqn.outvars[0].aval.dtype, np.floating)


def _no_float_to_int(eqn: Any) -> bool:
    src, dst = eqn.invars[0].aval.dtype, eqn.params["new_dtype"]
    return not (np.issubdtype(src, np.floating) and not np.issubdtype(dst, np.floating))


def _no_dimensions(eqn: Any) -> bool:
    return eqn.params.get("dimensions") is None


def _binary(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda eqn, x, y: fn(x, y)


def _unary(fn: Callable[..., Any]) -> Callable[..., Any]:
    return lambda eqn, x: fn(x)


def _integer_pow(eqn: Any, x: Any) -> Any:
    # the order of jax's own lowering (binary exponentiation), so the rounding matches
    y = eqn.params["y"]
    reciprocal, y = y < 0, abs(y)
    acc = None
    while y > 0:
        if y & 1:
            acc = x if acc is None else acc * x
        y >>= 1
        if y > 0:
            x = x * x
    if acc is None:
        acc = np.ones_like(x)
    return np.divide(1, acc, dtype=acc.dtype) if reciprocal else acc


def _broadcast_in_dim(eqn: Any, x: Any, *dynamic: Any) -> Any:
    if dynamic:
        raise _Fallback
    shape = eqn.params["shape"]
    expanded = [1] * len(shape)
    for i, d in enumerate(eqn.params["broadcast_dimensions"]):
        expanded[d] = x.shape[i]
    return np.broadcast_to(np.reshape(x, expanded), shape)


def _reduce(fn: Callable[..., Any], empty_ok: bool) -> Callable[..., Any]:
    def impl(eqn: Any, x: Any) -> Any:
        if not empty_ok and x.size == 0:
            raise _Fallback
        return fn(x, axis=tuple(eqn.params["axes"]))

    return impl


def _arg(fn: Callable[..., Any]) -> Callable[..., Any]:
    def impl(eqn: Any, x: Any) -> Any:
        (axis,) = eqn.params["axes"]
        if x.shape[axis] == 0:
            raise _Fallback
        return fn(x, axis=axis).astype(eqn.params["index_dtype"])

    return impl


def _select_n(eqn: Any, which: Any, *cases: Any) -> Any:
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    return np.choose(which, cases)


def _slice(eqn: Any, x: Any) -> Any:
    strides = eqn.params["strides"] or (1,) * x.ndim
    starts, limits = eqn.params["start_indices"], eqn.params["limit_indices"]
    return x[tuple(slice(s, e, k) for s, e, k in zip(starts, limits, strides, strict=True))]


def _iota(eqn: Any) -> Any:
    p = eqn.params
    shape, dim = p["shape"], p["dimension"]
    ramp = np.arange(shape[dim], dtype=p["dtype"]).reshape(
        [shape[dim] if i == dim else 1 for i in range(len(shape))]
    )
    return np.broadcast_to(ramp, shape)


_CALLS = frozenset(
    {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call"}
)

_IMPL: dict[str, Callable[..., Any]] = {
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(np.divide),
    "rem": _binary(np.fmod),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "neg": _unary(np.negative),
    "abs": _unary(np.abs),
    "sqrt": _unary(np.sqrt),
    "square": _unary(np.square),
    "floor": _unary(np.floor),
    "ceil": _unary(np.ceil),
    "is_finite": _unary(np.isfinite),
    "integer_pow": _integer_pow,
    "eq": _binary(np.equal),
    "ne": _binary(np.not_equal),
    "lt": _binary(np.less),
    "le": _binary(np.less_equal),
    "gt": _binary(np.greater),
    "ge": _binary(np.greater_equal),
    "and": _binary(np.bitwise_and),
    "or": _binary(np.bitwise_or),
    "xor": _binary(np.bitwise_xor),
    "not": _unary(np.invert),
    "select_n": _select_n,
    "convert_element_type": lambda eqn, x: x.astype(eqn.params["new_dtype"]),
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda eqn, x, *dyn: np.reshape(x, eqn.params["new_sizes"]),
    "squeeze": lambda eqn, x: np.squeeze(x, axis=tuple(eqn.params["dimensions"])),
    "transpose": lambda eqn, x: np.transpose(x, eqn.params["permutation"]),
    "concatenate": lambda eqn, *xs: np.concatenate(xs, axis=eqn.params["dimension"]),
    "slice": _slice,
    "iota": _iota,
    "copy": _unary(np.copy),
    "copy_p": _unary(np.copy),
    "reduce_sum": _reduce(np.sum, empty_ok=True),
    "reduce_max": _reduce(np.max, empty_ok=False),
    "reduce_min": _reduce(np.min, empty_ok=False),
    "reduce_and": _reduce(np.all, empty_ok=True),
    "reduce_or": _reduce(np.any, empty_ok=True),
    "argmax": _arg(np.argmax),
    "argmin": _arg(np.argmin),
}

# what an equation must satisfy to run here, beyond its primitive and dtypes
_CHECKS: dict[str, Callable[[Any], bool]] = {
    "div": _float_out,
    "rem": _float_out,
    "sqrt": _float_out,
    "convert_element_type": _no_float_to_int,
    "reshape": _no_dimensions,
}
