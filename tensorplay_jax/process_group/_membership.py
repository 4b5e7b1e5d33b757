"""Who is in which group: rank maps, ``new_subgroups``, ``monitored_barrier``, ``GroupMember``.

The tensorplay helpers that scripts call around their collectives:
``get_process_group_ranks``, ``get_global_rank``, ``get_group_rank``,
``new_subgroups``, ``monitored_barrier`` (which names the ranks that did not
arrive), and ``GroupMember.WORLD`` / ``group.WORLD`` (the default group, None
before ``init_process_group``).

Example:
  >>> GroupMember.WORLD is None  # no process group in this process
  True
"""

from __future__ import annotations

import time
from typing import Any

from tensorplay_jax.process_group import _group, _kv, _startup
from tensorplay_jax.process_group._group import (
    ProcessGroup,
    group_timeout,
    members_only,
    new_group,
    resolve,
    world,
)

__all__ = [
    "GroupMember",
    "get_global_rank",
    "get_group_rank",
    "get_process_group_ranks",
    "group",
    "monitored_barrier",
    "new_subgroups",
    "new_subgroups_by_enumeration",
]


class _HasWorld(type):
    @property
    def WORLD(cls) -> ProcessGroup | None:
        """The default group (every process), or None before ``init_process_group``."""
        w = _group._WORLD
        return None if w is None else w.world


class GroupMember(metaclass=_HasWorld):
    """``GroupMember.WORLD``: the default group; ``NON_GROUP_MEMBER``: tensorplay's marker.

    ``new_group`` here returns a group on every process (``rank()`` is -1 on the
    ones outside it) rather than ``NON_GROUP_MEMBER``.

    Example:
      >>> GroupMember.NON_GROUP_MEMBER
      -100
    """

    NON_GROUP_MEMBER = -100


class group(metaclass=_HasWorld):
    """``group.WORLD``: the default group, as ``GroupMember.WORLD``.

    Example:
      >>> group.WORLD is GroupMember.WORLD
      True
    """


def _group_of(fn: str, g: ProcessGroup | None) -> ProcessGroup:
    if g is None:
        return world().world
    if not isinstance(g, ProcessGroup):
        raise TypeError(f"{fn}: group={g!r} is not a ProcessGroup (from new_group).")
    return g


def get_process_group_ranks(group: ProcessGroup | None) -> list[int]:
    """The global ranks of ``group``'s members, in group-rank order (None: the world).

    Example:
      >>> dist.get_process_group_ranks(dist.new_group([2, 0]))  # doctest: +SKIP
      [0, 2]
    """
    return list(_group_of("get_process_group_ranks", group).ranks)


def get_global_rank(group: ProcessGroup | None, group_rank: int) -> int:
    """The global rank of ``group``'s member ``group_rank``.

    Raises:
      ValueError: ``group_rank`` is not a rank of the group.

    Example:
      >>> dist.get_global_rank(dist.new_group([1, 3]), 1)  # doctest: +SKIP
      3
    """
    g = _group_of("get_global_rank", group)
    if not isinstance(group_rank, int) or not 0 <= group_rank < g.size():
        raise ValueError(
            f"get_global_rank: group_rank={group_rank!r} is not a rank of the group "
            f"{list(g.ranks)} (0..{g.size() - 1})."
        )
    return g.ranks[group_rank]


def get_group_rank(group: ProcessGroup | None, global_rank: int) -> int:
    """The rank in ``group`` of the process with global rank ``global_rank``.

    Raises:
      ValueError: that process is not a member of the group.

    Example:
      >>> dist.get_group_rank(dist.new_group([1, 3]), 3)  # doctest: +SKIP
      1
    """
    g = _group_of("get_group_rank", group)
    if global_rank not in g.ranks:
        raise ValueError(
            f"get_group_rank: global rank {global_rank!r} is not part of the group {list(g.ranks)}."
        )
    return g.ranks.index(global_rank)


