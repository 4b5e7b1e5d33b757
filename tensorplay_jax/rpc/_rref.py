"""RRef: a reference to a value living on one worker (its owner), with distributed refcounting.

The user-facing :class:`RRef`, its proxies (``rref.rpc_sync().method()``) and
its wire format. The counting behind it (forks, FORK_ADD/FORK_DEL, owner
records, placeholders for ids not created yet, parked fetches) is the RRef
table's: see ``_rref_table``. Serialising an RRef registers a new fork with
the owner first; receiving one on its owner takes a local handle and drops
that fork, elsewhere makes a user RRef that releases its fork when collected.

``confirmed_by_owner()`` is True on the owner; on a user received from the
owner; and on a user once the owner has answered a request about it (its
``remote()`` creation, ``to_here``). A user received from another user asks the
owner, the first time, whether that worker's FORK_ADD for it has come (the
owner waits for it, at most ``rpc_timeout``).

The proxies (``rref.rpc_sync().m(...)``) are ``_rref_proxy``'s.

``remote(..., timeout=t)``: a creation not confirmed within ``t`` fails the next
use of the RRef with an ``RpcTimeoutError`` naming the owner, the function and
``t``. A use that finds the creation still pending goes ahead, but its result
(``to_here``'s fetch, a proxy call, an RPC the RRef is passed to, a new RRef)
fails all the same if the creation fails before that result comes
(``_sending.guard``; while any creation is awaited, sending a call collects
the RRefs it carries with their creation pending).
The owner's value is counted as any other: it is freed when the user drops
the RRef.

"""

from __future__ import annotations

import copy
import functools
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from tensorplay_jax.rpc import _codec, _current, _retries, _sending, _wire_types
from tensorplay_jax.rpc._call_hooks import internal_target
from tensorplay_jax.rpc._errors import (
    RpcNotInitializedError,
    RpcPeerError,
    RpcTimeoutError,
    not_initialized,
)
from tensorplay_jax.rpc._futures import Future
from tensorplay_jax.rpc._protocol import CALL, FETCH, FORK_ADD, REMOTE
from tensorplay_jax.rpc._rref_proxy import Proxy, value_type
from tensorplay_jax.rpc._rref_table import _OwnerRecord
from tensorplay_jax.rpc._types import WorkerInfo
from tensorplay_jax.runtime.ids import RREF_ID

__all__ = ["RRef"]

log = logging.getLogger(__name__)
T = TypeVar("T")


def _agent_for(what: str) -> Any:
    return _current.get_agent(what)


# RRef.backward's implementation: distributed autograd registers it when imported
# (``internal.register_rref_backward``); RPC imports nothing of it.
_backward_impl: Callable[[RRef[Any], int, bool], None] | None = None


def register_backward(impl: Callable[[RRef[Any], int, bool], None]) -> None:
    """Install what ``RRef.backward(ctx_id, retain_graph)`` runs (distributed autograd's).

    Example:
        >>> import tensorplay_jax  # registers distributed autograd's
        >>> current = _backward_impl
        >>> register_backward(current)  # registering it again changes nothing
        >>> _backward_impl is current and current.__module__.endswith("_rref_backward")
        True
    """
    global _backward_impl
    _backward_impl = impl


class RRefPicklingError(RuntimeError, TypeError):
    """Pickling an RRef outside RPC (tensorplay: ``RuntimeError``; here also a ``TypeError``)."""


