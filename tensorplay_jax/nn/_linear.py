"""``Linear`` and ``Identity``."""

from __future__ import annotations

from typing import Any

from tensorplay_jax.nn import functional as F
from tensorplay_jax.nn import init
from tensorplay_jax.nn._module import Module
from tensorplay_jax.nn._parameter import Parameter
from tensorplay_jax.tensors import zeros


class Identity(Module):
    """Returns its input unchanged (a placeholder layer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Any) -> Any:
        return input


class Linear(Module):
    """``y = x @ weight.T + bias``, one tape node per call.

    ``weight`` is ``(out_features, in_features)``; weight and bias are drawn
    from U(-1/sqrt(in_features), 1/sqrt(in_features)), as tensorplay does.

    Args:
        in_features: size of each input sample.
        out_features: size of each output sample.
        bias: whether to add a learnable bias.
        dtype: parameter dtype (float32 by default).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.manual_seed(0)
        >>> layer = tp.nn.Linear(16, 8)
        >>> layer(tp.randn(4, 16)).shape
        (4, 8)
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, dtype: Any = None
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.weight = Parameter(zeros(self.out_features, self.in_features, dtype=dtype))
        if bias:
            self.bias = Parameter(zeros(self.out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraw weight and bias from U(-1/sqrt(in_features), 1/sqrt(in_features))."""
        init._reset_affine(self.weight, self.bias, self.in_features)

    def forward(self, input: Any) -> Any:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )
