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

import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import register_hook, register_post_accumulate_grad_hook
from tensorplay_jax.tensors import (
    _device,
    _factories,
    _gathers,
    _indexing,
    _inplace,
    _matrix_ops,
    _ops,
    _reductions,
    _scans_and_sorts,
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


def _where(self: Tensor, condition: Any, other: Any) -> Tensor:
    """``self`` where ``condition`` holds, ``other`` elsewhere (``tp.where(condition, self,
    other)``)."""
    return _ops.where(condition, self, other)


def _type_as(self: Tensor, other: Tensor) -> Tensor:
    """``self`` converted to ``other``'s dtype."""
    return self if self.dtype == other.dtype else _ops.astype(self, other.dtype)


def _new_factory(name: str, make: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``Tensor.new_*``: ``make(...)`` with ``self``'s dtype and device unless given."""

    def method(
        self: Tensor, *args: Any, dtype: Any = None, device: Any = None, **kw: Any
    ) -> Tensor:
        device = device if device is not None else _factories._device_of(self)
        return make(*args, dtype=dtype or self.dtype, device=device, **kw)

    method.__name__ = method.__qualname__ = name
    plain = name.removeprefix("new_")
    method.__doc__ = (
        f"``tp.{plain}(...)`` with this Tensor's dtype and device (unless given), as torch's "
        f"``{name}``."
    )
    return method


def _new_tensor(
    self: Tensor, data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """``tp.tensor(data)`` with this Tensor's dtype and device (unless given)."""
    device = device if device is not None else _factories._device_of(self)
    return _factories.tensor(
        data, dtype=dtype or self.dtype, device=device, requires_grad=requires_grad
    )


def _is_floating_point(self: Tensor) -> bool:
    """Whether the dtype is a floating-point type."""
    return bool(jnp.issubdtype(self.dtype, jnp.floating))


def _is_complex(self: Tensor) -> bool:
    """Whether the dtype is a complex type."""
    return bool(jnp.issubdtype(self.dtype, jnp.complexfloating))


def _element_size(self: Tensor) -> int:
    """Bytes per element."""
    return int(self.dtype.itemsize)


def _nbytes(self: Tensor) -> int:
    """Bytes of all the elements."""
    return int(self.dtype.itemsize) * self.numel()


def _is_cuda(self: Tensor) -> bool:
    """Whether the value is on a GPU."""
    device = self.device
    return device is not None and device.platform in ("gpu", "cuda", "rocm")


def _retain_grad(self: Tensor) -> None:
    """Keep this non-leaf Tensor's gradient in ``.grad`` on each backward (accumulated, as a
    leaf's); a leaf keeps it anyway.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.ones(2, requires_grad=True)
        >>> y = x * 3
        >>> y.retain_grad()
        >>> (y * y).sum().backward()
        >>> y.grad
        tensor([6., 6.])
    """
    if not self.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    if self.grad_fn is None or self.__dict__.get("_retains_grad"):
        return
    self.__dict__["_retains_grad"] = True
    ref = weakref.ref(self)  # the hook lives on the node, which the Tensor keeps alive

    def keep(grad: Tensor) -> None:
        t = ref()
        if t is not None:
            g = grad.detach()
            t._grad = g if t._grad is None else Tensor(t._grad._value + g._value)

    register_hook(self, keep)


def _retains_grad(self: Tensor) -> bool:
    """Whether ``retain_grad()`` was called on this non-leaf Tensor."""
    return bool(self.__dict__.get("_retains_grad", False))


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
    "allclose": _ops.allclose,
    "isclose": _ops.isclose,
    "nonzero": _indexing.nonzero,
    "maximum": _ops.maximum,
    "minimum": _ops.minimum,
    "where": _where,
    "floor": _ops.floor,
    "ceil": _ops.ceil,
    "trunc": _ops.trunc,
    "frac": _ops.frac,
    "round": _ops.round,
    "sign": _ops.sign,
    "reciprocal": _ops.reciprocal,
    "rsqrt": _ops.rsqrt,
    "log1p": _ops.log1p,
    "expm1": _ops.expm1,
    "log2": _ops.log2,
    "log10": _ops.log10,
    "erf": _ops.erf,
    "sinh": _ops.sinh,
    "cosh": _ops.cosh,
    "asin": _ops.asin,
    "acos": _ops.acos,
    "atan": _ops.atan,
    "atan2": _ops.atan2,
    "fmod": _ops.fmod,
    "remainder": _ops.remainder,
    "clip": _ops.clamp,
    "nan_to_num": _ops.nan_to_num,
    "isnan": _ops.isnan,
    "isinf": _ops.isinf,
    "isfinite": _ops.isfinite,
    "logical_not": _ops.logical_not,
    "logical_and": _ops.logical_and,
    "logical_or": _ops.logical_or,
    "logical_xor": _ops.logical_xor,
    # scans, sorting, gathers
    "cumsum": _scans_and_sorts.cumsum,
    "cumprod": _scans_and_sorts.cumprod,
    "sort": _scans_and_sorts.sort,
    "argsort": _scans_and_sorts.argsort,
    "topk": _scans_and_sorts.topk,
    "median": _scans_and_sorts.median,
    "kthvalue": _scans_and_sorts.kthvalue,
    "quantile": _scans_and_sorts.quantile,
    "diff": _scans_and_sorts.diff,
    "logcumsumexp": _scans_and_sorts.logcumsumexp,
    "unique": _scans_and_sorts.unique,
    "bincount": _scans_and_sorts.bincount,
    "nansum": _reductions.nansum,
    "nanmean": _reductions.nanmean,
    "gather": _gathers.gather,
    "take_along_dim": _gathers.take_along_dim,
    "index_select": _gathers.index_select,
    "masked_select": _gathers.masked_select,
    "index_add": _gathers.index_add,
    # matrices
    "tril": _matrix_ops.tril,
    "triu": _matrix_ops.triu,
    "diag": _matrix_ops.diag,
    "diagonal": _matrix_ops.diagonal,
    "trace": _matrix_ops.trace,
    "outer": _matrix_ops.outer,
    "dot": _matrix_ops.dot,
    "cross": _matrix_ops.cross,
    "addmm": _matrix_ops.addmm,
    # autograd and layout
    "register_hook": register_hook,
    "register_post_accumulate_grad_hook": register_post_accumulate_grad_hook,
    "is_contiguous": _is_contiguous,
    "retain_grad": _retain_grad,
    "retains_grad": property(_retains_grad),
    "is_sparse": property(_is_sparse),
    "is_floating_point": _is_floating_point,
    "is_complex": _is_complex,
    "is_cuda": property(_is_cuda),
    "element_size": _element_size,
    "nbytes": property(_nbytes),
    "itemsize": property(_element_size),
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
    "half": _cast(jnp.float16, "Convert to float16."),
    "bfloat16": _cast(jnp.bfloat16, "Convert to bfloat16."),
    "type_as": _type_as,
    "new_zeros": _new_factory("new_zeros", _factories.zeros),
    "new_ones": _new_factory("new_ones", _factories.ones),
    "new_empty": _new_factory("new_empty", _factories.empty),
    "new_full": _new_factory("new_full", _factories.full),
    "new_tensor": _new_tensor,
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
    "count_nonzero": _reductions.count_nonzero,
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
    "select": _shape_ops.select,
    "tensor_split": _shape_ops.tensor_split,
    "flip": _shape_ops.flip,
    "roll": _shape_ops.roll,
    "repeat": _shape_ops.repeat,
    "repeat_interleave": _shape_ops.repeat_interleave,
    "expand_as": _shape_ops.expand_as,
}


def attach_methods(cls: type[Tensor]) -> None:
    """Set every entry of ``_METHODS`` and of ``_inplace.METHODS`` on ``cls``.

    An entry never replaces a method with a body.
    """
    for name, fn in {**_METHODS, **_inplace.METHODS}.items():
        if name in cls.__dict__:
            raise RuntimeError(f"attach_methods: {cls.__name__}.{name} is already defined")
        setattr(cls, name, fn)
