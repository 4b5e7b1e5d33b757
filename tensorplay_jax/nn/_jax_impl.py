"""Pure JAX math behind ``nn.functional``: layers and losses over plain arrays (jit/grad friendly).

Each function here is what ``tp.apply`` lifts into ONE tape node; layouts and
conventions are tensorplay's (NCHW images, OIHW kernels, ``(out, in)`` linear
weights, class dimension 1, ``ignore_index`` targets excluded from the mean).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

_REDUCTIONS = ("none", "mean", "sum")


def check_reduction(fn: str, reduction: str) -> None:
    """Raise a clear ValueError for an unknown ``reduction``."""
    if reduction not in _REDUCTIONS:
        raise ValueError(
            f"{fn}: reduction={reduction!r} is not valid; expected one of {_REDUCTIONS}"
        )


def _reduce(losses: jax.Array, reduction: str) -> jax.Array:
    if reduction == "mean":
        return jnp.mean(losses)
    if reduction == "sum":
        return jnp.sum(losses)
    return losses


def linear(x: jax.Array, weight: jax.Array, bias: jax.Array | None) -> jax.Array:
    """``x @ weight.T + bias``."""
    y = x @ weight.T
    return y if bias is None else y + bias


def linear_pullback(
    mask: tuple[bool, ...], x: jax.Array, weight: jax.Array, bias: jax.Array | None, ct: jax.Array
) -> tuple[jax.Array, ...]:
    """``linear``'s gradients for the operands ``mask`` selects, from the operands themselves.

    For a 2-D ``weight`` and a ``bias`` of ``(out_features,)`` or ``None``. The
    weight's gradient is ``ct.T @ x`` with ``ct.T`` laid out first, a plain
    row-major operand for XLA's CPU dot (no slower than contracting both
    operands' leading axis, and faster for small batches; docs/benchmarks.md).
    """
    ct2 = ct.reshape(-1, ct.shape[-1])
    grads = []
    if mask[0]:
        grads.append((ct @ weight).astype(x.dtype))
    if mask[1]:
        ct_t = jax.lax.optimization_barrier(ct2.T)
        grads.append((ct_t @ x.reshape(-1, x.shape[-1])).astype(weight.dtype))
    if len(mask) > 2 and mask[2]:
        assert bias is not None
        grads.append(ct2.sum(axis=0).astype(bias.dtype))
    return tuple(grads)


def embedding(indices: jax.Array, weight: jax.Array, padding_idx: int | None) -> jax.Array:
    """Rows of ``weight``; the ``padding_idx`` row gets no gradient."""
    out = jnp.take(weight, indices, axis=0)
    if padding_idx is not None:
        pad = (indices == padding_idx)[..., None]
        out = jnp.where(pad, jax.lax.stop_gradient(out), out)
    return out


def conv2d(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None,
    stride: tuple[int, int],
    padding: tuple[tuple[int, int], tuple[int, int]],
    dilation: tuple[int, int],
    groups: int,
) -> jax.Array:
    """2-D cross-correlation, NCHW input, OIHW weight (unbatched CHW input accepted)."""
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    y = jax.lax.conv_general_dilated(
        x,
        weight,
        window_strides=stride,
        padding=padding,
        rhs_dilation=dilation,
        dimension_numbers=("NCHW", "OIHW", "NCHW"),
        feature_group_count=groups,
    )
    if bias is not None:
        y = y + bias[None, :, None, None]
    return y[0] if unbatched else y


def layer_norm(
    x: jax.Array,
    weight: jax.Array | None,
    bias: jax.Array | None,
    ndims: int,
    eps: float,
) -> jax.Array:
    """Normalise over the last ``ndims`` dimensions (biased variance), then scale and shift."""
    axes = tuple(range(x.ndim - ndims, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


def dropout(x: jax.Array, key: jax.Array, p: float) -> jax.Array:
    """Zero each element with probability ``p``, scale the rest by ``1 / (1 - p)``."""
    if p >= 1.0:
        return jnp.zeros_like(x)
    keep = jax.random.bernoulli(key, 1.0 - p, x.shape)
    return jnp.where(keep, x / (1.0 - p), jnp.zeros((), x.dtype))


def dropout2d(x: jax.Array, key: jax.Array, p: float) -> jax.Array:
    """Zero whole channels (axis 1 of ``(N, C, ...)``) with probability ``p``, scale the rest."""
    if p >= 1.0:
        return jnp.zeros_like(x)
    keep = jax.random.bernoulli(key, 1.0 - p, x.shape[:2] + (1,) * (x.ndim - 2))
    return jnp.where(keep, x / (1.0 - p), jnp.zeros((), x.dtype))


def max_pool2d(
    x: jax.Array, kernel: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int]
) -> jax.Array:
    """The maximum over each ``kernel`` window of the last two axes (padding: -inf)."""
    window = (1,) * (x.ndim - 2) + kernel
    strides = (1,) * (x.ndim - 2) + stride
    pads = ((0, 0),) * (x.ndim - 2) + tuple((q, q) for q in padding)
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, window, strides, pads)


def mse_loss(input: jax.Array, target: jax.Array, reduction: str) -> jax.Array:
    """Squared error, reduced."""
    return _reduce(jnp.square(input - target), reduction)


def magnitude(x: jax.Array) -> jax.Array:
    """``|x|`` with torch's gradient ``sign(x)``, 0 at 0 (``jnp.abs``'s is 1 there)."""
    return x * jnp.sign(x)


def l1_loss(input: jax.Array, target: jax.Array, reduction: str) -> jax.Array:
    """Absolute error, reduced (gradient ``sign(input - target)``, 0 where equal)."""
    return _reduce(magnitude(input - target), reduction)


def _class_last(x: jax.Array) -> jax.Array:
    return jnp.moveaxis(x, 1, -1)


def nll_loss(
    input: jax.Array,
    target: jax.Array,
    weight: jax.Array | None,
    ignore_index: int,
    reduction: str,
) -> jax.Array:
    """Negative log-likelihood of class indices ``target`` under log-probabilities ``input``."""
    unbatched = input.ndim == 1
    if unbatched:
        input, target = input[None], target[None]
    logp = _class_last(input)  # (N, ..., C)
    n_classes = logp.shape[-1]
    cw = jnp.ones((n_classes,), logp.dtype) if weight is None else weight.astype(logp.dtype)
    nll, w_t = _picked(logp, target, cw, ignore_index)
    return _weighted(nll, w_t, reduction, unbatched)


def _picked(
    logp: jax.Array, target: jax.Array, cw: jax.Array, ignore_index: int
) -> tuple[jax.Array, jax.Array]:
    """``-w[t] * logp[t]`` per position and the weights ``w[t]`` (zero where ignored)."""
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0)
    w_t = jnp.where(valid, cw[safe], 0)
    return -jnp.take_along_axis(logp, safe[..., None], axis=-1)[..., 0] * w_t, w_t


def _weighted(losses: jax.Array, w_t: jax.Array, reduction: str, unbatched: bool) -> jax.Array:
    """Reduce per-position losses; ``mean`` divides by the total weight, as tensorplay does."""
    if reduction == "mean":
        return jnp.sum(losses) / jnp.sum(w_t)
    if reduction == "sum":
        return jnp.sum(losses)
    return losses[0] if unbatched else losses


def cross_entropy(
    input: jax.Array,
    target: jax.Array,
    weight: jax.Array | None,
    ignore_index: int,
    reduction: str,
    label_smoothing: float,
) -> jax.Array:
    """Softmax cross-entropy with class-index or class-probability targets (tensorplay rules)."""
    unbatched = input.ndim == 1
    if unbatched:
        input, target = input[None], target[None]
    logp = _class_last(jax.nn.log_softmax(input, axis=1))  # (N, ..., C)
    n_classes = logp.shape[-1]
    cw = jnp.ones((n_classes,), logp.dtype) if weight is None else weight.astype(logp.dtype)
    if jnp.issubdtype(target.dtype, jnp.floating):  # probabilities, same shape as input
        probs = _class_last(target)
        if label_smoothing > 0:
            probs = probs * (1 - label_smoothing) + label_smoothing / n_classes
        losses = -jnp.sum(logp * probs * cw, axis=-1)
        out = _reduce(losses, reduction)
        return out[0] if unbatched and reduction == "none" else out
    nll, w_t = _picked(logp, target, cw, ignore_index)
    if label_smoothing > 0:
        smooth = -jnp.sum(logp * cw, axis=-1) / n_classes
        smooth = jnp.where(target != ignore_index, smooth, 0)
        return _weighted(
            (1 - label_smoothing) * nll + label_smoothing * smooth, w_t, reduction, unbatched
        )
    return _weighted(nll, w_t, reduction, unbatched)


def batch_norm(
    x: jax.Array,
    running_mean: jax.Array | None,
    running_var: jax.Array | None,
    weight: jax.Array | None,
    bias: jax.Array | None,
    batch_stats: bool,
    momentum: jax.Array,
    eps: float,
) -> tuple[jax.Array, jax.Array | None, jax.Array | None]:
    """Normalise each channel (axis 1); returns the output and the updated running stats.

    With ``batch_stats`` the batch's mean and biased variance normalise, and
    the running stats (when given) move towards the batch mean and the
    unbiased variance by ``momentum``; else the running stats normalise and
    come back unchanged.
    """
    axes = (0, *range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if batch_stats:
        mean = jnp.mean(x, axis=axes)
        var = jnp.mean(jnp.square(x - mean.reshape(shape)), axis=axes)
        if running_mean is not None and running_var is not None:
            n = x.size // x.shape[1]
            m = momentum.astype(x.dtype)
            unbiased = jax.lax.stop_gradient(var) * (n / max(n - 1, 1))
            running_mean = (1 - m) * running_mean + m * jax.lax.stop_gradient(mean)
            running_var = (1 - m) * running_var + m * unbiased
    else:
        mean, var = running_mean, running_var
    y = (x - mean.reshape(shape)) * jax.lax.rsqrt(var.reshape(shape) + eps)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y, running_mean, running_var


def _bins(size: int, out: int) -> np.ndarray:
    """The (out, size) averaging matrix of adaptive pooling: row i averages [floor(i*size/out),
    ceil((i+1)*size/out)), torch's bins."""
    m = np.zeros((out, size), np.float32)
    for i in range(out):
        lo, hi = (i * size) // out, -((-(i + 1) * size) // out)
        m[i, lo:hi] = 1.0 / (hi - lo)
    return m


