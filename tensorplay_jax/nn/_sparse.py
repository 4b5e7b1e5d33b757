"""``Embedding``: a lookup table of vectors, one tape node per call."""

from __future__ import annotations

from typing import Any

from tensorplay_jax.nn import functional as F
from tensorplay_jax.nn import init
from tensorplay_jax.nn._module import Module
from tensorplay_jax.nn._parameter import Parameter
from tensorplay_jax.tensors import zeros


class Embedding(Module):
    """Rows of ``weight`` (``(num_embeddings, embedding_dim)``, drawn from N(0, 1)) by index.

    Args:
        num_embeddings: size of the table.
        embedding_dim: size of each vector.
        padding_idx: a row that starts at zero and never receives gradient.

    Example:
        >>> import tensorplay_jax as tp
        >>> emb = tp.nn.Embedding(10, 3, padding_idx=0)
        >>> emb(tp.tensor([[0, 2], [4, 9]])).shape
        (2, 2, 3)
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"Embedding: padding_idx={padding_idx} must be within num_embeddings="
                    f"{num_embeddings}"
                )
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx
        self.weight = Parameter(zeros(num_embeddings, embedding_dim, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraw the table from N(0, 1); zero the padding row."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.data = self.weight.value.at[self.padding_idx].set(0)

    def forward(self, input: Any) -> Any:
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"
