"""The wire format in one process: values, arrays, functions, exceptions, registry, framing."""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tensorplay_jax.rpc import _codec, _framing

Point = collections.namedtuple("Point", "x y")


@dataclasses.dataclass(frozen=True)
class Config:
    lr: float
    layers: tuple
    arr: np.ndarray


def _roundtrip(v):
    return _codec.decode(_codec.encode(v))


JAX_DTYPES = [
    jnp.bfloat16, jnp.float16, jnp.float32, jnp.int8, jnp.int16, jnp.int32, jnp.uint8,
    jnp.uint32, jnp.bool_, jnp.complex64, jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.int4, jnp.uint4,
]  # fmt: skip


@pytest.mark.parametrize("dtype", JAX_DTYPES, ids=lambda d: jnp.dtype(d).name)
def test_jax_arrays_every_dtype(dtype):
    x = jnp.asarray(np.arange(12).reshape(3, 4) % 3, dtype=dtype)
    y = _roundtrip(x)
    assert isinstance(y, jax.Array) and y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(
        np.asarray(y).astype(np.complex64), np.asarray(x).astype(np.complex64)
    )


@pytest.mark.parametrize(
    "x",
    [
        np.float64(3.5) * np.ones(()),  # 0-d
        np.arange(24, dtype=np.float64).reshape(4, 6)[:, ::2],  # non-contiguous
        np.arange(24, dtype=np.int64).reshape(4, 6).T,  # Fortran order
        np.arange(5, dtype=">i4"),  # non-native byte order
        np.zeros((0, 3), np.float32),  # empty
        jnp.ones((), jnp.bfloat16),  # 0-d jax
    ],
    ids=["0d", "strided", "transposed", "bigendian", "empty", "0d-jax-bf16"],
)
def test_array_layouts(x):
    y = _roundtrip(x)
    assert type(y) is type(x) or isinstance(y, jax.Array)
    assert y.shape == x.shape
    np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    if isinstance(y, np.ndarray):
        assert y.flags.writeable


def test_arrays_are_not_copied_when_encoded():
    x = np.arange(1 << 16, dtype=np.float32)
    enc = _codec.encode({"a": x, "b": [jnp.asarray(x)]})
    assert len(enc.buffers) == 2
    assert np.shares_memory(np.frombuffer(enc.buffers[0], np.float32), x)
    assert all(not isinstance(b, bytes) for b in enc.buffers)
    assert len(enc.header) < 200  # the header holds only dtype/shape/index


def test_python_values_keep_their_types():
    v = {
        "none": None, "t": True, "i": -7, "big": 2**80, "f": 1.5, "c": 1 + 2j, "s": "héllo",
        "b": b"\x00\xff", "l": [1, (2, 3)], "tup": (1, [2], ()),
        "set": {1, 2}, "fs": frozenset({"a"}), "nt": Point(1, (2,)), 5: "int key",
        "np_scalar": np.float32(2.5), "dc": Config(0.1, (2, 3), np.ones(2)),
    }  # fmt: skip
    y = _roundtrip(v)
    for k in v:
        if k == "dc":
            continue
        assert type(y[k]) is type(v[k]), k
        assert y[k] == v[k], k
    assert isinstance(y["dc"], Config) and y["dc"].layers == (2, 3)
    assert _roundtrip(bytearray(b"xy")) == b"xy"  # bytes-like values arrive as bytes
    np.testing.assert_array_equal(y["dc"].arr, np.ones(2))


def test_functions_by_reference_and_by_value():
    hdr = _codec.encode(np.add).header
    assert b"numpy" in hdr and len(hdr) < 60  # by reference
    k = 3
    closure = lambda x: x + k
    f = _roundtrip(closure)
    assert f(1) == 4  # by value (cloudpickle)
    assert _roundtrip(functools.partial(max, 0))(-5) == 0
    assert _roundtrip(Point) is Point


def test_exceptions_rebuild_with_type_or_become_runtime_error():
    e = _roundtrip(KeyError("missing"))
    assert isinstance(e, KeyError) and "missing" in str(e)

    class Local(Exception):
        def __init__(self, a, b):
            super().__init__(a, b)

    e = _codec.rebuild_exception(_codec.exception_record(Local(1, 2)))
    assert isinstance(e, RuntimeError) and "Local" in str(e)
    e = _codec.rebuild_exception(["no.such.module", "Err", "boom"])
    assert isinstance(e, RuntimeError) and "no.such.module.Err" in str(e) and "boom" in str(e)


