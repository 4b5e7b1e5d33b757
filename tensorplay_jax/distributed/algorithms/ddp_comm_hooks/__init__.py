"""DDP communication hooks (``DistributedDataParallel.register_comm_hook``), as torch has
them: ``default_hooks`` (all-reduce, float16 / bfloat16 compression and wrappers),
``powerSGD_hook`` (low-rank compression), ``quantization_hooks`` (8-bit),
``debugging_hooks`` (no communication) and ``post_localSGD_hook``; and
``register_ddp_comm_hook`` with the :class:`DDPCommHookType` names.

Example (every rank)::

    from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import (
        DDPCommHookType, register_ddp_comm_hook)
    register_ddp_comm_hook(DDPCommHookType.FP16_COMPRESS, model)
"""

from __future__ import annotations

import enum
import functools
from typing import Any

from tensorplay_jax.distributed.algorithms.ddp_comm_hooks import (
    debugging_hooks,
    default_hooks,
    post_localSGD_hook,
    powerSGD_hook,
    quantization_hooks,
)

# torch's short names for the hook modules.
debugging, default, powerSGD, quantization = (
    debugging_hooks,
    default_hooks,
    powerSGD_hook,
    quantization_hooks,
)

__all__ = [
    "DDPCommHookType",
    "debugging_hooks",
    "default_hooks",
    "post_localSGD_hook",
    "powerSGD_hook",
    "quantization_hooks",
    "register_ddp_comm_hook",
]


def _ddp_comm_hook_wrapper(comm_hook: Any, model: Any, state: Any) -> None:
    model.register_comm_hook(state, comm_hook)


def _powerSGD_comm_hook_wrapper(
    comm_hook: Any,
    model: Any,
    state: Any,
    matrix_approximation_rank: int,
    start_powerSGD_iter: int = 1_000,
) -> None:
    """Register a PowerSGD hook whose state is made here; ``state`` is its process group."""
    powerSGD_state = powerSGD.PowerSGDState(
        process_group=state,
        matrix_approximation_rank=matrix_approximation_rank,
        start_powerSGD_iter=start_powerSGD_iter,
    )
    model.register_comm_hook(powerSGD_state, comm_hook)


def _hook(comm_hook: Any) -> Any:
    return enum.member(functools.partial(_ddp_comm_hook_wrapper, comm_hook=comm_hook))


def _power_sgd(comm_hook: Any, rank: int) -> Any:
    return enum.member(
        functools.partial(
            _powerSGD_comm_hook_wrapper, comm_hook=comm_hook, matrix_approximation_rank=rank
        )
    )


class DDPCommHookType(enum.Enum):
    """The hooks of ``ddp_comm_hooks`` by name; each value registers its hook on a model:
    ``DDPCommHookType.ALLREDUCE.value(model=model, state=process_group)``.

    The PowerSGD members make a :class:`~.powerSGD_hook.PowerSGDState` over ``state``
    (a process group) with their rank and ``start_powerSGD_iter=1000``.
    """

    ALLREDUCE = _hook(default.allreduce_hook)
    FP16_COMPRESS = _hook(default.fp16_compress_hook)
    BF16_COMPRESS = _hook(default.bf16_compress_hook)
    QUANTIZE_PER_TENSOR = _hook(quantization.quantization_pertensor_hook)
    QUANTIZE_PER_CHANNEL = _hook(quantization.quantization_perchannel_hook)
    POWER_SGD = _power_sgd(powerSGD.powerSGD_hook, 1)
    POWER_SGD_RANK2 = _power_sgd(powerSGD.powerSGD_hook, 2)
    BATCHED_POWER_SGD = _power_sgd(powerSGD.batched_powerSGD_hook, 1)
    BATCHED_POWER_SGD_RANK2 = _power_sgd(powerSGD.batched_powerSGD_hook, 2)
    NOOP = _hook(debugging.noop_hook)


def register_ddp_comm_hook(comm_hook_type: DDPCommHookType, model: Any, state: Any = None) -> None:
    """Register the hook ``comm_hook_type`` names on the DDP ``model``, with ``state`` (a
    process group; None: the default group).

    Example::

        register_ddp_comm_hook(DDPCommHookType.POWER_SGD, ddp_model)
    """
    comm_hook_type.value(model=model, state=state)
