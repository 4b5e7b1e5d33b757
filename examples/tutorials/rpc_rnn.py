"""PyTorch's "Getting Started with Distributed RPC Framework", part 2: the distributed
RNN (model parallel), ported.

The embedding table and the decoder live on the parameter server ``ps`` (created
with ``rpc.remote``), the LSTM on the trainer; every forward crosses RPC twice,
``dist_autograd.backward`` reaches both workers and one ``DistributedOptimizer``
steps all parameters. The tutorial's two files (``rnn.py``, ``main.py``) are one here.

The same file runs on tensorplay_jax (the default) and on torch:
``TUTORIAL_BACKEND=torch`` imports torch instead. The backend block below is the
one place the two differ; every other line that differs from the upstream
program is marked ``# port:`` with its reason.

Run (ps, trainer)::

    python examples/tutorials/rpc_rnn.py
    TUTORIAL_BACKEND=torch python examples/tutorials/rpc_rnn.py
"""

import os

# --------- port: the backend (TUTORIAL_BACKEND=torch or tensorplay_jax) ---------
BACKEND = os.environ.get("TUTORIAL_BACKEND", "tensorplay_jax")
if BACKEND == "torch":
    import torch
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.optim as optim
    from torch.distributed.optim import DistributedOptimizer
    from torch.distributed.rpc import RRef
elif BACKEND == "tensorplay_jax":
    import tensorplay_jax as torch
    import tensorplay_jax.distributed.autograd as dist_autograd
    import tensorplay_jax.distributed.rpc as rpc
    import tensorplay_jax.nn as nn
    import tensorplay_jax.optim as optim
    import tensorplay_jax.rpc as mp  # spawn, as torch.multiprocessing's
    from tensorplay_jax.distributed.optim import DistributedOptimizer
    from tensorplay_jax.distributed.rpc import RRef
else:
    raise SystemExit(f"TUTORIAL_BACKEND={BACKEND!r}: choose torch or tensorplay_jax")
# --------- end of the backend block ---------


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
        self.encoder = nn.Embedding(ntoken, ninp)  # port: on the CPU (the tutorial: .cuda())
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)

    def forward(self, input):
        return self.drop(self.encoder(input)).cpu()  # port: input on the CPU (not .cuda())


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
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
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
    ntoken = 7
    ninp = 2

    nhid = 3
    nindices = 6
    nlayers = 4
    hidden = (torch.randn(nlayers, nindices, nhid), torch.randn(nlayers, nindices, nhid))

    model = RNNModel("ps", ntoken, ninp, nhid, nlayers)

    # setup distributed optimizer
    opt = DistributedOptimizer(optim.SGD, model.parameter_rrefs(), lr=0.05)

    criterion = torch.nn.CrossEntropyLoss()

    def get_next_batch():
        for _ in range(5):
            # port: torch.LongTensor(n, m) % k (uninitialized memory; JAX has none)
            data = torch.randint(0, ntoken, (batch, nindices))
            target = torch.randint(0, nindices, (batch, ntoken))  # port: as data
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
    mp.spawn(run_worker, args=(world_size,), nprocs=world_size, join=True)
