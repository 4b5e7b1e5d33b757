"""PyTorch's "Getting Started with Distributed RPC Framework", part 2: the distributed
RNN (model parallel), ported.

The tutorial's code with its imports changed and nothing in its structure: the
embedding table and the decoder live on the parameter server ``ps`` (created
with ``rpc.remote``), the LSTM on the trainer; every forward crosses RPC twice,
``dist_autograd.backward`` reaches both workers and one ``DistributedOptimizer``
steps all parameters. The tutorial's two files (``rnn.py``, ``main.py``) are one here.

Differences, each marked ``# port:`` below: tensorplay_jax has no ``nn.LSTM``, so a
multi-layer LSTM (one tape node per call, over ``jax.lax.scan``) is written here;
``torch.LongTensor(n, m)`` (uninitialized memory) is ``torch.randint``; the
tutorial keeps the embedding on GPU (``.cuda()``/``.cpu()``), this port on the
default device.

Run (ps, trainer)::

    python examples/tutorials/rpc_rnn.py
"""

import functools
import os

import jax
import jax.numpy as jnp
import optax

import tensorplay_jax as torch  # port: import torch
import tensorplay_jax.distributed.autograd as dist_autograd
import tensorplay_jax.distributed.rpc as rpc
import tensorplay_jax.nn as nn
from tensorplay_jax.distributed.optim import DistributedOptimizer
from tensorplay_jax.distributed.rpc import RRef
from tensorplay_jax.rpc import spawn  # port: torch.multiprocessing.spawn

# --------- port: nn.LSTM ---------


@functools.partial(jax.jit, static_argnums=4)  # compiled once per shape: one tape node a call
def _lstm(x, h0, c0, dropout_key, dropout, *weights):
    """Multi-layer LSTM over (T, B, ninp); weights are (w_ih, w_hh, b_ih, b_hh) per layer."""
    hs, cs = [], []
    for layer in range(len(weights) // 4):
        w_ih, w_hh, b_ih, b_hh = weights[4 * layer : 4 * layer + 4]

        def cell(carry, xt, w_ih=w_ih, w_hh=w_hh, b_ih=b_ih, b_hh=b_hh):
            h, c = carry
            i, f, g, o = jnp.split(xt @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h

        (h, c), x = jax.lax.scan(cell, (h0[layer], c0[layer]), x)
        hs.append(h)
        cs.append(c)
        if dropout > 0 and layer < len(weights) // 4 - 1:  # between layers, as nn.LSTM
            keep = jax.random.bernoulli(
                jax.random.fold_in(dropout_key, layer), 1 - dropout, x.shape
            )
            x = jnp.where(keep, x / (1 - dropout), 0.0)
    return x, jnp.stack(hs), jnp.stack(cs)


class LSTM(nn.Module):
    def __init__(self, input_size, hidden_size, num_layers=1, dropout=0.0):
        super().__init__()
        self.dropout = dropout
        k = 1.0 / hidden_size**0.5
        self.weights = []
        for layer in range(num_layers):
            n_in = input_size if layer == 0 else hidden_size
            g = 4 * hidden_size
            shapes = [
                ("w_ih", (g, n_in)),
                ("w_hh", (g, hidden_size)),
                ("b_ih", (g,)),
                ("b_hh", (g,)),
            ]
            for name, shape in shapes:
                p = nn.Parameter(torch.rand(*shape) * 2 * k - k)
                setattr(self, f"{name}_l{layer}", p)
                self.weights.append(p)

    def forward(self, input, hidden):
        h0, c0 = hidden
        p = self.dropout if self.training else 0.0
        key = jax.random.PRNGKey(int(torch.randint(0, 2**31 - 1, (1,)).item()))
        out, h, c = torch.apply(_lstm, input, h0, c0, key, p, *self.weights)
        return out, (h, c)


# --------- rnn.py ---------


def _call_method(method, rref, *args, **kwargs):
    r"""
    a helper function to call a method on the given RRef
    """
    return method(rref.local_value(), *args, **kwargs)


def _remote_method(method, rref, *args, **kwargs):
    r"""
    a helper function to run method on the owner of rref and fetch back the
    result using RPC
    """
    args = [method, rref] + list(args)  # noqa: RUF005  (the tutorial's line)
    return rpc.rpc_sync(rref.owner(), _call_method, args=args, kwargs=kwargs)


def _parameter_rrefs(module):
    r"""
    Create one RRef for each parameter in the given local module, and return a
    list of RRefs.
    """
    param_rrefs = []
    for param in module.parameters():
        param_rrefs.append(RRef(param))
    return param_rrefs


class EmbeddingTable(nn.Module):
    r"""
    Encoding layers of the RNNModel
    """

    def __init__(self, ntoken, ninp, dropout):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)  # port: .cuda()
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)

    def forward(self, input):
        return self.drop(self.encoder(input))  # port: input.cuda(), .cpu()


