"""``on_reader_thread`` where ``rpc/_futures`` imports it (the watchdog is ``rpc/_socket``'s)."""

from tensorplay_jax.rpc._socket.watchdog import on_reader_thread as on_reader_thread

__all__ = ["on_reader_thread"]
