"""tensorplay's key-value stores: ``Store``, ``HashStore``, ``PrefixStore``, and their table.

A store holds byte values by string key, for processes to meet through: one sets
``"addr"``, the others ``get("addr")`` (which waits until it is set, at most the
store's ``timeout``), counters grow with ``add``, ``compare_set`` elects, ``wait``
blocks until keys exist. The semantics are tensorplay's (checked against torch's
``HashStore`` in the tests): values are bytes (``str`` is stored as UTF-8), a counter
is its decimal digits, ``compare_set`` on a missing key sets it only when
``expected`` is empty (else it returns ``expected``), a wait that runs out raises
``DistStoreError``, ``queue_pop`` on an empty queue without blocking raises
``QueueEmptyError``.

:class:`_Table` is the one implementation of those operations, thread-safe;
``HashStore`` is a table in this process, ``TCPStore`` (``_tcp_store``) serves one
to other processes, ``PrefixStore`` puts a prefix on another store's keys; a
``FileStore`` (``_file_store``) keeps its keys in a file instead.

Example:
  >>> s = HashStore()
  >>> s.set("a", "x"); s.add("n", 5); s.add("n", -2)
  5
  3
  >>> s.get("a"), s.get("n"), s.compare_set("c", "", "v1")
  (b'x', b'3', b'v1')
  >>> p = PrefixStore("job", s)
  >>> p.set("k", b"\\x00"); s.get("job/k")
  b'\\x00'
"""

from __future__ import annotations

import collections
import datetime
import threading
import time
from collections.abc import Sequence
from typing import Any

from tensorplay_jax.process_group._errors import DistStoreError
from tensorplay_jax.runtime.settings import DEFAULT_PG_TIMEOUT_S

__all__ = ["HashStore", "PrefixStore", "QueueEmptyError", "Store"]

_INIT = "tensorplay_jax/init_process_group"  # the keys ``rendezvous`` uses


class QueueEmptyError(DistStoreError):
    """``queue_pop(key, block=False)`` found the queue empty."""


