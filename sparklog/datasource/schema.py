"""Spark's Kafka source schema, as a Spark StructType and as the exact Arrow schema.

Invariant: ``arrow_source_schema`` EQUALS
``pyspark.sql.pandas.types.to_arrow_schema(source_schema(h), timezone="UTC")``, nullability
included, which pyspark 4.2 requires of the first Arrow batch a reader yields. With typed
columns (``key_type`` / ``value_type``: the Arrow types ``sparklog.schemas`` maps a schema
to), the ``key`` or ``value`` column is that type's Spark type (``from_arrow_type``), always
nullable (a tombstone, a record skipped), and the Arrow schema is pyspark's own
``to_arrow_schema`` of the Spark schema.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def source_schema(include_headers: bool, key_type: pa.DataType | None = None,
                  value_type: pa.DataType | None = None) -> StructType:
    fields = [
        StructField("key", _spark_type(key_type)),
        StructField("value", _spark_type(value_type)),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    return StructType(fields)


def _spark_type(arrow_type: pa.DataType | None) -> DataType:
    if arrow_type is None:
        return BinaryType()
    from pyspark.sql.pandas.types import from_arrow_type

    return from_arrow_type(arrow_type)


def arrow_source_schema(include_headers: bool, key_type: pa.DataType | None = None,
                        value_type: pa.DataType | None = None) -> pa.Schema:
    if key_type is not None or value_type is not None:
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(source_schema(include_headers, key_type, value_type),
                               timezone="UTC")
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
        fields.append(pa.field("headers", pa.list_(header)))
    return pa.schema(fields)
