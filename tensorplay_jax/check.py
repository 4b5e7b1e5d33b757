"""``python -m tensorplay_jax.check``: the first command to run on a new machine or cluster.

It lists this host's devices and runs, each step timed and checked against
an independent answer:

1. ``collectives``: the ten differentiable collectives under ``jax.shard_map``
   over every local device (the accelerators, else the CPU devices), each
   against NumPy, and its gradients by ``jax.test_util.check_grads``;
2. ``rpc``: a second process, RPC with a device map (one device each, where
   there are two or more; a TPU host's second process runs on CPU), the
   array arriving on the mapped device and coming back by the inverse map;
   round trips of a device array and of a host array of the same size;
3. ``dist autograd``: a gradient through that RPC against ``jax.grad``, on
   the device its forward value came from;
4. ``sharded``: an array sharded 2 ways over this process's ``cpu:2``, ``cpu:3``
   through that RPC: it arrives sharded over the worker's mapped ``cpu:3``,
   ``cpu:1`` (the same ``PartitionSpec``), comes back sharded as it went, and
   its distributed-autograd gradient comes back sharded as it went, equal to
   ``jax.grad``'s. It runs on the host's virtual CPU devices everywhere (the
   started worker has one accelerator), so on a GPU or TPU host it does not
   exercise the accelerators' sharded path;
5. ``process group``: ``all_reduce`` across two new processes on the
   accelerator engine (NCCL across two GPUs where there are two; gloo on a
   CPU or TPU host, whose chips one process holds); they start first and run
   while the other steps do.

On a host with no accelerator it runs the same steps on virtual CPU devices
and says so. It prints a table (step, result, seconds, details) and exits 1
if a step failed.

Example::

    python -m tensorplay_jax.check            # everything
    python -m tensorplay_jax.check --only collectives rpc
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from tensorplay_jax.runtime import settings

__all__ = ["STEPS", "main", "run_checks"]

_CPU_DEVICES = 4  # virtual CPU devices on a host with no accelerator
_RPC_BYTES = 4 << 20  # the round trips' array size
_ROUNDS = 5


def _prepare_jax() -> None:
    """Virtual CPU devices for the CPU equivalents (the flag touches only the CPU platform)."""
    flags = settings.raw("XLA_FLAGS") or ""
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={_CPU_DEVICES}"


def _devices() -> tuple[str, list[Any]]:
    """The platform the steps run on and its local devices."""
    import jax

    backend = jax.default_backend()
    return backend, jax.local_devices(backend=backend)


# ---------------------------------------------------------------- 1. collectives
def _collective_cases(n: int) -> list[tuple[str, Callable, Callable, tuple[int, ...]]]:
    """``(name, per-rank function, numpy answer of the stacked inputs, per-rank shape)``."""
    from tensorplay_jax import collectives as C

    def rows(xs: Any) -> list[Any]:
        return [xs[i] for i in range(n)]

    k = (n, 3)
    return [
        ("all_reduce", lambda x, a: C.all_reduce(x, a), lambda X: [X.sum(0)] * n, (3,)),
        ("broadcast", lambda x, a: C.broadcast(x, 0, a), lambda X: [X[0]] * n, (3,)),
        (
            "reduce",
            lambda x, a: C.reduce(x, 0, a),
            lambda X: [X.sum(0)] + [0 * X[0]] * (n - 1),
            (3,),
        ),
        ("gather", lambda x, a: C.gather(x, 0, a), lambda X: [X] + [0 * X] * (n - 1), (3,)),
        ("scatter", lambda x, a: C.scatter(x, 0, a), lambda X: rows(X[0]), k),
        ("reduce_scatter", lambda x, a: C.reduce_scatter(x, a), lambda X: rows(X.sum(0)), k),
        ("all_gather", lambda x, a: C.all_gather(x, a), lambda X: [X] * n, (3,)),
        (
            "all_gather_single",
            lambda x, a: C.all_gather_single(x, a),
            lambda X: [X.reshape(-1, 3)] * n,
            (2, 3),
        ),
        ("all_to_all", lambda x, a: C.all_to_all(x, a), lambda X: rows(X.swapaxes(0, 1)), k),
        (
            "all_to_all_single",
            lambda x, a: C.all_to_all_single(x, a),
            lambda X: rows(X.swapaxes(0, 1)),
            k,
        ),
    ]


def check_collectives() -> str:
    """The ten collectives over every local device: values against NumPy, then check_grads.

    All ten run in one ``shard_map`` program (one compilation, of the values
    and of the gradients); when its gradients fail, each collective's alone
    names the one that is wrong.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec
    from jax.test_util import check_grads

    from tensorplay_jax.collectives.rules import BY_NAME, RULES

    _, devs = _devices()
    n = len(devs)
    cases = _collective_cases(n)
    if [case[0] for case in cases] != [rule.name for rule in RULES]:
        raise AssertionError("the check's collectives are not the rule table's (collectives.rules)")
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((n, *shape)).astype(np.float32) for *_, shape in cases]
    mesh = Mesh(np.array(devs), ("i",))

    def program(fns: list[Callable]) -> Callable:
        body = lambda *x: tuple(fn(xi[0], "i")[None] for fn, xi in zip(fns, x, strict=True))
        specs = tuple(PartitionSpec("i") for _ in fns)
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=specs, out_specs=specs))

    def grads_ok(f: Callable, args: list[Any]) -> str | None:
        try:
            check_grads(f, tuple(map(jnp.asarray, args)), 1, modes=("rev",), atol=3e-2, rtol=3e-2)
        except AssertionError as e:
            return str(e)
        return None

    every = program([fn for _, fn, _, _ in cases])
    for (name, _, answer, _), x, got in zip(cases, xs, every(*map(jnp.asarray, xs)), strict=True):
        want = np.stack(answer(x.astype(np.float64)))
        if not np.allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5):
            raise AssertionError(f"{name}: values differ from NumPy's by {abs(got - want).max()}")
    if grads_ok(every, xs) is not None:
        for (name, fn, _, _), x in zip(cases, xs, strict=True):
            error = grads_ok(program([fn]), [x])
            if error is not None:
                rule = BY_NAME[name].backward
                raise AssertionError(f"{name}: gradients do not follow its rule ({rule}): {error}")
    return f"{len(cases)} collectives on {n} devices: values and gradients ok"


