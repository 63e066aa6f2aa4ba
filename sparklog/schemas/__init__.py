"""Client-side schemas: Confluent's wire format, Avro and JSON Schema as Arrow (and so Spark)
types, decoders into Arrow, encoders from Arrow, and a Confluent-compatible registry's
lookups and registrations.

``wire`` (the 5-byte framing), ``avro_types`` and ``json_types`` (schema -> Arrow type, the
way Spark's ``SchemaConverters.toSqlType`` and ``from_json`` map them), ``avro_decode`` and
``json_decode`` (encoded values -> one Arrow array), ``registry`` (choosing a subject's
schema, writer schemas by id); ``spark_to_avro`` and ``spark_to_json_schema`` (Spark type ->
schema), ``encode``, ``avro_columnar`` and ``json_columnar`` (Arrow columns -> encoded
values), ``registry_client`` (sparklog's registry client: lookups and a writer's
registration). The Spark source, the sink and the jobs share them.

Invariant: importing this package imports nothing; nothing here imports sparklog beyond
``sparklog.errors``, and Spark types arrive in their JSON form (``DataType.jsonValue()``), so
no module needs pyspark; each module is imported where it is first needed.
"""