class Decoder(nn.Module):
    r"""
    Decoding layers of the RNNModel
    """

    def __init__(self, ntoken, nhid, dropout):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, output):
        return self.decoder(self.drop(output))


class RNNModel(nn.Module):
    r"""
    A distributed RNN model which puts embedding table and decoder parameters on
    a remote parameter server, and locally holds parameters for the LSTM module.
    """

    def __init__(self, ps, ntoken, ninp, nhid, nlayers, dropout=0.5):
        super().__init__()

        # setup embedding table remotely
        self.emb_table_rref = rpc.remote(ps, EmbeddingTable, args=(ntoken, ninp, dropout))
        # setup LSTM locally
        self.rnn = LSTM(ninp, nhid, nlayers, dropout=dropout)  # port: nn.LSTM
        # setup decoder remotely
        self.decoder_rref = rpc.remote(ps, Decoder, args=(ntoken, nhid, dropout))

    def forward(self, input, hidden):
        # pass input to the remote embedding table and fetch emb tensor back
        emb = _remote_method(EmbeddingTable.forward, self.emb_table_rref, input)
        output, hidden = self.rnn(emb, hidden)
        # pass output to the remote decoder and get the decoded output back
        decoded = _remote_method(Decoder.forward, self.decoder_rref, output)
        return decoded, hidden

    def parameter_rrefs(self):
        remote_params = []
        # get RRefs of embedding table
        remote_params.extend(_remote_method(_parameter_rrefs, self.emb_table_rref))
        # create RRefs for local parameters
        remote_params.extend(_parameter_rrefs(self.rnn))
        # get RRefs of decoder
        remote_params.extend(_remote_method(_parameter_rrefs, self.decoder_rref))
        return remote_params


# --------- main.py ---------


def run_trainer():
    batch = 5
    ntoken = 10
    ninp = 2

    nhid = 3
    nindices = 3
    nlayers = 4
    hidden = (torch.randn(nlayers, nindices, nhid), torch.randn(nlayers, nindices, nhid))

    model = RNNModel("ps", ntoken, ninp, nhid, nlayers)

    # setup distributed optimizer
    opt = DistributedOptimizer(
        optax.sgd(learning_rate=0.05), model.parameter_rrefs()
    )  # port: optim.SGD

    criterion = torch.nn.CrossEntropyLoss()

    def get_next_batch():
        for _ in range(5):
            data = torch.randint(
                0, ntoken, (batch, nindices)
            )  # port: torch.LongTensor(...) % ntoken
            target = torch.randint(0, nindices, (batch, ntoken))  # port: ... % nindices
            yield data, target

    # train for 10 iterations
    for epoch in range(10):
        for data, target in get_next_batch():
            # create distributed autograd context
            with dist_autograd.context() as context_id:
                hidden[0].detach_()
                hidden[1].detach_()
                output, hidden = model(data, hidden)
                loss = criterion(output, target)
                # run distributed backward pass
                dist_autograd.backward(context_id, [loss])
                # run distributed optimizer
                opt.step(context_id)
                # not necessary to zero grads since they are
                # accumulated into the distributed autograd context
                # which is reset every iteration.
        print(f"Training epoch {epoch} loss {loss.item():.4f}", flush=True)  # port: + loss


def run_worker(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ.setdefault("MASTER_PORT", "29500")  # port: a test runs it on a free port
    if rank == 1:
        rpc.init_rpc("trainer", rank=rank, world_size=world_size)
        run_trainer()
    else:
        rpc.init_rpc("ps", rank=rank, world_size=world_size)
        # parameter server does nothing
        pass

    # block until all rpcs finish
    rpc.shutdown()


if __name__ == "__main__":
    world_size = 2
    spawn(run_worker, args=(world_size,), nprocs=world_size, join=True)
