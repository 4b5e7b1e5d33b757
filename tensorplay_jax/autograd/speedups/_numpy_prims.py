"""NumPy implementations of the JAX primitives ``_host_eval`` evaluates, one table.

Each entry of :data:`IMPL` takes the equation (for its parameters) and NumPy
inputs and returns what the primitive returns; :data:`CHECKS` says which
equations of a primitive qualify beyond their dtypes (integer division and float
to integer conversion do not: XLA and NumPy differ there). A primitive missing
here makes ``_host_eval`` run the compiled program. An implementation raises
:class:`Fallback` for an input it cannot take (an empty ``max``), and the call
then runs compiled.

Example:
    >>> import jax, numpy as np
    >>> eqn = jax.make_jaxpr(lambda x: x[1:3])(np.arange(4.0)).jaxpr.eqns[0]
    >>> IMPL[eqn.primitive.name](eqn, np.arange(4.0))
    array([1., 2.])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["CALLS", "CHECKS", "IMPL", "Fallback", "qualifies"]


class Fallback(Exception):
    """This call runs the compiled program (an input NumPy would treat otherwise)."""


def qualifies(eqn: Any) -> bool:
    """Whether ``eqn``'s primitive is in :data:`IMPL` and the equation passes its check."""
    name = eqn.primitive.name
    return name in IMPL and CHECKS.get(name, _always)(eqn)


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


def _sign(x: Any) -> Any:
    # XLA keeps the sign of a zero (sign(-0.0) is -0.0); NumPy's is +0.0
    s = np.sign(x)
    return np.copysign(s, x) if s.dtype.kind == "f" else s


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
        raise Fallback
    shape = eqn.params["shape"]
    expanded = [1] * len(shape)
    for i, d in enumerate(eqn.params["broadcast_dimensions"]):
        expanded[d] = x.shape[i]
    return np.broadcast_to(np.reshape(x, expanded), shape)


def _reduce(fn: Callable[..., Any], empty_ok: bool) -> Callable[..., Any]:
    def impl(eqn: Any, x: Any) -> Any:
        if not empty_ok and x.size == 0:
            raise Fallback
        return fn(x, axis=tuple(eqn.params["axes"]))

    return impl


def _arg(fn: Callable[..., Any]) -> Callable[..., Any]:
    def impl(eqn: Any, x: Any) -> Any:
        (axis,) = eqn.params["axes"]
        if x.shape[axis] == 0:
            raise Fallback
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


def _split(eqn: Any, x: Any) -> list[Any]:
    cuts = np.cumsum(eqn.params["sizes"])[:-1]
    return np.split(x, cuts, axis=eqn.params["axis"])


def _pad(eqn: Any, x: Any, value: Any) -> Any:
    config = eqn.params["padding_config"]
    if any(lo < 0 or hi < 0 or inner for lo, hi, inner in config):
        raise Fallback
    return np.pad(x, [(lo, hi) for lo, hi, _ in config], constant_values=value)


def _iota(eqn: Any) -> Any:
    p = eqn.params
    shape, dim = p["shape"], p["dimension"]
    ramp = np.arange(shape[dim], dtype=p["dtype"]).reshape(
        [shape[dim] if i == dim else 1 for i in range(len(shape))]
    )
    return np.broadcast_to(ramp, shape)


def _starts(x_shape: tuple[int, ...], window: Sequence[int], idx: Sequence[Any]) -> list[int]:
    """XLA's dynamic start indices: each clamped so the window fits in the operand."""
    return [min(max(int(i), 0), n - w) for i, n, w in zip(idx, x_shape, window, strict=True)]


def _dynamic_slice(eqn: Any, x: Any, *idx: Any) -> Any:
    sizes = eqn.params["slice_sizes"]
    if len(idx) != x.ndim:  # dynamic slice sizes
        raise Fallback
    starts = _starts(x.shape, sizes, idx)
    return x[tuple(slice(a, a + w) for a, w in zip(starts, sizes, strict=True))]


def _dynamic_update_slice(eqn: Any, x: Any, update: Any, *idx: Any) -> Any:
    starts = _starts(x.shape, update.shape, idx)
    out = np.array(x)
    out[tuple(slice(a, a + w) for a, w in zip(starts, update.shape, strict=True))] = update
    return out


def _scatter(eqn: Any, x: Any, indices: Any, updates: Any) -> Any:
    """``scatter`` that replaces (``x.at[index].set(v)``), by XLA's semantics: each
    update window written at its start index. A window out of bounds (which XLA
    skips or clamps by ``mode``) or two windows at one place (written in an order XLA
    leaves open) run the compiled program instead."""
    p = eqn.params
    dn = p["dimension_numbers"]
    if p["update_jaxpr"] is not None or dn.operand_batching_dims:
        raise Fallback
    window_dims = tuple(dn.update_window_dims)
    inserted = set(dn.inserted_window_dims)
    scatter_dims = [d for d in range(updates.ndim) if d not in window_dims]
    spans = iter(updates.shape[d] for d in window_dims)
    window = [1 if d in inserted else next(spans) for d in range(x.ndim)]
    clip = "CLIP" in str(p["mode"])
    out = np.array(x)
    written = set()
    for pos in np.ndindex(*(updates.shape[d] for d in scatter_dims)):
        vector = indices[pos] if indices.ndim > 0 else indices
        start = [0] * x.ndim
        for i, d in enumerate(dn.scatter_dims_to_operand_dims):
            start[d] = int(np.reshape(vector, -1)[i])
        if clip:
            start = _starts(x.shape, window, start)
        elif any(a < 0 or a + w > n for a, w, n in zip(start, window, x.shape, strict=True)):
            raise Fallback
        if tuple(start) in written:
            raise Fallback
        written.add(tuple(start))
        target = tuple(
            a if d in inserted else slice(a, a + w)
            for d, (a, w) in enumerate(zip(start, window, strict=True))
        )
        source = [slice(None)] * updates.ndim
        for d, k in zip(scatter_dims, pos, strict=True):
            source[d] = k
        out[target] = updates[tuple(source)]
    return out


CALLS = frozenset({"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call"})

IMPL: dict[str, Callable[..., Any]] = {
    "add": _binary(np.add),
    "sub": _binary(np.subtract),
    "mul": _binary(np.multiply),
    "div": _binary(np.divide),
    "rem": _binary(np.fmod),
    "max": _binary(np.maximum),
    "min": _binary(np.minimum),
    "neg": _unary(np.negative),
    "abs": _unary(np.abs),
    "sign": _unary(_sign),
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
    "dynamic_slice": _dynamic_slice,
    "dynamic_update_slice": _dynamic_update_slice,
    "scatter": _scatter,
    "split": _split,
    "pad": _pad,
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
CHECKS: dict[str, Callable[[Any], bool]] = {
    "div": _float_out,
    "rem": _float_out,
    "sqrt": _float_out,
    "convert_element_type": _no_float_to_int,
    "reshape": _no_dimensions,
}
