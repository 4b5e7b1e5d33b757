"""Shared-memory engine: process-group collectives for ranks on one host, in numpy over /dev/shm.

Why it exists: XLA's CPU collectives go through gloo over loopback TCP and, measured
on this machine, move data 2-4x slower than ``torch.distributed`` gloo at 16-64 MiB
(see ``benchmarks/process_group.py``). Ranks on one host can skip the sockets: each
rank owns a slot in a shared segment, writes what others need, meets them at a
:class:`~tensorplay_jax.distributed._shm.TickBarrier` and reads what it needs.

Each call: (A) every rank writes its descriptor and meets the others; all compare
the descriptors and raise the same error together on a mismatch; the data segment
grows here when a call needs more room. (B) ranks copy their data into their slot
and meet again. (C) ranks read; all-reduce and reduce-scatter reduce one chunk
each (so every rank ends with bit-identical results) and all-reduce meets once
more to share the reduced chunks. The next call's step A protects the slots.
"""

from __future__ import annotations

import os
import time

import numpy as np

from tensorplay_jax._constants import PG_SHM_MIN_CAPACITY
from tensorplay_jax.distributed import _descriptor, _kv
from tensorplay_jax.distributed._shm import Segment, TickBarrier, aligned_empty

__all__ = ["ShmEngine"]

