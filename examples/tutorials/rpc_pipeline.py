"""PyTorch's "Distributed Pipeline Parallelism Using RPC", ported.

A ResNet in two parts on ``worker1`` and ``worker2``; the master splits each batch
into micro-batches and, for each, runs part 1 with ``rpc.remote`` (its output
stays on worker1 as an RRef) and part 2 with ``rpc_async`` on that RRef, so the
two parts work on different micro-batches at once; distributed autograd and a
``DistributedOptimizer`` train both parts.

The same file runs on tensorplay_jax (the default) and on torch:
``TUTORIAL_BACKEND=torch`` imports torch instead. The backend block below is the
one place the two differ; every other line that differs from the upstream
program is marked ``# port:`` with its reason: torchvision is not installed, so
its ``Bottleneck`` is written here; the model is a small ResNet (fewer and
narrower layers) on small images; the parts live on the CPU (the tutorial:
``cuda:0`` and ``cuda:1``); ``--splits`` chooses the micro-batch counts (the
tutorial: 1, 2, 4, 8). The optimizer is the tutorial's ``DistributedOptimizer``
(the current upstream file instead builds a local ``optim.SGD`` on each worker
with ``torch.compile(opt.step)``; distributed autograd keeps the gradients in its
context, not in ``.grad``, which that local step reads).

Run::

    python examples/tutorials/rpc_pipeline.py --splits 1,2,4
    TUTORIAL_BACKEND=torch python examples/tutorials/rpc_pipeline.py --splits 1,2,4
"""

import argparse
import os
import threading
import time

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


#########################################################
#     port: torchvision's Bottleneck (not installed)    #
#########################################################


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None, groups=1, base_width=64,
                 dilation=1, norm_layer=None):  # fmt: skip
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = nn.Conv2d(inplanes, width, kernel_size=1, bias=False)
        self.bn1 = norm_layer(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=dilation, bias=False)
        self.bn2 = norm_layer(width)
        self.conv3 = nn.Conv2d(width, planes * self.expansion, kernel_size=1, bias=False)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


#########################################################
#                   helper functions                    #
#########################################################


def _call_method(method, rref, *args, **kwargs):
    r"""
    a helper function to call a method on the given RRef
    """
    return method(rref.local_value(), *args, **kwargs)


def _remote_on_rref(method, rref, *args, **kwargs):
    r"""
    a helper function to run method on the owner of rref and return an RRef
    of the result.
    """
    args = [method, rref] + list(args)  # noqa: RUF005  (the tutorial's line)
    return rpc.remote(rref.owner(), _call_method, args=args, kwargs=kwargs)


def _async_on_rref(method, rref, *args, **kwargs):
    r"""
    a helper function to run method on the owner of rref and fetch back the
    result using RPC
    """
    args = [method, rref] + list(args)  # noqa: RUF005  (the tutorial's line)
    return rpc.rpc_async(rref.owner(), _call_method, args=args, kwargs=kwargs)


def _parameter_rrefs(module):
    r"""
    Create one RRef for each parameter in the given local module, and return a
    list of RRefs.
    """
    param_rrefs = []
    for param in module.parameters():
        param_rrefs.append(RRef(param))
    return param_rrefs


#########################################################
#           Define Model Parallel ResNet50              #
#########################################################


num_classes = 10  # port: sizes made small (the tutorial: 1000 classes, ResNet50)


def conv1x1(in_planes, out_planes, stride=1):
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class ResNetBase(nn.Module):
    def __init__(self, block, inplanes, num_classes=1000, groups=1, width_per_group=64,
                 norm_layer=None):  # fmt: skip
        super().__init__()

        self._lock = threading.Lock()
        self._block = block
        self._norm_layer = nn.BatchNorm2d
        self.inplanes = inplanes
        self.dilation = 1
        self.groups = groups
        self.base_width = width_per_group

    def _make_layer(self, planes, blocks, stride=1):
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if stride != 1 or self.inplanes != planes * self._block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * self._block.expansion, stride),
                norm_layer(planes * self._block.expansion),
            )

        layers = []
        layers.append(self._block(self.inplanes, planes, stride, downsample, self.groups,
                                  self.base_width, previous_dilation, norm_layer))  # fmt: skip
        self.inplanes = planes * self._block.expansion
        for _ in range(1, blocks):
            layers.append(self._block(self.inplanes, planes, groups=self.groups,
                                      base_width=self.base_width, dilation=self.dilation,
                                      norm_layer=norm_layer))  # fmt: skip

        return nn.Sequential(*layers)


class ResNetPart1(ResNetBase):
    """
    The first part of ResNet.
    """

    def __init__(self, device, *args, **kwargs):
        super().__init__(Bottleneck, 4, num_classes=num_classes, *args, **kwargs)  # noqa: B026

        self.device = device
        self.seq = nn.Sequential(
            nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False),
            self._norm_layer(self.inplanes),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
            self._make_layer(4, 1),  # port: (64, 3)
            self._make_layer(8, 1, stride=2),  # port: (128, 4, stride=2)
        ).to(self.device)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x_rref):
        x = x_rref.to_here().to(self.device)
        with self._lock:
            out = self.seq(x)
        return out.cpu()


