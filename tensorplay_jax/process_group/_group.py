"""Process groups: ``init_process_group`` over JAX's multi-process runtime, groups, ranks, barrier.

``init_process_group`` starts (or joins) the runtime of ``jax.distributed.initialize``
and builds the default group over every process, one device per process. Each group
owns an *engine* that moves its data, built from the group's ``engine.GroupSpec`` by
the engine registered under the chosen name (``engine.register_engine``):

- ``"shm"``: shared memory, for a CPU (gloo) group whose members share a host;
  the fastest engine on one machine (see ``benchmarks/process_group.py``).
- ``"tcp"``: numpy over a mesh of authenticated TCP connections, for a CPU
  (gloo) group across hosts, where it beats XLA's gloo (see ``_engine_tcp``).
- ``"xla"``: compiled, cached XLA programs over the group's mesh; gloo on CPU,
  NCCL on GPU; any number of hosts.

``engine="auto"`` (the default) picks ``"shm"`` for a gloo group on one host,
``"tcp"`` for a gloo group across hosts, else ``"xla"`` (each engine registers when
it applies, and with what priority).
Point-to-point ``send``/``recv`` run as XLA programs over the pair.

``init_process_group`` after JAX work in the process (when ``jax.distributed``
can no longer start) runs a gloo group on the host engines over the
coordination service alone, send/recv included (``_startup.join``, ``_pair``).

The runtime's coordination service runs in a small process that rank 0 starts
(``_coordinator``), so that a rank that outlives a dead peer, rank 0 included,
raises within the group's timeout and then exits at once with its own status:
it neither waits at JAX's shutdown barrier for the dead peer nor is aborted by
JAX's runtime. For a same-host job (loopback ``MASTER_ADDR``) the service listens
on loopback only, and every value the group puts in its key-value store is signed
with the job secret (``tensorplay_jax.runtime.secret``); see ``_kv``.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import warnings
from collections.abc import Callable
from typing import Any

from tensorplay_jax.process_group import _kv, _startup, _store
from tensorplay_jax.process_group._work import Work
from tensorplay_jax.process_group.engine import (
    Engine,
    GroupSpec,
    PairEngine,
    make_engine,
    make_pair_engine,
)
from tensorplay_jax.runtime import secret as _secret
from tensorplay_jax.runtime.init_method import release, resolve_init
from tensorplay_jax.runtime.settings import DEFAULT_INIT_METHOD, DEFAULT_PG_TIMEOUT_S

__all__ = [
    "ProcessGroup",
    "barrier",
    "default_pg_timeout",
    "destroy_process_group",
    "get_backend",
    "get_pg_count",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_initialized",
    "new_group",
]


# The timeout of a group made without one (tensorplay's name; its value is this package's).
default_pg_timeout = datetime.timedelta(seconds=DEFAULT_PG_TIMEOUT_S)


@dataclasses.dataclass(eq=False)
class ProcessGroup:
    """A set of processes that run collectives together.

    Besides ``rank()`` and ``size()``, c10d's methods of the group object that torch
    code calls (``pg.allreduce([t])``, ``pg.monitored_barrier()``, ...) come from
    ``tensorplay_jax.distributed``'s table (``distributed/_group_methods.py``): they
    write Tensors in place, which this package's collectives leave to that layer.

    Attributes:
      ranks: the members' global ranks, ascending; a member's group rank is its index.
      engine: the data mover (None on a process that is not a member).
    """

    ranks: tuple[int, ...]
    gid: int
    engine: Engine | None = None
    timeout_s: float | None = None  # its collectives' deadline (None: the default group's)
    barriers: int = 0
    monitored: int = 0  # monitored_barrier calls so far (``_membership``)

    def rank(self) -> int:
        """This process's rank in the group, or -1 when it is not a member."""
        me = _state().rank
        return self.ranks.index(me) if me in self.ranks else -1

    def size(self) -> int:
        """Number of members."""
        return len(self.ranks)

    def __repr__(self) -> str:
        eng = self.engine.name if self.engine is not None else "non-member"
        return f"ProcessGroup(ranks={list(self.ranks)}, engine={eng!r})"


