"""``LSTM``: a multi-layer (optionally bidirectional) LSTM, the whole sequence one tape node.

Each layer and direction runs as one ``jax.lax.scan`` over time (the input
projection of every step is one matmul before the scan); the whole forward,
all layers included, is lifted by ``tp.apply`` into one node, so its VJP is
compiled once per shape. Parameters carry torch's names, shapes and gate
order (input, forget, cell, output), so a torch ``state_dict`` loads as is.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from tensorplay_jax.autograd import apply
from tensorplay_jax.nn import _jax_impl, init
from tensorplay_jax.nn._module import Module
from tensorplay_jax.nn._parameter import Parameter
from tensorplay_jax.tensors import Tensor, next_key, zeros

__all__ = ["LSTM"]


def _direction(
    x: jax.Array, h0: jax.Array, c0: jax.Array, weights: tuple[Any, ...], reverse: bool
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """One layer, one direction over ``x`` (L, N, in): outputs (L, N, H), final h and c."""
    w_ih, w_hh, b_ih, b_hh = weights
    xw = x @ w_ih.T  # every step's input projection at once
    if b_ih is not None:
        xw = xw + b_ih + b_hh

    def step(carry: tuple[jax.Array, jax.Array], xt: jax.Array) -> Any:
        h, c = carry
        i, f, g, o = jnp.split(xt + h @ w_hh.T, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    # reverse=True walks from the last step; ys[t] still belongs to x[t], as in torch.
    (h, c), ys = jax.lax.scan(step, (h0, c0), xw, reverse=reverse)
    return ys, h, c


def lstm(
    x: jax.Array,
    h0: jax.Array,
    c0: jax.Array,
    weights: tuple[tuple[Any, ...], ...],
    num_layers: int,
    directions: int,
    dropout: float,
    key: jax.Array | None,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The stacked LSTM over time-major ``x`` (L, N, in); ``h0``/``c0`` (layers*D, N, H).

    ``weights[layer * directions + d]`` is ``(w_ih, w_hh, b_ih, b_hh)``; with a
    ``key``, dropout ``dropout`` is applied to every layer's output but the last.
    """
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(directions):
            k = layer * directions + d
            ys, h, c = _direction(x, h0[k], c0[k], weights[k], reverse=d == 1)
            outs.append(ys)
            hs.append(h)
            cs.append(c)
        x = outs[0] if directions == 1 else jnp.concatenate(outs, axis=-1)
        if key is not None and layer < num_layers - 1:
            x = _jax_impl.dropout(x, jax.random.fold_in(key, layer), dropout)
    return x, jnp.stack(hs), jnp.stack(cs)


class LSTM(Module):
    """Long short-term memory over a sequence, torch's ``nn.LSTM`` (without ``proj_size``).

    For each step: ``i, f, g, o`` = sigmoid, sigmoid, tanh, sigmoid of
    ``x @ W_ih.T + b_ih + h @ W_hh.T + b_hh`` split in four;
    ``c' = f * c + i * g``, ``h' = o * tanh(c')``. Every weight and bias is
    drawn from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).

    Args:
        input_size: features of each input step.
        hidden_size: features of the hidden state.
        num_layers: stacked LSTMs, each reading the previous one's outputs.
        bias: learn ``bias_ih_l{k}`` and ``bias_hh_l{k}``.
        batch_first: input and output are ``(N, L, features)`` (else ``(L, N, features)``).
        dropout: dropout on each layer's output but the last, in training mode.
        bidirectional: add a reverse-time LSTM per layer (parameters ``..._reverse``);
            outputs concatenate both directions.
        proj_size: only 0.

    Call as ``lstm(input, (h0, c0))`` (state optional, zeros by default);
    returns ``output, (h_n, c_n)`` with ``h_n``/``c_n`` of shape
    ``(num_layers * directions, N, hidden_size)``. Unbatched input
    ``(L, input_size)`` takes and gives state without the ``N`` axis.

    Raises:
        ValueError: ``proj_size`` is not 0, ``dropout`` is outside [0, 1], or
            the input's last dimension is not ``input_size``.

    Example:
        >>> import tensorplay_jax as tp
        >>> lstm = tp.nn.LSTM(4, 8, num_layers=2, batch_first=True)
        >>> out, (h, c) = lstm(tp.randn(3, 5, 4))
        >>> out.shape, h.shape, c.shape
        ((3, 5, 8), (2, 3, 8), (2, 3, 8))
        >>> lstm.weight_ih_l1.shape
        (32, 8)
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        if proj_size:
            raise ValueError(f"LSTM: proj_size={proj_size} is not supported; only 0")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"LSTM: dropout={dropout} must be between 0 and 1")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias, self.batch_first = int(num_layers), bias, batch_first
        self.dropout, self.bidirectional, self.proj_size = float(dropout), bidirectional, 0
        self._names: list[tuple[str, ...]] = []
        h4 = 4 * self.hidden_size
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else self.hidden_size * self.directions
            for suffix in ("", "_reverse")[: self.directions]:
                names = tuple(
                    f"{kind}_l{layer}{suffix}"
                    for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
                )
                shapes = [(h4, width), (h4, self.hidden_size), (h4,), (h4,)]
                for name, shape in list(zip(names, shapes, strict=True))[: 4 if bias else 2]:
                    setattr(self, name, Parameter(zeros(*shape, dtype=dtype)))
                self._names.append(names)
        self.reset_parameters()

    @property
    def directions(self) -> int:
        """2 when bidirectional, else 1."""
        return 2 if self.bidirectional else 1

    def reset_parameters(self) -> None:
        """Redraw every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _weights(self) -> tuple[tuple[Any, ...], ...]:
        return tuple(
            tuple(getattr(self, n) if self.bias or i < 2 else None for i, n in enumerate(names))
            for names in self._names
        )

    def forward(self, input: Any, hx: Any = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if input.shape[-1] != self.input_size:
            raise ValueError(
                f"LSTM: input.size(-1) must be equal to input_size. Expected "
                f"{self.input_size}, got {input.shape[-1]}"
            )
        unbatched = input.ndim == 2
        if unbatched:
            input = input.unsqueeze(1)
            hx = None if hx is None else (hx[0].unsqueeze(1), hx[1].unsqueeze(1))
        elif self.batch_first:
            input = input.transpose(0, 1)
        if hx is None:
            shape = (self.num_layers * self.directions, input.shape[1], self.hidden_size)
            hx = (zeros(*shape, dtype=input.dtype), zeros(*shape, dtype=input.dtype))
        key = next_key() if self.training and self.dropout > 0 and self.num_layers > 1 else None
        out, h, c = apply(
            lstm,
            input,
            hx[0],
            hx[1],
            self._weights(),
            self.num_layers,
            self.directions,
            self.dropout,
            key,
        )
        if unbatched:
            return out.squeeze(1), (h.squeeze(1), c.squeeze(1))
        if self.batch_first:
            out = out.transpose(0, 1)
        return out, (h, c)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        if self.bidirectional:
            s += ", bidirectional=True"
        return s
