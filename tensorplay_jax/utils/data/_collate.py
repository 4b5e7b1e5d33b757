"""``default_collate`` (a list of samples to one batch) and ``default_convert`` (one sample's
arrays to Tensors), torch's rules: Tensors and NumPy arrays are stacked, numbers become
a Tensor, strings stay as given, mappings, named tuples and sequences are collated field by
field (a tuple's fields come back as a list, as torch's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tensorplay_jax.tensors import Tensor, stack, tensor

__all__ = ["default_collate", "default_convert"]


def default_collate(batch: Sequence[Any]) -> Any:
    """One batch from a list of samples of the same structure.

    Example:
        >>> import tensorplay_jax as tp
        >>> x, y = default_collate([(tp.ones(2), 0), (tp.zeros(2), 1)])
        >>> x.shape, y.tolist()
        ((2, 2), [0, 1])
    """
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch))
    if isinstance(elem, np.ndarray):
        if elem.dtype.kind in "OSUV":
            raise TypeError(
                f"default_collate: batch must contain numbers or arrays; got {elem.dtype}"
            )
        return tensor(np.stack(batch))
    if isinstance(elem, np.generic):
        return tensor(np.asarray(batch))
    if isinstance(elem, bool | int | float):
        return tensor(list(batch))
    if isinstance(elem, str | bytes):
        return batch  # as given: a list at the top, a tuple inside a sample, as torch's
    if isinstance(elem, Mapping):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a named tuple
        return type(elem)(*(default_collate(s) for s in zip(*batch, strict=True)))
    if isinstance(elem, Sequence):
        if any(len(s) != len(elem) for s in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(samples) for samples in zip(*batch, strict=True)]
    raise TypeError(
        "default_collate: batch must contain Tensors, NumPy arrays, numbers, dicts or lists; "
        f"found {type(elem)}"
    )


def default_convert(data: Any) -> Any:
    """``data`` with NumPy arrays (of numbers) turned into Tensors, through containers."""
    if isinstance(data, np.ndarray) and data.dtype.kind not in "OSUV":
        return tensor(data)
    if isinstance(data, Mapping):
        return {key: default_convert(v) for key, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(v) for v in data))
    if isinstance(data, tuple):
        return [default_convert(v) for v in data]
    if isinstance(data, list):
        return [default_convert(v) for v in data]
    return data
