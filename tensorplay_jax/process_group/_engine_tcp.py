"""TCP engine: process-group collectives across hosts, in numpy over authenticated sockets.

Why it exists: across hosts, XLA's CPU collectives (gloo inside XLA) run all_reduce
at a fraction of ``torch.distributed`` gloo's speed on the same link (the figures are
in ``docs/benchmarks.md``, from ``benchmarks/process_group.py --crosshost``).
The data moves over the same kind of TCP link either way, so the gap is overhead,
not the wire: this engine keeps the wire busy from Python with few, large syscalls.

Design: each group's members hold a full mesh of authenticated TCP connections
(``_tcp_mesh``: set-up, and the one poll loop every transfer runs on). Each call
first exchanges the members' descriptors (so a mismatch raises the same error on
every rank), then its data, each peer getting exactly what it needs. all_reduce is
a direct exchange for two members up to ``_DIRECT_MAX`` (each sends its whole
input once and reduces what arrives, chunk by chunk, while the rest is still on
the wire), else a ring reduce-scatter + all-gather (each member reduces 1/n of
the data). Results
of ``_POOL_MIN`` bytes and more come from a small pool, reused once the caller has
dropped them: faulting in a fresh large result costs as much as moving it. A group
with several members on each of several hosts (the same number
on each) runs all_reduce hierarchically: a shared-memory reduce-scatter within
each host (``_engine_shm``), then each local member all-reduces its slice with its
counterparts on the other hosts over their connections (so every core and one
connection per member share the link), then a shared-memory all-gather. Every
wait is bounded by the group's timeout; a lost peer or a timeout names the rank
and leaves the group unusable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import mmap
import time
import weakref

import numpy as np

from tensorplay_jax.collectives.reduce_op import ReduceOp, reduce_into
from tensorplay_jax.process_group import _descriptor
from tensorplay_jax.process_group._engine_shm import ShmEngine
from tensorplay_jax.process_group._tcp_mesh import TcpMesh
from tensorplay_jax.process_group.engine import GroupSpec, unusable
from tensorplay_jax.process_group.host import bounds, on_host, raw, reduced
from tensorplay_jax.runtime import trace
from tensorplay_jax.runtime.device import aligned_empty

__all__ = ["TcpEngine"]

_REDUCE_STEP = 256 << 10  # reduce what arrived once this many bytes are in
_DIRECT_MAX = 1 << 20  # two members exchange whole inputs up to this many bytes
_POOL_MIN = 1 << 20  # all_reduce results this large come from the result pool
_POOL_SLOTS = 2  # result buffers a group keeps for reuse


class _Pooled:
    """A result buffer that the TCP engine's pool owns, lent to one result at a time.

    The rule: the pool owns the memory (an anonymous mapping, page-aligned, so
    ``jax.device_put`` may alias it); :meth:`lend` hands it out as a fresh wrapper
    array, which every view of the result (and a ``jax.Array`` aliasing one) keeps
    alive, and the pool keeps only a weak reference to that wrapper. The buffer is
    free again once the wrapper has been collected.

    Example:
      >>> buf = _Pooled(1 << 20)
      >>> result = buf.lend().view(np.float32)
      >>> buf.free()
      False
      >>> del result
      >>> buf.free()
      True
    """

    __slots__ = ("_lent", "memory", "nbytes")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.memory = mmap.mmap(-1, nbytes)
        self._lent: weakref.ref[np.ndarray] | None = None

    def free(self) -> bool:
        """Whether no result holds the buffer now."""
        return self._lent is None or self._lent() is None

    def lend(self) -> np.ndarray:
        """The whole buffer as a new ``uint8`` array (the lease: see the class)."""
        wrapper = np.frombuffer(self.memory, np.uint8)
        self._lent = weakref.ref(wrapper)
        return wrapper


class TcpEngine:
    """Collectives of one group over a full mesh of authenticated TCP connections.

    Created collectively by every member (see :class:`~._tcp_mesh.TcpMesh`).

    Args:
      spec: the group. With several members on each of several of its ``hosts``,
        all_reduce runs hierarchically (see the module docstring).

    Example:
      >>> TcpEngine.name
      'tcp'
    """

    name = "tcp"

    def __init__(self, spec: GroupSpec):
        self.device = spec.device
        self.ranks, self.me, self.n, self.timeout_s = spec.ranks, spec.me, spec.n, spec.timeout_s
        self.dlen = _descriptor.length(self.n)
        self.scratch = np.empty(0, np.uint8)
        self.pool: list[_Pooled] = []  # result buffers, reused once no result holds them
        self.mesh = TcpMesh(spec)
        self.peers = self.mesh.peers
        self.local: ShmEngine | None = None
        self.across: list[int] = []  # my counterparts on every host (me included), in host order
        hosts, me = spec.hosts, spec.me
        order = list(dict.fromkeys(hosts))
        on = [[j for j in range(self.n) if hosts[j] == h] for h in order]
        if len(on) > 1 and len({len(m) for m in on}) == 1 and len(on[0]) > 1:
            mine = next(m for m in on if me in m)
            p = mine.index(me)
            self.across = [m[p] for m in on]
            local = dataclasses.replace(
                spec,
                key=f"{spec.key}/local{order.index(hosts[me])}",
                ranks=tuple(spec.ranks[j] for j in mine),
                me=p,
                devices=tuple(spec.devices[j] for j in mine),
                hosts=tuple(hosts[j] for j in mine),
            )
            self.local = ShmEngine(local)

    def close(self) -> None:
        """Close this member's connections (and its shared-memory engine, if any)."""
        self.mesh.close()
        if self.local is not None:
            self.local.close()
            self.local = None

    @property
    def broken(self) -> str | None:
        """Why the group is unusable (its mesh is out of step), or None."""
        return self.mesh.broken

    # ----------------------------------------------------------------- plumbing
    def _begin(self, fn: str, desc: np.ndarray) -> tuple[float, np.ndarray]:
        """Exchange descriptors with every member and compare them (raising everywhere alike)."""
        if self.mesh.broken:
            raise unusable(fn, self.mesh.broken)
        deadline = time.monotonic() + self.timeout_s
        descs = np.empty((self.n, self.dlen), np.int64)
        descs[self.me] = desc
        mine = raw(descs[self.me])
        # Meeting the others is a profile's wait; the rest is the transfer.
        with trace.span(f"wait {fn}", "pg") if trace.RECORDING else contextlib.nullcontext():
            self.mesh.exchange(
                fn,
                deadline,
                {j: mine for j in self.peers},
                {j: raw(descs[j]) for j in self.peers},
            )
        err = _descriptor.check(fn, descs, self.ranks)
        if err:
            raise ValueError(err)
        return deadline, descs

    def _tmp(self, count: int, dtype: np.dtype) -> np.ndarray:
        """A reused scratch buffer of ``count`` elements."""
        nbytes = count * dtype.itemsize
        if self.scratch.nbytes < nbytes:
            self.scratch = aligned_empty((nbytes,), np.uint8)
        return self.scratch[:nbytes].view(dtype)

    def _result(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An aligned array for a result; a large one from a pooled buffer no result holds.

        A large fresh buffer costs a page fault per page on first write; a pooled one
        whose earlier result has been dropped is already mapped. Ownership (see
        :class:`_Pooled`): the pool owns each buffer; a result borrows it, and the
        buffer is free again once nothing holds that result (a ``jax.Array`` aliasing
        it included).
        """
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < _POOL_MIN:
            return aligned_empty(shape, dtype)
        slot = next((b for b in self.pool if b.nbytes == nbytes and b.free()), None)
        if slot is None:
            slot = _Pooled(nbytes)
            self.pool = [*self.pool[-(_POOL_SLOTS - 1) :], slot]
        return slot.lend().view(dtype).reshape(shape)

    def _reducer(self, acc, first, tmp, op: ReduceOp, mine_first: bool, n: int):
        """``on_recv`` that reduces ``acc = first op tmp`` as ``tmp`` fills, in steps."""
        size = tmp.dtype.itemsize
        step = max(1, _REDUCE_STEP // size)
        done = [0]

        def on_recv(_j: int, nbytes: int) -> None:
            got = nbytes // size
            if got - done[0] >= step or got == tmp.size:
                a, b = done[0], got
                parts = [first[a:b], tmp[a:b]] if mine_first else [tmp[a:b], first[a:b]]
                reduce_into(acc[a:b], parts, op, n)
                done[0] = got

        return on_recv

    def _gathered(self, fn, deadline, x, to: int | None) -> list[np.ndarray] | None:
        """Every member's ``x`` on member ``to`` (all members when None); None elsewhere."""
        me = self.me
        if to is not None and me != to:
            self.mesh.exchange(fn, deadline, {to: raw(x)}, {})
            return None
        bufs = [x if j == me else aligned_empty(x.shape, x.dtype) for j in range(self.n)]
        sends = {} if to is not None else {j: raw(x) for j in self.peers}
        self.mesh.exchange(fn, deadline, sends, {j: raw(bufs[j]) for j in self.peers})
        return bufs

    def _stack(self, fn, deadline, x, to: int | None) -> np.ndarray | None:
        me = self.me
        if to is not None and me != to:
            self.mesh.exchange(fn, deadline, {to: raw(x)}, {})
            return None
        out = aligned_empty((self.n, *x.shape), x.dtype)
        out[me] = x
        sends = {} if to is not None else {j: raw(x) for j in self.peers}
        # out[j : j + 1], a view even where out[j] is a 0-d copy (a 0-d input)
        self.mesh.exchange(fn, deadline, sends, {j: raw(out[j : j + 1]) for j in self.peers})
        return out

    # -------------------------------------------------------------- collectives
    @on_host
    def all_reduce(self, x: np.ndarray, op: ReduceOp, desc: np.ndarray) -> np.ndarray:
        fn = "all_reduce"
        deadline, _ = self._begin(fn, desc)
        if self.local is not None and x.size >= self.local.n:
            return self._hierarchical(fn, deadline, x, op)
        out = self._result(x.shape, x.dtype)
        self._ring(fn, deadline, x.reshape(-1), out.reshape(-1), op, list(range(self.n)))
        return out

    def _ring(self, fn, deadline, flat: np.ndarray, acc: np.ndarray, op: ReduceOp, members):
        """``acc`` = the reduction of ``flat`` over ``members`` (group indices, me among them).

        Two members with small inputs exchange them whole (one step); otherwise a ring
        reduce-scatter, then a ring all-gather (each chunk is reduced on one member:
        identical results, and each member reduces 1/n of the data, not all of it).
        """
        n = len(members)
        if n == 1 or flat.size == 0:
            reduce_into(acc, [flat], op, 1)
            return
        k = members.index(self.me)
        if n == 2 and flat.nbytes <= _DIRECT_MAX:
            peer = members[1 - k]
            tmp = self._tmp(flat.size, flat.dtype)
            on_recv = self._reducer(acc, flat, tmp, op, k == 0, n)
            self.mesh.exchange(fn, deadline, {peer: raw(flat)}, {peer: raw(tmp)}, on_recv)
            return
        base = ReduceOp.SUM if op is ReduceOp.AVG else op
        chunks = bounds(flat.size, n)
        right, left = members[(k + 1) % n], members[(k - 1) % n]
        acc[...] = flat
        tmp = self._tmp(max(b - a for a, b in chunks), flat.dtype)
        for s in range(n - 1):
            (sa, sb), (ra, rb) = chunks[(k - s) % n], chunks[(k - s - 1) % n]
            chunk, t = acc[ra:rb], tmp[: rb - ra]
            on_recv = self._reducer(chunk, chunk, t, base, False, n)
            self.mesh.exchange(fn, deadline, {right: raw(acc[sa:sb])}, {left: raw(t)}, on_recv)
        if op is ReduceOp.AVG:
            a, b = chunks[(k + 1) % n]
            np.divide(acc[a:b], n, out=acc[a:b], casting="unsafe")
        for s in range(n - 1):
            (sa, sb), (ra, rb) = chunks[(k + 1 - s) % n], chunks[(k - s) % n]
            self.mesh.exchange(fn, deadline, {right: raw(acc[sa:sb])}, {left: raw(acc[ra:rb])})

    def _hierarchical(self, fn, deadline, x: np.ndarray, op: ReduceOp) -> np.ndarray:
        """all_reduce as shm reduce-scatter, a ring over my counterparts, shm all-gather.

        The ring writes this member's slice of the result in place, and the
        all-gather fills in the other slices: no copy of the whole result.
        """
        shm = self.local
        p, flat = shm.n, x.reshape(-1)
        chunk = -(-flat.size // p)
        if flat.size == p * chunk:
            rows = flat.reshape(p, chunk)
        else:
            rows = np.zeros((p, chunk), x.dtype)
            rows.reshape(-1)[: flat.size] = flat
        base = ReduceOp.SUM if op is ReduceOp.AVG else op
        code = _descriptor.dtype_code(fn, x.dtype)
        d = _descriptor.encode(p, "reduce_scatter", code, rows.shape, reduce_op=base)
        part = shm.reduce_scatter_host(rows, base, d)
        out = self._result((p, chunk), x.dtype)
        self._ring(fn, deadline, part, out[shm.me], base, self.across)
        if op is ReduceOp.AVG:
            np.divide(out[shm.me], self.n, out=out[shm.me], casting="unsafe")
        shm.all_gather_into(out[shm.me], out, _descriptor.encode(p, "all_gather", code, (chunk,)))
        if out.size != flat.size:
            return out.reshape(-1)[: flat.size].reshape(x.shape).copy()
        return out.reshape(x.shape)

    @on_host
    def broadcast(self, x: np.ndarray, src: int, desc: np.ndarray) -> np.ndarray | None:
        deadline, _ = self._begin("broadcast", desc)
        if self.me == src:
            self.mesh.exchange("broadcast", deadline, {j: raw(x) for j in self.peers}, {})
            return None  # the result is the input
        out = aligned_empty(x.shape, x.dtype)
        self.mesh.exchange("broadcast", deadline, {}, {src: raw(out)})
        return out

    @on_host
    def reduce(self, x: np.ndarray, dst: int, op: ReduceOp, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("reduce", desc)
        parts = self._gathered("reduce", deadline, x, dst)
        return aligned_empty(x.shape, x.dtype, zero=True) if parts is None else reduced(parts, op)

    @on_host
    def all_gather(self, x: np.ndarray, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("all_gather", desc)
        return self._stack("all_gather", deadline, x, None)

    @on_host
    def gather(self, x: np.ndarray, dst: int, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("gather", desc)
        out = self._stack("gather", deadline, x, dst)
        return aligned_empty((self.n, *x.shape), x.dtype, zero=True) if out is None else out

    @on_host
    def scatter(self, x: np.ndarray, src: int, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("scatter", desc)
        out = aligned_empty(x.shape[1:], x.dtype)
        if self.me == src:
            self.mesh.exchange("scatter", deadline, {j: raw(x[j]) for j in self.peers}, {})
            out[...] = x[src]
        else:
            self.mesh.exchange("scatter", deadline, {}, {src: raw(out)})
        return out

    @on_host
    def reduce_scatter(self, x: np.ndarray, op: ReduceOp, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("reduce_scatter", desc)
        return reduced(self._swap("reduce_scatter", deadline, x), op)

    def _swap(self, fn: str, deadline: float, x: np.ndarray) -> np.ndarray:
        """Row j of every member's ``(n, ...)`` ``x``, stacked, on member j."""
        me = self.me
        out = aligned_empty(x.shape, x.dtype)
        out[me] = x[me]
        self.mesh.exchange(
            fn,
            deadline,
            {j: raw(x[j : j + 1]) for j in self.peers},
            {j: raw(out[j : j + 1]) for j in self.peers},  # views, also for (n,) inputs
        )
        return out

    @on_host
    def all_to_all(self, x: np.ndarray, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("all_to_all", desc)
        return self._swap("all_to_all", deadline, x)

    @on_host
    def all_to_all_single(self, x: np.ndarray, desc: np.ndarray) -> np.ndarray:
        fn = "all_to_all_single"
        deadline, descs = self._begin(fn, desc)
        n, me = self.n, self.me
        rows = [_descriptor.decode(descs[j], n) for j in range(n)]
        row = math.prod(x.shape[1:])
        ins, outs = rows[me]["in_splits"], rows[me]["out_splits"]
        out = aligned_empty((sum(outs), *x.shape[1:]), x.dtype)
        src = x.reshape(len(x), row) if row else x.reshape(len(x), 0)
        dst = out.reshape(len(out), row) if row else out.reshape(len(out), 0)
        starts = np.cumsum((0, *ins))
        at = np.cumsum((0, *outs))
        dst[at[me] : at[me + 1]] = src[starts[me] : starts[me + 1]]
        self.mesh.exchange(
            fn,
            deadline,
            {j: raw(src[starts[j] : starts[j + 1]]) for j in self.peers},
            {j: raw(dst[at[j] : at[j + 1]]) for j in self.peers},
        )
        return out
