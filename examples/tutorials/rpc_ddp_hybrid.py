"""PyTorch's "Combining Distributed DataParallel with Distributed RPC Framework", ported.

Two trainers train a hybrid model: the sparse part, an ``nn.EmbeddingBag``, lives
on the parameter server ``ps`` behind a ``RemoteModule``; the dense part, an
``nn.Linear``, is replicated on both trainers with ``DistributedDataParallel``
over their own process group. One ``dist_autograd.backward`` goes through both:
DDP averages the dense gradients across the trainers while distributed autograd
carries the embedding's gradients to the server, and one ``DistributedOptimizer``
steps the remote embedding and the local linear layer. The master starts the
training on the trainers over RPC.

The same file runs on tensorplay_jax (the default) and on torch:
``TUTORIAL_BACKEND=torch`` imports torch instead. The backend block below is the
one place the two differ; every other line that differs from the upstream
program is marked ``# port:`` with its reason: the model runs on the CPU (no
``.cuda``), the batches are drawn once from a seed and replayed every epoch (so
that the loss can fall; upstream draws fresh random targets each epoch),
``--epochs`` bounds the run, and the trainers print their loss and a checksum of
their DDP replica and return both to the master; ``run()`` runs one rank in a job
that a launcher started (``RANK`` set) and returns them on the master.

Run (trainer0, trainer1, master, ps)::

    python examples/tutorials/rpc_ddp_hybrid.py
    TUTORIAL_BACKEND=torch python examples/tutorials/rpc_ddp_hybrid.py
"""

import argparse
import os
import random

# --------- port: the backend (TUTORIAL_BACKEND=torch or tensorplay_jax) ---------
BACKEND = os.environ.get("TUTORIAL_BACKEND", "tensorplay_jax")
if BACKEND == "torch":
    import torch
    import torch.distributed as dist
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    import torch.optim as optim
    from torch.distributed.nn import RemoteModule
    from torch.distributed.optim import DistributedOptimizer
    from torch.distributed.rpc import RRef
    from torch.nn.parallel import DistributedDataParallel as DDP

    RpcBackendOptions = rpc.TensorPipeRpcBackendOptions
elif BACKEND == "tensorplay_jax":
    import tensorplay_jax as torch
    import tensorplay_jax.distributed as dist
    import tensorplay_jax.distributed.autograd as dist_autograd
    import tensorplay_jax.distributed.rpc as rpc
    import tensorplay_jax.optim as optim
    import tensorplay_jax.rpc as mp  # spawn, as torch.multiprocessing's
    from tensorplay_jax.distributed.nn import RemoteModule
    from tensorplay_jax.distributed.optim import DistributedOptimizer
    from tensorplay_jax.distributed.rpc import RRef
    from tensorplay_jax.nn.parallel import DistributedDataParallel as DDP

    RpcBackendOptions = rpc.GrpcRpcBackendOptions
else:
    raise SystemExit(f"TUTORIAL_BACKEND={BACKEND!r}: choose torch or tensorplay_jax")
# --------- end of the backend block ---------

NUM_EMBEDDINGS = 100
EMBEDDING_DIM = 16


def _ports():
    # port: the rendezvous ports come from MASTER_PORT (29500 by default, upstream's
    # tcp://localhost:29500 for the process group), so a test can move them; RPC meets
    # two ports above it (upstream: 29501), since tensorplay_jax's init_process_group
    # also takes the next port (JAX's coordination service)
    pg_port = int(os.environ.get("MASTER_PORT", "29500"))
    return pg_port, pg_port + 2


class HybridModel(torch.nn.Module):
    r"""
    The model consists of a sparse part and a dense part.
    1) The dense part is an nn.Linear module that is replicated across all trainers using
       DistributedDataParallel.
    2) The sparse part is a Remote Module that holds an nn.EmbeddingBag on the parameter server.
    This remote model can get a Remote Reference to the embedding table on the parameter server.
    """

    def __init__(self, remote_emb_module, device):
        super().__init__()
        self.remote_emb_module = remote_emb_module
        # port: on the CPU, so no .cuda(device) and no device_ids
        self.fc = DDP(torch.nn.Linear(16, 8))
        self.device = device

    def forward(self, indices, offsets):
        emb_lookup = self.remote_emb_module.forward(indices, offsets)
        return self.fc(emb_lookup)  # port: the CPU, so no .cuda(self.device)


