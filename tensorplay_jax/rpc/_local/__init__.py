"""The same-host transport: a Unix socket per pair of workers, large buffers in shared memory.

When caller and callee run on one host (and TLS is off), the agent talks over
this transport (``"local"``, the first of the default list, see
``rpc/transports``): a call costs two socket syscalls and no thread
hand-offs, and array bytes are not copied through a stream. The agent uses
the next transport of its list (the TCP link, else gRPC) where this one is
unavailable (no ``memfd_create``, ``TENSORPLAY_JAX_RPC_LOCAL=0``, TLS on) or
a connection fails. The socket machinery (frames, backlog, reading baton,
watchdog, accept loop) is ``rpc/_socket``; shared memory is what this adds.

One module per job, in the order a connection meets them:

- ``handshake``: authentication first (HMAC over nonces, both ways).
- ``server``: ``LocalServer``, ``connect_local``, ``available``, ``host_id``,
  and ``LocalTransport``, the agent's handle on all of it.
- ``link``: ``LocalLink``, a socket link that lends shared-memory segments.
- ``frames``: the frame kinds this adds, and the reader of passed descriptors.
- ``segments``: shared-memory segments: staging, sealed mapping (kept for reuse), the reuse pool.
"""

from tensorplay_jax.rpc._local.link import LocalLink as LocalLink
from tensorplay_jax.rpc._local.server import LocalServer as LocalServer
from tensorplay_jax.rpc._local.server import available as available
from tensorplay_jax.rpc._local.server import connect_local as connect_local
from tensorplay_jax.rpc._local.server import host_id as host_id

__all__ = [
    "LocalLink",
    "LocalServer",
    "available",
    "connect_local",
    "host_id",
]
