"""Functional-mode benchmark: a jitted ``value_and_grad`` step with a stage on another worker.

Two workers on this host. The model is ``loss = sum(tanh(tanh(x @ w0) @ w1) ** 2)``;
its second stage runs on w1 through ``dist_autograd.differentiable_rpc`` (mode
"jax": w1 keeps the stage's VJP between the forward and the backward message).
Measured, in the same run:

- ``step, remote``: ``jax.jit(jax.value_and_grad(loss))`` with the remote stage;
- ``step, local``: the same step with the stage computed in this process;
- ``rpc part``: their difference, what the remote stage costs beyond its compute;
- ``of which callbacks``: the same step with the stage replaced by two
  ``jax.pure_callback`` s that do nothing, minus ``step, local``: JAX's own cost of
  leaving a compiled step for Python and back (the floor under any RPC in ``jit``);
- ``rpc_sync, same payload``: two ``rpc_sync`` calls carrying the step's bytes
  (forward: ``w1`` and ``h`` out, the stage's output back; backward: the
  cotangent out, the two gradients back) to functions that do no work.

Target: ``rpc part`` at most 1.5x ``rpc_sync, same payload``.

Usage::

    python benchmarks/functional.py
    python benchmarks/functional.py --sizes 32x64 256x512 --iters 200
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
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


def _noop_loss(w0: Any, w1: Any, x: Any) -> Any:
    """The model with the remote stage replaced by two ``pure_callback`` s that do nothing."""
    import jax
    import jax.numpy as jnp

    b, d = x.shape
    spec = jax.ShapeDtypeStruct((b, d), jnp.float32)
    zeros = np.zeros((b, d), np.float32), np.zeros((d, d), np.float32)

    @jax.custom_vjp
    def call(w1: Any, h: Any) -> Any:
        return jax.pure_callback(lambda *_: zeros[0], spec, w1, h)

    def fwd(w1: Any, h: Any) -> Any:
        return call(w1, h), None

    def bwd(_: Any, ct: Any) -> Any:
        specs = [jax.ShapeDtypeStruct((d, d), jnp.float32), spec]
        return tuple(jax.pure_callback(lambda *_: [zeros[1], zeros[0]], specs, ct))

    call.defvjp(fwd, bwd)
    return jnp.sum(call(w1, jnp.tanh(x @ w0)) ** 2)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _time(fn: Any, iters: int, repeats: int) -> float:
    for _ in range(max(iters // 10, 5)):
        fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e3


def worker(rank: int, port: int, sizes: list[str], iters: int, repeats: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from tensorplay_jax.distributed import rpc

    rpc.init_rpc(f"w{rank}", rank=rank, world_size=2)
    if rank == 0:
        res = {}
        for size in sizes:
            b, d = (int(v) for v in size.split("x"))
            res[size] = _measure(b, d, iters if b * d <= 65536 else max(iters // 4, 20), repeats)
        Path(out).write_text(json.dumps(res))
    rpc.shutdown()


def _measure(b: int, d: int, n: int, repeats: int) -> dict[str, float]:
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

    remote = _time(lambda: jax.block_until_ready(remote_step(w0, w1, x)), n, repeats)
    local = _time(lambda: jax.block_until_ready(local_step(w0, w1, x)), n, repeats)
    noop = _time(lambda: jax.block_until_ready(noop_step(w0, w1, x)), n, repeats)
    rpc_ms = _time(payload, n, repeats)
    fwd_bytes = 4 * (d * d + 2 * b * d)
    bwd_bytes = 4 * (b * d + d * d + b * d)
    return {
        "remote": remote,
        "local": local,
        "rpc_part": remote - local,
        "callbacks": noop - local,
        "rpc_sync": rpc_ms,
        "bytes": fwd_bytes + bwd_bytes,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", default=["32x64", "256x512"], help="BATCHxWIDTH")
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    port = _port()
    out = f"/tmp/tpj-bench-functional-{os.getpid()}.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    boot = (
        "import sys; from benchmarks.functional import worker; "
        "worker(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split(','), "
        "int(sys.argv[4]), int(sys.argv[5]), sys.argv[6])"
    )
    args = [",".join(a.sizes), str(a.iters), str(a.repeats), out]
    procs = [
        subprocess.Popen([sys.executable, "-c", boot, str(r), str(port), *args], env=env, cwd=ROOT)
        for r in range(2)
    ]
    for p in procs:
        if p.wait(timeout=900) != 0:
            raise SystemExit("functional benchmark worker failed")
    res = json.loads(Path(out).read_text())
    os.unlink(out)
    print(
        f"{'batch x width':<14}{'payload':>10}{'step, remote':>14}{'step, local':>13}"
        f"{'rpc part':>10}{'of which callbacks':>20}{'rpc_sync, same payload':>24}{'ratio':>7}"
        "  target"
    )
    for size, r in res.items():
        ratio = r["rpc_part"] / r["rpc_sync"]
        print(
            f"{size:<14}{r['bytes'] / 1024:>8.0f}KiB{r['remote']:>12.3f}ms{r['local']:>11.3f}ms"
            f"{r['rpc_part']:>8.3f}ms{r['callbacks']:>18.3f}ms{r['rpc_sync']:>22.3f}ms"
            f"{ratio:>7.2f}  <= 1.5"
        )


if __name__ == "__main__":
    main()
