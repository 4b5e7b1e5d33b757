"""Loss modules: ``MSELoss``, ``L1Loss``, ``CrossEntropyLoss``, ``NLLLoss`` (``nn.functional``)."""

from __future__ import annotations

from typing import Any

from tensorplay_jax.nn import _jax_impl
from tensorplay_jax.nn import functional as F
from tensorplay_jax.nn._module import Module


class MSELoss(Module):
    """Mean squared error (``reduction``: ``"mean"``, ``"sum"`` or ``"none"``).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.MSELoss()(tp.zeros(2), tp.ones(2))
        tensor(1.)
    """

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        _jax_impl.check_reduction("MSELoss", reduction)
        self.reduction = reduction

    def forward(self, input: Any, target: Any) -> Any:
        return F.mse_loss(input, target, self.reduction)


class L1Loss(Module):
    """Mean absolute error (``reduction``: ``"mean"``, ``"sum"`` or ``"none"``).

    Example:
        >>> import tensorplay_jax as tp
        >>> tp.nn.L1Loss(reduction="sum")(tp.zeros(2), tp.tensor([1.0, -3.0]))
        tensor(4.)
    """

    def __init__(self, reduction: str = "mean") -> None:
        super().__init__()
        _jax_impl.check_reduction("L1Loss", reduction)
        self.reduction = reduction

    def forward(self, input: Any, target: Any) -> Any:
        return F.l1_loss(input, target, self.reduction)


class NLLLoss(Module):
    """Negative log-likelihood of class indices under log-probabilities."""

    def __init__(
        self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean"
    ) -> None:
        super().__init__()
        _jax_impl.check_reduction("NLLLoss", reduction)
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, reduction

    def forward(self, input: Any, target: Any) -> Any:
        return F.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class CrossEntropyLoss(Module):
    """Softmax cross-entropy of logits against class indices or class probabilities."""

    def __init__(
        self,
        weight: Any = None,
        ignore_index: int = -100,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ) -> None:
        super().__init__()
        _jax_impl.check_reduction("CrossEntropyLoss", reduction)
        self.register_buffer("weight", weight)
        self.ignore_index, self.reduction = ignore_index, reduction
        self.label_smoothing = label_smoothing

    def forward(self, input: Any, target: Any) -> Any:
        return F.cross_entropy(
            input, target, self.weight, self.ignore_index, self.reduction, self.label_smoothing
        )
