"""In-place Tensor methods (``add_``, ``copy_``, ``normal_``, ``random_``, ``scatter_`` ...).

Each computes its result with the out-of-place operation (one recorded node in
grad mode, with the written Tensor as an input, so the gradient through the old
value is right: zero for ``fill_``/``copy_``/``normal_``, ``2`` for ``mul_(2)``)
and hands it to ``_views.commit``, which rebinds the Tensor and carries the
write to its base and views. torch's rules hold: a leaf that requires grad (or
a view of one) cannot be written in grad mode, and a result of a wider kind
than the Tensor (``int_tensor.add_(0.5)``) is an error, not a silent cast.
``METHODS`` is the table ``_methods.attach_methods`` sets on ``Tensor``, beside
the out-of-place ``masked_fill``, ``scatter``, ``scatter_add``, ``addcmul``,
``addcdiv`` and ``lerp`` defined here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax.autograd import call_op
from tensorplay_jax.tensors import _gathers, _matrix_ops, _ops, _random, _scans_and_sorts, _views
from tensorplay_jax.tensors._generator import Generator, key_for
from tensorplay_jax.tensors._tensor import Tensor


def _cast_back(t: Tensor, result: Tensor, op: str) -> Tensor:
    """``result`` in ``t``'s dtype; torch's error when that would change the kind of number."""
    if result.dtype == t.dtype:
        return result
    if not np.can_cast(result.dtype, t.dtype, casting="same_kind"):
        raise RuntimeError(
            f"{op}: result type {result.dtype} can't be cast to the desired output type "
            f"{t.dtype} of the Tensor written in place; convert it first (x = x.float()) or "
            "use the out-of-place operation"
        )
    return _ops.astype(result, t.dtype)


def _inplace(name: str, fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """The in-place method ``name``: ``self`` becomes ``fn(self, *args, **kwargs)``."""

    def method(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        _views.check_writable(self, name)
        return _views.commit(self, _cast_back(self, fn(self, *args, **kwargs), name))

    method.__name__ = method.__qualname__ = name
    plain = name.rstrip("_")
    method.__doc__ = (
        f"In-place ``{plain}``: ``self`` becomes the result of ``{plain}(self, ...)``; returns "
        "``self`` (recorded, and seen by its base and views)."
    )
    return method


# ------------------------------------------------------------------ fills
def _copy(x: jax.Array, src: jax.Array) -> jax.Array:
    return jnp.broadcast_to(src, x.shape).astype(x.dtype)


def _copy_op(self: Tensor, src: Any, non_blocking: bool = False) -> Tensor:
    if isinstance(src, list | tuple):
        src = np.asarray(src)
    return call_op(_copy, "CopyBackwards", (self, src), saves=False)


def _fill(x: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.full_like(x, value)


def _fill_op(self: Tensor, value: Any) -> Tensor:
    return call_op(_fill, "FillBackward", (self, value), saves=False)


def _zero_op(self: Tensor) -> Tensor:
    return call_op(_fill, "FillBackward", (self, 0), saves=False)


# The samples are drawn flat by ``_random.flat_draw`` (a few compiled draws shared by
# every shape) and shaped here: the values are those of the shaped ``jax.random`` call.
def _normal(x: jax.Array, z: jax.Array, mean: Any, std: Any) -> jax.Array:
    return mean + std * z[: x.size].reshape(x.shape)


def _normal_op(
    self: Tensor, mean: float = 0.0, std: float = 1.0, *, generator: Generator | None = None
) -> Tensor:
    z = _random.flat_draw("normal", key_for(generator, "normal_"), self.numel(), self.dtype)
    return call_op(_normal, "NormalBackward", (self, z, mean, std), saves=False)


def _uniform(x: jax.Array, u: jax.Array) -> jax.Array:
    return u[: x.size].reshape(x.shape)


def _uniform_op(
    self: Tensor, a: float = 0.0, b: float = 1.0, *, generator: Generator | None = None
) -> Tensor:
    # scaled to [a, b) in the compiled draw, by XLA, as jax.random.uniform does
    key = key_for(generator, "uniform_")
    u = _random.flat_draw("uniform", key, self.numel(), self.dtype, a, b)
    return call_op(_uniform, "UniformBackward", (self, u), saves=False)


def _random_bounds(dtype: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, int]:
    """``random_``'s ``[from, to)``: ``(to)``, ``(from, to)`` or keywords ``from``/``to``;
    without ``to``, as far as ``dtype`` holds integers exactly (torch's bounds)."""
    unknown = set(kwargs) - {"from", "to"}
    if len(args) > 2 or unknown:
        raise TypeError(f"random_() takes (to) or (from, to), got {args} and {sorted(unknown)}")
    if len(args) == 2:
        low, high = args
    else:
        low, high = 0, (args[0] if args else None)
    low, high = int(kwargs.get("from", low)), kwargs.get("to", high)
    dt = np.dtype(dtype)
    if dt == np.bool_:
        most = 2
    elif np.issubdtype(dt, np.floating):
        most = 2 ** (np.finfo(dt).nmant + 1) + 1  # every integer up to 2**digits is exact
    else:  # drawn as int32 (or the dtype itself, when wider) below an exclusive bound:
        # the largest value of a 32- or 64-bit dtype is not drawn
        info = np.iinfo(jax.dtypes.canonicalize_dtype(dt))
        most = int(info.max) + (1 if info.bits < 32 else 0)
    high = most if high is None else int(high)
    if low >= high:
        raise RuntimeError(
            f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
        )
    if high > most or (low < 0 and (dt == np.bool_ or np.issubdtype(dt, np.unsignedinteger))):
        raise RuntimeError(f"random_: [{low}, {high}) is out of bounds for {dt}")
    return low, high


def _integers(x: jax.Array, r: jax.Array) -> jax.Array:
    return r.astype(x.dtype)


def _random_op(
    self: Tensor, *args: Any, generator: Generator | None = None, **kwargs: Any
) -> Tensor:
    """``random_(to)`` / ``random_(from, to)``: integers uniform on ``[from, to)``, in
    ``self``'s dtype (torch's bounds when ``to`` is not given)."""
    low, high = _random_bounds(self.dtype, args, kwargs)
    key = key_for(generator, "random_")
    wide = np.issubdtype(self.dtype, np.integer) and np.dtype(self.dtype).itemsize >= 4
    draw = self.dtype if wide else np.int32
    r = _random.integers(key, tuple(self.shape), low, high, draw)
    return call_op(_integers, "RandomBackward", (self, r), saves=False)


# ------------------------------------------------------------------ out-of-place companions
def _masked_fill(x: jax.Array, mask: jax.Array, value: jax.Array) -> jax.Array:
    return jnp.where(mask, jnp.asarray(value, x.dtype), x)


def masked_fill(input: Any, mask: Any, value: Any) -> Tensor:
    """``value`` where ``mask`` is True, ``input`` elsewhere.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.zeros(3).masked_fill(tp.tensor([True, False, True]), 2.0)
        tensor([2., 0., 2.])
    """
    return call_op(_masked_fill, "MaskedFillBackward", (input, mask, value), saves=False)


def _scatter(x: jax.Array, index: jax.Array, src: jax.Array, *, dim: int, add: bool) -> jax.Array:
    grids = list(jnp.meshgrid(*(jnp.arange(n) for n in index.shape), indexing="ij"))
    grids[dim] = index
    if jnp.ndim(src) == 0:
        src = jnp.broadcast_to(jnp.asarray(src, x.dtype), index.shape)
    else:
        src = src[tuple(slice(0, n) for n in index.shape)].astype(x.dtype)
    at = x.at[tuple(grids)]
    return at.add(src) if add else at.set(src)


def _scatter_call(input: Any, dim: int, index: Any, src: Any, add: bool, name: str) -> Tensor:
    ndim = input.ndim
    if not -ndim <= dim < max(ndim, 1):
        raise IndexError(f"{name}: dim={dim} is out of range for a Tensor with {ndim} dimensions")
    static = (("dim", dim % max(ndim, 1)), ("add", add))
    return call_op(_scatter, name, (input, index, src), static, saves=False)


def scatter(input: Any, dim: int, index: Any, src: Any = None, *, value: Any = None) -> Tensor:
    """``input`` with ``out[index[i][j]][j] = src[i][j]`` (for ``dim=0``), as torch's ``scatter``.

    ``src`` may be a Tensor or a scalar (or give ``value=``). A one-hot encoding:
    ``tp.zeros(n, k).scatter_(1, labels.unsqueeze(1), 1.0)``.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.zeros(2, 3).scatter(1, tp.tensor([[2], [0]]), 1.0)
        tensor([[0., 0., 1.],
                [1., 0., 0.]])
    """
    src = value if src is None else src
    return _scatter_call(input, dim, index, src, False, "ScatterBackward")


def scatter_add(input: Any, dim: int, index: Any, src: Any) -> Tensor:
    """``input`` with ``src`` added at ``index`` along ``dim`` (repeated indices add up)."""
    return _scatter_call(input, dim, index, src, True, "ScatterAddBackward")


def addcmul(input: Any, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    """``input + value * tensor1 * tensor2``."""
    return _ops.add(input, _ops.mul(_ops.mul(tensor1, tensor2), value))


def addcdiv(input: Any, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Tensor:
    """``input + value * tensor1 / tensor2``."""
    return _ops.add(input, _ops.mul(_ops.div(tensor1, tensor2), value))


def lerp(input: Any, end: Any, weight: Any) -> Tensor:
    """``input + weight * (end - input)``."""
    return _ops.add(input, _ops.mul(_ops.sub(end, input), weight))


METHODS: dict[str, Any] = {
    "masked_fill": masked_fill,
    "scatter": scatter,
    "scatter_add": scatter_add,
    "addcmul": addcmul,
    "addcdiv": addcdiv,
    "lerp": lerp,
    "copy_": _inplace("copy_", _copy_op),
    "fill_": _inplace("fill_", _fill_op),
    "zero_": _inplace("zero_", _zero_op),
    "normal_": _inplace("normal_", _normal_op),
    "uniform_": _inplace("uniform_", _uniform_op),
    "random_": _inplace("random_", _random_op),
    "masked_fill_": _inplace("masked_fill_", masked_fill),
    "scatter_": _inplace("scatter_", scatter),
    "scatter_add_": _inplace("scatter_add_", scatter_add),
    "addcmul_": _inplace("addcmul_", addcmul),
    "addcdiv_": _inplace("addcdiv_", addcdiv),
    "lerp_": _inplace("lerp_", lerp),
    "add_": _inplace("add_", _ops.add),
    "sub_": _inplace("sub_", _ops.sub),
    "mul_": _inplace("mul_", _ops.mul),
    "div_": _inplace("div_", _ops.div),
    "pow_": _inplace("pow_", _ops.pow),
    "clamp_": _inplace("clamp_", _ops.clamp),
    "clip_": _inplace("clip_", _ops.clamp),
    "neg_": _inplace("neg_", _ops.neg),
    "abs_": _inplace("abs_", _ops.abs),
    "sqrt_": _inplace("sqrt_", _ops.sqrt),
    "exp_": _inplace("exp_", _ops.exp),
    "log_": _inplace("log_", _ops.log),
    "tanh_": _inplace("tanh_", _ops.tanh),
    "sigmoid_": _inplace("sigmoid_", _ops.sigmoid),
    "relu_": _inplace("relu_", _ops.relu),
    "floor_": _inplace("floor_", _ops.floor),
    "ceil_": _inplace("ceil_", _ops.ceil),
    "trunc_": _inplace("trunc_", _ops.trunc),
    "round_": _inplace("round_", _ops.round),
    "sign_": _inplace("sign_", _ops.sign),
    "reciprocal_": _inplace("reciprocal_", _ops.reciprocal),
    "rsqrt_": _inplace("rsqrt_", _ops.rsqrt),
    "log1p_": _inplace("log1p_", _ops.log1p),
    "expm1_": _inplace("expm1_", _ops.expm1),
    "square_": _inplace("square_", _ops.square),
    "fmod_": _inplace("fmod_", _ops.fmod),
    "remainder_": _inplace("remainder_", _ops.remainder),
    "floor_divide_": _inplace("floor_divide_", _ops.floor_divide),
    "nan_to_num_": _inplace("nan_to_num_", _ops.nan_to_num),
    "cumsum_": _inplace("cumsum_", _scans_and_sorts.cumsum),
    "index_add_": _inplace("index_add_", _gathers.index_add),
    "tril_": _inplace("tril_", _matrix_ops.tril),
    "triu_": _inplace("triu_", _matrix_ops.triu),
}
# Augmented assignment is the named in-place method, as tensorplay's: ``p -= lr * p.grad``
# updates the parameter a model holds (without these Python rebinds ``p`` to a new Tensor).
METHODS |= {
    f"__i{op}__": METHODS[f"{name}_"]
    for op, name in (
        ("add", "add"),
        ("sub", "sub"),
        ("mul", "mul"),
        ("truediv", "div"),
        ("floordiv", "floor_divide"),
        ("mod", "remainder"),
        ("pow", "pow"),
    )
}
