"""``tp.save`` / ``tp.load``: Tensors, state dicts, nested containers, files and buffers;
``weights_only`` refuses what is not data; ``map_location`` places Tensors."""

from __future__ import annotations

import io
import pickle
from collections import OrderedDict

import jax
import numpy as np
import pytest

import tensorplay_jax as tp


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    tp.save(obj, buf)
    buf.seek(0)
    return tp.load(buf, **load_kwargs)


def test_tensor_keeps_value_dtype_and_requires_grad():
    t = tp.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    out = _roundtrip(t)
    assert isinstance(out, tp.Tensor) and out.requires_grad and out.is_leaf
    np.testing.assert_array_equal(out.numpy(), t.detach().numpy())
    i = _roundtrip(tp.tensor([1, 2], dtype=tp.int32))
    assert i.dtype == np.int32


def test_nested_containers_round_trip():
    obj = {"a": [tp.ones(2), (3, "x", tp.zeros(1))], "b": {"c": 1.5, "d": None}}
    out = _roundtrip(obj)
    assert out["a"][1][:2] == (3, "x") and out["b"] == {"c": 1.5, "d": None}
    np.testing.assert_array_equal(out["a"][0].numpy(), np.ones(2))
    np.testing.assert_array_equal(out["a"][1][2].numpy(), np.zeros(1))


def test_module_state_dict_round_trips_into_a_new_module(tmp_path):
    tp.manual_seed(0)
    net = tp.nn.Sequential(tp.nn.Linear(3, 4), tp.nn.ReLU(), tp.nn.Linear(4, 2))
    path = tmp_path / "net.pt"
    tp.save(net.state_dict(), path)
    sd = tp.load(path)
    assert isinstance(sd, OrderedDict) and list(sd) == list(net.state_dict())
    other = tp.nn.Sequential(tp.nn.Linear(3, 4), tp.nn.ReLU(), tp.nn.Linear(4, 2))
    other.load_state_dict(sd)
    x = tp.randn(5, 3)
    np.testing.assert_allclose(other(x).detach().numpy(), net(x).detach().numpy())


def test_path_as_str(tmp_path):
    path = str(tmp_path / "t.pt")
    tp.save([tp.ones(2)], path)
    np.testing.assert_array_equal(tp.load(path)[0].numpy(), np.ones(2))


def test_bare_jax_array_loads_as_a_jax_array():
    out = _roundtrip({"w": jax.numpy.arange(3.0)})
    assert isinstance(out["w"], jax.Array)
    np.testing.assert_array_equal(np.asarray(out["w"]), [0.0, 1.0, 2.0])


class _NotData:
    pass


def test_weights_only_refuses_other_classes_and_false_loads_them():
    buf = io.BytesIO()
    tp.save({"obj": _NotData()}, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match=r"Weights only load failed.*_NotData"):
        tp.load(buf)
    buf.seek(0)
    assert isinstance(tp.load(buf, weights_only=False)["obj"], _NotData)


def test_whole_module_needs_weights_only_false():
    net = tp.nn.Linear(2, 2)
    buf = io.BytesIO()
    tp.save(net, buf)
    buf.seek(0)
    with pytest.raises(pickle.UnpicklingError, match="weights_only=False"):
        tp.load(buf)
    buf.seek(0)
    back = tp.load(buf, weights_only=False)
    np.testing.assert_array_equal(back.weight.detach().numpy(), net.weight.detach().numpy())


def test_map_location_places_tensors():
    cpu = jax.devices("cpu")[1]
    out = _roundtrip({"t": tp.ones(2)}, map_location=cpu)
    assert out["t"].value.devices() == {cpu}
    assert _roundtrip(tp.ones(2), map_location={"cuda:0": "cpu"}).shape == (2,)


def test_torch_zip_archive_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"torch\.save archive"):
        tp.load(io.BytesIO(b"PK\x03\x04rest"))
