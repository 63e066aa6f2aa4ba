"""Committed-offset management for Kafka consumers: compare-and-set async commits, a sync
commit at shutdown, and a consumer loop built on them.

Invariant: this package works on confluent-kafka consumers alone; it imports nothing else
of sparklog and never pyspark (the Spark source's group commits,
``sparklog.datasource.group_offsets``, use it, not the other way round).
"""

from sparklog.offsets.committer import CommitFailedError, CommitResult, OffsetCommitter
from sparklog.offsets.consumer_loop import ConsumerLoop

__all__ = ["CommitFailedError", "CommitResult", "ConsumerLoop", "OffsetCommitter"]
