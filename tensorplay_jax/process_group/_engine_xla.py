"""XLA engine: process-group collectives as compiled XLA programs on a one-device-per-process mesh.

Each collective is a ``jax.jit(jax.shard_map(...))`` program over the group's
mesh (one device per member process), compiled once per (collective, shape,
dtype, reduction, root) and kept in :attr:`XlaEngine.programs`; a repeated call
runs the cached executable. On CPU XLA runs the cross-process exchange through
gloo (``jax_cpu_collectives_implementation``), on GPU through NCCL.

Before each program the members swap descriptors through the coordination
service with the group's deadline: a missing peer or a mismatched shape raises
here, on every rank, instead of blocking inside the XLA program. Descriptors are
signed with the job secret (``_kv``): one that an outsider wrote, or moved from
another key, is refused before the program runs.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from tensorplay_jax.collectives.reduce_op import ReduceOp, lax_reduce, stacked_reduce
from tensorplay_jax.process_group import _descriptor, _kv, _startup
from tensorplay_jax.process_group.engine import GroupSpec, unusable
from tensorplay_jax.runtime import trace
from tensorplay_jax.runtime.device import to_device

__all__ = ["XlaEngine"]

_AXIS = "r"


def _tree_broadcast(x: jax.Array, src: int, n: int) -> jax.Array:
    """Binomial-tree broadcast from ``src``: log2(n) rounds of one ppermute each."""
    idx = lax.axis_index(_AXIS)
    rel = (idx - src) % n
    out = x
    step = 1
    while step < n:
        perm = [((src + r) % n, (src + r + step) % n) for r in range(step) if r + step < n]
        got = lax.ppermute(out, _AXIS, perm)
        out = jnp.where((rel >= step) & (rel < 2 * step), got, out)
        step *= 2
    return out


def _reduce_stacked(y: jax.Array, op: ReduceOp) -> jax.Array:
    return stacked_reduce(y, op).astype(y.dtype)


def _bodies(n: int) -> dict[str, Callable]:
    """Per-rank program bodies; ``x`` is this rank's block, extra args are static."""

    def all_to_all(x):
        return lax.all_to_all(x, _AXIS, 0, 0, tiled=False)

    def is_root(root):
        return lax.axis_index(_AXIS) == root

    def reduce_scatter(x, op):
        if op in (ReduceOp.SUM, ReduceOp.AVG):
            s = lax.psum_scatter(x, _AXIS, scatter_dimension=0, tiled=False)
            return s / jnp.asarray(n, x.dtype) if op is ReduceOp.AVG else s
        return _reduce_stacked(all_to_all(x), op)

    return {
        "all_reduce": lambda x, op: lax_reduce(x, _AXIS, op),
        "broadcast": lambda x, root: _tree_broadcast(x, root, n),
        "reduce": lambda x, op, root: jnp.where(
            is_root(root), lax_reduce(x, _AXIS, op), jnp.zeros_like(x)
        ),
        "all_gather": lambda x: lax.all_gather(x, _AXIS),
        "gather": lambda x, root: jnp.where(
            is_root(root), lax.all_gather(x, _AXIS), jnp.zeros((n, *x.shape), x.dtype)
        ),
        "scatter": lambda x, root: all_to_all(x)[root],
        "reduce_scatter": reduce_scatter,
        "all_to_all": all_to_all,
        "ppermute": lambda x, perm: lax.ppermute(x, _AXIS, perm),
    }


