"""``MultiheadAttention``, ``TransformerEncoderLayer`` and ``TransformerEncoder``: torch's
modules, parameters and submodules by torch's names (a torch ``state_dict`` loads as is).
The attention is one tape node (``_jax_attention``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from tensorplay_jax.autograd import apply
from tensorplay_jax.nn import _jax_attention, init
from tensorplay_jax.nn import functional as F
from tensorplay_jax.nn._activation import Dropout
from tensorplay_jax.nn._container import ModuleList
from tensorplay_jax.nn._linear import Linear
from tensorplay_jax.nn._module import Module
from tensorplay_jax.nn._normalization import LayerNorm
from tensorplay_jax.nn._parameter import Parameter
from tensorplay_jax.tensors import Tensor, next_key, zeros

__all__ = ["MultiheadAttention", "TransformerEncoder", "TransformerEncoderLayer"]


class MultiheadAttention(Module):
    """Attention from ``num_heads`` heads in parallel, torch's ``nn.MultiheadAttention``
    (``kdim``/``vdim`` equal to ``embed_dim``; no ``add_bias_kv``/``add_zero_attn``).

    ``forward(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)`` returns ``(output,
    weights)``; inputs are ``(L, N, E)`` (``batch_first``: ``(N, L, E)``; unbatched
    ``(L, E)``). A boolean mask's ``True`` marks a place not attended; a float mask is
    added to the scores.

    Example:
        >>> import tensorplay_jax as tp
        >>> mha = tp.nn.MultiheadAttention(8, 2, batch_first=True)
        >>> x = tp.randn(3, 5, 8)
        >>> out, w = mha(x, x, x)
        >>> out.shape, w.shape
        ((3, 5, 8), (3, 5, 5))
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} "
                f"and num_heads={num_heads} instead"
            )
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if (
            add_bias_kv
            or add_zero_attn
            or kdim not in (None, embed_dim)
            or (vdim not in (None, embed_dim))
        ):
            raise NotImplementedError(
                "MultiheadAttention: add_bias_kv, add_zero_attn and kdim/vdim other than "
                "embed_dim are not supported here"
            )
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, float(dropout)
        self.head_dim, self.batch_first = embed_dim // num_heads, batch_first
        self.in_proj_weight = Parameter(zeros(3 * embed_dim, embed_dim, dtype=dtype))
        if bias:
            self.in_proj_bias = Parameter(zeros(3 * embed_dim, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def forward(
        self,
        query: Any,
        key: Any,
        value: Any,
        key_padding_mask: Any = None,
        need_weights: bool = True,
        attn_mask: Any = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint.")
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if query.shape[-1] != self.embed_dim:
            raise AssertionError(
                f"was expecting embedding dimension of {self.embed_dim}, but got {query.shape[-1]}"
            )
        rng = next_key() if self.training and self.dropout > 0 else None
        out, weights = apply(
            _jax_attention.multi_head_attention,
            query,
            key,
            value,
            self.in_proj_weight,
            self.in_proj_bias,
            self.out_proj.weight,
            self.out_proj.bias,
            attn_mask,
            key_padding_mask,
            rng,
            self.num_heads,
            self.dropout,
            bool(need_weights),
            bool(average_attn_weights),
        )
        if unbatched:
            out = out.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, weights


def _activation(activation: str | Callable[[Any], Any]) -> Callable[[Any], Any]:
    if callable(activation):
        return activation
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class TransformerEncoderLayer(Module):
    """Self-attention and a feed-forward block, each with a residual connection and layer
    normalisation (after, or before with ``norm_first``), torch's
    ``nn.TransformerEncoderLayer``.

    Example:
        >>> import tensorplay_jax as tp
        >>> layer = tp.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
        >>> layer(tp.randn(3, 5, 8)).shape
        (3, 5, 8)
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[Any], Any] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, dtype=dtype
        )
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, dtype=dtype)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, dtype=dtype)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.activation = _activation(activation)

    def _sa_block(self, x: Any, attn_mask: Any, key_padding_mask: Any) -> Any:
        out = self.self_attn(
            x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False
        )[0]
        return self.dropout1(out)

    def _ff_block(self, x: Any) -> Any:
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(
        self,
        src: Any,
        src_mask: Any = None,
        src_key_padding_mask: Any = None,
        is_causal: bool = False,
    ) -> Any:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask))
        return self.norm2(x + self._ff_block(x))


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (``layers.0`` ...), then ``norm`` if given.

    Example:
        >>> import tensorplay_jax as tp
        >>> layer = tp.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)
        >>> tp.nn.TransformerEncoder(layer, num_layers=2)(tp.randn(5, 3, 8)).shape
        (5, 3, 8)
    """

    def __init__(
        self,
        encoder_layer: TransformerEncoderLayer,
        num_layers: int,
        norm: Module | None = None,
        enable_nested_tensor: bool = True,
        mask_check: bool = True,
    ) -> None:
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = num_layers, norm

    def forward(
        self,
        src: Any,
        mask: Any = None,
        src_key_padding_mask: Any = None,
        is_causal: bool | None = None,
    ) -> Any:
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask)
        return out if self.norm is None else self.norm(out)
