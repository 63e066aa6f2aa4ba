"""Schema enforcement between a Spark DataFrame and a Delta table, with Delta Lake's rules.

Invariants:
- A table created here has the DataFrame's schema with every field nullable (as Spark's file
  sources write it) except the top-level columns the writer declares NOT NULL (the jobs'
  ``--schema`` ``NOT NULL`` columns), converted Spark -> Arrow (timestamps ``us`` UTC) ->
  Delta.
- Columns are matched by name; nullability and field metadata are ignored when comparing.
- Strict mode (``schema_mode=None``): a column the table lacks, or a column whose type
  differs, is refused with ``SchemaChangeError`` naming every difference. Table columns the
  batch lacks are allowed (they read as null), unless the column is NOT NULL.
- ``schema_mode="merge"``: columns the table lacks are added (nullable, after the existing
  ones); a changed type is still refused.
- Partition columns must be strings, integers, dates or booleans (values Spark writes into
  directory names exactly as Delta serialises them), and must match the table's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import Field
from deltalake import Schema as DeltaSchema
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    IntegralType,
    MapType,
    StringType,
    StructField,
    StructType,
)

SCHEMA_MODES = (None, "merge")


class SchemaChangeError(ValueError):
    """The batch's schema differs from the table's and the write did not ask to merge."""


def nullable(data_type: DataType) -> DataType:
    """``data_type`` with every field, array element and map value nullable."""
    if isinstance(data_type, StructType):
        return StructType([StructField(f.name, nullable(f.dataType), True) for f in data_type])
    if isinstance(data_type, ArrayType):
        return ArrayType(nullable(data_type.elementType), True)
    if isinstance(data_type, MapType):
        return MapType(nullable(data_type.keyType), nullable(data_type.valueType), True)
    return data_type


def arrow_schema(spark_schema: StructType, not_null: Sequence[str] = ()) -> pa.Schema:
    """The Arrow schema of what Spark writes for ``spark_schema``: nullable but for the
    top-level columns ``not_null``, UTC timestamps."""
    as_nullable = nullable(spark_schema)
    assert isinstance(as_nullable, StructType)
    schema = to_arrow_schema(as_nullable, timezone="UTC")
    for name in not_null:
        index = schema.get_field_index(name)
        schema = schema.set(index, schema.field(index).with_nullable(False))
    return schema


def _shape(delta_type: Any) -> Any:
    """A Delta JSON type without nullability and metadata: what comparisons look at."""
    if isinstance(delta_type, dict):
        return {k: _shape(v) for k, v in delta_type.items()
                if k not in ("nullable", "metadata", "containsNull", "valueContainsNull")}
    if isinstance(delta_type, list):
        return [_shape(item) for item in delta_type]
    return delta_type


def _fields(schema: DeltaSchema) -> dict[str, dict[str, Any]]:
    return {f["name"]: f for f in json.loads(schema.to_json())["fields"]}


def _type_text(field: dict[str, Any]) -> str:
    kind = field["type"]
    return kind if isinstance(kind, str) else json.dumps(_shape(kind), separators=(",", ":"))


@dataclass(frozen=True)
class SchemaPlan:
    """What a write does to the table's schema: nothing, or add these (nullable) columns."""

    new_columns: tuple[str, ...]
    not_null: tuple[str, ...]  # table columns declared NOT NULL: their files may hold no null


def plan_schema(table: DeltaSchema, batch: DeltaSchema, schema_mode: str | None) -> SchemaPlan:
    have, incoming = _fields(table), _fields(batch)
    changed = [f"column {name}: table has {_type_text(have[name])}, batch has "
               f"{_type_text(field)}"
               for name, field in incoming.items()
               if name in have and _shape(have[name]["type"]) != _shape(field["type"])]
    added = tuple(name for name in incoming if name not in have)
    not_null = tuple(name for name, f in have.items() if not f["nullable"])
    problems = changed + ([] if schema_mode == "merge" else
                          [f"column {name} ({_type_text(incoming[name])}) is not in the table"
                           for name in added])
    problems += [f"column {name} is NOT NULL in the table and missing from the batch"
                 for name in not_null if name not in incoming]
    if problems:
        hints = []
        if changed:
            hints.append("a changed column type is refused even with schema_mode='merge'")
        if added and schema_mode != "merge":
            hints.append("pass schema_mode='merge' to add the new columns")
        raise SchemaChangeError("the batch's schema differs from the Delta table's: "
                                + "; ".join(problems)
                                + (f" ({'; '.join(hints)})" if hints else ""))
    return SchemaPlan(added, not_null)


def new_fields(batch: DeltaSchema, names: Sequence[str]) -> list[Field]:
    """The batch's fields called ``names``, nullable, for ``TableAlterer.add_columns``."""
    by_name = {f.name: f for f in batch.fields}
    return [Field(name, by_name[name].type, nullable=True) for name in names]


PARTITION_TYPES = (StringType, IntegralType, DateType, BooleanType)


def check_partition_columns(spark_schema: StructType, partition_by: Sequence[str],
                            table_partitions: Sequence[str] | None) -> None:
    """Partition columns exist, have a supported type, and match the table's when it exists."""
    types = {f.name: f.dataType for f in spark_schema}
    for name in partition_by:
        if name not in types:
            raise SchemaChangeError(f"partition column {name!r} is not in the batch's columns "
                                    f"({', '.join(types)})")
        if not isinstance(types[name], PARTITION_TYPES):
            raise SchemaChangeError(
                f"partition column {name!r} has type {types[name].simpleString()}; supported: "
                "string, integer types, date, boolean")
    if table_partitions is not None and list(partition_by) != list(table_partitions):
        raise SchemaChangeError(f"partition_by {list(partition_by)} differs from the table's "
                                f"partition columns {list(table_partitions)}")
    if len(partition_by) == len(types):
        raise SchemaChangeError("every column is a partition column: no data column is left")
