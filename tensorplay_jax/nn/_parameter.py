"""``Parameter``: a leaf Tensor that a ``Module`` registers as one of its parameters."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from tensorplay_jax.tensors import Tensor


class Parameter(Tensor):
    """A Tensor that is a module parameter: assigning it to a Module attribute registers it.

    Args:
        data: the initial value (array-like or Tensor; copied into a new leaf).
        requires_grad: whether it collects gradients (default True).

    Example:
        >>> import tensorplay_jax as tp
        >>> p = tp.nn.Parameter(tp.zeros(2))
        >>> p.requires_grad, p.is_leaf
        (True, True)
    """

    def __init__(self, data: Any = None, requires_grad: bool = True) -> None:
        if data is None:
            data = jnp.zeros((0,), jnp.float32)
        super().__init__(data, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
