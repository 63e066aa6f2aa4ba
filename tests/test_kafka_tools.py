"""Kafka's tools and flags, typed from memory, against a real broker: the action flags
(``topics --list``, ``groups --describe``), ``--bootstrap-server``
everywhere, ``-v``/``--log-level`` anywhere, ``--version``, plain help; the console tools'
``--property`` settings and client settings (``--producer-property``, ``--consumer-property``,
``--command-config``); ``groups`` (``--all-groups``, ``--members``, ``--state``,
``--to-current``, ``--by-duration``, ``--export``/``--from-file``, the out-of-range warning);
``configs``; ``get-offsets``; ``delete-records``; ``dump-log --files --offsets-decoder`` and
snapshots; ``perf`` and ``verifiable``.

The tools run in-process through ``sparklog.cli.main`` (stdout and stderr captured); the
checks read what the broker stored with other clients (confluent-kafka, kafka-python's
classes through ``stored_batches``) where the tool's own output would prove nothing.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    Cluster,
    Rec,
    create_topic,
    module_broker,
    produce_confluent,
    start_broker,
    stored_batches,
    unique_topic,
    wait_until,
    watermarks,
    zk_client,
    zookeeper,
)
from confluent_kafka import Consumer, Producer, TopicPartition

from sparklog import __version__
from sparklog.broker.process import BrokerProcess
from sparklog.cli import build_parser, main
from sparklog.jobs import backfill, replay_dlq, stream_to_delta
from sparklog.jobs.settings import job_parser
from sparklog.record.batch import BatchHeader

pytestmark = pytest.mark.timeout(120)

broker = module_broker({"group.initial.rebalance.delay.ms": "0",
                        "offsets.topic.num.partitions": "1", "log.segment.bytes": "1048576"})
__all__ = ["broker", "zookeeper"]

CODEC_LZ4, CODEC_GZIP = 3, 1


class Run:
    """``sparklog ARGV --bootstrap-server BROKER`` in-process: (exit code, stdout, stderr),
    argparse's usage errors (exit 2) included."""

    def __init__(self, broker: BrokerProcess, capsys: pytest.CaptureFixture[str],
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.broker, self.capsys, self.monkeypatch = broker, capsys, monkeypatch

    def __call__(self, *argv: str, stdin: str | None = None,
                 bootstrap: bool = True) -> tuple[int, str, str]:
        if stdin is not None:
            self.monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        self.capsys.readouterr()
        extra = ["--bootstrap-server", self.broker.bootstrap] if bootstrap else []
        try:
            code = main([*argv, *extra])
        except SystemExit as exc:  # argparse's usage errors
            code = int(exc.code or 0)
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *argv: str, stdin: str | None = None, bootstrap: bool = True) -> str:
        code, out, err = self(*argv, stdin=stdin, bootstrap=bootstrap)
        assert code == 0, err
        return out


