"""The agent's message kinds: what each request and reply envelope carries.

A message is an envelope (a small msgpack list, decoded in the link's reading
thread), a codec header and buffers (``_codec``), framed by the transport
(``_framing``, ``_local``). The envelopes:

- requests ``[kind, message id, metadata, *extra]`` with kind
  ``CALL`` (body: ``[func, [args...], kwargs]``),
  ``REMOTE`` (extra: rref id, fork id; same body),
  ``FETCH`` (extra: rref id; empty body),
  ``FORK_ADD`` / ``FORK_DEL`` (extra: rref id, fork id; empty body),
  ``PING`` (empty body: the shutdown barrier's liveness check, answered by the
  reading thread itself, so a worker whose pool is busy still answers it);
- replies ``[OK or ERR, message id, response metadata]``; an ERR body is an
  exception record (class reference + message with the remote traceback).
  An ERR for message id 0 answers a message that could not be read.

``REMOTE``, ``FETCH`` and the fork messages are the RRef protocol (see
``_rref``, ``_rref_table``); the agent serves all of them.
"""

from __future__ import annotations

__all__ = [
    "CALL",
    "ERR",
    "FETCH",
    "FORK_ADD",
    "FORK_DEL",
    "KIND_NAMES",
    "OK",
    "PING",
    "REMOTE",
    "TRACE_NAMES",
]

CALL, REMOTE, FETCH, FORK_ADD, FORK_DEL, PING = 1, 2, 3, 4, 5, 6
OK, ERR = 16, 17
# A request's kind as hooks (CallInfo.kind) and error messages name it.
KIND_NAMES = {
    CALL: "call",
    REMOTE: "remote",
    FETCH: "fetch",
    FORK_ADD: "fork",
    FORK_DEL: "unfork",
    PING: "ping",
}
# How the profiler's trace names a kind: the user's words (to_here, an RRef's delete).
TRACE_NAMES = {"call": "call", "remote": "remote", "fetch": "to_here", "fork": "rref_fork",
               "unfork": "rref_delete", "ping": "ping"}  # fmt: skip
