"""``LSTM``, ``GRU`` and ``RNN``: multi-layer (optionally bidirectional) recurrent layers,
the whole sequence one tape node.

Each layer and direction runs as one ``jax.lax.scan`` over time (the input
projection of every step is one matmul before the scan); the whole forward,
all layers included, is lifted by ``tp.apply`` into one node, so its VJP is
compiled once per shape. Parameters carry torch's names, shapes and gate
orders (LSTM: input, forget, cell, output; GRU: reset, update, new), so a torch
``state_dict`` loads as is. The three share ``_Recurrent`` (parameters, state, layout);
each names its cell (``_MODE``) and how many gate blocks its weights stack.
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

__all__ = ["GRU", "LSTM", "RNN"]


def _direction(
    x: jax.Array, state: Any, weights: tuple[Any, ...], reverse: bool, mode: str
) -> tuple[jax.Array, Any]:
    """One layer, one direction over ``x`` (L, N, in): outputs (L, N, H) and the final state
    (``(h, c)`` for an LSTM, ``h`` otherwise)."""
    w_ih, w_hh, b_ih, b_hh = weights
    xw = x @ w_ih.T  # every step's input projection at once
    if b_ih is not None:
        # a GRU adds b_hh inside its reset gate's product, the others with the input
        xw = xw + b_ih if mode == "GRU" else xw + b_ih + b_hh

    def lstm_step(carry: tuple[jax.Array, jax.Array], xt: jax.Array) -> Any:
        h, c = carry
        i, f, g, o = jnp.split(xt + h @ w_hh.T, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def gru_step(h: jax.Array, xt: jax.Array) -> Any:
        hw = h @ w_hh.T if b_hh is None else h @ w_hh.T + b_hh
        xr, xz, xn = jnp.split(xt, 3, axis=-1)
        hr, hz, hn = jnp.split(hw, 3, axis=-1)
        r, z = jax.nn.sigmoid(xr + hr), jax.nn.sigmoid(xz + hz)
        h = (1 - z) * jnp.tanh(xn + r * hn) + z * h
        return h, h

    def rnn_step(h: jax.Array, xt: jax.Array) -> Any:
        pre = xt + h @ w_hh.T
        h = jnp.tanh(pre) if mode == "RNN_TANH" else jax.nn.relu(pre)
        return h, h

    step = {"LSTM": lstm_step, "GRU": gru_step}.get(mode, rnn_step)
    # reverse=True walks from the last step; ys[t] still belongs to x[t], as in torch.
    state, ys = jax.lax.scan(step, state, xw, reverse=reverse)
    return ys, state


def recurrent(
    x: jax.Array,
    h0: jax.Array,
    c0: jax.Array | None,
    weights: tuple[tuple[Any, ...], ...],
    num_layers: int,
    directions: int,
    dropout: float,
    key: jax.Array | None,
    mode: str,
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """The stacked layer ``mode`` (``"LSTM"``, ``"GRU"``, ``"RNN_TANH"``, ``"RNN_RELU"``) over
    time-major ``x`` (L, N, in); ``h0`` (and ``c0`` for an LSTM) (layers*D, N, H).

    ``weights[layer * directions + d]`` is ``(w_ih, w_hh, b_ih, b_hh)``; with a
    ``key``, dropout ``dropout`` is applied to every layer's output but the last.
    """
    hs, cs = [], []
    for layer in range(num_layers):
        outs = []
        for d in range(directions):
            k = layer * directions + d
            state0 = (h0[k], c0[k]) if mode == "LSTM" else h0[k]
            ys, state = _direction(x, state0, weights[k], d == 1, mode)
            outs.append(ys)
            if mode == "LSTM":
                hs.append(state[0])
                cs.append(state[1])
            else:
                hs.append(state)
        x = outs[0] if directions == 1 else jnp.concatenate(outs, axis=-1)
        if key is not None and layer < num_layers - 1:
            x = _jax_impl.dropout(x, jax.random.fold_in(key, layer), dropout)
    return x, jnp.stack(hs), (jnp.stack(cs) if cs else None)


class _Recurrent(Module):
    """A stacked (optionally bidirectional) recurrent layer with torch's parameters, state
    and layouts; a subclass names its cell (``_MODE``) and its gate blocks (``_GATES``).

    ``input`` is ``(L, N, input_size)`` (``batch_first``: ``(N, L, input_size)``; unbatched
    ``(L, input_size)`` takes and gives state without the ``N`` axis); the state is
    ``(num_layers * directions, N, hidden_size)``, zeros when not given.
    """

    _MODE = ""
    _GATES = 1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        dtype: Any = None,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{name}: dropout={dropout} must be between 0 and 1")
        self.input_size, self.hidden_size = int(input_size), int(hidden_size)
        self.num_layers, self.bias, self.batch_first = int(num_layers), bias, batch_first
        self.dropout, self.bidirectional = float(dropout), bidirectional
        self._names: list[tuple[str, ...]] = []
        rows = self._GATES * self.hidden_size
        for layer in range(self.num_layers):
            width = self.input_size if layer == 0 else self.hidden_size * self.directions
            for suffix in ("", "_reverse")[: self.directions]:
                names = tuple(
                    f"{kind}_l{layer}{suffix}"
                    for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
                )
                shapes = [(rows, width), (rows, self.hidden_size), (rows,), (rows,)]
                for pname, shape in list(zip(names, shapes, strict=True))[: 4 if bias else 2]:
                    setattr(self, pname, Parameter(zeros(*shape, dtype=dtype)))
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

    def _run(self, input: Any, h0: Any, c0: Any) -> tuple[Tensor, Tensor, Tensor | None]:
        """The layer over ``input`` from state ``h0`` (and ``c0``); output and final state in
        the caller's layout."""
        if input.shape[-1] != self.input_size:
            raise ValueError(
                f"{type(self).__name__}: input.size(-1) must be equal to input_size. Expected "
                f"{self.input_size}, got {input.shape[-1]}"
            )
        unbatched = input.ndim == 2
        if unbatched:
            input = input.unsqueeze(1)
            h0 = None if h0 is None else h0.unsqueeze(1)
            c0 = None if c0 is None else c0.unsqueeze(1)
        elif self.batch_first:
            input = input.transpose(0, 1)
        shape = (self.num_layers * self.directions, input.shape[1], self.hidden_size)
        if h0 is None:
            h0 = zeros(*shape, dtype=input.dtype)
        if c0 is None and self._MODE == "LSTM":
            c0 = zeros(*shape, dtype=input.dtype)
        key = next_key() if self.training and self.dropout > 0 and self.num_layers > 1 else None
        out, h, c = apply(
            recurrent,
            input,
            h0,
            c0,
            self._weights(),
            self.num_layers,
            self.directions,
            self.dropout,
            key,
            self._MODE,
        )
        if unbatched:
            return out.squeeze(1), h.squeeze(1), None if c is None else c.squeeze(1)
        if self.batch_first:
            out = out.transpose(0, 1)
        return out, h, c

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


