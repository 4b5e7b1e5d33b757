"""Tensor factories: tensor, from_numpy, randn, rand, randint, randperm, ones, zeros, eye...

Sizes are given as ``f(2, 3)`` or ``f((2, 3))``. Floating results default to
float32 (tensorplay's default dtype); random draws come from ``manual_seed``'s
state, or from a ``tp.Generator`` passed as ``generator=``. ``requires_grad=True``
makes a leaf that collects gradients.
``device=`` places the result (``"cpu"``, ``"cuda:1"``, ``"tpu"``, a
``jax.Device``; None: JAX's default device; ``*_like``: ``input``'s device);
a device that is not here raises an error naming those that are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.runtime.x64 import check_dtype
from tensorplay_jax.tensors import _random
from tensorplay_jax.tensors._device import place
from tensorplay_jax.tensors._generator import Generator, key_for
from tensorplay_jax.tensors._host import from_host
from tensorplay_jax.tensors._tensor import Tensor

DEFAULT_FLOAT = jnp.float32
# Fills of up to this many elements are made on the host and transferred: XLA would
# compile a broadcast program per shape and dtype, which costs more than the copy.
HOST_FILL_MAX = 1 << 16


def _size(fn: str, size: Sequence[Any]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], list | tuple):
        size = size[0]
    try:
        return tuple(int(s) for s in size)
    except (TypeError, ValueError):
        raise TypeError(f"tp.{fn}: size must be ints, e.g. tp.{fn}(2, 3), got {size!r}") from None


def _leaf(value: jax.Array, requires_grad: bool, device: Any = None, fn: str = "") -> Tensor:
    return Tensor(place(value, device, f"tp.{fn}"), requires_grad=requires_grad)


def _filled(shape: tuple[int, ...], value: bool | float, dtype: Any) -> jax.Array:
    """``jnp.full(shape, value, dtype)``, made on the host when small (no program to compile)."""
    check_dtype(dtype, "tp.full")
    dtype = jax.dtypes.canonicalize_dtype(dtype)
    if math.prod(shape) <= HOST_FILL_MAX:
        return jax.device_put(np.full(shape, value, dtype))
    return jnp.full(shape, value, dtype)


def _device_of(input: Tensor) -> Any:
    """``input``'s device when its value is committed to one (the ``*_like`` default)."""
    v = input._value
    if isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer) and v.committed:
        return input.device
    return None


def _float_dtype(fn: str, dtype: Any) -> Any:
    check_dtype(dtype, f"tp.{fn}")
    dtype = jnp.dtype(dtype if dtype is not None else DEFAULT_FLOAT)
    if not jnp.issubdtype(dtype, jnp.inexact):
        raise TypeError(f"tp.{fn}: dtype must be a floating type, got {dtype}")
    return dtype


