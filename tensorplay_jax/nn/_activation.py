"""Parameter-free layers: activations, Flatten, Dropout, max and adaptive average pooling."""

from __future__ import annotations

from typing import Any

from tensorplay_jax.nn import functional as F
from tensorplay_jax.nn._module import Module
from tensorplay_jax.tensors import flatten


class ReLU(Module):
    """``max(x, 0)`` elementwise.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.ReLU()(tp.tensor([-1.0, 1.0]))
        tensor([0., 1.])
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace  # accepted for compatibility; JAX arrays are immutable

    def forward(self, input: Any) -> Any:
        return F.relu(input)


class Tanh(Module):
    """Hyperbolic tangent elementwise."""

    def forward(self, input: Any) -> Any:
        return F.tanh(input)


class Sigmoid(Module):
    """Logistic sigmoid elementwise."""

    def forward(self, input: Any) -> Any:
        return F.sigmoid(input)


class Softmax(Module):
    """Softmax along ``dim``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return F.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """Log-softmax along ``dim``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Any) -> Any:
        return F.log_softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Flatten(Module):
    """Merge dimensions ``start_dim..end_dim`` (default: all but the batch dimension).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.Flatten()(tp.zeros(2, 3, 4)).shape
        (2, 12)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input: Any) -> Any:
        return flatten(input, self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Dropout(Module):
    """Zero elements with probability ``p`` while training (scaling the rest by ``1/(1-p)``).

    Masks come from ``tp.manual_seed``'s state, or from ``functional_call(..., rng=key)``.

    Example:
        >>> import tensorplay_jax as tp
        >>> drop = tp.nn.Dropout(0.5)
        >>> drop.eval()(tp.ones(3))
        tensor([1., 1., 1.])
    """

    def __init__(self, p: float = 0.5, inplace: bool = False) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = float(p), inplace

    def forward(self, input: Any) -> Any:
        return F.dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout2d(Dropout):
    """Zero whole channels of ``(N, C, H, W)`` with probability ``p`` while training.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.Dropout2d(0.25).eval()(tp.ones(1, 2, 1, 1)).shape
        (1, 2, 1, 1)
    """

    def forward(self, input: Any) -> Any:
        return F.dropout2d(input, self.p, self.training)


class MaxPool2d(Module):
    """``F.max_pool2d`` as a layer.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.MaxPool2d(3, stride=2, padding=1)(tp.ones(1, 1, 8, 8)).shape
        (1, 1, 4, 4)
    """

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, input: Any) -> Any:
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding)


class AdaptiveAvgPool2d(Module):
    """``F.adaptive_avg_pool2d`` as a layer: any ``(H, W)`` pooled to ``output_size``.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.AdaptiveAvgPool2d((1, 1))(tp.ones(2, 3, 7, 5)).shape
        (2, 3, 1, 1)
    """

    def __init__(self, output_size: Any) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Any) -> Any:
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
