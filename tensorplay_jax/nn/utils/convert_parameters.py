"""Parameters as one flat vector and back (torch's ``parameters_to_vector`` and
``vector_to_parameters``)."""

from __future__ import annotations

from collections.abc import Iterable

from tensorplay_jax.tensors import Tensor, cat, overwrite

__all__ = ["parameters_to_vector", "vector_to_parameters"]


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened and concatenated, in order (differentiable).

    Example:
        >>> import tensorplay_jax as tp
        >>> parameters_to_vector([tp.ones(2, 2), tp.zeros(1)]).tolist()
        [1.0, 1.0, 1.0, 1.0, 0.0]
    """
    return cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Write consecutive slices of ``vec`` into the parameters, in place (unrecorded, as an
    optimiser's step)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"expected torch.Tensor, but got: {type(vec).__name__}")
    params = list(parameters)
    need = sum(p.numel() for p in params)
    if vec.numel() != need:
        raise ValueError(f"vector has {vec.numel()} elements; the parameters need {need}")
    flat = vec.detach().value.reshape(-1)
    start = 0
    for p in params:
        n = p.numel()
        overwrite(p, flat[start : start + n].reshape(p.shape).astype(p.dtype))
        start += n
