"""Executor side: read one task's offset range with Kafka Fetch requests, as Arrow batches.

Invariants:
- ``read_partition`` yields exactly the records of offsets in [start, until) that exist in
  the log, in offset order, in Arrow batches of bounded size; for a given range the output
  is the same on every run (as long as the log still holds the range).
- Memory is bounded: one Fetch answer (``fetch.max.bytes``, default 8 MiB, or one batch if
  larger) is decoded while the next one is in flight (a prefetch, sent before decoding so
  the broker and the decoder overlap), plus one Arrow chunk being built.
- Offsets absent inside the range (compaction, transaction markers) are skipped silently.
  Offsets below the log start (retention, DeleteRecords) and offsets past the log end
  (truncation, deleted topic) are data loss, reported per ``failOnDataLoss``: fail, or log
  and go on from the log start (or stop at the log end).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa

from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, KafkaClient
from sparklog.datasource.read.arrow_records import (
    first_batch_size,
    new_record_builder,
    next_position,
)
from sparklog.datasource.read.data_loss import report_data_loss
from sparklog.datasource.read.offsets import TopicPartition
from sparklog.datasource.read.planning import KafkaInputPartition
from sparklog.errors import ErrorCode, error_name
from sparklog.record.transactions import committed_only


def read_partition(task: KafkaInputPartition) -> Iterator[pa.RecordBatch]:
    settings = task.settings
    tp = task.topic_partition
    hints = {tp: task.leader} if task.leader is not None else {}
    with KafkaClient(settings.client, settings.retry, hints) as client:
        builder = new_record_builder(task.topic, task.partition, settings.include_headers)
        for records, first in fetch_records(client, tp, task.start, task.until,
                                            settings.fail_on_data_loss):
            yield from builder.add(records, first, task.until)
        if builder.rows:
            yield builder.build()


def fetch_records(client: KafkaClient, tp: TopicPartition, start: int, until: int,
                  fail_on_data_loss: bool) -> Iterator[tuple[bytes, int]]:
    """Raw record batches covering [start, until), each with the first offset that exists.

    The batches may hold records outside the range, and below the log start (a deletion
    does not rewrite the batch holding the new log start): keep only [first, until).
    """
    position = first = start
    fetch_bytes = client.config.fetch_max_bytes
    while position < until:
        fetched = client.fetch(tp, position, fetch_bytes)
        if fetched.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            position = first = _after_out_of_range(client, tp, position, until,
                                                   fail_on_data_loss)
            continue
        if fetched.error_code != ErrorCode.NONE:
            raise KafkaClientError(f"Fetch for {tp} at offset {position} failed: "
                                   f"{error_name(fetched.error_code)}")
        following = next_position(fetched.records, position)
        if following == position:  # no complete batch at or after the position
            needed = first_batch_size(fetched.records)
            if needed is not None and needed > fetch_bytes:
                fetch_bytes = needed  # one batch larger than fetch.max.bytes: fetch it whole
                continue
            if fetched.records:
                raise KafkaClientError(f"Fetch for {tp} at offset {position} returned no "
                                       "record batch at or after that offset")
            if fetched.readable_end > position:
                position = min(until, fetched.readable_end)  # [position, end): compacted away
                continue
            report_data_loss(fail_on_data_loss,
                             f"{tp}: offsets [{position}, {until}) do not exist, the log ends "
                             f"at {fetched.readable_end} (it was truncated or recreated)")
            return
        fetch_bytes = client.config.fetch_max_bytes
        if following < until:
            client.prefetch(tp, following, fetch_bytes)
        yield committed_only(fetched.records, fetched.aborted), first
        position = following


def _after_out_of_range(client: KafkaClient, tp: TopicPartition, position: int, until: int,
                        fail_on_data_loss: bool) -> int:
    """Where to go on after OFFSET_OUT_OF_RANGE at ``position``."""
    deadline = time.monotonic() + client.retry.timeout_s
    while True:
        earliest = client.offsets_at([tp], EARLIEST_TIMESTAMP)[tp]
        latest = client.offsets_at([tp], LATEST_TIMESTAMP)[tp]
        if position < earliest:
            report_data_loss(fail_on_data_loss,
                             f"{tp}: offsets [{position}, {min(earliest, until)}) were deleted, "
                             f"the log now starts at offset {earliest}")
            return earliest
        if position > latest:
            report_data_loss(fail_on_data_loss,
                             f"{tp}: offsets [{position}, {until}) do not exist, the log ends at "
                             f"{latest} (it was truncated or recreated)")
            return until
        if time.monotonic() > deadline:  # the leader keeps refusing an offset it lists
            raise KafkaClientError(f"Fetch for {tp} at offset {position} keeps failing with "
                                   f"OFFSET_OUT_OF_RANGE although the log holds [{earliest}, "
                                   f"{latest})")
        time.sleep(client.retry.backoff_s)
