"""Normalisation layers: ``LayerNorm``, ``GroupNorm`` and the batch norms (``BatchNorm1d``,
``2d``, ``3d``: one ``_BatchNorm`` for inputs of 2-3, 4 and 5 dimensions), one tape node
per call."""

from __future__ import annotations

from typing import Any

from tensorplay_jax.nn import functional as F
from tensorplay_jax.nn._module import Module
from tensorplay_jax.nn._parameter import Parameter
from tensorplay_jax.tensors import ones, tensor, zeros


class LayerNorm(Module):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last ``normalized_shape`` dims.

    The variance is the biased one; ``weight`` starts at ones, ``bias`` at zeros.

    Args:
        normalized_shape: int or tuple: the trailing shape to normalise over.
        eps: added to the variance.
        elementwise_affine: learn ``weight`` (and ``bias``).
        bias: learn ``bias`` too (with ``elementwise_affine``).

    Example:
        >>> import tensorplay_jax as tp
        >>> ln = tp.nn.LayerNorm(4)
        >>> round(ln(tp.arange(8.0).reshape(2, 4)).mean().item(), 6)
        0.0
    """

    def __init__(
        self,
        normalized_shape: Any,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(int(s) for s in shape)
        self.eps, self.elementwise_affine = float(eps), elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(zeros(self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: Any) -> Any:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )


class _BatchNorm(Module):
    """Normalise each channel (dimension 1) over the batch and the other dimensions, as
    torch's; the subclasses say which input dimensions they take.

    In training mode the batch's mean and (biased) variance normalise, and the
    buffers ``running_mean`` / ``running_var`` follow them:
    ``r = (1 - momentum) * r + momentum * batch_stat`` (the variance unbiased;
    ``momentum=None``: the cumulative average over ``num_batches_tracked``
    batches). In eval mode the running stats normalise. Then
    ``* weight + bias`` (ones and zeros at first) when ``affine``.

    Args:
        num_features: channels ``C``.
        eps: added to the variance.
        momentum: the running stats' update factor, or None for a cumulative average.
        affine: learn ``weight`` and ``bias``.
        track_running_stats: keep running stats (else batch stats in both modes).

    Raises:
        ValueError: the input has other dimensions than the class takes (at call time).

    """

    _DIMS: tuple[int, ...] = ()  # the input dimensions a subclass takes

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.num_features, self.eps, self.momentum = int(num_features), float(eps), momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(self.num_features, dtype=dtype))
            self.bias = Parameter(zeros(self.num_features, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(self.num_features, dtype=dtype))
            self.register_buffer("running_var", ones(self.num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", tensor(0))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        """Running mean 0, running variance 1, no batches tracked."""
        if self.track_running_stats:
            self.running_mean.data = zeros(self.num_features, dtype=self.running_mean.dtype).value
            self.running_var.data = ones(self.num_features, dtype=self.running_var.dtype).value
            self.num_batches_tracked.data = tensor(0).value

    def forward(self, input: Any) -> Any:
        if input.ndim not in self._DIMS:
            want = " or ".join(f"{d}D" for d in self._DIMS)
            raise ValueError(
                f"{type(self).__name__}: expected {want} input (got {input.ndim}D input)"
            )
        momentum = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.data = self.num_batches_tracked.value + 1
            if self.momentum is None:  # the cumulative moving average
                momentum = 1.0 / float(self.num_batches_tracked.item())
        use_batch = self.training or self.running_mean is None
        return F.batch_norm(
            input,
            self.running_mean if not self.training or self.track_running_stats else None,
            self.running_var if not self.training or self.track_running_stats else None,
            self.weight,
            self.bias,
            use_batch,
            momentum,
            self.eps,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """``_BatchNorm`` of ``(N, C)`` or ``(N, C, L)`` inputs (features, or channels of a
    sequence).

    Example:
        >>> import tensorplay_jax as tp
        >>> bn = tp.nn.BatchNorm1d(2)
        >>> [round(v, 4) for v in bn(tp.tensor([[1.0, 4.0], [3.0, 8.0]])).tolist()[0]]
        [-1.0, -1.0]
    """

    _DIMS = (2, 3)


class BatchNorm2d(_BatchNorm):
    """``_BatchNorm`` of ``(N, C, H, W)`` images.

    Example:
        >>> import tensorplay_jax as tp
        >>> bn = tp.nn.BatchNorm2d(3)
        >>> y = bn(tp.randn(4, 3, 2, 2))
        >>> max(abs(v) for v in y.mean(dim=(0, 2, 3)).tolist()) < 1e-5  # per-channel mean 0
        True
        >>> sorted(bn.state_dict())
        ['bias', 'num_batches_tracked', 'running_mean', 'running_var', 'weight']
    """

    _DIMS = (4,)


class BatchNorm3d(_BatchNorm):
    """``_BatchNorm`` of ``(N, C, D, H, W)`` volumes."""

    _DIMS = (5,)


class GroupNorm(Module):
    """Normalise each of ``num_groups`` groups of channels over its channels and the other
    dimensions (per sample), then ``* weight + bias`` per channel when ``affine``.

    Example:
        >>> import tensorplay_jax as tp
        >>> gn = tp.nn.GroupNorm(2, 4)
        >>> gn(tp.randn(3, 4, 5)).shape
        (3, 4, 5)
    """

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        eps: float = 1e-5,
        affine: bool = True,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels = int(num_groups), int(num_channels)
        self.eps, self.affine = float(eps), affine
        if affine:
            self.weight = Parameter(ones(self.num_channels, dtype=dtype))
            self.bias = Parameter(zeros(self.num_channels, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input: Any) -> Any:
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