class XlaEngine:
    """Collectives of one group as cached XLA programs.

    Args:
      spec: the group; its ``timeout_s`` bounds the descriptor exchange before each
        program, its ``devices`` make the mesh.
    """

    name = "xla"

    def __init__(self, spec: GroupSpec):
        self.key, self.ranks, self.me, self.n = spec.key, spec.ranks, spec.me, spec.n
        self.timeout_s = spec.timeout_s
        self.device = spec.device
        self.mesh = Mesh(np.array(spec.devices, dtype=object), (_AXIS,))
        self.sharding = NamedSharding(self.mesh, P(_AXIS))
        self.bodies = _bodies(self.n)
        self.programs: dict[tuple, Callable] = {}
        self.traces = 0  # bodies traced so far (a cached call adds none)
        self.seq = 0
        self.broken: str | None = None

    def close(self) -> None:
        """Drop the cached programs."""
        self.programs.clear()

    # ----------------------------------------------------------------- plumbing
    def exchange(
        self, fn: str, desc: np.ndarray, peers: tuple[int, ...] | None = None
    ) -> np.ndarray:
        """Swap descriptors with the members (or ``peers``, as indices); validate them.

        Returns:
          ``(n, len)`` descriptors, rows of non-peers left as -1.
        """
        if self.broken:
            raise unusable(fn, self.broken)
        peers = tuple(range(self.n)) if peers is None else peers
        self.seq += 1
        deadline = time.monotonic() + self.timeout_s
        base = f"{self.key}/{self.seq}"
        _kv.set(f"{base}/{self.me}", desc.tobytes())
        descs = np.full((self.n, desc.size), -1, np.int64)
        descs[self.me] = desc
        for j in peers:
            if j == self.me:
                continue
            try:
                raw = _kv.get(f"{base}/{j}", max(1e-3, deadline - time.monotonic()), fn)
            except _kv.KVTimeout:
                late = [self.ranks[i] for i in peers if i != self.me]
                late = [
                    self.ranks[int(k.rsplit("/", 1)[1])]
                    for k in _kv.missing([f"{base}/{self.ranks.index(r)}" for r in late])
                ]
                self.broken = f"{fn} timed out"
                raise TimeoutError(
                    f"{fn}: Timed out after {self.timeout_s:.3g}s waiting for rank(s) {late} "
                    "to join the collective (a peer is missing, stuck or made different calls)"
                ) from None
            except _kv.ForgedValue:
                self.broken = f"{fn}: a descriptor not signed with the job secret"
                raise
            if len(raw) != desc.nbytes:
                self.broken = f"{fn}: a malformed descriptor"
                raise ValueError(
                    f"{fn}: rank {self.ranks[j]}'s descriptor has {len(raw)} bytes, expected "
                    f"{desc.nbytes}; are all ranks running the same tensorplay_jax version?"
                )
            descs[j] = np.frombuffer(raw, np.int64)
        if self.seq > 2:  # everyone has read our key of two calls ago
            _kv.delete(f"{self.key}/{self.seq - 2}/{self.me}")
        sub = tuple(self.ranks[j] for j in peers)
        err = _descriptor.check(fn, descs[list(peers)], sub)
        if err:
            raise ValueError(err)
        return descs

    def run(self, op: str, x: jax.Array, *static) -> jax.Array:
        """Run body ``op`` on this rank's block ``x`` (ndim >= 1); return this rank's result."""
        if x.size == 0:  # nothing to move; the shapes already agree on every rank
            shape = {"all_gather": (self.n, *x.shape), "gather": (self.n, *x.shape)}.get(
                op, x.shape[1:] if op in ("scatter", "reduce_scatter") else x.shape
            )
            return to_device(np.zeros(shape, x.dtype), self.device)
        k = (op, x.shape, x.dtype, static)
        prog = self.programs.get(k)
        if prog is None:
            body = self.bodies[op]

            def traced(b):
                self.traces += 1
                return body(b, *static)

            prog = jax.jit(
                jax.shard_map(traced, mesh=self.mesh, in_specs=P(_AXIS), out_specs=P(_AXIS))
            )
            self.programs[k] = prog
        g = jax.make_array_from_single_device_arrays(
            (self.n * x.shape[0], *x.shape[1:]), self.sharding, [x]
        )
        return prog(g).addressable_data(0)

    # -------------------------------------------------------------- collectives
    def _lift(self, x) -> tuple[jax.Array, bool]:
        x = to_device(x, self.device)
        return (x.reshape(1), True) if x.ndim == 0 else (x, False)

    def _go(self, fn: str, desc: np.ndarray, x, *static) -> jax.Array:
        if trace.RECORDING:  # meeting the others is the wait; the rest is the transfer
            with trace.span(f"wait {fn}", "pg"):
                self.exchange(fn, desc)
        else:
            self.exchange(fn, desc)
        xd, scalar = self._lift(x)
        y = self.run(fn, xd, *static)
        return y.reshape(()) if scalar else y

    def all_reduce(self, x, op: ReduceOp, desc: np.ndarray) -> jax.Array:
        return self._go("all_reduce", desc, x, op)

    def broadcast(self, x, src: int, desc: np.ndarray) -> jax.Array:
        return self._go("broadcast", desc, x, src)

    def reduce(self, x, dst: int, op: ReduceOp, desc: np.ndarray) -> jax.Array:
        return self._go("reduce", desc, x, op, dst)

    def all_gather(self, x, desc: np.ndarray) -> jax.Array:
        self.exchange("all_gather", desc)
        x, scalar = self._lift(x)  # a 0-d input travels as (1,) and comes back as (N,)
        y = self.run("all_gather", x)
        return y.reshape(self.n) if scalar else y

    def gather(self, x, dst: int, desc: np.ndarray) -> jax.Array:
        self.exchange("gather", desc)
        x, scalar = self._lift(x)
        y = self.run("gather", x, dst)
        return y.reshape(self.n) if scalar else y

    def scatter(self, x, src: int, desc: np.ndarray) -> jax.Array:
        self.exchange("scatter", desc)
        return self.run("scatter", to_device(x, self.device), src)

    def reduce_scatter(self, x, op: ReduceOp, desc: np.ndarray) -> jax.Array:
        self.exchange("reduce_scatter", desc)
        return self.run("reduce_scatter", to_device(x, self.device), op)

    def all_to_all(self, x, desc: np.ndarray) -> jax.Array:
        self.exchange("all_to_all", desc)
        return self.run("all_to_all", to_device(x, self.device))

    def all_to_all_single(self, x, desc: np.ndarray) -> jax.Array:
        """Uneven pieces travel padded to the longest piece, then are cut on arrival."""
        descs = self.exchange("all_to_all_single", desc)
        n, me = self.n, self.me
        rows = [_descriptor.decode(descs[j], n) for j in range(n)]
        width = max(1, max(max(r["in_splits"]) for r in rows))
        xs = np.asarray(x)
        padded = np.zeros((n, width, *xs.shape[1:]), xs.dtype)
        at = 0
        for j, k in enumerate(rows[me]["in_splits"]):
            padded[j, :k] = xs[at : at + k]
            at += k
        y = np.asarray(self.run("all_to_all", to_device(padded, self.device)))
        y = np.concatenate([y[j, :k] for j, k in enumerate(rows[me]["out_splits"])], axis=0)
        return to_device(y, self.device)

    def send_recv(self, fn: str, x, src: int, dst: int, desc: np.ndarray) -> jax.Array:
        """Move ``x`` from member ``src`` to member ``dst`` (this engine's group is the pair)."""
        self.exchange(fn, desc, peers=(src, dst))
        xd, scalar = self._lift(x)
        y = self.run("ppermute", xd, ((src, dst),))
        return y.reshape(()) if scalar else y


def _refusal(spec: GroupSpec) -> str | None:
    """Why the XLA engine cannot run ``spec``'s group: it started without JAX's runtime."""
    return _startup.runtime_needed(spec.fn, spec.backend, "xla") if None in spec.devices else None
