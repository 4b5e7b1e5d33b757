"""Shared-memory engine: process-group collectives for ranks on one host, in numpy over /dev/shm.

Why it exists: XLA's CPU collectives go through gloo over loopback TCP, and on one
host they move data several times slower than ``torch.distributed`` gloo (the
figures are in ``docs/benchmarks.md``, from ``benchmarks/process_group.py``).
Ranks on one host can skip the sockets: each rank owns a slot in a shared segment,
writes what others need, meets them at a
:class:`~tensorplay_jax.process_group._shared_memory.TickBarrier` and reads what it needs.

Each call: (A) every rank writes its descriptor and meets the others; all compare
the descriptors and raise the same error together on a mismatch. Small calls
(every rank's input at most ``PG_SHM_SMALL_BYTES``) also write their whole input
before this meeting, into one of ``PG_SHM_DEPTH`` small buffer sets (call number
modulo the depth), and then just compute their result from everyone's inputs:
one meeting per call.
Large calls grow the data segment if needed, then (B) copy into their slot and
meet again, then (C) read; all-reduce and reduce-scatter reduce one chunk each
(every rank ends with bit-identical results) and all-reduce meets once more to
share the reduced chunks. The next call's meeting A protects the slots; the
ring of small buffer sets keeps a fast rank's next small calls off buffers a slow
rank still reads.

A small broadcast's src does not meet the others: it publishes and returns, so it
may run up to ``PG_SHM_DEPTH - 1`` calls ahead of its receivers (as a socket
sender runs ahead into kernel buffers). It validates such a call's descriptors
later, deterministically: at its next call that meets the others, or when the
ring wraps onto that call's buffers, whichever comes first; a mismatch poisons
that call on every rank.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

from tensorplay_jax.collectives.reduce_op import ReduceOp, reduce_into
from tensorplay_jax.process_group import _descriptor, _kv
from tensorplay_jax.process_group._shared_memory import Segment, TickBarrier
from tensorplay_jax.process_group.engine import GroupSpec, unusable
from tensorplay_jax.process_group.host import bounds, copied, on_host, reduced, stacked
from tensorplay_jax.runtime.device import aligned_empty
from tensorplay_jax.runtime.settings import PG_SHM_DEPTH, PG_SHM_MIN_CAPACITY, PG_SHM_SMALL_BYTES

__all__ = ["ShmEngine"]

_PATH_BYTES = 512


def _small_limit(fn: str, n: int) -> int:
    """Largest per-rank input that takes the one-meeting path.

    On that path every rank reduces all ``n`` inputs itself, where the chunked path
    splits the reduction but meets three times. With two ranks the one meeting wins
    up to the full small buffer; with more ranks, the chunked reduction wins past a
    quarter of it (``benchmarks/process_group.py`` measures both).
    """
    if fn in ("all_reduce", "reduce_scatter", "reduce") and n > 2:
        return PG_SHM_SMALL_BYTES // 4
    return PG_SHM_SMALL_BYTES


class ShmEngine:
    """Collectives of one group whose members share a host.

    Created collectively by every member (group index 0 makes the segments and
    publishes their names: the control segment's through the coordination service,
    signed with the job secret; the data segment's in the control segment). The
    others map a segment only after ``Segment.attach`` has checked that it is one.

    Args:
      spec: the group (its key prefix, members, deadline, this process's device).
    """

    name = "shm"

    def __init__(self, spec: GroupSpec):
        key, ranks, me, timeout_s, fn = spec.key, spec.ranks, spec.me, spec.timeout_s, spec.fn
        self.device = spec.device
        self.ranks, self.me, self.n, self.timeout_s = ranks, me, spec.n, timeout_s
        n = self.n
        self.dlen = _descriptor.length(n)
        words = 3 * n + 2 + PG_SHM_DEPTH * n * self.dlen
        small_at = -(-(words * 8 + _PATH_BYTES) // 64) * 64
        size = small_at + PG_SHM_DEPTH * n * PG_SHM_SMALL_BYTES
        if me == 0:
            self.ctrl_seg = Segment.create("ctrl", size)
            _kv.set(f"{key}/ctrl", self.ctrl_seg.path.encode())
        else:
            path = _kv.get(f"{key}/ctrl", timeout_s, fn).decode(errors="replace")
            self.ctrl_seg = Segment.attach(path, size, fn)
        buf = self.ctrl_seg.buf
        words_view = buf[: words * 8].view(np.int64)
        self.ticks = words_view[:n]
        self.pids = words_view[n : 2 * n]
        self.bells = words_view[2 * n : 3 * n].view(np.int32)[::2]  # futex doorbells
        self.meta = words_view[3 * n : 3 * n + 2]  # [data generation, slot capacity]
        k = PG_SHM_DEPTH
        self.descs = words_view[3 * n + 2 :].reshape(k, n, self.dlen)  # [call % k, rank]
        self.path_area = buf[words * 8 : words * 8 + _PATH_BYTES]
        self.small = buf[small_at:].reshape(k, n, PG_SHM_SMALL_BYTES)  # [call % k, rank]
        self.pids[me] = os.getpid()
        _kv.barrier(f"{key}/mapped", timeout_s, ranks)
        if me == 0:
            self.ctrl_seg.unlink()
        self.bar = TickBarrier(self.ticks, self.pids, self.bells, me, ranks)
        self.data: Segment | None = None
        self.gen = 0
        self.cap = 0
        self.calls = 0
        self.arrivals = [0] * k  # step-A tick of call c at [c % k]
        self.pending: list[tuple[int, str]] = []  # one-sided calls (number, fn) to validate
        self.slots: np.ndarray | None = None  # (n, cap) uint8
        self._unlink_after_sync: Segment | None = None
        self.broken: str | None = None

    # ----------------------------------------------------------------- plumbing
    def close(self) -> None:
        """Unmap this rank's segments."""
        self.slots = self.small = None
        self.descs = self.ticks = self.pids = self.meta = self.bells = None
        self.bar = None
        if self.data is not None:
            self.data.close()
        self.path_area = None
        self.ctrl_seg.close()

    def _sync(self, deadline: float, fn: str) -> None:
        self._wait(self.bar.arrive(), deadline, fn)

    def _wait(self, tick: int, deadline: float, fn: str) -> None:
        try:
            self.bar.wait(tick, deadline, fn)
        except Exception as e:
            self.broken = f"{type(e).__name__}: {e}"
            raise

    def _begin(
        self,
        fn: str,
        desc: np.ndarray,
        x: np.ndarray,
        publish: bool = True,
        one_sided: bool = False,
    ) -> tuple[float, list | None]:
        """Step A: publish ``desc`` (and a small ``x`` if others read it), meet, validate, grow.

        With ``one_sided`` (a small broadcast's src) the rank publishes and leaves
        without meeting the others; it checks that call's descriptors at its next
        call that meets them, or ``PG_SHM_DEPTH - 1`` calls later if that comes first,
        and if they disagreed, poisons the call that found it on every rank.

        Returns:
          The deadline, and for a small call every rank's input (``x`` itself for this
          rank; ``[]`` for a one-sided call), else None.
        """
        if self.broken:
            raise unusable(fn, self.broken)
        deadline = time.monotonic() + self.timeout_s
        k, c = PG_SHM_DEPTH, self.calls
        small = _small_limit(fn, self.n)
        one_sided = one_sided and x.nbytes <= small
        # This call's buffers were last used by call c - k: every rank must be past it,
        # i.e. have arrived at call c - k + 1 (they have, unless this rank ran ahead as
        # a one-sided src). A call that meets the others first validates every pending
        # one-sided call (so a mismatch surfaces at a fixed call on every rank).
        check = [p for p in self.pending if not one_sided or p[0] <= c - k + 1]
        need = max([self.arrivals[(c + 1) % k]] + [self.arrivals[p[0] % k] for p in check])
        if self.ticks.min() < need:
            self._wait(need, deadline, fn)
        poison = None
        if check:
            self.pending = [p for p in self.pending if p not in check]
            for pc, pfn in check:
                poison = poison or _descriptor.check(pfn, self.descs[pc % k].copy(), self.ranks)
        par = c % k
        self.calls += 1
        me, n = self.me, self.n
        self.descs[par, me] = desc if poison is None else _descriptor.poisoned(desc)
        if publish and x.nbytes <= small:
            self.small[par, me, : x.nbytes] = x.reshape(-1).view(np.uint8)
        tick = self.arrivals[par] = self.bar.arrive()
        if poison is not None:
            raise ValueError(
                f"{fn}: not run, because an earlier call this rank made as src did not "
                f"match the other ranks: {poison}"
            )
        if one_sided:
            self.pending.append((c, fn))
            return deadline, []
        self._wait(tick, deadline, fn)
        descs = self.descs[par].copy()
        uniform = fn != "all_to_all_single" and bool((descs == desc).all())
        if uniform:
            need = x.nbytes
        else:
            err = _descriptor.check(fn, descs, self.ranks)
            if err:
                raise ValueError(err)
            rows = [_descriptor.decode(descs[i], n) for i in range(n)]
            need = max(int(np.prod(r["shape"], dtype=np.int64)) * x.itemsize for r in rows)
        if need <= small:
            shapes = [x.shape] * n if uniform else [r["shape"] for r in rows]
            inputs = []
            for j in range(n):
                nb = math.prod(shapes[j]) * x.itemsize
                inputs.append(
                    x if j == me else self.small[par, j, :nb].view(x.dtype).reshape(shapes[j])
                )
            return deadline, inputs
        if need > self.cap:
            self._grow(need, deadline, fn)
        return deadline, None

    def _grow(self, need: int, deadline: float, fn: str) -> None:
        cap = max(PG_SHM_MIN_CAPACITY, 1 << (need - 1).bit_length())
        cap = -(-cap // 64) * 64
        if self.me == 0:
            seg = Segment.create("data", cap * self.n)
            raw = seg.path.encode()
            self.path_area[: len(raw)] = np.frombuffer(raw, np.uint8)
            self.path_area[len(raw)] = 0
            self.meta[1] = cap
            self.meta[0] = self.gen + 1
        self._sync(deadline, fn)
        if self.me != 0:
            raw = bytes(self.path_area).split(b"\0", 1)[0]
            cap = int(self.meta[1])
            seg = Segment.attach(raw.decode(errors="replace"), cap * self.n, fn)
        old, self.data = self.data, seg
        self.slots = None
        if old is not None:
            old.close()
        self.gen, self.cap = int(self.meta[0]), cap
        self.slots = seg.buf.reshape(self.n, cap)
        if self.me == 0:
            self._unlink_after_sync = seg

    def _data_ready(self, deadline: float, fn: str) -> None:
        """Step B's meeting; afterwards every mapped name can go."""
        self._sync(deadline, fn)
        if self._unlink_after_sync is not None:
            self._unlink_after_sync.unlink()
            self._unlink_after_sync = None

    def _slot(self, i: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        nbytes = math.prod(shape) * dtype.itemsize
        return self.slots[i, :nbytes].view(dtype).reshape(shape)

    # -------------------------------------------------------------- collectives
    @on_host
    def all_reduce(self, x: np.ndarray, op: ReduceOp, desc: np.ndarray) -> np.ndarray:
        deadline, inputs = self._begin("all_reduce", desc, x)
        if inputs is not None:
            return reduced(inputs, op)
        n, me = self.n, self.me
        flat = x.reshape(-1)
        chunks = bounds(flat.size, n)
        mine = self._slot(me, flat.shape, flat.dtype)
        for j, (a, b) in enumerate(chunks):
            if j != me:
                mine[a:b] = flat[a:b]
        self._data_ready(deadline, "all_reduce")
        out = aligned_empty(x.shape, x.dtype)
        oflat = out.reshape(-1)
        a, b = chunks[me]
        parts = [
            flat[a:b] if j == me else self._slot(j, flat.shape, flat.dtype)[a:b] for j in range(n)
        ]
        reduce_into(oflat[a:b], parts, op, n)
        mine[a:b] = oflat[a:b]
        self._sync(deadline, "all_reduce")
        for j, (a, b) in enumerate(chunks):
            if j != me:
                oflat[a:b] = self._slot(j, flat.shape, flat.dtype)[a:b]
        return out

    @on_host
    def broadcast(self, x: np.ndarray, src: int, desc: np.ndarray) -> np.ndarray | None:
        me_src = self.me == src
        deadline, inputs = self._begin("broadcast", desc, x, me_src, one_sided=me_src)
        if me_src:
            if inputs is None:
                self._slot(src, x.shape, x.dtype)[...] = x
                self._data_ready(deadline, "broadcast")
            return None  # the result is the input
        if inputs is not None:
            return copied(inputs[src])
        self._data_ready(deadline, "broadcast")
        return copied(self._slot(src, x.shape, x.dtype))

    @on_host
    def reduce(self, x: np.ndarray, dst: int, op: ReduceOp, desc: np.ndarray) -> np.ndarray:
        deadline, inputs = self._begin("reduce", desc, x, self.me != dst)
        if inputs is None:
            if self.me != dst:
                self._slot(self.me, x.shape, x.dtype)[...] = x
            self._data_ready(deadline, "reduce")
            inputs = [x if j == self.me else self._slot(j, x.shape, x.dtype) for j in range(self.n)]
        if self.me != dst:
            return aligned_empty(x.shape, x.dtype, zero=True)
        return reduced(inputs, op)

    @on_host
    def all_gather(self, x: np.ndarray, desc: np.ndarray) -> np.ndarray:
        out = aligned_empty((self.n, *x.shape), x.dtype)
        out[self.me] = x
        self.all_gather_into(x, out, desc)
        return out

    def all_gather_into(self, x: np.ndarray, out: np.ndarray, desc: np.ndarray) -> None:
        """Every member's ``x`` into rows of the host array ``out``, except ``out[me]``."""
        deadline, inputs = self._begin("all_gather", desc, x)
        if inputs is None:
            self._slot(self.me, x.shape, x.dtype)[...] = x
            self._data_ready(deadline, "all_gather")
            inputs = [x if j == self.me else self._slot(j, x.shape, x.dtype) for j in range(self.n)]
        for j in (j for j in range(self.n) if j != self.me):
            out[j] = inputs[j]

    @on_host
    def gather(self, x: np.ndarray, dst: int, desc: np.ndarray) -> np.ndarray:
        deadline, inputs = self._begin("gather", desc, x, self.me != dst)
        if inputs is None:
            if self.me != dst:
                self._slot(self.me, x.shape, x.dtype)[...] = x
            self._data_ready(deadline, "gather")
            inputs = [x if j == self.me else self._slot(j, x.shape, x.dtype) for j in range(self.n)]
        if self.me != dst:
            return aligned_empty((self.n, *x.shape), x.dtype, zero=True)
        return stacked(inputs)

    @on_host
    def scatter(self, x: np.ndarray, src: int, desc: np.ndarray) -> np.ndarray:
        deadline, inputs = self._begin("scatter", desc, x, self.me == src)
        if inputs is None:
            if self.me == src:
                self._slot(src, x.shape, x.dtype)[...] = x
            self._data_ready(deadline, "scatter")
            from_src = x if self.me == src else self._slot(src, x.shape, x.dtype)
        else:
            from_src = inputs[src]
        return copied(from_src[self.me])

    @on_host
    def reduce_scatter(self, x: np.ndarray, op: ReduceOp, desc: np.ndarray) -> np.ndarray:
        return self.reduce_scatter_host(x, op, desc)

    def reduce_scatter_host(self, x: np.ndarray, op: ReduceOp, desc: np.ndarray) -> np.ndarray:
        """:meth:`reduce_scatter` on a C-contiguous host array, returning a host array: for
        an engine that runs this group's collectives inside its own (the TCP engine's
        hierarchical all_reduce), as :meth:`all_gather_into` is for all_gather."""
        deadline, inputs = self._begin("reduce_scatter", desc, x)
        if inputs is None:
            mine = self._slot(self.me, x.shape, x.dtype)
            for j in range(self.n):
                if j != self.me:
                    mine[j] = x[j]
            self._data_ready(deadline, "reduce_scatter")
            inputs = [x if j == self.me else self._slot(j, x.shape, x.dtype) for j in range(self.n)]
        return reduced([p[self.me] for p in inputs], op)

    @on_host
    def all_to_all(self, x: np.ndarray, desc: np.ndarray) -> np.ndarray:
        deadline, inputs = self._begin("all_to_all", desc, x)
        if inputs is None:
            mine = self._slot(self.me, x.shape, x.dtype)
            for j in range(self.n):
                if j != self.me:
                    mine[j] = x[j]
            self._data_ready(deadline, "all_to_all")
            inputs = [x if j == self.me else self._slot(j, x.shape, x.dtype) for j in range(self.n)]
        return stacked([p[self.me] for p in inputs])

    @on_host
    def all_to_all_single(self, x: np.ndarray, desc: np.ndarray) -> np.ndarray:
        fn = "all_to_all_single"
        deadline, inputs = self._begin(fn, desc, x)
        n, me = self.n, self.me
        par = (self.calls - 1) % PG_SHM_DEPTH
        rows = [_descriptor.decode(self.descs[par, j], n) for j in range(n)]
        if inputs is None:
            self._slot(me, x.shape, x.dtype)[...] = x
            self._data_ready(deadline, fn)
            inputs = [x if j == me else self._slot(j, rows[j]["shape"], x.dtype) for j in range(n)]
        out = aligned_empty((sum(rows[me]["out_splits"]), *x.shape[1:]), x.dtype)
        at = 0
        for j in range(n):
            splits = rows[j]["in_splits"]
            start, k = sum(splits[:me]), splits[me]
            out[at : at + k] = inputs[j][start : start + k]
            at += k
        return out


def _fits(spec: GroupSpec) -> bool:
    """A gloo group whose members share one host: what shared memory can serve."""
    return spec.backend == "gloo" and spec.one_host


def _refusal(spec: GroupSpec) -> str | None:
    if _fits(spec):
        return None
    return (
        "engine='shm' needs the gloo backend and every member on one host; "
        f"group {list(spec.ranks)} has backend {spec.backend!r} and "
        f"{len(set(spec.hosts))} host(s). Use engine='xla' or 'auto'."
    )
