"""Worker code for the tests of ``DeviceMesh``, written once for both libraries.

Four ranks lay themselves out as a 2 x 2 mesh ("dp", "tp") and a 2 x 1 x 2 one, and
hand back (``tests._worker.hand_back``) what the mesh says of them: the layout, their
coordinates and local ranks, each dimension's group and what an all-reduce over it
sums, the slices, a mesh made from a group, and what bad calls raise. With
``TPJ_MESH_ORACLE=torch`` the same calls run on torch's gloo
(``golden/make_device_mesh_golden.py`` stores them).
"""

from __future__ import annotations

import datetime
import os

import numpy as np

from tests._torch_golden import by_path
from tests._worker import error_text, hand_back

ORACLE = os.environ.get("TPJ_MESH_ORACLE") == "torch"
if ORACLE:
    import torch as tp
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
else:
    import tensorplay_jax as tp
    import tensorplay_jax.distributed as dist
    from tensorplay_jax.distributed.device_mesh import DeviceMesh, init_device_mesh


def _ranks(mesh) -> list:
    return mesh.mesh.tolist()


def _sum_over(group) -> float:
    t = tp.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t, group=group)
    return float(t.item())


def _group_ranks(group) -> list[int]:
    return list(dist.get_process_group_ranks(group))


def job() -> None:
    if ORACLE:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    else:
        dist.init_process_group("gloo", timeout=60)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    got: dict = {
        "mesh": _ranks(mesh),
        "layout": [list(mesh.shape), mesh.ndim, mesh.size(), mesh.size(0), mesh.size(1)],
        "names": list(mesh.mesh_dim_names),
        "coordinate": list(mesh.get_coordinate()),
        "local_ranks": [mesh.get_local_rank("dp"), mesh.get_local_rank(1), mesh.get_rank()],
        "groups": [_group_ranks(mesh.get_group("dp")), _group_ranks(mesh.get_group(1))],
        "all_groups": [_group_ranks(g) for g in mesh.get_all_groups()],
        "sums": [_sum_over(mesh.get_group("dp")), _sum_over(mesh.get_group("tp"))],
        "slices": {
            "tp": _ranks(mesh["tp"]),
            "dp": _ranks(mesh["dp"]),
            "same": _ranks(mesh["dp", "tp"]),
            "tp_group": _group_ranks(mesh["tp"].get_group()),
            "tp_local_rank": mesh["tp"].get_local_rank(),
        },
        "equal": [mesh["tp"] == mesh["tp"], mesh["tp"] == mesh["dp"]],
        "from_group": _ranks(DeviceMesh.from_group(mesh.get_group("tp"), "cpu")),
    }
    three = init_device_mesh("cpu", (2, 1, 2), mesh_dim_names=("a", "b", "c"))
    got["three"] = {
        "mesh": _ranks(three),
        "groups": [_group_ranks(g) for g in three.get_all_groups()],
        "ac": _ranks(three["a", "c"]),
        "sum_b": _sum_over(three.get_group("b")),
    }
    got["errors"] = {
        "repeated_names": error_text(init_device_mesh, "cpu", (2, 2), mesh_dim_names=("x", "x")),
        "names_and_shape": error_text(init_device_mesh, "cpu", (2, 2), mesh_dim_names=("x",)),
        "device_index": error_text(init_device_mesh, "cuda:0", (4,)),
        "too_big": error_text(init_device_mesh, "cpu", (4, 2)),
        "unknown_name": error_text(lambda: mesh["nope"]),
        "out_of_order": error_text(lambda: mesh["tp", "dp"]),
        "group_of_2d": error_text(mesh.get_group),
        "slice_unnamed": error_text(lambda: init_device_mesh("cpu", (4,))["x"]),
    }
    dist.destroy_process_group()
    hand_back(got)


def flat(results: list[dict]) -> dict[str, np.ndarray]:
    """Every rank's values by path, not its errors: what the golden file holds."""
    return by_path(results, skip=("errors",))
