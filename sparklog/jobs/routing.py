"""One batch of records into Delta and the dead-letter topic: the exactly-once core every job
runs (``route_batch``).

Invariants:
- ``route_batch`` is the one place a batch is split and written: good rows go to Delta in one
  commit carrying the given txns, bad rows become dead letters sent (and confirmed) before
  that commit, and a batch whose txn the table already records runs nothing.
- A replayed batch sends only the dead letters an earlier attempt did not (the writer's
  intents live in ``dlq_state_dir``, next to its staging area), so every record read lands
  once in the table or once in a dead-letter topic.
- The batch is parsed once, kept on disk while both writes read it, and released after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pyspark import StorageLevel

from sparklog.delta.sink import BatchResult, DeltaSink
from sparklog.dlq.headers import DeadLetter
from sparklog.dlq.parse import bad_rows, good_rows
from sparklog.dlq.producer import DeadLetterProducer, SendResult
from sparklog.faults import fault_point

if TYPE_CHECKING:
    from deltalake import Transaction
    from pyspark.sql import DataFrame, Row
    from pyspark.sql.types import StructType


class ValueSpec(Protocol):
    """How a job turns values into table rows: ``sparklog.dlq.parse.ParseSpec`` (JSON and
    a DDL schema) or ``sparklog.jobs.registry_values.RegistryValues`` (the registry's)."""

    @property
    def schema(self) -> StructType: ...  # the good rows' columns

    @property
    def required(self) -> tuple[str, ...]: ...  # the columns declared NOT NULL

    def parse(self, df: DataFrame) -> DataFrame: ...  # adds the struct ``PARSED``

    def classify(self, value: bytes | None) -> tuple[str, str]: ...  # a bad value's error


def dead_letters(rows: Iterable[Row], spec: ValueSpec) -> Iterator[DeadLetter]:
    """Bad rows (``bad_rows``) as dead letters, each with its error."""
    for row in rows:
        value = bytes(row.value) if row.value is not None else None
        error_class, message = spec.classify(value)
        yield DeadLetter.from_record(
            key=bytes(row.key) if row.key is not None else None, value=value,
            headers=[(h.key, bytes(h.value) if h.value is not None else None)
                     for h in row.headers or ()],
            topic=row.topic, partition=row.partition, offset=row.offset,
            timestamp_ms=row.timestamp_ms, error_class=error_class, error_message=message)


@dataclass(frozen=True)
class BatchOutcome:
    delta: BatchResult
    dead_letters: SendResult | None  # None when skipped

    def describe(self) -> str:
        if not self.delta.committed:
            return f"skipped: the table already records txn version {self.delta.recorded_version}"
        dlq = self.dead_letters or SendResult(0, 0)
        bad = dlq.sent + dlq.already_sent
        again = f", {dlq.already_sent} sent by an earlier attempt" if dlq.already_sent else ""
        return (f"{self.delta.rows + bad} rows in, {self.delta.rows} good, {bad} bad{again}; "
                f"committed as Delta version {self.delta.table_version}")


def route_batch(df: DataFrame, spec: ValueSpec, sink: DeltaSink,
                transactions: Sequence[Transaction], dlq: DeadLetterProducer, batch_key: str,
                destination: Callable[[DeadLetter], str]) -> BatchOutcome:
    """Write a batch's good rows to Delta once and its bad rows to ``destination(letter)``."""
    # parsed once for both the Delta files and the dead letters; on disk, which measured as
    # fast as memory here and leaves the executors' heap alone
    parsed = spec.parse(df).persist(StorageLevel.DISK_ONLY)
    sent: list[SendResult] = []

    def send_dead_letters() -> None:
        rows = bad_rows(parsed, spec).toLocalIterator(prefetchPartitions=True)
        letters = dead_letters(rows, spec)
        sent.append(dlq.send(batch_key, ((destination(letter), letter) for letter in letters)))
        fault_point("dead_letters_sent", batch_key)

    try:
        result = sink.write(good_rows(parsed, spec), transactions,
                            before_commit=send_dead_letters, fault_tag=batch_key,
                            not_null=spec.required)
    finally:
        parsed.unpersist()
    dlq.forget()  # committed now, or earlier (skipped): no intent is needed any more
    return BatchOutcome(result, sent[0] if sent else None)


def dlq_state_dir(sink: DeltaSink) -> Path:
    """Where a writer keeps its dead-letter intents: next to its staging area."""
    return sink.work_dir / "dlq" / sink.writer_key
