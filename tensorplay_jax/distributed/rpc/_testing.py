"""tensorplay's fault-injecting RPC backend, ``FAULTY_TENSORPIPE``: the RPC agent with
chosen requests failed or delayed as they are sent, for tests of what survives them.

Importing this module registers the backend (``rpc.backend_registry``), as
importing tensorplay's ``distributed.rpc._testing`` does. Its options,
:class:`FaultyTensorPipeRpcBackendOptions`, are ``TensorPipeRpcBackendOptions``
with three more fields:

- ``messages_to_fail``: request types whose first ``num_fail_sends`` sends fail
  (each distinct message counts its own: the same message sent again, as the
  retried bookkeeping messages are, fails ``num_fail_sends`` times, then goes);
  a failed send writes nothing, and its Future gets an ``RpcPeerError``
  ("Send attempt failed intentionally for ...");
- ``messages_to_delay``: request type -> seconds the sending thread waits before
  writing such a request; its timeout runs meanwhile, as in tensorplay.

Request types have tensorplay's names (:func:`message_type`): ``PYTHON_CALL`` /
``SCRIPT_CALL`` (``rpc_sync``/``rpc_async`` of a Python function / of a builtin
operator, a function of ``tensorplay_jax``'s tensor operations such as
``tensorplay_jax.add``), ``PYTHON_REMOTE_CALL`` / ``SCRIPT_REMOTE_CALL``
(``remote``), ``PYTHON_RREF_FETCH_CALL`` / ``SCRIPT_RREF_FETCH_CALL``
(``to_here`` of an RRef this worker's ``remote`` made from a Python function /
a builtin; one received from another worker counts as ``PYTHON``),
``RREF_FORK_REQUEST`` (an RRef passed on: its owner registers the new fork),
``RREF_USER_DELETE`` (a user RRef released), ``FORWARD_AUTOGRAD_REQ`` (a call
inside a distributed autograd context; tensorplay's only when it carries
tensors that require grad), ``BACKWARD_AUTOGRAD_REQ`` (gradients sent back),
``CLEANUP_AUTOGRAD_CONTEXT_REQ`` (a finished context released on a peer) and
``RREF_BACKWARD_REQ`` (``RRef.backward`` on its owner). Other requests of the
RPC layer's own have no such name and are never failed or delayed; replies
neither.

The bookkeeping messages tensorplay retries (``RREF_FORK_REQUEST``,
``RREF_USER_DELETE``, ``CLEANUP_AUTOGRAD_CONTEXT_REQ``; ``RREF_CHILD_ACCEPT``
has no counterpart here) are sent again after a failed send
(``rpc.internal.with_retries``): failing each fewer than six times loses none.

Example:
    >>> from tensorplay_jax.distributed import rpc
    >>> from tensorplay_jax.distributed.rpc import _testing
    >>> opts = rpc.backend_registry.construct_rpc_backend_options(
    ...     rpc.backend_registry.BackendType.FAULTY_TENSORPIPE,
    ...     messages_to_fail=["RREF_FORK_REQUEST"], messages_to_delay={"PYTHON_CALL": 0.5},
    ...     num_fail_sends=2)
    >>> type(opts).__name__, opts.num_fail_sends, opts.messages_to_delay
    ('FaultyTensorPipeRpcBackendOptions', 2, {'PYTHON_CALL': 0.5})
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tensorplay_jax.distributed.autograd import _context, _engine, _rref_backward
from tensorplay_jax.rpc import RpcPeerError, TensorPipeRpcBackendOptions, backend_registry
from tensorplay_jax.rpc.internal import (
    CALL,
    FETCH,
    FORK_ADD,
    FORK_DEL,
    REMOTE,
    Agent,
    Outgoing,
    is_internal_target,
)

__all__ = [
    "FaultyTensorPipeAgent",
    "FaultyTensorPipeRpcBackendOptions",
    "injected",
    "is_available",
    "message_type",
]

# The RPC targets of distributed autograd, by tensorplay's name of their message.
_AUTOGRAD_TARGETS: dict[Callable[..., Any], str] = {
    _engine._apply_gradients: "BACKWARD_AUTOGRAD_REQ",
    _context._release_remote: "CLEANUP_AUTOGRAD_CONTEXT_REQ",
    _rref_backward._backward_on_owner: "RREF_BACKWARD_REQ",
}
_TENSOR_OPS = "tensorplay_jax.tensors."  # builtin operators: tensorplay's SCRIPT_* messages
_REMEMBERED = 4096  # entries of each map a FaultInjector keeps (LRU)


# ("failed" or "delayed", message type) -> how many times, in this process.
_injected: collections.Counter[tuple[str, str]] = collections.Counter()


def injected() -> dict[tuple[str, str], int]:
    """The faults injected in this process so far: ``("failed" | "delayed", type) -> count``,
    so a test can check that the faults it asked for happened."""
    return dict(_injected)


def is_available() -> bool:
    """True: the faulty backend is always built (tensorplay's is a build option)."""
    return True


@dataclasses.dataclass
class FaultyTensorPipeRpcBackendOptions(TensorPipeRpcBackendOptions):
    """``TensorPipeRpcBackendOptions`` with faults to inject (see the module docstring).

    Example:
      >>> FaultyTensorPipeRpcBackendOptions(messages_to_fail=["RREF_USER_DELETE"]).num_fail_sends
      0
    """

    messages_to_fail: Sequence[str] = dataclasses.field(default_factory=list)
    messages_to_delay: Mapping[str, float] = dataclasses.field(default_factory=dict)
    num_fail_sends: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.messages_to_fail = list(self.messages_to_fail)
        self.messages_to_delay = dict(self.messages_to_delay)
        if self.num_fail_sends < 0:
            raise ValueError(
                f"FaultyTensorPipeRpcBackendOptions: num_fail_sends={self.num_fail_sends} "
                "must be >= 0"
            )
        for name, seconds in self.messages_to_delay.items():
            if not seconds >= 0:
                raise ValueError(
                    f"FaultyTensorPipeRpcBackendOptions: messages_to_delay[{name!r}]={seconds!r} "
                    "must be seconds >= 0"
                )


def _builtin(func: Any) -> bool:
    return getattr(func, "__module__", "").startswith(_TENSOR_OPS)


def message_type(out: Outgoing, script_rrefs: Mapping[int, bool] | None = None) -> str | None:
    """tensorplay's name of the request ``out`` (see the module docstring), or None.

    ``script_rrefs`` maps the ids of RRefs this worker's ``remote()`` made to whether a
    builtin operator made them (a fetch of one is ``SCRIPT_RREF_FETCH_CALL``).
    """
    kind, func = out.kind, out.info.func
    if kind == FORK_ADD:
        return "RREF_FORK_REQUEST"
    if kind == FORK_DEL:
        return "RREF_USER_DELETE"
    if kind == FETCH:
        script = (script_rrefs or {}).get(out.extra[0], False)
        return "SCRIPT_RREF_FETCH_CALL" if script else "PYTHON_RREF_FETCH_CALL"
    if kind == REMOTE:
        return "SCRIPT_REMOTE_CALL" if _builtin(func) else "PYTHON_REMOTE_CALL"
    if kind != CALL:
        return None
    if is_internal_target(func):
        return _AUTOGRAD_TARGETS.get(func)
    if _context.carried_id(out.info.metadata) is not None:
        return "FORWARD_AUTOGRAD_REQ"
    return "SCRIPT_CALL" if _builtin(func) else "PYTHON_CALL"


class FaultInjector:
    """The ``outgoing`` filter of a faulty agent: fails and delays requests by their type.

    Its counts are kept per distinct message (destination, type, envelope fields and
    encoded header), as tensorplay keys them by the message's payload; both maps it keeps
    are bounded.
    """

    def __init__(self, options: FaultyTensorPipeRpcBackendOptions) -> None:
        self._fail = frozenset(options.messages_to_fail)
        self._delay = dict(options.messages_to_delay)
        self._num_fail_sends = options.num_fail_sends
        self._lock = threading.Lock()
        self._failed: collections.OrderedDict[tuple, int] = collections.OrderedDict()
        self._script_rrefs: collections.OrderedDict[int, bool] = collections.OrderedDict()

    def __call__(self, out: Outgoing) -> None:
        with self._lock:  # requests are sent from many threads
            if out.kind == REMOTE:
                self._remember(self._script_rrefs, out.extra[0], _builtin(out.info.func))
            name = message_type(out, self._script_rrefs)
        if name is None:
            return
        if name in self._fail and self._num_fail_sends:
            key = (out.to.name, name, out.extra, out.header)
            with self._lock:
                failed = self._failed.get(key, 0)
                if failed < self._num_fail_sends:
                    self._remember(self._failed, key, failed + 1)
                    _injected["failed", name] += 1
                    raise RpcPeerError(
                        f"Send attempt failed intentionally for {name} to {out.to.name!r} "
                        f"(failure {failed + 1} of num_fail_sends={self._num_fail_sends}, "
                        "FaultyTensorPipeRpcBackendOptions.messages_to_fail)"
                    )
        pause = self._delay.get(name, 0)
        if pause:
            with self._lock:
                _injected["delayed", name] += 1
            time.sleep(pause)

    def _remember(self, table: collections.OrderedDict[Any, Any], key: Any, value: Any) -> None:
        # The caller holds the lock.
        table[key] = value
        table.move_to_end(key)
        while len(table) > _REMEMBERED:
            table.popitem(last=False)


class FaultyTensorPipeAgent(Agent):
    """The faulty backend's agent: the RPC agent with a :class:`FaultInjector` on its sends.

    Raises:
      TypeError: ``options`` are not :class:`FaultyTensorPipeRpcBackendOptions`
        (tensorplay's words).
    """

    def __init__(
        self,
        name: str,
        rank: int,
        world_size: int | None,
        options: FaultyTensorPipeRpcBackendOptions,
    ) -> None:
        if not isinstance(options, FaultyTensorPipeRpcBackendOptions):
            raise TypeError(
                "`rpc_backend_options` must be a `FaultyTensorPipeRpcBackendOptions`, got "
                f"{type(options).__name__}"
            )
        super().__init__(name, rank, world_size, options, outgoing=FaultInjector(options))


def _construct_options(
    rpc_timeout: float,
    init_method: str,
    num_worker_threads: int = TensorPipeRpcBackendOptions.num_worker_threads,
    messages_to_fail: Sequence[str] = (),
    messages_to_delay: Mapping[str, float] | None = None,
    num_fail_sends: int = 0,
    **kwargs: Any,
) -> FaultyTensorPipeRpcBackendOptions:
    return FaultyTensorPipeRpcBackendOptions(
        rpc_timeout=rpc_timeout,
        init_method=init_method,
        num_worker_threads=num_worker_threads,
        messages_to_fail=list(messages_to_fail),
        messages_to_delay=dict(messages_to_delay or {}),
        num_fail_sends=num_fail_sends,
        **kwargs,
    )


if not backend_registry.backend_registered("FAULTY_TENSORPIPE"):
    backend_registry.register_backend(
        "FAULTY_TENSORPIPE", _construct_options, FaultyTensorPipeAgent
    )
