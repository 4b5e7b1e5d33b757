"""The socket base of the stream transports: frames, the reading baton, the watchdog, serving.

The same-host transport (``rpc/_local``: a Unix socket, large buffers in
shared memory) and the TCP link between hosts (``rpc/_tcp``) are both built
on it. One module per job:

- ``frames``: the frame layout (``u64`` length, ``u8`` kind, body), the
  ``INLINE`` kind, and the reader that takes frames off a socket.
- ``link``: ``SocketLink``, one connection end: the send backlog, and reading
  in turn (one thread at a time holds the "baton").
- ``watchdog``: hands a link's reading on when one frame's work runs long.
- ``server``: ``SocketServer``, the accept loop (authentication first), and
  ``ClientEnd`` and ``start_reading`` for a client's end.
- ``spinner``: the optional C yield-spin (``rpc/_spin.c``) before a reader sleeps.
"""

from tensorplay_jax.rpc._socket.link import SocketLink as SocketLink
from tensorplay_jax.rpc._socket.server import ClientEnd as ClientEnd
from tensorplay_jax.rpc._socket.server import SocketServer as SocketServer
from tensorplay_jax.rpc._socket.server import start_reading as start_reading
from tensorplay_jax.rpc._socket.watchdog import on_reader_thread as on_reader_thread

__all__ = ["ClientEnd", "SocketLink", "SocketServer", "on_reader_thread", "start_reading"]
