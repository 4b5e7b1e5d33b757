"""Device maps' data path: an array on a mapped device beside a host array of the same size.

Two workers on this host (the same-host transport: Unix socket + shared-memory
segments). Worker ``w0`` maps its ``cpu:1`` to ``w1``'s ``cpu:2`` (virtual CPU
devices; on a GPU host pass ``--here cuda:0 --there cuda:0``: each worker is
given its own GPU). For each size it times the echo round trip (best of the
repeats) of:

- ``host``: a NumPy array (no device: one host copy each way, into the segment);
- ``default``: a ``jax.Array`` on the default device, no map (lands on the peer's default);
- ``mapped``: a ``jax.Array`` on ``--here``, arriving on ``--there`` and back by the inverse map.

On CPU devices a device array's host view is its own memory, so ``mapped``
adds only the placing on arrival (``jax.device_put``) to ``host``'s copies;
on a GPU it adds the device-to-host and host-to-device transfers and one host
copy (the device-to-host copy goes to a new host array, then into the segment).

Usage::

    python benchmarks/device_maps.py
    python benchmarks/device_maps.py --sizes 1 64 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax
import numpy as np

from tensorplay_jax import rpc
from tensorplay_jax.runtime.device import resolve_device
from tensorplay_jax.testing import Workers


def echo(x):
    return x


def best_ms(x, repeats: int) -> float:
    jax.block_until_ready(rpc.rpc_sync("w1", echo, args=(x,), timeout=0))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(rpc.rpc_sync("w1", echo, args=(x,), timeout=0))
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64], help="MiB")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--here", default="cpu:1")
    p.add_argument("--there", default="cpu:2")
    a = p.parse_args()
    opts = {"w0": {"device_maps": {"w1": {a.here: a.there}}}}
    with Workers(2, names=["w0", "w1"], timeout=120, rpc_options=opts):
        dev = resolve_device(a.here, "benchmark")
        print(f"| MiB | host ms | default ms | mapped {a.here}->{a.there} ms | mapped / host |")
        print("|---|---|---|---|---|")
        for mib in a.sizes:
            host = np.ones((mib << 20) // 4, np.float32)
            t_host = best_ms(host, a.repeats)
            t_default = best_ms(jax.numpy.asarray(host), a.repeats)
            t_mapped = best_ms(jax.device_put(host, dev), a.repeats)
            print(
                f"| {mib} | {t_host:.2f} | {t_default:.2f} | {t_mapped:.2f} | "
                f"{t_mapped / t_host:.2f}x |"
            )


if __name__ == "__main__":
    main()