@dataclasses.dataclass
class _World:
    backend: str
    rank: int
    world_size: int
    timeout_s: float
    prefix: str
    engine_pref: str
    devices: list
    hosts: list[str]
    world: ProcessGroup | None = None
    next_gid: int = 0
    groups: list[ProcessGroup] = dataclasses.field(default_factory=list)
    pairs: dict = dataclasses.field(default_factory=dict)
    master: str = "127.0.0.1"  # the rendezvous host (the tcp engine routes to it)
    pending: list = dataclasses.field(default_factory=list)  # queued isend/irecv (``_p2p``)


_WORLD: _World | None = None
_EPOCH = 0  # re-initialisations of this process (keys stay unique in the shared store)


def _state(fn: str = "this call") -> _World:
    if _WORLD is None:
        raise RuntimeError(
            f"{fn}: the default process group has not been initialized; call "
            "tensorplay_jax.distributed.init_process_group(...) first."
        )
    return _WORLD


def init_process_group(
    backend: str | None = None,
    init_method: str | None = None,
    timeout: float | datetime.timedelta | None = None,
    world_size: int = -1,
    rank: int = -1,
    store: Any = None,
    *,
    engine: str | None = None,
    secret: str | None = None,
) -> None:
    """Start the JAX multi-process runtime and the default process group.

    Before any JAX computation in the process, this starts JAX's multi-process
    runtime (as ``jax.distributed.initialize`` does; one already up is joined),
    and every engine can run. After JAX work, when that runtime can no longer
    start, a gloo group starts anyway on the host engines (``shm`` on one host,
    ``tcp`` across hosts, send/recv included) over the coordination service
    alone, as tensorplay's gloo starts at any time; the ``xla`` engine and
    ``nccl`` need the runtime, and are refused then.

    Args:
      backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU); None picks nccl when a JAX GPU
        plugin is installed and ``JAX_PLATFORMS`` is not ``cpu``, else gloo.
      init_method: ``"env://"`` (``MASTER_ADDR``/``MASTER_PORT``, the default),
        ``"tcp://host:port"``, or ``"file:///path"``: a file on a filesystem every
        rank shares, where rank 0 writes its address and a free port (the file is
        deleted when the last process using it leaves; see
        ``tensorplay_jax.runtime.init_method``). The JAX coordinator listens on
        port + 1 (the RPC store owns the port itself), on loopback only when host
        is loopback.
      timeout: seconds (or a timedelta) any wait may take before it raises; default
        300 s.
      world_size: number of processes (default: ``WORLD_SIZE``).
      rank: this process's rank (default: ``RANK``). Unset variables come from
        SLURM's, and a world of one with ``env://`` and no ``MASTER_ADDR`` /
        ``MASTER_PORT`` runs on a free loopback port, as for ``init_rpc``
        (``tensorplay_jax.runtime.init_method``).
      store: a key-value store every rank reaches (``TCPStore``, ``FileStore``, or a
        ``HashStore`` for a world of one), in place of ``init_method``: rank 0 puts
        there where it serves, and ``rank`` and ``world_size`` must be given.
      engine: ``"auto"``, ``"shm"``, ``"tcp"``, ``"xla"`` or another registered engine
        (default ``TENSORPLAY_JAX_PG_ENGINE`` or auto): how groups move data; see the
        module docstring.
      secret: the job secret that signs the group's values in the coordination
        store; default: ``TENSORPLAY_JAX_RPC_SECRET``, ``TENSORPLAY_JAX_RPC_SECRET_FILE``,
        or for a same-host job the per-user secret file (``tensorplay_jax.runtime.secret``).

    Raises:
      RuntimeError: already initialized, JAX computations already ran and the
        group needs JAX's runtime (``nccl``, ``engine="xla"``), or the
        coordination service could not start; ``_kv.ForgedValue`` (a RuntimeError)
        when a value in the store is not signed with this job's secret.
      ValueError: a bad backend, init_method, rank, world_size or engine, a
        ``file://`` path that is a directory or cannot be created, or a job that
        spans hosts without a secret.
      TimeoutError: ``file://``: rank 0 did not write its address within ``timeout``.

    Example:
      >>> import tensorplay_jax.distributed as dist
      >>> dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29511",
      ...                         rank=0, world_size=1)  # doctest: +SKIP
      >>> dist.get_world_size()  # doctest: +SKIP
      1
    """
    global _WORLD, _EPOCH
    fn = "init_process_group"
    if _WORLD is not None:
        raise RuntimeError(f"{fn}: already initialized; call destroy_process_group() first.")
    backend, engine, timeout_s = _startup.options(fn, backend, engine, timeout)
    if store is not None:
        if init_method is not None:
            raise ValueError(f"{fn}: Cannot specify both init_method and store.")
        if rank < 0 or world_size <= 0:
            raise ValueError(f"{fn}: with a store, give rank and world_size too.")
        if not isinstance(store, _store.Store):
            raise TypeError(f"{fn}: store must be a Store (e.g. TCPStore), got {type(store)}")
        init_method = _store.rendezvous(store, rank, world_size, fn)
    host, port, rank, world_size = resolve_init(
        init_method or DEFAULT_INIT_METHOD,
        rank,
        None if world_size < 0 else world_size,
        fn=fn,
        timeout=timeout_s,
    )
    try:
        _kv.use_secret(_secret.job_secret(fn, given=secret, rendezvous_host=host))
        where = (host, port)
        devices = _startup.join(fn, backend, engine, where, rank, world_size, timeout_s)
        _EPOCH += 1
        prefix = f"tpjax/pg/{_EPOCH}"
        _kv.set(f"{prefix}/host/{rank}", _startup.host_id().encode())
        hosts = [_kv.get(f"{prefix}/host/{r}", timeout_s, fn).decode() for r in range(world_size)]
        _WORLD = _World(backend, rank, world_size, timeout_s, prefix, engine, devices, hosts)
        _WORLD.master = host
        _WORLD.world = _make_group(tuple(range(world_size)), fn=fn)
        _kv.barrier(f"{prefix}/init", timeout_s, range(world_size))
    except BaseException:
        _close_all()
        _WORLD = None
        release(fn)
        raise


