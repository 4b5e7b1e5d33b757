"""Shape operations and cat/stack/split/narrow, each one recorded node.

Shapes, dimensions and split points are static (part of the compile cache
key). The operations torch returns views from (``reshape``/``view``,
``transpose``, ``permute``, ``squeeze``, ``unsqueeze``, ``expand``, ``narrow``,
``split``, ``chunk``, ``unbind``) return views here too (``_views``): an in-place
write to the result reaches ``input``. Indexing is in ``_indexing``.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import call_op
from tensorplay_jax.tensors import _indexing, _sparse_ops, _views
from tensorplay_jax.tensors._sparse import SparseTensor
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


def _reshaped(input: Any, shape: tuple[int, ...]) -> Tensor:
    return call_op(_reshape, "ReshapeBackward", (input,), (("shape", shape),), saves=False)


def _reshape_back(base: Tensor, view: Tensor) -> Tensor:
    return _reshaped(view, base.shape)


def _as_view(out: Tensor, input: Any, read: Any, write: Any) -> Tensor:
    """``out`` as a view of ``input`` (see ``_views``) when ``input`` is a Tensor."""
    if isinstance(input, Tensor):
        _views.link(out, input, read, write)
    return out


def reshape(input: Any, *shape: Any) -> Tensor:
    """The same elements in a new shape; one entry may be -1.

    The result is a view: in-place writes to it reach ``input``.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.arange(6).reshape(2, 3).shape
        (2, 3)
    """
    shape_t = _shape_arg("reshape", shape)
    out = _reshaped(input, shape_t)
    return _as_view(out, input, functools.partial(_reshaped, shape=shape_t), _reshape_back)


def view(input: Any, *shape: Any) -> Tensor:
    """Same as ``reshape`` (a view of ``input``)."""
    return reshape(input, *shape)


def _swapped(input: Any, axis1: int, axis2: int) -> Tensor:
    static = (("axis1", axis1), ("axis2", axis2))
    return call_op(jnp.swapaxes, "TransposeBackward", (input,), static, saves=False)


def transpose(input: Any, dim0: int, dim1: int) -> Tensor:
    """Swap dimensions ``dim0`` and ``dim1`` (a view of ``input``)."""
    n = _ndim(input)
    d0, d1 = _norm_dim("transpose", dim0, n), _norm_dim("transpose", dim1, n)
    swap = functools.partial(_swapped, axis1=d0, axis2=d1)
    return _as_view(swap(input), input, swap, lambda base, v: swap(v))


def _permuted(input: Any, axes: tuple[int, ...]) -> Tensor:
    return call_op(jnp.transpose, "PermuteBackward", (input,), (("axes", axes),), saves=False)


def permute(input: Any, *dims: Any) -> Tensor:
    """Reorder dimensions: ``x.permute(2, 0, 1)`` (a view of ``input``)."""
    perm = _shape_arg("permute", dims)
    n = _ndim(input)
    if sorted(d % max(n, 1) for d in perm) != list(range(n)):
        raise ValueError(f"tp.permute: dims={perm} is not a permutation of {n} dimensions")
    perm = tuple(d % max(n, 1) for d in perm)
    inverse = tuple(int(i) for i in np.argsort(perm))
    read = functools.partial(_permuted, axes=perm)
    return _as_view(read(input), input, read, lambda base, v: _permuted(v, inverse))


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
    """Insert a dimension of size 1 at ``dim`` (a view of ``input``)."""
    shape = _shape(input)
    d = _norm_dim("unsqueeze", dim, len(shape) + 1)
    return reshape(input, (*shape[:d], 1, *shape[d:]))


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
    return reshape(input, tuple(s for i, s in enumerate(shape) if i not in axes))


def _no_write(base: Tensor, view: Tensor) -> Tensor:
    raise RuntimeError(
        "unsupported operation: more than one element of the written-to tensor refers to a "
        "single memory location (an expand() view). Please clone() the tensor before "
        "performing the operation."
    )


def expand(input: Any, *sizes: Any) -> Tensor:
    """Broadcast to ``sizes``; -1 keeps that dimension's size (a view that cannot be written)."""
    sizes_t = _shape_arg("expand", sizes)
    shape = _shape(input)
    lead = len(sizes_t) - len(shape)
    if lead < 0:
        raise ValueError(f"tp.expand: sizes {sizes_t} have fewer dimensions than {shape}")
    target = tuple(shape[i - lead] if (s == -1 and i >= lead) else s for i, s in enumerate(sizes_t))

    def read(x: Any) -> Tensor:
        return call_op(jnp.broadcast_to, "ExpandBackward", (x,), (("shape", target),), saves=False)

    return _as_view(read(input), input, read, _no_write)


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
    return call_op(_cat, "CatBackward", tensors, (("axis", d),), saves=False)