def new_subgroups(
    group_size: int | None = None,
    group: ProcessGroup | None = None,
    timeout: Any = None,
    backend: str | None = None,
    pg_options: Any = None,
    group_desc: str | None = None,
) -> tuple[ProcessGroup | None, list[ProcessGroup]]:
    """Split ``group`` (default: the world) into groups of ``group_size`` consecutive ranks.

    Every process calls it, in the same order (as :func:`new_group`).

    Args:
      group_size: members per subgroup; default: the ranks of ``group`` on this
        host (tensorplay's default is the devices per host). It must divide the
        group's size.
      group: the group to split (default: all processes).
      timeout, backend, pg_options, group_desc: accepted for tensorplay
        compatibility; the subgroups keep the default group's backend and timeout.

    Returns:
      ``(this process's subgroup, every subgroup)``; the first is None on a
      process outside ``group``.

    Raises:
      ValueError: ``group_size`` is not positive or does not divide the group's size.

    Example:
      >>> mine, all_groups = dist.new_subgroups(2)  # doctest: +SKIP
    """
    fn = "new_subgroups"
    w = world()
    ranks = _group_of(fn, group).ranks
    if group_size is None:
        group_size = sum(1 for r in ranks if w.hosts[r] == w.hosts[w.rank]) or len(ranks)
    if not isinstance(group_size, int) or group_size <= 0 or group_size > len(ranks):
        raise ValueError(
            f"{fn}: group_size={group_size!r} must be a positive int at most the group's "
            f"size {len(ranks)}."
        )
    if len(ranks) % group_size:
        raise ValueError(
            f"{fn}: the group's size {len(ranks)} must be divisible by group_size={group_size}."
        )
    subgroups = [
        new_group(list(ranks[i : i + group_size])) for i in range(0, len(ranks), group_size)
    ]
    mine = next((sg for sg in subgroups if w.rank in sg.ranks), None)
    return mine, subgroups


def new_subgroups_by_enumeration(
    ranks_per_subgroup_list: list[list[int]],
    timeout: Any = None,
    backend: str | None = None,
    pg_options: Any = None,
    group_desc: str | None = None,
) -> tuple[ProcessGroup | None, list[ProcessGroup]]:
    """One group per list of global ranks; each rank may be in one of them at most.

    Every process calls it, in the same order (as :func:`new_group`), with the same
    lists; the ranks are checked before any group is made.

    Args:
      ranks_per_subgroup_list: the members of each subgroup, global ranks.
      timeout: bounds the subgroups' waits (as ``new_group``'s).
      backend, pg_options, group_desc: accepted for tensorplay compatibility; the
        subgroups keep the default group's engine.

    Returns:
      ``(this process's subgroup or None, every subgroup)``.

    Raises:
      ValueError: the list is empty, a rank is out of range, or a rank is in two lists
        (tensorplay's words).

    Example:
      >>> mine, both = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]])  # doctest: +SKIP
    """
    if not ranks_per_subgroup_list:
        raise ValueError("The arg 'ranks_per_subgroup_list' cannot be empty")
    w = world()
    seen: dict[int, list[int]] = {}
    for ranks in ranks_per_subgroup_list:
        for r in ranks:
            if not isinstance(r, int) or not 0 <= r < w.world_size:
                raise ValueError(
                    f"Rank {r} is out of range: new_subgroups_by_enumeration takes global "
                    f"ranks from 0 to {w.world_size - 1}."
                )
            if r in seen:
                raise ValueError(
                    f"Rank {r} has appeared in both subgroup {seen[r]} and {list(ranks)}"
                )
            seen[r] = list(ranks)
    subgroups = [new_group(list(ranks), timeout) for ranks in ranks_per_subgroup_list]
    mine = next((sg for sg in subgroups if w.rank in sg.ranks), None)
    return mine, subgroups


