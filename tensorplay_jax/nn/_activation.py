"""Parameter-free layers: activations, Flatten, Unflatten, Dropout, max, average and adaptive
average pooling."""

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


class Unflatten(Module):
    """Split dimension ``dim`` into ``unflattened_size`` (the inverse of ``Flatten``).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.Unflatten(1, (3, 4))(tp.zeros(2, 12)).shape
        (2, 3, 4)
    """

    def __init__(self, dim: int, unflattened_size: Any) -> None:
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, input: Any) -> Any:
        shape = list(input.shape)
        d = self.dim % len(shape)
        return input.reshape(*shape[:d], *self.unflattened_size, *shape[d + 1 :])

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


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


class AvgPool2d(Module):
    """``F.avg_pool2d`` as a layer.

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.AvgPool2d(2)(tp.ones(1, 1, 4, 4)).shape
        (1, 1, 2, 2)
    """

    def __init__(
        self,
        kernel_size: Any,
        stride: Any = None,
        padding: Any = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Any) -> Any:
        return F.avg_pool2d(
            input,
            self.kernel_size,
            self.stride,
            self.padding,
            self.ceil_mode,
            self.count_include_pad,
            self.divisor_override,
        )


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


def _elementwise(
    name: str, fn: Any, doc: str, params: tuple[tuple[str, Any], ...] = ()
) -> type[Module]:
    """A module ``name(**params)`` whose forward is ``fn(input, **params)``; its
    ``extra_repr`` lists the parameters (torch's module of the same name)."""

    def __init__(self: Module, *args: Any, **kwargs: Any) -> None:
        Module.__init__(self)
        names = [p for p, _ in params] + ["inplace"]  # torch's trailing ``inplace``
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} arguments ({len(args)} given)")
        given = dict(zip(names, args, strict=False))
        values = {**dict(params), "inplace": False, **given}
        for key, value in kwargs.items():
            if key not in values or key in given:
                raise TypeError(f"{name}() got an unexpected or repeated argument {key!r}")
            values[key] = value
        for key, value in values.items():
            setattr(self, key, value)

    def forward(self: Module, input: Any) -> Any:
        return fn(input, **{p: getattr(self, p) for p, _ in params})

    def extra_repr(self: Module) -> str:
        shown = ((p, getattr(self, p)) for p, _ in params)
        return ", ".join(f"{p}={v!r}" if isinstance(v, str) else f"{p}={v}" for p, v in shown)

    cls = type(
        name, (Module,), {"__init__": __init__, "forward": forward, "extra_repr": extra_repr}
    )
    cls.__doc__ = doc
    cls.__module__ = __name__
    return cls


LeakyReLU = _elementwise(
    "LeakyReLU", F.leaky_relu, "``F.leaky_relu`` as a module.", (("negative_slope", 0.01),)
)
ELU = _elementwise("ELU", F.elu, "``F.elu`` as a module.", (("alpha", 1.0),))
CELU = _elementwise("CELU", F.celu, "``F.celu`` as a module.", (("alpha", 1.0),))
SELU = _elementwise("SELU", F.selu, "``F.selu`` as a module.")
GELU = _elementwise("GELU", F.gelu, "``F.gelu`` as a module.", (("approximate", "none"),))
SiLU = _elementwise("SiLU", F.silu, "``F.silu`` (swish) as a module.")
Mish = _elementwise("Mish", F.mish, "``F.mish`` as a module.")
Softplus = _elementwise(
    "Softplus", F.softplus, "``F.softplus`` as a module.", (("beta", 1.0), ("threshold", 20.0))
)
Softsign = _elementwise("Softsign", F.softsign, "``F.softsign`` as a module.")
Hardtanh = _elementwise(
    "Hardtanh", F.hardtanh, "``F.hardtanh`` as a module.", (("min_val", -1.0), ("max_val", 1.0))
)
ReLU6 = _elementwise("ReLU6", F.relu6, "``F.relu6`` as a module.")
Hardswish = _elementwise("Hardswish", F.hardswish, "``F.hardswish`` as a module.")
Hardsigmoid = _elementwise("Hardsigmoid", F.hardsigmoid, "``F.hardsigmoid`` as a module.")
LogSigmoid = _elementwise("LogSigmoid", F.logsigmoid, "``F.logsigmoid`` as a module.")
Softmin = _elementwise("Softmin", F.softmin, "``F.softmin`` along ``dim``.", (("dim", None),))
GLU = _elementwise("GLU", F.glu, "``F.glu`` along ``dim``.", (("dim", -1),))
Threshold = _elementwise(
    "Threshold", F.threshold, "``F.threshold`` as a module.", (("threshold", 0.0), ("value", 0.0))
)
