"""``tensorplay_jax.nn.utils``: torch's ``torch.nn.utils`` for training loops: gradient
clipping (``clip_grad``) and parameters as one vector (``convert_parameters``).

Example:
    >>> import tensorplay_jax as tp
    >>> p = tp.nn.Parameter(tp.zeros(2))
    >>> p.grad = tp.tensor([3.0, 4.0])
    >>> tp.nn.utils.clip_grad_norm_([p], max_norm=1.0)
    tensor(5.)
    >>> [round(v, 4) for v in p.grad.tolist()]
    [0.6, 0.8]
"""

from tensorplay_jax.nn.utils.clip_grad import clip_grad_norm_ as clip_grad_norm_
from tensorplay_jax.nn.utils.clip_grad import clip_grad_value_ as clip_grad_value_
from tensorplay_jax.nn.utils.clip_grad import get_total_norm as get_total_norm
from tensorplay_jax.nn.utils.convert_parameters import (
    parameters_to_vector as parameters_to_vector,
)
from tensorplay_jax.nn.utils.convert_parameters import (
    vector_to_parameters as vector_to_parameters,
)

__all__ = [
    "clip_grad_norm_",
    "clip_grad_value_",
    "get_total_norm",
    "parameters_to_vector",
    "vector_to_parameters",
]