class LSTM(_Recurrent):
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

    _MODE, _GATES = "LSTM", 4

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
        if proj_size:
            raise ValueError(f"LSTM: proj_size={proj_size} is not supported; only 0")
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            dtype=dtype,
        )
        self.proj_size = 0

    def forward(self, input: Any, hx: Any = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        h0, c0 = (None, None) if hx is None else hx
        out, h, c = self._run(input, h0, c0)
        return out, (h, c)


class GRU(_Recurrent):
    """Gated recurrent units over a sequence, torch's ``nn.GRU``.

    For each step: ``r, z`` = sigmoid of ``x @ W_i.T + b_i + h @ W_h.T + b_h`` (their
    blocks), ``n = tanh(x @ W_in.T + b_in + r * (h @ W_hn.T + b_hn))``,
    ``h' = (1 - z) * n + z * h``. Arguments, parameters and layouts as ``LSTM``'s
    (without ``proj_size``); call as ``gru(input, h0)``, which returns ``output, h_n``.

    Example:
        >>> import tensorplay_jax as tp
        >>> gru = tp.nn.GRU(4, 8, batch_first=True)
        >>> out, h = gru(tp.randn(3, 5, 4))
        >>> out.shape, h.shape, gru.weight_hh_l0.shape
        ((3, 5, 8), (1, 3, 8), (24, 8))
    """

    _MODE, _GATES = "GRU", 3

    def forward(self, input: Any, hx: Any = None) -> tuple[Tensor, Tensor]:
        out, h, _ = self._run(input, hx, None)
        return out, h


class RNN(_Recurrent):
    """An Elman RNN over a sequence, torch's ``nn.RNN``: ``h' = tanh(x @ W_ih.T + b_ih +
    h @ W_hh.T + b_hh)`` (``nonlinearity="relu"``: ReLU). Arguments, parameters and
    layouts as ``LSTM``'s; call as ``rnn(input, h0)``, which returns ``output, h_n``.

    Example:
        >>> import tensorplay_jax as tp
        >>> out, h = tp.nn.RNN(4, 8, num_layers=2, nonlinearity="relu")(tp.randn(5, 3, 4))
        >>> out.shape, h.shape
        ((5, 3, 8), (2, 3, 8))
    """

    _GATES = 1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        nonlinearity: str = "tanh",
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        *,
        dtype: Any = None,
    ) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'."
            )
        self.nonlinearity = nonlinearity
        self._MODE = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            bias,
            batch_first,
            dropout,
            bidirectional,
            dtype=dtype,
        )
        self.nonlinearity = nonlinearity
        self._MODE = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"

    def forward(self, input: Any, hx: Any = None) -> tuple[Tensor, Tensor]:
        out, h, _ = self._run(input, hx, None)
        return out, h

    def extra_repr(self) -> str:
        s = super().extra_repr()
        return s if self.nonlinearity == "tanh" else s + ", nonlinearity=relu"