@pytest.fixture
def run(broker: BrokerProcess, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> Run:
    return Run(broker, capsys, monkeypatch)


@pytest.fixture
def topic(request: pytest.FixtureRequest, broker: BrokerProcess) -> str:
    return create_topic(broker.bootstrap, unique_topic(request.node.name), partitions=2)


def all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += all_parsers(sub)
    return found


def batch_codecs(broker: BrokerProcess, topic: str) -> set[int]:
    return {header.attributes & 0x07 for header in stored_batches(broker, topic)}


# -- flags every tool takes ---------------------------------------------------------------------


def test_every_tool_and_job_takes_bootstrap_server() -> None:
    parsers = [*all_parsers(build_parser()), job_parser("a job")]
    connecting = [p for p in parsers if "--bootstrap" in p._option_string_actions]
    assert len(connecting) >= 19  # topics x5, groups x4, perf x2, verifiable x2, a job...
    for parser in connecting:
        assert "--bootstrap-server" in parser._option_string_actions, parser.prog


@pytest.mark.parametrize("argv", [
    ["-v", "groups", "list", "--bootstrap-server", "b:1"],
    ["groups", "-v", "list", "--bootstrap-server", "b:1"],
    ["groups", "list", "--bootstrap-server", "b:1", "-v"],
    ["groups", "list", "--log-level", "debug", "--bootstrap-server", "b:1"],
])
def test_logging_flags_are_taken_anywhere(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).log_level == "DEBUG"


def test_the_default_log_level_is_info_and_the_last_flag_wins() -> None:
    parser = build_parser()
    assert parser.parse_args(["groups", "list", "--bootstrap", "b:1"]).log_level == "INFO"
    args = parser.parse_args(["-v", "groups", "list", "--bootstrap", "b:1",
                              "--log-level", "WARNING"])
    assert args.log_level == "WARNING"


def test_version() -> None:
    result = subprocess.run([sys.executable, "-m", "sparklog.cli", "--version"],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout) == (0, f"sparklog {__version__}\n")


def test_help_texts_have_no_markup(capsys: pytest.CaptureFixture[str]) -> None:
    for parser in all_parsers(build_parser()):
        text = parser.format_help()
        assert "``" not in text, f"{parser.prog}:\n{text}"
    for job in (stream_to_delta, backfill, replay_dlq):
        with pytest.raises(SystemExit):
            job.parse_args(["--help"])
        assert "``" not in capsys.readouterr().out, job.__name__


@pytest.mark.parametrize("kafka_form, sparklog_form", [
    (["topics", "--bootstrap-server", "b:1", "--list"], ["topics", "list"]),
    (["topics", "--create", "--topic", "t", "--partitions", "2"],
     ["topics", "create", "--topic", "t", "--partitions", "2"]),
    (["topics", "--topic", "t", "--describe", "--under-replicated-partitions"],
     ["topics", "describe", "--topic", "t", "--under-replicated-partitions"]),
    (["topics", "--alter", "--topic", "t", "--partitions", "3"],
     ["topics", "alter", "--topic", "t", "--partitions", "3"]),
    (["topics", "--delete", "--topic", "t", "--if-exists"],
     ["topics", "delete", "--topic", "t", "--if-exists"]),
    (["groups", "--list", "--state"], ["groups", "list", "--state"]),
    (["groups", "--describe", "--group", "list", "--members"],
     ["groups", "describe", "--group", "list", "--members"]),
    (["groups", "--group", "g", "--reset-offsets", "--all-topics", "--to-earliest"],
     ["groups", "reset-offsets", "--group", "g", "--all-topics", "--to-earliest"]),
    (["groups", "--delete", "--group", "g"], ["groups", "delete", "--group", "g"]),
    (["groups", "--delete-offsets", "--group", "g", "--topic", "t"],
     ["groups", "delete-offsets", "--group", "g", "--topic", "t"]),
    (["-v", "acls", "--add", "--topic", "t", "--allow-principal", "User:a"],
     ["-v", "acls", "add", "--topic", "t", "--allow-principal", "User:a"]),
])
def test_kafkas_action_flags_are_the_actions(kafka_form: list[str],
                                             sparklog_form: list[str]) -> None:
    """``topics --list`` is ``topics list`` with the same options, for every command with
    actions (one mechanism: the action flag may come anywhere after the command)."""
    parser = build_parser()
    bootstrap = [] if "--bootstrap-server" in kafka_form else ["--bootstrap-server", "b:1"]
    parsed = vars(parser.parse_args([*kafka_form, *bootstrap]))
    expected = vars(parser.parse_args([*sparklog_form, "--bootstrap-server", "b:1"]))
    assert parsed.pop("func").__qualname__ == expected.pop("func").__qualname__
    assert parsed == expected


def test_no_action_or_two_are_named_in_both_forms(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["topics", "--bootstrap-server", "b:1"],
                 ["topics", "--list", "--delete", "--bootstrap-server", "b:1"]):
        with pytest.raises(SystemExit) as exited:
            build_parser().parse_args(argv)
        assert exited.value.code == 2
        assert ("give exactly one action: create, list, describe, alter, delete (or as Kafka's "
                "tools: --create, --list, --describe, --alter, --delete)"
                ) in capsys.readouterr().err
    (topics,) = [p for p in all_parsers(build_parser()) if p.prog == "sparklog topics"]
    assert "sparklog topics --bootstrap-server B --create is sparklog topics create" in " ".join(
        topics.format_help().split())


def test_topics_in_kafkas_flag_form_against_a_broker(run: Run, topic: str) -> None:
    assert run.ok("topics", "--create", "--topic", f"{topic}-flags") == (
        f"Created topic {topic}-flags.\n")
    assert f"{topic}-flags" in run.ok("topics", "--list").splitlines()
    assert run.ok("topics", "--delete", "--topic", f"{topic}-flags") == (
        f"Deleted topic {topic}-flags.\n")


# -- console producer and consumer --------------------------------------------------------------


def test_console_tools_take_kafkas_properties(run: Run, topic: str) -> None:
    run.ok("produce", "--topic", topic, "--partition", "1",
           "--property", "parse.key=true", "key.separator=:",
           "--property", "parse.headers=true", "headers.delimiter=|",
           stdin="h1:a,h2|k1:v1\n|k2:v2\n")
    out = run.ok("consume", "--topic", topic, "--partition", "1", "--from-beginning",
                 "--max-messages", "2", "--property", "print.key=true", "print.offset=true",
                 "print.partition=true", "print.headers=true", "key.separator= | ")
    assert out.splitlines() == ["Partition:1 | Offset:0 | h1:a,h2:null | k1 | v1",
                                "Partition:1 | Offset:1 | NO_HEADERS | k2 | v2"]


def test_console_consumer_formatter_properties(run: Run, topic: str) -> None:
    produce_confluent(run.broker.bootstrap, topic, [Rec(None, b"v", partition=0),
                                                    Rec(b"k", None, partition=0)])
    out = run.ok("consume", "--topic", topic, "--partition", "0", "--from-beginning",
                 "--max-messages", "2", "--property", "print.key=true", "print.value=false",
                 "null.literal=<none>", "line.separator=;", "print.timestamp=true")
    first, second, rest = out.split(";")
    assert first.startswith("CreateTime:") and first.endswith("\t<none>")
    assert second.endswith("\tk") and rest == ""


def test_an_unknown_property_is_named_with_the_nearest(run: Run, topic: str) -> None:
    code, out, err = run("consume", "--topic", topic, "--property", "print.kye=true")
    assert code == 2 and out == ""
    assert "unknown --property 'print.kye' (did you mean 'print.key'?)" in err
    code, _, err = run("produce", "--topic", topic, "--property", "parse.key=maybe", stdin="")
    assert code == 2 and "--property parse.key: 'maybe' is not true or false" in err


def test_client_settings_from_flags_and_a_command_config(run: Run, topic: str,
                                                        tmp_path: Path) -> None:
    config = tmp_path / "client.properties"
    config.write_text("# as kafka's --producer.config\ncompression.type=lz4\nlinger.ms=5\n")
    value = "compressible " * 100  # librdkafka sends a batch as is if it would not shrink
    run.ok("produce", "--topic", topic, "--partition", "0", "--value", value,
           "--command-config", str(config))
    assert batch_codecs(run.broker, topic) == {CODEC_LZ4}
    # The flag wins over the file.
    other = create_topic(run.broker.bootstrap, unique_topic("flag-wins"))
    run.ok("produce", "--topic", other, "--value", value, "--command-config", str(config),
           "--producer-property", "compression.type=gzip")
    assert batch_codecs(run.broker, other) == {CODEC_GZIP}

    # The console consumer commits in a group by default; a consumer property turns it off.
    committing, quiet = unique_topic("commits"), unique_topic("quiet")
    for group, extra in ((committing, []), (quiet, ["--consumer-property",
                                                    "enable.auto.commit=false"])):
        run.ok("consume", "--topic", topic, "--group", group, "--from-beginning",
               "--max-messages", "1", *extra)
    assert committed(run.broker.bootstrap, committing, topic)[0] == 1
    assert committed(run.broker.bootstrap, quiet, topic)[0] < 0
    code, _, err = run("consume", "--topic", topic, "--command-config",
                       str(tmp_path / "missing.properties"))
    assert code == 2 and "--command-config" in err and "missing.properties" in err


# -- consumer groups ----------------------------------------------------------------------------


def committed(bootstrap: str, group: str, topic: str, partitions: int = 2) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                   timeout=TIMEOUT)
        return [tp.offset for tp in found]
    finally:
        consumer.close()


