"""Functions the RPC tests call on remote workers (importable, so they travel by reference)."""

from __future__ import annotations

import dataclasses
import gc
import os
import pathlib
import resource
import signal
import threading
import time
import weakref
from typing import Any, NamedTuple

import numpy as np

from tensorplay_jax.distributed import rpc


class Pair(NamedTuple):
    a: Any
    b: Any


@dataclasses.dataclass
class Counter:
    n: int

    def incr(self, k: int) -> int:
        self.n += k
        return self.n

    def value(self) -> int:
        return self.n


class CustomError(Exception):
    def __init__(self, a: int, b: int) -> None:  # not rebuildable from one message
        super().__init__(a, b)


def add(x: Any, y: Any = 1) -> Any:
    return x + y


def identity(x: Any) -> Any:
    return x


def fail(msg: str) -> None:
    raise ValueError(msg)


def fail_custom() -> None:
    raise CustomError(1, 2)


def sleep(s: float) -> float:
    time.sleep(s)
    return s


def make_counter(n: int) -> Counter:
    return Counter(n)


def read_counter(rrefs: list) -> int:
    return rrefs[0].rpc_sync().value()


def make_rref(v: Any) -> rpc.RRef:
    return rpc.RRef(v)


def rref_sum(r: rpc.RRef) -> Any:
    return r.to_here().sum()


@rpc.functions.async_execution
def async_add(to: str, a: int, b: int) -> rpc.Future:
    return rpc.rpc_async(to, add, args=(a, b)).then(lambda f: f.wait())


def get_metadata() -> dict:
    return dict(rpc.current_call_metadata())


def caller_name() -> str:
    return rpc.current_caller().name


def relay_caller(to: str) -> list[str]:
    """This worker's name, and the name ``to`` sees as its caller (a nested call)."""
    return [rpc.get_worker_info().name, rpc.rpc_sync(to, caller_name)]


# --- hooks
EVENTS: list = []


class Recorder(rpc.RpcHooks):
    def on_send_request(self, info, args, kwargs):
        info.metadata["hooked"] = True
        EVENTS.append(("send_request", info.kind, info.func_name, args))
        return args, kwargs

    def on_receive_request(self, info, args, kwargs):
        EVENTS.append(("receive_request", info.kind, info.peer.name, dict(info.metadata)))
        return args, kwargs

    def on_send_response(self, info, result, response_metadata):
        response_metadata["served_by"] = os.environ["RANK"]
        EVENTS.append(("send_response", info.kind, result))
        return result

    def on_receive_response(self, info, result, response_metadata):
        EVENTS.append(("receive_response", info.kind, dict(response_metadata), result))
        return result


_REMOVE_HOOKS: list = []


def install_hooks() -> None:
    """Record every call of this process in ``EVENTS`` (emptied) until ``remove_hooks``."""
    EVENTS.clear()
    _REMOVE_HOOKS.append(rpc.register_hooks(Recorder()))


def remove_hooks() -> None:
    while _REMOVE_HOOKS:
        _REMOVE_HOOKS.pop()()


def events() -> list[str]:
    return [repr(e) for e in EVENTS]


# --- reference counting
HELD: list = []
_tracked: list = []


class Tracked:
    def __init__(self, n: int) -> None:
        self.data = np.arange(n)


def make_tracked(n: int) -> Tracked:
    t = Tracked(n)
    _tracked.append(weakref.ref(t))
    return t


def tracked_alive() -> int:
    gc.collect()
    return sum(r() is not None for r in _tracked)


def keep(r: rpc.RRef) -> bool:
    HELD.append(r)
    return r.is_owner()


def drop() -> None:
    HELD.clear()
    gc.collect()


def num_owned() -> int:
    gc.collect()
    return rpc.get_debug_info()["num_owner_rrefs"]


# --- faults
def die_soon(delay: float) -> None:
    threading.Timer(delay, os.kill, args=(os.getpid(), signal.SIGKILL)).start()


def touch(path: str) -> str:
    pathlib.Path(path).write_text("ran")
    return path


def maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def leave_soon() -> None:
    threading.Timer(0.2, rpc.shutdown, kwargs={"graceful": False}).start()


_gate = threading.Event()


def wait_gate(timeout: float) -> bool:
    """Blocks until ``open_gate`` runs (another request from the same caller)."""
    return _gate.wait(timeout)


def open_gate() -> None:
    _gate.set()
