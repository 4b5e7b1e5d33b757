"""Ids made unique across a job: the creating worker's rank above a per-process serial.

Each kind of id is one :class:`IdLayout` (how many low bits the serial takes);
the rank sits above them. Every id of the package is packed and unpacked here:

==================  ========  ============================================================
layout              low bits  low part
==================  ========  ============================================================
``CONTEXT_ID``      48        distributed autograd context serial (masked to 48 bits)
``PASS_ID``         48        distributed backward pass serial
``RREF_ID``         40        RRef / fork serial of the owner's table
``MESSAGE_KEY``     41        ``(message id << 1) | direction`` of a send/recv pair
==================  ========  ============================================================

Example:
    >>> CONTEXT_ID.pack(3, 7) == (3 << 48) | 7
    True
    >>> CONTEXT_ID.unpack(CONTEXT_ID.pack(3, 7))
    (3, 7)
    >>> message_key(2, 5, 1) == (2 << 41) | (5 << 1) | 1
    True
"""

from __future__ import annotations

import dataclasses

__all__ = ["CONTEXT_ID", "MESSAGE_KEY", "PASS_ID", "RREF_ID", "IdLayout", "message_key"]


@dataclasses.dataclass(frozen=True)
class IdLayout:
    """An id: ``(rank << low_bits) | serial``, the serial masked to ``low_bits``."""

    name: str
    low_bits: int

    @property
    def mask(self) -> int:
        """The serial's bits."""
        return (1 << self.low_bits) - 1

    def pack(self, rank: int, serial: int) -> int:
        """The id of ``serial`` made by ``rank``.

        Example:
            >>> RREF_ID.pack(1, 2) == (1 << 40) | 2
            True
        """
        return (rank << self.low_bits) | (serial & self.mask)

    def rank(self, id_: int) -> int:
        """The rank that made ``id_``.

        Example:
            >>> PASS_ID.rank(PASS_ID.pack(5, 9))
            5
        """
        return id_ >> self.low_bits

    def unpack(self, id_: int) -> tuple[int, int]:
        """``(rank, serial)`` of ``id_``.

        Example:
            >>> RREF_ID.unpack(RREF_ID.pack(4, 11))
            (4, 11)
        """
        return id_ >> self.low_bits, id_ & self.mask


CONTEXT_ID = IdLayout("context id", 48)
PASS_ID = IdLayout("backward pass id", 48)
RREF_ID = IdLayout("rref id", 40)
MESSAGE_KEY = IdLayout("message key", 41)


def message_key(caller: int, message_id: int, direction: int) -> int:
    """The key of one message's Tensors: caller's rank, message id, and direction (0 or 1).

    Example:
        >>> MESSAGE_KEY.unpack(message_key(1, 3, 1))
        (1, 7)
    """
    return MESSAGE_KEY.pack(caller, (message_id << 1) | direction)
