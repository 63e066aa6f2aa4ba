"""JSON values (framed or bare) into one Arrow array, with Arrow's JSON reader.

The chunk's values are joined by newlines and read by ``pyarrow.json.read_json`` with the
struct's fields as its explicit schema (properties not in the schema ignored, missing ones
null): one C++ pass for the chunk. Dates are read as strings and cast, since Arrow's JSON
reader parses timestamps but not dates.

Invariants:
- Framed values (Confluent's wire format, as ``JSONSerializer`` writes them) lose their
  5-byte header; the schema id is not looked at (a JSON document reads by property names
  whatever schema version wrote it).
- ``decode`` never raises for a bad value: when the chunk does not read as one (a value is
  not a JSON object, has a property of another type, or is not framed), each value is read
  on its own and the failing rows are null with the reason in ``errors``.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.json as pj

from sparklog.schemas.wire import Decoded, DecodeError, split


class JsonDecoder:
    def __init__(self, arrow_type: pa.DataType, *, framed: bool) -> None:
        self.arrow_type = arrow_type
        self.framed = framed
        self._read_schema = pa.schema(list(_dates_as_strings(arrow_type)))

    def decode(self, values: Sequence[bytes | None]) -> Decoded:
        bodies: list[bytes] = []
        rows: list[int | None] = []
        errors: dict[int, str] = {}
        for row, value in enumerate(values):
            if value is None:
                rows.append(None)
                continue
            try:
                body = bytes(split(value)[1]) if self.framed else value
            except DecodeError as exc:
                errors[row] = str(exc)
                rows.append(None)
                continue
            rows.append(len(bodies))
            bodies.append(body)
        try:
            documents = self._read(bodies)
        except (pa.ArrowException, DecodeError):
            documents = self._read_each(bodies, rows, errors)
        if len(documents) == len(values) and not errors and None not in rows:
            return Decoded(documents, errors)
        return Decoded(documents.take(pa.array(rows, pa.int64())), errors)

    def _read(self, bodies: list[bytes]) -> pa.Array:
        """The bodies as one struct array, or ArrowException / DecodeError."""
        if not bodies:
            return pa.array([], self.arrow_type)
        joined = b"\n".join(bodies) + b"\n"
        table = pj.read_json(
            io.BytesIO(joined),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, len(joined))),
            parse_options=pj.ParseOptions(
                explicit_schema=self._read_schema, unexpected_field_behavior="ignore",
                newlines_in_values=joined.count(b"\n") != len(bodies)))
        if table.num_rows != len(bodies):
            raise DecodeError(f"{len(bodies)} values read as {table.num_rows} JSON documents")
        return table.to_struct_array().combine_chunks().cast(self.arrow_type)

    def _read_each(self, bodies: list[bytes], rows: list[int | None],
                   errors: dict[int, str]) -> pa.Array:
        """The bodies read one by one; a failing one is null and its row gets an error."""
        read: list[pa.Array] = []
        for row, index in enumerate(rows):
            if index is None:
                continue
            try:
                read.append(self._read([bodies[index]]))
            except (pa.ArrowException, DecodeError) as exc:
                errors[row] = f"not a JSON object of the schema: {exc}"
                read.append(pa.nulls(1, self.arrow_type))
        return pa.concat_arrays(read) if read else pa.array([], self.arrow_type)


def _dates_as_strings(kind: pa.DataType) -> pa.DataType:
    """``kind`` with every date32 replaced by string (what the JSON reader can parse)."""
    if pa.types.is_date32(kind):
        return pa.string()
    if pa.types.is_struct(kind):
        return pa.struct([field.with_type(_dates_as_strings(field.type)) for field in kind])
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_dates_as_strings(kind.value_type)))
    return kind
