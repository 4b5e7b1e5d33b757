"""Loss and distance modules over ``nn.functional``: MSE, L1, NLL, cross-entropy, binary
cross-entropy (on probabilities and on logits), smooth L1, Huber, KL divergence, margin
ranking, cosine similarity and pairwise distance."""

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


class BCELoss(Module):
    """``F.binary_cross_entropy`` of probabilities, as a module (``weight`` per element)."""

    def __init__(self, weight: Any = None, reduction: str = "mean") -> None:
        super().__init__()
        _jax_impl.check_reduction("BCELoss", reduction)
        self.register_buffer("weight", weight)
        self.reduction = reduction

    def forward(self, input: Any, target: Any) -> Any:
        return F.binary_cross_entropy(input, target, self.weight, self.reduction)


class BCEWithLogitsLoss(Module):
    """``F.binary_cross_entropy_with_logits`` as a module (``pos_weight`` per class).

    Example:
        >>> import tensorplay_jax as tp
        >>> round(tp.nn.BCEWithLogitsLoss()(tp.zeros(2), tp.ones(2)).item(), 4)
        0.6931
    """

    def __init__(self, weight: Any = None, reduction: str = "mean", pos_weight: Any = None) -> None:
        super().__init__()
        _jax_impl.check_reduction("BCEWithLogitsLoss", reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)
        self.reduction = reduction

    def forward(self, input: Any, target: Any) -> Any:
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, self.reduction, self.pos_weight
        )


class SmoothL1Loss(Module):
    """``F.smooth_l1_loss`` as a module."""

    def __init__(self, reduction: str = "mean", beta: float = 1.0) -> None:
        super().__init__()
        _jax_impl.check_reduction("SmoothL1Loss", reduction)
        self.reduction, self.beta = reduction, beta

    def forward(self, input: Any, target: Any) -> Any:
        return F.smooth_l1_loss(input, target, self.reduction, self.beta)


class HuberLoss(Module):
    """``F.huber_loss`` as a module."""

    def __init__(self, reduction: str = "mean", delta: float = 1.0) -> None:
        super().__init__()
        _jax_impl.check_reduction("HuberLoss", reduction)
        self.reduction, self.delta = reduction, delta

    def forward(self, input: Any, target: Any) -> Any:
        return F.huber_loss(input, target, self.reduction, self.delta)


class KLDivLoss(Module):
    """``F.kl_div`` as a module (``reduction="batchmean"`` for the true mean)."""

    def __init__(self, reduction: str = "mean", log_target: bool = False) -> None:
        super().__init__()
        self.reduction, self.log_target = reduction, log_target

    def forward(self, input: Any, target: Any) -> Any:
        return F.kl_div(input, target, self.reduction, self.log_target)


class MarginRankingLoss(Module):
    """``F.margin_ranking_loss`` as a module."""

    def __init__(self, margin: float = 0.0, reduction: str = "mean") -> None:
        super().__init__()
        _jax_impl.check_reduction("MarginRankingLoss", reduction)
        self.margin, self.reduction = margin, reduction

    def forward(self, input1: Any, input2: Any, target: Any) -> Any:
        return F.margin_ranking_loss(input1, input2, target, self.margin, self.reduction)


class CosineSimilarity(Module):
    """``F.cosine_similarity`` along ``dim`` as a module."""

    def __init__(self, dim: int = 1, eps: float = 1e-8) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1: Any, x2: Any) -> Any:
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    """``F.pairwise_distance`` as a module."""

    def __init__(self, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False) -> None:
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1: Any, x2: Any) -> Any:
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)
