"""Process-group machinery behind ``tensorplay_jax.distributed``: groups, engines, rendezvous.

Private: users import from ``tensorplay_jax.distributed``. Modules:

- ``group``: ``init_process_group``, groups, ranks, barrier; each group owns an engine.
- ``startup``: the backend, the JAX runtime and its coordinator, for ``init_process_group``.
- ``collectives``: the collectives (validate, describe, hand to the engine).
- ``p2p``: send/recv, isend/irecv and ``batch_isend_irecv`` (queued, run in pair order).
- ``work``: the ``Work`` handles and futures of ``async_op=True`` and isend/irecv.
- ``objects``: the object collectives (signed cloudpickle bytes over the collectives).
- ``membership``: rank maps, ``new_subgroups``, ``monitored_barrier``, ``GroupMember``.
- ``engine``: the ``Engine`` protocol the engines implement.
- ``engine_shm`` / ``shared_memory``: the same-host engine and its segments and barrier.
- ``engine_xla``: compiled XLA programs over the group's mesh.
- ``descriptor``: per-call descriptors compared across ranks before data moves.
- ``kv``: the signed key-value store of JAX's coordination service.
- ``coordinator``: the coordination service's own process (started by ``kv``).
"""
