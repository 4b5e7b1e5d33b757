"""``Tensor``: a ``jax.Array`` with ``requires_grad``, a ``grad`` and a place on the local tape.

A Tensor is hashable by identity (so gradients can be keyed by it), holds an
immutable ``jax.Array`` that in-place operations (``t[idx] = v``, ``add_``...)
replace (see ``_views``: a write reaches the Tensor's base and views, and bumps
``_version``), and knows the node that produced it (``grad_fn``) and which
output of that node it is. This class holds the state and the methods with
real bodies; operators and the math, reduction and shape methods are the
functions of
``_ops``/``_reductions``/``_shape_ops``, attached from one table in
``_methods``, and each runs as one recorded node.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import (
    AccumulateGrad,
    GradientEdge,
    Node,
    is_grad_enabled,
    materialize,
    pending_aval,
    run_backward,
)
from tensorplay_jax.autograd import backward as _autograd_backward
from tensorplay_jax.runtime.device import to_device
from tensorplay_jax.tensors import _views
from tensorplay_jax.tensors._host import from_host

_DEFAULT_DTYPES = (np.dtype("float32"), np.dtype("int32"), np.dtype("int64"), np.dtype("bool"))

_RAW_JNP_MSG = (
    "a tensorplay_jax Tensor that requires grad was handed to a raw JAX/NumPy function, "
    "which would silently drop its gradient. Lift the function onto the tape with "
    "tp.apply(fn, tensor, ...) (or decorate it with @tp.function), or pass "
    "tensor.detach().value if you do not want a gradient."
)
_PLAIN_JNP_MSG = (
    "a tensorplay_jax Tensor cannot be passed to a jitted JAX function directly. Use "
    "tp.apply(fn, tensor, ...) to record it on the tape, or pass tensor.value (the jax.Array)."
)


# [the BCOO class, SparseTensor]: a value of that class is wrapped as a SparseTensor. Set by
# ``_sparse`` once a sparse array exists (``autograd.sparse_arrays.on_load``).
SPARSE: list[Any] = [None, None]


def _is_float(dtype: Any) -> bool:
    return bool(jnp.issubdtype(dtype, jnp.inexact))


class _TensorMeta(type):
    """Metaclass whose repr carries the fix, because ``jax.jit`` replaces our TypeError's text.

    JAX 0.10's jit boundary re-raises any TypeError from abstractifying an
    argument with its own message, which shows only ``type(arg)``: so the
    Tensor class's repr says what to do instead.
    """

    def __repr__(cls) -> str:
        return (
            f"<class '{cls.__module__}.{cls.__qualname__}'> (a tensorplay_jax Tensor: call JAX "
            "functions on Tensors through tp.apply(fn, tensor, ...), which records the "
            "gradient, or pass tensor.value, which drops it)"
        )


class Tensor(metaclass=_TensorMeta):
    """A JAX array on the local autograd tape.

    Build Tensors with ``tp.tensor``/``tp.randn``/``tp.ones``/...; ``Tensor(x)``
    wraps an existing array (no copy). Only floating/complex Tensors may
    require grad.

    Args:
        value: an array-like (``jax.Array``, NumPy array, nested lists, scalar).
        requires_grad: record operations on this leaf and give it a ``.grad``.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.tensor([1.0, 2.0, 3.0], requires_grad=True)
        >>> y = (x * x).sum()
        >>> y.backward()
        >>> x.grad
        tensor([2., 4., 6.])
    """

    __slots__ = (
        "__dict__",
        "__weakref__",
        "_accumulator",
        "_grad",
        "_grad_fn",
        "_output_nr",
        "_requires_grad",
        "_value",
        "_version",
        "_view",
        "_views",
    )

    # NumPy must defer binary operators to us (np_array + tensor -> Tensor.__radd__).
    __array_ufunc__ = None

    def __init__(self, value: Any, requires_grad: bool = False) -> None:
        if isinstance(value, Tensor):
            value = value._value
        elif isinstance(value, np.ndarray):
            value = from_host(value, what="tp.Tensor")
        elif not isinstance(value, jax.Array | jax.core.Tracer):
            value = jnp.asarray(value)
        self._value = value
        self._grad: Tensor | None = None
        self._grad_fn: Node | None = None
        self._output_nr = 0
        self._accumulator: weakref.ref[AccumulateGrad] | None = None
        self._requires_grad = False
        self._version = 0
        self._view: _views.ViewOf | None = None
        self._views: _views.ViewRefs | None = None
        if requires_grad:
            self.requires_grad = True

    # ----------------------------------------------------------------- construction
    @classmethod
    def _wrap(cls, value: Any) -> Tensor:
        # ``value`` is a jax.Array, a tracer, or a host NumPy array that arrived over RPC:
        # operations take it as it is (jit moves it), ``.value`` places it on the device.
        # A sparse array (a BCOO) makes a SparseTensor (``_sparse``).
        t = cls.__new__(SPARSE[1] if type(value) is SPARSE[0] else cls)
        t._value = value
        t._grad = None
        t._grad_fn = None
        t._output_nr = 0
        t._accumulator = None
        t._requires_grad = False
        t._version = 0
        t._view = None
        t._views = None
        return t

    @classmethod
    def _pending(cls, node: Node, output_nr: int, requires_grad: bool = True) -> Tensor:
        # Output ``output_nr`` of an operation the tape holds back: ``_value`` stays
        # unset until it runs; reading it runs it (__getattr__: autograd.materialize).
        # Without ``requires_grad`` (an unrecorded operation held back with the recorded
        # ones), ``node`` only finds the pending work: the Tensor is a leaf (``grad_fn``
        # None) and loses the node once its value is set.
        t = cls._wrap(None)
        del t._value
        t._grad_fn = node
        t._output_nr = output_nr
        t._requires_grad = requires_grad
        return t

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes not set: ``_value`` of a pending Tensor, or of
        # one given a pending value without recording (``autograd.assign_value``).
        if name == "_value" and materialize(self):
            return self._value
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")

    def _aval(self) -> Any:
        """The value, or a pending Tensor's ShapeDtypeStruct (no computation)."""
        s = pending_aval(self)
        return self._value if s is None else s

    @classmethod
    def _wrap_output(cls, value: Any, node: Node, output_nr: int) -> Tensor:
        t = cls._wrap(value)
        if _is_float(value.dtype):
            t._requires_grad = True
            t._grad_fn = node
            t._output_nr = output_nr
        return t

    # ----------------------------------------------------------------- autograd state
    @property
    def requires_grad(self) -> bool:
        """Whether operations on this Tensor are recorded for backward."""
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, flag: bool) -> None:
        if self._grad_fn is not None and self._requires_grad:
            raise RuntimeError(
                "you can only change requires_grad flags of leaf Tensors; use "
                "tensor.detach() to get a leaf"
            )
        if flag and not _is_float(self._value.dtype):
            raise RuntimeError(
                f"Only Tensors of floating point and complex dtype can require gradients, "
                f"got dtype={self._value.dtype}; convert it first, e.g. x.float()"
            )
        self._requires_grad = bool(flag)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Set ``requires_grad`` on this leaf in place; returns ``self``."""
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self) -> Tensor | None:
        """The gradient accumulated by local ``backward()`` calls (``None`` before any)."""
        return self._grad

    @grad.setter
    def grad(self, value: Any) -> None:
        if value is not None and not isinstance(value, Tensor):
            value = Tensor(value)
        if value is not None and tuple(value.shape) != self.shape:
            raise RuntimeError(
                f"assigned grad has shape {tuple(value.shape)} but the Tensor has shape "
                f"{self.shape}"
            )
        self._grad = value

    @property
    def grad_fn(self) -> Node | None:
        """The node that produced this Tensor (``None`` for leaves)."""
        return self._grad_fn if self._requires_grad else None

    @property
    def output_nr(self) -> int:
        """Which output of ``grad_fn`` this Tensor is."""
        return self._output_nr

    @property
    def is_leaf(self) -> bool:
        """True for Tensors not produced by a recorded operation."""
        return self._grad_fn is None or not self._requires_grad

    def _gradient_edge(self) -> GradientEdge:
        """Where gradients for this Tensor go: its producer's output, or its leaf sink."""
        if self._grad_fn is not None:
            return GradientEdge(self._grad_fn, self._output_nr)
        acc = self._accumulator() if self._accumulator is not None else None
        if acc is None:
            acc = AccumulateGrad(self)
            self._accumulator = weakref.ref(acc)
        return GradientEdge(acc, 0)

    def backward(
        self,
        gradient: Any = None,
        retain_graph: bool | None = None,
        create_graph: bool = False,
        inputs: Any = None,
    ) -> None:
        """Accumulate d(self)/d(leaf) into every grad-requiring leaf's ``.grad``.

        Args:
            gradient: the cotangent of ``self``; may be omitted for one-element Tensors.
            retain_graph: keep the graph's saved values for another backward (default:
                ``create_graph``).
            create_graph: record the backward, so each ``.grad`` is on the tape and can
                be differentiated again (a gradient penalty, a Hessian-vector product).
            inputs: accumulate only into these Tensors (see ``autograd.backward``).

        Raises:
            RuntimeError: ``self`` does not require grad, or is not scalar and no
                ``gradient`` was given, or the graph was already freed.

        Example:
            >>> import tensorplay_jax as tp
            >>> x = tp.tensor([1.0, 2.0], requires_grad=True)
            >>> (x**3).sum().backward(create_graph=True)
            >>> x.grad  # 3 x**2, on the tape
            tensor([ 3., 12.], grad_fn=<PowBackwardBackward>)
        """
        if inputs is None and not create_graph:
            run_backward([self], [gradient], retain_graph=bool(retain_graph))
            return
        _autograd_backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    def detach(self) -> Tensor:
        """A new leaf sharing this value, cut from the graph.

        As in torch it shares the data: an in-place write to either one shows in
        the other (no gradient crosses).
        """
        return _views.detached_view(self)

    def detach_(self) -> Tensor:
        """Cut this Tensor from the graph in place; returns ``self``."""
        self._grad_fn = None
        self._output_nr = 0
        self._requires_grad = False
        return self

    # ----------------------------------------------------------------- value access
    @property
    def value(self) -> jax.Array:
        """The underlying ``jax.Array`` (no gradient flows through it)."""
        v = self._value
        if type(v) is np.ndarray:  # arrived over RPC: placed on the device on first use
            v = self._value = to_device(v)
        return v

    @property
    def data(self) -> Tensor:
        """A detached Tensor sharing this value (in-place writes to it reach ``self``).

        Assigning replaces the value without recording (views made before keep
        the old value, as torch's do).
        """
        return _views.detached_view(self)

    @data.setter
    def data(self, value: Any) -> None:
        materialize(self)  # a pending value must not land over the one written here
        self._value = value._value if isinstance(value, Tensor) else jnp.asarray(value)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape, a tuple of ints."""
        return tuple(self._aval().shape)

    @property
    def dtype(self) -> np.dtype:
        """The element type (a NumPy dtype, as in JAX)."""
        return self._aval().dtype

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._aval().shape)

    @property
    def device(self) -> Any:
        """The JAX device holding the value (``None`` inside a JAX trace)."""
        devices = getattr(self.value, "devices", None)
        if devices is None or isinstance(self._value, jax.core.Tracer):
            return None
        return next(iter(devices()))

    def dim(self) -> int:
        """Number of dimensions."""
        return self._value.ndim

    def size(self, dim: int | None = None) -> Any:
        """The shape, or the length of dimension ``dim``."""
        return self.shape if dim is None else self.shape[dim]

    def numel(self) -> int:
        """Number of elements."""
        return int(self._value.size)

    def data_ptr(self) -> int:
        """The address of the value's buffer (torch's ``data_ptr``): equal for Tensors over
        one array."""
        return int(self.value.unsafe_buffer_pointer())

    def numpy(self) -> np.ndarray:
        """The value as a NumPy array (read-only view where possible; no gradient)."""
        return np.asarray(self._value)

    def item(self) -> Any:
        """The single element as a Python scalar."""
        if self._value.size != 1:
            raise RuntimeError(
                f"a Tensor with {self._value.size} elements cannot be converted to a Python "
                "scalar; item() needs exactly one element"
            )
        return self._value.item()

    def tolist(self) -> Any:
        """The value as (nested) Python lists."""
        return np.asarray(self._value).tolist()

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        if self._requires_grad and is_grad_enabled():
            raise TypeError(f"np.asarray(tensor): {_RAW_JNP_MSG}")
        arr = np.asarray(self._value)
        return arr.astype(dtype) if dtype is not None else arr

    def __jax_array__(self) -> jax.Array:
        # jax.Array binary operators call this on the other operand; deferring lets
        # Python fall back to Tensor.__radd__ etc., which records the operation.
        caller = sys._getframe(1)
        if caller.f_code.co_name.startswith("_operator_") and caller.f_globals.get(
            "__name__", ""
        ).startswith("jax."):
            return NotImplemented
        if self._requires_grad and is_grad_enabled():
            raise TypeError(_RAW_JNP_MSG)
        return self.value

    def __repr__(self) -> str:
        v = self._value
        if isinstance(v, jax.core.Tracer):
            body = f"Traced<{v.aval.str_short()}>"
        else:
            body = np.array2string(
                np.asarray(v), separator=", ", prefix="tensor(", threshold=100, precision=4
            )
        extras = []
        if v.size == 0 and v.shape != (0,):  # no elements to show the shape by
            extras.append(f"size={tuple(v.shape)}")
        if v.dtype not in _DEFAULT_DTYPES or (v.size == 0 and v.dtype != np.float32):
            extras.append(f"dtype={v.dtype}")  # no elements to show an int or bool dtype by
        if self._grad_fn is not None:
            extras.append(f"grad_fn=<{self._grad_fn.name}>")
        elif self._requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + ", ".join([body, *extras]) + ")"

    def __len__(self) -> int:
        if self._value.ndim == 0:
            raise TypeError("len() of a 0-d Tensor")
        return self._value.shape[0]

    def __bool__(self) -> bool:
        if self._value.size != 1:
            raise RuntimeError(
                f"Boolean value of a Tensor with {self._value.size} elements is ambiguous; "
                "use .any() or .all()"
            )
        return bool(self._value)

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if _is_float(self._value.dtype) or self._value.size != 1:
            raise TypeError("only integer one-element Tensors can be converted to an index")
        return int(self.item())

    __hash__ = object.__hash__

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle/deepcopy as a leaf: the value (as NumPy) and the flag; the graph stays behind.
        return (_rebuild, (type(self), np.asarray(self._value), self._requires_grad))

    # ----------------------------------------------------------------- trivial methods
    # Operators and the math, reduction and shape methods come from the table in
    # ``_methods`` (attached when ``tensorplay_jax.tensors`` is imported).
    def __pos__(self) -> Tensor:
        return self

    def contiguous(self) -> Tensor:
        """``self`` (JAX arrays have no strides)."""
        return self


def _rebuild(cls: type[Tensor], value: np.ndarray, requires_grad: bool) -> Tensor:
    t = cls.__new__(cls)
    Tensor.__init__(t, from_host(value), requires_grad=requires_grad)
    return t