def commit(bootstrap: str, group: str, topic: str, offsets: list[int]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in enumerate(offsets)],
                        asynchronous=False)
    finally:
        consumer.close()


HOUR_MS = 3_600_000
FILLED_AGO_MS = 10 * HOUR_MS


@pytest.fixture
def filled(run: Run, topic: str) -> str:
    """``topic`` with ten records in each of its two partitions, record i stamped ten hours
    ago + i hours (so a test's own run time never moves a time-based offset)."""
    base = int(time.time() * 1000) - FILLED_AGO_MS
    produce_confluent(run.broker.bootstrap, topic, [
        Rec(None, b"v", partition=p, timestamp=base + i * HOUR_MS) for p in (0, 1)
        for i in range(10)])
    return topic


def test_describe_all_groups_and_one_table(run: Run, filled: str) -> None:
    first, second = unique_topic("g1"), unique_topic("g2")
    commit(run.broker.bootstrap, first, filled, [3, 4])
    commit(run.broker.bootstrap, second, filled, [10, 10])
    out = run.ok("groups", "describe", "--all-groups", "--offsets")
    rows = [line.split() for line in out.splitlines() if filled in line]
    assert [(r[0], r[2], r[3], r[5]) for r in rows] == [
        (first, "0", "3", "7"), (first, "1", "4", "6"),
        (second, "0", "10", "0"), (second, "1", "10", "0")]
    assert "COORDINATOR" not in out and "#PARTITIONS" not in out

    state = run.ok("groups", "describe", "--group", first, "--state").splitlines()
    assert state[0].split()[:2] == ["GROUP", "COORDINATOR"] and len(state) == 2
    assert state[1].split()[0] == first and state[1].split()[-2:] == ["Empty", "0"]
    members = run.ok("groups", "describe", "--group", first, "--members")
    assert members == f"Consumer group '{first}' has no active members.\n"


