"""Kafka's non-flexible primitive types, read and written by hand for the coordinator's
small embedded formats (``__consumer_offsets`` keys and values, the consumer protocol).

Invariants:
- Big-endian fixed-width integers; ``string`` is int16 length + UTF-8 (-1 = null),
  ``bytes`` is int32 length + data (-1 = null), an array is an int32 count (-1 = null).
- ``Reader`` never reads past its buffer: a short or malformed buffer raises ``ValueError``
  (and nothing else), so callers handle one exception for every kind of bad data.
"""

from __future__ import annotations

import struct

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    @property
    def remaining(self) -> int:
        return len(self.data) - self.pos

    def _take(self, size: int) -> bytes:
        end = self.pos + size
        if size < 0 or end > len(self.data):
            raise ValueError(f"data ends at byte {len(self.data)}, {end} needed")
        chunk = self.data[self.pos:end]
        self.pos = end
        return chunk

    def int16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _INT64.unpack(self._take(8))[0]

    def nullable_string(self) -> str | None:
        length = self.int16()
        if length < 0:
            return None
        try:
            return self._take(length).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"string is not UTF-8: {exc}") from None

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise ValueError("null where a string is required")
        return value

    def nullable_bytes(self) -> bytes | None:
        length = self.int32()
        return None if length < 0 else self._take(length)

    def bytes(self) -> bytes:
        return self.nullable_bytes() or b""

    def count(self) -> int:
        """An array's element count; a null array (-1) holds nothing."""
        return max(self.int32(), 0)


class Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def int16(self, value: int) -> Writer:
        self.parts.append(_INT16.pack(value))
        return self

    def int32(self, value: int) -> Writer:
        self.parts.append(_INT32.pack(value))
        return self

    def int64(self, value: int) -> Writer:
        self.parts.append(_INT64.pack(value))
        return self

    def string(self, value: str | None) -> Writer:
        if value is None:
            return self.int16(-1)
        raw = value.encode("utf-8")
        self.parts += (_INT16.pack(len(raw)), raw)
        return self

    def bytes(self, value: bytes | None) -> Writer:
        if value is None:
            return self.int32(-1)
        self.parts += (_INT32.pack(len(value)), value)
        return self

    def value(self) -> bytes:
        return b"".join(self.parts)
