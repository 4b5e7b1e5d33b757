"""``PostLocalSGDOptimizer``: a local optimizer's step, then a model averager's.

tensorplay's ``torch.distributed.optim.PostLocalSGDOptimizer``: each ``step()`` runs
the wrapped optimizer, then the averager (``PeriodicModelAverager``: the parameters
averaged across its group every ``period`` steps after the warm-up). Its state dict
is the wrapped optimizer's with the averager's step count as ``"step"``, so a run
restored from a checkpoint does not warm up again.

Example (every rank; DDP with ``post_localSGD_hook`` and the same warm-up)::

    opt = PostLocalSGDOptimizer(
        optim=tp.optim.SGD(model.parameters(), lr=0.01),
        averager=averagers.PeriodicModelAverager(period=4, warmup_steps=100),
    )
    opt.zero_grad(); loss.backward(); opt.step()
"""

from __future__ import annotations

import warnings
from typing import Any

from tensorplay_jax.distributed.algorithms.model_averaging.averagers import ModelAverager
from tensorplay_jax.optim import Optimizer

__all__ = ["PostLocalSGDOptimizer"]


class PostLocalSGDOptimizer(Optimizer):
    """Run ``optim`` at every step and ``averager`` after it.

    Args:
      optim: the local optimizer (its ``param_groups`` are this optimizer's).
      averager: the model averager (``PeriodicModelAverager``).
    """

    def __init__(self, optim: Optimizer, averager: ModelAverager) -> None:
        self.optim = optim
        self.param_groups = optim.param_groups
        self.averager = averager

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optim.defaults

    @property
    def state(self) -> Any:
        """The wrapped optimizer's state."""
        return self.optim.state

    def __repr__(self) -> str:
        return repr(self.optim)

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state dict, with the averager's step count as ``"step"``."""
        out = self.optim.state_dict()
        out["step"] = self.averager.step
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the wrapped optimizer's state and the averager's step count (0, with a
        warning, when ``state_dict`` has none)."""
        self.optim.load_state_dict(state_dict)
        if "step" in state_dict:
            self.averager.step = state_dict["step"]
        else:
            warnings.warn(
                "Loaded state dict does not contain a step counter for an averager. Setting "
                "step counter to 0.",
                UserWarning,
                stacklevel=2,
            )
            self.averager.step = 0

    def step(self) -> None:  # type: ignore[override]
        """The wrapped optimizer's step, then the averager's (on ``param_groups``)."""
        self.optim.step()
        self.averager.average_parameters(params=self.param_groups)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optim.zero_grad(set_to_none=set_to_none)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optim.add_param_group(param_group)
