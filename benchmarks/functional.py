"""Functional-mode benchmark: a jitted ``value_and_grad`` step with a stage on another worker.

Two workers on this host. The model is ``loss = sum(tanh(tanh(x @ w0) @ w1) ** 2)``;
its second stage runs on w1 through ``dist_autograd.differentiable_rpc`` (mode
"jax": w1 keeps the stage's VJP between the forward and the backward message).
Measured, in the same run:

- ``step, remote``: ``jax.jit(jax.value_and_grad(loss))`` with the remote stage;
- ``step, local``: the same step with the stage computed in this process;
- ``rpc part``: their difference, what the remote stage costs beyond its compute;
- ``of which callbacks``: the same step with the stage replaced by two host
  callbacks that do nothing (the mechanism ``differentiable_rpc`` uses), minus
  the step without the stage: JAX's own cost of leaving a compiled step for Python and back
  (the floor under any RPC in ``jit``);
- ``rpc_sync, same payload``: two ``rpc_sync`` calls carrying the step's bytes
  (forward: ``w1`` and ``h`` out, the stage's output back; backward: the
  cotangent out, the two gradients back) to functions that do no work;
- ``callee work``: the stage's forward (keeping its VJP) and backward as the
  callee runs them for the two messages, timed on w1 without the wire, minus
  ``stage in step``: what the same stage costs inside the local step (``step,
  local`` minus that step without the stage). ``floor`` is ``rpc_sync`` plus
  that: what the remote step costs beyond the local one if nothing but the wire
  and the callee's programs took time.

The four are timed in blocks, interleaved (the order alternates every round),
and each difference is taken between adjacent blocks of one round, so that a
swing of the machine's load meets both sides; a cell is the median over the
rounds. The load average is printed with the table.

Target: ``rpc part`` at most 1.5x ``rpc_sync, same payload``.

Usage::

    python benchmarks/functional.py
    python benchmarks/functional.py --sizes 32x64 256x512 --rounds 31
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._launch import free_port, run_job

_OUT: dict[tuple[int, int], Any] = {}


def stage(w1: Any, h: Any) -> Any:
    import jax.numpy as jnp

    return jnp.tanh(h @ w1)


def forward_payload(w1: Any, h: Any) -> Any:
    """Receives the forward's arguments, returns an array of the stage's output shape."""
    return _OUT.setdefault(("f", *h.shape), np.zeros(h.shape[:1] + w1.shape[1:], np.float32))


def backward_payload(ct: Any, d: int) -> Any:
    """Receives the cotangent, returns arrays of the two gradients' shapes."""
    b = ct.shape[0]
    return _OUT.setdefault(
        ("b", b, d), (np.zeros((d, ct.shape[1]), np.float32), np.zeros((b, d), np.float32))
    )


def callee_work(w1: Any, h: Any, ct: Any, n: int) -> float:
    """Milliseconds per forward + backward of the stage, run here as the two messages run it."""
    from tensorplay_jax.distributed.autograd import _remote_vjp

    t0 = time.perf_counter()
    for _ in range(n):
        _, handle = _remote_vjp.forward(stage, (w1, h), {}, [0, 1], 0, True)
        _remote_vjp.backward(handle, [ct])
    return (time.perf_counter() - t0) / n * 1e3


def _noop_loss(w0: Any, w1: Any, x: Any) -> Any:
    """The model with the remote stage replaced by two host callbacks that do nothing."""
    import jax
    import jax.numpy as jnp

    from tensorplay_jax.distributed.autograd._callback import host_call

    b, d = x.shape
    spec = jax.ShapeDtypeStruct((b, d), jnp.float32)
    zeros = np.zeros((b, d), np.float32), np.zeros((d, d), np.float32)

    @jax.custom_vjp
    def call(w1: Any, h: Any) -> Any:
        return host_call(lambda *_: [zeros[0]], [spec], w1, h, vmap_method="sequential")[0]

    def fwd(w1: Any, h: Any) -> Any:
        return call(w1, h), None

    def bwd(_: Any, ct: Any) -> Any:
        specs = [jax.ShapeDtypeStruct((d, d), jnp.float32), spec]
        return tuple(host_call(lambda *_: zeros[::-1], specs, ct, vmap_method="sequential"))

    call.defvjp(fwd, bwd)
    return jnp.sum(call(w1, jnp.tanh(x @ w0)) ** 2)


def _block(fn: Any, n: int) -> float:
    """Milliseconds per call of ``fn`` over ``n`` calls."""
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e3


