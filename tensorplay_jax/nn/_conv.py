"""``Conv2d`` and ``Conv1d``: convolutions over NCHW images and NCL sequences, one tape node
per call."""

from __future__ import annotations

import math
from typing import Any

from tensorplay_jax.nn import functional as F
from tensorplay_jax.nn import init
from tensorplay_jax.nn._module import Module
from tensorplay_jax.nn._parameter import Parameter
from tensorplay_jax.tensors import zeros


def _check_channels(
    name: str, in_channels: int, out_channels: int, groups: int, padding_mode: str
) -> None:
    """Raise ValueError for channels that ``groups`` does not divide, or a padding mode
    other than zeros."""
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"{name}: in_channels={in_channels} and out_channels={out_channels} must both "
            f"be divisible by groups={groups}"
        )
    if padding_mode != "zeros":
        raise ValueError(f"{name}: padding_mode={padding_mode!r} is not supported; only 'zeros'")


class Conv2d(Module):
    """2-D convolution (cross-correlation) with tensorplay's arguments and initialisation.

    ``weight`` is ``(out_channels, in_channels // groups, kH, kW)``; weight and
    bias are drawn from U(-sqrt(k), sqrt(k)), ``k = groups / (in_channels * kH * kW)``.

    Args:
        in_channels: channels of the input image.
        out_channels: channels produced.
        kernel_size: int or (kH, kW).
        stride: int or pair.
        padding: int, pair, ``"same"`` or ``"valid"`` (zero padding only).
        dilation: int or pair.
        groups: blocked connections from input to output channels.
        bias: whether to add a learnable bias.
        padding_mode: only ``"zeros"``.

    Example:
        >>> import tensorplay_jax as tp
        >>> conv = tp.nn.Conv2d(3, 8, 3, padding=1)
        >>> conv(tp.randn(2, 3, 16, 16)).shape
        (2, 8, 16, 16)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        _check_channels("Conv2d", in_channels, out_channels, groups, padding_mode)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = F._pair("kernel_size", kernel_size)
        self.stride = F._pair("stride", stride)
        self.dilation = F._pair("dilation", dilation)
        self.padding = padding if isinstance(padding, str) else F._pair("padding", padding)
        F.conv_padding(self.padding, self.kernel_size, self.dilation, self.stride)  # validate
        self.weight = Parameter(
            zeros(out_channels, in_channels // groups, *self.kernel_size, dtype=dtype)
        )
        if bias:
            self.bias = Parameter(zeros(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraw weight and bias from U(-sqrt(k), sqrt(k))."""
        fan_in = (self.in_channels // self.groups) * math.prod(self.kernel_size)
        init._reset_affine(self.weight, self.bias, fan_in)

    def forward(self, input: Any) -> Any:
        return F.conv2d(
            input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding not in ((0, 0), "valid"):
            s += (
                f", padding={self.padding!r}"
                if isinstance(self.padding, str)
                else (f", padding={self.padding}")
            )
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv1d(Module):
    """1-D convolution (cross-correlation) over ``(N, C, L)``, with tensorplay's arguments
    and initialisation (``weight`` is ``(out_channels, in_channels // groups, k)``; weight and
    bias from U(-sqrt(g), sqrt(g)), ``g = groups / (in_channels * k)``).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.Conv1d(2, 4, 3, padding=1)(tp.randn(5, 2, 10)).shape
        (5, 4, 10)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        _check_channels("Conv1d", in_channels, out_channels, groups, padding_mode)
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = (F._single("kernel_size", kernel_size),)
        self.stride = (F._single("stride", stride),)
        self.dilation = (F._single("dilation", dilation),)
        self.padding = padding if isinstance(padding, str) else (F._single("padding", padding),)
        self.weight = Parameter(
            zeros(out_channels, in_channels // groups, self.kernel_size[0], dtype=dtype)
        )
        if bias:
            self.bias = Parameter(zeros(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraw weight and bias from U(-sqrt(g), sqrt(g))."""
        fan_in = (self.in_channels // self.groups) * self.kernel_size[0]
        init._reset_affine(self.weight, self.bias, fan_in)

    def forward(self, input: Any) -> Any:
        return F.conv1d(
            input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups
        )

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding not in ((0,), "valid"):
            s += (
                f", padding={self.padding!r}"
                if isinstance(self.padding, str)
                else (f", padding={self.padding}")
            )
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s
