"""What the driver resolves for a sink column written with ``valueFormat`` / ``keyFormat``
``avro``, ``json`` or ``protobuf``, for the tasks that encode it (``encode``).

Invariant: ``ColumnEncoding`` (format, subject, schema id and the schema's text) is frozen
and picklable, and this module imports nothing heavy: the sink's option parsing, which Spark
runs in a fresh Python process twice per micro-batch, imports it without Arrow's compute
kernels or the encoders.
"""

from __future__ import annotations

from dataclasses import dataclass

AVRO, JSON, PROTOBUF = "avro", "json", "protobuf"


@dataclass(frozen=True)
class ColumnEncoding:
    """How a column is encoded: resolved on the driver, shipped to the tasks."""

    format: str
    """``avro``, ``json`` or ``protobuf``."""
    subject: str
    schema_id: int
    schema: str
    """The registered schema's text (Avro JSON, a JSON Schema, a Protobuf file or
    ``references.protobuf_bundle``'s file with its imports)."""
    message: str | None = None
    """Protobuf: the message written (None: the file's first)."""
