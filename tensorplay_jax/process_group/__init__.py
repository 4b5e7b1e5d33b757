"""Process groups: ``init_process_group``, groups, their collectives, the engines that move data.

Users import these names from ``tensorplay_jax.distributed``, which re-exports this
package's ``__all__``. Two public modules are the extension points:
``engine`` (the ``Engine`` protocol, ``GroupSpec`` and ``register_engine``: an
engine is one module plus one registration) and ``host`` (what engines that move
data in host memory share). The private modules:

- ``_group``: ``init_process_group``, groups, ranks, barrier; each group owns an engine.
- ``_startup``: the backend, the JAX runtime and its coordinator, for ``init_process_group``.
- ``_collectives``: the collectives (validate, describe, hand to the engine).
- ``_p2p``: send/recv, isend/irecv and ``batch_isend_irecv`` (queued, run in pair order).
- ``_work``: the ``Work`` handles and futures of ``async_op=True`` and isend/irecv.
- ``_objects``: the object collectives (signed cloudpickle bytes over the collectives).
- ``_membership``: rank maps, ``new_subgroups`` (and ``_by_enumeration``),
  ``monitored_barrier``, ``GroupMember``.
- ``_backend``: ``Backend`` and which backends run here (``is_gloo_available``, ...).
- ``_debug_level``: ``DebugLevel`` (``TORCH_DISTRIBUTED_DEBUG``).
- ``_errors``: tensorplay's ``DistError`` classes (a store timeout is ``DistStoreError``).
- ``_launch_env``: ``get_node_local_rank``, ``is_torchelastic_launched``.
- ``_store`` / ``_tcp_store`` / ``_file_store``: the key-value stores (``HashStore``,
  ``PrefixStore``, ``TCPStore`` and its authenticated server, ``FileStore``).
- ``_engine_shm`` / ``_shared_memory``: the same-host engine and its segments and barrier.
- ``_engine_tcp`` / ``_tcp_mesh``: the across-hosts engine and its authenticated mesh.
- ``_engine_xla``: compiled XLA programs over the group's mesh (and over a pair, for send/recv).
- ``_pair``: send/recv over a pair's host engine, for a group without JAX's runtime.
- ``_builtin_engines``: the one table that registers the built-in engines.
- ``_descriptor``: per-call descriptors compared across ranks before data moves.
- ``_kv``: the signed key-value store of JAX's coordination service.
- ``_coordinator``: the coordination service's own process (started by ``_kv``).

This package needs only ``runtime`` and ``collectives.reduce_op`` below it.

Example:
  >>> import tensorplay_jax.process_group as pg
  >>> pg.is_initialized()
  False
"""

from tensorplay_jax.collectives.reduce_op import ReduceOp as ReduceOp
from tensorplay_jax.collectives.reduce_op import supports_complex as supports_complex

