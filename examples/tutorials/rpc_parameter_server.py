"""PyTorch's "Implementing a Parameter Server Using Distributed RPC Framework", ported.

The parameter server is created once by ``get_parameter_server`` under the
script's ``global_lock``; trainers reach it through an RRef, train with
distributed autograd and a ``DistributedOptimizer``, and ``rpc.shutdown()`` makes
the server wait for them.

The same file runs on tensorplay_jax (the default) and on torch:
``TUTORIAL_BACKEND=torch`` imports torch instead. The backend block below is the
one place the two differ; every other line that differs from the upstream
program is marked ``# port:`` with its reason: torchvision is not installed, so a
synthetic MNIST (``SyntheticMNIST``) and a small ``DataLoader`` replace
``datasets.MNIST`` and ``torch.utils.data.DataLoader`` on both backends;
``--num_batches`` bounds each epoch so the example runs small.

Run one process per rank, as the tutorial does (rank 0 is the server)::

    python examples/tutorials/rpc_parameter_server.py --world_size 3 --rank 0 &
    python examples/tutorials/rpc_parameter_server.py --world_size 3 --rank 1 &
    python examples/tutorials/rpc_parameter_server.py --world_size 3 --rank 2
"""

import argparse
import os
from threading import Lock

import numpy as np

# --------- port: the backend (TUTORIAL_BACKEND=torch or tensorplay_jax) ---------
BACKEND = os.environ.get("TUTORIAL_BACKEND", "tensorplay_jax")
if BACKEND == "torch":
    import torch
    import torch.distributed.autograd as dist_autograd
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    import torch.nn as nn
    import torch.nn.functional as F
    from torch import optim
    from torch.distributed.optim import DistributedOptimizer
elif BACKEND == "tensorplay_jax":
    import multiprocessing as mp  # Process and set_start_method, as torch.multiprocessing's

    import tensorplay_jax as torch
    import tensorplay_jax.distributed.autograd as dist_autograd
    import tensorplay_jax.distributed.rpc as rpc
    import tensorplay_jax.nn as nn
    import tensorplay_jax.nn.functional as F
    from tensorplay_jax import optim
    from tensorplay_jax.distributed.optim import DistributedOptimizer
else:
    raise SystemExit(f"TUTORIAL_BACKEND={BACKEND!r}: choose torch or tensorplay_jax")
# --------- end of the backend block ---------

# --------- MNIST Network to train, from pytorch/examples -----


class Net(nn.Module):
    def __init__(self, num_gpus=0):
        super().__init__()
        print(f"Using {num_gpus} GPUs to train")
        self.num_gpus = num_gpus
        if torch.accelerator.is_available() and self.num_gpus > 0:
            acc = torch.accelerator.current_accelerator()
            device = torch.device(f"{acc}:0")
        else:
            device = torch.device("cpu")
        print(f"Putting first 2 convs on {device!s}")
        # Put conv layers on the first accelerator device
        self.conv1 = nn.Conv2d(1, 32, 3, 1).to(device)
        self.conv2 = nn.Conv2d(32, 64, 3, 1).to(device)
        # Put rest of the network on the 2nd accelerator device, if there is one
        if torch.accelerator.is_available() and self.num_gpus > 0:
            acc = torch.accelerator.current_accelerator()
            device = torch.device(f"{acc}:1")

        print(f"Putting rest of layers on {device!s}")
        self.dropout1 = nn.Dropout2d(0.25).to(device)
        self.dropout2 = nn.Dropout2d(0.5).to(device)
        self.fc1 = nn.Linear(9216, 128).to(device)
        self.fc2 = nn.Linear(128, 10).to(device)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.max_pool2d(x, 2)

        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        # Move tensor to next device if necessary
        next_device = next(self.fc1.parameters()).device
        x = x.to(next_device)

        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


# --------- Helper Methods --------------------


# On the local node, call a method with first arg as the value held by the
# RRef. Other args are passed in as arguments to the function called.
# Useful for calling instance methods.
def call_method(method, rref, *args, **kwargs):
    return method(rref.local_value(), *args, **kwargs)


# Given an RRef, return the result of calling the passed in method on the value
# held by the RRef. This call is done on the remote node that owns the RRef.
def remote_method(method, rref, *args, **kwargs):
    args = [method, rref] + list(args)  # noqa: RUF005  (the tutorial's line)
    return rpc.rpc_sync(rref.owner(), call_method, args=args, kwargs=kwargs)


