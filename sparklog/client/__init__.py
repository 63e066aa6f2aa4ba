"""What every client-side part of sparklog shares (the Spark source and sink, the jobs, the
command-line tools): Kafka client settings, topic administration, and a small synchronous
Kafka-protocol client.

Invariant: nothing here depends on the broker or storage; everything works against any
Kafka-protocol broker.
"""
