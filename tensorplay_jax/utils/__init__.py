"""``tensorplay_jax.utils``: torch's ``torch.utils`` that training loops use, ``data``
(datasets, samplers, ``DataLoader`` and the ``DistributedSampler`` of data-parallel jobs).

Example:
    >>> import tensorplay_jax as tp
    >>> loader = tp.utils.data.DataLoader(tp.utils.data.TensorDataset(tp.arange(5)), batch_size=2)
    >>> [b[0].tolist() for b in loader]
    [[0, 1], [2, 3], [4]]
"""

from tensorplay_jax.utils import data as data

__all__ = ["data"]
