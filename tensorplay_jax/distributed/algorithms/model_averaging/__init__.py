"""Model averaging, as tensorplay's ``torch.distributed.algorithms.model_averaging``:
``averagers`` (``PeriodicModelAverager``), ``hierarchical_model_averager``
(``HierarchicalModelAverager``) and ``utils`` (``average_parameters``).

Post-local SGD trains with DDP's gradient averaging for a warm-up, then with local
steps (gradients averaged within a subgroup, ``ddp_comm_hooks.post_localSGD_hook``)
and the parameters averaged across the whole group every ``period`` steps
(``PeriodicModelAverager``, or ``distributed.optim.PostLocalSGDOptimizer``).
"""

from tensorplay_jax.distributed.algorithms.model_averaging import averagers as averagers
from tensorplay_jax.distributed.algorithms.model_averaging import (
    hierarchical_model_averager as hierarchical_model_averager,
)
from tensorplay_jax.distributed.algorithms.model_averaging import utils as utils

__all__ = ["averagers", "hierarchical_model_averager", "utils"]
