"""Tensor's operators and math, reduction and shape methods, attached from one table.

``_METHODS`` maps each method name to the function that implements it. Most
entries are the public function itself (``Tensor.sum`` is ``tp.sum``, so
``help(Tensor.sum)`` shows that function's docstring and example; ``self`` is
its first argument). The few methods whose call differs from a function (the
reflected operators, the dtype shortcuts, ``view_as``, ``t``, ``T``, ``==``)
are small adapters defined here, each with its own docstring.
``attach_methods(Tensor)`` sets them all; ``tensorplay_jax.tensors`` calls it
once on import, after the class and the operation modules exist, so
``_tensor`` never imports the modules that import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import register_hook, register_post_accumulate_grad_hook
from tensorplay_jax.tensors import (
    _device,
    _indexing,
    _inplace,
    _ops,
    _reductions,
    _shape_ops,
    _sparse,
    _sparse_ops,
    linalg,
)
from tensorplay_jax.tensors._tensor import Tensor


def _reflected(fn: Callable[[Any, Any], Tensor]) -> Callable[[Tensor, Any], Tensor]:
    """``other <op> self``: the reflected operator of ``fn`` (``__radd__`` for ``add``)."""

    def method(self: Tensor, other: Any) -> Tensor:
        return fn(other, self)

    method.__name__ = method.__qualname__ = f"reflected_{fn.__name__}"
    method.__doc__ = f"``{fn.__name__}(other, self)``."
    return method


def _cast(dtype: Any, doc: str) -> Callable[[Tensor], Tensor]:
    """A method converting to ``dtype`` (``Tensor.float`` and friends); as in torch, a
    Tensor of that dtype already is returned itself (``t.float() is t``)."""
    target = jnp.dtype(dtype)

    def method(self: Tensor) -> Tensor:
        if self.dtype == target:
            return self
        return _ops.astype(self, dtype)

    method.__doc__ = doc
    return method


def _eq(self: Tensor, other: Any) -> Any:
    """Elementwise ``==`` (bool Tensor); ``NotImplemented`` for non-array operands."""
    if not _ops.is_operand(other):
        return NotImplemented
    return _ops.eq(self, other)


def _ne(self: Tensor, other: Any) -> Any:
    """Elementwise ``!=`` (bool Tensor); ``NotImplemented`` for non-array operands."""
    if not _ops.is_operand(other):
        return NotImplemented
    return _ops.ne(self, other)


def _view_as(self: Tensor, other: Tensor) -> Tensor:
    """Reshape to ``other.shape``."""
    return _shape_ops.reshape(self, other.shape)


def _t(self: Tensor) -> Tensor:
    """Transpose of a matrix (0-d and 1-d unchanged)."""
    return self if self.ndim < 2 else _shape_ops.transpose(self, 0, 1)


def _T(self: Tensor) -> Tensor:
    """All dimensions reversed."""
    return _shape_ops.permute(self, *reversed(range(self.ndim)))


def _is_contiguous(self: Tensor, memory_format: Any = None) -> bool:
    """Always True: a JAX array has no strides, every Tensor is contiguous (``contiguous``
    returns ``self``)."""
    return True


def _is_sparse(self: Tensor) -> bool:
    """False for a dense Tensor (a sparse COO tensor is a ``SparseTensor``, where it is True)."""
    return False


def _layout(self: Tensor) -> str:
    """``tp.strided`` for a dense Tensor (``tp.sparse_coo`` for a ``SparseTensor``)."""
    return _sparse.strided


def _to_dense(self: Tensor, dtype: Any = None, *, masked_grad: bool | None = None) -> Tensor:
    """A dense Tensor is its own dense form: ``self`` (converted when ``dtype`` is given)."""
    return self if dtype is None else self.to(dtype)


_METHODS: dict[str, Any] = {
    # operators
    "__add__": _ops.add,
    "__radd__": _reflected(_ops.add),
    "__sub__": _ops.sub,
    "__rsub__": _reflected(_ops.sub),
    "__mul__": _ops.mul,
    "__rmul__": _reflected(_ops.mul),
    "__truediv__": _ops.div,
    "__rtruediv__": _reflected(_ops.div),
    "__floordiv__": _ops.floor_divide,
    "__rfloordiv__": _reflected(_ops.floor_divide),
    "__mod__": _ops.remainder,
    "__rmod__": _reflected(_ops.remainder),
    "__pow__": _ops.pow,
    "__rpow__": _reflected(_ops.pow),
    "__matmul__": _ops.matmul,
    "__rmatmul__": _reflected(_ops.matmul),
    "__neg__": _ops.neg,
    "__abs__": _ops.abs,
    "__invert__": _ops.logical_not,
    "__and__": _ops.logical_and,
    "__or__": _ops.logical_or,
    "__eq__": _eq,
    "__ne__": _ne,
    "__lt__": _ops.lt,
    "__le__": _ops.le,
    "__gt__": _ops.gt,
    "__ge__": _ops.ge,
    "__getitem__": _indexing.getitem,
    "__setitem__": _indexing.setitem_,
    "__iter__": _indexing.iterate,
    # comparisons, as methods (``pred.eq(target)``)
    "eq": _eq,
    "ne": _ne,
    "lt": _ops.lt,
    "le": _ops.le,
    "gt": _ops.gt,
    "ge": _ops.ge,
    # math
    "add": _ops.add,
    "sub": _ops.sub,
    "mul": _ops.mul,
    "div": _ops.div,
    "pow": _ops.pow,
    "matmul": _ops.matmul,
    "neg": _ops.neg,
    "abs": _ops.abs,
    "sqrt": _ops.sqrt,
    "square": _ops.square,
    "exp": _ops.exp,
    "log": _ops.log,
    "tanh": _ops.tanh,
    "sin": _ops.sin,
    "cos": _ops.cos,
    "sigmoid": _ops.sigmoid,
    "relu": _ops.relu,
    "softmax": _ops.softmax,
    "log_softmax": _ops.log_softmax,
    "clamp": _ops.clamp,
    "clone": _ops.clone,
    "bmm": _ops.bmm,
    "mm": _ops.mm,
    "equal": _ops.equal,
    "nonzero": _indexing.nonzero,
    # autograd and layout
    "register_hook": register_hook,
    "register_post_accumulate_grad_hook": register_post_accumulate_grad_hook,
    "is_contiguous": _is_contiguous,
    "is_sparse": property(_is_sparse),
    "layout": property(_layout),
    "to_sparse": _sparse_ops.to_sparse,
    "to_sparse_coo": _sparse_ops.to_sparse,
    "to_dense": _to_dense,
    # device and dtype conversions
    "to": _device.to,
    "cpu": _device.cpu,
    "cuda": _device.cuda,
    "float": _cast(jnp.float32, "Convert to float32."),
    "double": _cast(jnp.float64, "Convert to float64 (needs ``jax_enable_x64``)."),
    "long": _cast(jax.dtypes.canonicalize_dtype(jnp.int64), "Convert to the default integer type."),
    "int": _cast(jnp.int32, "Convert to int32."),
    "bool": _cast(jnp.bool_, "Convert to bool."),
    # reductions
    "sum": _reductions.sum,
    "mean": _reductions.mean,
    "var": _reductions.var,
    "std": _reductions.std,
    "norm": linalg.tensor_norm,
    "prod": _reductions.prod,
    "max": _reductions.max,
    "min": _reductions.min,
    "amax": _reductions.amax,
    "amin": _reductions.amin,
    "argmax": _reductions.argmax,
    "argmin": _reductions.argmin,
    "logsumexp": _reductions.logsumexp,
    "any": _reductions.any,
    "all": _reductions.all,
    # shape
    "reshape": _shape_ops.reshape,
    "view": _shape_ops.reshape,
    "view_as": _view_as,
    "transpose": _shape_ops.transpose,
    "permute": _shape_ops.permute,
    "T": property(_T),
    "t": _t,
    "flatten": _shape_ops.flatten,
    "unsqueeze": _shape_ops.unsqueeze,
    "squeeze": _shape_ops.squeeze,
    "expand": _shape_ops.expand,
    "narrow": _shape_ops.narrow,
    "split": _shape_ops.split,
    "chunk": _shape_ops.chunk,
    "unbind": _shape_ops.unbind,
}


def attach_methods(cls: type[Tensor]) -> None:
    """Set every entry of ``_METHODS`` and of ``_inplace.METHODS`` on ``cls``.

    An entry never replaces a method with a body.
    """
    for name, fn in {**_METHODS, **_inplace.METHODS}.items():
        if name in cls.__dict__:
            raise RuntimeError(f"attach_methods: {cls.__name__}.{name} is already defined")
        setattr(cls, name, fn)