# _builtin_engines: the one table that registers the built-in engines (``engine.py``).
from tensorplay_jax.process_group import (
    _backend,
    _builtin_engines,  # noqa: F401
    _collectives,
    _debug_level,
    _errors,
    _file_store,
    _group,
    _launch_env,
    _membership,
    _objects,
    _p2p,
    _store,
    _tcp_store,
)
from tensorplay_jax.process_group._backend import Backend as Backend
from tensorplay_jax.process_group._backend import (
    get_default_backend_for_device as get_default_backend_for_device,
)
from tensorplay_jax.process_group._backend import is_available as is_available
from tensorplay_jax.process_group._backend import is_backend_available as is_backend_available
from tensorplay_jax.process_group._backend import is_gloo_available as is_gloo_available
from tensorplay_jax.process_group._backend import is_mpi_available as is_mpi_available
from tensorplay_jax.process_group._backend import is_nccl_available as is_nccl_available
from tensorplay_jax.process_group._backend import is_ucc_available as is_ucc_available
from tensorplay_jax.process_group._collectives import all_gather as all_gather
from tensorplay_jax.process_group._collectives import (
    all_gather_into_tensor as all_gather_into_tensor,
)
from tensorplay_jax.process_group._collectives import all_reduce as all_reduce
from tensorplay_jax.process_group._collectives import all_to_all as all_to_all
from tensorplay_jax.process_group._collectives import all_to_all_single as all_to_all_single
from tensorplay_jax.process_group._collectives import broadcast as broadcast
from tensorplay_jax.process_group._collectives import gather as gather
from tensorplay_jax.process_group._collectives import recorded_shapes as recorded_shapes
from tensorplay_jax.process_group._collectives import reduce as reduce
from tensorplay_jax.process_group._collectives import reduce_scatter as reduce_scatter
from tensorplay_jax.process_group._collectives import (
    reduce_scatter_tensor as reduce_scatter_tensor,
)
from tensorplay_jax.process_group._collectives import scatter as scatter
from tensorplay_jax.process_group._debug_level import DebugLevel as DebugLevel
from tensorplay_jax.process_group._debug_level import get_debug_level as get_debug_level
from tensorplay_jax.process_group._debug_level import set_debug_level as set_debug_level
from tensorplay_jax.process_group._debug_level import (
    set_debug_level_from_env as set_debug_level_from_env,
)
from tensorplay_jax.process_group._errors import DistBackendError as DistBackendError
from tensorplay_jax.process_group._errors import DistError as DistError
from tensorplay_jax.process_group._errors import DistNetworkError as DistNetworkError
from tensorplay_jax.process_group._errors import DistStoreError as DistStoreError
from tensorplay_jax.process_group._file_store import FileStore as FileStore
from tensorplay_jax.process_group._group import NotAMember as NotAMember
from tensorplay_jax.process_group._group import ProcessGroup as ProcessGroup
from tensorplay_jax.process_group._group import barrier as barrier
from tensorplay_jax.process_group._group import default_pg_timeout as default_pg_timeout
from tensorplay_jax.process_group._group import destroy_process_group as destroy_process_group
from tensorplay_jax.process_group._group import get_backend as get_backend
from tensorplay_jax.process_group._group import get_pg_count as get_pg_count
from tensorplay_jax.process_group._group import get_rank as get_rank
from tensorplay_jax.process_group._group import get_world_size as get_world_size
from tensorplay_jax.process_group._group import init_process_group as init_process_group
from tensorplay_jax.process_group._group import is_initialized as is_initialized
from tensorplay_jax.process_group._group import members_only as members_only
from tensorplay_jax.process_group._group import new_group as new_group
from tensorplay_jax.process_group._launch_env import get_node_local_rank as get_node_local_rank
from tensorplay_jax.process_group._launch_env import (
    is_torchelastic_launched as is_torchelastic_launched,
)
from tensorplay_jax.process_group._membership import GroupMember as GroupMember
from tensorplay_jax.process_group._membership import get_global_rank as get_global_rank
from tensorplay_jax.process_group._membership import get_group_rank as get_group_rank
from tensorplay_jax.process_group._membership import (
    get_process_group_ranks as get_process_group_ranks,
)
from tensorplay_jax.process_group._membership import group as group
from tensorplay_jax.process_group._membership import monitored_barrier as monitored_barrier
from tensorplay_jax.process_group._membership import new_subgroups as new_subgroups
from tensorplay_jax.process_group._membership import (
    new_subgroups_by_enumeration as new_subgroups_by_enumeration,
)
from tensorplay_jax.process_group._objects import all_gather_object as all_gather_object
from tensorplay_jax.process_group._objects import broadcast_object_list as broadcast_object_list
from tensorplay_jax.process_group._objects import gather_object as gather_object
from tensorplay_jax.process_group._objects import recv_object_list as recv_object_list
from tensorplay_jax.process_group._objects import scatter_object_list as scatter_object_list
from tensorplay_jax.process_group._objects import send_object_list as send_object_list
from tensorplay_jax.process_group._p2p import P2POp as P2POp
from tensorplay_jax.process_group._p2p import batch_isend_irecv as batch_isend_irecv
from tensorplay_jax.process_group._p2p import irecv as irecv
from tensorplay_jax.process_group._p2p import isend as isend
from tensorplay_jax.process_group._p2p import recv as recv
from tensorplay_jax.process_group._p2p import send as send
from tensorplay_jax.process_group._store import HashStore as HashStore
from tensorplay_jax.process_group._store import PrefixStore as PrefixStore
from tensorplay_jax.process_group._store import QueueEmptyError as QueueEmptyError
from tensorplay_jax.process_group._store import Store as Store
from tensorplay_jax.process_group._tcp_store import TCPStore as TCPStore
from tensorplay_jax.process_group._work import Future as Future
from tensorplay_jax.process_group._work import Work as Work

# The names are listed once, in the ``__all__`` of the modules they come from.
__all__ = [
    *_group.__all__,
    "ReduceOp",
    *_collectives.__all__,
    *_p2p.__all__,
    *_objects.__all__,
    *_membership.__all__,
    *_backend.__all__,
    *_debug_level.__all__,
    *_errors.__all__,
    *_launch_env.__all__,
    *_store.__all__,
    *_tcp_store.__all__,
    *_file_store.__all__,
    "supports_complex",
    "Future",
    "Work",
]
