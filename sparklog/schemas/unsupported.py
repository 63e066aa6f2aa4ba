"""The error of a schema the client-side readers cannot take (no Arrow or pyarrow here, so
the broker's registry may import what raises it)."""

from __future__ import annotations


class UnsupportedSchemaError(ValueError):
    """A schema uses what has no typed-column mapping here; the message says where."""
