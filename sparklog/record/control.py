"""Control records: the transaction markers (COMMIT, ABORT) a control batch carries.

Format (Kafka's ``ControlRecordType`` and ``EndTransactionMarker``): the key is int16 version
(0) + int16 type (0 ABORT, 1 COMMIT); the value is int16 version (0) + int32 coordinator
epoch. A control batch holds exactly one such record and has attribute bit 5 set.

Invariant: ``decode_marker`` never raises; anything that is not a well-formed marker is None,
so tools can show it as they find it.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


class Marker(NamedTuple):
    """A decoded transaction marker; ``kind`` is a ``ControlType`` or an unknown int."""

    kind: int
    coordinator_epoch: int

    @property
    def name(self) -> str:
        try:
            return ControlType(self.kind).name
        except ValueError:
            return f"UNKNOWN({self.kind})"


def decode_marker(key: bytes | None, value: bytes | None) -> Marker | None:
    """The marker a control record's key and value hold, or None if they hold none."""
    if key is None or value is None or len(key) != _KEY.size or len(value) != _VALUE.size:
        return None
    _, kind = _KEY.unpack(key)
    _, epoch = _VALUE.unpack(value)
    return Marker(kind, epoch)
