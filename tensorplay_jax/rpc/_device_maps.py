"""Device maps: on which device an array sent to a peer lands there, and where its reply lands.

The options say, per peer, ``{local device: peer device}`` (one-to-one) and
the devices this worker places arrays on (``devices``). At start-up every
worker publishes its maps and ``devices``, and, if it sets either, its local
device names; every worker checks every map against the names published (a
worker that published none checks its peers' maps to it itself), the
outcome is shared so that all fail alike, and each builds the reverse map of
each peer's map to it and takes as its devices, unless given, the keys of its
own maps and of the reverse maps.

Then each message to a peer is encoded with a :class:`Placement` (a call
to this worker itself keeps every array on its device): a request
array on device ``d`` arrives on ``map[d]``; a reply array on ``d`` arrives
on the caller's device that maps to ``d``. An array on the host device
(``cpu:0``) with no entry arrives on the peer's default device, as it would
without maps. Anything else raises before it is sent: an array on another
device with no entry, or a reply on a device outside ``devices``.

An array sharded over a mesh of several devices follows the same maps device
by device (:meth:`Placement.mesh`): it arrives sharded the same way over the
peer's mesh of the mapped devices (its shape and axis names kept; see
``_sharded``). Every device of its mesh needs an entry, the host's too.

Example:
    >>> maps = normalize_map("w1", {"cpu:1": "gpu:0"}, "set_device_map")
    >>> maps
    {'cpu:1': 'cuda:0'}
    >>> merge_map({"cpu:1": "cuda:0"}, {"cpu:1": "cuda:1"}, "w1", "set_device_map")
    Traceback (most recent call last):
    ...
    ValueError: set_device_map: device cpu:1 is mapped to 'w1' as cuda:0 already, not cuda:1
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import jax

from tensorplay_jax.runtime.device import canonical_device, device_name, local_device_names

__all__ = [
    "HOST_DEVICE",
    "DeviceMaps",
    "Placement",
    "merge_map",
    "normalize_devices",
    "normalize_map",
]

HOST_DEVICE = "cpu:0"  # arrays here need no map: they land on the peer's default device

_FIX = (
    "a map names devices by their index among each worker's own local devices "
    "(options.set_device_map(to, {local: remote}))"
)


def normalize_map(to: str, mapping: Mapping[Any, Any], what: str) -> dict[str, str]:
    """``mapping`` with canonical device names; raises ValueError unless it is one-to-one."""
    if not isinstance(to, str) or not to:
        raise TypeError(f"{what}: the worker name {to!r} must be a non-empty string")
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{what}: the map for {to!r} must be a dict {{local: remote}}")
    out: dict[str, str] = {}
    for src, dst in mapping.items():
        out = merge_map(out, {canonical_device(src, what): canonical_device(dst, what)}, to, what)
    return out


def merge_map(old: dict[str, str], new: dict[str, str], to: str, what: str) -> dict[str, str]:
    """``old`` with ``new``'s entries added; an entry that contradicts one raises ValueError."""
    out = dict(old)
    back = {dst: src for src, dst in old.items()}
    for src, dst in new.items():
        if out.get(src, dst) != dst:
            raise ValueError(
                f"{what}: device {src} is mapped to {to!r} as {out[src]} already, not {dst}"
            )
        if back.get(dst, src) != src:
            raise ValueError(
                f"{what}: devices {back[dst]} and {src} both map to {dst} on {to!r}; a device "
                "map is one-to-one"
            )
        out[src], back[dst] = dst, src
    return out


def normalize_devices(devices: Iterable[Any], what: str) -> list[str]:
    """``devices`` by canonical name, each once, in order."""
    if isinstance(devices, str) or not isinstance(devices, Iterable):
        raise TypeError(f"{what}: devices={devices!r} must be a list of devices")
    return list(dict.fromkeys(canonical_device(d, what) for d in devices))


