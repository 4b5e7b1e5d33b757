"""The built-in engines, registered from this one table as a plug-in is (``engine.py``).

Group engines (``register_engine``): ``engine="auto"`` takes the applicable one
of the highest priority. Pair engines (``register_pair_engine``): what runs
``send``/``recv`` between two ranks, chosen the same way. A new built-in engine
is one module plus one line here; a user's engine is registered the same way,
from the user's code.
"""

from __future__ import annotations

from tensorplay_jax.process_group import _engine_shm, _engine_xla
from tensorplay_jax.process_group._engine_shm import ShmEngine
from tensorplay_jax.process_group._engine_tcp import TcpEngine
from tensorplay_jax.process_group._engine_xla import XlaEngine
from tensorplay_jax.process_group._pair import HostPair
from tensorplay_jax.process_group.engine import register_engine, register_pair_engine

__all__: list[str] = []

# Group engines: a gloo group on one host moves data in shared memory, a gloo group
# across hosts over TCP, any group (nccl, or named) as XLA programs.
register_engine(
    "shm", ShmEngine, applies=_engine_shm._fits, requires=_engine_shm._refusal, priority=20
)
register_engine("tcp", TcpEngine, applies=lambda spec: spec.backend == "gloo", priority=10)
register_engine("xla", XlaEngine, applies=lambda spec: True, requires=_engine_xla._refusal)

# Pair engines: an XLA program over the pair where JAX's multi-process runtime runs
# (every member has a device), else a broadcast over the pair's host engine.
register_pair_engine(
    "xla",
    XlaEngine,
    applies=lambda spec: None not in spec.devices,
    requires=_engine_xla._refusal,
    priority=10,
)
register_pair_engine("host", HostPair, applies=lambda spec: True)
