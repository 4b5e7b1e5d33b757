"""An RNN whose embedding table and decoder live on a parameter server.

The shape of tensorplay's distributed RNN example: the trainer holds the
recurrent layer; the embedding table and the decoder are ``RemoteModule`` s
on ``ps``. Each step embeds the tokens on ``ps``, runs the RNN here, decodes
on ``ps``, and trains all three with distributed autograd and one
``DistributedOptimizer``. The task: predict the next token of sequences that
count up modulo the vocabulary size.

Run (2 processes: ps, trainer)::

    python -m tensorplay_jax.run --nproc 2 examples/rnn_remote.py --steps 60

Exits non-zero unless the loss falls and every part's parameters were trained.
"""

from __future__ import annotations

import argparse
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc
from tensorplay_jax.distributed.nn import RemoteModule
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tensorplay_jax.nn import functional as F


class EmbeddingTable(tp.nn.Module):
    """Token ids (T, B) -> embeddings (T, B, ninp); lives on the parameter server."""

    def __init__(self, ntoken: int, ninp: int, dropout: float) -> None:
        super().__init__()
        self.drop = tp.nn.Dropout(dropout)
        self.encoder = tp.nn.Embedding(ntoken, ninp)

    def forward(self, tokens: tp.Tensor) -> tp.Tensor:
        return self.drop(self.encoder(tokens))


class Decoder(tp.nn.Module):
    """RNN outputs (T, B, nhid) -> logits (T, B, ntoken); lives on the parameter server."""

    def __init__(self, ntoken: int, nhid: int, dropout: float) -> None:
        super().__init__()
        self.drop = tp.nn.Dropout(dropout)
        self.decoder = tp.nn.Linear(nhid, ntoken)

    def forward(self, output: tp.Tensor) -> tp.Tensor:
        return self.decoder(self.drop(output))


def _rnn_scan(emb, h0, w_ih, b_ih, w_hh):
    def cell(h, x):
        h = jnp.tanh(x @ w_ih.T + b_ih + h @ w_hh.T)
        return h, h

    h_last, outputs = jax.lax.scan(cell, h0, emb)
    return outputs, h_last


class RNN(tp.nn.Module):
    """An Elman RNN, ``h_t = tanh(W_ih x_t + b + W_hh h_{t-1})``; a sequence is one tape node."""

    def __init__(self, ninp: int, nhid: int) -> None:
        super().__init__()
        self.ih = tp.nn.Linear(ninp, nhid)
        self.hh = tp.nn.Linear(nhid, nhid, bias=False)

    def forward(self, emb: tp.Tensor, hidden: tp.Tensor) -> tuple[tp.Tensor, tp.Tensor]:
        return tp.apply(_rnn_scan, emb, hidden, self.ih.weight, self.ih.bias, self.hh.weight)


class RNNModel(tp.nn.Module):
    """Remote embedding table -> local RNN -> remote decoder."""

    def __init__(self, ps: str, ntoken: int, ninp: int, nhid: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.emb_table = RemoteModule(f"{ps}/cpu", EmbeddingTable, args=(ntoken, ninp, dropout))
        self.rnn = RNN(ninp, nhid)
        self.decoder = RemoteModule(f"{ps}/cpu", Decoder, args=(ntoken, nhid, dropout))
        self.nhid = nhid

    def forward(self, tokens: tp.Tensor, hidden: tp.Tensor) -> tuple[tp.Tensor, tp.Tensor]:
        emb = self.emb_table(tokens)  # on ps
        output, hidden = self.rnn(emb, hidden)  # here
        return self.decoder(output), hidden  # on ps

    def parameter_rrefs_by_part(self) -> dict[str, list[rpc.RRef]]:
        return {
            "embedding": self.emb_table.remote_parameters(),
            "rnn": [rpc.RRef(p) for p in self.rnn.parameters()],
            "decoder": self.decoder.remote_parameters(),
        }

    def parameter_rrefs(self) -> list[rpc.RRef]:
        return [r for rrefs in self.parameter_rrefs_by_part().values() for r in rrefs]


def batches(ntoken: int, seq_len: int, batch: int, seed: int):
    """Endless (input, target) pairs of shape (seq_len, batch): counting sequences mod ntoken."""
    rng = np.random.default_rng(seed)
    while True:
        start = rng.integers(0, ntoken, size=batch)
        seq = (start[None, :] + np.arange(seq_len + 1)[:, None]) % ntoken
        yield seq[:-1].astype(np.int32), seq[1:].astype(np.int32)


def trainer(args: argparse.Namespace) -> dict[str, bool]:
    tp.manual_seed(args.seed)
    model = RNNModel("ps", args.ntoken, args.ninp, args.nhid)
    parts = model.parameter_rrefs_by_part()
    opt = DistributedOptimizer(optax.adam(args.lr), model.parameter_rrefs())
    before = {k: [r.to_here().numpy() for r in rrefs] for k, rrefs in parts.items()}
    data = batches(args.ntoken, args.seq_len, args.batch, args.seed)
    hidden = tp.zeros(args.batch, args.nhid)
    losses = []
    for step in range(args.steps):
        x, y = next(data)
        with dist_autograd.context() as ctx:
            hidden = hidden.detach()  # truncated backpropagation through time
            logits, hidden = model(tp.tensor(x), hidden)
            loss = F.cross_entropy(logits.reshape(-1, args.ntoken), tp.tensor(y.reshape(-1)))
            dist_autograd.backward(ctx, [loss])
            opt.step(ctx)
        losses.append(loss.item())
        if step % 10 == 0 or step == args.steps - 1:
            print(f"step {step:3d}  loss {losses[-1]:.4f}", flush=True)
    trained = {
        f"{k} (on {rrefs[0].owner_name()})": all(
            not np.array_equal(b, r.to_here().numpy())
            for b, r in zip(before[k], rrefs, strict=True)
        )
        for k, rrefs in parts.items()
    }
    first, last = np.mean(losses[:3]), np.mean(losses[-3:])
    print(f"loss {first:.4f} -> {last:.4f}", flush=True)
    print("trained: " + ", ".join(f"{k} {v}" for k, v in trained.items()), flush=True)
    return {"the loss halved": bool(last < 0.5 * first)} | {
        f"trained: {k}": v for k, v in trained.items()
    }


def run(argv: list[str] | None = None) -> dict[str, bool]:
    """Start this rank, train (rank 1, the trainer), stop; the trainer's named checks.

    ``argv``: the command-line arguments (default ``sys.argv[1:]``); the parameter
    server returns no checks.
    """
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--ntoken", type=int, default=16)
    p.add_argument("--ninp", type=int, default=16)
    p.add_argument("--nhid", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=8)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rank = int(os.environ["RANK"])
    rpc.init_rpc("ps" if rank == 0 else "trainer", rank=rank, world_size=2)
    checks = trainer(args) if rank == 1 else {}
    rpc.shutdown()
    return checks


def main() -> int:
    return 0 if all(run().values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
