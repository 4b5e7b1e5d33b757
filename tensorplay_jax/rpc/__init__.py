"""RPC with the tensorplay API: init_rpc, rpc_sync, rpc_async, remote, RRef, shutdown.

Also re-exported as ``tensorplay_jax.distributed.rpc``; why it is built this way:
``docs/design.md`` section 3. Workers reach each other through an ordered list of
transports (``rpc.transports``: the same-host socket with shared memory, a plain TCP
link, gRPC, which carries TLS and is the fallback); ``register_transport`` adds
one. Extension points for other packages (distributed autograd):

- ``register_type(cls, encode, decode)``: carry your own classes on the wire
  (``_codec``);
- ``call_metadata(...)``, ``current_call_metadata()``, ``current_caller()``:
  a metadata dict travels with every request (``rpc_*``, ``remote``,
  ``to_here``) and reply (``_call_hooks``);
- ``register_hooks(RpcHooks())``: observe or rewrite outgoing arguments and
  incoming results on both sides (``_call_hooks``).

Other folders of the package take RPC internals from ``tensorplay_jax.rpc.internal``
only; the RPC layer imports none of them.
"""

from tensorplay_jax.rpc import api as api
from tensorplay_jax.rpc import backend_registry as backend_registry
from tensorplay_jax.rpc import constants as constants
from tensorplay_jax.rpc import functions as functions
from tensorplay_jax.rpc import transports as transports
from tensorplay_jax.rpc._call_hooks import CallInfo as CallInfo
from tensorplay_jax.rpc._call_hooks import RpcHooks as RpcHooks
from tensorplay_jax.rpc._call_hooks import call_metadata as call_metadata
from tensorplay_jax.rpc._call_hooks import current_call_metadata as current_call_metadata
from tensorplay_jax.rpc._call_hooks import current_caller as current_caller
from tensorplay_jax.rpc._call_hooks import register_hooks as register_hooks
from tensorplay_jax.rpc._codec import register_type as register_type
from tensorplay_jax.rpc._errors import MixedGroupError as MixedGroupError
from tensorplay_jax.rpc._errors import RpcError as RpcError
from tensorplay_jax.rpc._errors import RpcNotInitializedError as RpcNotInitializedError
from tensorplay_jax.rpc._errors import RpcPeerError as RpcPeerError
from tensorplay_jax.rpc._errors import RpcTimeoutError as RpcTimeoutError
from tensorplay_jax.rpc._errors import UnknownWorkerError as UnknownWorkerError
from tensorplay_jax.rpc._errors import WorkerNameError as WorkerNameError
from tensorplay_jax.rpc._futures import Future as Future
from tensorplay_jax.rpc._futures import wait_all as wait_all
from tensorplay_jax.rpc._rref import RRef as RRef
from tensorplay_jax.rpc._types import GrpcRpcBackendOptions as GrpcRpcBackendOptions
from tensorplay_jax.rpc._types import RpcBackendOptions as RpcBackendOptions
from tensorplay_jax.rpc._types import TensorPipeRpcBackendOptions as TensorPipeRpcBackendOptions
from tensorplay_jax.rpc._types import WorkerInfo as WorkerInfo
from tensorplay_jax.rpc.api import _get_debug_info as _get_debug_info
from tensorplay_jax.rpc.api import _rref_context_get_debug_info as _rref_context_get_debug_info
from tensorplay_jax.rpc.api import _set_rpc_timeout as _set_rpc_timeout
from tensorplay_jax.rpc.api import get_debug_info as get_debug_info
from tensorplay_jax.rpc.api import get_rpc_timeout as get_rpc_timeout
from tensorplay_jax.rpc.api import get_worker_info as get_worker_info
from tensorplay_jax.rpc.api import get_worker_infos as get_worker_infos
from tensorplay_jax.rpc.api import init_rpc as init_rpc
from tensorplay_jax.rpc.api import is_available as is_available
from tensorplay_jax.rpc.api import is_initialized as is_initialized
from tensorplay_jax.rpc.api import remote as remote
from tensorplay_jax.rpc.api import rpc_async as rpc_async
from tensorplay_jax.rpc.api import rpc_sync as rpc_sync
from tensorplay_jax.rpc.api import shutdown as shutdown
from tensorplay_jax.rpc.backend_registry import BackendType as BackendType
from tensorplay_jax.runtime.launch import spawn as spawn

__all__ = [
    "BackendType",
    "CallInfo",
    "Future",
    "GrpcRpcBackendOptions",
    "RRef",
    "RpcBackendOptions",
    "RpcError",
    "RpcHooks",
    "RpcNotInitializedError",
    "RpcPeerError",
    "RpcTimeoutError",
    "TensorPipeRpcBackendOptions",
    "MixedGroupError",
    "UnknownWorkerError",
    "WorkerInfo",
    "WorkerNameError",
    "call_metadata",
    "current_call_metadata",
    "current_caller",
    "functions",
    "register_hooks",
    "register_type",
    "spawn",
    "transports",
    "wait_all",
    *api.__all__,  # the public functions of ``rpc.api``
]
