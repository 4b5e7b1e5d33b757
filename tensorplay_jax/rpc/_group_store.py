"""The rendezvous store's side of a dynamic group: who is in it now, and what changed.

A dynamic group (``init_rpc(name, rank=r, world_size=None)``, see ``_membership``)
keeps its members in the store rank 0 hosts (``_rendezvous``), behind the same
job-secret handshake as every other store request. Three requests:

- ``join``: add this connection's worker (its rendezvous entry) unless a live member
  has its name or its rank, or the store already serves a fixed-size group; the
  reply is every member and the store's version;
- ``leave``: remove it (it called ``rpc.shutdown()``);
- ``watch``: wait until the version passes ``since``, then return the changes
  after it (``[version, "join" | "left" | "died", name, entry]``);
- ``close``: rank 0 is shutting the group down: later joins are refused, saying so.

A connection that closes without ``leave`` (the worker was killed, or crashed)
removes its member as ``"died"``: that is how the group learns of a SIGKILL.
The change log grows by one entry per change: a long-lived group with much
churn keeps a few hundred bytes per join and per leave.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["GroupState", "closed", "group_op", "seconds"]

GROUP_OPS = ("join", "leave", "watch", "mode", "close")


class GroupState:
    """The members of the store's dynamic group and the log of changes to them."""

    def __init__(self) -> None:
        self.mode: str | None = None  # "static" or "dynamic": rank 0's (or the first worker's)
        self.closing: str | None = None  # rank 0 is shutting the group down: why joins fail
        self.members: dict[str, dict[str, Any]] = {}
        self.log: list[list[Any]] = []

    @property
    def version(self) -> int:
        return len(self.log)

    def remove(self, name: str, nonce: str, why: str) -> None:
        """Drop member ``name`` if it is still the incarnation ``nonce`` (the caller holds cond)."""
        ent = self.members.get(name)
        if ent is not None and ent["nonce"] == nonce:
            del self.members[name]
            self.log.append([self.version + 1, why, name, ent])


def seconds(req: dict[str, Any]) -> float:
    """A waiting request's ``"timeout"``: a number of seconds (an int or a float, not NaN).

    Raises:
      KeyError: it has none.
      ValueError: it is not a number, or NaN (a NaN deadline is never reached, and a
        wait for NaN seconds returns at once: the store's thread would spin for ever;
        a string is refused too, not read as a number).

    Example:
      >>> seconds({"op": "wait", "timeout": 2})
      2
      >>> seconds({"op": "wait", "timeout": float("nan")})
      Traceback (most recent call last):
      ...
      ValueError: wait: timeout=nan is not a number of seconds
    """
    t = req["timeout"]
    if type(t) not in (int, float) or t != t:
        raise ValueError(f"{req['op']}: timeout={t!r:.40} is not a number of seconds")
    return t


def group_op(st: Any, conn: Any, op: str, req: dict[str, Any]) -> dict[str, Any]:
    """Serve one group request ``op`` for connection ``conn`` (the caller holds ``st.cond``)."""
    g: GroupState = st.group
    if op == "mode":  # a fixed-size group's workers claim the store for their mode
        if g.mode is None:
            g.mode = req["mode"]
        return {"v": g.mode}
    if op == "close":
        g.closing = str(req["why"])
        return {"ok": True}
    if op == "join":
        ent = req["entry"]
        if not (
            isinstance(ent, dict)
            and isinstance(ent.get("name"), str)
            and isinstance(ent.get("nonce"), str)
            and type(ent.get("rank")) is int
        ):
            return {"err": "a join needs an entry with a string name and nonce and an int rank"}
        if g.mode not in (None, "dynamic"):
            return {
                "err": "RPC group mixes statically and dynamically initialized members which is "
                "not supported: the rendezvous store serves a fixed-size group (its workers gave "
                "a world_size); pass the group's world_size",
                "mixed": True,
            }
        if g.closing is not None:
            return {"err": g.closing}
        g.mode = "dynamic"
        if ent["name"] in g.members:
            return {"err": f"worker name {ent['name']!r} is taken by a live member"}
        taken = next((n for n, e in g.members.items() if e["rank"] == ent["rank"]), None)
        if taken is not None:
            return {"err": f"rank {ent['rank']} is taken by live member {taken!r}"}
        g.members[ent["name"]] = ent
        g.log.append([g.version + 1, "join", ent["name"], ent])
        conn.member = (ent["name"], ent["nonce"])
        st.cond.notify_all()
        return {"members": list(g.members.values()), "version": g.version}
    if op == "leave":
        if conn.member is not None:
            g.remove(*conn.member, "left")
            conn.member = None
            st.cond.notify_all()
        return {"ok": True, "version": g.version}
    # watch
    since = int(req["since"])
    if since < 0:
        return {"err": f"watch: since={since} must be >= 0"}
    deadline = time.monotonic() + seconds(req)
    while g.version <= since and st.aborted is None:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        st.cond.wait(left)
    return {"changes": g.log[since:], "version": g.version}


def closed(st: Any, conn: Any) -> None:
    """``conn`` closed: its member, if it did not leave, died."""
    if getattr(conn, "member", None) is not None:
        with st.cond:
            st.group.remove(*conn.member, "died")
            conn.member = None
            st.cond.notify_all()