class Placement:
    """Where this worker's arrays land on one peer: :meth:`__call__` gives the device name.

    Args:
      peer: the other worker's name (for errors).
      mapping: ``{this worker's device: the peer's device}``.
      allowed: the devices arrays may leave from (None: any that ``mapping`` has).
      reply: this placement serves replies (errors then name the caller's map).
      keep: a call to this worker itself: every array stays on its device.
    """

    __slots__ = ("_names", "allowed", "keep", "mapping", "peer", "reply")

    def __init__(
        self,
        peer: str,
        mapping: dict[str, str],
        allowed: frozenset[str] | None,
        reply: bool,
        keep: bool = False,
    ) -> None:
        self.peer, self.mapping, self.allowed, self.reply = peer, mapping, allowed, reply
        self.keep = keep
        self._names: dict[Any, str] = {}

    def __call__(self, x: jax.Array) -> str | None:
        """The peer's device for ``x`` (None: its default device); raises ValueError if none."""
        devs = x.sharding.device_set
        if len(devs) != 1:
            raise ValueError(
                f"rpc: cannot place an array sharded over {len(devs)} devices ({x.sharding}) "
                f"on one device of {self.peer!r}; it travels shard by shard (Placement.mesh)"
            )
        (dev,) = devs
        return self._one(dev, x.committed)

    def mesh(self, devices: Iterable[Any]) -> list[str]:
        """The peer's device for each of a sharded array's mesh ``devices``, in order.

        Every device needs an entry (the host device too: a mesh cannot fall
        back to the peer's default device). Raises ValueError naming those
        without one and the ``set_device_map`` call that adds them.
        """
        names = [self._name(d) for d in devices]
        if self.keep:
            return names
        out: list[str] = []
        missing: list[str] = []
        for name in names:
            if self.reply and self.allowed is not None and name not in self.allowed:
                raise ValueError(
                    f"rpc: the reply to {self.peer!r} holds an array sharded over {names}, and "
                    f"{name} is not among this worker's devices {sorted(self.allowed)}; shard it "
                    "over devices the maps name, or add them with options.set_devices([...])"
                )
            target = self.mapping.get(name)
            if target is None:
                missing.append(name)
            out.append(target or "")
        if not missing:
            return out
        if self.reply:
            raise ValueError(
                f"rpc: the reply to {self.peer!r} holds an array sharded over {names}, and the "
                f"device map of {self.peer!r} to this worker has no device that maps to "
                f"{', '.join(missing)}; {self.peer!r} adds them with options.set_device_map("
                "<this worker>, {<its device>: <this worker's device>, ...}) (a sharded array "
                "needs an entry for every device of its mesh)"
            )
        fix = ", ".join(f"{m!r}: <its device>" for m in missing)
        raise ValueError(
            f"rpc: an array sharded over {names} cannot be sent to {self.peer!r}: the device "
            f"map to {self.peer!r} has no entry for {', '.join(missing)} (a sharded array needs "
            f"one for every device of its mesh); add them with options.set_device_map("
            f"{self.peer!r}, {{{fix}}}), or send a host copy (jax.device_get)"
        )

    def _name(self, dev: Any) -> str:
        name = self._names.get(dev)
        if name is None:
            name = self._names[dev] = device_name(dev)
        return name

    def _one(self, dev: Any, committed: bool) -> str | None:
        name = self._name(dev)
        if self.keep:
            return name if committed else None
        if self.reply and self.allowed is not None and name not in self.allowed:
            if name == HOST_DEVICE and name not in self.mapping:
                return None
            raise ValueError(
                f"rpc: the reply to {self.peer!r} holds an array on {name}, which is not among "
                f"this worker's devices {sorted(self.allowed)}; return it on one of those (or "
                "on the host), or add it with options.set_devices([...])"
            )
        target = self.mapping.get(name)
        if target is not None or name == HOST_DEVICE:
            return target
        if self.reply:
            raise ValueError(
                f"rpc: the reply to {self.peer!r} holds an array on {name}, and the device map "
                f"of {self.peer!r} to this worker has no device that maps to {name}; "
                f"{self.peer!r} adds one with options.set_device_map(<this worker>, "
                f"{{<its device>: {name!r}}})"
            )
        raise ValueError(
            f"rpc: an array on {name} cannot be sent to {self.peer!r}: there is no device map "
            f"entry for {name} to {self.peer!r}; add one with options.set_device_map("
            f"{self.peer!r}, {{{name!r}: <its device>}}), or send a host copy (jax.device_get)"
        )


