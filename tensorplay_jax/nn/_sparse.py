"""``Embedding`` and ``EmbeddingBag``: lookup tables of vectors, one tape node per call.

With ``sparse=True`` the table's gradient is a sparse COO tensor of the rows a call
looked up (``_embedding_ops``), which ``optim.SGD`` and ``optim.SparseAdam`` step in
place of those rows only.
"""

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
        sparse: give ``weight`` a sparse gradient (the rows looked up).

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
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if max_norm is not None or scale_grad_by_freq:
            raise NotImplementedError(
                "Embedding: max_norm and scale_grad_by_freq are not supported; leave them unset"
            )
        self.sparse = bool(sparse)
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
        return F.embedding(input, self.weight, self.padding_idx, sparse=self.sparse)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s + (", sparse=True" if self.sparse else "")


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of rows of ``weight`` (drawn from N(0, 1)).

    Args:
        num_embeddings: size of the table.
        embedding_dim: size of each vector.
        max_norm, norm_type, scale_grad_by_freq: torch's options; only their defaults
            are supported here.
        mode: ``"sum"``, ``"mean"`` (the default) or ``"max"``.
        sparse: give ``weight`` a sparse gradient (not with ``"max"``).
        include_last_offset: ``offsets`` has one more entry, the end of the last bag.
        padding_idx: a row that starts at zero and adds nothing to its bag.

    Example:
        >>> import tensorplay_jax as tp
        >>> bag = tp.nn.EmbeddingBag(10, 3, mode="sum")
        >>> bag(tp.tensor([1, 2, 4, 5, 4]), tp.tensor([0, 2])).shape
        (2, 3)
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        mode: str = "mean",
        sparse: bool = False,
        _weight: Any = None,
        include_last_offset: bool = False,
        padding_idx: int | None = None,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if max_norm is not None or scale_grad_by_freq:
            raise NotImplementedError(
                "EmbeddingBag: max_norm and scale_grad_by_freq are not supported; leave them unset"
            )
        if sparse and mode == "max":
            raise ValueError("max mode does not support sparse weights")
        if padding_idx is not None:
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.mode, self.sparse = mode, bool(sparse)
        self.include_last_offset, self.padding_idx = include_last_offset, padding_idx
        self.weight = Parameter(zeros(num_embeddings, embedding_dim, dtype=dtype))
        if _weight is None:
            self.reset_parameters()
        else:
            self.weight.data = _weight

    def reset_parameters(self) -> None:
        """Redraw the table from N(0, 1); zero the padding row."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.data = self.weight.value.at[self.padding_idx].set(0)

    def forward(self, input: Any, offsets: Any = None, per_sample_weights: Any = None) -> Any:
        return F.embedding_bag(
            input,
            self.weight,
            offsets,
            mode=self.mode,
            sparse=self.sparse,
            per_sample_weights=per_sample_weights,
            include_last_offset=self.include_last_offset,
            padding_idx=self.padding_idx,
        )

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode='{self.mode}'"
        if self.sparse:
            s += ", sparse=True"
        if self.include_last_offset:
            s += ", include_last_offset=True"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"
