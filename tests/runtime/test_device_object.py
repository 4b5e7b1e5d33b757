"""``tp.device`` as torch's device object, accepted wherever device names are; ``tp.accelerator``
and ``tp.cuda`` from JAX's devices."""

from __future__ import annotations

import pickle

import jax
import pytest

import tensorplay_jax as tp

SPECS = [("cuda:1",), ("cuda", 1), ("cpu",), ("cpu", 0), ("cuda",)]


@pytest.mark.parametrize("args", SPECS, ids=lambda a: repr(a))
def test_device_reads_names_as_torch_does(args: tuple) -> None:
    torch = pytest.importorskip("torch", reason="torch.device is the oracle")
    ours, theirs = tp.device(*args), torch.device(*args)
    assert (repr(ours), str(ours), ours.type, ours.index) == (
        repr(theirs),
        str(theirs),
        theirs.type,
        theirs.index,
    )


def test_device_equality_and_hash_follow_type_and_index() -> None:
    assert tp.device("cuda:1") == tp.device("cuda", 1)
    assert tp.device("cpu") != tp.device("cpu", 0)  # as torch: no index is not index 0
    assert len({tp.device("cuda:1"), tp.device("cuda", 1), tp.device(tp.device("cuda:1"))}) == 1
    assert pickle.loads(pickle.dumps(tp.device("cuda", 2))) == tp.device("cuda:2")


def test_device_rejects_bad_names_and_indexes() -> None:
    with pytest.raises(ValueError, match="unknown device type 'foo'"):
        tp.device("foo")
    with pytest.raises(ValueError, match="has an index already"):
        tp.device("cuda:1", 2)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="needs a process without accelerator")
def test_an_integer_device_needs_an_accelerator() -> None:
    with pytest.raises(RuntimeError, match="cannot access accelerator device when none"):
        tp.device(0)


def test_factories_tensor_to_and_module_to_take_a_device_object() -> None:
    cpu1 = jax.local_devices(backend="cpu")[1]  # conftest gives 8 CPU devices
    x = tp.ones(2, device=tp.device("cpu", 1))
    assert x.device == cpu1
    assert tp.zeros(2).to(tp.device("cpu:1")).device == cpu1
    layer = tp.nn.Linear(2, 2).to(tp.device("cpu", 1))
    assert layer.weight.device == cpu1
    with pytest.raises(RuntimeError, match="device 'cuda:7' is not available here"):
        tp.ones(1).to(tp.device("cuda", 7))


def test_accelerator_answers_from_jax_devices() -> None:
    backend = jax.default_backend()
    expected = None if backend == "cpu" else ("tpu" if backend == "tpu" else "cuda")
    assert tp.accelerator.is_available() == (expected is not None)
    current = tp.accelerator.current_accelerator()
    assert (None if current is None else current.type) == expected
    assert tp.accelerator.device_count() == (0 if expected is None else jax.local_device_count())


def test_cuda_counts_jax_gpus() -> None:
    try:
        gpus = len(jax.devices("gpu"))
    except RuntimeError:
        gpus = 0
    assert tp.cuda.device_count() == gpus
    assert tp.cuda.is_available() == (gpus > 0)