def stack(tensors: Sequence[Any], dim: int = 0) -> Tensor:
    """Stack equally shaped Tensors along a new dimension ``dim``."""
    tensors = list(tensors)
    if not tensors:
        raise ValueError("tp.stack: expected a non-empty sequence of Tensors")
    if type(tensors[0]) is SparseTensor:
        return _sparse_ops.stack(tensors, dim)
    d = _norm_dim("stack", dim, _ndim(tensors[0]) + 1)
    return call_op(_stack, "StackBackward", tensors, (("axis", d),), saves=False)


def _split(x: jax.Array, indices: tuple[int, ...], axis: int) -> tuple[jax.Array, ...]:
    return tuple(jnp.split(x, indices, axis=axis))


def _split_at(input: Any, sizes: Sequence[int], dim: int, fn: str) -> tuple[Tensor, ...]:
    indices = tuple(int(i) for i in np.cumsum(sizes)[:-1])
    outs = call_op(
        _split, f"{fn}Backward", (input,), (("indices", indices), ("axis", dim)), saves=False
    )
    if isinstance(input, Tensor):
        for out, start, stop in zip(outs, (0, *indices), np.cumsum(sizes), strict=True):
            _link_slice(out, input, dim, ("slice", start, int(stop), None), ())
    return outs


_ALL = ("slice", None, None, None)


def _link_slice(out: Tensor, base: Tensor, dim: int, item: Any, arrays: tuple[Any, ...]) -> None:
    """``out`` as the view ``base[:, ..., item]`` (``item`` at ``dim``)."""
    _indexing.link_index(out, base, (*(_ALL,) * dim, item), arrays)


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
    out = call_op(_narrow, "NarrowBackward", (input,), static, saves=False)
    if isinstance(input, Tensor):
        _link_slice(out, input, d, ("slice", start, start + int(length), None), ())
    return out


def _unbind(x: jax.Array, axis: int) -> tuple[jax.Array, ...]:
    return tuple(jnp.moveaxis(x, axis, 0))


