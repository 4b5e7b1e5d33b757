"""Shape operations, indexing, and cat/stack/split/narrow, each one recorded node.

Shapes, dimensions and split points are static (part of the compile cache
key); integer/array indices are traced, so ``x[idx]`` with a new index array of
the same shape does not recompile. A boolean mask index is turned into integer
indices first (its result shape depends on its values).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import call_op, is_grad_enabled
from tensorplay_jax.tensors._tensor import Tensor


def _shape_arg(fn: str, shape: Sequence[Any]) -> tuple[int, ...]:
    if len(shape) == 1 and isinstance(shape[0], list | tuple):
        shape = shape[0]
    try:
        return tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"tp.{fn}: shape must be ints, got {shape!r}") from None


def _norm_dim(fn: str, dim: int, ndim: int) -> int:
    if not -ndim <= dim < max(ndim, 1):
        raise IndexError(
            f"tp.{fn}: dim={dim} is out of range for a Tensor with {ndim} dimensions "
            f"(expected -{ndim} <= dim < {ndim})"
        )
    return dim % max(ndim, 1)


def _ndim(x: Any) -> int:
    return x.ndim if hasattr(x, "ndim") else np.ndim(x)


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if hasattr(x, "shape") else np.shape(x)


# ------------------------------------------------------------------ reshaping
def _reshape(x: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    return jnp.reshape(x, shape)


def reshape(input: Any, *shape: Any) -> Tensor:
    """The same elements in a new shape; one entry may be -1.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.arange(6).reshape(2, 3).shape
        (2, 3)
    """
    return call_op(
        _reshape, "ReshapeBackward", (input,), (("shape", _shape_arg("reshape", shape)),)
    )


def view(input: Any, *shape: Any) -> Tensor:
    """Same as ``reshape`` (JAX arrays have no views)."""
    return reshape(input, *shape)


def transpose(input: Any, dim0: int, dim1: int) -> Tensor:
    """Swap dimensions ``dim0`` and ``dim1``."""
    n = _ndim(input)
    static = (
        ("axis1", _norm_dim("transpose", dim0, n)),
        ("axis2", _norm_dim("transpose", dim1, n)),
    )
    return call_op(jnp.swapaxes, "TransposeBackward", (input,), static)


def permute(input: Any, *dims: Any) -> Tensor:
    """Reorder dimensions: ``x.permute(2, 0, 1)``."""
    perm = _shape_arg("permute", dims)
    n = _ndim(input)
    if sorted(d % max(n, 1) for d in perm) != list(range(n)):
        raise ValueError(f"tp.permute: dims={perm} is not a permutation of {n} dimensions")
    perm = tuple(d % max(n, 1) for d in perm)
    return call_op(jnp.transpose, "PermuteBackward", (input,), (("axes", perm),))


def flatten(input: Any, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    """Merge dimensions ``start_dim`` through ``end_dim`` into one."""
    shape = _shape(input)
    if len(shape) == 0:
        return reshape(input, 1)
    s = _norm_dim("flatten", start_dim, len(shape))
    e = _norm_dim("flatten", end_dim, len(shape))
    new = (*shape[:s], math.prod(shape[s : e + 1]), *shape[e + 1 :])
    return reshape(input, new)


def unsqueeze(input: Any, dim: int) -> Tensor:
    """Insert a dimension of size 1 at ``dim``."""
    n = _ndim(input) + 1
    return call_op(
        jnp.expand_dims, "UnsqueezeBackward", (input,), (("axis", _norm_dim("unsqueeze", dim, n)),)
    )


def squeeze(input: Any, dim: Any = None) -> Tensor:
    """Remove size-1 dimensions (only ``dim``, when given; a non-1 ``dim`` is left alone)."""
    shape = _shape(input)
    if dim is None:
        axes = tuple(i for i, s in enumerate(shape) if s == 1)
    else:
        dims = dim if isinstance(dim, tuple | list) else (dim,)
        axes = tuple(
            d for d in (_norm_dim("squeeze", int(d), len(shape)) for d in dims) if shape[d] == 1
        )
    return call_op(jnp.squeeze, "SqueezeBackward", (input,), (("axis", axes),))


def expand(input: Any, *sizes: Any) -> Tensor:
    """Broadcast to ``sizes``; -1 keeps that dimension's size."""
    sizes_t = _shape_arg("expand", sizes)
    shape = _shape(input)
    lead = len(sizes_t) - len(shape)
    if lead < 0:
        raise ValueError(f"tp.expand: sizes {sizes_t} have fewer dimensions than {shape}")
    target = tuple(shape[i - lead] if (s == -1 and i >= lead) else s for i, s in enumerate(sizes_t))
    return call_op(jnp.broadcast_to, "ExpandBackward", (input,), (("shape", target),))