@members_only
def monitored_barrier(
    group: ProcessGroup | None = None, timeout: Any = None, wait_all_ranks: bool = False
) -> None:
    """A barrier whose first member (group rank 0) names the ranks that did not arrive.

    Group rank 0 waits for the others; if one does not arrive in ``timeout`` it
    raises naming it (with ``wait_all_ranks``, naming every rank missing at the
    deadline), and every member that did arrive raises the same error.

    Args:
      group: the group (default: all processes).
      timeout: seconds or a timedelta (default: the group's timeout); zero has run out
        at once (group rank 0 then only looks whether the others have arrived).
      wait_all_ranks: report every missing rank, not only the first.

    Raises:
      RuntimeError: a rank did not arrive (``"Rank 1 failed to pass monitoredBarrier
        in 2000 ms"``, as tensorplay says it), or group rank 0 did not answer.

    Example:
      >>> dist.monitored_barrier(timeout=30, wait_all_ranks=True)  # doctest: +SKIP
    """
    fn = "monitored_barrier"
    w = world()
    g = resolve(fn, group)
    t = group_timeout(g) if timeout is None else _startup.timeout_s(fn, timeout, zero_ok=True)
    g.monitored += 1
    base = f"{w.prefix}/g{g.gid}/monitored"
    here = f"{base}/{g.monitored}"
    root = g.ranks[0]
    if w.rank != root:
        _kv.set(f"{here}/arrived/{w.rank}", b"1")
        # tensorplay's words for a rank that arrived while the barrier failed elsewhere
        reached = (
            f"{fn}: Rank {w.rank} successfully reached monitoredBarrier, but received errors "
            f"while waiting for send/recv from rank {root}"
        )
        try:  # the root answers within t of its own arrival: allow for it arriving late
            verdict = _kv.get(f"{here}/verdict", 2 * t + 1, fn)
        except _kv.KVTimeout:
            raise RuntimeError(
                f"{reached}: rank {root} (the group's first rank) did not answer within "
                f"{2 * t + 1:.3g}s."
            ) from None
        if verdict != b"ok":
            raise RuntimeError(f"{reached}: {verdict.decode()}")
        return
    start = time.monotonic()
    deadline = start + t
    others = g.ranks[1:]
    missing: list[int] = []
    spent = False  # the timeout ran out before a rank's turn came (tensorplay's "timed out")
    for i, r in enumerate(others):
        key = f"{here}/arrived/{r}"
        left = deadline - time.monotonic()
        if left < 0:  # the time ran out before this rank's turn: a probe, no wait
            came = not _kv.missing([key])
            spent = not came
        else:
            try:
                _kv.get(key, max(1e-3, left), fn)
                came = True
            except _kv.KVTimeout:
                came = False
        if not came:
            if wait_all_ranks:
                late = _kv.missing([f"{here}/arrived/{q}" for q in others[i:]])
                missing = [int(k.rsplit("/", 1)[1]) for k in late]
            else:
                missing = [r]
            break
    if g.monitored > 1:  # every member has read the verdict of the previous call
        _kv.delete(f"{base}/{g.monitored - 1}")
    if not missing:
        _kv.set(f"{here}/verdict", b"ok")
        return
    who = f"Rank {missing[0]}" if len(missing) == 1 else "Ranks " + ", ".join(map(str, missing))
    msg = (
        f"{fn}: rank(s) {missing} of the group {list(g.ranks)} did not arrive within "
        f"{t:.3g}s ({who} failed to pass monitoredBarrier in {int(t * 1000)} ms)."
    )
    if spent:  # tensorplay's words when the time ran out before a rank was waited for
        elapsed = int((time.monotonic() - start) * 1000)
        msg = f"Rank {w.rank} timed out in monitoredBarrier after {elapsed} ms. {msg}"
    _kv.set(f"{here}/verdict", msg.encode())
    raise RuntimeError(msg)
