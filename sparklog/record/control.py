"""Control records: the transaction markers (COMMIT, ABORT) a control batch carries.

Format (Kafka's ``ControlRecordType`` and ``EndTransactionMarker``): the key is int16 version
(0) + int16 type (0 ABORT, 1 COMMIT); the value is int16 version (0) + int32 coordinator
epoch. A control batch holds exactly one such record and has attribute bit 5 set.

Invariants:
- ``decode_marker`` and ``batch_marker`` never raise on a malformed marker record; anything
  that is not a well-formed marker is None, so tools can show it as they find it (an emptied
  control batch, which the log cleaner leaves, is None too).
- ``marker_batch`` is a complete, CRC-sealed control batch as a partition leader writes it
  for a coordinator: transactional and control bits set, the producer's id and epoch, no
  sequence, one record holding the marker.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from sparklog.record.batch import BatchHeader
from sparklog.record.records import Buffer, build_batch, decode_records

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
CONTROL_VERSION = 0


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


def batch_marker(buf: Buffer, header: BatchHeader) -> Marker | None:
    """The marker of the control batch ``header`` (at ``header.position`` in ``buf``); None
    for a control batch the log cleaner emptied, or one holding no well-formed marker."""
    records = decode_records(buf, header)
    return decode_marker(records[0].key, records[0].value) if records else None


def marker_batch(kind: ControlType, producer_id: int, producer_epoch: int,
                 coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """The control batch ending ``producer_id``'s transaction with ``kind`` (offsets are
    assigned on append, like any batch)."""
    key = _KEY.pack(CONTROL_VERSION, kind)
    value = _VALUE.pack(CONTROL_VERSION, coordinator_epoch)
    return build_batch([(key, value, (), timestamp_ms)], producer_id=producer_id,
                       producer_epoch=producer_epoch, transactional=True, is_control=True)