def tensor(
    data: Any, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A new leaf Tensor holding (a copy of) ``data``.

    Python floats become float32 and Python ints the default JAX int type;
    arrays keep their dtype unless ``dtype`` is given.

    Args:
        data: nested lists, a scalar, a NumPy/JAX array or a Tensor (copied, detached).
        dtype: the element type, e.g. ``jnp.float64`` (needs ``jax_enable_x64``).
        device: where to place it: ``"cpu"``, ``"cuda:1"``, ``"tpu"``, a ``jax.Device``
            (None: JAX's default device), as for every factory here.
        requires_grad: make the leaf collect gradients (floating dtypes only).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.tensor([[1.0, 2.0]], requires_grad=True)
        tensor([[1., 2.]], requires_grad=True)
    """
    if isinstance(data, Tensor):
        data = data.value
    if isinstance(data, jax.Array):
        check_dtype(dtype, "tp.tensor")
        value = jnp.array(data, dtype=dtype)
    elif isinstance(data, np.ndarray | np.generic):
        value = from_host(data, dtype)
    else:
        arr = np.asarray(data)
        if dtype is None and arr.dtype == np.float64:
            dtype = DEFAULT_FLOAT
        value = from_host(arr, dtype, copy=False)  # arr is new
    return _leaf(value, requires_grad, device, "tensor")


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A Tensor with the values and dtype of the NumPy array ``ndarray``.

    tensorplay's ``from_numpy`` shares the array's memory; a JAX array is immutable,
    so here the values are copied: later writes to ``ndarray`` do not reach the
    Tensor, and the Tensor's in-place methods do not write into ``ndarray``. The
    dtype is kept where JAX has it (64-bit types need ``jax_enable_x64``; without
    it JAX holds them in 32 bits, as ``tp.tensor`` does).

    Raises:
        TypeError: ``ndarray`` is not a ``numpy.ndarray``, or holds Python objects.

    Example:
        >>> import numpy as np
        >>> import tensorplay_jax as tp
        >>> a = np.array([[1, 2], [3, 4]], dtype=np.int32)
        >>> t = tp.from_numpy(a)
        >>> t.dtype, t.tolist()
        (dtype('int32'), [[1, 2], [3, 4]])
    """
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"tp.from_numpy: expected np.ndarray (got {type(ndarray).__qualname__})")
    if ndarray.dtype == object:
        raise TypeError(
            "tp.from_numpy: can't convert an np.ndarray of type numpy.object_; "
            "the supported types are the numeric ones and bool"
        )
    return _leaf(from_host(ndarray, what="tp.from_numpy"), False, None, "from_numpy")


def _sampler(fn: str, dist: str, doc: str) -> Callable[..., Tensor]:
    """The factory ``tp.{fn}``: float samples of ``dist`` (a ``_random.draw`` name), from
    ``manual_seed``'s state or ``generator``; its docstring is ``doc``."""

    def sample(
        *size: Any,
        generator: Generator | None = None,
        dtype: Any = None,
        device: Any = None,
        requires_grad: bool = False,
    ) -> Tensor:
        value = _random.draw(dist, key_for(generator, fn), _size(fn, size), _float_dtype(fn, dtype))
        return _leaf(value, requires_grad, device, fn)

    sample.__name__ = sample.__qualname__ = fn
    sample.__doc__ = doc
    return sample


randn = _sampler(
    "randn",
    "normal",
    """Samples of the standard normal distribution, from ``manual_seed``'s state (or ``generator``).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.manual_seed(0)
        >>> tp.randn(2, 3).shape
        (2, 3)
    """,
)

rand = _sampler(
    "rand",
    "uniform",
    """Samples of the uniform distribution on ``[0, 1)``, from ``manual_seed``'s state (or
    ``generator``).""",
)


def randint(
    low: int,
    high: int,
    size: Sequence[int],
    *,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
) -> Tensor:
    """Integers drawn uniformly from ``[low, high)``."""
    value = _random.integers(
        key_for(generator, "randint"),
        _size("randint", (size,)),
        low,
        high,
        dtype or jax.dtypes.canonicalize_dtype(jnp.int64),
    )
    return _leaf(value, False, device, "randint")


def randperm(
    n: int,
    *,
    generator: Generator | None = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """A random permutation of ``0 .. n-1`` (int64 unless ``dtype``).

    Example:
        >>> import tensorplay_jax as tp
        >>> sorted(tp.randperm(4, generator=tp.Generator().manual_seed(0)).tolist())
        [0, 1, 2, 3]
    """
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise ValueError(f"tp.randperm: n must be a non-negative int, got {n!r}")
    perm = jax.random.permutation(key_for(generator, "randperm"), int(n))
    value = perm.astype(dtype or jax.dtypes.canonicalize_dtype(jnp.int64))
    return _leaf(value, requires_grad, device, "randperm")


def ones(
    *sizes: Any,
    size: Any = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """A Tensor of ones (float32 unless ``dtype``).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.ones(2)
        tensor([1., 1.])
    """
    value = _filled(_size("ones", sizes or (size,)), 1, dtype or DEFAULT_FLOAT)
    return _leaf(value, requires_grad, device, "ones")


def zeros(
    *sizes: Any,
    size: Any = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """A Tensor of zeros (float32 unless ``dtype``).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.zeros(2, device="cpu")
        tensor([0., 0.])
    """
    value = _filled(_size("zeros", sizes or (size,)), 0, dtype or DEFAULT_FLOAT)
    return _leaf(value, requires_grad, device, "zeros")


def empty(
    *sizes: Any,
    size: Any = None,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """A Tensor to be overwritten (float32 unless ``dtype``); JAX has no uninitialised memory,
    so it holds zeros.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.empty(2, 3).shape
        (2, 3)
    """
    value = _filled(_size("empty", sizes or (size,)), 0, dtype or DEFAULT_FLOAT)
    return _leaf(value, requires_grad, device, "empty")


def full(
    size: Sequence[int],
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """A Tensor of ``size`` filled with ``fill_value``."""
    if dtype is None and isinstance(fill_value, float):
        dtype = DEFAULT_FLOAT
    shape = _size("full", (size,))
    if dtype is not None and isinstance(fill_value, bool | int | float):
        value = _filled(shape, fill_value, dtype)
    else:
        check_dtype(dtype, "tp.full")
        value = jnp.full(shape, fill_value, dtype)
    return _leaf(value, requires_grad, device, "full")


def arange(
    start: Any,
    end: Any = None,
    step: Any = 1,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """Values from ``start`` (default 0) up to ``end`` (exclusive) by ``step``.

    Integer arguments give an integer Tensor, any float argument a float32 one.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.arange(4)
        tensor([0, 1, 2, 3])
        >>> tp.arange(0, 1, 0.5)
        tensor([0. , 0.5])
    """
    if end is None:
        start, end = 0, start
    if dtype is None and any(isinstance(v, float) for v in (start, end, step)):
        dtype = DEFAULT_FLOAT
    check_dtype(dtype, "tp.arange")
    return _leaf(jnp.arange(start, end, step, dtype=dtype), requires_grad, device, "arange")


def eye(
    n: int,
    m: int | None = None,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """The ``n`` x ``m`` identity matrix."""
    check_dtype(dtype, "tp.eye")
    return _leaf(jnp.eye(n, m, dtype=dtype or DEFAULT_FLOAT), requires_grad, device, "eye")


def _like(fn: str, input: Tensor, value: jax.Array, device: Any, requires_grad: bool) -> Tensor:
    """A ``*_like`` result: ``value`` as a leaf on ``device``, by default ``input``'s."""
    return _leaf(value, requires_grad, device if device is not None else _device_of(input), fn)


def zeros_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """Zeros with ``input``'s shape (and dtype unless given)."""
    value = _filled(tuple(input.shape), 0, dtype or input.dtype)
    return _like("zeros_like", input, value, device, requires_grad)


def ones_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """Ones with ``input``'s shape (and dtype unless given)."""
    value = _filled(tuple(input.shape), 1, dtype or input.dtype)
    return _like("ones_like", input, value, device, requires_grad)


def randn_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """Standard normal samples with ``input``'s shape (and float dtype unless given)."""
    dtype = _float_dtype("randn_like", dtype or input.dtype)
    value = _random.draw("normal", _random.next_key(), input.shape, dtype)
    return _like("randn_like", input, value, device, requires_grad)


def full_like(
    input: Tensor,
    fill_value: Any,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """``fill_value`` in ``input``'s shape (and dtype unless given)."""
    value = _filled(tuple(input.shape), fill_value, dtype or input.dtype)
    return _like("full_like", input, value, device, requires_grad)


def empty_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """A Tensor of ``input``'s shape to be overwritten; zeros (JAX has no uninitialised
    memory)."""
    value = _filled(tuple(input.shape), 0, dtype or input.dtype)
    return _like("empty_like", input, value, device, requires_grad)


def rand_like(
    input: Tensor, *, dtype: Any = None, device: Any = None, requires_grad: bool = False
) -> Tensor:
    """Uniform samples on ``[0, 1)`` with ``input``'s shape (and float dtype unless given)."""
    dtype = _float_dtype("rand_like", dtype or input.dtype)
    value = _random.draw("uniform", _random.next_key(), input.shape, dtype)
    return _like("rand_like", input, value, device, requires_grad)


def randint_like(
    input: Tensor, low: int = 0, high: int | None = None, *, dtype: Any = None, device: Any = None
) -> Tensor:
    """Integers uniform on ``[low, high)`` with ``input``'s shape (``randint_like(x, high)``
    or ``(x, low, high)``), in ``input``'s dtype unless given."""
    if high is None:
        low, high = 0, low
    value = _random.integers(
        _random.next_key(), tuple(input.shape), int(low), int(high), dtype or input.dtype
    )
    return _like("randint_like", input, value, device, False)


def linspace(
    start: Any,
    end: Any,
    steps: int,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """``steps`` evenly spaced values from ``start`` to ``end``, both included.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.linspace(0, 1, steps=5)
        tensor([0.  , 0.25, 0.5 , 0.75, 1.  ])
    """
    if int(steps) < 0:
        raise RuntimeError(f"linspace: number of steps must be non-negative, got {steps}")
    check_dtype(dtype, "tp.linspace")
    values = np.linspace(float(start), float(end), int(steps))
    value = from_host(values, jnp.dtype(dtype or DEFAULT_FLOAT))
    return _leaf(value, requires_grad, device, "linspace")


def logspace(
    start: Any,
    end: Any,
    steps: int,
    base: float = 10.0,
    *,
    dtype: Any = None,
    device: Any = None,
    requires_grad: bool = False,
) -> Tensor:
    """``steps`` values from ``base ** start`` to ``base ** end``, evenly spaced in the
    exponent."""
    if int(steps) < 0:
        raise RuntimeError(f"logspace: number of steps must be non-negative, got {steps}")
    check_dtype(dtype, "tp.logspace")
    values = np.logspace(float(start), float(end), int(steps), base=float(base))
    value = from_host(values, jnp.dtype(dtype or DEFAULT_FLOAT))
    return _leaf(value, requires_grad, device, "logspace")


def as_tensor(data: Any, dtype: Any = None, device: Any = None) -> Tensor:
    """``data`` as a Tensor: a Tensor of that dtype and device is returned as it is (with its
    graph, as torch's ``as_tensor``); anything else as ``tp.tensor(data, dtype=...)``."""
    if isinstance(data, Tensor):
        if dtype is not None and jnp.dtype(dtype) != data.dtype:
            data = data.to(dtype)
        if device is not None:
            data = data.to(device)
        return data
    return tensor(data, dtype=dtype, device=device)


def _typed_tensor(kind: str, dtype: Any) -> Any:
    def make(data: Any = None, *sizes: int) -> Tensor:
        if isinstance(data, int) and not isinstance(data, bool):
            # sizes: tensorplay's uninitialized Tensor, to be overwritten (``.random_()``,
            # ``% k``); JAX has no uninitialized memory, so it holds zeros, as ``empty``
            return empty(data, *sizes, dtype=dtype)
        return tensor([] if data is None else data, dtype=dtype)

    make.__name__ = make.__qualname__ = kind
    wide = jnp.dtype(dtype) == jnp.float64  # needs JAX's 64-bit mode (runtime.x64)
    skip = "  # doctest: +SKIP" if wide else ""
    point = ".0" if jnp.issubdtype(dtype, jnp.floating) else ""
    make.__doc__ = (
        f"``tp.{kind}(data)``: tensorplay's legacy constructor, ``tp.tensor(data, "
        f"dtype=tp.{dtype.__name__})``; ``tp.{kind}(n, m)`` is ``tp.empty(n, m, "
        f"dtype=tp.{dtype.__name__})`` (zeros: JAX has no uninitialized memory)"
        f"{'; float64 needs JAX 64-bit mode' if wide else ''}.\n\n"
        f"Example:\n  >>> import tensorplay_jax as tp\n  >>> tp.{kind}([1, 2]).tolist(){skip}\n"
        f"  [1{point}, 2{point}]\n"
        f"  >>> tp.{kind}(2, 3).shape{skip}\n  (2, 3)\n"
    )
    return make


LongTensor = _typed_tensor("LongTensor", jnp.int64)
FloatTensor = _typed_tensor("FloatTensor", jnp.float32)
DoubleTensor = _typed_tensor("DoubleTensor", jnp.float64)
