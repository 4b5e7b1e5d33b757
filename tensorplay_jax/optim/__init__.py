"""``tensorplay_jax.optim``: torch's local optimizers (``torch.optim``), rules as optax transforms.

``SGD``, ``Adam``, ``AdamW``, ``RMSprop``, ``Adagrad``, ``Adadelta``, ``Rprop``, ``Adamax``
and ``SparseAdam`` take the arguments of their torch namesakes and follow torch's documented
algorithms; each is an ``Optimizer`` (param groups, ``step``, ``zero_grad``, ``state_dict``)
over an update rule that is an ``optax.GradientTransformation`` (``sgd_rule``,
``adam_rule``, ...), usable on its own in a JAX program. The same classes drive
``DistributedOptimizer(optim.SGD, param_rrefs, lr=...)`` on each parameter owner.
``optim.lr_scheduler`` holds tensorplay's learning-rate schedules (``StepLR``, ...).

What it may import: JAX, optax, ``tensorplay_jax.runtime``, and the public names
of ``tensorplay_jax.autograd`` and ``tensorplay_jax.tensors``.

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax import optim
    >>> model = tp.nn.Linear(3, 1)
    >>> opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    >>> x, y = tp.randn(8, 3), tp.randn(8, 1)
    >>> for _ in range(3):
    ...     opt.zero_grad()
    ...     loss = ((model(x) - y) ** 2).mean()
    ...     loss.backward()
    ...     opt.step()
"""

from tensorplay_jax.optim import lr_scheduler as lr_scheduler
from tensorplay_jax.optim._adadelta import Adadelta as Adadelta
from tensorplay_jax.optim._adadelta import adadelta_rule as adadelta_rule
from tensorplay_jax.optim._adagrad import Adagrad as Adagrad
from tensorplay_jax.optim._adagrad import adagrad_rule as adagrad_rule
from tensorplay_jax.optim._adam import Adam as Adam
from tensorplay_jax.optim._adam import AdamW as AdamW
from tensorplay_jax.optim._adam import adam_rule as adam_rule
from tensorplay_jax.optim._adamax import Adamax as Adamax
from tensorplay_jax.optim._adamax import adamax_rule as adamax_rule
from tensorplay_jax.optim._optimizer import Optimizer as Optimizer
from tensorplay_jax.optim._rmsprop import RMSprop as RMSprop
from tensorplay_jax.optim._rmsprop import rmsprop_rule as rmsprop_rule
from tensorplay_jax.optim._rprop import Rprop as Rprop
from tensorplay_jax.optim._rprop import rprop_rule as rprop_rule
from tensorplay_jax.optim._sgd import SGD as SGD
from tensorplay_jax.optim._sgd import sgd_rule as sgd_rule
from tensorplay_jax.optim._sparse import SparseAdam as SparseAdam

__all__ = [
    "SGD",
    "Adadelta",
    "Adagrad",
    "Adam",
    "AdamW",
    "Adamax",
    "Optimizer",
    "RMSprop",
    "Rprop",
    "SparseAdam",
    "adadelta_rule",
    "adagrad_rule",
    "adam_rule",
    "adamax_rule",
    "lr_scheduler",
    "rmsprop_rule",
    "rprop_rule",
    "sgd_rule",
]
