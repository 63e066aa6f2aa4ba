"""The write side of the ``sparklog`` source: ``df.write`` and ``df.writeStream``.

``write_options`` (the options and the input schema, checked on the driver), ``producer``
(one confluent-kafka producer per task, every delivery checked) and ``writer`` (Spark's
batch and streaming Arrow writers).

Invariant: importing this package imports nothing; the writer imports the producer.
"""