# ---------------------------------------------------------------- 2. and 3. RPC
def _where(x: Any) -> str:
    from tensorplay_jax.runtime.device import device_name

    (dev,) = (x._value if hasattr(x, "requires_grad") else x).devices()
    return device_name(dev)


def _square_sum(x: Any) -> Any:
    return (x * x).sum()


def _identity(x: Any) -> Any:
    return x


def _mesh_devices(x: Any) -> list[str]:
    from tensorplay_jax.runtime.device import device_name

    value = x._value if hasattr(x, "requires_grad") else x
    return [device_name(d) for d in value.sharding.mesh.devices.flat]


# Step 4's mesh (this process's cpu:2, cpu:3) and where the map sends it (check1's cpu:3,
# cpu:1): CPU devices that step 2's map leaves free on every kind of host.
_SHARD_MAP = {"cpu:2": "cpu:3", "cpu:3": "cpu:1"}


class _Pair:
    """This process (``check0``) and one started worker (``check1``), with a device map."""

    def __init__(self) -> None:
        backend, _ = _devices()
        kind = "cpu" if backend == "cpu" else ("tpu" if backend == "tpu" else "cuda")
        # One device each: the started worker is given its own GPU (runtime.placement), its
        # cuda:0 (shared, without preallocation, on a one-GPU host); on CPU devices this
        # process sends from cpu:1 to the worker's cpu:2. A TPU host's chips open in one
        # process only: there the worker runs on CPU devices (tpu:0 -> its cpu:2).
        self.env = {"JAX_PLATFORMS": "cpu"} if kind == "tpu" else {}
        self.mine = "cpu:1" if kind == "cpu" else f"{kind}:0"
        self.theirs = "cpu:2" if kind in ("cpu", "tpu") else "cuda:0"
        self.workers: Any = None
        # Step 4's map, where this process has the CPU devices it names (JAX_PLATFORMS may
        # leave the CPU platform out; the worker inherits this environment).
        try:
            import jax

            enough = len(jax.devices("cpu")) > max(int(d[4:]) for d in _SHARD_MAP.values())
        except RuntimeError:
            enough = False
        self.shard_map = dict(_SHARD_MAP) if enough else {}

    def __enter__(self) -> _Pair:
        from tensorplay_jax.testing import Workers

        opts = {"check0": {"device_maps": {"check1": {self.mine: self.theirs, **self.shard_map}}}}
        self.workers = Workers(
            2, names=["check0", "check1"], timeout=60, env=self.env, rpc_options=opts
        )
        self.workers.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.workers.close()


