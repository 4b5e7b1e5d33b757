"""``tensorplay_jax.nn.functional``: layers, activations and losses on Tensors, each ONE tape node.

Every function lifts the pure JAX code of ``_jax_impl`` with ``tp.apply``, so
its forward and VJP are compiled once per shape and reused. Arguments follow
tensorplay (``input`` first, ``reduction="mean"``, class dimension 1).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tensorplay_jax import tensors as _tensors
from tensorplay_jax.autograd import apply, assign_value, call_rule
from tensorplay_jax.nn import _embedding_ops, _jax_impl
from tensorplay_jax.nn._functional_activations import *  # noqa: F403
from tensorplay_jax.nn._functional_activations import __all__ as _activations
from tensorplay_jax.nn._functional_losses import *  # noqa: F403
from tensorplay_jax.nn._functional_losses import __all__ as _losses
from tensorplay_jax.tensors import Tensor, in_key_scope, next_key

__all__ = [
    "adaptive_avg_pool2d",
    "batch_norm",
    "conv2d",
    "cross_entropy",
    "dropout",
    "dropout2d",
    "embedding",
    "embedding_bag",
    "layer_norm",
    "l1_loss",
    "linear",
    "log_softmax",
    "max_pool2d",
    "mse_loss",
    "nll_loss",
    "relu",
    "sigmoid",
    "softmax",
    "tanh",
    "one_hot",
    "pad",
    "avg_pool2d",
    "conv1d",
    "group_norm",
    *_activations,
    *_losses,
]

relu = _tensors.relu
tanh = _tensors.tanh
sigmoid = _tensors.sigmoid
softmax = _tensors.softmax
log_softmax = _tensors.log_softmax


def linear(input: Any, weight: Any, bias: Any = None) -> Tensor:
    """``input @ weight.T + bias`` (``weight`` is ``(out_features, in_features)``).

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.linear(tp.ones(2, 3), tp.ones(4, 3), tp.zeros(4)).shape
        (2, 4)
    """
    w_shape = getattr(weight, "shape", None)
    if (
        getattr(input, "ndim", 0) >= 1
        and w_shape is not None
        and len(w_shape) == 2
        and (bias is None or getattr(bias, "shape", None) == (w_shape[0],))
    ):
        return call_rule(
            _jax_impl.linear, _jax_impl.linear_pullback, "linearBackward", (input, weight, bias)
        )
    return apply(_jax_impl.linear, input, weight, bias)


def embedding(
    input: Any,
    weight: Any,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` at the integer ``input`` indices (``padding_idx`` gets no gradient).

    With ``sparse=True`` the gradient of ``weight`` is a sparse COO tensor of the rows
    looked up (torch's layout). ``max_norm`` and ``scale_grad_by_freq`` are not
    supported (leave them unset).
    """
    if max_norm is not None or scale_grad_by_freq:
        raise NotImplementedError(
            "embedding: max_norm and scale_grad_by_freq are not supported; leave them unset"
        )
    if padding_idx is not None:
        padding_idx = int(padding_idx) % weight.shape[0]
    if sparse:
        return _embedding_ops.sparse_embedding(input, weight, padding_idx)
    return apply(_jax_impl.embedding, input, weight, padding_idx)


embedding_bag = _embedding_ops.embedding_bag


def _pair(name: str, v: Any) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    t = tuple(int(i) for i in v)
    if len(t) != 2:
        raise ValueError(f"conv2d: {name} must be an int or a pair of ints, got {v!r}")
    return t  # type: ignore[return-value]


def conv_padding(
    padding: Any, kernel_size: tuple[int, int], dilation: tuple[int, int], stride: tuple[int, int]
) -> tuple[tuple[int, int], tuple[int, int]]:
    """tensorplay's ``padding`` (int, pair, ``"same"``, ``"valid"``) as explicit (lo, hi) pairs."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0), (0, 0))
        if padding == "same":
            if stride != (1, 1):
                raise ValueError("conv2d: padding='same' is not supported for strided convolutions")
            pads = []
            for k, d in zip(kernel_size, dilation, strict=True):
                total = d * (k - 1)
                pads.append((total // 2, total - total // 2))
            return (pads[0], pads[1])
        raise ValueError(f"conv2d: padding={padding!r} must be an int, a pair, 'same' or 'valid'")
    ph, pw = _pair("padding", padding)
    return ((ph, ph), (pw, pw))


def conv2d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution (cross-correlation) of NCHW ``input`` with an OIHW ``weight``.

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.conv2d(tp.ones(1, 3, 8, 8), tp.ones(4, 3, 3, 3), padding=1).shape
        (1, 4, 8, 8)
    """
    s, d = _pair("stride", stride), _pair("dilation", dilation)
    k = (int(weight.shape[2]), int(weight.shape[3]))
    pads = conv_padding(padding, k, d, s)
    return apply(_jax_impl.conv2d, input, weight, bias, s, pads, d, int(groups))


