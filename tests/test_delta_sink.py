"""The exactly-once Delta sink (``sparklog.delta``) against the session's local Spark.

Each test writes a fresh table under ``tmp_path`` and reads it back with delta-rs.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Transaction

from sparklog.delta import DeltaSink, SchemaChangeError, write_batch_exactly_once

pytestmark = pytest.mark.spark


def _rows(table: Path, order: str = "id") -> list[dict]:
    return sorted(DeltaTable(str(table)).to_pyarrow_table().to_pylist(), key=lambda r: r[order])


def _events(spark, start: int, count: int, extra: str = ""):
    return spark.sql(f"SELECT id, concat('user-', id % 3) AS user, id * 1.5 AS amount{extra} "
                     f"FROM range({start}, {start + count})")


def test_a_replayed_batch_is_written_once(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    calls: list[int] = []
    first = write_batch_exactly_once(_events(spark, 0, 10), 0, table, "app-1",
                                     before_commit=lambda: calls.append(0))
    assert first.committed and first.rows == 10 and first.table_version == 0
    again = write_batch_exactly_once(_events(spark, 0, 10), 0, table, "app-1",
                                     before_commit=lambda: calls.append(1))
    assert not again.committed and again.recorded_version == 0
    assert calls == [0]  # side effects run only for the batch that commits
    assert [r["id"] for r in _rows(table)] == list(range(10))

    assert write_batch_exactly_once(_events(spark, 10, 5), 1, table, "app-1").committed
    assert not write_batch_exactly_once(_events(spark, 0, 5), 0, table, "app-1").committed
    other = write_batch_exactly_once(_events(spark, 100, 2), 0, table, "app-2")
    assert other.committed  # another app id has its own versions
    dt = DeltaTable(str(table))
    assert dt.transaction_version("app-1") == 1 and dt.transaction_version("app-2") == 0
    assert len(_rows(table)) == 17


def test_an_empty_batch_still_records_its_version(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_batch_exactly_once(_events(spark, 0, 3), 0, table, "app")
    empty = write_batch_exactly_once(_events(spark, 0, 0), 1, table, "app")
    assert empty.committed and empty.rows == 0 and empty.files == 0
    assert DeltaTable(str(table)).transaction_version("app") == 1
    assert len(_rows(table)) == 3


def test_partition_by_writes_hive_directories_and_values(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    df = spark.sql("SELECT id, CASE id % 3 WHEN 0 THEN 'a/b=c %' WHEN 1 THEN NULL ELSE 'x' END "
                   "AS region, DATE'2024-05-01' + CAST(id % 2 AS INT) AS day, "
                   "CASE WHEN id % 4 = 0 THEN NULL ELSE concat('n', id) END AS note "
                   "FROM range(12)")
    result = write_batch_exactly_once(df, 0, table, "app", partition_by=["region", "day"])
    assert result.committed and result.rows == 12
    dt = DeltaTable(str(table))
    assert dt.metadata().partition_columns == ["region", "day"]
    rows = _rows(table)
    assert [(r["id"], r["region"], r["day"].isoformat()) for r in rows] == [
        (i, ["a/b=c %", None, "x"][i % 3], f"2024-05-0{1 + i % 2}") for i in range(12)]
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    assert {(a["partition.region"], str(a["partition.day"])) for a in adds} == {
        (region, f"2024-05-0{d}") for region in ("a/b=c %", None, "x") for d in (1, 2)}
    assert all(a["path"].startswith("region=") for a in adds)
    assert sum(a["num_records"] for a in adds) == 12
    # every file's statistics are those of its own rows (read back from the data itself)
    for add in adds:
        data = pq.read_table(table / unquote(add["path"]), columns=["id", "note"]).to_pylist()
        ids = [row["id"] for row in data]
        notes = [row["note"] for row in data if row["note"] is not None]
        assert add["num_records"] == len(data)
        assert (add["min.id"], add["max.id"], add["null_count.id"]) == (min(ids), max(ids), 0)
        assert add["null_count.note"] == len(data) - len(notes)
        if notes:
            assert (add["min.note"], add["max.note"]) == (min(notes), max(notes))
    # appending without partition_by uses the table's partitioning
    assert write_batch_exactly_once(df.where("id < 3"), 1, table, "app").rows == 3
    with pytest.raises(SchemaChangeError, match="differs from the table's partition columns"):
        write_batch_exactly_once(df, 2, table, "app", partition_by=["day"])


def test_a_schema_change_is_refused_unless_merging(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_batch_exactly_once(_events(spark, 0, 4), 0, table, "app")
    wider = _events(spark, 4, 2, extra=", id % 2 = 0 AS even")
    with pytest.raises(SchemaChangeError, match=r"column even \(boolean\) is not in the table.*"
                                                r"schema_mode='merge'"):
        write_batch_exactly_once(wider, 1, table, "app")
    retyped = spark.sql("SELECT CAST(id AS STRING) AS id, 'u' AS user, 1.0D AS amount "
                        "FROM range(2)")
    with pytest.raises(SchemaChangeError, match="column id: table has long, batch has string"):
        write_batch_exactly_once(retyped, 1, table, "app", schema_mode="merge")
    assert DeltaTable(str(table)).transaction_version("app") == 0  # nothing was committed

    merged = write_batch_exactly_once(wider, 1, table, "app", schema_mode="merge")
    assert merged.committed
    assert [(r["id"], r["even"]) for r in _rows(table)] == [
        (0, None), (1, None), (2, None), (3, None), (4, True), (5, False)]
    # a batch without a (nullable) table column is fine: it reads as null
    assert write_batch_exactly_once(spark.sql("SELECT 9L AS id"), 2, table, "app").committed
    assert _rows(table)[-1] == {"id": 9, "user": None, "amount": None, "even": None}
    with pytest.raises(ValueError, match="schema_mode"):
        DeltaSink(table, writer_id="w", schema_mode="overwrite")


def test_a_batch_that_fails_before_its_commit_leaves_nothing_visible(
        spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "t"
    write_batch_exactly_once(_events(spark, 0, 5), 0, table, "app")

    def boom() -> None:
        raise RuntimeError("dead-letter topic unreachable")

    with pytest.raises(RuntimeError, match="unreachable"):
        write_batch_exactly_once(_events(spark, 5, 5), 1, table, "app", before_commit=boom)
    # the failed write removed the files it staged, and none was visible
    assert not [p for p in (table / "_sparklog" / "staging").rglob("*") if p.is_file()]
    assert len(_rows(table)) == 5

    # dies while committing: the files are already at their final paths, but not in the log
    def no_commit(*args: object, **kwargs: object) -> None:
        raise OSError("killed mid-commit")

    monkeypatch.setattr(DeltaTable, "create_write_transaction", no_commit)
    with pytest.raises(OSError, match="mid-commit"):
        write_batch_exactly_once(_events(spark, 5, 5), 1, table, "app")
    monkeypatch.undo()
    assert len(_rows(table)) == 5
    logged = set(pa.table(DeltaTable(str(table)).get_add_actions()).column("path").to_pylist())
    orphans = [p.relative_to(table).as_posix() for p in table.glob("*.parquet")
               if p.relative_to(table).as_posix() not in logged]
    assert orphans

    retried = write_batch_exactly_once(_events(spark, 5, 5), 1, table, "app")
    assert retried.committed and [r["id"] for r in _rows(table)] == list(range(10))
    assert not list((table / "_sparklog" / "staging").iterdir())  # earlier attempts removed
    removed = DeltaTable(str(table)).vacuum(retention_hours=0, dry_run=False,
                                            enforce_retention_duration=False, full=True)
    assert {Path(p).name for p in removed} >= {Path(p).name for p in orphans}
    assert [r["id"] for r in _rows(table)] == list(range(10))


def test_not_null_columns_are_non_nullable_in_a_new_table(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink = DeltaSink(table, writer_id="app")
    sink.write(_events(spark, 0, 3), [Transaction("app", 0)], not_null=("id",))
    fields = {f.name: f.nullable for f in DeltaTable(str(table)).schema().fields}
    assert fields == {"id": False, "user": True, "amount": True}
    # a null in a declared NOT NULL column is refused before anything is visible
    nulls = _events(spark, 3, 3).selectExpr("IF(id = 4, NULL, id) AS id", "user", "amount")
    with pytest.raises(ValueError, match="column id is NOT NULL in the table but the batch "
                                         "has 1 null value"):
        sink.write(nulls, [Transaction("app", 1)])
    assert len(_rows(table)) == 3
    assert not [p for p in (table / "_sparklog" / "staging").rglob("*") if p.is_file()]


def test_commit_info_names_the_writer(spark, tmp_path: Path) -> None:
    table = tmp_path / "t"
    write_batch_exactly_once(_events(spark, 0, 3), 7, table, "job-x")
    (info,) = DeltaTable(str(table)).history(1)
    assert info["sparklog.writer"] == "job-x" and info["sparklog.rows"] == 3
    log_line = next(json.loads(line) for line in
                    (table / "_delta_log" / "00000000000000000000.json").read_text().splitlines()
                    if '"txn"' in line)
    assert log_line["txn"]["appId"] == "job-x" and log_line["txn"]["version"] == 7
