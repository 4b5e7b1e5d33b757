"""``DeviceMesh`` and ``init_device_mesh``: the ranks laid out as an n-d array, a process
group along each dimension.

tensorplay's ``torch.distributed.device_mesh``: a mesh of shape ``(2, 4)`` over eight
ranks holds them as ``[[0, 1, 2, 3], [4, 5, 6, 7]]``; along dimension 1 ("tp") the
groups are the rows, along dimension 0 ("dp") the columns, so rank 5 is in the "tp"
group ``[4, 5, 6, 7]`` and the "dp" group ``[1, 5]``. The groups are made once, by the
constructor on every rank (a dimension that spans every rank uses the default group);
``mesh["tp"]`` is this rank's 1-d slice, sharing the groups.

This is the process-level mesh of ported tensorplay code (one process per device, as
everywhere in ``tensorplay_jax.distributed``); within one process, JAX's own
``jax.sharding.Mesh`` lays out devices.

Example (every rank of a job of four)::

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp = mesh.get_group("dp")           # this rank's column
    mesh["tp"].mesh                      # this rank's row, as a Tensor of ranks
    mesh.get_coordinate()                # (row, column) of this rank
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import tensorplay_jax.process_group as dist
from tensorplay_jax.tensors import Tensor

__all__ = ["DeviceMesh", "init_device_mesh"]


def _ranks(mesh: Any) -> np.ndarray:
    """``mesh`` (a Tensor, array or nested lists of ranks) as an int64 NumPy array."""
    value = mesh.numpy() if isinstance(mesh, Tensor) else mesh
    arr = np.asarray(value)
    if arr.dtype.kind not in "iu" and arr.size:
        raise ValueError(f"DeviceMesh: mesh must hold integer ranks, got {arr.dtype}")
    arr = arr.astype(np.int64)
    if len(np.unique(arr)) != arr.size:
        raise RuntimeError(f"DeviceMesh cannot have duplicate values, but found {arr.tolist()}")
    return arr


def _dim_rows(mesh: np.ndarray, dim: int) -> list[list[int]]:
    """The groups along ``dim``: every 1-d line of ``mesh`` in that direction."""
    return np.moveaxis(mesh, dim, -1).reshape(-1, mesh.shape[dim]).tolist()


class DeviceMesh:
    """Ranks laid out as an n-d array, with a process group along each dimension.

    Every rank constructs it alike (the groups are made collectively). Prefer
    :func:`init_device_mesh`, which lays out ``range(prod(shape))``.

    Args:
      device_type: the devices' type (``"cpu"``, ``"cuda"``...), as tensorplay's.
      mesh: the global ranks, an n-d Tensor, array or nested lists.
      mesh_dim_names: a name per dimension (for ``mesh["name"]`` and ``get_group("name")``).
      backend_override: accepted; changes nothing (every group keeps the default group's
        engine).

    Raises:
      RuntimeError: repeated ranks, more ranks than the world has, or names that repeat
        or do not match the dimensions.
    """

    def __init__(
        self,
        device_type: str,
        mesh: Any,
        *,
        mesh_dim_names: Sequence[str] | None = None,
        backend_override: Any = None,
        _init_backend: bool = True,
        _groups: list[Any] | None = None,
    ) -> None:
        self._device_type = device_type
        self._mesh = _ranks(mesh)
        self._mesh_dim_names = None if mesh_dim_names is None else tuple(mesh_dim_names)
        _check_names(self._mesh.shape, self._mesh_dim_names)
        if not dist.is_initialized():
            dist.init_process_group()
        world = dist.get_world_size()
        if self._mesh.size > world:
            raise RuntimeError(
                f"Mesh should not be bigger than default world size {world}, but found "
                f"{self._mesh.size} ranks!"
            )
        if self._mesh.size and (self._mesh.min() < 0 or self._mesh.max() >= world):
            raise RuntimeError(
                f"DeviceMesh: ranks must be in 0..{world - 1}, got {self._mesh.tolist()}"
            )
        here = np.argwhere(self._mesh == dist.get_rank())
        self._coordinate = tuple(int(i) for i in here[0]) if len(here) else None
        self._groups = _groups if _groups is not None else self._make_groups()

    def _make_groups(self) -> list[Any]:
        """One group per dimension (this rank's line along it; None outside the mesh)."""
        everyone = list(range(dist.get_world_size()))
        groups = []
        for dim in range(self._mesh.ndim):
            rows = _dim_rows(self._mesh, dim)
            if rows == [everyone]:
                groups.append(dist.group.WORLD)
                continue
            mine, _ = dist.new_subgroups_by_enumeration(rows)
            groups.append(mine)
        return groups

    # ----------------------------------------------------------------- the layout
    @property
    def device_type(self) -> str:
        return self._device_type

    @property
    def mesh(self) -> Tensor:
        """The ranks, as an int Tensor of the mesh's shape."""
        return Tensor(self._mesh.astype(np.int32))

    @property
    def mesh_dim_names(self) -> tuple[str, ...] | None:
        return self._mesh_dim_names

    @property
    def ndim(self) -> int:
        return self._mesh.ndim

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._mesh.shape)

    def size(self, mesh_dim: int | None = None) -> int:
        """Ranks along ``mesh_dim``, or in the whole mesh."""
        return int(self._mesh.size if mesh_dim is None else self._mesh.shape[mesh_dim])

    def get_rank(self) -> int:
        """This process's global rank."""
        return dist.get_rank()

    def get_coordinate(self) -> tuple[int, ...] | None:
        """This rank's index in the mesh (None when it is not in it)."""
        return self._coordinate

    def get_local_rank(self, mesh_dim: int | str | None = None) -> int:
        """This rank's index along ``mesh_dim`` (its rank in that dimension's group)."""
        dim = self._dim("get_local_rank", mesh_dim)
        if self._coordinate is None:
            raise RuntimeError("DeviceMesh.get_local_rank: this rank is not in the mesh")
        return self._coordinate[dim]

    # ----------------------------------------------------------------- groups
    def get_group(self, mesh_dim: int | str | None = None) -> Any:
        """The process group along ``mesh_dim`` that holds this rank (a name or an index;
        may be left out on a 1-d mesh)."""
        return self._groups[self._dim("get_group", mesh_dim)]

    def get_all_groups(self) -> list[Any]:
        """This rank's group along each dimension, in order."""
        return list(self._groups)

    def _dim(self, fn: str, mesh_dim: int | str | None) -> int:
        if mesh_dim is None:
            if self.ndim > 1:
                raise RuntimeError(
                    f"DeviceMesh.{fn}: the mesh has {self.ndim} dimensions; pass mesh_dim "
                    "(a name or an index)"
                )
            return 0
        if isinstance(mesh_dim, str):
            return self._dim_by_name(mesh_dim)
        if not -self.ndim <= mesh_dim < self.ndim:
            raise IndexError(f"DeviceMesh.{fn}: mesh_dim {mesh_dim} out of range for {self.ndim}")
        return mesh_dim % self.ndim

    def _dim_by_name(self, name: str) -> int:
        names = self._mesh_dim_names
        if names is None:
            raise KeyError(
                "No `mesh_dim_names` found. To use `mesh_dim_names`, please pass them in "
                "when creating the DeviceMesh."
            )
        if name not in names:
            raise KeyError(
                f"Mesh dimension '{name}' does not exist. Available mesh dimensions are: "
                f"mesh_dim_names={names}"
            )
        return names.index(name)

    def __getitem__(self, mesh_dim_names: str | tuple[str, ...]) -> DeviceMesh:
        """This rank's slice of the mesh over the named dimensions (in the mesh's order),
        sharing their groups.

        Raises:
          RuntimeError: the mesh has no names, or this rank is not in it.
          KeyError: a name that is not a dimension's, or names out of the mesh's order.
        """
        if not self._mesh_dim_names:
            raise RuntimeError("Cannot slice a DeviceMesh without mesh_dim_names!")
        names = (mesh_dim_names,) if isinstance(mesh_dim_names, str) else tuple(mesh_dim_names)
        if names == self._mesh_dim_names:
            return self
        dims = [self._dim_by_name(n) for n in names]
        if dims != sorted(set(dims)):
            raise KeyError(
                f"Invalid mesh_dim_names {names} specified. Mesh dim indices should be in "
                "ascending order."
            )
        if self._coordinate is None:
            raise RuntimeError("DeviceMesh: this rank is not in the mesh, so it has no slice")
        index = tuple(slice(None) if d in dims else c for d, c in enumerate(self._coordinate))
        sub = self._mesh[index]
        return DeviceMesh(
            self._device_type,
            sub,
            mesh_dim_names=names,
            _groups=[self._groups[d] for d in dims],
        )

    @staticmethod
    def from_group(
        group: Any,
        device_type: str,
        mesh: Any = None,
        *,
        mesh_dim_names: Sequence[str] | None = None,
    ) -> DeviceMesh:
        """A mesh over existing groups: one group (a 1-d mesh of its ranks), or one group
        per dimension with ``mesh`` giving the layout.

        Raises:
          ValueError: no groups, several groups without ``mesh``, or as many groups as
            the mesh has dimensions not given.
        """
        groups = list(group) if isinstance(group, list | tuple) else [group]
        if not groups:
            raise ValueError("Expects at least one ProcessGroup to be passed")
        if mesh is None:
            if len(groups) > 1:
                raise ValueError("Must pass mesh if passing multiple ProcessGroups")
            mesh = dist.get_process_group_ranks(groups[0])
        ranks = _ranks(mesh)
        if ranks.ndim != len(groups):
            raise ValueError(
                "Expects mesh with ndim equal to number of ProcessGroups but got mesh "
                f"{ranks.tolist()} and {len(groups)} ProcessGroups"
            )
        return DeviceMesh(device_type, ranks, mesh_dim_names=mesh_dim_names, _groups=groups)

    # ----------------------------------------------------------------- identity
    def __repr__(self) -> str:
        names = self._mesh_dim_names
        sizes = (
            "(" + ", ".join(f"{n}={k}" for n, k in zip(names, self.shape, strict=True)) + ")"
            if names
            else str(self.shape)
        )
        return f"DeviceMesh({sizes}, '{self._device_type}', mesh={self._mesh.tolist()})"

    def _key(self) -> tuple[Any, ...]:
        return (self._mesh.tobytes(), self.shape, self._device_type, self._mesh_dim_names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DeviceMesh) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def _check_names(shape: tuple[int, ...], names: tuple[str, ...] | None) -> None:
    if names is None:
        return
    if len(set(names)) != len(names):
        raise RuntimeError(
            "Each mesh_dim_name must be unique. Found repeated mesh_dim_name in "
            f"mesh_dim_names {names}"
        )
    if len(names) != len(shape):
        raise RuntimeError(
            "mesh_shape and mesh_dim_names should have same length! Found "
            f"len(mesh_dim_names): {len(names)} and len(mesh_shape):{len(shape)}."
        )


def init_device_mesh(
    device_type: str,
    mesh_shape: Sequence[int],
    *,
    mesh_dim_names: Sequence[str] | None = None,
    backend_override: Any = None,
) -> DeviceMesh:
    """A :class:`DeviceMesh` of ranks ``0 .. prod(mesh_shape) - 1`` in row-major order
    (starting the default process group from the environment when none is running).

    Raises:
      RuntimeError: names that repeat or do not match the shape, a device type with an
        index (``"cuda:0"``), or more ranks than the world has.

    Example (a job of four)::

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    """
    names = None if mesh_dim_names is None else tuple(mesh_dim_names)
    shape = tuple(int(s) for s in mesh_shape)
    _check_names(shape, names)
    if device_type and not device_type.isalpha():
        raise RuntimeError(
            f"Device type with index is not supported but got {device_type}. If you "
            "maintained a 'torch.device' object, it's recommended to pass in 'device.type'."
        )
    ranks = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    return DeviceMesh(device_type, ranks, mesh_dim_names=names, backend_override=backend_override)
