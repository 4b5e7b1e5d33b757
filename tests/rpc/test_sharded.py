"""Sharded ``jax.Array``s across RPC: each shard its own buffer, the sharding rebuilt by the maps.

One job of two workers on the same-host transport (``test_sharded_tcp.py``:
the same over TCP, for a round trip and the memory bounds). ``w0`` (this
process) maps its ``cpu:1..4`` to ``w1``'s ``cpu:4..7`` (``cpu:k`` to ``cpu:k+3``),
and ``w1`` maps them back.
So an array sharded over a mesh of ``w0``'s ``cpu:1..4`` must arrive on ``w1``
sharded by the same ``PartitionSpec`` over the mesh of the same shape and axis
names made of ``cpu:4..7``, and come back on ``cpu:1..4``: the expected devices
follow from the maps by hand; the expected values are NumPy's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import tensorplay_jax as tp
from tensorplay_jax import rpc
from tensorplay_jax.rpc import _codec
from tests._worker import expect
from tests.rpc import _sharded_targets as S
from tests.rpc._jobs import rpc_job

MAPS = {
    "w0": {"device_maps": {"w1": {f"cpu:{k}": f"cpu:{k + 3}" for k in range(1, 5)}}},
    "w1": {"device_maps": {"w0": {f"cpu:{k + 3}": f"cpu:{k}" for k in range(1, 5)}}},
}
MIB = 1 << 20


@pytest.fixture(scope="module")
def job():
    with rpc_job(2, "local", rpc_options=MAPS) as w:
        yield w


def mesh(*shape: int, axes: tuple[str, ...] = ("x",), first: int = 1) -> Mesh:
    """A mesh of this process's ``cpu:first`` ... in ``shape``."""
    n = int(np.prod(shape))
    return Mesh(np.array(jax.devices("cpu")[first : first + n]).reshape(shape), axes)


def sharded(values: np.ndarray, m: Mesh, spec: P) -> jax.Array:
    return jax.device_put(values, NamedSharding(m, spec))


def mapped(m: Mesh) -> list[str]:
    """The names of ``w1``'s devices that ``m``'s devices map to (``cpu:k`` -> ``cpu:k+3``)."""
    return [f"cpu:{d.id + 3}" for d in m.devices.flat]


def spec_list(spec: P) -> list:
    return [list(p) if isinstance(p, tuple) else p for p in spec]


def values(shape: tuple[int, ...], dtype) -> np.ndarray:
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return (np.arange(n) % 3 == 0).reshape(shape)
    if np.issubdtype(dtype, np.complexfloating):
        return (np.arange(n) + 1j * np.arange(n)[::-1]).astype(dtype).reshape(shape)
    return (np.arange(n) % 100).astype(dtype).reshape(shape)