def _spec(ranks: tuple[int, ...], key: str, fn: str, timeout_s: float | None = None) -> GroupSpec:
    """The group of ``ranks`` as this process (a member) sees it: what engines are built from."""
    w = _state()
    return GroupSpec(
        key=key,
        ranks=ranks,
        me=ranks.index(w.rank),
        timeout_s=w.timeout_s if timeout_s is None else timeout_s,
        devices=tuple(w.devices[r] for r in ranks),
        hosts=tuple(w.hosts[r] for r in ranks),
        backend=w.backend,
        master=w.master,
        secret=_kv.job_secret(),
        fn=fn,
    )


def _make_group(
    ranks: tuple[int, ...],
    engine: str | None = None,
    fn: str = "new_group",
    timeout_s: float | None = None,
) -> ProcessGroup:
    w = _state()
    gid = w.next_gid
    w.next_gid += 1
    g = ProcessGroup(ranks, gid, timeout_s=timeout_s)
    if w.rank in ranks:
        spec = _spec(ranks, f"{w.prefix}/g{gid}", fn, timeout_s)
        g.engine = make_engine(spec, engine or w.engine_pref)
    w.groups.append(g)
    return g


def pair_engine(a: int, b: int) -> PairEngine:
    """The engine of send/recv between global ranks ``{a, b}``, made on first use: the
    registry's pick for the pair (``engine.make_pair_engine``)."""
    w = _state()
    lo, hi = min(a, b), max(a, b)
    eng = w.pairs.get((lo, hi))
    if eng is None:
        spec = _spec((lo, hi), f"{w.prefix}/p2p/{lo}-{hi}", "send")
        eng = make_pair_engine(spec)
        w.pairs[(lo, hi)] = eng
    return eng