def _run_trainer(remote_emb_module, rank, epochs):
    r"""
    Each trainer runs a forward pass which involves an embedding lookup on the
    parameter server and running nn.Linear locally. During the backward pass,
    DDP is responsible for aggregating the gradients for the dense part
    (nn.Linear) and distributed autograd ensures gradients updates are
    propagated to the parameter server.
    """

    # Setup the model.
    model = HybridModel(remote_emb_module, rank)

    # Retrieve all model parameters as rrefs for DistributedOptimizer.

    # Retrieve parameters for embedding table.
    model_parameter_rrefs = model.remote_emb_module.remote_parameters()

    # model.fc.parameters() only includes local parameters.
    # NOTE: Cannot call model.parameters() here,
    # because this will call remote_emb_module.parameters(),
    # which supports remote_parameters() but not parameters().
    for param in model.fc.parameters():
        model_parameter_rrefs.append(RRef(param))

    # Setup distributed optimizer
    opt = DistributedOptimizer(
        optim.SGD,
        model_parameter_rrefs,
        lr=0.05,
    )

    criterion = torch.nn.CrossEntropyLoss()

    def get_next_batch(rank):
        for _ in range(10):
            num_indices = random.randint(20, 50)
            # port: randint for LongTensor(n).random_(0, N) (the same draw; JAX has no
            # uninitialized memory to fill)
            indices = torch.randint(0, NUM_EMBEDDINGS, (num_indices,))

            # Generate offsets.
            offsets = []
            start = 0
            batch_size = 0
            while start < num_indices:
                offsets.append(start)
                start += random.randint(1, 10)
                batch_size += 1

            offsets_tensor = torch.tensor(offsets)  # port: tensor() for LongTensor(list)
            target = torch.randint(0, 8, (batch_size,))  # port: the CPU, and randint
            yield indices, offsets_tensor, target

    # port: the batches are drawn once, from a seed of the trainer's own, and replayed
    # each epoch, so that the model can fit them and the loss falls
    random.seed(rank)
    torch.manual_seed(rank)
    batches = list(get_next_batch(rank))

    # Train for `epochs` epochs (port: upstream trains 100)
    losses = []  # port: each epoch's mean loss, returned with the checksum
    for epoch in range(epochs):
        total = 0.0  # port: the epoch's mean loss is printed
        # create distributed autograd context
        for indices, offsets, target in batches:
            with dist_autograd.context() as context_id:
                output = model(indices, offsets)
                loss = criterion(output, target)

                # Run distributed backward pass
                dist_autograd.backward(context_id, [loss])

                # Tun distributed optimizer
                opt.step(context_id)

                # Not necessary to zero grads as each iteration creates a different
                # distributed autograd context which hosts different grads
            total += loss.item()
        losses.append(total / len(batches))
        print(f"Training done for epoch {epoch} loss {losses[-1]:.4f}")
    # port: the DDP replicas stay equal; each trainer prints its replica's checksum
    checksum = sum(float(p.detach().sum()) for p in model.fc.parameters())
    print(f"trainer{rank} dense checksum {checksum:.6f}")
    return {"losses": losses, "checksum": checksum}


def run_worker(rank, world_size, epochs):
    r"""
    A wrapper function that initializes RPC, calls the function, and shuts down
    RPC.
    """
    trained = None  # port: on the master, what each trainer returned

    # We need to use different port numbers in TCP init_method for init_rpc and
    # init_process_group to avoid port conflicts.
    pg_port, rpc_port = _ports()  # port: see _ports
    rpc_backend_options = RpcBackendOptions()
    rpc_backend_options.init_method = f"tcp://localhost:{rpc_port}"

    # Rank 2 is master, 3 is ps and 0 and 1 are trainers.
    if rank == 2:
        rpc.init_rpc(
            "master",
            rank=rank,
            world_size=world_size,
            rpc_backend_options=rpc_backend_options,
        )

        remote_emb_module = RemoteModule(
            "ps",
            torch.nn.EmbeddingBag,
            args=(NUM_EMBEDDINGS, EMBEDDING_DIM),
            kwargs={"mode": "sum"},
        )

        # Run the training loop on trainers.
        futs = []
        for trainer_rank in [0, 1]:
            trainer_name = f"trainer{trainer_rank}"
            fut = rpc.rpc_async(
                trainer_name, _run_trainer, args=(remote_emb_module, trainer_rank, epochs)
            )
            futs.append(fut)

        # Wait for all training to finish.
        trained = {f"trainer{r}": fut.wait() for r, fut in enumerate(futs)}  # port: returned
    elif rank <= 1:
        # Initialize process group for Distributed DataParallel on trainers.
        dist.init_process_group(
            backend="gloo", rank=rank, world_size=2, init_method=f"tcp://localhost:{pg_port}"
        )

        # Initialize RPC.
        trainer_name = f"trainer{rank}"
        rpc.init_rpc(
            trainer_name,
            rank=rank,
            world_size=world_size,
            rpc_backend_options=rpc_backend_options,
        )

        # Trainer just waits for RPCs from master.
    else:
        rpc.init_rpc(
            "ps",
            rank=rank,
            world_size=world_size,
            rpc_backend_options=rpc_backend_options,
        )
        # parameter server do nothing
        pass

    # block until all rpcs finish
    rpc.shutdown()
    return trained


def _parser():
    # port: --epochs bounds the run (upstream: 100 epochs)
    parser = argparse.ArgumentParser(description="DDP with the distributed RPC framework")
    parser.add_argument("--epochs", type=int, default=100)
    return parser


def run(argv=None):
    """port: this rank (``RANK``) of the 4-process job a launcher started; on the master,
    ``{"trainer0": {"losses": [...], "checksum": ...}, "trainer1": ...}``, else None."""
    args = _parser().parse_args(argv)
    return run_worker(int(os.environ["RANK"]), 4, args.epochs)


if __name__ == "__main__":
    args = _parser().parse_args()
    # 2 trainers, 1 parameter server, 1 master.
    world_size = 4
    mp.spawn(run_worker, args=(world_size, args.epochs), nprocs=world_size, join=True)