# ------------------------------------------------------------------ indexing
def _encode_index(index: Any) -> tuple[tuple[Any, ...], list[Any]]:
    """A static spec (hashable) and the traced index arrays of a NumPy-style index."""
    items = index if isinstance(index, tuple) else (index,)
    spec: list[Any] = []
    arrays: list[Any] = []
    for item in items:
        if item is None:
            spec.append(("none",))
        elif item is Ellipsis:
            spec.append(("ellipsis",))
        elif isinstance(item, slice):
            parts = [None if p is None else int(p) for p in (item.start, item.stop, item.step)]
            spec.append(("slice", *parts))
        elif isinstance(item, bool):
            spec.append(("bool", item))
        elif isinstance(item, int | np.integer):
            spec.append(("int", int(item)))
        else:
            value = item.value if isinstance(item, Tensor) else item
            if isinstance(value, list | tuple):
                value = np.asarray(value)
            if getattr(value, "dtype", None) is not None and value.dtype == np.bool_:
                for part in np.nonzero(np.asarray(value)):
                    spec.append(("array",))
                    arrays.append(part)
            elif getattr(value, "ndim", None) == 0 and not isinstance(value, jax.core.Tracer):
                spec.append(("int", int(value)))
            else:
                spec.append(("array",))
                arrays.append(value)
    return tuple(spec), arrays


def _decode_index(spec: tuple[Any, ...], arrays: Sequence[Any]) -> tuple[Any, ...]:
    it = iter(arrays)
    out: list[Any] = []
    for s in spec:
        kind = s[0]
        if kind == "none":
            out.append(None)
        elif kind == "ellipsis":
            out.append(Ellipsis)
        elif kind == "slice":
            out.append(slice(*s[1:]))
        elif kind in ("int", "bool"):
            out.append(s[1])
        else:
            out.append(next(it))
    return tuple(out)


def _getitem(x: jax.Array, *arrays: jax.Array, spec: tuple[Any, ...]) -> jax.Array:
    return x[_decode_index(spec, arrays)]


def getitem(input: Any, index: Any) -> Tensor:
    """``input[index]`` with NumPy indexing (ints, slices, None, ..., int/bool arrays)."""
    spec, arrays = _encode_index(index)
    return call_op(_getitem, "IndexBackward", (input, *arrays), (("spec", spec),))


def _setitem(x: jax.Array, v: jax.Array, *arrays: jax.Array, spec: tuple[Any, ...]) -> jax.Array:
    return x.at[_decode_index(spec, arrays)].set(v)


def index_put(input: Any, index: Any, value: Any) -> Tensor:
    """A copy of ``input`` with ``input[index] = value`` (recorded; gradient reaches both)."""
    spec, arrays = _encode_index(index)
    return call_op(_setitem, "IndexPutBackward", (input, value, *arrays), (("spec", spec),))


def setitem_(t: Tensor, index: Any, value: Any) -> None:
    """``t[index] = value``: rebinds ``t`` to the recorded result (not allowed on grad leaves)."""
    if t.is_leaf and t.requires_grad and is_grad_enabled():
        raise RuntimeError(
            "a leaf Tensor that requires grad is being used in an in-place operation "
            "(t[index] = value); do it under tp.no_grad(), or on t.clone()"
        )
    r = index_put(t, index, value)
    t._value = r._value
    if is_grad_enabled():
        t._grad_fn, t._output_nr, t._requires_grad = r._grad_fn, r._output_nr, r._requires_grad


