"""``LayerNorm``: normalisation over the trailing dimensions, one tape node per call."""

from __future__ import annotations

from typing import Any

from tensorplay_jax.nn import functional as F
from tensorplay_jax.nn._module import Module
from tensorplay_jax.nn._parameter import Parameter
from tensorplay_jax.tensors import ones, zeros


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
