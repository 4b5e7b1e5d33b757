"""``tp.sparse``: torch's ``torch.sparse`` functions on sparse COO tensors.

The tensors themselves are ``SparseTensor`` (made by ``tp.sparse_coo_tensor``);
their operations are in ``_sparse_ops``. This module is what users type.

Example:
    >>> import tensorplay_jax as tp
    >>> x = tp.sparse_coo_tensor([[0, 1], [1, 0]], [2.0, 3.0], (2, 2), requires_grad=True)
    >>> tp.sparse.sum(x).backward()
    >>> x.grad.to_dense().tolist()
    [[0.0, 1.0], [1.0, 0.0]]
"""

from __future__ import annotations

from typing import Any

from tensorplay_jax.tensors import _sparse_ops
from tensorplay_jax.tensors._sparse import SparseTensor
from tensorplay_jax.tensors._tensor import Tensor

__all__ = ["mm", "sum"]


def sum(input: SparseTensor, dim: Any = None, dtype: Any = None) -> Tensor:
    """All elements of a sparse tensor summed (a dense 0-d tensor), or those over ``dim``
    (sparse while a sparse dimension is kept). The gradient is sparse, on the input's
    pattern, as torch's.

    Example:
        >>> import tensorplay_jax as tp
        >>> x = tp.sparse_coo_tensor([[0, 1, 1], [2, 0, 2]], [3.0, 4.0, 5.0], (2, 3))
        >>> tp.sparse.sum(x, dim=1).to_dense()
        tensor([3., 9.])
    """
    return _sparse_ops.sum(input, dim, dtype)


def mm(mat1: SparseTensor, mat2: Any) -> Tensor:
    """A 2-d sparse matrix times a dense one (dense); the sparse one's gradient is sparse."""
    return _sparse_ops.mm(mat1, mat2)
