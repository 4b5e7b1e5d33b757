"""PowerSGD gradient compression (Vogels et al., 2019) as DDP communication hooks.

Each gradient matrix ``M`` (a parameter's gradient viewed as ``shape[0] x rest``) is
sent as two thin factors instead: ``P = M Q`` is all-reduced and orthogonalized, then
``Q = M^T P`` is all-reduced, and every rank takes ``P Q^T`` as the averaged
gradient. With error feedback, what compression lost on this rank is added to its
next gradient; with warm start, each step's ``Q`` starts from the last one's.

``powerSGD_hook`` compresses layer by layer (matrices too small to gain are
all-reduced whole); ``batched_powerSGD_hook`` compresses the whole bucket as one
square matrix. Both all-reduce plainly for the first ``start_powerSGD_iter``
iterations. The hyper-parameters, the state's fields, which matrices are compressed,
their order and the seeds of the random initial ``Q`` are torch's; the initial ``Q``
values are NumPy's standard normal draws from those seeds (see docs/porting.md).

Example (every rank)::

    state = PowerSGDState(process_group=None, matrix_approximation_rank=1,
                          start_powerSGD_iter=10)
    ddp_model.register_comm_hook(state, powerSGD_hook)
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import tensorplay_jax.process_group as dist
from tensorplay_jax.distributed.algorithms.ddp_comm_hooks.default_hooks import (
    _reduced,
    allreduce_hook,
)
from tensorplay_jax.futures import Future
from tensorplay_jax.runtime import flat as flat_buffer
from tensorplay_jax.tensors import Tensor

if TYPE_CHECKING:
    from tensorplay_jax.distributed.parallel import GradBucket

__all__ = ["PowerSGDState", "batched_powerSGD_hook", "powerSGD_hook"]

logger = logging.getLogger(__name__)

_HALF = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))


def _orthogonalize(matrices: jax.Array, epsilon: float = 0.0) -> jax.Array:
    """Orthonormal columns for each matrix of a batch ``(b, n, r)``, ``r <= n``.

    Gram-Schmidt for ranks up to 2 and for half precision (where QR is not
    available), else a reduced QR factorization's ``Q``, as torch chooses.
    ``epsilon`` is added to each column's norm (0: a zero column becomes NaN).

    Example:
        >>> import jax.numpy as jnp
        >>> q = _orthogonalize(jnp.array([[[3.0], [4.0]]]))
        >>> q.ravel().tolist()
        [0.6000000238418579, 0.800000011920929]
    """
    rank = matrices.shape[2]
    if rank > 2 and matrices.dtype not in _HALF:
        return jnp.linalg.qr(matrices, mode="reduced")[0]
    for i in range(rank):
        col = matrices[:, :, i : i + 1]
        col = col / (jnp.linalg.norm(col, axis=1, keepdims=True) + epsilon)
        matrices = matrices.at[:, :, i : i + 1].set(col)
        if i + 1 < rank:
            rest = matrices[:, :, i + 1 :]
            rest = rest - jnp.sum(col * rest, axis=1, keepdims=True) * col
            matrices = matrices.at[:, :, i + 1 :].set(rest)
    return matrices


def _should_compress(
    num_rows: int, num_cols: int, matrix_approximation_rank: int, min_compression_rate: float
) -> tuple[bool, int, int]:
    """Whether an ``num_rows x num_cols`` matrix gains from compression at this rank:
    ``(worth it, elements before, elements after)``.

    Example:
        >>> _should_compress(16, 8, 1, 2)
        (True, 128, 24)
    """
    uncompressed = num_rows * num_cols
    compressed = (num_rows + num_cols) * matrix_approximation_rank
    return compressed * min_compression_rate < uncompressed, uncompressed, compressed


class PowerSGDState:
    """PowerSGD's hyper-parameters and its state across steps (one for all buckets).

    Args:
        process_group: the group to average over (None: the default group).
        matrix_approximation_rank: the rank of ``P`` and ``Q`` (1 to 4 is typical; the
            lower, the stronger the compression).
        start_powerSGD_iter: iterations all-reduced plainly before compression starts
            (at least 2 with error feedback or warm start).
        min_compression_rate: compress a matrix only if it shrinks more than this.
        use_error_feedback: add each rank's compression error to its next gradient.
        warm_start: start each step's ``Q`` from the last step's.
        orthogonalization_epsilon: added to each column's norm (avoids NaN for a zero
            column).
        random_seed: seeds the generator of the initial ``Q`` (the same on every rank).
        compression_stats_logging_frequency: iterations between logged statistics.
        batch_tensors_with_same_shape: compress same-shaped matrices as one batch.

    Pickling keeps everything but the process group; an unpickled state averages
    over the default group.

    Example:
        >>> st = PowerSGDState(process_group=None, start_powerSGD_iter=10)
        >>> st.matrix_approximation_rank, st.iter, st.compression_stats()
        (1, 0, (0, 0, 0))
    """

    __slots__ = (
        "batch_tensors_with_same_shape",
        "compression_stats_logging_frequency",
        "error_dict",
        "iter",
        "matrix_approximation_rank",
        "min_compression_rate",
        "next_stats_report",
        "orthogonalization_epsilon",
        "p_memory_dict",
        "process_group",
        "q_memory_dict",
        "rng",
        "start_powerSGD_iter",
        "total_numel_after_compression",
        "total_numel_before_compression",
        "use_error_feedback",
        "warm_start",
    )

    def __init__(
        self,
        process_group: Any,
        matrix_approximation_rank: int = 1,
        start_powerSGD_iter: int = 1_000,
        min_compression_rate: float = 2,
        use_error_feedback: bool = True,
        warm_start: bool = True,
        orthogonalization_epsilon: float = 0,
        random_seed: int = 0,
        compression_stats_logging_frequency: int = 10_000,
        batch_tensors_with_same_shape: bool = False,
    ) -> None:
        logger.info(
            "PowerSGD config: matrix_approximation_rank = %s; start_powerSGD_iter = %s; "
            "min_compression_rate = %s; orthogonalization_epsilon = %s; use_error_feedback "
            "= %s; warm_start = %s; random_seed = %s; compression_stats_logging_frequency = "
            "%s; batch_tensors_with_same_shape = %s",
            matrix_approximation_rank,
            start_powerSGD_iter,
            min_compression_rate,
            orthogonalization_epsilon,
            use_error_feedback,
            warm_start,
            random_seed,
            compression_stats_logging_frequency,
            batch_tensors_with_same_shape,
        )
        if (use_error_feedback or warm_start) and start_powerSGD_iter <= 1:
            raise ValueError(
                "Expect `start_powerSGD_iter` > 1 if `use_error_feedback` or `warm_start` is "
                "enabled, because PowerSGD can only be applied after the first two iterations "
                "in DDP."
            )
        self.process_group = process_group
        self.matrix_approximation_rank = matrix_approximation_rank
        self.start_powerSGD_iter = start_powerSGD_iter
        self.min_compression_rate = min_compression_rate
        self.use_error_feedback = use_error_feedback
        self.warm_start = warm_start
        self.orthogonalization_epsilon = orthogonalization_epsilon
        # One seed per initialisation of Q, drawn in the same order on every rank.
        self.rng = np.random.RandomState(random_seed)
        self.error_dict: dict[int, jax.Array] = {}
        self.p_memory_dict: dict[int, jax.Array] = {}
        self.q_memory_dict: dict[int, jax.Array] = {}
        self.iter = 0
        self.total_numel_before_compression = 0
        self.total_numel_after_compression = 0
        self.compression_stats_logging_frequency = max(1, compression_stats_logging_frequency)
        self.next_stats_report = 0
        self.batch_tensors_with_same_shape = batch_tensors_with_same_shape

    def __getstate__(self) -> dict[str, Any]:
        """Every field but ``process_group``, which does not pickle."""
        logger.warning("NOTE: Process group is not serializable and excluded from a saved state.")
        return {s: getattr(self, s) for s in self.__slots__ if s != "process_group"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The fields of ``state``, over the default group."""
        self.process_group = dist.group.WORLD
        logger.warning(
            "NOTE: Process group will be set to a default group (i.e. the world size). If a "
            "different group is desired, please set `self.process_group` after PowerSGD "
            "state is loaded."
        )
        for slot, value in state.items():
            setattr(self, slot, value)

    def maybe_increase_iter(self, bucket: GradBucket) -> None:
        """Count one iteration at a backward pass's last bucket."""
        if bucket.is_last():
            self.iter += 1
        if self.iter == self.start_powerSGD_iter:
            logger.info("Start to apply PowerSGD after %s iterations.", self.iter)

    def compression_stats(self) -> tuple[float, int, int]:
        """``(rate, elements before compression, elements after)`` over every step so far
        (rate 0 before the first compressed step)."""
        after = self.total_numel_after_compression
        rate = self.total_numel_before_compression / after if after > 0 else 0
        return rate, self.total_numel_before_compression, after


