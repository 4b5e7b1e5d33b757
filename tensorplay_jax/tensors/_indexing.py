"""Indexing: ``t[index]``, ``t[index] = v``, iteration; basic indexing makes views.

An index is split into a static spec (hashable, part of the compile cache key)
and traced arrays. Integers are traced too, after a bounds check here, so
``x[i]`` compiles once per shape and index pattern, never once per ``i``. A
boolean mask is turned into integer indices first (its result shape depends on
its values). Basic indexing (ints, slices, ``None``, ``...``) returns a view
(``_views``): writes to it reach the indexed Tensor and the other way round, as
in torch. Advanced indexing (integer or boolean arrays) returns a copy.

Both operations have NumPy rules (``autograd.register_numpy_rule``) for basic
indices: an unrecorded read or write of a small CPU array (an RL episode's
returns written element by element into slices whose bounds change each
episode) then runs with NumPy and traces nothing per bound. They take the same
values JAX's indexing does and refuse (``NotImplemented``: the compiled
operation runs) where a cast could differ: a float written into an integer
array, an integer out of the array's range.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import numpy as np

from tensorplay_jax.autograd import call_op, is_grad_enabled, register_numpy_rule
from tensorplay_jax.tensors import _views
from tensorplay_jax.tensors._host import concrete
from tensorplay_jax.tensors._tensor import Tensor

Spec = tuple[tuple[Any, ...], ...]


def _int_of(item: Any) -> int | None:
    """``item`` as a Python int when it is a concrete integer scalar, else None."""
    if isinstance(item, bool):
        return None
    if isinstance(item, int | np.integer):
        return int(item)
    value = item._value if isinstance(item, Tensor) else item
    if (
        isinstance(value, np.ndarray | jax.Array)
        and not isinstance(value, jax.core.Tracer)
        and value.ndim == 0
        and np.issubdtype(value.dtype, np.integer)
    ):
        return int(value)
    return None


def _consumed(item: Any) -> int:
    """How many dimensions of the indexed array ``item`` uses up."""
    if item is None or item is Ellipsis or isinstance(item, bool):
        return 0
    value = item._value if isinstance(item, Tensor) else item
    if getattr(value, "dtype", None) == np.bool_:
        return value.ndim
    return 1


def encode_index(index: Any, shape: tuple[int, ...]) -> tuple[Spec, list[Any], bool]:
    """The static spec, the traced index values, and whether the index is basic (a view).

    Raises:
        IndexError: an integer is out of range, or there are too many indices.
    """
    items = index if isinstance(index, tuple) else (index,)
    ndim = len(shape)
    used = sum(_consumed(i) for i in items)
    if used > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    spec: list[Any] = []
    arrays: list[Any] = []
    basic = True
    dim = 0
    for item in items:
        i = _int_of(item)
        if i is not None:
            size = shape[dim]
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            spec.append(("int",))
            arrays.append(i % size)
            dim += 1
        elif item is None:
            spec.append(("none",))
        elif item is Ellipsis:
            spec.append(("ellipsis",))
            dim += ndim - used
        elif isinstance(item, slice):
            parts = [None if p is None else int(p) for p in (item.start, item.stop, item.step)]
            spec.append(("slice", *parts))
            dim += 1
        elif isinstance(item, bool):
            spec.append(("bool", item))
        else:
            basic = False
            value = item._value if isinstance(item, Tensor) else item
            if isinstance(value, list | tuple):
                value = np.asarray(value)
            if getattr(value, "dtype", None) == np.bool_:
                for part in np.nonzero(np.asarray(value)):
                    spec.append(("array",))
                    arrays.append(part)
                dim += value.ndim
            else:
                spec.append(("array",))
                arrays.append(value)
                dim += 1
    return tuple(spec), arrays, basic


def _decode_index(spec: Spec, arrays: Sequence[Any]) -> tuple[Any, ...]:
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
        elif kind == "bool":
            out.append(s[1])
        else:
            out.append(next(it))
    return tuple(out)


def _getitem(x: jax.Array, *arrays: jax.Array, spec: Spec) -> jax.Array:
    return x[_decode_index(spec, arrays)]


def _setitem(x: jax.Array, v: jax.Array, *arrays: jax.Array, spec: Spec) -> jax.Array:
    return x.at[_decode_index(spec, arrays)].set(v)


_BASIC = frozenset({"int", "slice", "none", "ellipsis"})


def _host(x: Any, spec: Spec) -> np.ndarray | None:
    """``x`` as a NumPy array for a NumPy rule, or None: not an array, a weak-typed
    one (NumPy has no weak types), or an index that is not basic."""
    if not isinstance(x, np.ndarray | jax.Array) or getattr(x, "weak_type", False):
        return None
    if any(s[0] not in _BASIC for s in spec):
        return None
    return np.asarray(x)


def _getitem_numpy(x: Any, *arrays: Any, spec: Spec) -> Any:
    """:func:`_getitem` with NumPy, for basic indices (a copy, in the canonical dtype).

    Example:
        >>> _getitem_numpy(np.arange(5, dtype=np.float32), 1, spec=(("int",),))
        array(1., dtype=float32)
    """
    a = _host(x, spec)
    if a is None:
        return NotImplemented
    dtype = jax.dtypes.canonicalize_dtype(a.dtype)
    return np.array(a[_decode_index(spec, arrays)], dtype=dtype)


def _casts_as_jax(v: Any, value: np.ndarray, dtype: np.dtype) -> bool:
    """Whether NumPy writes ``v`` into an array of ``dtype`` as JAX's ``.at[].set`` does:
    a Python bool into any dtype; a Python integer JAX's default integer holds, into a
    float or an integer dtype that holds it; a Python float into a float; an array of
    the same dtype; a float, integer or bool array into a float, a bool array into an
    integer. An integer array JAX would first narrow (``int64`` without x64) is not
    taken: JAX wraps its values where NumPy keeps them."""
    if isinstance(v, bool):
        return True
    if isinstance(v, int):
        if not (np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)):
            return False
        held = np.iinfo(jax.dtypes.canonicalize_dtype(np.int64))
        fits = np.iinfo(dtype) if np.issubdtype(dtype, np.integer) else held
        return bool(held.min <= v <= held.max and fits.min <= v <= fits.max)
    if isinstance(v, float):
        return bool(np.issubdtype(dtype, np.floating))
    src = value.dtype
    if src == dtype:
        return True
    if np.issubdtype(src, np.integer) and jax.dtypes.canonicalize_dtype(src) != src:
        return False
    if np.issubdtype(dtype, np.floating):
        return bool(src == np.bool_ or np.issubdtype(src, np.number))
    return bool(src == np.bool_ and np.issubdtype(dtype, np.integer))


def _setitem_numpy(x: Any, v: Any, *arrays: Any, spec: Spec) -> Any:
    """:func:`_setitem` with NumPy, for basic indices and values that cast as in JAX.

    Example:
        >>> _setitem_numpy(np.zeros(3, np.float32), 2.5, 1, spec=(("int",),))
        array([0. , 2.5, 0. ], dtype=float32)
    """
    a = _host(x, spec)
    if a is None or not isinstance(v, np.ndarray | np.generic | jax.Array | bool | int | float):
        return NotImplemented
    value = np.asarray(v)
    dtype = jax.dtypes.canonicalize_dtype(a.dtype)
    if not _casts_as_jax(v, value, dtype):
        return NotImplemented
    out = np.array(a, dtype=dtype)
    index = _decode_index(spec, arrays)
    target = out[index].shape
    if len(value.shape) > len(target) or any(
        n != 1 and n != m for n, m in zip(value.shape[::-1], target[::-1], strict=False)
    ):
        return NotImplemented  # JAX's error, not NumPy's
    out[index] = value
    return out


def _read(spec: Spec, arrays: Sequence[Any], base: Any) -> Tensor:
    return call_op(_getitem, "IndexBackward", (base, *arrays), (("spec", spec),), saves=False)


def _write(spec: Spec, arrays: Sequence[Any], base: Any, value: Any) -> Tensor:
    return call_op(
        _setitem, "IndexPutBackward", (base, value, *arrays), (("spec", spec),), saves=False
    )


register_numpy_rule(_getitem, _getitem_numpy)
register_numpy_rule(_setitem, _setitem_numpy)


def link_index(out: Tensor, base: Tensor, spec: Spec, arrays: Sequence[Any]) -> Tensor:
    """Make ``out`` the view ``base[index]`` (``index`` given as spec and values)."""
    return _views.link(
        out,
        base,
        functools.partial(_read, spec, arrays),
        functools.partial(_write, spec, arrays),
    )


def getitem(input: Any, index: Any) -> Tensor:
    """``input[index]`` with NumPy indexing (ints, slices, None, ..., int/bool arrays).

    Basic indexing returns a view: ``r = tp.zeros(4); r[1:3][0] = 5.`` changes ``r``.

    Example:
        >>> import tensorplay_jax as tp
        >>> r = tp.zeros(4)
        >>> c = r[1:3]
        >>> c[0] = 5.0
        >>> r
        tensor([0., 5., 0., 0.])
    """
    shape = tuple(input.shape) if hasattr(input, "shape") else np.shape(input)
    spec, arrays, basic = encode_index(index, shape)
    out = _read(spec, arrays, input)
    if basic and isinstance(input, Tensor):
        link_index(out, input, spec, arrays)
    return out


def nonzero(input: Any, *, as_tuple: bool = False) -> Any:
    """The indices of the non-zero elements (no gradient; the size depends on the values).

    Args:
        input: a Tensor (or array).
        as_tuple: return one 1-d index Tensor per dimension instead of one
            ``(count, ndim)`` Tensor (a 0-d input counts as 1-d).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nonzero(tp.tensor([[1, 0], [0, 3]])).tolist()
        [[0, 0], [1, 1]]
        >>> [t.tolist() for t in tp.nonzero(tp.tensor([0, 2, 5]), as_tuple=True)]
        [[1, 2]]
    """
    value = input._value if isinstance(input, Tensor) else input
    a = concrete(value, "nonzero", "tp.where(input != 0, ...) or a mask")
    idx = np.nonzero(a.reshape(1) if a.ndim == 0 else a)
    dtype = jax.dtypes.canonicalize_dtype(np.int64)
    if as_tuple:
        return tuple(Tensor(i.astype(dtype)) for i in idx)
    if a.ndim == 0:
        return Tensor(np.zeros((len(idx[0]), 0), dtype))
    return Tensor(np.stack(idx, axis=1).astype(dtype))


def index_put(input: Any, index: Any, value: Any) -> Tensor:
    """A copy of ``input`` with ``input[index] = value`` (recorded; gradient reaches both)."""
    spec, arrays, _ = encode_index(index, tuple(input.shape))
    return _write(spec, arrays, input, value)


def setitem_(t: Tensor, index: Any, value: Any) -> None:
    """``t[index] = value`` in place: ``t``, its bases and its views all see the write.

    Raises:
        RuntimeError: ``t`` is a leaf that requires grad (or a view of one) in grad mode.
    """
    _views.check_writable(t, "t[index] = value")
    if isinstance(value, list | tuple):
        value = np.asarray(value)
    _views.commit(t, index_put(t, index, value))


def iterate(t: Tensor) -> Iterator[Tensor]:
    """``iter(t)``: the rows of ``t``, each a view ``t[i]``.

    With a gradient to record the rows come from one node (``unbind``);
    otherwise from one host copy of the value, so iterating costs no compiled
    call per row.
    """
    v = t._value
    if v.ndim == 0:
        raise TypeError("iteration over a 0-d Tensor")
    if (t._requires_grad and is_grad_enabled()) or isinstance(v, jax.core.Tracer):
        rows = call_op(_unbind0, "UnbindBackward", (t,), saves=False)
    else:
        host = np.asarray(v)
        rows = tuple(Tensor._wrap(host[i, ...]) for i in range(host.shape[0]))
    spec = (("int",),)
    return iter([link_index(r, t, spec, (i,)) for i, r in enumerate(rows)])


def _unbind0(x: jax.Array) -> tuple[jax.Array, ...]:
    return tuple(x)
