"""The read side of the ``sparklog`` source: ``spark.read`` and ``spark.readStream``.

Driver: ``read_options`` (the options, parsed once; ``client_options`` for ``kafka.*``),
``offsets`` (partition offsets and their JSON), ``offset_reader`` (Metadata and
ListOffsets), ``planning`` (ranges into tasks, rate limits), ``batch_reader`` and
``stream_reader``; ``typed_options`` (typed key / value columns' options). Executors:
``fetcher`` (Fetch), ``arrow_records`` (record batches to Arrow) and ``latest_per_key`` (a
range reduced to its keys' latest records). Both: ``data_loss``, ``typed_columns`` (schemas
resolved on the driver, values decoded in the tasks).

Invariant: importing this package imports nothing; each module is imported where it is
first needed, so Spark's planner process loads only what the query uses.
"""
