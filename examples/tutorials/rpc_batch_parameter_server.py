"""PyTorch's "Implementing Batch RPC Processing Using Asynchronous Executions": the
batch-updating parameter server, ported.

The server's ``update_and_fetch_model`` is an ``@rpc.functions.async_execution``
static method that returns a ``torch.futures.Future``; it completes (sending the
updated model to every waiting trainer at once) when ``batch_update_size``
trainers have reported their gradients.

The same file runs on tensorplay_jax (the default) and on torch:
``TUTORIAL_BACKEND=torch`` imports torch instead. The backend block below is the
one place the two differ; every other line that differs from the upstream
program is marked ``# port:`` with its reason (torchvision is not installed, so a
linear classifier stands in for ``resnet50``; the tutorial trains on a GPU, this
port on the CPU; the sizes are small).

Run::

    python examples/tutorials/rpc_batch_parameter_server.py
    TUTORIAL_BACKEND=torch python examples/tutorials/rpc_batch_parameter_server.py
"""

import os
import threading
from datetime import datetime

# --------- port: the backend (TUTORIAL_BACKEND=torch or tensorplay_jax) ---------
BACKEND = os.environ.get("TUTORIAL_BACKEND", "tensorplay_jax")
if BACKEND == "torch":
    import torch
    import torch.distributed.rpc as rpc
    import torch.multiprocessing as mp
    import torch.nn as nn
    from torch import optim
elif BACKEND == "tensorplay_jax":
    import tensorplay_jax as torch
    import tensorplay_jax.distributed.rpc as rpc
    import tensorplay_jax.nn as nn
    import tensorplay_jax.rpc as mp  # spawn, as torch.multiprocessing's
    from tensorplay_jax import optim
else:
    raise SystemExit(f"TUTORIAL_BACKEND={BACKEND!r}: choose torch or tensorplay_jax")
# --------- end of the backend block ---------

batch_size = 8  # port: sizes made small (the tutorial: 20, 64, 64, 30, 5, 6)
image_w = 8
image_h = 8
num_classes = 10
batch_update_size = 2
num_batches = 6


def timed_log(text):
    print(f"{datetime.now().strftime('%H:%M:%S')} {text}", flush=True)


def resnet_stand_in(num_classes):  # port: torchvision.models.resnet50 (not installed)
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * image_w * image_h, num_classes))


class BatchUpdateParameterServer:
    def __init__(self, batch_update_size=batch_update_size):
        self.model = resnet_stand_in(num_classes=num_classes)
        self.lock = threading.Lock()
        self.future_model = torch.futures.Future()
        self.batch_update_size = batch_update_size
        self.curr_update_size = 0
        self.optimizer = optim.SGD(self.model.parameters(), lr=0.001, momentum=0.9)
        for p in self.model.parameters():
            p.grad = torch.zeros_like(p)

    def get_model(self):
        return self.model

    @staticmethod
    @rpc.functions.async_execution
    def update_and_fetch_model(ps_rref, grads):
        self = ps_rref.local_value()
        timed_log(f"PS got {self.curr_update_size}/{batch_update_size} updates")
        for p, g in zip(self.model.parameters(), grads, strict=True):
            p.grad += g
        with self.lock:
            self.curr_update_size += 1
            fut = self.future_model

            if self.curr_update_size >= self.batch_update_size:
                for p in self.model.parameters():
                    p.grad /= self.batch_update_size
                self.curr_update_size = 0
                self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=False)
                fut.set_result(self.model)
                timed_log("PS updated model")
                self.future_model = torch.futures.Future()

        return fut


class Trainer:
    def __init__(self, ps_rref):
        self.ps_rref = ps_rref
        self.loss_fn = nn.MSELoss()
        # port: torch.LongTensor(batch_size).random_(0, num_classes) (uninitialized memory)
        self.one_hot_indices = torch.randint(0, num_classes, (batch_size,)).view(batch_size, 1)

    def get_next_batch(self):
        for _ in range(num_batches):
            inputs = torch.randn(batch_size, 3, image_w, image_h)
            labels = torch.zeros(batch_size, num_classes).scatter_(1, self.one_hot_indices, 1)
            yield inputs, labels  # port: on the CPU (the tutorial: .cuda())

    def train(self):
        name = rpc.get_worker_info().name
        m = self.ps_rref.rpc_sync().get_model()  # port: on the CPU (the tutorial: .cuda())
        for inputs, labels in self.get_next_batch():
            timed_log(f"{name} processing one batch")
            self.loss_fn(m(inputs), labels).backward()
            timed_log(f"{name} reporting grads")
            m = rpc.rpc_sync(
                self.ps_rref.owner(),
                BatchUpdateParameterServer.update_and_fetch_model,
                args=(self.ps_rref, [p.grad for p in m.cpu().parameters()]),
            )  # port: on the CPU (the tutorial: .cuda())
            timed_log(f"{name} got updated model")


def run_trainer(ps_rref):
    trainer = Trainer(ps_rref)
    trainer.train()


def run_ps(trainers):
    timed_log("Start training")
    ps_rref = rpc.RRef(BatchUpdateParameterServer())
    futs = []
    for trainer in trainers:
        futs.append(rpc.rpc_async(trainer, run_trainer, args=(ps_rref,)))

    torch.futures.wait_all(futs)
    timed_log("Finish training")


def run(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ.setdefault("MASTER_PORT", "29500")  # port: a test runs it on a free port
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=16)
    if rank != 0:
        rpc.init_rpc(
            f"trainer{rank}", rank=rank, world_size=world_size, rpc_backend_options=options
        )
        # trainer passively waiting for ps to kick off training iterations
    else:
        rpc.init_rpc("ps", rank=rank, world_size=world_size, rpc_backend_options=options)
        run_ps([f"trainer{r}" for r in range(1, world_size)])

    # block until all rpcs finish
    rpc.shutdown()


if __name__ == "__main__":
    world_size = batch_update_size + 1
    mp.spawn(run, args=(world_size,), nprocs=world_size, join=True)