class DeviceMaps:
    """One worker's device maps after start-up: a :class:`Placement` per peer and direction."""

    def __init__(self, me: str, maps: Mapping[str, dict[str, str]], devices: list[str] | None):
        self.me, self.maps, self.given = me, dict(maps), devices
        self.devices: list[str] = list(devices or [])
        self._send: dict[str, Placement] = {}
        self._reply: dict[str, Placement] = {}

    def advertised(self) -> dict[str, Any]:
        """What this worker publishes at start-up (its local devices only when it sets maps).

        Listing the devices starts JAX's backends, which must wait for
        ``init_process_group`` when that comes after ``init_rpc``; so a worker
        with neither maps nor ``devices`` lists none, and checks the maps
        that its peers have to it itself (in :meth:`build`).
        """
        used = bool(self.maps) or self.given is not None
        return {
            "device_maps": self.maps,
            "devices": self.given,
            "local_devices": local_device_names() if used else None,
        }

    def agree(
        self, entries: Mapping[str, Mapping[str, Any]], gather: Callable[[str], list[str]]
    ) -> None:
        """:meth:`build`; where any worker sets maps, every worker fails if one does.

        A worker that sets no maps can only check its peers' maps to it itself,
        so the outcome is shared (``gather``: publish this worker's error, or
        ``""``, and get every worker's), and ``init_rpc`` raises the first.
        """
        if not any(e.get("device_maps") or e.get("devices") is not None for e in entries.values()):
            self.build(entries)
            return
        try:
            self.build(entries)
            mine = ""
        except ValueError as e:
            mine = str(e)
        errors = [e for e in gather(mine) if e]
        if errors:
            raise ValueError(errors[0])

    def build(self, entries: Mapping[str, Mapping[str, Any]]) -> None:
        """Check every worker's maps (``{name: its published entry}``) and make the placements.

        Raises:
          ValueError: a map names an unknown worker or a device its worker does not have.
        """
        for name, ent in entries.items():
            for peer, mapping in (ent.get("device_maps") or {}).items():
                _check_map(name, peer, mapping, entries)
        reverse = {
            peer: {dst: src for src, dst in ent["device_maps"][self.me].items()}
            for peer, ent in entries.items()
            if (ent.get("device_maps") or {}).get(self.me)
        }
        if reverse and entries[self.me].get("local_devices") is None:
            # No one could check the peers' maps to this worker (it published no devices).
            here = {**entries[self.me], "local_devices": local_device_names()}
            for peer in reverse:
                _check_map(
                    peer, self.me, entries[peer]["device_maps"][self.me], {**entries, self.me: here}
                )
        mine = set().union(*(m.keys() for m in (*self.maps.values(), *reverse.values())))
        if self.given is None:
            self.devices = sorted(mine)
        else:
            _check_devices(self.me, self.given, entries[self.me], mine)
        allowed = frozenset(self.devices)
        for peer in entries:
            if peer == self.me:
                self._send[peer] = self._reply[peer] = Placement(peer, {}, None, False, True)
                continue
            self._send[peer] = Placement(peer, self.maps.get(peer, {}), None, False)
            self._reply[peer] = Placement(peer, reverse.get(peer, {}), allowed, True)

    def for_request(self, peer: str) -> Placement | None:
        """The placement of a request to ``peer`` (None before start-up: no placing)."""
        return self._send.get(peer)

    def for_reply(self, peer: str) -> Placement | None:
        """The placement of a reply to ``peer``."""
        return self._reply.get(peer)


def _check_map(
    name: str, peer: str, mapping: Mapping[str, str], entries: Mapping[str, Mapping[str, Any]]
) -> None:
    if peer not in entries or peer == name:
        raise ValueError(
            f"init_rpc: worker {name!r} has a device map to {peer!r}, which is "
            + ("itself" if peer == name else "not a worker of this job")
            + f"; the workers are {sorted(entries)}"
        )
    here = entries[name].get("local_devices") or []
    there = entries[peer].get("local_devices")
    for src, dst in mapping.items():
        if src not in here:
            raise ValueError(
                f"init_rpc: worker {name!r} maps device {src} to {peer!r}, but it has no {src} "
                f"(its devices: {', '.join(here) or 'none'}); {_FIX}"
            )
        if there is not None and dst not in there:
            raise ValueError(
                f"init_rpc: worker {name!r} maps device {src} to {dst} on {peer!r}, but {peer!r} "
                f"has no {dst} (its devices: {', '.join(there) or 'none'}); {_FIX}"
            )


def _check_devices(me: str, given: list[str], ent: Mapping[str, Any], mapped: set[str]) -> None:
    here = ent.get("local_devices") or []
    for d in given:
        if d not in here:
            raise ValueError(
                f"init_rpc: worker {me!r} lists device {d} in devices, but it has no {d} "
                f"(its devices: {', '.join(here) or 'none'})"
            )
    for d in sorted(mapped - set(given)):
        raise ValueError(
            f"init_rpc: worker {me!r} has device {d} in a device map (its own or a peer's to it) "
            f"but not in devices={given}; add it with options.set_devices([...])"
        )
