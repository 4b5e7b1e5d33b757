"""Temporary: the names ``rpc/_local.py`` imports from here; they live in ``runtime.settings``.

TODO(issue 12, lead): delete this file once ``rpc/_local.py`` (being split by
another branch) imports ``tensorplay_jax.runtime.settings`` instead.
"""

from tensorplay_jax.runtime.settings import RPC_INLINE_CHECK_S as RPC_INLINE_CHECK_S
from tensorplay_jax.runtime.settings import RPC_INLINE_DETACH_S as RPC_INLINE_DETACH_S
from tensorplay_jax.runtime.settings import RPC_INLINE_PARK_S as RPC_INLINE_PARK_S
from tensorplay_jax.runtime.settings import RPC_SPIN_US as RPC_SPIN_US