def unbind(input: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """The slices along ``dim``, with that dimension removed."""
    d = _norm_dim("unbind", dim, _ndim(input))
    outs = call_op(_unbind, "UnbindBackward", (input,), (("axis", d),), saves=False)
    if isinstance(input, Tensor):
        for i, out in enumerate(outs):
            _link_slice(out, input, d, ("int",), (i,))
    return outs


def select(input: Any, dim: int, index: int) -> Tensor:
    """``input`` at position ``index`` of ``dim``, that dimension removed: ``x[:, i]`` for
    ``dim=1`` (a view).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.select(tp.tensor([[1.0, 2.0], [3.0, 4.0]]), 1, -1)
        tensor([2., 4.])
    """
    shape = _shape(input)
    if not shape:
        raise IndexError("select() cannot be applied to a 0-dim tensor.")
    d = _norm_dim("select", dim, len(shape))
    if not -shape[d] <= index < shape[d]:
        raise IndexError(
            f"select(): index {index} out of range for tensor of size {list(shape)} at "
            f"dimension {d}"
        )
    i = int(index) % shape[d]
    out = call_op(_select, "SelectBackward", (input,), (("axis", d), ("index", i)), saves=False)
    if isinstance(input, Tensor):
        _link_slice(out, input, d, ("int",), (i,))
    return out


def _select(x: jax.Array, axis: int, index: int) -> jax.Array:
    return jax.lax.index_in_dim(x, index, axis, keepdims=False)


def tensor_split(input: Any, indices_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """Split along ``dim`` into ``n`` nearly equal pieces (the first ``size % n`` one longer),
    or at the listed indices (views, as ``split``'s)."""
    shape = _shape(input)
    d = _norm_dim("tensor_split", dim, len(shape))
    n = shape[d]
    if isinstance(indices_or_sections, int | np.integer):
        k = int(indices_or_sections)
        if k <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {k}")
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
    else:
        cuts = [min(max(int(c) + (n if int(c) < 0 else 0), 0), n) for c in indices_or_sections]
        bounds = [0, *cuts, n]
        sizes = [max(b - a, 0) for a, b in itertools.pairwise(bounds)]
    return _split_at(input, sizes, d, "TensorSplit")


# ------------------------------------------------------------------ reordering and repeating
def _view_as_real(x: jax.Array) -> jax.Array:
    return jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)


def view_as_real(input: Any) -> Tensor:
    """A complex Tensor as a real one with a last dimension of 2 (real, imaginary parts);
    a copy here (JAX arrays share no memory), gradients flow as through torch's view.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.view_as_real(tp.tensor([1 + 2j], dtype=tp.complex64)).tolist()
        [[1.0, 2.0]]
    """
    if not jnp.issubdtype(jnp.result_type(input), jnp.complexfloating):
        raise RuntimeError(
            f"view_as_real is only supported for complex tensors, got {jnp.result_type(input)}"
        )
    return call_op(_view_as_real, "ViewAsRealBackward", (input,), saves=False)


def _view_as_complex(x: jax.Array) -> jax.Array:
    return jax.lax.complex(x[..., 0], x[..., 1])


def view_as_complex(input: Any) -> Tensor:
    """The inverse of :func:`view_as_real`: a real Tensor whose last dimension is 2 as complex.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.view_as_complex(tp.tensor([[1.0, 2.0]])).tolist()
        [(1+2j)]
    """
    shape = tuple(jnp.shape(input))
    if not shape or shape[-1] != 2:
        raise RuntimeError(f"Tensor must have a last dimension of size 2, got shape {shape}")
    return call_op(_view_as_complex, "ViewAsComplexBackward", (input,), saves=False)


def _flip(x: jax.Array, axes: tuple[int, ...]) -> jax.Array:
    return jnp.flip(x, axes)


def flip(input: Any, dims: Any) -> Tensor:
    """``input`` with the order of the elements along ``dims`` reversed (a copy, as torch's).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.flip(tp.tensor([[1, 2], [3, 4]]), [1])
        tensor([[2, 1],
                [4, 3]])
    """
    nd = _ndim(input)
    dims = (dims,) if isinstance(dims, int | np.integer) else tuple(dims)
    axes = tuple(_norm_dim("flip", int(d), nd) for d in dims)
    if len(set(axes)) != len(axes):
        raise RuntimeError(f"dims has duplicates, original flip dims size={len(axes)}")
    return call_op(_flip, "FlipBackward", (input,), (("axes", axes),), saves=False)


def _roll(x: jax.Array, shifts: Any, axes: Any) -> jax.Array:
    return jnp.roll(x, shifts, axes)


def roll(input: Any, shifts: Any, dims: Any = None) -> Tensor:
    """``input``'s elements shifted by ``shifts`` along ``dims``, wrapping around; without
    ``dims``, of the flattened input (its shape kept)."""
    nd = _ndim(input)
    if dims is None:
        if not isinstance(shifts, int | np.integer):
            raise RuntimeError("roll: shifts must be one int when dims is not given")
        static = (("shifts", int(shifts)), ("axes", None))
    else:
        sh = (shifts,) if isinstance(shifts, int | np.integer) else tuple(shifts)
        dm = (dims,) if isinstance(dims, int | np.integer) else tuple(dims)
        if len(sh) != len(dm):
            raise RuntimeError(
                f"shifts and dimensions must align. shifts: {len(sh)}, dims:{len(dm)}"
            )
        axes = tuple(_norm_dim("roll", int(d), nd) for d in dm)
        static = (("shifts", tuple(int(s) for s in sh)), ("axes", axes))
    return call_op(_roll, "RollBackward", (input,), static, saves=False)


def _tile(x: jax.Array, reps: tuple[int, ...]) -> jax.Array:
    return jnp.tile(x, reps)


def repeat(input: Any, *sizes: Any) -> Tensor:
    """``input`` tiled ``sizes[i]`` times along each dimension (torch's ``repeat``: NumPy's
    ``tile``); ``sizes`` may have more dimensions than ``input``, which gains leading ones.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.tensor([1, 2]).repeat(2, 2)
        tensor([[1, 2, 1, 2],
                [1, 2, 1, 2]])
    """
    reps = _shape_arg("repeat", sizes)
    if len(reps) < _ndim(input):
        raise RuntimeError(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions "
            "of tensor"
        )
    return call_op(_tile, "RepeatBackward", (input,), (("reps", reps),), saves=False)


def _repeat_each(x: jax.Array, repeats: Any, axis: int | None, total: int) -> jax.Array:
    if axis is None:
        x = x.reshape(-1)
    counts = repeats if isinstance(repeats, int) else np.asarray(repeats)
    return jnp.repeat(x, counts, axis=0 if axis is None else axis, total_repeat_length=total)


def repeat_interleave(input: Any, repeats: Any, dim: int | None = None) -> Tensor:
    """Each element (each slice along ``dim``) repeated ``repeats`` times in place; ``repeats``
    an int or a 1-d Tensor of counts, one per slice.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.repeat_interleave(tp.tensor([1, 2]), 2)
        tensor([1, 1, 2, 2])
    """
    shape = _shape(input)
    axis = None if dim is None else _norm_dim("repeat_interleave", dim, len(shape))
    n = int(np.prod(shape)) if axis is None else shape[axis]
    if isinstance(repeats, int | np.integer):
        reps: Any = int(repeats)
        total = reps * n
    else:
        counts = np.asarray(repeats._value if isinstance(repeats, Tensor) else repeats)
        if counts.ndim > 1 or counts.size not in (1, n):
            raise RuntimeError(
                f"repeats must have the same size as input along dim, but got repeats.size(0) "
                f"= {counts.size} and input.size({0 if dim is None else dim}) = {n}"
            )
        if counts.size and counts.min() < 0:
            raise RuntimeError("repeats can not be negative")
        reps = tuple(int(c) for c in np.broadcast_to(counts.reshape(-1), (n,)))
        total = sum(reps)
    static = (("repeats", reps), ("axis", axis), ("total", total))
    return call_op(_repeat_each, "RepeatInterleaveBackward", (input,), static, saves=False)


def expand_as(input: Any, other: Any) -> Tensor:
    """``input`` expanded to ``other``'s shape (``expand(other.shape)``)."""
    return expand(input, *_shape(other))


def broadcast_tensors(*tensors: Any) -> tuple[Tensor, ...]:
    """The Tensors expanded to their common broadcast shape."""
    shape = np.broadcast_shapes(*(_shape(t) for t in tensors))
    return tuple(expand(t, *shape) for t in tensors)


def meshgrid(*tensors: Any, indexing: str = "ij") -> tuple[Tensor, ...]:
    """Coordinate grids from 1-d Tensors: ``indexing="ij"`` (torch's default) gives shape
    ``(len(t0), len(t1), ...)``, ``"xy"`` swaps the first two."""
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f'meshgrid: indexing must be "ij" or "xy", got {indexing!r}')
    sizes = [int(np.prod(_shape(t))) for t in tensors]
    for t in tensors:
        if _ndim(t) > 1:
            raise RuntimeError("torch.meshgrid: Expected 0D or 1D tensor in the tensor list")
    order = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) >= 2:
        order[0], order[1] = 1, 0
    shape = tuple(sizes[i] for i in order)
    out = []
    for i, t in enumerate(tensors):
        place = [1] * len(tensors)
        place[order.index(i)] = sizes[i]
        out.append(expand(reshape(t, *place), *shape))
    return tuple(out)


def _at_least_2d(t: Any) -> Any:
    return reshape(t, 1, -1) if _ndim(t) < 2 else t


def vstack(tensors: Sequence[Any]) -> Tensor:
    """Concatenate along the first dimension, 1-d Tensors taken as rows."""
    return cat([_at_least_2d(t) for t in tensors], dim=0)


def hstack(tensors: Sequence[Any]) -> Tensor:
    """Concatenate along the second dimension (the first for 1-d Tensors)."""
    tensors = list(tensors)
    return cat(tensors, dim=0 if tensors and _ndim(tensors[0]) == 1 else 1)
