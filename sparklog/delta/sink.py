"""Exactly-once appends of Spark DataFrames to a Delta table: one Delta commit per batch.

How a batch is written (``DeltaSink.write``):

1. Skip: when the table already records a txn version >= ``version`` for every txn
   ``(app_id, version)`` of the batch, nothing runs (not even ``before_commit``).
2. Schema: the batch's schema is checked against the table's (``sparklog.delta.schema``);
   with ``schema_mode="merge"`` new columns are added first, in their own commit.
3. Stage: executors write Parquet with Spark's own writer (``df.write.partitionBy(...)``)
   into ``<table>/_sparklog/staging/<writer>-<uuid>/``. Earlier attempts of the same writer
   left there by a crash are deleted first. Timestamps are written as TIMESTAMP_MICROS.
4. ``before_commit()``: the caller's side effects that must happen before the batch becomes
   visible (the jobs produce dead letters here).
5. Publish: the driver moves the staged files to their final paths in the table (Hive-style
   partition directories, Spark's unique file names) and commits them with ONE Delta commit
   (delta-rs ``create_write_transaction``, or ``create_table_with_add_actions`` for a new
   table) that carries the txn actions.

Invariants:
- A batch's rows become visible all at once, in the commit that records its txn versions,
  and a batch whose versions are recorded is never written again: a replayed batch is a
  no-op. Delta's txn action is the only record; nothing is kept outside the table.
- Files of a batch that died before its commit are not in the Delta log, so no reader sees
  them: under ``_sparklog/`` (Delta ignores ``_`` directories; a write that fails with an
  exception deletes its own staging directory, and after a crash the next attempt deletes
  them) or, if it died while publishing, at final paths that ``DeltaTable.vacuum`` removes.
- Columns a write declares ``not_null`` are checked in the staged files (no null may be
  there) and are non-nullable in a table the write creates.
- One writer per app id at a time (Spark runs one instance of a streaming query per
  checkpoint). The txn check is repeated before publishing, but two writers racing on one
  app id are not fenced against each other.
- The table path is a local or shared (mounted) filesystem path visible to the driver and
  every executor: the driver moves the staged files.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake import Schema as DeltaSchema
from deltalake.transaction import create_table_with_add_actions

from sparklog.delta.files import StagedFile, staged_files
from sparklog.delta.schema import (
    SCHEMA_MODES,
    arrow_schema,
    check_partition_columns,
    new_fields,
    plan_schema,
)
from sparklog.faults import fault_point

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

WORK_DIR = "_sparklog"
STAGING = "staging"


@dataclass(frozen=True)
class BatchResult:
    """What ``write`` did: ``committed`` False means skipped (already in the table)."""

    committed: bool
    table_version: int | None  # the Delta version of this batch's commit, when committed
    rows: int
    files: int
    recorded_version: int | None = None  # when skipped: the txn version the table had


class DeltaSink:
    """Appends batches to the Delta table at ``table_path``; see the module docstring."""

    def __init__(self, table_path: str | os.PathLike[str], *, writer_id: str,
                 partition_by: Sequence[str] = (), schema_mode: str | None = None) -> None:
        if schema_mode not in SCHEMA_MODES:
            raise ValueError(f"schema_mode must be None (strict) or 'merge', got {schema_mode!r}")
        self.root = Path(table_path).absolute()
        self.writer_id = writer_id
        self.partition_by = list(partition_by)
        self.schema_mode = schema_mode
        digest = hashlib.sha256(writer_id.encode()).hexdigest()[:16]
        self.writer_key = f"w{digest}"  # safe in file names; stable for a writer id

    @property
    def work_dir(self) -> Path:
        """``<table>/_sparklog``: per-writer scratch space that Delta readers ignore."""
        return self.root / WORK_DIR

    def table(self) -> DeltaTable | None:
        return DeltaTable(str(self.root)) if DeltaTable.is_deltatable(str(self.root)) else None

    def recorded_version(self, app_id: str) -> int | None:
        """The txn version the table records for ``app_id`` (None: never written)."""
        table = self.table()
        return table.transaction_version(app_id) if table is not None else None

    def write(self, df: DataFrame, transactions: Sequence[Transaction], *,
              before_commit: Callable[[], None] | None = None,
              fault_tag: int | str | None = None,
              not_null: Sequence[str] = ()) -> BatchResult:
        if not transactions:
            raise ValueError("a batch needs at least one txn (app_id, version) to be idempotent")
        tag = fault_tag if fault_tag is not None else transactions[0].version
        table = self.table()
        if table is not None and (done := _all_recorded(table, transactions)) is not None:
            return BatchResult(False, None, 0, 0, recorded_version=done)

        batch_arrow = arrow_schema(df.schema, not_null)
        batch_delta = DeltaSchema.from_arrow(batch_arrow)
        table_partitions = table.metadata().partition_columns if table is not None else None
        partition_by = self.partition_by or list(table_partitions or [])
        check_partition_columns(df.schema, partition_by, table_partitions)
        checked = tuple(not_null)
        if table is not None:
            plan = plan_schema(table.schema(), batch_delta, self.schema_mode)
            checked = tuple(dict.fromkeys((*checked, *plan.not_null)))
            if plan.new_columns:
                log.info("adding columns %s to %s", ", ".join(plan.new_columns), self.root)
                table.alter.add_columns(new_fields(batch_delta, plan.new_columns))

        staging = self._staging_dir(tag)
        try:
            self._stage(df, partition_by, staging)
            files = staged_files(staging, partition_by)
            _check_not_null(files, checked)
            fault_point("staged", tag)
            if before_commit is not None:
                before_commit()
            table = self.table()
            if table is not None and (done := _all_recorded(table, transactions)) is not None:
                log.warning("%s was committed by another writer meanwhile", transactions)
                return BatchResult(False, None, 0, 0, recorded_version=done)
            version = self._publish(files, transactions, batch_arrow, partition_by, tag)
        finally:  # committed, skipped or failed: the staged files are of no more use
            shutil.rmtree(staging, ignore_errors=True)
        fault_point("after_commit", tag)
        return BatchResult(True, version, sum(f.rows for f in files), len(files))

    # -- staging ---------------------------------------------------------------------------

    def _staging_dir(self, tag: int | str) -> Path:
        """A new staging directory of this writer; earlier attempts' are deleted first."""
        base = self.work_dir / STAGING
        base.mkdir(parents=True, exist_ok=True)
        for stale in base.glob(f"{self.writer_key}-*"):
            log.info("removing %s, left by an attempt that did not commit", stale)
            shutil.rmtree(stale, ignore_errors=True)
        return base / f"{self.writer_key}-{tag}-{uuid.uuid4().hex[:12]}"

    def _stage(self, df: DataFrame, partition_by: list[str], staging: Path) -> None:
        with _session_conf(df.sparkSession, "spark.sql.parquet.outputTimestampType",
                           "TIMESTAMP_MICROS"):
            df.write.partitionBy(*partition_by).parquet(staging.as_uri())

    # -- publishing ------------------------------------------------------------------------

    def _publish(self, files: list[StagedFile], transactions: Sequence[Transaction],
                 batch_arrow: pa.Schema, partition_by: list[str], tag: int | str) -> int:
        """Move the files into place and commit them with the txn actions: the Delta version."""
        actions = []
        for i, staged in enumerate(files):
            target = self.root / staged.relative
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staged.path, target)
            if i == 0:
                fault_point("moving", tag)
            stat = target.stat()
            actions.append(staged.add_action(stat.st_size, int(stat.st_mtime * 1000)))
        fault_point("before_commit", tag)
        properties = CommitProperties(
            custom_metadata={"sparklog.writer": self.writer_id,
                             "sparklog.rows": sum(f.rows for f in files)},
            app_transactions=list(transactions))
        table = self.table()
        if table is None:
            create_table_with_add_actions(str(self.root), DeltaSchema.from_arrow(batch_arrow),
                                          actions, mode="append", partition_by=partition_by,
                                          commit_properties=properties)
            table = DeltaTable(str(self.root))
        else:
            table.create_write_transaction(actions, "append", table.schema(),
                                           partition_by=partition_by,
                                           commit_properties=properties)
        table.update_incremental()
        return table.version()