def test_register_type_extension_point():
    class Temp:
        def __init__(self, deg, data):
            self.deg, self.data = deg, data

    _codec.register_type(Temp, lambda t: (t.deg, t.data), lambda v: Temp(*v), name="test.Temp")
    y = _roundtrip([Temp(3, np.arange(4))])
    assert y[0].deg == 3 and y[0].data.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="already registered"):
        _codec.register_type(Point, str, str, name="test.Temp")


def test_tracers_are_refused_with_a_clear_error():
    def f(x):
        _codec.encode(x)
        return x

    with pytest.raises(TypeError, match="cannot send a traced JAX value"):
        jax.jit(f)(1.0)


@pytest.mark.parametrize("data", [b"", b"\xc1", b"\xc7\x05\x01abc", b"\x93\x01"])
def test_malformed_headers_raise_decode_error(data):
    with pytest.raises(_codec.DecodeError):
        _codec.decode(data, [])


def _drain(outbox, n):
    return list(itertools.islice(outbox.packets(), n))


def test_framing_batches_small_and_chunks_large():
    ob = _framing.Outbox(small_limit=100, chunk_bytes=64)
    big = np.arange(50, dtype=np.float32)  # 200 bytes -> BEGIN + 4 chunks
    ob.put(b"e1", b"h1", [memoryview(np.ones(3, np.uint8))])
    ob.put(b"e2", b"h2", [])
    ob.put(b"e3", b"h3", [memoryview(big.view(np.uint8))])
    packets = _drain(ob, 6)
    assert packets[0][0] == 1  # both small messages in one batch
    inbox = _framing.Inbox()
    got = [m for p in packets for m in inbox.feed(p)]
    assert [bytes(m.envelope) for m in got] == [b"e1", b"e2", b"e3"]
    np.testing.assert_array_equal(np.frombuffer(got[2].buffers[0], np.float32), big)
    assert got[2].buffers[0].ctypes.data % 64 == 0  # aligned for zero-copy device_put


@pytest.mark.parametrize("packet", [b"", b"\x09", b"\x01\xff\xff\x00\x00", b"\x03" + b"\0" * 21])
def test_framing_rejects_malformed_packets_and_stays_usable(packet):
    inbox = _framing.Inbox()
    with pytest.raises(_framing.FramingError):
        inbox.feed(packet)
    ob = _framing.Outbox()
    ob.put(b"ok", b"h", [])
    assert [bytes(m.envelope) for m in inbox.feed(_drain(ob, 1)[0])] == [b"ok"]


def test_registering_a_type_keeps_earlier_registrations():
    # A later registration (e.g. the autograd plugin's Tensor, loaded on first RPC) must not
    # drop the entries of classes registered before it without subclasses=True.
    from tensorplay_jax.rpc import WorkerInfo

    info = WorkerInfo("w7", 7)
    assert _roundtrip(info) == info

    class Late:
        def __init__(self, v):
            self.v = v

    _codec.register_type(Late, lambda x: x.v, Late, name="test.Late")
    assert _roundtrip(info) == info
    assert type(_roundtrip(info)) is WorkerInfo
    assert _roundtrip(Late(3)).v == 3


def test_a_function_resolves_while_another_thread_imports_its_module(tmp_path, monkeypatch):
    """Two reader threads decoding the first calls to a module's functions at once:
    the second must wait for the first's import, not see the module half-initialized."""
    import sys
    import threading
    import time

    from tensorplay_jax.rpc import _objref

    (tmp_path / "tpj_slow_module.py").write_text(
        "import time\ntime.sleep(0.3)\n\ndef f():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tpj_slow_module", raising=False)
    results, errors = [], []

    def resolve():
        try:
            results.append(_objref.resolve("tpj_slow_module", "f")())
        except Exception as e:
            errors.append(e)

    first = threading.Thread(target=resolve)
    first.start()
    time.sleep(0.05)  # the first thread is inside the module's body now
    second = threading.Thread(target=resolve)
    second.start()
    first.join(10)
    second.join(10)
    assert errors == [] and results == [1, 1]