def test_reset_to_current_by_duration_and_a_warning_outside_the_log(run: Run,
                                                                    filled: str) -> None:
    group = unique_topic("reset")
    commit(run.broker.bootstrap, group, filled, [4, 6])
    out = run.ok("groups", "reset-offsets", "--group", group, "--topic", filled,
                 "--to-current", "--execute")
    assert [line.split()[-1] for line in out.splitlines()[1:]] == ["4", "6"]

    # Record i is stamped 10 - i hours ago: 4.5 hours back, the first record after is 6.
    run.ok("groups", "reset-offsets", "--group", group, "--topic", filled,
           "--by-duration", "PT4H30M", "--execute")
    assert committed(run.broker.bootstrap, group, filled) == [6, 6]

    code, out, err = run("groups", "reset-offsets", "--group", group, "--topic", f"{filled}:0",
                         "--to-offset", "25", "--execute")
    assert code == 0
    assert out.splitlines()[1].split()[-1] == "10"
    assert (f"warning: the offset asked for 25 for {filled}-0 is higher than the log end "
            f"offset; using 10") in err
    assert committed(run.broker.bootstrap, group, filled) == [10, 6]

    code, _, err = run("groups", "reset-offsets", "--group", group, "--topic", filled,
                       "--by-duration", "90 minutes")
    assert code == 2 and "is not a duration like PT1H30M" in err


def test_export_then_from_file(run: Run, filled: str, tmp_path: Path) -> None:
    group = unique_topic("export")
    commit(run.broker.bootstrap, group, filled, [1, 1])
    exported = run.ok("groups", "reset-offsets", "--group", group, "--all-topics",
                      "--shift-by", "2", "--export")
    assert exported == f"{filled},0,3\n{filled},1,3\n"
    assert committed(run.broker.bootstrap, group, filled) == [1, 1]  # a dry run
    plan = tmp_path / "plan.csv"
    plan.write_text(exported.replace(f"{filled},1,3", f"{filled},1,8"))
    run.ok("groups", "reset-offsets", "--group", group, "--from-file", str(plan), "--execute")
    assert committed(run.broker.bootstrap, group, filled) == [3, 8]

    plan.write_text(f"{filled},zero,3\n")
    code, _, err = run("groups", "reset-offsets", "--group", group, "--from-file", str(plan))
    assert code == 2 and f"{plan}:1: expected topic,partition,offset" in err


# -- configs ------------------------------------------------------------------------------------


def test_configs_describe_and_alter_like_kafka_configs(run: Run, topic: str) -> None:
    assert run.ok("configs", "--entity-type", "topics", "--entity-name", topic,
                  "--describe") == f"Dynamic configs for topic {topic} are:\n"
    run.ok("configs", "--entity-type", "topics", "--entity-name", topic, "--alter",
           "--add-config", "retention.ms=60000,cleanup.policy=[compact,delete]")
    lines = run.ok("configs", "--topic", topic, "--describe").splitlines()
    assert lines[1:] == [
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000,"
        " DEFAULT_CONFIG:log.retention.ms=604800000}"]

    run.ok("configs", "--topic", topic, "--alter", "--subtract-config", "cleanup.policy=[delete]",
           "--delete-config", "retention.ms")
    assert run.ok("configs", "--topic", topic, "--describe").splitlines()[1].startswith(
        "  cleanup.policy=compact sensitive=false")
    run.ok("configs", "--topic", topic, "--alter", "--append-config", "cleanup.policy=delete")
    everything = run.ok("configs", "--topic", topic, "--describe", "--all").splitlines()
    assert everything[0] == f"All configs for topic {topic} are:"
    assert any(line.startswith("  cleanup.policy=compact,delete ") for line in everything)
    assert any(line.startswith("  segment.bytes=1048576 sensitive=false synonyms={"
                               "STATIC_BROKER_CONFIG:log.segment.bytes=1048576")
               for line in everything)


