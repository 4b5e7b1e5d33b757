"""The same-host transport: a Unix socket per pair of workers, large buffers in shared memory.

When caller and callee run on one host (and TLS is off), the agent talks over
this instead of its gRPC stream: a call costs two socket syscalls and no
gRPC thread hand-offs, and array bytes do not go through gRPC's copies.
gRPC stays the transport between hosts, with TLS, and whenever this one is
unavailable (no ``memfd_create``, ``TENSORPLAY_JAX_RPC_LOCAL=0``, or the
connection fails). Its links implement ``rpc/_link.Link``.

One module per job, in the order a connection meets them:

- ``handshake``: authentication first (HMAC over nonces, both ways).
- ``server``: ``LocalServer``, ``connect_local``, ``available``, ``host_id``.
- ``link``: ``LocalLink``, one connection end: sending, backlog, lent segments,
  and the reading baton.
- ``frames``: the frame layout, and the reader of frames and passed descriptors.
- ``segments``: shared-memory segments: staging, sealed mapping, the reuse pool.
- ``watchdog``: hands a link's reading on when one frame's work runs long.
- ``spinner``: the optional C yield-spin (``rpc/_spin.c``) before a reader sleeps.
"""

from tensorplay_jax.rpc._local.link import LocalLink as LocalLink
from tensorplay_jax.rpc._local.server import LocalServer as LocalServer
from tensorplay_jax.rpc._local.server import available as available
from tensorplay_jax.rpc._local.server import connect_local as connect_local
from tensorplay_jax.rpc._local.server import host_id as host_id
from tensorplay_jax.rpc._local.watchdog import on_reader_thread as on_reader_thread

__all__ = [
    "LocalLink",
    "LocalServer",
    "available",
    "connect_local",
    "host_id",
    "on_reader_thread",
]
