"""``tensorplay_jax.distributed.rpc``: the tensorplay-shaped name of :mod:`tensorplay_jax.rpc`."""

import sys as _sys

from tensorplay_jax.rpc import *  # noqa: F403
from tensorplay_jax.rpc import __all__ as __all__
from tensorplay_jax.rpc import api as api
from tensorplay_jax.rpc import backend_registry as backend_registry
from tensorplay_jax.rpc import constants as constants

# tensorplay's module name, which ported code imports or patches
# (``import ...distributed.rpc.api as api``): the same module object.
_sys.modules[f"{__name__}.api"] = api
_sys.modules[f"{__name__}.constants"] = constants
_sys.modules[f"{__name__}.backend_registry"] = backend_registry
# tensorplay's private helpers that its tests and some programs call (leading
# underscores as tensorplay spells them; see docs/porting.md).
_delete_all_user_and_unforked_owner_rrefs = api._delete_all_user_and_unforked_owner_rrefs
_get_debug_info = api._get_debug_info
_rref_context_get_debug_info = api._rref_context_get_debug_info
_set_rpc_timeout = api._set_rpc_timeout
