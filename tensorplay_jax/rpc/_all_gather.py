"""tensorplay's private all-gather over RPC (``rpc.api._all_gather``, ``_barrier`` and more).

tensorplay programs and tests call these private helpers; here they have the same
meaning, built on plain RPC calls. The worker with the smallest name leads: every
other worker sends its object to the leader (:func:`_gather_to_leader`); once the
leader holds them all it sends the whole ``{name: object}`` map to each follower
(:func:`_broadcast_to_followers`), and every worker returns that map. Calls are
matched by a sequence number per set of names (every worker calls in the same
order, as with any collective). Every wait has an end: ``timeout`` seconds, or
the RPC timeout when it is not given.

Our graceful ``shutdown`` does not use this (its barrier is the rendezvous store's,
``_shutdown.py``); ``_wait_all_workers`` is here for the programs that call it.
The three are reached as ``rpc.api._all_gather``, ``rpc.api._barrier`` and
``rpc.api._wait_all_workers``, their names in tensorplay.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from tensorplay_jax.rpc import _agent
from tensorplay_jax.rpc._call_hooks import internal_target
from tensorplay_jax.rpc._errors import RpcTimeoutError
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._protocol import CALL

_lock = threading.Lock()
_sequence: dict[tuple[str, ...], int] = {}  # names -> the next call's number on this worker
_states: dict[str, _State] = {}  # sequence id -> its gathering, while it runs


class _State:
    """One gathering: the objects arrived (on the leader) and the signal to go on."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.proceed = threading.Event()


def _state(sequence_id: str) -> _State:
    with _lock:
        return _states.setdefault(sequence_id, _State())


@internal_target
def _gather_to_leader(sequence_id: str, name: str, obj: Any, names: list[str]) -> None:
    """On the leader: ``name``'s object arrived; the last one lets the leader go on."""
    state = _state(sequence_id)
    with _lock:
        if name in state.objects:
            raise RuntimeError(f"_all_gather: {name!r} sent sequence {sequence_id} twice")
        state.objects[name] = obj
        if set(state.objects) == set(names):
            state.proceed.set()


@internal_target
def _broadcast_to_followers(sequence_id: str, objects: dict[str, Any]) -> None:
    """On a follower: the leader's map arrived; the follower goes on."""
    state = _state(sequence_id)
    state.objects = objects
    state.proceed.set()


def _all_gather(obj: Any, worker_names: Iterable[str] | None = None, timeout: float = -1) -> dict:
    """Every worker's ``obj`` by name, on every worker of ``worker_names`` (default: all).

    Raises:
      RpcTimeoutError: the others did not arrive, or could not be answered, within
        ``timeout`` seconds ("timed out in _all_gather after T seconds").
    """
    agent = _agent.get_agent("_all_gather")
    names = sorted(worker_names or [w.name for w in agent.peers.workers.values()])
    key = tuple(names)
    with _lock:
        number = _sequence.get(key, 0)
        _sequence[key] = number + 1
    sequence_id = f"{','.join(names)}#{number}"
    wait = timeout if timeout is not None and timeout > 0 else agent.options.rpc_timeout
    leader, me = names[0], agent.name

    def call(to: str, fn: Any, *args: Any) -> Future[Any]:
        return agent.call(agent.resolve(to, "_all_gather"), CALL, fn, args, {}, wait)

    if me == leader:
        _gather_to_leader(sequence_id, me, obj, names)
    else:
        call(leader, _gather_to_leader, sequence_id, me, obj, names).wait()
    state = _state(sequence_id)
    if not state.proceed.wait(wait or None):
        with _lock:
            _states.pop(sequence_id, None)
        missing = sorted(set(names) - set(state.objects)) if me == leader else [leader]
        raise RpcTimeoutError(
            f"_all_gather: {me} timed out in _all_gather after {wait:.2f} seconds waiting for "
            f"{missing}"
        )
    if me == leader:
        futures = {
            n: call(n, _broadcast_to_followers, sequence_id, state.objects) for n in names[1:]
        }
        errors = []
        for n, fut in futures.items():
            try:
                fut.wait()
            except RuntimeError as e:
                errors.append((n, e))
        if errors:
            with _lock:
                _states.pop(sequence_id, None)
            raise RpcTimeoutError(
                f"_all_gather: followers {[n for n, _ in errors]} timed out in _all_gather after "
                f"{wait:.2f} seconds; the first error: {errors[0][1]}"
            )
    with _lock:
        _states.pop(sequence_id, None)
    return state.objects


def _barrier(worker_names: Iterable[str]) -> None:
    """Wait until every worker of ``worker_names`` reached this call (an all-gather of None)."""
    _all_gather(None, set(worker_names))


def _wait_all_workers(timeout: float = -1) -> None:
    """Wait until every worker reached this call (tensorplay's graceful-shutdown barrier)."""
    _all_gather(None, timeout=timeout)