class RRef(Generic[T]):
    """A remote reference: a handle to a value owned by one worker.

    ``RRef(value)`` makes an RRef owned by this worker; ``remote()`` makes one
    owned by another. RRefs can be passed to and returned from RPCs.

    Example (inside an initialised RPC job)::

        rref = rpc.remote("worker1", jnp.add, args=(jnp.ones(2), 1))
        rref.to_here()                          # Array([2., 2.])
        rref.rpc_sync().sum()                   # runs on worker1
        rpc.rpc_sync("worker1", f, args=(rref,))
    """

    __slots__ = (
        "__weakref__",
        "_agent",
        "_confirmed",
        "_created",
        "_fork",
        "_id",
        "_methods",
        "_owner",
        "_record",
        "_released",
        "_type",
    )

    def __init__(self, value: T, type_hint: Any = None) -> None:
        agent = _current.current_agent()
        if agent is None:  # tensorplay's words first, then ours
            raise RpcNotInitializedError(
                "Current RPC agent is not set! Did you initialize the RPC framework (e.g. "
                f"calling `rpc.init_rpc`)? {not_initialized('RRef')}"
            )
        rec = _OwnerRecord(agent.rrefs.new_id(), Future(), created=True)
        rec.value.set_result(value)
        self._setup(agent, agent.me, rec.id, None, rec, None)

    def _setup(
        self,
        agent: Any,
        owner: WorkerInfo,
        rref_id: int,
        fork: int | None,
        record: _OwnerRecord | None,
        created: Future | None,
    ) -> None:
        self._agent, self._owner, self._id, self._fork = agent, owner, rref_id, fork
        self._record, self._created = record, created
        self._released = False
        self._confirmed = record is not None
        self._methods: set[str] | None = None  # attributes the owner has found on the value
        self._type: type | None = None  # the value's type, once known (``_get_type``)
        if fork is not None:
            agent.rrefs.track(self)

    @classmethod
    def _make(
        cls,
        agent: Any,
        owner: WorkerInfo,
        rref_id: int,
        fork: int | None,
        record: _OwnerRecord | None,
        created: Future | None = None,
    ) -> RRef[Any]:
        r = cls.__new__(cls)
        r._setup(agent, owner, rref_id, fork, record, created)
        return r

    @classmethod
    def _remote(
        cls,
        agent: Any,
        dest: WorkerInfo,
        func: Any,
        args: Any,
        kwargs: Any,
        timeout: float,
        what: str = "remote",
    ) -> RRef[Any]:
        """``remote()``'s core (``api.remote`` and the proxies' ``rref.remote().m()``): run
        ``func`` on ``dest`` (resolved by ``agent``), keep the result there, return its RRef.
        """
        rref_id, fork = agent.rrefs.new_id(), agent.rrefs.new_id()
        extra = (rref_id, fork)
        if dest.name != agent.name:
            created = _sending.send(agent, dest, REMOTE, func, args, kwargs, timeout, extra, what)
            _sending.track_creation(created)
            return cls._make(agent, dest, rref_id, fork, None, created)
        # Naming this worker: an owner RRef whose value the served call sets. The call
        # still goes through this worker's own serving side (as any call to itself), which
        # fills the record registered here: the RRef holds the value the function
        # returned, not a copy. The creation's fork is released once the call is
        # answered; a failure or a timeout before the value is set becomes the value's
        # error (``to_here`` and ``local_value`` raise it).
        rec = agent.rrefs.own_remote(rref_id)
        try:
            created = _sending.send(agent, dest, REMOTE, func, args, kwargs, timeout, extra, what)
        except BaseException:
            agent.rrefs.drop_owned(rec)
            raise

        def settle(f: Future[Any]) -> None:
            exc = f.exception()
            if exc is not None:
                rec.value._try_set_exception(_creation_failed(what, exc))
            agent.rrefs.del_fork(rref_id, fork)

        created.add_done_callback(settle)
        mine = cls._make(agent, dest, rref_id, None, rec, created)
        # Held here, it keeps the record its value lives in once the creation's fork is
        # gone: the RRef counters (``_rref_context_get_debug_info``) count it from here.
        agent.rrefs.track(mine)
        return mine

    def __del__(self) -> None:
        try:
            if self._fork is not None and not self._released:
                self._released = True
                self._agent.rrefs.enqueue_delete(self._owner, self._id, self._fork)
        except Exception:
            pass

    # -- queries
    def owner(self) -> WorkerInfo:
        """The WorkerInfo of the worker that owns the value."""
        return self._owner

    def owner_name(self) -> str:
        """The name of the owner."""
        return self._owner.name

    def is_owner(self) -> bool:
        """True on the owning worker."""
        return self._record is not None

    def _creation_error(self, what: str) -> BaseException | None:
        """The error a use (``what``) of this RRef raises: its ``remote()`` creation failed,
        or was not confirmed within its timeout; None while pending or once confirmed."""
        c = self._created
        if c is None or self._confirmed or not c.done():
            return None
        exc = c.exception()
        if exc is None:
            self._confirmed = True
            return None
        return _creation_failed(what, exc)

    def confirmed_by_owner(self) -> bool:
        """True when the owner is known to hold this reference (always on the owner).

        A user RRef passed on by another user asks the owner the first time
        (a blocking call): True once the owner has registered this worker's fork.
        A ``remote()`` whose creation is still pending answers False at once.
        """
        if not self._confirmed and self._created is not None and self._created.done():
            self._confirmed = self._created.exception() is None
        elif not self._confirmed and self._created is None and not self._released:
            agent = self._live_agent("confirmed_by_owner")
            extra = (self._id, self._fork)
            fut = agent.call(self._owner, CALL, _fork_registered, extra, {}, -1)
            self._confirmed = bool(fut.wait())
        return self._confirmed

    def _live_agent(self, what: str) -> Any:
        if self._released or _current.current_agent() is not self._agent:
            name = what.split(":")[0].split(".")[-1]
            raise RuntimeError(
                f"{what}: this RRef belongs to an RPC session that was shut down: "
                f"Cannot call {name}() on it after deletion."
            )
        return self._agent

    def _get_type(self, timeout: float = -1, blocking: bool = True) -> Any:
        """The value's type (tensorplay's private helper); a Future of it if not ``blocking``."""
        return value_type(self, timeout, blocking)

    def _get_future(self) -> Future[Any]:
        """The Future of this RRef's creation on its owner (tensorplay's private helper)."""
        if self._created is not None:
            return self._created
        done: Future[Any] = Future()
        done.set_result(None)
        return done

    # -- values
    def local_value(self) -> T:
        """The value itself; only on the owner.

        Raises:
          RuntimeError: called on a worker that is not the owner.
        """
        if self._record is None:
            me = _current.current_agent()
            user = f"WorkerInfo(id={me.rank}, name={me.name})" if me is not None else "a worker"
            owner = f"WorkerInfo(id={self._owner.id}, name={self._owner.name})"
            raise RuntimeError(
                f"For {self._describe('rref_id=', 'fork_id=', ', ')}, can't call localValue() on "
                f"user {user}. Call it on owner {owner}: local_value() can only be called on the "
                f"owner of an RRef ({self._owner.name!r}); use to_here() to fetch a copy"
            )
        return self._record.value.wait()

    def to_here(self, timeout: float = -1) -> T:
        """Fetch a copy of the value to this worker (the value itself on the owner).

        Args:
          timeout: seconds; -1 = the default RPC timeout, 0 = no limit.

        Raises:
          Exception: whatever the function that created the value raised (for ``remote()``).
        """
        if self._record is not None:
            return self._record.value.wait()
        self._check_created("to_here")
        agent = self._live_agent("to_here")
        fetched = agent.call(self._owner, FETCH, timeout=timeout, extra=(self._id,))
        value = _sending.guard(fetched, [self], "to_here").wait()
        self._confirmed = True
        return value

    def _check_created(self, what: str) -> None:
        # A remote() whose creation already failed (error, timeout) fails every later use.
        exc = self._creation_error(what)
        if exc is not None:
            try:
                raise exc
            finally:
                del exc  # the raise's traceback holds this frame: no cycle through it

    # -- autograd
    def backward(self, dist_autograd_ctx_id: int = -1, retain_graph: bool = False) -> None:
        """Run backward from this RRef's value, a scalar Tensor, on its owner.

        Args:
          dist_autograd_ctx_id: a distributed autograd context id: the distributed
            backward pass of that context starts on the owner (read the gradients
            with ``dist_autograd.get_gradients`` on the workers holding the leaves).
            -1: a local autograd backward on the owner, no context (gradients go
            to the leaves' ``.grad`` there; tensorplay allows it on the owner
            only, here a user may ask too).
          retain_graph: keep the graph for another backward over it.

        Raises:
          TypeError: the value is not a Tensor.
          RuntimeError: the value is not a one-element Tensor that requires grad,
            the context is unknown on the owner ("Could not find autograd context
            with id: N"), or the graph was freed.
          RpcTimeoutError: the RRef's creation was not confirmed in time.

        Example:
          >>> import tensorplay_jax as tp
          >>> from tensorplay_jax.distributed import rpc
          >>> rpc.init_rpc("rbdoc", rank=0, world_size=1)
          >>> w = tp.ones(3, requires_grad=True)
          >>> rpc.RRef((w * w).sum()).backward()
          >>> w.grad
          tensor([2., 2., 2.])
          >>> rpc.shutdown()
        """
        self._check_created("RRef.backward")
        if _backward_impl is None:
            raise RuntimeError(
                "RRef.backward needs distributed autograd: import "
                "tensorplay_jax.distributed.autograd (tensorplay_jax imports it)"
            )
        _backward_impl(self, dist_autograd_ctx_id, retain_graph)

    # -- proxies
    def rpc_sync(self, timeout: float = -1) -> Any:
        """``rref.rpc_sync().method(*args)`` runs ``value.method(*args)`` on the owner."""
        return Proxy(self, "sync", timeout)

    def rpc_async(self, timeout: float = -1) -> Any:
        """Like :meth:`rpc_sync`, returning a Future."""
        return Proxy(self, "async", timeout)

    def remote(self, timeout: float = -1) -> Any:
        """Like :meth:`rpc_sync`, leaving the result on the owner as a new RRef."""
        return Proxy(self, "remote", timeout)

    def __reduce__(self) -> Any:
        raise RRefPicklingError(
            "Can not pickle rref in python pickler: an RRef cannot be pickled (tp.save, pickle); "
            "pass it directly as an RPC argument or result (also inside lists, tuples, dicts "
            "and dataclasses)"
        )

    def _describe(self, id_label: str, fork_label: str, sep: str) -> str:
        """tensorplay's spelling of this RRef: its kind and ids (``GloballyUniqueId``)."""

        def unique(id_: int | None) -> str:
            created_on, local_id = RREF_ID.unpack(id_ or 0)
            return f"GloballyUniqueId(created_on={created_on}, local_id={local_id})"

        if self._record is not None:
            return f"OwnerRRef({unique(self._id)})"
        return f"UserRRef({id_label}{unique(self._id)}{sep}{fork_label}{unique(self._fork)})"

    def __repr__(self) -> str:
        return self._describe("RRefId = ", "ForkId = ", ", ")