class ResNetPart2(ResNetBase):
    """
    The second part of ResNet.
    """

    def __init__(self, device, *args, **kwargs):
        super().__init__(Bottleneck, 32, num_classes=num_classes, *args, **kwargs)  # noqa: B026

        self.device = device
        self.seq = nn.Sequential(
            self._make_layer(16, 1, stride=2),  # port: (256, 6, stride=2)
            self._make_layer(32, 1, stride=2),  # port: (512, 3, stride=2)
            nn.AdaptiveAvgPool2d((1, 1)),
        ).to(self.device)

        self.fc = nn.Linear(32 * self._block.expansion, num_classes).to(self.device)

    def forward(self, x_rref):
        x = x_rref.to_here().to(self.device)
        with self._lock:
            out = self.fc(torch.flatten(self.seq(x), 1))
        return out.cpu()


class DistResNet50(nn.Module):
    """
    Assemble two parts as an nn.Module and define pipelining logic
    """

    def __init__(self, split_size, workers, *args, **kwargs):
        super().__init__()

        self.split_size = split_size

        # Put the first part of the ResNet50 on workers[0]
        self.p1_rref = rpc.remote(
            workers[0], ResNetPart1, args=("cpu", *args), kwargs=kwargs
        )  # port: "cuda:N"

        # Put the second part of the ResNet50 on workers[1]
        self.p2_rref = rpc.remote(
            workers[1], ResNetPart2, args=("cpu", *args), kwargs=kwargs
        )  # port: "cuda:N"

    def forward(self, xs):
        # Split the input batch xs into micro-batches, and collect async RPC
        # futures into a list
        out_futures = []
        for x in iter(xs.split(self.split_size, dim=0)):
            x_rref = RRef(x)
            y_rref = _remote_on_rref(ResNetPart1.forward, self.p1_rref, x_rref)
            z_fut = _async_on_rref(ResNetPart2.forward, self.p2_rref, y_rref)
            out_futures.append(z_fut)

        # wait for all RPC to finish
        outs = [fut.wait() for fut in out_futures]
        # cat all tensors into one tensor.
        out = torch.cat(outs)
        return out

    def parameter_rrefs(self):
        remote_params = []
        remote_params.extend(_remote_on_rref(_parameter_rrefs, self.p1_rref).to_here())
        remote_params.extend(_remote_on_rref(_parameter_rrefs, self.p2_rref).to_here())
        return remote_params


#########################################################
#                   Run RPC Processes                   #
#########################################################

num_batches = 3
# port: the tutorial's batches are 120 images of 128 x 128; on 64 x 64 images a
# micro-batch of one still leaves 2 x 2 values per channel for the last BatchNorm2d.
batch_size = 8
image_w = 64
image_h = 64


def run_master(split_size):
    # put the two model parts on worker1 and worker2 respectively
    model = DistResNet50(split_size, ["worker1", "worker2"])
    loss_fn = nn.MSELoss()
    opt = DistributedOptimizer(optim.SGD, model.parameter_rrefs(), lr=0.05)

    # port: torch.LongTensor(batch_size).random_(0, num_classes) (uninitialized memory)
    one_hot_indices = torch.randint(0, num_classes, (batch_size,)).view(batch_size, 1)

    for i in range(num_batches):
        print(f"Processing batch {i}", flush=True)
        # generate random inputs and labels
        inputs = torch.randn(batch_size, 3, image_w, image_h)
        labels = torch.zeros(batch_size, num_classes).scatter_(1, one_hot_indices, 1)

        with dist_autograd.context() as context_id:
            outputs = model(inputs)
            dist_autograd.backward(context_id, [loss_fn(outputs, labels)])
            opt.step(context_id)


def run_worker(rank, world_size, num_split):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ.setdefault("MASTER_PORT", "29500")  # port: a test runs it on a free port
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=256)

    if rank == 0:
        rpc.init_rpc("master", rank=rank, world_size=world_size, rpc_backend_options=options)
        run_master(num_split)
    else:
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)
        pass

    # block until all rpcs finish
    rpc.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])  # port: --splits
    parser.add_argument("--splits", default="1,2,4,8", help="port: micro-batch counts to time")
    splits = [int(s) for s in parser.parse_args().splits.split(",")]
    world_size = 3
    for num_split in splits:  # port: [1, 2, 4, 8]
        tik = time.time()
        mp.spawn(run_worker, args=(world_size, num_split), nprocs=world_size, join=True)
        tok = time.time()
        print(f"number of splits = {num_split}, execution time = {tok - tik}")