# --------- Parameter Server --------------------
class ParameterServer(nn.Module):
    def __init__(self, num_gpus=0):
        super().__init__()
        model = Net(num_gpus=num_gpus)
        self.model = model
        if torch.accelerator.is_available() and num_gpus > 0:
            acc = torch.accelerator.current_accelerator()
            self.input_device = torch.device(f"{acc}:0")
        else:
            self.input_device = torch.device("cpu")

    def forward(self, inp):
        inp = inp.to(self.input_device)
        out = self.model(inp)
        # This output is forwarded over RPC: move it to the CPU.
        out = out.to("cpu")
        return out

    # Use dist autograd to retrieve gradients accumulated for this model.
    # Primarily used for verification.
    def get_dist_gradients(self, cid):
        grads = dist_autograd.get_gradients(cid)
        cpu_grads = {}
        for k, v in grads.items():
            k_cpu, v_cpu = k.to("cpu"), v.to("cpu")
            cpu_grads[k_cpu] = v_cpu
        return cpu_grads

    # Wrap local parameters in a RRef. Needed for building the
    # DistributedOptimizer which optimizes paramters remotely.
    def get_param_rrefs(self):
        param_rrefs = [rpc.RRef(param) for param in self.model.parameters()]
        return param_rrefs


param_server = None
global_lock = Lock()


def get_parameter_server(num_gpus=0):
    global param_server
    # Ensure that we get only one handle to the ParameterServer.
    with global_lock:
        if not param_server:
            # construct it once
            param_server = ParameterServer(num_gpus=num_gpus)
        return param_server


def run_parameter_server(rank, world_size):
    # The parameter server just acts as a host for the model and responds to
    # requests from trainers. rpc.shutdown() will wait for all workers to
    # complete by default, which here means the trainers.
    print("PS master initializing RPC")
    rpc.init_rpc(name="parameter_server", rank=rank, world_size=world_size)
    print("RPC initialized! Running parameter server...")
    rpc.shutdown()
    print("RPC shutdown on parameter server.")


# --------- Trainers --------------------


# nn.Module corresponding to the network trained by this trainer. The
# forward() method simply invokes the network on the given parameter server.
class TrainerNet(nn.Module):
    def __init__(self, num_gpus=0):
        super().__init__()
        self.num_gpus = num_gpus
        self.param_server_rref = rpc.remote(
            "parameter_server", get_parameter_server, args=(num_gpus,)
        )

    def get_global_param_rrefs(self):
        remote_params = remote_method(ParameterServer.get_param_rrefs, self.param_server_rref)
        return remote_params

    def forward(self, x):
        model_output = remote_method(ParameterServer.forward, self.param_server_rref, x)
        return model_output


def run_training_loop(rank, num_gpus, train_loader, test_loader):
    # Runs the typical neural network forward + backward + optimizer step, but
    # in a distributed fashion.
    net = TrainerNet(num_gpus=num_gpus)
    # Build DistributedOptimizer.
    param_rrefs = net.get_global_param_rrefs()
    opt = DistributedOptimizer(optim.SGD, param_rrefs, lr=0.03)
    for i, (data, target) in enumerate(train_loader):
        with dist_autograd.context() as cid:
            model_output = net(data)
            target = target.to(model_output.device)
            loss = F.nll_loss(model_output, target)
            if i % 5 == 0:
                print(f"Rank {rank} training batch {i} loss {loss.item()}")
            dist_autograd.backward(cid, [loss])
            # Ensure that dist autograd ran successfully and gradients were
            # returned.
            assert (
                remote_method(ParameterServer.get_dist_gradients, net.param_server_rref, cid) != {}
            )
            opt.step(cid)

    print("Training complete!")
    print("Getting accuracy....")
    get_accuracy(test_loader, net)


def get_accuracy(test_loader, model):
    model.eval()
    correct_sum = 0
    # Use GPU to evaluate if possible
    if torch.accelerator.is_available() and model.num_gpus > 0:
        acc = torch.accelerator.current_accelerator()
        device = torch.device(f"{acc}:0")
    else:
        device = torch.device("cpu")
    with torch.no_grad():
        for _i, (data, target) in enumerate(test_loader):
            out = model(data)
            pred = out.argmax(dim=1, keepdim=True)
            pred, target = pred.to(device), target.to(device)
            correct = pred.eq(target.view_as(pred)).sum().item()
            correct_sum += correct

    print(f"Accuracy {correct_sum / len(test_loader.dataset)}")