def worker(rank: int, port: int, sizes: list[str], iters: int, rounds: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from tensorplay_jax.distributed import rpc

    rpc.init_rpc(f"w{rank}", rank=rank, world_size=2)
    if rank == 0:
        res = {}
        for size in sizes:
            b, d = (int(v) for v in size.split("x"))
            n = iters if b * d <= 65536 else max(iters // 10, 2)
            res[size] = _measure(b, d, n, rounds)
        Path(out).write_text(json.dumps(res))
    rpc.shutdown()


def _measure(b: int, d: int, n: int, rounds: int) -> dict[str, float]:
    import jax
    import jax.numpy as jnp

    import tensorplay_jax.distributed.autograd as dist_autograd
    from tensorplay_jax.distributed import rpc

    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((b, d)), jnp.float32)
    w0 = jnp.asarray(rng.standard_normal((d, d)) / d**0.5, jnp.float32)
    w1 = jnp.asarray(rng.standard_normal((d, d)) / d**0.5, jnp.float32)

    def loss(w0: Any, w1: Any, x: Any, remote: bool) -> Any:
        h = jnp.tanh(x @ w0)
        call = dist_autograd.differentiable_rpc if remote else lambda _, f, args: f(*args)
        y = call("w1", stage, args=(w1, h))
        return jnp.sum(y**2)

    stage1_step = jax.jit(jax.value_and_grad(lambda a, x: jnp.sum(jnp.tanh(x @ a) ** 2)))
    noop_step = jax.jit(jax.value_and_grad(lambda a, c, x: _noop_loss(a, c, x), (0, 1)))
    remote_step = jax.jit(jax.value_and_grad(lambda a, c, x: loss(a, c, x, True), (0, 1)))
    local_step = jax.jit(jax.value_and_grad(lambda a, c, x: loss(a, c, x, False), (0, 1)))
    v_r, g_r = remote_step(w0, w1, x)
    v_l, g_l = local_step(w0, w1, x)
    np.testing.assert_allclose(v_r, v_l, rtol=1e-4)
    np.testing.assert_allclose(g_r[1], g_l[1], rtol=1e-3, atol=1e-5)
    h = np.asarray(jnp.tanh(x @ w0))
    ct = np.ones((b, d), np.float32)
    w1n = np.asarray(w1)

    def payload() -> None:
        rpc.rpc_sync("w1", forward_payload, args=(w1n, h))
        rpc.rpc_sync("w1", backward_payload, args=(ct, d))

    fns = {
        "remote": lambda: jax.block_until_ready(remote_step(w0, w1, x)),
        "local": lambda: jax.block_until_ready(local_step(w0, w1, x)),
        "noop": lambda: jax.block_until_ready(noop_step(w0, w1, x)),
        "rpc_sync": payload,
        "stage1": lambda: jax.block_until_ready(stage1_step(w0, x)),
    }
    work = lambda: rpc.rpc_sync("w1", callee_work, args=(w1n, h, ct, n))
    for fn in fns.values():  # warm-up
        _block(fn, max(n // 4, 3))
    work()
    keys = ("remote", "local", "rpc_part", "callbacks", "rpc_sync", "callee", "stage", "floor")
    got: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(rounds):
        order = ["remote", "local", "noop", "stage1", "rpc_sync", "callee"]
        t = {}
        for k in order if r % 2 == 0 else order[::-1]:
            t[k] = work() if k == "callee" else _block(fns[k], n)
        got["remote"].append(t["remote"])
        got["local"].append(t["local"])
        got["rpc_part"].append(t["remote"] - t["local"])
        got["callbacks"].append(t["noop"] - t["stage1"])
        got["rpc_sync"].append(t["rpc_sync"])
        got["callee"].append(t["callee"])
        got["stage"].append(t["local"] - t["stage1"])
        got["floor"].append(t["rpc_sync"] + t["callee"] - (t["local"] - t["stage1"]))
    med = {k: float(np.median(v)) for k, v in got.items()}
    med["bytes"] = 4 * (d * d + 2 * b * d) + 4 * (b * d + d * d + b * d)
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["32x64", "256x512"], help="BATCHxWIDTH")
    ap.add_argument("--iters", type=int, default=50, help="steps per block (small sizes)")
    ap.add_argument("--rounds", type=int, default=21)
    a = ap.parse_args()
    port = str(free_port())
    boot = (
        "import sys; from benchmarks.functional import worker; "
        "worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(','), "
        "int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])"
    )
    args = [",".join(a.sizes), str(a.iters), str(a.rounds)]
    load = os.getloadavg()
    res = run_job(boot, [[str(r), port, *args] for r in range(2)], "functional")
    load_after = os.getloadavg()
    print(
        f"{'batch x width':<14}{'payload':>10}{'step, remote':>14}{'step, local':>13}"
        f"{'rpc part':>10}{'callbacks':>11}{'rpc_sync':>10}{'ratio':>7}  target"
        f"{'callee work':>13}{'stage in step':>15}{'floor':>9}{'floor ratio':>13}"
    )
    for size, r in res.items():
        print(
            f"{size:<14}{r['bytes'] / 1024:>8.0f}KiB{r['remote']:>12.3f}ms{r['local']:>11.3f}ms"
            f"{r['rpc_part']:>8.3f}ms{r['callbacks']:>9.3f}ms{r['rpc_sync']:>8.3f}ms"
            f"{r['rpc_part'] / r['rpc_sync']:>7.2f}  <= 1.5"
            f"{r['callee']:>11.3f}ms{r['stage']:>13.3f}ms{r['floor']:>7.3f}ms"
            f"{r['floor'] / r['rpc_sync']:>13.2f}"
        )
    print(
        f"medians of {a.rounds} interleaved rounds; load average (1 min) "
        f"{load[0]:.2f} before, {load_after[0]:.2f} after, on {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
