"""The client tools (``sparklog topics``, ``produce``, ``consume``, ``elect-leaders``) against a
real broker.

One broker process serves the module; each test uses its own topics. The tools run in-process
through ``sparklog.cli.main`` (stdout and stderr captured), except the signal test, which
needs a process of its own to send SIGTERM to.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition, Uuid
from confluent_kafka.admin import AdminClient

from sparklog.broker.process import BrokerProcess
from sparklog.cli import main
from sparklog.client.rdkafka_log import admin_client, routed
from sparklog.cluster.zookeeper_server import free_port
from sparklog.commands.topics import kafka_uuid

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("cli-tools") / "data").start()
    yield process
    process.stop()


class Tools:
    """Runs ``sparklog <argv> --bootstrap <broker>`` and returns (exit code, stdout, stderr)."""

    def __init__(self, broker: BrokerProcess, capsys: pytest.CaptureFixture[str],
                 monkeypatch: pytest.MonkeyPatch) -> None:
        self.broker, self.capsys, self.monkeypatch = broker, capsys, monkeypatch

    def __call__(self, *argv: str, stdin: str | None = None) -> tuple[int, str, str]:
        if stdin is not None:
            self.monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        self.capsys.readouterr()
        code = main([*argv, "--bootstrap", self.broker.bootstrap])
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *argv: str, stdin: str | None = None) -> str:
        code, out, err = self(*argv, stdin=stdin)
        assert code == 0, err
        return out


@pytest.fixture
def tools(broker: BrokerProcess, capsys: pytest.CaptureFixture[str],
          monkeypatch: pytest.MonkeyPatch) -> Tools:
    return Tools(broker, capsys, monkeypatch)


def describe(tools: Tools, topic: str) -> list[str]:
    return tools.ok("topics", "describe", "--topic", topic).splitlines()


def partition_line(topic: str, partition: int, start: int, end: int) -> str:
    return (f"\tTopic: {topic}\tPartition: {partition}\tLeader: 0\tReplicas: 0\tIsr: 0"
            f"\tOffsets: {start}..{end}")


def split_topic_id(line: str) -> tuple[str, str]:
    """A describe header line without its ``TopicId: <id>`` field, and the id (Kafka's
    base64 of the topic's UUID, printed when the broker has one)."""
    found = re.search(r"\tTopicId: ([A-Za-z0-9_-]{22})", line)  # URL-safe, as Kafka's
    assert found is not None, line
    return line.replace(found.group(0), ""), found.group(1)


def test_topic_admin_round_trip(tools: Tools) -> None:
    out = tools.ok("topics", "create", "--topic", "admin", "--partitions", "2",
                   "--replication-factor", "1", "--config", "retention.ms=60000",
                   "--config", "cleanup.policy=compact,delete")
    assert out == "Created topic admin.\n"
    assert "admin" in tools.ok("topics", "list").splitlines()
    header, *partitions = describe(tools, "admin")
    header, topic_id = split_topic_id(header)
    stored = json.loads((tools.broker.data_dir / "topics.json").read_text())["topics"]["admin"]
    assert topic_id == base64.urlsafe_b64encode(bytes.fromhex(stored["id"])).decode().rstrip("=")
    assert header == ("Topic: admin\tPartitionCount: 2\tReplicationFactor: 1"
                      "\tConfigs: cleanup.policy=compact,delete,retention.ms=60000")
    assert partitions == [partition_line("admin", 0, 0, 0), partition_line("admin", 1, 0, 0)]

    out = tools.ok("topics", "alter", "--topic", "admin", "--add-config", "segment.bytes=1048576",
                   "--delete-config", "retention.ms", "--delete-config", "cleanup.policy",
                   "--partitions", "3")
    assert out.splitlines() == ["Completed updating config for topic admin.",
                                "Topic admin now has 3 partitions."]
    lines = describe(tools, "admin")
    assert split_topic_id(lines[0]) == ("Topic: admin\tPartitionCount: 3\tReplicationFactor: 1"
                                        "\tConfigs: segment.bytes=1048576", topic_id)
    assert lines[1:] == [partition_line("admin", p, 0, 0) for p in range(3)]

    assert tools.ok("topics", "delete", "--topic", "admin") == "Deleted topic admin.\n"
    assert "admin" not in tools.ok("topics", "list").splitlines()
    assert tools.ok("topics", "delete", "--topic", "admin", "--if-exists") == ""


def test_describe_reports_log_start_and_end_offsets(tools: Tools, broker: BrokerProcess
                                                    ) -> None:
    tools.ok("topics", "create", "--topic", "offsets", "--partitions", "2")
    tools.ok("produce", "--topic", "offsets", "--partition", "1", "--value", "r",
             "--num-records", "5")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    (deleted,) = admin.delete_records([TopicPartition("offsets", 1, 2)]).values()
    deleted.result(timeout=30)

    lines = describe(tools, "offsets")
    assert lines[1:] == [partition_line("offsets", 0, 0, 0), partition_line("offsets", 1, 2, 5)]
    # Without --topic every topic is described, this one included.
    everything = tools.ok("topics", "describe").splitlines()
    assert everything[everything.index(lines[0]):][:3] == lines


def test_produce_then_consume_keys_headers_and_offsets(tools: Tools) -> None:
    tools.ok("topics", "create", "--topic", "roundtrip", "--partitions", "1")
    lines = "trace:abc,retry\tuser1:clicked\n\tuser2:bought: two\n,flag\tuser1:\n"
    code, _, err = tools("produce", "--topic", "roundtrip", "--key-separator", ":",
                         "--headers", stdin=lines)
    assert code == 0, err
    assert err == "Sent 3 records to roundtrip\n"

    out = tools.ok("consume", "--topic", "roundtrip", "--from-beginning", "--max-messages", "3",
                   "--print-timestamp", "--print-offset", "--print-headers", "--print-key",
                   "--key-separator", " | ")
    records = out.splitlines()
    assert len(records) == 3
    assert all(re.match(r"CreateTime:\d{13} \| ", line) for line in records), records
    assert [line.split(" | ", 1)[1] for line in records] == [
        "Offset:0 | trace:abc,retry:null | user1 | clicked",
        "Offset:1 | NO_HEADERS | user2 | bought: two",
        "Offset:2 | :null,flag:null | user1 | ",
    ]


def test_consume_prints_only_the_value_by_default_and_counts(tools: Tools) -> None:
    tools.ok("topics", "create", "--topic", "plain", "--partitions", "1")
    tools.ok("produce", "--topic", "plain", "--value", "a", "--value", "b", "--num-records", "5")
    code, out, err = tools("consume", "--topic", "plain", "--from-beginning",
                           "--timeout-ms", "1500")
    assert code == 0
    assert out.splitlines() == ["a", "b", "a", "b", "a"]
    assert err.endswith("Processed a total of 5 messages\n")


def test_consume_starts_at_the_offset_asked_for(tools: Tools) -> None:
    tools.ok("topics", "create", "--topic", "seek", "--partitions", "2")
    tools.ok("produce", "--topic", "seek", "--partition", "1", "--key-separator", "=",
             stdin="".join(f"k{i}=v{i}\n" for i in range(6)))

    def consume(*start: str) -> list[str]:
        out = tools.ok("consume", "--topic", "seek", "--partition", "1", *start,
                       "--print-offset", "--print-partition", "--print-key",
                       "--timeout-ms", "1000")
        return out.splitlines()

    assert consume("--offset", "4") == ["Partition:1\tOffset:4\tk4\tv4",
                                        "Partition:1\tOffset:5\tk5\tv5"]
    assert consume("--offset", "earliest")[0] == "Partition:1\tOffset:0\tk0\tv0"
    assert consume("--offset", "latest") == []
    assert consume() == []  # the default start is the log end, as Kafka's


def test_admin_errors_name_the_topic_or_config(tools: Tools) -> None:
    tools.ok("topics", "create", "--topic", "taken")
    assert tools("topics", "create", "--topic", "taken") == (
        1, "", "sparklog topics: topic 'taken' already exists\n")
    assert tools.ok("topics", "create", "--topic", "taken", "--if-not-exists") == ""

    code, out, err = tools("topics", "create", "--topic", "badconfig", "--config", "retention.x=1")
    assert (code, out) == (1, "")
    assert err.startswith("sparklog topics: topic 'badconfig': ") and "retention.x" in err
    assert err.count("\n") == 1
    code, _, err = tools("topics", "alter", "--topic", "taken", "--add-config", "retention.ms=no")
    assert code == 1 and "retention.ms" in err and "'no'" in err
    code, _, err = tools("topics", "alter", "--topic", "taken", "--partitions", "1")
    assert code == 1 and "taken" in err

    for argv in (("topics", "describe", "--topic", "missing"),
                 ("topics", "delete", "--topic", "missing"),
                 ("topics", "alter", "--topic", "missing", "--add-config", "retention.ms=1")):
        assert tools(*argv) == (1, "", "sparklog topics: topic 'missing' does not exist\n")
    assert tools("topics", "alter", "--topic", "taken")[0] == 2


def test_consume_errors(tools: Tools) -> None:
    code, out, err = tools("consume", "--topic", "absent", "--timeout-ms", "500")
    assert (code, out) == (1, "")
    assert "sparklog consume: topic 'absent' does not exist" in err
    assert "absent" not in tools.ok("topics", "list").splitlines()  # not auto-created

    tools.ok("topics", "create", "--topic", "two", "--partitions", "2")
    code, _, err = tools("consume", "--topic", "two", "--partition", "5", "--timeout-ms", "500")
    assert code == 1 and "topic 'two' has no partition 5 (it has 2)" in err
    code, _, err = tools("consume", "--topic", "two", "--group", "g", "--offset", "0")
    assert code == 2 and "--group" in err


def test_produce_failures_exit_1(tools: Tools) -> None:
    tools.ok("topics", "create", "--topic", "strict", "--partitions", "1")
    # A line without the key separator stops reading; the lines before it are delivered.
    code, _, err = tools("produce", "--topic", "strict", "-k", ":", stdin="a:1\nb:2\nno key\n")
    assert code == 1
    assert err.splitlines() == ["Sent 2 records to strict",
                                "sparklog produce: line 3 has no key separator ':': 'no key'"]
    # A partition that does not exist fails every delivery.
    code, _, err = tools("produce", "--topic", "strict", "--partition", "4", "--value", "x")
    assert code == 1
    assert err.splitlines()[-1].startswith(
        "sparklog produce: 1 of 1 records were not delivered to strict: ")
    out = tools.ok("consume", "--topic", "strict", "--from-beginning", "--print-key",
                   "--timeout-ms", "1000")
    assert out.splitlines() == ["a\t1", "b\t2"]


def test_consume_stops_cleanly_on_sigterm(tools: Tools, broker: BrokerProcess) -> None:
    tools.ok("topics", "create", "--topic", "forever", "--partitions", "1")
    tools.ok("produce", "--topic", "forever", "--value", "first")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", "consume", "--bootstrap", broker.bootstrap,
         "--topic", "forever", "--from-beginning"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "first\n"  # it is running and idle now
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out == ""
    assert err.endswith("Processed a total of 1 messages\n")


def test_produce_stops_reading_on_sigterm_and_reports(tools: Tools,
                                                      broker: BrokerProcess) -> None:
    tools.ok("topics", "create", "--topic", "typed", "--partitions", "1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", "produce", "--bootstrap", broker.bootstrap,
         "--topic", "typed"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    try:
        assert proc.stdin is not None
        proc.stdin.write("one\ntwo\n")
        proc.stdin.flush()  # stdin stays open: the producer is blocked reading the next line
        deadline = time.monotonic() + 20
        while describe(tools, "typed")[1] != partition_line("typed", 0, 0, 2):
            assert time.monotonic() < deadline, "the two lines were never produced"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)  # with stdin still open: the signal, not an EOF, ended it
        assert proc.stdout is not None and proc.stderr is not None
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        proc.kill()
        proc.communicate()
    assert (proc.returncode, out, err) == (0, "", "Sent 2 records to typed\n")


def test_elect_leaders_on_a_single_node(tools: Tools, tmp_path: Path) -> None:
    """A single node leads every partition as its preferred replica: nothing to elect; a
    malformed selection is a usage error naming the flag, before anything is sent."""
    tools.ok("topics", "create", "--topic", "elected", "--partitions", "2")
    plan = tmp_path / "election.json"
    plan.write_text('{"partitions": [{"topic": "elected", "partition": 0}, '
                    '{"topic": "elected", "partition": 1}]}')
    assert tools.ok("elect-leaders", "--election-type", "preferred", "--path-to-json-file",
                    str(plan)) == "Valid replica already elected for partitions elected-0, " \
                                  "elected-1\n"
    everything = tools.ok("elect-leaders", "--election-type", "preferred",
                          "--all-topic-partitions")  # the controller answers none of them
    assert everything.startswith("Valid replica already elected for partitions ")
    assert "elected-0, elected-1" in everything and "__consumer_offsets-49" in everything
    code, out, _ = tools("elect-leaders", "--election-type", "unclean", "--topic", "nowhere",
                         "--partition", "0")
    assert code == 1 and out.startswith("Error completing leader election (UNCLEAN) for "
                                        "partition: nowhere-0: ")
    plan.write_text('{"partitions": [{"topic": "elected", "partition": 0}, '
                    '{"topic": "elected", "partition": 0}]}')
    code, _, err = tools("elect-leaders", "--election-type", "preferred",
                         "--path-to-json-file", str(plan))
    assert code == 2 and "duplicate partitions: elected-0" in err
    code, _, err = tools("elect-leaders", "--election-type", "preferred", "--topic", "elected",
                         "--partition", "0", "--all-topic-partitions")
    assert code == 2 and "One and only one of" in err


def test_a_broker_start_logs_its_coordinator_loads_as_one_line(broker: BrokerProcess) -> None:
    """A single node leads all 100 internal-topic partitions from its first start: one INFO
    line says so, not one (or three) per partition."""
    deadline = time.monotonic() + 30
    while "coordinators loaded" not in (log := broker.log_file.read_text()):
        assert time.monotonic() < deadline, log[-2000:]
        time.sleep(0.1)
    loads = [line for line in log.splitlines() if "loaded" in line and " INFO " in line]
    assert [line.split(": ", 1)[1] for line in loads if "coordinator" in line] == [
        "coordinators loaded partitions 50 of __consumer_offsets, 50 of __transaction_state: "
        "0 groups, 0 transactional ids"]
    assert not [line for line in log.splitlines() if " INFO " in line and (
        "replayed" in line or "__consumer_offsets-" in line or "__transaction_state-" in line)]


def test_librdkafka_lines_are_the_tools_own(tools: Tools, broker: BrokerProcess) -> None:
    """An offset past the log end: librdkafka's OFFSET warning is one line in the tool's
    format, its informational lines only with -v, and no raw ``%4|...|OFFSET|`` line."""
    tools.ok("topics", "create", "--topic", "routed", "--partitions", "1")
    tools.ok("produce", "--topic", "routed", "--value", "one")
    argv = [sys.executable, "-m", "sparklog.cli", "consume", "--bootstrap", broker.bootstrap,
            "--topic", "routed", "--partition", "0", "--offset", "99", "--timeout-ms", "1500"]
    quiet = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    lines = quiet.stderr.splitlines()
    assert [line.split(" [0]: ")[0] for line in lines] == [
        "sparklog consume: warning: OFFSET: routed", "Processed a total of 0 messages"], lines
    verbose = subprocess.run([*argv, "-v"], cwd=ROOT, capture_output=True, text=True,
                             timeout=60).stderr
    assert "sparklog consume: debug: " in verbose and "sparklog consume: warning: OFFSET: " \
        in verbose
    assert not re.search(r"^%\d\|", verbose, re.MULTILINE), verbose


def test_routed_clients_log_through_python_logging(tools: Tools, broker: BrokerProcess,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """What the jobs and the data source get (``routed``): warnings at their level, the rest
    at DEBUG, librdkafka's prefix dropped."""
    tools.ok("topics", "create", "--topic", "routed-py", "--partitions", "1")
    consumer = Consumer(routed({"bootstrap.servers": broker.bootstrap, "group.id": "routed"}))
    with caplog.at_level(logging.DEBUG, "sparklog.librdkafka"):
        try:
            consumer.assign([TopicPartition("routed-py", 0, 99)])
            deadline = time.monotonic() + 20
            while not [r for r in caplog.records if r.levelno == logging.WARNING]:
                assert time.monotonic() < deadline, caplog.text
                consumer.poll(0.1)
        finally:
            consumer.close()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records
             if r.name == "sparklog.librdkafka"]
    assert {level for level, _ in lines} <= {"DEBUG", "WARNING", "ERROR"}
    assert not [text for _, text in lines if text.startswith(("%", "[thrd:"))], lines


def test_topic_ids_print_as_kafkas_url_safe_base64() -> None:
    """Kafka's Uuid.toString (confluent-kafka's str uses '+' and '/')."""
    assert kafka_uuid(Uuid(-1, -2)) == "_____________________g"
    assert kafka_uuid(Uuid(0x0123456789ABCDEF, 0x7EDCBA9876543210)) == "ASNFZ4mrze9-3LqYdlQyEA"


def test_an_admin_clients_lines_reach_logging(caplog: pytest.LogCaptureFixture) -> None:
    """confluent-kafka hands an admin client's log lines over only in poll(), which the tools
    never call: admin_client serves them, so a refused connection is logged, not lost."""
    nowhere = f"127.0.0.1:{free_port()}"
    with caplog.at_level(logging.DEBUG, "sparklog.librdkafka"):
        admin = admin_client({"bootstrap.servers": nowhere})
        with pytest.raises(KafkaException):
            admin.list_topics(timeout=2)
        deadline = time.monotonic() + 10
        while not [r for r in caplog.records if r.levelno == logging.ERROR
                   and r.getMessage().startswith(f"FAIL: {nowhere}/bootstrap: Connect to")]:
            assert time.monotonic() < deadline, caplog.text
            time.sleep(0.1)