def world() -> _World:
    """The state of this process's process groups (raises when not initialized)."""
    return _state()


def device() -> Any:
    """This process's device in its process groups."""
    w = _state()
    return w.devices[w.rank]


def new_group(
    ranks: list[int] | None = None, timeout: Any = None, *, engine: str | None = None
) -> ProcessGroup:
    """Make a group of some ranks; every process must call it, in the same order.

    Args:
      ranks: global ranks of the members (any order; None means all).
      timeout: the deadline of the group's collectives and barriers, seconds or a
        ``datetime.timedelta`` (default: the default group's).
      engine: ``"auto"``, ``"shm"``, ``"tcp"``, ``"xla"`` or another registered engine;
        default: the one given to :func:`init_process_group`.

    Returns:
      The group; on a process that is not a member, its ``rank()`` is -1 and a
      collective on it warns and does nothing (returns None), as tensorplay's.

    Example:
      >>> pair = dist.new_group([0, 1])  # doctest: +SKIP
      >>> dist.all_reduce(x, group=pair)  # doctest: +SKIP
    """
    w = _state("new_group")
    if ranks is None:
        ranks = list(range(w.world_size))
    if engine is not None and engine not in _startup.engine_names():
        raise ValueError(f"new_group: engine={engine!r} is not one of {_startup.engine_names()}.")
    ranks_t = tuple(sorted(int(r) for r in ranks))
    bad = [r for r in ranks_t if not 0 <= r < w.world_size]
    if not ranks_t or bad or len(set(ranks_t)) != len(ranks_t):
        raise ValueError(
            f"new_group: ranks={list(ranks)} must be distinct ranks in 0..{w.world_size - 1}"
            + (f" ({bad} out of range)" if bad else "")
            + "."
        )
    timeout_s = None if timeout is None else _startup.timeout_s("new_group", timeout)
    return _make_group(ranks_t, engine, timeout_s=timeout_s)


def resolve(fn: str, group: ProcessGroup | None, *, p2p: bool = False) -> ProcessGroup:
    """The group a collective runs on; :class:`NotAMember` unless this process is a member.

    Unless ``p2p`` (a send or receive), this process's queued isend/irecv run first
    (:func:`run_pending`), so a collective never overtakes them.
    """
    w = _state(fn)
    if w.pending and not p2p:
        run_pending()
    g = w.world if group is None else group
    if not isinstance(g, ProcessGroup):
        raise TypeError(f"{fn}: group={group!r} is not a ProcessGroup (from new_group).")
    if g.engine is None:
        if g not in w.groups:
            raise RuntimeError(f"{fn}: group {list(g.ranks)} has been destroyed.")
        raise NotAMember(fn, w.rank)
    return g


class NotAMember(Exception):
    """A call on a group this process is not a member of; :func:`members_only` turns it into
    tensorplay's warning and a call that does nothing."""

    def __init__(self, fn: str, rank: int) -> None:
        super().__init__(
            f"Running {fn} on global rank {rank} which does not belong to the given group."
        )
        self.fn, self.rank = fn, rank


def members_only(func: Callable[..., Any]) -> Callable[..., Any]:
    """On a process outside the group, the call warns and does nothing (returns None), as
    tensorplay's collectives do: every rank may run the same code with a subgroup."""

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except NotAMember as e:
            warnings.warn(str(e), UserWarning, stacklevel=2)
            return None

    return call


def group_timeout(g: ProcessGroup) -> float:
    """The deadline, in seconds, of ``g``'s waits: its own, or the default group's."""
    return _state().timeout_s if g.timeout_s is None else g.timeout_s


