"""The seed example of issue 4 as written, RPC-not-initialized errors, docstring examples."""

from __future__ import annotations

SEED = """
import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc

# before init_rpc: clear errors, no hang
try:
    dist_autograd.context().__enter__()
    raise AssertionError("context() without RPC did not raise")
except rpc.RpcNotInitializedError as e:
    assert "RPC has not been initialized" in str(e) and "init_rpc" in str(e), e
try:
    dist_autograd.backward(1, [tp.ones(1, requires_grad=True).sum()])
    raise AssertionError("backward() without RPC did not raise")
except rpc.RpcNotInitializedError as e:
    assert "dist_autograd.backward: RPC has not been initialized" in str(e), e
assert dist_autograd.is_available() and not dist_autograd.is_initialized()

rpc.init_rpc("worker", rank=0, world_size=1)
def remote_double(t):
    return t * 2
with dist_autograd.context() as ctx_id:
    t = tp.randn(4, requires_grad=True)
    out = rpc.rpc_sync("worker", remote_double, args=(t,))
    loss = out.sum()
    dist_autograd.backward(ctx_id, [loss])
    grads = dist_autograd.get_gradients(ctx_id)
    print(grads[t])   # [2. 2. 2. 2.]
rpc.shutdown()
assert not dist_autograd.is_initialized()
"""

SEED_MULTI = """
import os
import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.distributed import rpc

rank, ws = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
rpc.init_rpc(f"worker{rank}", rank=rank, world_size=ws)
def remote_double(t):
    return t * 2
if rank == 0:
    with dist_autograd.context() as ctx_id:
        t = tp.randn(4, requires_grad=True)
        out = t
        for r in range(1, ws):
            out = rpc.rpc_sync(f"worker{r}", remote_double, args=(out,))
        loss = out.sum()
        dist_autograd.backward(ctx_id, [loss])
        grads = dist_autograd.get_gradients(ctx_id)
        print(grads[t])
rpc.shutdown()
"""

DOCS = """
import doctest, importlib
mods = ["", "._context", "._engine", ".api", "._wire", "._functional"]
for m in mods:
    mod = importlib.import_module("tensorplay_jax.distributed.autograd" + m)
    res = doctest.testmod(mod, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert res.failed == 0, (m, res)
    print(m or "package", res.attempted, flush=True)
"""


def test_seed_example_one_worker(workers):
    out = workers(SEED, 1, timeout=120)
    assert "[2. 2. 2. 2.]" in out[0].stdout, out[0]


def test_seed_example_three_workers(workers):
    out = workers(SEED_MULTI, 3, timeout=120)
    assert "[4. 4. 4. 4.]" in out[0].stdout, out[0]


def test_docstring_examples(workers):
    out = workers(DOCS, 1, timeout=120)
    assert "package" in out[0].stdout and "._engine" in out[0].stdout, out[0]