# Main loop for trainers.
def run_worker(rank, world_size, num_gpus, train_loader, test_loader):
    print(f"Worker rank {rank} initializing RPC")
    rpc.init_rpc(name=f"trainer_{rank}", rank=rank, world_size=world_size)

    print(f"Worker {rank} done initializing RPC")

    run_training_loop(rank, num_gpus, train_loader, test_loader)
    rpc.shutdown()


# --------- port: data (torchvision and a DataLoader for tensorplay_jax are not installed) ----


class SyntheticMNIST:
    """MNIST-shaped digits: each class a fixed 28x28 pattern plus noise, normalized."""

    def __init__(self, root, train=True, num_batches=None, batch_size=32):
        patterns = np.random.default_rng(0).standard_normal((10, 1, 28, 28))
        rng = np.random.default_rng(1 if train else 2)
        n = (num_batches or 60) * batch_size
        self.targets = rng.integers(0, 10, size=n)
        self.data = (patterns[self.targets] + 0.5 * rng.standard_normal((n, 1, 28, 28))).astype(
            np.float32
        )

    def __len__(self):
        return len(self.targets)


class DataLoader:
    """Batches of ``(data, target)`` Tensors, like ``torch.utils.data.DataLoader``."""

    def __init__(self, dataset, batch_size=1, shuffle=False):
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle

    def __iter__(self):
        order = np.arange(len(self.dataset))
        if self.shuffle:
            np.random.default_rng().shuffle(order)
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            yield torch.tensor(self.dataset.data[idx]), torch.tensor(self.dataset.targets[idx])


# --------- Launcher --------------------


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Parameter-Server RPC based training")
    parser.add_argument(
        "--world_size",
        type=int,
        default=4,
        help="""Total number of participating processes. Should be the sum of
        master node and all training nodes.""",
    )
    parser.add_argument(
        "--rank", type=int, default=None, help="Global rank of this process. Pass in 0 for master."
    )
    parser.add_argument(
        "--num_gpus",
        type=int,
        default=0,
        help="""Number of GPUs to use for training, Currently supports between 0
         and 2 GPUs. Note that this argument will be passed to the parameter servers.""",
    )
    parser.add_argument(
        "--master_addr",
        type=str,
        default="localhost",
        help="""Address of master, will default to localhost if not provided.
        Master must be able to accept network traffic on the address + port.""",
    )
    parser.add_argument(
        "--master_port",
        type=str,
        default="29500",
        help="""Port that master is listening on, will default to 29500 if not
        provided. Master must be able to accept network traffic on the host and port.""",
    )
    parser.add_argument(
        "--num_batches", type=int, default=None, help="port: batches per epoch (default: all)"
    )

    args = parser.parse_args()
    assert args.rank is not None, "must provide rank argument."
    assert args.num_gpus <= 3, f"Only 0-2 GPUs currently supported (got {args.num_gpus})."
    os.environ["MASTER_ADDR"] = args.master_addr
    os.environ["MASTER_PORT"] = args.master_port
    processes = []
    world_size = args.world_size

    # Note that Linux uses "fork" by default, which may cause deadlock.
    mp.set_start_method("spawn")

    if args.rank == 0:
        p = mp.Process(target=run_parameter_server, args=(0, world_size))
        p.start()
        processes.append(p)
    else:
        # Get data to train on
        train_loader = DataLoader(  # port: torch.utils.data.DataLoader(datasets.MNIST(...))
            SyntheticMNIST("../data", train=True, num_batches=args.num_batches),
            batch_size=32,
            shuffle=True,
        )
        test_loader = DataLoader(  # port: as train_loader
            SyntheticMNIST("../data", train=False, num_batches=args.num_batches),
            batch_size=32,
            shuffle=True,
        )
        # start training worker on this node
        p = mp.Process(
            target=run_worker,
            args=(args.rank, world_size, args.num_gpus, train_loader, test_loader),
        )
        p.start()
        processes.append(p)

    for p in processes:
        p.join()
