"""Client-side schemas: Confluent's wire format, Avro and JSON Schema as Arrow (and so Spark)
types, decoders into Arrow, and schema lookups in a Confluent-compatible registry.

``wire`` (the 5-byte framing), ``avro_types`` and ``json_types`` (schema -> Arrow type, the
way Spark's ``SchemaConverters.toSqlType`` and ``from_json`` map them), ``avro_decode`` and
``json_decode`` (encoded values -> one Arrow array), ``registry`` (choosing a subject's
schema, writer schemas by id). The Spark source, the sink and the jobs share them.

Invariant: nothing here imports sparklog beyond ``sparklog.errors``; each module is
imported where it is first needed.
"""
