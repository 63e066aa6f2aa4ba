"""Committed-offset management for Kafka consumers: compare-and-set async commits, a sync
commit at shutdown, and a consumer loop built on them (usable without Spark)."""

from sparklog.offsets.committer import CommitFailedError, CommitResult, OffsetCommitter
from sparklog.offsets.consumer_loop import ConsumerLoop

__all__ = ["CommitFailedError", "CommitResult", "ConsumerLoop", "OffsetCommitter"]
