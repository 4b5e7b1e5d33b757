"""The losses and distances of ``nn.functional`` beyond MSE, L1, NLL and cross-entropy:
each lifts its pure JAX form (``_jax_losses``) as one tape node, after torch's checks."""

from __future__ import annotations

from typing import Any

from tensorplay_jax.autograd import apply
from tensorplay_jax.nn import _jax_impl
from tensorplay_jax.nn import _jax_losses as _loss
from tensorplay_jax.tensors import Tensor

__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cosine_similarity",
    "huber_loss",
    "kl_div",
    "margin_ranking_loss",
    "normalize",
    "pairwise_distance",
    "smooth_l1_loss",
]


def _same_shape(name: str, input: Any, target: Any) -> None:
    if tuple(input.shape) != tuple(target.shape):
        raise ValueError(
            f"{name}: Using a target size ({tuple(target.shape)}) that is different to the "
            f"input size ({tuple(input.shape)}) is deprecated. Please ensure they have the "
            "same size."
        )


def binary_cross_entropy(
    input: Any, target: Any, weight: Any = None, reduction: str = "mean"
) -> Tensor:
    """Binary cross-entropy of probabilities ``input`` against ``target`` (each log at
    least -100, as torch's).

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> round(F.binary_cross_entropy(tp.tensor([0.5]), tp.tensor([1.0])).item(), 4)
        0.6931
    """
    _jax_impl.check_reduction("binary_cross_entropy", reduction)
    _same_shape("binary_cross_entropy", input, target)
    return apply(_loss.binary_cross_entropy, input, target, weight, reduction)


def binary_cross_entropy_with_logits(
    input: Any,
    target: Any,
    weight: Any = None,
    reduction: str = "mean",
    pos_weight: Any = None,
) -> Tensor:
    """Binary cross-entropy of ``sigmoid(input)``, computed stably from the logits;
    ``pos_weight`` weighs the positive term (per class, broadcast over the last dimension)."""
    _jax_impl.check_reduction("binary_cross_entropy_with_logits", reduction)
    _same_shape("binary_cross_entropy_with_logits", input, target)
    return apply(
        _loss.binary_cross_entropy_with_logits, input, target, weight, pos_weight, reduction
    )


def smooth_l1_loss(input: Any, target: Any, reduction: str = "mean", beta: float = 1.0) -> Tensor:
    """Squared error below ``beta`` (halved, over ``beta``), absolute error above."""
    _jax_impl.check_reduction("smooth_l1_loss", reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    _same_shape("smooth_l1_loss", input, target)
    return apply(_loss.smooth_l1_loss, input, target, reduction, float(beta))


def huber_loss(input: Any, target: Any, reduction: str = "mean", delta: float = 1.0) -> Tensor:
    """Half the squared error below ``delta``, ``delta`` times the absolute error (less half
    ``delta``) above."""
    _jax_impl.check_reduction("huber_loss", reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    _same_shape("huber_loss", input, target)
    return apply(_loss.huber_loss, input, target, reduction, float(delta))


def kl_div(input: Any, target: Any, reduction: str = "mean", log_target: bool = False) -> Tensor:
    """KL divergence ``target * (log(target) - input)`` summed as ``reduction`` says;
    ``input`` holds log-probabilities (``log_target``: so does ``target``). ``"batchmean"``
    (the sum over the batch size) is the mathematically right mean."""
    if reduction not in ("mean", "sum", "none", "batchmean"):
        raise ValueError(f"kl_div: {reduction} is not a valid value for reduction")
    return apply(_loss.kl_div, input, target, reduction, bool(log_target))


def margin_ranking_loss(
    input1: Any, input2: Any, target: Any, margin: float = 0.0, reduction: str = "mean"
) -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``; ``target`` holds 1 or -1."""
    _jax_impl.check_reduction("margin_ranking_loss", reduction)
    return apply(_loss.margin_ranking_loss, input1, input2, target, float(margin), reduction)


def cosine_similarity(x1: Any, x2: Any, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """The cosine of the angle between ``x1`` and ``x2`` along ``dim`` (they broadcast).

    Example:
        >>> import tensorplay_jax as tp
        >>> import tensorplay_jax.nn.functional as F
        >>> F.cosine_similarity(tp.tensor([[1.0, 0.0]]), tp.tensor([[1.0, 1.0]]))
        tensor([0.7071])
    """
    return apply(_loss.cosine_similarity, x1, x2, int(dim), float(eps))


def pairwise_distance(
    x1: Any, x2: Any, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """The ``p``-norm of ``x1 - x2 + eps`` along the last dimension."""
    return apply(_loss.pairwise_distance, x1, x2, float(p), float(eps), bool(keepdim))


def normalize(input: Any, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """``input`` divided by its ``p``-norm along ``dim`` (at least ``eps``)."""
    return apply(_loss.normalize, input, float(p), int(dim), float(eps))