_PATH_BYTES = 512
_UFUNC = {"sum": np.add, "avg": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def _reduce_into(out: np.ndarray, parts: list[np.ndarray], op: str, n: int) -> None:
    """``out = op(parts...)`` in the given order; avg divides the sum by ``n``."""
    uf = _UFUNC[op]
    if len(parts) == 1:
        np.copyto(out, parts[0])
    else:
        uf(parts[0], parts[1], out=out)
        for p in parts[2:]:
            uf(out, p, out=out)
    if op == "avg":
        np.divide(out, n, out=out, casting="unsafe")


def _bounds(total: int, n: int) -> list[tuple[int, int]]:
    """Split ``total`` elements into ``n`` contiguous chunks (sizes differ by at most one)."""
    q, r = divmod(total, n)
    out, start = [], 0
    for i in range(n):
        stop = start + q + (1 if i < r else 0)
        out.append((start, stop))
        start = stop
    return out


class ShmEngine:
    """Collectives of one group whose members share a host.

    Created collectively by every member (group index 0 makes the segments and
    publishes their names through the coordination service).

    Args:
      key: a coordination-service key prefix unique to this group.
      ranks: the members' global ranks; ``me`` is this process's index in it.
      timeout_s: the deadline of every wait.
    """

    name = "shm"

    def __init__(self, key: str, ranks: tuple[int, ...], me: int, timeout_s: float):
        self.ranks, self.me, self.n, self.timeout_s = ranks, me, len(ranks), timeout_s
        n = self.n
        self.dlen = _descriptor.length(n)
        words = 2 * n + 2 + n * self.dlen
        size = words * 8 + _PATH_BYTES
        if me == 0:
            self.ctrl_seg = Segment.create("ctrl", size)
            _kv.set(f"{key}/ctrl", self.ctrl_seg.path.encode())
        else:
            path = _kv.get(f"{key}/ctrl", timeout_s).decode()
            self.ctrl_seg = Segment(path, size, create=False)
        words_view = self.ctrl_seg.buf[: words * 8].view(np.int64)
        self.ticks = words_view[:n]
        self.pids = words_view[n : 2 * n]
        self.meta = words_view[2 * n : 2 * n + 2]  # [data generation, slot capacity]
        self.descs = words_view[2 * n + 2 :].reshape(n, self.dlen)
        self.path_area = self.ctrl_seg.buf[words * 8 :]
        self.pids[me] = os.getpid()
        _kv.barrier(f"{key}/mapped", timeout_s, ranks)
        if me == 0:
            self.ctrl_seg.unlink()
        self.bar = TickBarrier(self.ticks, self.pids, me, ranks)
        self.data: Segment | None = None
        self.gen = 0
        self.cap = 0
        self.slots: np.ndarray | None = None  # (n, cap) uint8
        self._unlink_after_sync: Segment | None = None
        self.broken: str | None = None

    # ----------------------------------------------------------------- plumbing
    def close(self) -> None:
        """Unmap this rank's segments."""
        self.slots = None
        self.descs = self.ticks = self.pids = self.meta = None
        self.bar = None
        if self.data is not None:
            self.data.close()
        self.path_area = None
        self.ctrl_seg.close()

    def _sync(self, deadline: float, fn: str) -> None:
        try:
            self.bar.sync(deadline, fn)
        except Exception as e:
            self.broken = f"{type(e).__name__}: {e}"
            raise

    def _begin(self, fn: str, desc: np.ndarray) -> tuple[float, np.ndarray]:
        """Step A: publish ``desc``, meet, validate, grow. Returns (deadline, all descriptors)."""
        if self.broken:
            raise RuntimeError(
                f"{fn}: this process group is unusable after an earlier failure "
                f"({self.broken}); call destroy_process_group() and init_process_group() again."
            )
        deadline = time.monotonic() + self.timeout_s
        self.descs[self.me] = desc
        self._sync(deadline, fn)
        descs = self.descs.copy()
        err = _descriptor.check(fn, descs, self.ranks)
        if err:
            # Everyone saw the same descriptors and raises the same error; meet once
            # more so nobody rewrites its descriptor while a peer still reads it.
            self._sync(deadline, fn)
            raise ValueError(err)
        need = 0
        for i in range(self.n):
            d = _descriptor.decode(descs[i], self.n)
            need = max(need, int(np.prod(d["shape"], dtype=np.int64)) * d["dtype"].itemsize)
        if need > self.cap:
            self._grow(need, deadline, fn)
        return deadline, descs

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
            raw = bytes(self.path_area[:_PATH_BYTES]).split(b"\0", 1)[0]
            cap = int(self.meta[1])
            seg = Segment(raw.decode(), cap * self.n, create=False)
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
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return self.slots[i, :nbytes].view(dtype).reshape(shape)

    # -------------------------------------------------------------- collectives
    def all_reduce(self, x: np.ndarray, op: str, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("all_reduce", desc)
        n, me = self.n, self.me
        flat = x.reshape(-1)
        bounds = _bounds(flat.size, n)
        mine = self._slot(me, flat.shape, flat.dtype)
        for j, (a, b) in enumerate(bounds):
            if j != me:
                mine[a:b] = flat[a:b]
        self._data_ready(deadline, "all_reduce")
        out = aligned_empty(x.shape, x.dtype)
        oflat = out.reshape(-1)
        a, b = bounds[me]
        parts = [
            flat[a:b] if j == me else self._slot(j, flat.shape, flat.dtype)[a:b] for j in range(n)
        ]
        _reduce_into(oflat[a:b], parts, op, n)
        mine[a:b] = oflat[a:b]
        self._sync(deadline, "all_reduce")
        for j, (a, b) in enumerate(bounds):
            if j != me:
                oflat[a:b] = self._slot(j, flat.shape, flat.dtype)[a:b]
        return out

    def broadcast(self, x: np.ndarray, src: int, desc: np.ndarray) -> np.ndarray | None:
        deadline, _ = self._begin("broadcast", desc)
        if self.me == src:
            self._slot(src, x.shape, x.dtype)[...] = x
        self._data_ready(deadline, "broadcast")
        if self.me == src:
            return None  # the caller returns its input
        out = aligned_empty(x.shape, x.dtype)
        out[...] = self._slot(src, x.shape, x.dtype)
        return out

    def reduce(self, x: np.ndarray, dst: int, op: str, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("reduce", desc)
        if self.me != dst:
            self._slot(self.me, x.shape, x.dtype)[...] = x
        self._data_ready(deadline, "reduce")
        out = aligned_empty(x.shape, x.dtype, zero=self.me != dst)
        if self.me == dst:
            parts = [x if j == dst else self._slot(j, x.shape, x.dtype) for j in range(self.n)]
            _reduce_into(out.reshape(-1), [p.reshape(-1) for p in parts], op, self.n)
        return out

    def all_gather(self, x: np.ndarray, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("all_gather", desc)
        self._slot(self.me, x.shape, x.dtype)[...] = x
        self._data_ready(deadline, "all_gather")
        out = aligned_empty((self.n, *x.shape), x.dtype)
        for j in range(self.n):
            out[j] = x if j == self.me else self._slot(j, x.shape, x.dtype)
        return out

    def gather(self, x: np.ndarray, dst: int, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("gather", desc)
        if self.me != dst:
            self._slot(self.me, x.shape, x.dtype)[...] = x
        self._data_ready(deadline, "gather")
        out = aligned_empty((self.n, *x.shape), x.dtype, zero=self.me != dst)
        if self.me == dst:
            for j in range(self.n):
                out[j] = x if j == dst else self._slot(j, x.shape, x.dtype)
        return out

    def scatter(self, x: np.ndarray, src: int, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("scatter", desc)
        if self.me == src:
            self._slot(src, x.shape, x.dtype)[...] = x
        self._data_ready(deadline, "scatter")
        out = aligned_empty(x.shape[1:], x.dtype)
        out[...] = x[src] if self.me == src else self._slot(src, x.shape, x.dtype)[self.me]
        return out

    def reduce_scatter(self, x: np.ndarray, op: str, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("reduce_scatter", desc)
        mine = self._slot(self.me, x.shape, x.dtype)
        for j in range(self.n):
            if j != self.me:
                mine[j] = x[j]
        self._data_ready(deadline, "reduce_scatter")
        out = aligned_empty(x.shape[1:], x.dtype)
        parts = [
            x[self.me] if j == self.me else self._slot(j, x.shape, x.dtype)[self.me]
            for j in range(self.n)
        ]
        _reduce_into(out.reshape(-1), [p.reshape(-1) for p in parts], op, self.n)
        return out

    def all_to_all(self, x: np.ndarray, desc: np.ndarray) -> np.ndarray:
        deadline, _ = self._begin("all_to_all", desc)
        mine = self._slot(self.me, x.shape, x.dtype)
        for j in range(self.n):
            if j != self.me:
                mine[j] = x[j]
        self._data_ready(deadline, "all_to_all")
        out = aligned_empty(x.shape, x.dtype)
        for j in range(self.n):
            out[j] = x[self.me] if j == self.me else self._slot(j, x.shape, x.dtype)[self.me]
        return out

    def all_to_all_single(self, x: np.ndarray, desc: np.ndarray) -> np.ndarray:
        deadline, descs = self._begin("all_to_all_single", desc)
        n, me = self.n, self.me
        rows = [_descriptor.decode(descs[j], n) for j in range(n)]
        self._slot(me, x.shape, x.dtype)[...] = x
        self._data_ready(deadline, "all_to_all_single")
        out_splits = rows[me]["out_splits"]
        out = aligned_empty((sum(out_splits), *x.shape[1:]), x.dtype)
        at = 0
        for j in range(n):
            splits = rows[j]["in_splits"]
            start = sum(splits[:me])
            k = splits[me]
            src = x if j == me else self._slot(j, rows[j]["shape"], x.dtype)
            out[at : at + k] = src[start : start + k]
            at += k
        return out