def _creation_failed(what: str, exc: BaseException) -> BaseException:
    """The error a use (``what``) of an RRef raises when its ``remote()`` creation failed
    with ``exc``: the RPC layer's own errors say that the creation failed (tensorplay's
    "RRef creation"), the function's error is raised as it is."""
    if isinstance(exc, RpcTimeoutError):
        return RpcTimeoutError(
            f"{what}: RRef creation was not confirmed by its owner in time: {exc}"
        )
    if isinstance(exc, RpcPeerError):  # the value may not exist on the owner
        return RpcPeerError(f"{what}: RRef creation failed on the way to its owner: {exc}")
    return _fresh(exc)


def _fresh(exc: BaseException) -> BaseException:
    """A copy of ``exc`` (same type, arguments, chained causes) for one use to raise.

    Raising the creation's own error would give it a traceback holding the use's
    frames, and they hold this RRef, which holds the error: a cycle only the cyclic
    collector frees, so dropping the RRef would not release it on its owner at once.
    An exception that cannot be copied is returned itself.

    Example:
        >>> err = ValueError("boom")
        >>> again = _fresh(err)
        >>> again is not err, type(again).__name__, str(again)
        (True, 'ValueError', 'boom')
    """
    try:
        new = copy.copy(exc)
    except Exception:
        return exc
    if type(new) is not type(exc) or new.args != exc.args:
        return exc
    new.__cause__, new.__context__ = exc.__cause__, exc.__context__
    new.__suppress_context__ = exc.__suppress_context__
    return new