def _report_compression_stats(bucket: GradBucket, state: PowerSGDState) -> None:
    if bucket.is_last() and state.iter >= state.next_stats_report:
        rate, before, after = state.compression_stats()
        logger.info(
            "Compression stats: iter %s, total before compression %s, total after "
            "compression %s, rate %s",
            state.iter,
            before,
            after,
            rate,
        )
        state.next_stats_report = state.iter + state.compression_stats_logging_frequency


def _initial_qs(state: PowerSGDState, shapes: list[tuple[int, ...]], dtype: Any) -> list[Any]:
    """Fresh random ``Q``s: one seed from the state's generator, then standard normal draws
    in order (the same on every rank)."""
    draw = np.random.RandomState(state.rng.randint(1_000_000_000))
    return [jnp.asarray(draw.standard_normal(s), dtype) for s in shapes]


@dataclasses.dataclass(frozen=True)
class _Plan:
    """How one bucket is compressed: which gradients, batched how (all static)."""

    shapes: tuple[tuple[int, ...], ...]  # each gradient's shape, in the buffer's order
    uncompressed: tuple[int, ...]  # gradients all-reduced whole
    batches: tuple[tuple[tuple[int, ...], int, int, int], ...]  # (members, n, m, rank)

    def p_shapes(self) -> list[tuple[int, int, int]]:
        return [(len(ix), n, r) for ix, n, _, r in self.batches]

    def q_shapes(self) -> list[tuple[int, int, int]]:
        return [(len(ix), m, r) for ix, _, m, r in self.batches]