# ------------------------------------------------------------------ joining and splitting
def _cat(*xs: jax.Array, axis: int) -> jax.Array:
    return jnp.concatenate(xs, axis=axis)


def _stack(*xs: jax.Array, axis: int) -> jax.Array:
    return jnp.stack(xs, axis=axis)


def cat(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """Concatenate along an existing dimension ``dim``.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.cat([tp.ones(2), tp.zeros(3)]).shape
        (5,)
    """
    tensors = list(tensors)
    if not tensors:
        raise ValueError("tp.cat: expected a non-empty sequence of Tensors")
    d = _norm_dim("cat", dim, _ndim(tensors[0]))
    return call_op(_cat, "CatBackward", tensors, (("axis", d),))


def stack(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """Stack equally shaped Tensors along a new dimension ``dim``."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("tp.stack: expected a non-empty sequence of Tensors")
    d = _norm_dim("stack", dim, _ndim(tensors[0]) + 1)
    return call_op(_stack, "StackBackward", tensors, (("axis", d),))


def _split(x: jax.Array, indices: tuple[int, ...], axis: int) -> tuple[jax.Array, ...]:
    return tuple(jnp.split(x, indices, axis=axis))


def _split_at(input: Any, sizes: Sequence[int], dim: int, fn: str) -> tuple[Tensor, ...]:
    indices = tuple(int(i) for i in np.cumsum(sizes)[:-1])
    return call_op(_split, f"{fn}Backward", (input,), (("indices", indices), ("axis", dim)))


def split(input: Any, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """Split along ``dim`` into pieces of ``split_size`` (last one smaller) or the listed sizes.

    Example:
        >>> import tensorplay_jax as tp
        >>> [p.shape for p in tp.split(tp.arange(5), 2)]
        [(2,), (2,), (1,)]
    """
    shape = _shape(input)
    d = _norm_dim("split", dim, len(shape))
    n = shape[d]
    if isinstance(split_size_or_sections, int | np.integer):
        size = int(split_size_or_sections)
        if size <= 0:
            raise ValueError(f"tp.split: split_size must be positive, got {size}")
        sizes = [size] * (n // size) + ([n % size] if n % size else [])
        sizes = sizes or [0]
    else:
        sizes = [int(s) for s in split_size_or_sections]
        if sum(sizes) != n:
            raise ValueError(
                f"tp.split: split sizes {sizes} sum to {sum(sizes)}, but dim {d} has size {n}"
            )
    return _split_at(input, sizes, d, "Split")


def chunk(input: Any, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    """Split into ``chunks`` pieces of ``ceil(n / chunks)`` (the last may be smaller or missing)."""
    if chunks <= 0:
        raise ValueError(f"tp.chunk: chunks must be positive, got {chunks}")
    shape = _shape(input)
    d = _norm_dim("chunk", dim, len(shape))
    return split(input, max(1, math.ceil(shape[d] / chunks)), d)


def _narrow(x: jax.Array, start: int, length: int, axis: int) -> jax.Array:
    return jax.lax.slice_in_dim(x, start, start + length, axis=axis)


def narrow(input: Any, dim: int, start: int, length: int) -> Tensor:
    """``length`` elements of dimension ``dim`` starting at ``start`` (may be negative)."""
    shape = _shape(input)
    d = _norm_dim("narrow", dim, len(shape))
    start = int(start) + (shape[d] if int(start) < 0 else 0)
    if not (start >= 0 and length >= 0 and start + length <= shape[d]):
        raise IndexError(
            f"tp.narrow: start={start}, length={length} does not fit dim {d} of size {shape[d]}"
        )
    static = (("start", start), ("length", int(length)), ("axis", d))
    return call_op(_narrow, "NarrowBackward", (input,), static)


def _unbind(x: jax.Array, axis: int) -> tuple[jax.Array, ...]:
    return tuple(jnp.moveaxis(x, axis, 0))


def unbind(input: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along ``dim``, with that dimension removed."""
    d = _norm_dim("unbind", dim, _ndim(input))
    return call_op(_unbind, "UnbindBackward", (input,), (("axis", d),))