def _all_recorded(table: DeltaTable, transactions: Sequence[Transaction]) -> int | None:
    """The first txn's recorded version when every txn is already recorded, else None."""
    recorded = [table.transaction_version(t.app_id) for t in transactions]
    if all(r is not None and r >= t.version for r, t in zip(recorded, transactions, strict=True)):
        return recorded[0]
    return None


def _check_not_null(files: list[StagedFile], columns: Sequence[str]) -> None:
    for name in columns:
        nulls = sum(f.stats.get("nullCount", {}).get(name, 0) for f in files)
        if nulls:
            raise ValueError(f"column {name} is NOT NULL in the table but the batch has "
                             f"{nulls} null value(s) in it")


@contextmanager
def _session_conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    previous: Any = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if previous is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, previous)


def write_batch_exactly_once(df: DataFrame, batch_id: int, table_path: str | os.PathLike[str],
                             app_id: str, *, partition_by: Sequence[str] = (),
                             schema_mode: str | None = None,
                             before_commit: Callable[[], None] | None = None) -> BatchResult:
    """Append ``df`` as batch ``batch_id`` of ``app_id``, once: for ``foreachBatch``.

    A batch whose ``batch_id`` is at or below the version the table records for ``app_id``
    is skipped (``BatchResult.committed`` is False); otherwise its rows and the txn
    ``(app_id, batch_id)`` are committed together. ``before_commit`` runs after the files are
    written and before the commit, only for batches that are not skipped.
    """
    sink = DeltaSink(table_path, writer_id=app_id, partition_by=partition_by,
                     schema_mode=schema_mode)
    return sink.write(df, [Transaction(app_id, batch_id)], before_commit=before_commit,
                      fault_tag=batch_id)
