"""Functions the sparse distributed autograd tests run on other workers (importable there)."""

from __future__ import annotations

from typing import Any

import tensorplay_jax as tp
import tensorplay_jax.distributed.autograd as dist_autograd

I = [[0, 1, 1], [2, 0, 2]]  # noqa: E741  (torch's tests' build_sparse_tensor)
V = [3.2, 4.1, 5.3]


def build_sparse(requires_grad: bool = True, coalesce: bool = False) -> tp.Tensor:
    x = tp.sparse_coo_tensor(I, V, (3, 3), requires_grad=requires_grad)
    return x.coalesce() if coalesce else x


def add(a: Any, b: Any) -> Any:
    return a + b


def scaled(a: Any, k: float) -> Any:
    return a * k


KEPT: dict[str, Any] = {}


def make_kept() -> Any:
    """A sparse leaf that lives here; the caller gets an RRef to it."""
    KEPT["x"] = build_sparse()
    return KEPT["x"]


def kept_gradient(context_id: int) -> Any:
    """This worker's context gradient of the kept leaf (a SparseTensor goes back)."""
    return dist_autograd.get_gradients(context_id)[KEPT["x"]]


def use_rref(rref: Any, other: Any) -> Any:
    return rref.local_value() + other


def make_embedding() -> Any:
    """A sparse-gradient table kept here (rows ``arange(15).reshape(5, 3) / 10``); its weight."""
    emb = tp.nn.Embedding(5, 3, sparse=True)
    emb.weight.data = tp.arange(15.0).reshape(5, 3) / 10
    KEPT["emb"] = emb
    return emb.weight


def lookup(idx: Any) -> Any:
    return KEPT["emb"](idx)


def table() -> Any:
    return KEPT["emb"].weight.detach()


def table_gradient(context_id: int) -> Any:
    return dist_autograd.get_gradients(context_id)[KEPT["emb"].weight]