def run_pending(timeout: float | None = None) -> None:
    """Run this process's queued isend/irecv now, in their canonical order (see ``_p2p``).

    Each queued call has a ``key`` (its pair of ranks, direction and issue order) and
    is called with the timeout and the error of an earlier call of the same run,
    returning its own error (or that one) for the next.
    """
    w = _state()
    while w.pending:
        ops = sorted(w.pending, key=lambda op: op.key)
        w.pending.clear()
        err = None
        for op in ops:
            err = op(timeout, err)


def get_pg_count() -> int:
    """How many process groups this process has made since ``init_process_group``, the
    default group included (0 before it, and after ``destroy_process_group()``).

    Example:
      >>> get_pg_count()
      0
    """
    return 0 if _WORLD is None else _WORLD.next_gid


def is_initialized() -> bool:
    """Whether the default process group is initialized."""
    return _WORLD is not None


def get_rank(group: ProcessGroup | None = None) -> int:
    """This process's rank in ``group`` (default: the world); -1 if not a member."""
    w = _state("get_rank")
    return w.rank if group is None else group.rank()


def get_world_size(group: ProcessGroup | None = None) -> int:
    """Number of processes in ``group`` (default: the world); -1 if not a member."""
    w = _state("get_world_size")
    if group is None:
        return w.world_size
    return group.size() if group.rank() >= 0 else -1


def get_backend(group: ProcessGroup | None = None) -> str:
    """``"gloo"`` or ``"nccl"``: the backend of ``group`` (default: the world).

    Raises:
      ValueError: this process is not a member of ``group`` (tensorplay's words:
        "Invalid process group specified").
    """
    w = _state("get_backend")
    if group is not None and group.rank() < 0:
        raise ValueError(
            f"Invalid process group specified: get_backend: rank {w.rank} is not a member of "
            f"the group with ranks {list(group.ranks)}."
        )
    return w.backend


@members_only
def barrier(
    group: ProcessGroup | None = None,
    async_op: bool = False,
    device_ids: Any = None,
    timeout: Any = None,
) -> Any:
    """Block until every member of ``group`` (default: all processes) arrives.

    ``async_op=True`` returns a completed ``Work`` (the barrier has passed);
    ``device_ids`` is accepted for tensorplay compatibility and unused.

    Raises:
      TimeoutError: a member did not arrive within the timeout (default: the group's).

    Example:
      >>> dist.barrier()  # doctest: +SKIP
    """
    fn = "barrier"
    w = _state(fn)
    g = resolve(fn, group)
    t = group_timeout(g) if timeout is None else _startup.timeout_s(fn, timeout)
    g.barriers += 1
    try:
        _kv.barrier(f"{w.prefix}/g{g.gid}/barrier/{g.barriers}", t, g.ranks)
    except _kv.KVTimeout:
        raise TimeoutError(
            f"{fn}: Timed out after {t:.3g}s; not every rank of {list(g.ranks)} arrived."
        ) from None
    if async_op:
        return Work.completed(None)
    return None


def _close_all() -> None:
    w = _WORLD
    if w is None:
        return
    for op in w.pending:  # queued isend/irecv that never ran
        op.cancel("destroy_process_group() ran first")
    w.pending.clear()
    for g in w.groups:
        if g.engine is not None:
            g.engine.close()
            g.engine = None
    for eng in w.pairs.values():
        eng.close()
    w.groups.clear()
    w.pairs.clear()


def destroy_process_group(group: ProcessGroup | None = None) -> None:
    """Release a group's resources; with no argument, every group and the default one.

    The JAX runtime itself stays up (it cannot restart within a process); a later
    ``init_process_group`` with the same rank and world size joins it again.
    """
    global _WORLD
    w = _state("destroy_process_group")
    if group is None or group is w.world:
        _close_all()
        _WORLD = None
        release("init_process_group")  # a file:// init method's handle on its file
        return
    if group.engine is not None:
        group.engine.close()
        group.engine = None
    if group in w.groups:
        w.groups.remove(group)