def adaptive_avg_pool2d(x: jax.Array, output_size: tuple[int, int]) -> jax.Array:
    """The mean over each of ``output_size`` adaptive bins of the last two axes."""
    ph = jnp.asarray(_bins(x.shape[-2], output_size[0]), x.dtype)
    pw = jnp.asarray(_bins(x.shape[-1], output_size[1]), x.dtype)
    return jnp.einsum("ih,...hw,jw->...ij", ph, x, pw, precision=jax.lax.Precision.HIGHEST)


def one_hot(x: jax.Array, num_classes: int) -> jax.Array:
    """One row of ``num_classes`` per integer of ``x``, a one at its value."""
    return jax.nn.one_hot(x, num_classes, dtype=jax.dtypes.canonicalize_dtype(jnp.int64))


def pad(x: jax.Array, widths: tuple[tuple[int, int], ...], mode: str, value: float) -> jax.Array:
    """``jnp.pad`` with NumPy's mode names (``value`` for ``"constant"``)."""
    if mode == "constant":
        return jnp.pad(x, widths, mode="constant", constant_values=jnp.asarray(value, x.dtype))
    return jnp.pad(x, widths, mode=mode)


def group_norm(
    x: jax.Array, groups: int, weight: jax.Array | None, bias: jax.Array | None, eps: float
) -> jax.Array:
    """Normalise each group of channels of each sample (biased variance), then scale and
    shift each channel."""
    n, c = x.shape[0], x.shape[1]
    g = x.reshape(n, groups, -1)
    mean = jnp.mean(g, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(g - mean), axis=-1, keepdims=True)
    y = ((g - mean) * jax.lax.rsqrt(var + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(shape)
    if bias is not None:
        y = y + bias.reshape(shape)
    return y


def avg_pool2d(
    x: jax.Array,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    count_include_pad: bool,
    divisor: int | None,
) -> jax.Array:
    """The mean over each ``kernel`` window of the last two axes (zero padding; without
    ``count_include_pad`` the padded places are not counted)."""
    window = (1,) * (x.ndim - 2) + kernel
    strides = (1,) * (x.ndim - 2) + stride
    pads = ((0, 0),) * (x.ndim - 2) + tuple((q, q) for q in padding)
    total = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, strides, pads)  # a window sum
    if divisor is not None:
        return total / divisor
    if count_include_pad:
        return total / (kernel[0] * kernel[1])
    ones = jnp.ones(x.shape[-2:], x.dtype)
    counts = jax.lax.reduce_window(
        ones, 0.0, jax.lax.add, kernel, stride, tuple((q, q) for q in padding)
    )
    return total / counts


def conv1d(
    x: jax.Array,
    weight: jax.Array,
    bias: jax.Array | None,
    stride: int,
    padding: tuple[int, int],
    dilation: int,
    groups: int,
) -> jax.Array:
    """1-D cross-correlation, NCL input, OIK weight (unbatched CL accepted): ``conv2d`` of a
    height-1 image."""
    y = conv2d(
        x[..., None, :],
        weight[..., None, :],
        bias,
        (1, stride),
        ((0, 0), padding),
        (1, dilation),
        groups,
    )
    return y[..., 0, :]