def check_rpc(pair: _Pair) -> str:
    """A device array over RPC lands on the mapped device and comes back; round-trip times."""
    import jax
    import numpy as np

    from tensorplay_jax import rpc
    from tensorplay_jax.runtime.device import resolve_device

    dev = resolve_device(pair.mine, "check")
    host = np.arange(_RPC_BYTES // 4, dtype=np.float32)
    x = jax.device_put(host, dev)
    there = rpc.rpc_sync("check1", _where, args=(x,))
    if there != pair.theirs:
        raise AssertionError(f"the array arrived on {there}, not {pair.theirs}")
    back = rpc.rpc_sync("check1", _identity, args=(x,))
    if back.devices() != {dev} or not np.array_equal(np.asarray(back), host):
        raise AssertionError(f"the reply came back on {back.devices()}, not {dev}")
    times = {}
    for label, value in (("device", x), ("host", host)):
        t0 = time.perf_counter()
        for _ in range(_ROUNDS):
            jax.block_until_ready(rpc.rpc_sync("check1", _identity, args=(value,)))
        times[label] = (time.perf_counter() - t0) / _ROUNDS * 1e3
    return (
        f"{pair.mine} -> check1's {pair.theirs} and back; {_RPC_BYTES >> 20} MiB round trip: "
        f"device array {times['device']:.1f} ms, host array {times['host']:.1f} ms"
    )


def check_dist_autograd(pair: _Pair) -> str:
    """d/dx sum(x*x) through RPC equals jax.grad's, on the forward value's device."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import tensorplay_jax as tp
    from tensorplay_jax import rpc
    from tensorplay_jax.distributed import autograd as dist_autograd
    from tensorplay_jax.runtime.device import resolve_device

    dev = resolve_device(pair.mine, "check")
    value = jax.device_put(jnp.linspace(-1.0, 1.0, 8), dev)
    x = tp.tensor(value, requires_grad=True)
    with dist_autograd.context() as cid:
        loss = rpc.rpc_sync("check1", _square_sum, args=(x,))
        dist_autograd.backward(cid, [loss])
        g = dist_autograd.get_gradients(cid)[x]
    want = jax.grad(lambda v: (v * v).sum())(value)
    if not np.allclose(np.asarray(g), np.asarray(want), rtol=1e-6):
        raise AssertionError("the gradient differs from jax.grad's")
    if _where(g) != pair.mine:
        raise AssertionError(f"the gradient is on {_where(g)}, not {pair.mine}")
    return f"gradient equals jax.grad's, on {pair.mine}"


# ---------------------------------------------------------------- 4. sharded arrays
def check_sharded(pair: _Pair) -> str:
    """A 2-way sharded array over RPC keeps its sharding both ways; so does its gradient."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    import tensorplay_jax as tp
    from tensorplay_jax import rpc
    from tensorplay_jax.distributed import autograd as dist_autograd

    if not pair.shard_map:
        return f"skipped: it needs CPU devices {', '.join(_SHARD_MAP)} here (JAX_PLATFORMS?)"
    cpus = jax.devices("cpu")
    mine = list(_SHARD_MAP)
    sharding = NamedSharding(
        Mesh(np.array([cpus[int(d[4:])] for d in mine]), ("x",)), PartitionSpec("x")
    )
    host = np.linspace(-1.0, 1.0, _RPC_BYTES // 4, dtype=np.float32)
    x = jax.device_put(host, sharding)
    there = rpc.rpc_sync("check1", _mesh_devices, args=(x,))
    if there != list(_SHARD_MAP.values()):
        raise AssertionError(f"the array arrived sharded over {there}, not {_SHARD_MAP}")
    back = rpc.rpc_sync("check1", _identity, args=(x,))
    if back.sharding != sharding or not np.array_equal(np.asarray(back), host):
        raise AssertionError(f"the reply came back as {back.sharding}, not {sharding}")
    t = tp.tensor(x, requires_grad=True)
    with dist_autograd.context() as cid:
        dist_autograd.backward(cid, [rpc.rpc_sync("check1", _square_sum, args=(t,))])
        g = dist_autograd.get_gradients(cid)[t].value
    if g.sharding != sharding:
        raise AssertionError(f"the gradient came back as {g.sharding}, not {sharding}")
    want = jax.grad(lambda v: (v * v).sum())(host)
    if not np.allclose(np.asarray(g), np.asarray(want), rtol=1e-6):
        raise AssertionError("the gradient differs from jax.grad's")
    return (
        f"{_RPC_BYTES >> 20} MiB sharded over {', '.join(mine)} -> check1's {', '.join(there)} "
        "and back, sharded; its gradient sharded as it went, equal to jax.grad's"
    )


# ---------------------------------------------------------------- 5. process group
def _pg_worker(rank: int, backend: str) -> tuple[list[float], str, float]:
    import jax
    import jax.numpy as jnp

    import tensorplay_jax.distributed as dist

    dist.init_process_group(backend)
    try:
        x = jnp.full((4,), rank + 1.0)
        dist.all_reduce(x)  # compile and connect once
        t0 = time.perf_counter()
        y = jax.block_until_ready(dist.all_reduce(x))
        took = (time.perf_counter() - t0) * 1e3
        (dev,) = y.devices()
        return [float(v) for v in y], dev.platform, took
    finally:
        dist.destroy_process_group()


def _start_process_group() -> tuple[str, Any]:
    """Start the two processes of step 4 (they run while the other steps do)."""
    from tensorplay_jax.runtime.launch import spawn

    backend, _ = _devices()
    # A TPU host's chips open in one process only: there the two processes use gloo on CPU.
    pg = "nccl" if backend == "gpu" else "gloo"
    env = {"JAX_PLATFORMS": "cpu"} if backend == "tpu" else None
    return pg, spawn(_pg_worker, 2, args=(pg,), join=False, env=env)


def check_process_group(started: tuple[str, Any]) -> str:
    """all_reduce across two new processes: each gets 1 + 2 = 3."""
    pg, handle = started
    got = handle.join(120)
    for vals, _, _ in got:
        if vals != [3.0] * 4:
            raise AssertionError(f"all_reduce gave {vals}, not 3.0 everywhere")
    platforms = ",".join(sorted({p for _, p, _ in got}))
    ms = max(t for _, _, t in got)
    return f"2 processes, backend {pg}, on {platforms}: ok, {ms:.2f} ms"


# ---------------------------------------------------------------- the table
STEPS = ("collectives", "rpc", "dist_autograd", "sharded", "process_group")


def run_checks(only: Sequence[str] = STEPS) -> list[tuple[str, bool, str, float]]:
    """Run the chosen steps; ``(step, passed, what it found or the error, seconds)`` each."""
    rows: list[tuple[str, bool, str, float]] = []

    def step(name: str, fn: Callable[..., str], *args: Any) -> None:
        if name not in only:
            return
        t0 = time.perf_counter()
        try:
            rows.append((name, True, fn(*args), time.perf_counter() - t0))
        except Exception as e:
            detail = "".join(traceback.format_exception_only(e)).strip()
            rows.append((name, False, detail, time.perf_counter() - t0))

    started = _start_process_group() if "process_group" in only else None
    step("collectives", check_collectives)
    if "rpc" in only or "dist_autograd" in only or "sharded" in only:
        try:
            with _Pair() as pair:
                step("rpc", check_rpc, pair)
                step("dist_autograd", check_dist_autograd, pair)
                step("sharded", check_sharded, pair)
        except Exception as e:
            rows.append(("rpc", False, f"could not start the second process: {e}", 0.0))
    step("process_group", check_process_group, started)
    return rows


def _table(rows: list[tuple[str, bool, str, float]]) -> str:
    width = max(len(r[0]) for r in rows)
    lines = [f"{'step':<{width}}  result  {'seconds':>7}  details"]
    for name, ok, detail, secs in rows:
        lines.append(f"{name:<{width}}  {'ok' if ok else 'FAIL':<6}  {secs:7.2f}  {detail}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the devices and the table of the steps; 0 when every step passed."""
    p = argparse.ArgumentParser(prog="python -m tensorplay_jax.check", description=__doc__)
    p.add_argument("--only", nargs="+", choices=STEPS, default=list(STEPS), help="steps to run")
    a = p.parse_args(argv)
    _prepare_jax()
    import jax

    from tensorplay_jax.runtime.device import device_name

    backend, devs = _devices()
    print(f"tensorplay_jax check: jax {jax.__version__}, backend {backend}")
    print("devices: " + ", ".join(f"{device_name(d)} ({d.device_kind})" for d in devs))
    if backend == "cpu":
        print(
            f"no accelerator here: running the CPU equivalents on {len(devs)} virtual CPU "
            "devices (gloo for the process group)"
        )
    t0 = time.perf_counter()
    rows = run_checks(a.only)
    print(_table(rows))
    failed = [r[0] for r in rows if not r[1]]
    verdict = "FAILED: " + ", ".join(failed) if failed else "all ok"
    print(f"{verdict} in {time.perf_counter() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