@internal_target
def _fork_registered(rref_id: int, fork: int) -> bool:
    """On the owner: True once ``fork`` of ``rref_id`` is registered (False: not in time)."""
    return _agent_for("confirmed_by_owner").rrefs.wait_fork(rref_id, fork)


# ---------------------------------------------------------------- wire format


def _encode_rref(r: RRef[Any]) -> list[Any]:
    agent = r._live_agent("sending an RRef")
    if r._created is not None and not r._confirmed:
        r._check_created("passing an RRef on")
        _sending.carry(r)
    fork = agent.rrefs.new_id()
    holder = _wire_types.encoding_to()  # the receiver holds the fork: released if it goes
    if r._record is not None:
        agent.rrefs.add_fork(r._id, fork, r._record, holder=holder)
    else:
        extra = (r._id, fork) if holder is None else (r._id, fork, holder)
        sent = _retries.with_retries(
            lambda: agent.call(r._owner, FORK_ADD, extra=extra), "an RRef's fork registration"
        )
        # ``r`` stays alive until the owner has the new fork: its own release (FORK_DEL,
        # when it is collected) cannot empty the owner's forks while this one is retried.
        sent.add_done_callback(functools.partial(_forked, r))
    return [r._owner.id, r._owner.name, r._id, fork]


def _forked(r: RRef[Any], sent: Future[Any]) -> None:
    """``r``'s fork registration ended; a failure after the retries is logged."""
    exc = sent.exception()
    if exc is not None:
        log.warning("rpc: the owner of RRef %#x did not get a fork of it: %s", r._id, exc)


def _decode_rref(v: list[Any]) -> RRef[Any]:
    owner_id, owner_name, rref_id, fork = v
    if type(owner_id) is not int or type(rref_id) is not int or type(fork) is not int:
        raise _codec.DecodeError(f"an RRef needs integer owner, id and fork; got {v!r:.200}")
    agent = _agent_for("receiving an RRef")
    if owner_id == agent.rank:
        # Its sender registered the fork first (FORK_ADD), unless that is still on its way
        # on another connection; an id never created is dropped after rpc_timeout.
        sender = _codec.current_peer()
        rec = agent.rrefs.lookup_or_pending(rref_id, "an RRef sent", sender)
        r = RRef._make(agent, agent.me, rref_id, None, rec)
        agent.rrefs.del_fork(rref_id, fork, sender)
        return r
    owner = agent.peers.by_id.get(owner_id) or WorkerInfo(owner_name, owner_id)
    r = RRef._make(agent, owner, rref_id, fork, None)
    sender = _codec.current_peer()
    # The owner registered the fork before it sent the RRef: confirmed.
    r._confirmed = sender is not None and sender.name == owner.name
    return r


_codec.register_type(RRef, _encode_rref, _decode_rref, name="RRef")