def as_bytes(fn: str, value: Any) -> bytes:
    """A value as the store keeps it: bytes, a ``str`` as UTF-8."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"Store.{fn}: a value must be str or bytes, got {type(value).__name__}")


def as_key(fn: str, key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError(f"Store.{fn}: a key must be a str, got {type(key).__name__}")
    return key


def seconds(timeout: Any) -> float:
    """A timeout given as a ``timedelta`` or seconds, in seconds."""
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


class _Table:
    """The keys, values and queues of a store, and its operations (thread-safe).

    Waiting operations take a timeout in seconds and raise ``DistStoreError`` when it
    runs out, naming the keys still missing.
    """

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._queues: dict[str, collections.deque[bytes]] = {}
        self._cond = threading.Condition()

    def set(self, key: str, value: bytes) -> None:
        with self._cond:
            self._data[key] = value
            self._cond.notify_all()

    def _wait_for(self, keys: Sequence[str], timeout: float) -> None:
        # The caller holds the condition.
        deadline = time.monotonic() + timeout
        while True:
            missing = [k for k in keys if k not in self._data]
            if not missing:
                return
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistStoreError(
                    f"wait timeout after {round(timeout * 1000)}ms, keys: {', '.join(missing)}"
                )
            self._cond.wait(left)

    def get(self, key: str, timeout: float) -> bytes:
        with self._cond:
            self._wait_for([key], timeout)
            return self._data[key]

    def multi_get(self, keys: Sequence[str], timeout: float) -> list[bytes]:
        with self._cond:
            self._wait_for(keys, timeout)
            return [self._data[k] for k in keys]

    def multi_set(self, keys: Sequence[str], values: Sequence[bytes]) -> None:
        if len(keys) != len(values):
            raise ValueError(
                f"Store.multi_set: {len(keys)} keys but {len(values)} values; give one each"
            )
        with self._cond:
            self._data.update(zip(keys, values, strict=True))
            self._cond.notify_all()

    def wait(self, keys: Sequence[str], timeout: float) -> None:
        with self._cond:
            self._wait_for(keys, timeout)

    def add(self, key: str, amount: int) -> int:
        with self._cond:
            held = self._data.get(key, b"0")
            try:
                value = int(held.decode("ascii")) + int(amount)
            except (UnicodeDecodeError, ValueError):
                raise ValueError(
                    f"Store.add: the value of key {key!r} is not an integer: {held[:40]!r}"
                ) from None
            self._data[key] = str(value).encode()
            self._cond.notify_all()
            return value

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        with self._cond:
            held = self._data.get(key)
            if held is None:
                if expected:
                    return expected
            elif held != expected:
                return held
            self._data[key] = desired
            self._cond.notify_all()
            return desired

    def append(self, key: str, value: bytes) -> None:
        with self._cond:
            self._data[key] = self._data.get(key, b"") + value
            self._cond.notify_all()

    def check(self, keys: Sequence[str]) -> bool:
        with self._cond:
            return all(k in self._data for k in keys)

    def delete_key(self, key: str) -> bool:
        with self._cond:
            return self._data.pop(key, None) is not None

    def num_keys(self) -> int:
        with self._cond:
            return len(self._data)

    def queue_push(self, key: str, value: bytes) -> None:
        with self._cond:
            self._queues.setdefault(key, collections.deque()).append(value)
            self._cond.notify_all()

    def queue_pop(self, key: str, block: bool, timeout: float) -> bytes:
        with self._cond:
            deadline = time.monotonic() + timeout
            while not self._queues.get(key):
                left = deadline - time.monotonic()
                if not block:
                    raise QueueEmptyError("queue is empty")
                if left <= 0:
                    raise DistStoreError(
                        f"wait timeout after {round(timeout * 1000)}ms, keys: {key} (a queue)"
                    )
                self._cond.wait(left)
            return self._queues[key].popleft()

    def queue_len(self, key: str) -> int:
        with self._cond:
            return len(self._queues.get(key, ()))


class Store:
    """The key-value store interface (tensorplay's ``torch.distributed.Store``).

    Subclasses implement the operations on ``self._ops`` (a :class:`_Table` or what
    forwards to one); this class checks the arguments, turns ``str`` values into bytes
    and applies the store's ``timeout`` to the waiting operations.
    """

    _ops: Any

    def __init__(self, timeout: Any = None) -> None:
        self._timeout_s = DEFAULT_PG_TIMEOUT_S if timeout is None else seconds(timeout)

    @property
    def timeout(self) -> datetime.timedelta:
        """How long ``get``, ``wait`` and a blocking ``queue_pop`` wait."""
        return datetime.timedelta(seconds=self._timeout_s)

    def set_timeout(self, timeout: Any) -> None:
        """Set :attr:`timeout` (a ``timedelta`` or seconds)."""
        self._timeout_s = seconds(timeout)

    def set(self, key: str, value: str | bytes) -> None:
        """Set ``key`` to ``value``."""
        self._ops.set(as_key("set", key), as_bytes("set", value))

    def get(self, key: str) -> bytes:
        """The value of ``key``, once it is set (at most :attr:`timeout`).

        Raises:
          DistStoreError: the key was not set in time.
        """
        return self._ops.get(as_key("get", key), self._timeout_s)

    def add(self, key: str, amount: int) -> int:
        """Add ``amount`` to the counter ``key`` (0 when missing); the new value."""
        return self._ops.add(as_key("add", key), int(amount))

    def compare_set(
        self, key: str, expected_value: str | bytes, desired_value: str | bytes
    ) -> bytes:
        """Set ``key`` to ``desired_value`` if it holds ``expected_value`` (or is missing and
        ``expected_value`` is empty); the value it holds afterwards (``expected_value`` when
        it is missing and was not set)."""
        return self._ops.compare_set(
            as_key("compare_set", key),
            as_bytes("compare_set", expected_value),
            as_bytes("compare_set", desired_value),
        )

    def append(self, key: str, value: str | bytes) -> None:
        """Append ``value`` to the value of ``key`` (set it when missing)."""
        self._ops.append(as_key("append", key), as_bytes("append", value))

    def multi_get(self, keys: Sequence[str]) -> list[bytes]:
        """The values of ``keys``, once all are set (at most :attr:`timeout`)."""
        return self._ops.multi_get([as_key("multi_get", k) for k in keys], self._timeout_s)

    def multi_set(self, keys: Sequence[str], values: Sequence[str | bytes]) -> None:
        """Set each of ``keys`` to its value."""
        self._ops.multi_set(
            [as_key("multi_set", k) for k in keys], [as_bytes("multi_set", v) for v in values]
        )

    def wait(self, keys: Sequence[str], timeout: Any = None) -> None:
        """Block until every key of ``keys`` is set, at most ``timeout`` (default :attr:`timeout`).

        Raises:
          DistStoreError: a key was not set in time; the message names the missing ones.
        """
        limit = self._timeout_s if timeout is None else seconds(timeout)
        self._ops.wait([as_key("wait", k) for k in keys], limit)

    def check(self, keys: Sequence[str]) -> bool:
        """Whether every key of ``keys`` is set (no waiting)."""
        return self._ops.check([as_key("check", k) for k in keys])

    def delete_key(self, key: str) -> bool:
        """Delete ``key``; whether it was there."""
        return self._ops.delete_key(as_key("delete_key", key))

    def num_keys(self) -> int:
        """How many keys are set."""
        return self._ops.num_keys()

    def queue_push(self, key: str, value: str | bytes) -> None:
        """Put ``value`` at the end of the queue ``key``."""
        self._ops.queue_push(as_key("queue_push", key), as_bytes("queue_push", value))

    def queue_pop(self, key: str, block: bool = True) -> bytes:
        """Take the first value of the queue ``key``: wait for one (at most :attr:`timeout`),
        or with ``block=False`` raise ``QueueEmptyError`` when there is none."""
        return self._ops.queue_pop(as_key("queue_pop", key), bool(block), self._timeout_s)

    def queue_len(self, key: str) -> int:
        """How many values the queue ``key`` holds."""
        return self._ops.queue_len(as_key("queue_len", key))

    def has_extended_api(self) -> bool:
        """Whether ``compare_set``, ``append``, ``multi_get``/``multi_set`` and the queues
        work (they do on every store here)."""
        return True


class HashStore(Store):
    """A store in this process's memory, shared by its threads.

    Example:
      >>> s = HashStore()
      >>> s.set("k", "v"); s.check(["k"]), s.delete_key("k"), s.check(["k"])
      (True, True, False)
    """

    def __init__(self) -> None:
        super().__init__()
        self._ops = _Table()


class _Prefixed:
    """Another store's operations with ``prefix/`` before every key."""

    def __init__(self, prefix: str, store: Store) -> None:
        self._prefix, self._store = prefix, store

    def _k(self, key: str) -> str:
        return f"{self._prefix}/{key}"

    def __getattr__(self, name: str) -> Any:
        op = getattr(self._store._ops, name)

        def prefixed(first: Any, *rest: Any) -> Any:
            if isinstance(first, str):
                return op(self._k(first), *rest)
            return op([self._k(k) for k in first], *rest)

        return op if name == "num_keys" else prefixed


class PrefixStore(Store):
    """``store`` with ``prefix + "/"`` before every key: separate users of one store.

    ``num_keys`` counts the underlying store's keys, as tensorplay's.

    Example:
      >>> base = HashStore()
      >>> PrefixStore("a", base).set("k", "1"); base.get("a/k")
      b'1'
    """

    def __init__(self, prefix: str, store: Store) -> None:
        if not isinstance(store, Store):
            raise TypeError(f"PrefixStore: store must be a Store, got {type(store).__name__}")
        super().__init__(store.timeout)
        self._prefix, self.underlying_store = as_key("PrefixStore", prefix), store
        self._ops = _Prefixed(prefix, store)


def rendezvous(store: Store, rank: int, world_size: int, fn: str) -> str:
    """``init_process_group(store=...)``: the ``tcp://host:port`` every rank then starts
    from, which rank 0 chooses (its address toward the store's host, as a job that
    meets there would bind: loopback on one host; and a free pair of ports) and puts
    in ``store``. Each call on a store is a new round
    (its keys are numbered), so one store serves one group after another.

    Raises:
      DistStoreError: rank 0 did not put the address within the store's timeout.
    """
    from tensorplay_jax.runtime.address import local_address
    from tensorplay_jax.runtime.launch import free_port

    # Every rank counts itself in: the round is the same on all ranks of one call.
    arrived = store.add(f"{_INIT}/arrived", 1)
    key = f"{_INIT}/{(arrived - 1) // world_size}/address"
    if rank == 0:
        try:  # rank 0's own address toward the store's host (loopback on one host)
            host = local_address(_host_of(store))
        except ValueError as e:
            raise ValueError(f"{fn}: {e}") from None
        store.set(key, f"tcp://{host}:{free_port(host)}")
    try:
        return store.get(key).decode()
    except DistStoreError as e:
        raise DistStoreError(
            f"{fn}: rank 0 did not put the group's address in the store ({e}); does rank 0 "
            "call init_process_group with the same store?"
        ) from None


def _host_of(store: Store) -> str:
    while isinstance(store, PrefixStore):
        store = store.underlying_store
    return getattr(store, "host", "127.0.0.1")
