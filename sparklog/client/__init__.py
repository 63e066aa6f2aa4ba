"""What every client-side part of sparklog shares (the Spark source and sink, the jobs, the
command-line tools): Kafka client settings, topic administration, and a small synchronous
Kafka-protocol client.

Modules: ``settings`` (bootstrap servers, ``ClientConfig``, ``RetryPolicy``), ``cluster``
(``TopicPartition``, Metadata's ``Cluster``), ``errors``, ``connection`` (one broker) and
``kafka`` (``KafkaClient``: leader routing and retries).

Invariants: nothing here depends on the broker, storage, coordinator, pyspark or the data
source (only on ``sparklog.errors``, ``sparklog.protocol`` and ``sparklog.record``);
everything works against any Kafka-protocol broker. Importing the package imports nothing,
and ``settings`` and ``cluster`` import no protocol code, so Spark's planner stays cheap.
"""