def _plan(shapes: list[tuple[int, ...]], state: PowerSGDState) -> _Plan:
    """Which gradients to compress, and the batches (by matrix shape, in first-seen order),
    counting the compression statistics as torch does."""
    uncompressed: list[int] = []
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, shape in enumerate(shapes):
        n = shape[0] if shape else 1
        m = math.prod(shape[1:]) if shape else 1
        rank = min(n, m, state.matrix_approximation_rank)
        worth, before, after = _should_compress(n, m, rank, state.min_compression_rate)
        state.total_numel_before_compression += before
        if worth:
            by_shape.setdefault((n, m), []).append(i)
            state.total_numel_after_compression += after
        else:
            uncompressed.append(i)
            state.total_numel_after_compression += before
    batches = []
    for (n, m), members in by_shape.items():
        rank = min(n, m, state.matrix_approximation_rank)
        groups = [members] if state.batch_tensors_with_same_shape else [[i] for i in members]
        batches.extend((tuple(g), n, m, rank) for g in groups)
    return _Plan(tuple(shapes), tuple(uncompressed), tuple(batches))


def _matrices(plan: _Plan, grads: list[jax.Array]) -> list[jax.Array]:
    return [jnp.stack([grads[i].reshape(n, m) for i in ix]) for ix, n, m, _ in plan.batches]


def _transposed_times(matrices: jax.Array, thin: jax.Array) -> jax.Array:
    """``M^T P`` for each pair of a batch, computed as ``(P^T M)^T``: XLA on a CPU
    transposes the big operand in memory for the first form, the thin one for the second."""
    return jnp.swapaxes(jnp.matmul(jnp.swapaxes(thin, -1, -2), matrices), -1, -2)