def layer_norm(
    input: Any,
    normalized_shape: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dimensions, then scale and shift."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(input.shape[len(input.shape) - len(shape) :]) != shape:
        raise ValueError(
            f"layer_norm: input shape {tuple(input.shape)} does not end with "
            f"normalized_shape {shape}"
        )
    return apply(_jax_impl.layer_norm, input, weight, bias, len(shape), float(eps))


def dropout(input: Any, p: float = 0.5, training: bool = True) -> Any:
    """Zero elements with probability ``p`` (scaling the rest by ``1/(1-p)``) when ``training``.

    The mask is drawn from ``tp.manual_seed``'s state, or from the key given to
    ``nn.functional_call(..., rng=key)`` inside JAX transformations.

    Raises:
        ValueError: ``p`` is outside [0, 1], or dropout runs inside a JAX
            transformation without a key.
    """
    return _dropout("dropout", _jax_impl.dropout, input, p, training)


def dropout2d(input: Any, p: float = 0.5, training: bool = True) -> Any:
    """Zero whole channels of ``(N, C, H, W)`` with probability ``p`` when ``training``.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.nn import functional as F
        >>> F.dropout2d(tp.ones(1, 2, 1, 1), 0.5, training=False).shape
        (1, 2, 1, 1)
    """
    return _dropout("dropout2d", _jax_impl.dropout2d, input, p, training)


def max_pool2d(input: Any, kernel_size: Any, stride: Any = None, padding: Any = 0) -> Tensor:
    """The maximum over each ``kernel_size`` window of ``(N, C, H, W)`` (stride: the kernel;
    ``padding`` pads both sides of H and W with -inf).

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.nn import functional as F
        >>> F.max_pool2d(tp.arange(16.0).reshape(1, 1, 4, 4), 2)
        tensor([[[[ 5.,  7.],
                  [13., 15.]]]])
    """
    kernel = _pair("kernel_size", kernel_size)
    strides = kernel if stride is None else _pair("stride", stride)
    return apply(_jax_impl.max_pool2d, input, kernel, strides, _pair("padding", padding))


def adaptive_avg_pool2d(input: Any, output_size: Any) -> Tensor:
    """The mean over each of ``output_size`` adaptive windows of ``(N, C, H, W)`` or ``(C, H, W)``.

    Window ``i`` of a dimension of size ``n`` pooled to ``m`` spans
    ``[floor(i * n / m), ceil((i + 1) * n / m))``, as torch's; an entry of
    ``output_size`` that is None keeps that dimension's size.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.nn import functional as F
        >>> F.adaptive_avg_pool2d(tp.arange(16.0).reshape(1, 1, 4, 4), 1)
        tensor([[[[7.5]]]])
    """
    if input.ndim not in (3, 4):
        raise ValueError(
            f"adaptive_avg_pool2d: input must be (N, C, H, W) or (C, H, W), got shape "
            f"{tuple(input.shape)}"
        )
    size = (output_size, output_size) if not isinstance(output_size, tuple | list) else output_size
    if len(size) != 2:
        raise ValueError(
            f"adaptive_avg_pool2d: output_size={output_size!r} must be an int or a pair"
        )
    out = tuple(int(input.shape[-2 + i] if s is None else s) for i, s in enumerate(size))
    if min(out) < 1:
        raise ValueError(f"adaptive_avg_pool2d: output_size={output_size!r} must be positive")
    return apply(_jax_impl.adaptive_avg_pool2d, input, out)


def batch_norm(
    input: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each channel (dimension 1) by its mean and variance, then scale and shift.

    In ``training`` (or with no running stats) the batch's statistics are
    used and ``running_mean`` / ``running_var`` (when given) are updated in
    place: ``r = (1 - momentum) * r + momentum * batch_stat``, the variance
    unbiased, as torch does. Outside JAX transformations only: under
    ``jax.grad``/``jit`` (``nn.functional_call``) the running stats are left
    as they are.

    Raises:
        ValueError: training with one value per channel.

    Example:
        >>> import tensorplay_jax as tp
        >>> from tensorplay_jax.nn import functional as F
        >>> rm, rv = tp.zeros(2), tp.ones(2)
        >>> y = F.batch_norm(tp.tensor([[1.0, 2.0], [3.0, 6.0]]), rm, rv, training=True)
        >>> y
        tensor([[-1., -1.],
                [ 1.,  1.]])
        >>> rm, rv
        (tensor([0.2, 0.4]), tensor([1.1, 1.7]))
    """
    batch_stats = training or running_mean is None or running_var is None
    if batch_stats and input.shape[0] * int(np.prod(input.shape[2:])) <= 1:
        raise ValueError(
            f"batch_norm: expected more than 1 value per channel when training, got input "
            f"shape {tuple(input.shape)}"
        )
    y, new_mean, new_var = apply(
        _jax_impl.batch_norm,
        input,
        running_mean,
        running_var,
        weight,
        bias,
        batch_stats,
        np.float32(momentum),
        float(eps),
    )
    if training and running_mean is not None and not isinstance(new_mean._aval(), jax.core.Tracer):
        # without running the pending forward: the stats are taken when first read
        assign_value(running_mean, new_mean)
        assign_value(running_var, new_var)
    return y


def mse_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:
    """Mean (or summed, or per-element) squared error.

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.mse_loss(tp.tensor([1.0, 2.0]), tp.tensor([1.0, 4.0]))
        tensor(2.)
    """
    return _elementwise_loss("mse_loss", _jax_impl.mse_loss, input, target, reduction)


def l1_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:
    """Mean (or summed, or per-element) absolute error.

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> x, y = tp.tensor([1.0, 2.0]), tp.tensor([1.0, 4.0])
        >>> F.l1_loss(x, y), F.l1_loss(x, y, reduction="none")
        (tensor(1.), tensor([0., 2.]))
    """
    return _elementwise_loss("l1_loss", _jax_impl.l1_loss, input, target, reduction)


def nll_loss(
    input: Any,
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood: ``input`` holds log-probabilities with classes in dimension 1."""
    _jax_impl.check_reduction("nll_loss", reduction)
    return apply(_jax_impl.nll_loss, input, target, weight, int(ignore_index), reduction)


def cross_entropy(
    input: Any,
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Cross-entropy of logits ``input`` (classes in dim 1) against class indices or probabilities.

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> round(F.cross_entropy(tp.zeros(2, 4), tp.tensor([0, 3])).item(), 4)
        1.3863
    """
    _jax_impl.check_reduction("cross_entropy", reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing={label_smoothing} must be in [0, 1]")
    return apply(
        _jax_impl.cross_entropy,
        input,
        target,
        weight,
        int(ignore_index),
        reduction,
        float(label_smoothing),
    )


def _elementwise_loss(name: str, impl: Any, input: Any, target: Any, reduction: str) -> Tensor:
    """``impl``'s loss of same-shaped ``input`` and ``target``, after checking both."""
    _jax_impl.check_reduction(name, reduction)
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(
            f"{name}: input shape {tuple(input.shape)} and target shape "
            f"{tuple(target.shape)} differ; tensorplay would broadcast with a warning, "
            "reshape one of them"
        )
    return apply(impl, input, target, reduction)


def _dropout(name: str, impl: Any, input: Any, p: float, training: bool) -> Any:
    """``impl`` (a dropout of ``_jax_impl``) with a fresh key, after the checks both share."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: probability p={p} must be between 0 and 1")
    if not training or p == 0.0:
        return input
    # ``_aval``: a pending input stays pending (it is never a tracer)
    value = input._aval() if isinstance(input, Tensor) else input
    if isinstance(value, jax.core.Tracer) and not in_key_scope():
        raise ValueError(
            f"{name}: called in training mode inside a JAX transformation without a random "
            "key; pass rng=key to nn.functional_call(module, params, ..., rng=key), or call "
            "module.eval()"
        )
    return apply(impl, input, next_key(), float(p))


def one_hot(tensor: Any, num_classes: int = -1) -> Tensor:
    """Each integer of ``tensor`` as a row of ``num_classes`` zeros with a one at it (the
    default integer type); ``num_classes=-1``: one more than the largest value.

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.one_hot(tp.tensor([0, 2]), 3)
        tensor([[1, 0, 0],
                [0, 0, 1]])
    """
    values = tensor._value if isinstance(tensor, Tensor) else jnp.asarray(tensor)
    if not jnp.issubdtype(values.dtype, jnp.integer):
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if not isinstance(values, jax.core.Tracer):
        host = np.asarray(values)
        if host.size and host.min() < 0:
            raise RuntimeError("Class values must be non-negative.")
        if num_classes == -1:
            num_classes = int(host.max()) + 1 if host.size else 0
        elif host.size and host.max() >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    elif num_classes == -1:
        raise TypeError("one_hot: give num_classes inside a JAX transformation")
    return apply(_jax_impl.one_hot, tensor, int(num_classes))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def pad(input: Any, pad: Any, mode: str = "constant", value: float | None = None) -> Tensor:
    """``input`` padded: ``pad`` lists (before, after) amounts from the last dimension
    backwards, as torch's (``(1, 2)`` pads the last dimension by 1 and 2); ``mode`` is
    ``"constant"`` (``value``, default 0), ``"reflect"``, ``"replicate"`` or ``"circular"``.

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.pad(tp.tensor([[1.0, 2.0]]), (1, 0), value=9.0)
        tensor([[9., 1., 2.]])
    """
    amounts = [int(a) for a in pad]
    ndim = len(input.shape)
    if len(amounts) % 2 or len(amounts) // 2 > ndim:
        raise ValueError(
            f"Padding length must be divisible by 2 and at most twice the input's dimensions "
            f"({ndim}), got {len(amounts)}"
        )
    if mode not in _PAD_MODES:
        raise NotImplementedError(f"pad: mode {mode!r} is not one of {sorted(_PAD_MODES)}")
    if mode != "constant" and value:
        raise ValueError(f'Padding mode "{mode}" doesn\'t take in value argument.')
    if mode == "constant" and min(amounts, default=0) < 0:
        raise NotImplementedError("pad: negative (cropping) amounts are not supported here")
    widths = [(0, 0)] * ndim
    for k in range(len(amounts) // 2):
        widths[ndim - 1 - k] = (amounts[2 * k], amounts[2 * k + 1])
    fill = 0.0 if value is None else float(value)
    return apply(_jax_impl.pad, input, tuple(widths), _PAD_MODES[mode], fill)


def group_norm(
    input: Any, num_groups: int, weight: Any = None, bias: Any = None, eps: float = 1e-5
) -> Tensor:
    """Group normalisation of ``(N, C, ...)``: each of ``num_groups`` channel groups of each
    sample normalised, then ``* weight + bias`` per channel."""
    c = input.shape[1]
    if c % num_groups:
        raise RuntimeError(
            f"Expected number of channels in input to be divisible by num_groups, but got input "
            f"of shape {tuple(input.shape)} and num_groups={num_groups}"
        )
    return apply(_jax_impl.group_norm, input, int(num_groups), weight, bias, float(eps))


def avg_pool2d(
    input: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """The mean over each ``kernel_size`` window of the last two dimensions.

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.avg_pool2d(tp.arange(16.0).reshape(1, 4, 4), 2)
        tensor([[[ 2.5,  4.5],
                 [10.5, 12.5]]])
    """
    if ceil_mode:
        raise NotImplementedError("avg_pool2d: ceil_mode=True is not supported here")
    kernel = _pair("kernel_size", kernel_size)
    strides = kernel if stride is None else _pair("stride", stride)
    pads = _pair("padding", padding)
    if any(2 * p > k for p, k in zip(pads, kernel, strict=True)):
        raise RuntimeError("pad should be at most half of effective kernel size")
    divisor = None if divisor_override is None else int(divisor_override)
    return apply(
        _jax_impl.avg_pool2d, input, kernel, strides, pads, bool(count_include_pad), divisor
    )


def conv1d(
    input: Any,
    weight: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """1-D convolution (cross-correlation) of NCL ``input`` with an OIK ``weight``.

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.conv1d(tp.ones(1, 2, 5), tp.ones(3, 2, 3), padding="same").shape
        (1, 3, 5)
    """
    s, d = _single("stride", stride), _single("dilation", dilation)
    k = int(weight.shape[2])
    if isinstance(padding, str):
        lo_hi = conv_padding(padding, (1, k), (1, d), (1, s))[1]
    else:
        p = _single("padding", padding)
        lo_hi = (p, p)
    return apply(_jax_impl.conv1d, input, weight, bias, s, lo_hi, d, int(groups))


def _single(name: str, v: Any) -> int:
    if isinstance(v, int):
        return v
    t = tuple(int(i) for i in v)
    if len(t) != 1:
        raise ValueError(f"conv1d: {name} must be an int or a 1-tuple, got {v!r}")
    return t[0]
