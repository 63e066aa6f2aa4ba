"""The jobs in ``sparklog.jobs`` against a real broker: crash-safety of ``stream_to_delta``,
idempotent backfills, dead-letter replay, table schemas from the broker's schema registry.

The streaming job runs as a child process (its own SparkSession) that a fault point
(``SPARKLOG_FAULT_POINT``) pauses at a named place; the test then SIGKILLs its whole process
group (driver, JVM, Python workers) and starts it again. The batch jobs run in-process on the
session's ``spark`` fixture.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from child_runner import ChildRunner
from deltalake import DeltaTable

from sparklog.broker.process import BrokerProcess
from sparklog.client.admin import ensure_topics
from sparklog.datasource import register
from sparklog.jobs import backfill, replay_dlq, stream_to_delta
from sparklog.jobs.settings import JobSettings
from sparklog.sample_events import SCHEMA, Produced, event, produce_events, read_topic
from sparklog.signals import Stop

pytestmark = pytest.mark.spark

JOB = [sys.executable, "-m", "sparklog.jobs.stream_to_delta"]


@pytest.fixture(scope="module")
def jobs_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("jobs-broker") / "data",
                       {"schema.registry.listeners": "http://127.0.0.1:0"}) as broker:
        yield broker


@pytest.fixture(scope="module")
def bootstrap(jobs_broker: BrokerProcess) -> str:
    return jobs_broker.bootstrap


def _table_ids(table: Path) -> list[int]:
    return DeltaTable(str(table)).to_pyarrow_table(columns=["id"]).column("id").to_pylist()


def _headers(record: tuple) -> dict[str, str]:
    return {k: (v or b"").decode() for k, v in record[4]}


def _stream_job(bootstrap: str, workdir: Path, topic: str, partitions: int, events: int,
                *args: str) -> tuple[ChildRunner, Produced, Path]:
    """``events`` sample events (2% bad) in a new topic, and a runner of stream_to_delta
    from it into ``<workdir>/table``."""
    ensure_topics(bootstrap, {topic: partitions})
    produced = produce_events(bootstrap, topic, events, bad_every=50)
    table = workdir / "table"
    runner = ChildRunner(workdir, [
        *JOB, "--bootstrap", bootstrap, "--topic", topic, "--table", str(table),
        "--checkpoint", str(workdir / "checkpoint"), "--schema", SCHEMA, *args])
    return runner, produced, table


@pytest.mark.timeout(900)  # four Spark starts in child processes on a shared machine
def test_stream_to_delta_survives_kills_at_every_step(bootstrap: str, tmp_path: Path) -> None:
    topic = "kill-events"
    runner, produced, table = _stream_job(
        bootstrap, tmp_path, topic, 3, 5000,
        "--set", "stream.maxOffsetsPerTrigger=1000")  # 5 micro-batches: 0..4

    # killed while publishing batch 0's files (its dead letters are out already)
    outcome, log = runner.run("moving:0")
    assert outcome == "killed", log
    assert not DeltaTable.is_deltatable(str(table))
    # batch 0 is replayed, its dead letters not sent twice; killed right before batch 1's
    # Delta commit (files in place, not in the log)
    outcome, log = runner.run("before_commit:1")
    assert outcome == "killed", log
    assert "batch 0: " in log and "sent by an earlier attempt" in log, log
    assert 0 < len(_table_ids(table)) < produced.good
    # killed after batch 2's Delta commit, before Spark recorded the batch as done
    outcome, log = runner.run("after_commit:2")
    assert outcome == "killed", log
    # the rest, as a long-running query stopped by SIGTERM once every good record is in
    outcome, log = runner.run(stop_when=lambda: len(_table_ids(table)) == produced.good,
                              extra=("--trigger", "processingTime=1s"))
    assert outcome == "exit 0 after SIGTERM", log
    assert "batch 2: skipped" in log, log
    assert "query stopped by signal" in log, log

    ids = _table_ids(table)
    assert len(ids) == len(set(ids)) == produced.good
    assert set(ids) == {i for i in range(5000) if i % 50 != 49}
    dead = read_topic(bootstrap, f"{topic}.dlq")
    origins = Counter((h["dlq.original.topic"], h["dlq.original.partition"],
                       h["dlq.original.offset"]) for h in map(_headers, dead))
    assert len(dead) == len(origins) == produced.bad, origins.most_common(3)
    classes = Counter(_headers(r)["dlq.error.class"] for r in dead)
    assert classes == {"MalformedJson": 25, "NotAnObject": 25, "MissingRequiredField": 25,
                       "SchemaMismatch": 25}
    assert all(_headers(r)["dlq.attempt"] == "1" for r in dead)
    source = {(p, o): v for p, o, _, v, _ in read_topic(bootstrap, topic)}
    assert all(source[(int(h["dlq.original.partition"]), int(h["dlq.original.offset"]))] == r[3]
               for r, h in zip(dead, map(_headers, dead), strict=True))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("stop_with", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_the_stream_with_exit_0_and_one_line(bootstrap: str, tmp_path: Path,
                                                           stop_with: signal.Signals) -> None:
    runner, produced, table = _stream_job(bootstrap, tmp_path, f"stop-by-{stop_with.name}", 2,
                                          500, "--trigger", "processingTime=1s")
    idle_since: list[float] = []

    def idle_after_the_first_batch() -> bool:  # waiting for records, between two batches
        if not idle_since and "batch 0: " in runner.log_path.read_text():
            idle_since.append(time.monotonic())
        return bool(idle_since) and time.monotonic() - idle_since[0] > 3

    outcome, log = runner.run(stop_when=idle_after_the_first_batch, stop_with=stop_with)
    assert outcome == f"exit 0 after {stop_with.name}", log
    assert "Traceback" not in log, log
    ours = [line.split(": ", 1)[1] for line in log[runner.signalled_at:].splitlines()
            if " sparklog." in line]
    assert ours == [f"query stopped by signal {stop_with.name}"], log
    assert len(_table_ids(table)) == produced.good


@pytest.mark.timeout(600)
def test_a_signal_in_the_middle_of_a_batch_is_quiet_too(bootstrap: str, tmp_path: Path) -> None:
    runner, produced, table = _stream_job(bootstrap, tmp_path, "stop-mid-batch", 2, 20000,
                                          "--trigger", "processingTime=1s")
    # "app id ..." is logged when the first batch starts; it takes seconds to write
    outcome, log = runner.run(stop_when=lambda: "app id " in runner.log_path.read_text())
    assert outcome == "exit 0 after SIGTERM", log
    assert "batch 0: " not in log[:runner.signalled_at], "the stop came between batches"
    after = log[runner.signalled_at:]
    # Spark interrupts its stream thread and reports it (WARN, InterruptedException and its
    # stack): none of that is shown
    noise = [line for line in after.splitlines()
             if "Exception" in line or "Traceback" in line or line.startswith("\tat ")
             or " ERROR " in line or " WARN " in line]
    assert noise == [], after
    ours = [line.split(": ", 1)[1] for line in after.splitlines() if " sparklog." in line]
    assert ours[-1:] == ["query stopped by signal SIGTERM"], after
    # the batch the stop cut short is in the table whole or not at all, and left no staged file
    ids = _table_ids(table) if DeltaTable.is_deltatable(str(table)) else []
    assert len(ids) in (0, produced.good) and len(set(ids)) == len(ids)
    assert not [p for p in (table / "_sparklog" / "staging").rglob("*") if p.is_file()]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("logging_flags", [[], ["-v"], ["--log-level", "warning"]])
def test_a_bad_schema_ends_a_job_with_one_line(tmp_path: Path, logging_flags: list[str]) -> None:
    """Also: the jobs take the tools' logging flags (``-v``, ``--log-level``)."""
    result = subprocess.run(
        [sys.executable, "-m", "sparklog.jobs.backfill", "--bootstrap-server", "127.0.0.1:1",
         "--topic", "t", "--table", str(tmp_path / "table"), "--schema", "id BIGNT NOT NULL",
         "--from-offsets", '{"t":{"0":0}}', "--to-offsets", '{"t":{"0":1}}', *logging_flags],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith(
        "--schema 'id BIGNT NOT NULL' is not a DDL schema: "), result.stderr
    assert not (tmp_path / "table").exists()


def _settings() -> JobSettings:
    return JobSettings.load()


def test_backfill_of_the_same_range_twice_adds_nothing(spark, bootstrap: str,
                                                      tmp_path: Path) -> None:
    register(spark)
    topic = "backfill-events"
    ensure_topics(bootstrap, {topic: 3})
    produce_events(bootstrap, topic, 600, bad_every=50)
    records = read_topic(bootstrap, topic)
    ends = {p: max(o for q, o, *_ in records if q == p) // 2 for p in range(3)}
    table = tmp_path / "table"
    argv = ["--bootstrap", bootstrap, "--topic", topic, "--table", str(table), "--schema", SCHEMA,
            "--from-offsets", json.dumps({topic: {str(p): -2 for p in range(3)}}),
            "--to-offsets", json.dumps({topic: {str(p): e for p, e in ends.items()}})]
    good_values = {event(i) for i in range(600) if i % 50 != 49}
    in_range = [r for r in records if r[1] < ends[r[0]]]
    expected = sorted(json.loads(r[3])["id"] for r in in_range if r[3] in good_values)

    assert backfill.run(spark, backfill.parse_args(argv), _settings()) == 0
    version = DeltaTable(str(table)).version()
    assert sorted(_table_ids(table)) == expected
    dead = read_topic(bootstrap, f"{topic}.dlq")
    assert len(dead) == len(in_range) - len(expected)

    assert backfill.run(spark, backfill.parse_args(argv), _settings()) == 0
    assert DeltaTable(str(table)).version() == version
    assert sorted(_table_ids(table)) == expected
    assert len(read_topic(bootstrap, f"{topic}.dlq")) == len(dead)

    # by time: everything produced so far, once
    by_time = ["--bootstrap", bootstrap, "--topic", topic, "--table", str(tmp_path / "t2"),
               "--schema", SCHEMA, "--from-time", "1970-01-01T00:00:00Z",
               "--to-time", str(int(time.time() * 1000) + 3_600_000)]
    for _ in range(2):
        assert backfill.run(spark, backfill.parse_args(by_time), _settings()) == 0
        assert sorted(_table_ids(tmp_path / "t2")) == sorted(
            json.loads(r[3])["id"] for r in records if r[3] in good_values)


def test_replay_dlq_moves_fixed_records_and_parks_hopeless_ones(spark, bootstrap: str,
                                                               tmp_path: Path) -> None:
    register(spark)
    topic, table = "replay-events", tmp_path / "table"
    ensure_topics(bootstrap, {topic: 2})
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    kinds = {}
    for i in range(90):
        kind = ("good", "fixable", "hopeless")[i % 3]
        kinds[i] = kind
        value = {"good": json.dumps({"id": i, "note": f"n{i}"}), "fixable": json.dumps({"id": i}),
                 "hopeless": f'{{"id": {i}, "note": '}[kind]
        producer.produce(topic, key=str(i).encode(), value=value.encode())
    assert producer.flush(30) == 0
    strict = "id BIGINT NOT NULL, note STRING NOT NULL"
    relaxed = "id BIGINT NOT NULL, note STRING"
    # The job that creates a table sets its schema, NOT NULL columns included, and a later
    # writer cannot relax one (Delta's rule): here the table is created by a backfill of an
    # empty range with the relaxed schema, so the fixed records may have no note.
    assert backfill.run(spark, backfill.parse_args([
        "--bootstrap", bootstrap, "--topic", topic, "--table", str(table), "--schema", relaxed,
        "--from-time", "0", "--to-time", "1"]), _settings()) == 0
    assert {f.name: f.nullable for f in DeltaTable(str(table)).schema().fields} == {
        "id": False, "note": True}
    assert backfill.run(spark, backfill.parse_args([
        "--bootstrap", bootstrap, "--topic", topic, "--table", str(table), "--schema", strict,
        "--from-time", "0", "--to-time", str(int(time.time() * 1000) + 3_600_000)]),
        _settings()) == 0

    def ids_of(kind: str) -> list[int]:
        return sorted(i for i, k in kinds.items() if k == kind)

    assert sorted(_table_ids(table)) == ids_of("good")
    dlq = f"{topic}.dlq"
    assert len(read_topic(bootstrap, dlq)) == 60

    argv = ["--bootstrap", bootstrap, "--dlq-topic", dlq, "--table", str(table),
            "--schema", relaxed, "--max-attempts", "3"]
    assert replay_dlq.run(spark, replay_dlq.parse_args(argv), _settings(), Stop()) == 0
    assert sorted(_table_ids(table)) == sorted(ids_of("good") + ids_of("fixable"))
    again = [h for h in map(_headers, read_topic(bootstrap, dlq)) if h["dlq.attempt"] != "1"]
    assert len(again) == 30 and {h["dlq.attempt"] for h in again} == {"2"}
    assert {h["dlq.error.class"] for h in again} == {"MalformedJson"}
    assert read_topic(bootstrap, f"{dlq}.parking") == []

    # the next run sees only the re-sent records: a third failure parks them
    assert replay_dlq.run(spark, replay_dlq.parse_args(argv), _settings(), Stop()) == 0
    parked = [_headers(r) for r in read_topic(bootstrap, f"{dlq}.parking")]
    assert len(parked) == 30 and {h["dlq.attempt"] for h in parked} == {"3"}
    assert {h["dlq.original.topic"] for h in parked} == {topic}
    assert len({(h["dlq.original.partition"], h["dlq.original.offset"]) for h in parked}) == 30
    assert len(read_topic(bootstrap, dlq)) == 90

    # nothing left: a third run changes nothing
    version = DeltaTable(str(table)).version()
    assert replay_dlq.run(spark, replay_dlq.parse_args(argv), _settings(), Stop()) == 0
    assert DeltaTable(str(table)).version() == version
    assert len(read_topic(bootstrap, f"{dlq}.parking")) == 30
    assert sorted(_table_ids(table)) == sorted(ids_of("good") + ids_of("fixable"))


USER_V1 = {"type": "record", "name": "User", "namespace": "test", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}
USER_V2 = {**USER_V1, "fields": [*USER_V1["fields"],
                                 {"name": "email", "type": ["null", "string"], "default": None}]}


def _produce_avro(jobs_broker: BrokerProcess, topic: str, schema: dict,
                  records: list[dict], *raw: bytes) -> None:
    """``records`` written by confluent-kafka's ``AvroSerializer`` (registering ``schema``
    as the subject's next version), then the ``raw`` values."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    registry = SchemaRegistryClient({"url": jobs_broker.schema_registry_url})
    serialize = AvroSerializer(registry, json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": jobs_broker.bootstrap, "enable.idempotence": True})
    for value in [serialize(r, context) for r in records] + list(raw):
        producer.produce(topic, value=value)
    assert producer.flush(30) == 0


@pytest.mark.timeout(600)
def test_stream_to_delta_takes_the_registry_schema_and_evolves_the_table(
        spark, jobs_broker: BrokerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    register(spark)
    bootstrap, topic, table = jobs_broker.bootstrap, "avro-users", tmp_path / "table"
    ensure_topics(bootstrap, {topic: 1})
    _produce_avro(jobs_broker, topic, USER_V1, [{"id": i, "name": f"u{i}"} for i in range(4)],
                  b"not avro at all")
    checkpoint = tmp_path / "checkpoint"
    argv = stream_to_delta.parse_args([
        "--bootstrap", bootstrap, "--topic", topic, "--table", str(table),
        "--checkpoint", str(checkpoint), "--schema-registry", jobs_broker.schema_registry_url,
        "--trigger", "availableNow"])
    settings = JobSettings.load(None, ["stream.maxOffsetsPerTrigger=2"])  # batches of 2

    # version 2 (a nullable field added) is registered while the job runs, after batch 0
    route_batch = stream_to_delta.route_batch

    def evolve_after_the_first_batch(*args: object, **kwargs: object) -> object:
        outcome = route_batch(*args, **kwargs)
        registry = SchemaRegistryClient({"url": jobs_broker.schema_registry_url})
        if len(registry.get_versions(f"{topic}-value")) == 1:
            registry.register_schema(f"{topic}-value", Schema(json.dumps(USER_V2), "AVRO"))
        return outcome

    monkeypatch.setattr(stream_to_delta, "route_batch", evolve_after_the_first_batch)

    def run() -> list[dict]:
        assert stream_to_delta.run(spark, argv, settings, Stop()) == 0
        return sorted(DeltaTable(str(table)).to_pyarrow_table().to_pylist(),
                      key=lambda row: row["id"])

    with caplog.at_level("INFO", "sparklog.jobs"):
        rows = run()
    assert rows == [{"id": i, "name": f"u{i}", "email": None} for i in range(4)]
    assert [f.name for f in DeltaTable(str(table)).schema().fields] == ["id", "name", "email"]
    said = [r.getMessage() for r in caplog.records if r.name.endswith("registry_values")]
    assert said[0].startswith(f"values decoded with subject {topic}-value version 1 (id ")
    evolved = [m for m in said if " -> version " in m]
    assert len(evolved) == 1 and evolved[0].endswith("adds column(s) email"), said
    assert len([r for r in caplog.records if r.getMessage().startswith("batch ")]) == 3
    dead = read_topic(bootstrap, f"{topic}.dlq")
    assert [r[3] for r in dead] == [b"not avro at all"]
    assert _headers(dead[0])["dlq.error.class"] == "UndecodableRecord"
    assert "unknown magic byte" in _headers(dead[0])["dlq.error.message"]

    # a replay: Spark runs the last batch again (its commit mark is gone); the table
    # records its txn, so no row and no dead letter is written twice
    commits = checkpoint / "commits"
    last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    assert last == 2
    (commits / str(last)).unlink()
    (commits / f".{last}.crc").unlink(missing_ok=True)
    version = DeltaTable(str(table)).version()
    caplog.clear()
    with caplog.at_level("INFO", "sparklog.jobs"):
        assert len(run()) == 4
    assert any(r.getMessage().startswith("batch 2: skipped") for r in caplog.records)
    assert DeltaTable(str(table)).version() == version
    assert len(read_topic(bootstrap, f"{topic}.dlq")) == 1

    # records of version 2 fill the new column; those of version 1 read it as null
    _produce_avro(jobs_broker, topic, USER_V2,
                  [{"id": i, "name": f"u{i}", "email": f"u{i}@x"} for i in (4, 5)])
    assert run() == ([{"id": i, "name": f"u{i}", "email": None} for i in range(4)]
                     + [{"id": i, "name": f"u{i}", "email": f"u{i}@x"} for i in (4, 5)])
    assert len(read_topic(bootstrap, f"{topic}.dlq")) == 1


def test_backfill_decodes_json_schema_values_from_the_registry(
        spark, jobs_broker: BrokerProcess, tmp_path: Path) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from sparklog.jobs.registry_values import RegistrySchemaError

    register(spark)
    bootstrap, topic, table = jobs_broker.bootstrap, "json-orders", tmp_path / "table"
    ensure_topics(bootstrap, {topic: 1})
    order = {"type": "object", "properties": {"id": {"type": "integer"},
                                              "item": {"type": "string"}}}
    serialize = JSONSerializer(json.dumps(order),
                               SchemaRegistryClient({"url": jobs_broker.schema_registry_url}))
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(3):
        producer.produce(topic, value=serialize({"id": i, "item": f"i{i}"}, context))
    producer.produce(topic, value=None)  # a tombstone: a bad record
    assert producer.flush(30) == 0
    argv = ["--bootstrap", bootstrap, "--topic", topic, "--table", str(table),
            "--schema-registry", jobs_broker.schema_registry_url,
            "--from-offsets", json.dumps({topic: {"0": -2}}),
            "--to-offsets", json.dumps({topic: {"0": -1}})]

    with pytest.raises(RegistrySchemaError, match="has a JSON schema"):
        backfill.run(spark, backfill.parse_args([*argv, "--value-format", "avro"]), _settings())
    assert backfill.run(spark, backfill.parse_args(argv), _settings()) == 0
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    assert sorted(rows, key=lambda r: r["id"]) == [{"id": i, "item": f"i{i}"} for i in range(3)]
    dead = read_topic(bootstrap, f"{topic}.dlq")
    assert [_headers(r)["dlq.error.class"] for r in dead] == ["NullValue"]

    # replay_dlq takes the subject of the topic the dead letters came from
    replay = ["--bootstrap", bootstrap, "--dlq-topic", f"{topic}.dlq", "--table", str(table),
              "--schema-registry", jobs_broker.schema_registry_url]
    assert replay_dlq.run(spark, replay_dlq.parse_args(replay), _settings(), Stop()) == 0
    again = [_headers(r) for r in read_topic(bootstrap, f"{topic}.dlq")]
    assert [(h["dlq.error.class"], h["dlq.attempt"]) for h in again] == [
        ("NullValue", "1"), ("NullValue", "2")]