def test_configs_of_the_broker(run: Run) -> None:
    assert run.ok("configs", "--entity-type", "brokers", "--entity-name", "0",
                  "--describe") == "Dynamic configs for broker 0 are:\n"
    lines = run.ok("configs", "--broker", "0", "--describe", "--all").splitlines()
    entries = {line.split("=", 1)[0].strip(): line for line in lines[1:]}
    assert ("synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=1048576, "
            "DEFAULT_CONFIG:log.segment.bytes=1073741824}") in entries["log.segment.bytes"]
    assert "synonyms={DEFAULT_CONFIG:log.retention.bytes=-1}" in entries["log.retention.bytes"]
    assert "synonyms={DEFAULT_CONFIG:num.partitions=1}" in entries["num.partitions"]
    assert entries["broker.id"].startswith("  broker.id=0 ")  # not its unset default, -1
    code, _, err = run("configs", "--broker", "7", "--describe")
    assert code == 1 and "broker 7 does not exist (brokers: 0)" in err
    # The brokers' cluster-wide default (Kafka's --entity-default, the resource named "").
    default = ("configs", "--entity-type", "brokers", "--entity-default")
    assert run.ok(*default, "--describe") == "Default configs for brokers in the cluster are:\n"
    lines = run.ok(*default, "--describe", "--all").splitlines()
    assert lines[0] == "Default configs for brokers in the cluster are:"
    assert ("  log.segment.bytes=1048576 sensitive=false synonyms={STATIC_BROKER_CONFIG:"
            "log.segment.bytes=1048576, DEFAULT_CONFIG:log.segment.bytes=1073741824}") in lines
    assert run.ok("configs", "--entity-type", "brokers", "--describe") == (
        "Dynamic configs for broker 0 are:\nDefault configs for brokers in the cluster are:\n")
    code, _, err = run(*default, "--alter", "--add-config", "broker.rack=a")
    assert code == 1 and "Cannot update these configs dynamically: broker.rack" in err
    code, _, err = run("configs", "--entity-type", "topics", "--entity-default", "--describe")
    assert code == 2 and "--entity-default is for brokers, users and clients" in err
    code, _, err = run("configs", "--broker", "0", "--alter", "--add-config", "num.partitions=3")
    assert code == 1 and "Cannot update these configs dynamically: num.partitions" in err


def test_the_deprecated_message_format_version_is_accepted_with_a_warning(run: Run,
                                                                          topic: str) -> None:
    code, out, err = run("configs", "--topic", topic, "--alter", "--add-config",
                         "message.format.version=2.8")
    assert code == 0 and out == f"Completed updating config for topic {topic}.\n"
    assert "warning: message.format.version is deprecated and ignored" in err
    other = unique_topic("mfv")
    code, _, err = run("topics", "create", "--topic", other, "--config",
                       "message.format.version=0.10.0")
    assert code == 0 and "message.format.version is deprecated" in err
    # Produce still works as ever: the setting changes nothing.
    run.ok("produce", "--topic", other, "--value", "x")
    assert watermarks(run.broker.bootstrap, other) == (0, 1)


# -- offsets and records ------------------------------------------------------------------------