# The last step's error is dead once added (its buffer becomes the local one), and so is
# the local buffer once decompressed: both are donated, which saves allocating (and
# faulting in) two bucket-sized buffers per step.
@functools.partial(jax.jit, static_argnames=("plan", "epsilon"), donate_argnums=(1,))
def _compute_ps(
    buf: jax.Array, error: jax.Array | None, qs: list[jax.Array], *, plan: _Plan, epsilon: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The local buffer (``buf`` plus the last step's ``error``, if any), its uncompressed
    gradients (flat), and ``P = M Q`` for each batch (flat), each ``Q`` orthogonalized
    first."""
    local = buf if error is None else buf + error
    grads = flat_buffer.split(local, plan.shapes)
    qs = [_orthogonalize(q, epsilon) for q in qs]
    ps = [jnp.matmul(mat, q) for mat, q in zip(_matrices(plan, grads), qs, strict=True)]
    whole = [grads[i] for i in plan.uncompressed]
    return local, flat_buffer.flatten(whole, buf.dtype), flat_buffer.flatten(ps, buf.dtype)


@functools.partial(jax.jit, static_argnames=("plan", "epsilon"))
def _compute_qs(
    local: jax.Array, p_flat: jax.Array, *, plan: _Plan, epsilon: float
) -> tuple[jax.Array, jax.Array]:
    """The summed ``P``s orthogonalized (flat), and ``Q = M^T P`` for each batch (flat)."""
    grads = flat_buffer.split(local, plan.shapes)
    ps = [_orthogonalize(p, epsilon) for p in flat_buffer.split(p_flat, plan.p_shapes())]
    mats = _matrices(plan, grads)
    qs = [_transposed_times(mat, p) for mat, p in zip(mats, ps, strict=True)]
    return flat_buffer.flatten(ps, local.dtype), flat_buffer.flatten(qs, local.dtype)


@functools.partial(jax.jit, static_argnames=("plan", "keep_error"), donate_argnums=(0,))
def _decompress(
    local: jax.Array,
    whole: jax.Array,
    p_flat: jax.Array,
    q_flat: jax.Array,
    *,
    plan: _Plan,
    keep_error: bool,
) -> tuple[jax.Array, jax.Array | None]:
    """The averaged buffer (``P Q^T`` for the compressed gradients, ``whole``, averaged,
    for the others), and what it lost against ``local`` if ``keep_error``.

    Each piece is written into a copy of ``local`` at its place: XLA on a CPU runs a
    concatenation of matrix products far less steadily than slice updates.
    """
    offsets = np.cumsum([0] + [math.prod(s) for s in plan.shapes]).tolist()
    out = local
    pieces = flat_buffer.split(whole, [plan.shapes[i] for i in plan.uncompressed])
    for i, piece in zip(plan.uncompressed, pieces, strict=True):
        out = lax.dynamic_update_slice(out, piece.ravel(), (offsets[i],))
    ps = flat_buffer.split(p_flat, plan.p_shapes())
    qs = flat_buffer.split(q_flat, plan.q_shapes())
    for (ix, _, _, _), p, q in zip(plan.batches, ps, qs, strict=True):
        approx = jnp.matmul(p, jnp.swapaxes(q, 1, 2))
        for k, i in enumerate(ix):
            out = lax.dynamic_update_slice(out, approx[k].ravel(), (offsets[i],))
    return out, (local - out if keep_error else None)


def _error(state: PowerSGDState, index: int, like: jax.Array) -> jax.Array | None:
    """This rank's last compression error of the bucket, taken out of the state until the
    step puts the new one back (zeros at first; None without error feedback)."""
    if not state.use_error_feedback:
        return None
    if index not in state.error_dict:
        logger.info("A zero tensor of length %s that represents local error is created.", like.size)
        return jnp.zeros_like(like)
    return state.error_dict.pop(index)


def _finish(state: PowerSGDState, bucket: GradBucket, error: jax.Array | None) -> None:
    """Keep the compression error, drop the factors without warm start, count the step."""
    if error is not None:
        state.error_dict[bucket.index()] = error
    if not state.warm_start:
        state.p_memory_dict.clear()
        state.q_memory_dict.clear()
    state.maybe_increase_iter(bucket)


def powerSGD_hook(state: PowerSGDState, bucket: GradBucket) -> Future[Tensor]:
    """Average the bucket with PowerSGD, layer by layer.

    Each gradient, viewed as a matrix ``shape[0] x rest``, is compressed to rank
    ``min(n, m, matrix_approximation_rank)`` when that shrinks it more than
    ``min_compression_rate``; the others (biases, small matrices) are averaged whole
    in one all-reduce. The compressed ones cost two all-reduces (of every ``P``, then of
    every ``Q``). Plain all-reduce for the first ``start_powerSGD_iter`` iterations.

    Args:
        state: the :class:`PowerSGDState` (hyper-parameters, error feedback, factors).
        bucket: the bucket of gradients.

    Returns:
        A completed Future of the averaged flat buffer.
    """
    if state.iter < state.start_powerSGD_iter:
        state.maybe_increase_iter(bucket)
        return allreduce_hook(state.process_group, bucket)
    group, index, buf = state.process_group, bucket.index(), bucket.buffer().value
    world = dist.get_world_size(group)
    plan = _plan([tuple(p.shape) for p in bucket.parameters()], state)
    _report_compression_stats(bucket, state)
    eps = float(state.orthogonalization_epsilon)
    fresh = not state.warm_start or index not in state.p_memory_dict
    if fresh:
        if state.warm_start:
            logger.info(
                "Allocating contiguous memory of length %s for Ps, and of length %s for Qs, "
                "respectively.",
                sum(math.prod(s) for s in plan.p_shapes()),
                sum(math.prod(s) for s in plan.q_shapes()),
            )
        qs = _initial_qs(state, plan.q_shapes(), buf.dtype)
    else:
        qs = flat_buffer.split(state.q_memory_dict[index], plan.q_shapes())
    local, whole, p_flat = _compute_ps(buf, _error(state, index, buf), qs, plan=plan, epsilon=eps)
    if plan.uncompressed:
        whole = jnp.asarray(dist.all_reduce(whole, group=group)) / world
    if plan.batches:
        p_sum = jnp.asarray(dist.all_reduce(p_flat, group=group))
        p_flat, q_flat = _compute_qs(local, p_sum, plan=plan, epsilon=eps)
        q_flat = jnp.asarray(dist.all_reduce(q_flat, group=group)) / world
    else:
        q_flat = jnp.zeros(0, buf.dtype)
    state.p_memory_dict[index] = p_flat
    state.q_memory_dict[index] = q_flat
    out, error = _decompress(
        local, whole, p_flat, q_flat, plan=plan, keep_error=state.use_error_feedback
    )
    _finish(state, bucket, error)
    return _reduced(out)


@functools.partial(jax.jit, static_argnames=("epsilon",))
def _batched_p(matrix: jax.Array, q: jax.Array, *, epsilon: float) -> tuple[jax.Array, jax.Array]:
    q = _orthogonalize(q[None], epsilon)[0]
    return matrix @ q, q


@functools.partial(jax.jit, static_argnames=("epsilon",))
def _batched_q(matrix: jax.Array, p: jax.Array, *, epsilon: float) -> tuple[jax.Array, jax.Array]:
    p = _orthogonalize(p[None], epsilon)[0]
    return p, _transposed_times(matrix, p)


def batched_powerSGD_hook(state: PowerSGDState, bucket: GradBucket) -> Future[Tensor]:
    """Average the bucket with PowerSGD applied to the whole flat buffer at once.

    The buffer, padded with zeros to the next square, is one ``side x side`` matrix
    compressed to rank ``min(side, matrix_approximation_rank)``: faster than
    :func:`powerSGD_hook` (two small all-reduces per bucket), usually less accurate
    beyond rank 1. Plain all-reduce for the first ``start_powerSGD_iter`` iterations.

    Args:
        state: the :class:`PowerSGDState`.
        bucket: the bucket of gradients.

    Returns:
        A completed Future of the averaged flat buffer.
    """
    if state.iter < state.start_powerSGD_iter:
        state.maybe_increase_iter(bucket)
        return allreduce_hook(state.process_group, bucket)
    group, index, buf = state.process_group, bucket.index(), bucket.buffer().value
    world = dist.get_world_size(group)
    total = buf.shape[0]
    side = math.ceil(math.sqrt(total))
    rank = min(side, state.matrix_approximation_rank)
    state.total_numel_before_compression += total
    state.total_numel_after_compression += side * state.matrix_approximation_rank * 2
    _report_compression_stats(bucket, state)
    padded = jnp.pad(buf, (0, side * side - total))
    error = _error(state, index, padded)
    if error is not None:
        padded = padded + error
    matrix = padded.reshape(side, side)
    eps = float(state.orthogonalization_epsilon)
    if not state.warm_start or index not in state.p_memory_dict:
        if state.warm_start:
            logger.info(
                "Initializing low-rank tensors P and Q, each of which has a shape of %s x %s.",
                side,
                rank,
            )
        (q,) = _initial_qs(state, [(side, rank)], buf.dtype)
    else:
        q = state.q_memory_dict[index]
    p, q = _batched_p(matrix, q, epsilon=eps)
    p = jnp.asarray(dist.all_reduce(p, group=group))
    p, q = _batched_q(matrix, p, epsilon=eps)
    q = jnp.asarray(dist.all_reduce(q, group=group)) / world
    state.p_memory_dict[index] = p
    state.q_memory_dict[index] = q
    out = (p @ q.T).ravel()
    _finish(state, bucket, None if error is None else padded - out)
    return _reduced(out[:total])
