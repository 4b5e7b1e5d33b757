"""``tensorplay_jax.utils.data``: torch's ``torch.utils.data`` for map-style and iterable
datasets, loaded in the calling process.

What it owns
------------
* Datasets (``_dataset``): ``Dataset``, ``IterableDataset``, ``TensorDataset``,
  ``Subset``, ``ConcatDataset`` and ``random_split``.
* Samplers (``_sampler``): ``Sampler``, ``SequentialSampler``, ``RandomSampler``,
  ``SubsetRandomSampler``, ``BatchSampler``; ``distributed.DistributedSampler``, which
  gives each rank of a data-parallel job its share.
* ``DataLoader`` (``_loader``) and ``default_collate`` / ``default_convert``
  (``_collate``), which turn samples into batched Tensors as torch's do.

Shuffles draw from tensorplay_jax's random state (``tp.manual_seed``) or a
``tp.Generator``: reproducible, and the same on every rank for one seed, but not the
orders torch's generator gives (``docs/porting.md``).

Example:
    >>> import tensorplay_jax as tp
    >>> from tensorplay_jax.utils.data import DataLoader, TensorDataset
    >>> ds = TensorDataset(tp.arange(6.0).reshape(3, 2), tp.tensor([0, 1, 0]))
    >>> x, y = next(iter(DataLoader(ds, batch_size=2)))
    >>> x.shape, y.tolist()
    ((2, 2), [0, 1])
"""

from tensorplay_jax.utils.data import distributed as distributed
from tensorplay_jax.utils.data._collate import default_collate as default_collate
from tensorplay_jax.utils.data._collate import default_convert as default_convert
from tensorplay_jax.utils.data._dataset import ConcatDataset as ConcatDataset
from tensorplay_jax.utils.data._dataset import Dataset as Dataset
from tensorplay_jax.utils.data._dataset import IterableDataset as IterableDataset
from tensorplay_jax.utils.data._dataset import Subset as Subset
from tensorplay_jax.utils.data._dataset import TensorDataset as TensorDataset
from tensorplay_jax.utils.data._dataset import random_split as random_split
from tensorplay_jax.utils.data._loader import DataLoader as DataLoader
from tensorplay_jax.utils.data._sampler import BatchSampler as BatchSampler
from tensorplay_jax.utils.data._sampler import RandomSampler as RandomSampler
from tensorplay_jax.utils.data._sampler import Sampler as Sampler
from tensorplay_jax.utils.data._sampler import SequentialSampler as SequentialSampler
from tensorplay_jax.utils.data._sampler import SubsetRandomSampler as SubsetRandomSampler
from tensorplay_jax.utils.data.distributed import DistributedSampler as DistributedSampler

__all__ = [
    "BatchSampler",
    "ConcatDataset",
    "DataLoader",
    "Dataset",
    "DistributedSampler",
    "IterableDataset",
    "RandomSampler",
    "Sampler",
    "SequentialSampler",
    "Subset",
    "SubsetRandomSampler",
    "TensorDataset",
    "default_collate",
    "default_convert",
    "distributed",
    "random_split",
]