# mesh shape, axis names, spec, array shape, dtype
CASES = [
    ((4,), ("x",), P("x"), (8,), np.float32),
    ((2,), ("x",), P("x", None), (6, 3), np.int32),
    ((4,), ("x",), P(), (5,), ml_dtypes.bfloat16),  # replicated
    ((2, 2), ("a", "b"), P("a", "b"), (4, 6), np.float16),
    ((2, 2), ("a", "b"), P("a", None), (6, 4), np.int8),  # partially replicated over b
    ((2, 2), ("a", "b"), P(None, "b"), (3, 4), np.bool_),  # odd rows, replicated over a
    ((2, 2), ("a", "b"), P(("a", "b")), (8,), np.complex64),  # two axes on one dimension
    ((2, 2), ("a", "b"), P("b", "a"), (2, 6), np.uint8),
    ((2, 2), ("a", "b"), P("a"), (2, 3), ml_dtypes.float8_e4m3fn),
]
IDS = [f"{'x'.join(map(str, c[0]))}-{c[2]}-{np.dtype(c[4]).name}" for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_sharded_array_round_trips_with_its_sharding(job, case):
    mesh_shape, axes, spec, shape, dtype = case
    m = mesh(*mesh_shape, axes=axes)
    want = values(shape, dtype)
    x = sharded(want, m, spec)
    got, there = rpc.rpc_sync("w1", S.values_and_layout, args=(x,))
    np.testing.assert_array_equal(got, want)
    assert there == {
        "devices": mapped(m),
        "mesh_shape": list(mesh_shape),
        "axes": list(axes),
        "spec": spec_list(spec),
        "dtype": np.dtype(dtype).name,
    }
    back = rpc.rpc_sync("w1", S.echo, args=(x,))
    assert back.sharding == x.sharding  # the same mesh (cpu:1..4), spec and axis names
    np.testing.assert_array_equal(np.asarray(back), want)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_batched_rebuild_gives_what_the_plain_rebuild_gives(case):
    from tensorplay_jax.rpc import _sharded

    mesh_shape, axes, spec, shape, dtype = case
    want = values(shape, dtype)
    x = sharded(want, mesh(*mesh_shape, axes=axes), spec)
    buffers: list = []
    rec = _sharded.sharded_record(x, None, buffers, _codec._host_buffer)
    args = (rec, buffers, _codec._host_array, _codec._device)
    fast, plain = _sharded.rebuild(*args), _sharded.rebuild_plain(*args)
    for y in (fast, plain):
        assert y.sharding == x.sharding and y.dtype == x.dtype
        np.testing.assert_array_equal(np.asarray(y), want)
    got = [(s.device, s.index, s.replica_id, np.asarray(s.data)) for s in fast.addressable_shards]
    ref = [(s.device, s.index, s.replica_id, np.asarray(s.data)) for s in plain.addressable_shards]
    assert [g[:3] for g in got] == [r[:3] for r in ref]
    for g, r in zip(got, ref, strict=True):
        np.testing.assert_array_equal(g[3], r[3])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_rebuild_from_the_kept_plan_gives_what_the_plain_rebuild_gives(case):
    """The decoder keeps what a packed record asks for by its bytes: the second array of a
    sharding (the plan kept) and one whose shards sit later among the buffers (other
    bytes, another plan) come out as the plain rebuild makes them."""
    import msgpack

    from tensorplay_jax.rpc import _sharded

    mesh_shape, axes, spec, shape, dtype = case
    for first, scale in ((0, 1), (0, 2), (3, 3)):
        want = values(shape, dtype) * np.asarray(scale, dtype)
        x = sharded(want, mesh(*mesh_shape, axes=axes), spec)
        buffers: list = [memoryview(b"")] * first
        body = _sharded.sharded_body(x, None, buffers, _codec._host_buffer, msgpack.packb)
        fast = _sharded.rebuild_packed(
            body, buffers, _codec._host_array, _codec._device, msgpack.unpackb
        )
        plain = _sharded.rebuild_plain(
            msgpack.unpackb(body), buffers, _codec._host_array, _codec._device
        )
        assert fast.sharding == plain.sharding == x.sharding
        assert fast.dtype == plain.dtype == x.dtype
        np.testing.assert_array_equal(np.asarray(fast), want)
        np.testing.assert_array_equal(np.asarray(plain), want)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_kept_packed_record_is_the_record_packed(case):
    import msgpack

    from tensorplay_jax.rpc import _sharded

    mesh_shape, axes, spec, shape, dtype = case
    for first in (0, 0, 2):  # made, kept, and at another place among the buffers
        x = sharded(values(shape, dtype), mesh(*mesh_shape, axes=axes), spec)
        fast, plain = [memoryview(b"")] * first, [memoryview(b"")] * first
        body = _sharded.sharded_body(x, None, fast, _codec._host_buffer, msgpack.packb)
        assert body == msgpack.packb(_sharded.sharded_record(x, None, plain, _codec._host_buffer))
        assert [bytes(b) for b in fast] == [bytes(b) for b in plain]


def test_sharded_arrays_held_on_both_sides_stay_correct_while_later_calls_reuse_the_buffers(job):
    """Arrays that alias the transport's received segments (the callee keeps what it got,
    the caller the replies) keep their values while later calls reuse every segment."""
    m = mesh(4)
    n = MIB // 4  # 1 MiB of float32 a call: shared memory, not inline
    replies = {}
    rpc.rpc_sync("w1", S.forget)
    for i in range(12):
        back = rpc.rpc_sync(
            "w1", S.keep_and_echo, args=(sharded(np.full(n, i, np.float32), m, P("x")),)
        )
        if i % 4 == 0:
            replies[i] = back
        del back
    kept = rpc.rpc_sync("w1", S.kept_values)
    assert len(kept) == 12
    for i, v in enumerate(kept):
        np.testing.assert_array_equal(v, np.full(n, i, np.float32))
    for i, y in replies.items():
        assert y.sharding == NamedSharding(m, P("x"))
        np.testing.assert_array_equal(np.asarray(y), np.full(n, i, np.float32))
    rpc.rpc_sync("w1", S.forget)


def test_a_replicated_array_sends_one_copy():
    x = sharded(values((16,), np.float32), mesh(4), P())
    enc = _codec.encode(x)
    assert [b.nbytes for b in enc.buffers] == [64]  # one copy of 16 float32
    y = _codec.decode(enc)
    assert y.sharding == x.sharding


def test_each_distinct_shard_is_its_own_buffer():
    x = sharded(values((4, 6), np.float32), mesh(2, 2, axes=("a", "b")), P("a", None))
    enc = _codec.encode(x)
    assert [b.nbytes for b in enc.buffers] == [48, 48]  # two row blocks of 2 x 6 float32


def test_rpc_async_remote_and_to_here_keep_the_sharding(job):
    m = mesh(4)
    x = sharded(values((8,), np.float32), m, P("x"))
    assert rpc.rpc_async("w1", S.layout, args=(x,)).wait()["devices"] == mapped(m)
    rref = rpc.remote("w1", S.double, args=(x,))
    here = rref.to_here()
    assert here.sharding == x.sharding
    np.testing.assert_array_equal(np.asarray(here), 2 * values((8,), np.float32))


def test_an_rref_proxy_carries_sharded_arrays(job):
    m = mesh(2, 2, axes=("a", "b"))
    x = sharded(values((4, 4), np.float32), m, P("b", "a"))
    rref = rpc.remote("w1", S.Scaler, args=(3.0,))
    assert rref.rpc_sync().layout_of(x)["devices"] == mapped(m)
    y = rref.rpc_async().scale(x).wait()
    assert y.sharding == x.sharding
    np.testing.assert_array_equal(np.asarray(y), 3 * values((4, 4), np.float32))


def test_a_tensor_keeps_its_sharding(job):
    x = sharded(values((8,), np.float32), mesh(4), P("x"))
    back = rpc.rpc_sync("w1", S.double, args=(tp.tensor(x),))
    assert isinstance(back, tp.Tensor) and back.value.sharding == x.sharding
    np.testing.assert_array_equal(np.asarray(back.value), 2 * values((8,), np.float32))


def test_the_callee_sends_by_its_own_map(job):
    there = job.run("w1", S.send_made, "w0", ["cpu:4", "cpu:5", "cpu:6", "cpu:7"], ["a", "b"],
                    [4, 2], ["a", "b"])  # fmt: skip
    assert there["devices"] == ["cpu:1", "cpu:2", "cpu:3", "cpu:4"]  # w1's map: cpu:k+3 -> cpu:k
    assert there["mesh_shape"] == [2, 2] and there["spec"] == ["a", "b"]


def test_a_call_to_this_worker_keeps_the_sharding(job):
    x = sharded(values((8,), np.float32), mesh(4, first=4), P("x"))  # cpu:4..7: no map needed
    back = rpc.rpc_sync("w0", S.echo, args=(x,))
    assert back.sharding == x.sharding


def test_a_mesh_with_an_unmapped_device_is_refused_then_the_next_call_succeeds(job):
    x = sharded(values((4,), np.float32), mesh(2, first=5), P("x"))  # cpu:5, cpu:6: no map
    expect(ValueError, ["'w1'", "cpu:5, cpu:6", "set_device_map('w1', {'cpu:5': <its device>"],
           rpc.rpc_sync, "w1", S.layout, args=(x,))  # fmt: skip
    y = sharded(values((4,), np.float32), mesh(2), P("x"))
    assert rpc.rpc_sync("w1", S.layout, args=(y,))["devices"] == ["cpu:4", "cpu:5"]


def test_a_reply_sharded_outside_the_maps_fails_the_future_then_the_next_call_succeeds(job):
    fut = rpc.rpc_async("w1", S.make_sharded, args=(["cpu:0", "cpu:1"], ["x"], [4], ["x"]))
    expect(ValueError, ["reply to 'w0'", "cpu:0", "set_devices"], fut.wait)
    y = rpc.rpc_sync("w1", S.make_sharded, args=(["cpu:4", "cpu:5"], ["x"], [4], ["x"]))
    assert [d.id for d in y.sharding.mesh.devices.flat] == [1, 2]  # back by w0's map
    np.testing.assert_array_equal(np.asarray(y), np.arange(4.0))


def test_a_sharding_other_than_named_is_refused_with_what_to_do():
    from jax._src.sharding_impls import GSPMDSharding

    devs = jax.devices("cpu")[1:3]
    x = jax.device_put(jnp.arange(4.0), NamedSharding(mesh(2), P("x")))
    gspmd = GSPMDSharding(devs, x.sharding._to_xla_hlo_sharding(1))
    y = jax.device_put(jnp.arange(4.0), gspmd)
    expect(ValueError, ["GSPMDSharding", "NamedSharding(mesh, spec)", "jax.device_get"],
           _codec.encode, y)  # fmt: skip


# ------------------------------------------------------------------------- memory
# 256 MiB of float32 sharded 4 ways. A gather (the whole array in one host
# buffer, on top of the shards) would raise the peak by another 256 MiB.
BIG = 256 * MIB


def test_the_receiver_holds_the_shards_and_no_gathered_copy(job):
    m = mesh(4)
    x = jax.jit(lambda: jnp.ones(BIG // 4, jnp.float32), out_shardings=NamedSharding(m, P("x")))()
    rpc.rpc_sync("w1", S.reset_peak)
    rise = rpc.rpc_sync("w1", S.peak_rise, args=(x,))
    # The received bytes (its buffers, which the shards then alias or replace one at a
    # time), plus one shard and some slack; a gather would be 2 x BIG.
    assert rise < BIG + BIG // 4 + 32 * MIB, rise / MIB


def test_the_sender_makes_no_gathered_copy(job):
    rise = job.run("w1", S.send_sharded, "w0", BIG, ["cpu:4", "cpu:5", "cpu:6", "cpu:7"])
    # The shared-memory segment the sender writes the shards into, through its own mapping
    # (so it counts in the sender's RSS), plus some slack; a gather would add another BIG
    # of private memory, alive while it is copied into the segment.
    assert rise < BIG + BIG // 4 + 32 * MIB, rise / MIB
