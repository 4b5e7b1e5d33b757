"""Functions the distributed autograd tests run on workers, and the gradient cases.

Every case is written once against a ``call(worker, fn, *args)`` and ops that
accept both Tensors and JAX arrays: run over RPC on Tensors it exercises
distributed autograd; run locally on arrays under ``jax.grad`` it is the
independent oracle.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd
from tensorplay_jax.autograd import attach_outputs, make_node
from tensorplay_jax.distributed import rpc

Call = Callable[..., Any]


# --------------------------------------------------------------------- ops on Tensors or arrays
def tanh(x: Any) -> Any:
    return tp.tanh(x) if isinstance(x, tp.Tensor) else jnp.tanh(x)


def exp(x: Any) -> Any:
    return tp.exp(x) if isinstance(x, tp.Tensor) else jnp.exp(x)


def local_call(worker: str, fn: Call, *args: Any) -> Any:
    return fn(*args)


def rpc_call(worker: str, fn: Call, *args: Any) -> Any:
    return rpc.rpc_sync(worker, fn, args=args)


def caller(local: bool) -> Call:
    return local_call if local else rpc_call


# --------------------------------------------------------------------- remote functions
class Outs(NamedTuple):
    a: Any
    b: Any


def double(t: Any) -> Any:
    return t * 2


def step(x: Any, b: Any) -> Any:
    return tanh(x * b + 0.5)


def chain(x: Any, rest: list[str], local: bool) -> Any:
    """tanh(1.5 x) here, then the same on each worker in ``rest`` (nested RPC)."""
    y = tanh(x * 1.5) + x
    if not rest:
        return y
    return caller(local)(rest[0], chain, y, rest[1:], local)


def first_only(a: Any, b: Any) -> Any:
    return a * 3.0


def outputs(a: Any) -> Any:
    return {"pair": Outs(a * 2.0, exp(a)), "list": [a.sum(), a * a]}


def shapes(m: Any, v: Any, s: Any) -> Any:
    return (m @ v) * s, (m * m).sum(0)


def mixed_dtypes(a32: Any, a64: Any) -> Any:
    return (a32 * 2.0).sum(), (a64 * a64).sum()


def flags_and_scale(a: Any, c: Any) -> Any:
    if isinstance(c, tp.Tensor):
        assert not c.requires_grad and a.requires_grad, (a, c)
    return a * c


def remote_then_fetch(x: Any, local: bool) -> Any:
    """Nested: ``remote()`` to w3 and ``to_here()`` inside a remote function."""
    if local:
        return double(x) + x
    rref = rpc.remote("w3", double, args=(x,))
    return rref.to_here() + x


# The parameter server keeps its parameter in an RRef.
def make_param(seed: int, n: int = 4) -> tp.Tensor:
    rng = np.random.default_rng(seed)
    return tp.tensor(rng.standard_normal(n).astype(np.float32), requires_grad=True)


def use_param(rref: rpc.RRef, x: Any) -> Any:
    return rref.local_value() * x


def param_grad(context_id: int, rref: rpc.RRef) -> Any:
    """On the owner: this context's gradient of the RRef's Tensor, and the number of entries."""
    grads = dist_autograd.get_gradients(context_id)
    return grads.get(rref.local_value()), len(grads)


def grads_here(context_id: int) -> int:
    return len(dist_autograd.get_gradients(context_id))


def has_context(context_id: int) -> bool:
    try:
        dist_autograd.get_gradients(context_id)
    except RuntimeError as e:
        assert f"Could not find autograd context with id: {context_id}" in str(e), e
        return False
    return True


def context_here() -> int:
    """The context id of the RPC being served (callees record even without tensors)."""
    return dist_autograd._current_context().context_id


def nested_plain(to: str) -> int:
    """A tensor-free nested hop: the context reaches ``to`` through this worker."""
    return rpc.rpc_sync(to, context_here)


def raise_in_backward(x: tp.Tensor) -> tp.Tensor:
    def bad(grads: Any) -> Any:
        raise ValueError("boom in backward")

    node = make_node(bad, [x], name="BadBackward")
    return attach_outputs(node, [x.value * 1.0])[0]


def die_in_backward(x: tp.Tensor) -> tp.Tensor:
    def die(grads: Any) -> Any:
        os._exit(3)

    node = make_node(die, [x], name="DieBackward")
    return attach_outputs(node, [x.value * 1.0])[0]


def tap(x: tp.Tensor, on_backward: Callable[[], None]) -> tp.Tensor:
    """Identity on the tape; ``on_backward()`` runs when the backward pass goes through it."""

    def backward(grads: Any) -> Any:
        on_backward()
        return (grads[0],)

    node = make_node(backward, [x], name="Tap")
    return attach_outputs(node, [x.value])[0]


_gradient_arrived = threading.Event()


def noted_double(x: tp.Tensor) -> tp.Tensor:
    """``x * 2``, noting here when its gradient arrives (:func:`gradient_arrived`)."""
    _gradient_arrived.clear()
    return tap(x * 2.0, _gradient_arrived.set)


def gradient_arrived() -> bool:
    return _gradient_arrived.is_set()


def pid() -> int:
    return os.getpid()


def slow_double(t: Any, s: float) -> Any:
    time.sleep(s)
    return t * 2


# --------------------------------------------------------------------- gradient cases
class Case(NamedTuple):
    name: str
    leaves: dict[str, np.ndarray]  # initial values of the driver's leaves
    no_grad: tuple[str, ...]  # leaves created with requires_grad=False
    fn: Callable[[dict[str, Any], Call, bool], list[Any]]  # -> roots
    absent: tuple[str, ...] = ()  # leaves that must get no entry (never reached)


def _r(seed: int, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _one_hop(v: dict, call: Call, local: bool) -> list[Any]:
    return [call("w1", double, v["a"]).sum()]


def _self(v: dict, call: Call, local: bool) -> list[Any]:
    return [(call("w0", double, v["a"]) * v["a"]).sum()]


def _chain4(v: dict, call: Call, local: bool) -> list[Any]:
    return [(call("w1", chain, v["a"], ["w2", "w3"], local) ** 2).sum()]


def _aba(v: dict, call: Call, local: bool) -> list[Any]:
    return [(call("w1", chain, v["a"], ["w0"], local) * v["b"]).sum()]


def _nested_remote(v: dict, call: Call, local: bool) -> list[Any]:
    return [(call("w2", remote_then_fetch, v["a"], local) ** 2).mean()]


def _round_trips(v: dict, call: Call, local: bool) -> list[Any]:
    x = v["a"]
    for i in range(12):
        x = call(f"w{i % 4}", step, x, v["b"])
    return [(x * x).sum()]


def _shapes(v: dict, call: Call, local: bool) -> list[Any]:
    y, z = call("w3", shapes, v["m"], v["v"], v["s"])
    return [(y * y).sum() + z.sum()]


def _unused_input(v: dict, call: Call, local: bool) -> list[Any]:
    return [call("w1", first_only, v["a"], v["b"]).sum()]


def _unused_outputs(v: dict, call: Call, local: bool) -> list[Any]:
    out = call("w2", outputs, v["a"])
    return [(out["pair"].b * 2.0).sum() + out["list"][0]]


def _several_roots(v: dict, call: Call, local: bool) -> list[Any]:
    y = call("w1", double, v["a"])
    z = call("w2", step, v["a"], v["b"])
    return [y.sum(), (z * z).sum(), (v["b"] * 3.0).sum()]


def _dtypes(v: dict, call: Call, local: bool) -> list[Any]:
    p, q = call("w3", mixed_dtypes, v["a32"], v["a64"])
    return [p, q]


def _non_grad(v: dict, call: Call, local: bool) -> list[Any]:
    return [call("w1", flags_and_scale, v["a"], v["c"]).sum()]


def _unused_result(v: dict, call: Call, local: bool) -> list[Any]:
    call("w2", double, v["u"])  # never used by the loss
    return [call("w1", double, v["a"]).sum()]


CASES = [
    Case("one_hop", {"a": _r(1, 4)}, (), _one_hop),
    Case("call_to_self", {"a": _r(2, 5)}, (), _self),
    Case("chain_A_B_C_D", {"a": _r(3, 3)}, (), _chain4),
    Case("chain_A_B_A", {"a": _r(4, 3), "b": _r(5, 3)}, (), _aba),
    Case("nested_remote_in_rpc", {"a": _r(6, 2, 2)}, (), _nested_remote),
    Case("many_round_trips", {"a": _r(7, 6), "b": _r(8, 6)}, (), _round_trips),
    Case("shapes", {"m": _r(9, 3, 4), "v": _r(10, 4, 2), "s": _r(11)}, (), _shapes),
    Case("unused_input", {"a": _r(12, 4), "b": _r(13, 2, 2)}, (), _unused_input),
    Case("unused_outputs", {"a": _r(14, 3)}, (), _unused_outputs),
    Case("several_roots", {"a": _r(15, 4), "b": _r(16, 4)}, (), _several_roots),
    Case("float32_float64", {"a32": _r(17, 3), "a64": _r(18, 3, dtype=np.float64)}, (), _dtypes),
    Case("non_grad_args", {"a": _r(19, 4), "c": _r(20, 4)}, ("c",), _non_grad),
    Case("unused_rpc_result", {"a": _r(21, 4), "u": _r(22, 4)}, (), _unused_result, ("u",)),
]


def oracle(case: Case) -> dict[str, np.ndarray]:
    """``jax.grad`` of the case run locally on arrays (all grad leaves as inputs)."""
    names = [n for n in case.leaves if n not in case.no_grad]
    fixed = {n: jnp.asarray(case.leaves[n]) for n in case.no_grad}

    def loss(xs: dict[str, jax.Array]) -> jax.Array:
        roots = case.fn({**xs, **fixed}, local_call, True)
        return sum(jnp.sum(r) for r in roots)

    g = jax.grad(loss)({n: jnp.asarray(case.leaves[n]) for n in names})
    return {n: np.asarray(x) for n, x in g.items()}


def check_case(case: Case) -> None:
    """Run ``case`` over RPC in a context and compare every leaf with the oracle."""
    want = oracle(case)
    leaves = {n: tp.tensor(x, requires_grad=n not in case.no_grad) for n, x in case.leaves.items()}
    with dist_autograd.context() as ctx_id:
        roots = case.fn(leaves, rpc_call, False)
        dist_autograd.backward(ctx_id, roots)
        got = dist_autograd.get_gradients(ctx_id)
    by_name = {n: got[t] for n, t in leaves.items() if t in got}
    assert len(by_name) == len(got), f"{case.name}: entries for non-leaves {got}"
    expected = set(want) - set(case.absent)
    assert set(by_name) == expected, f"{case.name}: entries {sorted(by_name)} != {sorted(expected)}"
    for n in case.absent:
        assert not np.any(want[n]), (case.name, n)
    for n, g in by_name.items():
        assert g.dtype == case.leaves[n].dtype, (case.name, n, g.dtype)
        assert g.shape == case.leaves[n].shape, (case.name, n, g.shape)
        np.testing.assert_allclose(np.asarray(g), want[n], rtol=1e-5, atol=1e-6, err_msg=case.name)
    for t in leaves.values():
        assert t.grad is None, f"{case.name}: .grad was written"


def check_rref_case() -> None:
    """A Tensor held in an RRef on w2: its gradient lands in w2's context, from two uses."""
    rref = rpc.remote("w2", make_param, args=(5,))
    w0 = np.asarray(rref.to_here().value)
    x = _r(30, 4)

    def loss(w: Any, xa: Any, call: Call, fetched: Any) -> Any:
        return (call("w2", use_param, w, xa) * fetched).sum() + (fetched * fetched).sum()

    want_w, want_x = jax.grad(
        lambda w, xa: loss(None, xa, lambda _w, _f, _r, a: w * a, w), argnums=(0, 1)
    )(jnp.asarray(w0), jnp.asarray(x))
    xt = tp.tensor(x, requires_grad=True)
    with dist_autograd.context() as ctx_id:
        fetched = rref.to_here()
        assert fetched.requires_grad and not fetched.is_leaf
        dist_autograd.backward(ctx_id, [loss(rref, xt, rpc_call, fetched)])
        got_w, n_entries = rpc.rpc_sync("w2", param_grad, args=(ctx_id, rref))
        mine = dist_autograd.get_gradients(ctx_id)
    assert n_entries == 1
    np.testing.assert_allclose(np.asarray(got_w), np.asarray(want_w), rtol=1e-5, atol=1e-6)
    assert list(mine) == [xt]
    np.testing.assert_allclose(np.asarray(mine[xt]), np.asarray(want_x), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------- concurrency
def threads_job(rank: int, nthreads: int, workers: list[str]) -> int:
    """``nthreads`` threads here, each in its own context: several RPCs, one backward."""
    errors: list[BaseException] = []

    def one(i: int) -> None:
        try:
            a = np.full(3, 0.1 * (i + 1) + rank, np.float32)
            t = tp.tensor(a, requires_grad=True)
            with dist_autograd.context() as ctx_id:
                y = t
                for k, w in enumerate(workers):
                    y = rpc.rpc_sync(w, step, args=(y, tp.tensor(np.float32(1.0 + k))))
                dist_autograd.backward(ctx_id, [y.sum()])
                g = dist_autograd.get_gradients(ctx_id)[t]

            def f(x: Any) -> Any:
                for k in range(len(workers)):
                    x = step(x, 1.0 + k)
                return x.sum()

            np.testing.assert_allclose(np.asarray(g), np.asarray(jax.grad(f)(a)), rtol=1e-5)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return nthreads


def trainer_step(ps: str, rref: rpc.RRef, seed: int, steps: int) -> int:
    """A trainer: ``steps`` contexts, each reading the PS parameter; checks its own gradients."""
    for s in range(steps):
        x = _r(seed * 100 + s, 4)
        xt = tp.tensor(x, requires_grad=True)
        with dist_autograd.context() as ctx_id:
            y = rpc.rpc_sync(ps, use_param, args=(rref, xt))
            dist_autograd.backward(ctx_id, [(y * y).sum()])
            got_w, n = rpc.rpc_sync(ps, param_grad, args=(ctx_id, rref))
            gx = dist_autograd.get_gradients(ctx_id)[xt]
        w = np.asarray(rpc.rpc_sync(ps, rpc_value, args=(rref,)))
        assert n == 1
        np.testing.assert_allclose(np.asarray(got_w), 2 * w * x * x, rtol=1e-5)
        np.testing.assert_allclose(np.asarray(gx), 2 * w * w * x, rtol=1e-5)
    return steps


def rpc_value(rref: rpc.RRef) -> Any:
    return rref.local_value().value


def relay(x: Any, to: str, fn: Call) -> Any:
    """Forward ``fn(x * 1.0)`` to worker ``to`` (a nested hop for error propagation)."""
    return rpc.rpc_sync(to, fn, args=(x * 1.0,)) + 0.0


@tp.function
def jsin2(x: Any) -> Any:
    """A pure JAX function lifted onto the tape (one node)."""
    return jnp.sin(x) * 2.0


def context_count() -> int:
    """How many distributed autograd contexts are alive on this worker."""
    from tensorplay_jax.distributed.autograd import _context

    return len(_context.active_context_ids())


def plain_value(n: int) -> int:
    """A tensor-free value for an RRef."""
    return n


def scaled_leaf(k: float) -> tp.Tensor:
    """``ones(3) * k`` of a leaf that requires grad: a recorded (deferred) operation."""
    return tp.ones(3, requires_grad=True) * k


def still_pending(rref: rpc.RRef) -> bool:
    """On the owner: whether the RRef's value waits for its deferred work to run."""
    return tp.autograd.is_pending(rref.local_value())