def test_get_offsets_and_delete_records(run: Run, filled: str, tmp_path: Path) -> None:
    assert run.ok("get-offsets", "--topic", filled) == f"{filled}:0:10\n{filled}:1:10\n"
    spec = tmp_path / "delete.json"
    spec.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": filled, "partition": 0, "offset": 4}]}))
    out = run.ok("delete-records", "--offset-json-file", str(spec))
    assert out.splitlines() == ["Executing records delete operation",
                                "Records delete operation completed:",
                                f"partition: {filled}-0\tlow_watermark: 4"]
    assert run.ok("get-offsets", "--topic-partitions", f"{filled}:0", "--time", "-2") == \
        f"{filled}:0:4\n"
    # Record i is stamped 10 - i hours ago: the first at or after 3.5 hours ago is 7.
    by_time = run.ok("get-offsets", "--topic", filled, "--partitions", "1",
                     "--time", str(int(time.time() * 1000) - 3 * HOUR_MS - HOUR_MS // 2))
    assert by_time == f"{filled}:1:7\n"
    # Kafka's names for the times, and the newest record (ListOffsets v7, max-timestamp).
    assert run.ok("get-offsets", "--topic", filled, "--partitions", "1",
                  "--time", "max-timestamp") == f"{filled}:1:9\n"
    assert run.ok("get-offsets", "--topic", filled, "--time", "-3") == (
        f"{filled}:0:9\n{filled}:1:9\n")
    assert run.ok("get-offsets", "--topic-partitions", f"{filled}:0", "--time", "earliest") == (
        f"{filled}:0:4\n")
    assert run.ok("get-offsets", "--topic-partitions", f"{filled}:0", "--time", "LATEST") == (
        f"{filled}:0:10\n")
    code, _, err = run("get-offsets", "--topic", filled, "--time", "soon")
    assert code == 2 and "not latest, earliest, max-timestamp or a time" in err
    spec.write_text('{"partitions": [{"topic": "t"}]}')
    code, _, err = run("delete-records", "--offset-json-file", str(spec))
    assert code == 2 and "expected" in err


# -- dump-log -----------------------------------------------------------------------------------


def test_dump_log_decodes_the_offsets_topic(run: Run, filled: str) -> None:
    group = unique_topic("dump")
    commit(run.broker.bootstrap, group, filled, [7, 9])
    segment = run.broker.data_dir / "__consumer_offsets-0" / "00000000000000000000.log"
    wait_until(lambda: group.encode() in segment.read_bytes())
    out = run.ok("dump-log", "--files", str(segment), "--offsets-decoder", bootstrap=False)
    lines = [line for line in out.splitlines() if f'"group":"{group}"' in line]
    assert len(lines) == 2
    key, payload = lines[0].split(" key: ")[1].split(" payload: ")
    assert json.loads(key) == {"type": "1", "data": {"group": group, "topic": filled,
                                                     "partition": 0}}
    value = json.loads(payload)
    assert value["version"] == "3" and value["data"]["offset"] == 7
    assert json.loads(lines[1].split(" payload: ")[1])["data"]["offset"] == 9


def test_dump_log_reads_producer_state_snapshots(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    private = BrokerProcess(tmp_path / "data").start()
    try:
        name = create_topic(private.bootstrap, "idempotent")
        produce_confluent(private.bootstrap, name, [Rec(None, b"a"), Rec(None, b"b")],
                          **{"enable.idempotence": True, "linger.ms": 50})
    finally:
        assert private.stop() == 0  # a clean stop writes the snapshot
    headers: list[BatchHeader] = stored_batches(private, name)
    (snapshot,) = (tmp_path / "data" / f"{name}-0").glob("*.snapshot")
    assert main(["dump-log", str(snapshot)]) == 0
    out = capsys.readouterr().out.splitlines()
    last = headers[-1]
    assert out[1] == (f"producerId: {last.producer_id} producerEpoch: {last.producer_epoch} "
                      f"firstSequence: {last.base_sequence} lastSequence: {last.last_sequence} "
                      f"lastOffset: {last.last_offset} "
                      f"offsetDelta: {last.last_offset - last.base_offset}")


# -- perf and verifiable ------------------------------------------------------------------------


def test_perf_produce_then_consume(run: Run, topic: str) -> None:
    out = run.ok("perf", "produce", "--topic", topic, "--num-records", "3000", "--record-size",
                 "100", "--throughput", "-1", "--reporting-interval", "0")
    *progress, final = out.splitlines()
    assert progress and all(" records sent, " in line and line.endswith("max latency.")
                            for line in progress)
    assert final.startswith("3000 records sent, ") and " MB/sec), " in final
    assert " ms 50th, " in final and final.endswith(" ms 99.9th.")
    assert sum(watermarks(run.broker.bootstrap, topic, p)[1] for p in (0, 1)) == 3000

    out = run.ok("perf", "consume", "--topic", topic, "--messages", "3000")
    header, values = out.splitlines()[-2:]
    assert header.startswith("start.time, end.time, data.consumed.in.MB, MB.sec, "
                             "data.consumed.in.nMsg")
    fields = values.split(", ")
    assert fields[4] == "3000" and float(fields[2]) == pytest.approx(3000 * 100 / 2**20, 1e-3)

    code, _, err = run("perf", "consume", "--topic", topic, "--messages", "3001",
                       "--timeout", "500")
    assert code == 1 and "read 3000 of 3001" in err


def test_perf_keeps_to_a_throughput_with_kafkas_producer_props(run: Run, topic: str) -> None:
    out = run.ok("perf", "produce", "--topic", topic, "--num-records", "20", "--record-size",
                 "1000", "--throughput", "400", "--producer-props", "compression.type=gzip",
                 "linger.ms=20")
    assert out.splitlines()[-1].startswith("20 records sent, ")
    assert CODEC_GZIP in batch_codecs(run.broker, topic) | {
        h.attributes & 0x07 for h in stored_batches(run.broker, topic, 1)}


def events(out: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.splitlines()]


def test_verifiable_producer_and_consumer_agree(run: Run, topic: str) -> None:
    produced = events(run.ok("verifiable", "produce", "--topic", topic, "--max-messages", "6",
                             "--value-prefix", "7", "--repeating-keys", "3"))
    names = [e["name"] for e in produced]
    assert names == ["startup_complete"] + ["producer_send_success"] * 6 + [
        "shutdown_complete", "tool_data"]
    sent = {(e["partition"], e["offset"]): (e["key"], e["value"]) for e in produced
            if e["name"] == "producer_send_success"}
    assert sorted(sent.values()) == sorted((str(i % 3), f"7.{i}") for i in range(6))
    assert produced[-1]["sent"] == produced[-1]["acked"] == 6

    group = unique_topic("verifiable")
    consumed = events(run.ok("verifiable", "consume", "--topic", topic, "--group-id", group,
                             "--max-messages", "6", "--verbose"))
    assert consumed[0]["name"] == "startup_complete"
    assert consumed[-1]["name"] == "shutdown_complete"
    assigned = next(e for e in consumed if e["name"] == "partitions_assigned")
    assert sorted(p["partition"] for p in assigned["partitions"]) == [0, 1]
    read = {(e["partition"], e["offset"]): (e["key"], e["value"]) for e in consumed
            if e["name"] == "record_data"}
    assert read == sent
    batches = [e for e in consumed if e["name"] == "records_consumed"]
    assert sum(e["count"] for e in batches) == 6
    commits = [o for e in consumed if e["name"] == "offsets_committed" and e["success"]
               for o in e["offsets"]]
    last = {(o["partition"]): o["offset"] for o in commits}
    ends = {p: max(o for (q, o) in sent if q == p) + 1 for p, _ in sent}
    assert last == ends
    assert committed(run.broker.bootstrap, group, topic) == [ends.get(0, -1001),
                                                             ends.get(1, -1001)]


def test_console_producer_flags_of_kafka(run: Run, topic: str) -> None:
    """``--compression-codec`` (gzip without a value), ``--request-required-acks`` and the old
    ``--broker-list``."""
    value = "compressible " * 100  # librdkafka sends a batch as is if it would not shrink
    run.ok("produce", "--topic", topic, "--partition", "0", "--compression-codec", "lz4",
           "--request-required-acks", "all", "--value", value)
    assert batch_codecs(run.broker, topic) == {CODEC_LZ4}
    other = create_topic(run.broker.bootstrap, unique_topic("gzip"))
    run.ok("produce", "--topic", other, "--compression-codec", "--request-required-acks", "0",
           "--broker-list", run.broker.bootstrap, "--value", value, bootstrap=False)
    wait_until(lambda: batch_codecs(run.broker, other) == {CODEC_GZIP}, message="a gzip batch")


def test_console_consumer_flags_of_kafka(run: Run, topic: str) -> None:
    """``--include``, ``--isolation-level``, ``--formatter`` (Kafka's class names) and
    ``--skip-message-on-error``."""
    other = create_topic(run.broker.bootstrap, f"{topic}-other")
    producer = Producer({"bootstrap.servers": run.broker.bootstrap,
                         "transactional.id": f"{topic}-txn"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", partition=0)
    producer.flush(TIMEOUT)  # sent, then aborted (an abort drops what is still queued)
    producer.abort_transaction(TIMEOUT)
    del producer
    run.ok("produce", "--topic", other, "--value", "kept")
    read = ("consume", "--include", f"{topic}(-other)?", "--from-beginning", "--timeout-ms",
            "1500")
    assert run.ok(*read).splitlines() == ["kept"]
    assert sorted(run.ok(*read, "--isolation-level", "read_uncommitted").splitlines()) == [
        "aborted", "kept"]
    assert run.ok(*read, "--formatter", "kafka.tools.NoOpMessageFormatter") == ""

    commit(run.broker.bootstrap, f"{topic}-group", topic, [3, 5])
    offsets = ("consume", "--topic", "__consumer_offsets", "--from-beginning", "--timeout-ms",
               "1500", "--formatter")
    lines = [json.loads(line) for line in run.ok(
        *offsets, "org.apache.kafka.tools.consumer.OffsetsMessageFormatter").splitlines()]
    mine = [line for line in lines if line["key"]["data"]["group"] == f"{topic}-group"]
    assert [(line["key"]["data"]["partition"], line["value"]["data"]["offset"])
            for line in mine] == [(0, 3), (1, 5)]
    assert all(line["key"]["type"] in ("0", "1") for line in lines)

    plain = ("consume", "--topic", other, "--from-beginning", "--timeout-ms", "1500",
             "--formatter", "OffsetsMessageFormatter")
    code, _, err = run(*plain)
    assert code == 1 and f"{other}-0 offset 0: not a record of __consumer_offsets" in err
    code, out, err = run(*plain, "--skip-message-on-error")
    assert (code, out) == (0, "") and f"skipped {other}-0 offset 0: " in err
    code, _, err = run("consume", "--topic", other, "--formatter", "DefaultFormatter")
    assert code == 2 and "(did you mean 'DefaultMessageFormatter'?)" in err


def test_dynamic_broker_configs(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``configs --entity-type brokers --alter``: the cluster-wide default and one broker's
    own, only the configs Kafka changes at run time, applied to the topics at once, kept in
    the data directory over a restart."""
    broker = start_broker(tmp_path, {"log.segment.bytes": "1048576"})
    try:
        run = Run(broker, capsys, monkeypatch)
        create_topic(broker.bootstrap, "dyn")
        default = ("configs", "--entity-type", "brokers", "--entity-default")
        assert run.ok(*default, "--alter", "--add-config", "log.retention.ms=7200000") == (
            "Completed updating default config for brokers in the cluster.\n")
        assert run.ok("configs", "--broker", "0", "--alter", "--add-config",
                      "log.segment.bytes=2097152") == "Completed updating config for broker 0.\n"
        own = ("  log.segment.bytes=2097152 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:"
               "log.segment.bytes=2097152, STATIC_BROKER_CONFIG:log.segment.bytes=1048576, "
               "DEFAULT_CONFIG:log.segment.bytes=1073741824}")
        shared = ("  log.retention.ms=7200000 sensitive=false synonyms={"
                  "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000, "
                  "DEFAULT_CONFIG:log.retention.ms=604800000}")
        expected = ["Dynamic configs for broker 0 are:", own,
                    "Default configs for brokers in the cluster are:", shared]
        assert run.ok("configs", "--entity-type", "brokers", "--describe").splitlines() == \
            expected
        topic = run.ok("configs", "--topic", "dyn", "--describe", "--all").splitlines()
        assert ("  retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
                "log.retention.ms=7200000, DEFAULT_CONFIG:log.retention.ms=604800000}") in topic
        assert any(line.startswith("  segment.bytes=2097152 ") for line in topic)

        code, _, err = run(*default, "--alter", "--add-config", "num.io.threads=4")
        assert code == 1 and "Cannot update these configs dynamically: num.io.threads" in err
        code, _, err = run(*default, "--alter", "--add-config", "log.retention.ms=soon")
        assert code == 1 and "INVALID_CONFIG" in err and "retention.ms" in err

        broker.restart()
        assert run.ok("configs", "--entity-type", "brokers", "--describe").splitlines() == \
            expected
        run.ok(*default, "--alter", "--delete-config", "log.retention.ms")
        assert run.ok(*default, "--describe") == "Default configs for brokers in the cluster are:\n"
        assert any(line.startswith("  retention.ms=604800000 ") for line in run.ok(
            "configs", "--topic", "dyn", "--describe", "--all").splitlines())
    finally:
        broker.stop()


def test_dynamic_broker_configs_on_a_cluster(zookeeper: Any, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept as Kafka keeps them in ZooKeeper (``/config/brokers/<default>`` and ``/<id>``,
    change notifications): a default altered through one broker reaches the other; a
    broker's own config is that broker's only; a restart reads them back."""
    cluster = Cluster(zookeeper, tmp_path, "dynamic-configs", size=2)
    try:
        first, second = cluster.start().brokers
        on_first, on_second = (Run(b, capsys, monkeypatch) for b in (first, second))
        default = ("configs", "--entity-type", "brokers", "--entity-default")
        on_first.ok(*default, "--alter", "--add-config", "log.retention.ms=7200000")
        on_second.ok("configs", "--broker", "1", "--alter", "--add-config",
                     "log.segment.bytes=2097152")
        shared = ("  log.retention.ms=7200000 sensitive=false synonyms={"
                  "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000, "
                  "DEFAULT_CONFIG:log.retention.ms=604800000}")
        wait_until(lambda: on_second.ok(*default, "--describe").splitlines()[1:] == [shared],
                   message="the second broker to apply the default")
        assert on_first.ok("configs", "--broker", "0", "--describe") == (
            "Dynamic configs for broker 0 are:\n")
        assert on_second.ok("configs", "--broker", "1", "--describe").splitlines()[1].startswith(
            "  log.segment.bytes=2097152 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:")
        with zk_client(cluster) as zk:
            assert json.loads(zk.get("/config/brokers/<default>")[0]) == {
                "version": 1, "config": {"log.retention.ms": "7200000"}}
            assert json.loads(zk.get("/config/brokers/1")[0]) == {
                "version": 1, "config": {"log.segment.bytes": "2097152"}}
            changes = [json.loads(zk.get(f"/config/changes/{c}")[0])
                       for c in zk.get_children("/config/changes")]
            assert {"version": 2, "entity_path": "brokers/<default>"} in changes
        second.restart()
        assert on_second.ok(*default, "--describe").splitlines()[1:] == [shared]
    finally:
        cluster.stop()
