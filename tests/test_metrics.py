"""The metrics endpoint (``metrics.listener``): Kafka's metric names with the right labels and
values after real clients produced, consumed and committed; the status JSON; the Grafana
dashboard's queries; the listener's start-up checks; rate-limited connection warnings.

Scrapes are parsed with prometheus-client's own parser, so what is checked is what
Prometheus would store. Expected values come from the test's own bookkeeping (records
produced per partition, offsets committed) and from the clients (watermarks), not from the
broker's metrics code.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import confluent_kafka
import pytest
from broker_fixtures import (
    TIMEOUT,
    RawConnection,
    admin,
    committed_member,
    consume_confluent,
    create_topic,
    module_broker,
    numbered,
    produce_confluent,
    produce_per_partition,
    raw_produce,
    start_broker,
    topic,
    unique_topic,
    wait_until,
    watermarks,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from sparklog.broker.monitoring.exporter import FAMILIES
from sparklog.broker.process import BrokerProcess
from sparklog.record.records import build_batch

__all__ = ["broker", "topic"]

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "sparklog" / "conf" / "grafana-dashboard.json"
METRICS_ON = {"metrics.listener": "http://127.0.0.1:0"}

broker = module_broker(METRICS_ON)


class Scrape:
    """One scrape of ``/metrics``: its families, and its samples by name and labels."""

    def __init__(self, text: str) -> None:
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples: list[Sample] = [s for f in self.families.values() for s in f.samples]

    def value(self, name: str, **labels: str) -> float:
        """The value of the one sample ``name`` with exactly ``labels``."""
        found = [s.value for s in self.samples if s.name == name and s.labels == labels]
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples"
        return found[0]

    def labelled(self, name: str, **labels: str) -> list[Sample]:
        """Samples ``name`` whose labels include ``labels``."""
        return [s for s in self.samples
                if s.name == name and labels.items() <= s.labels.items()]


def now_ms() -> int:
    return int(time.time() * 1000)


def scrape(proc: BrokerProcess) -> Scrape:
    assert proc.metrics_url is not None, "the broker printed no metrics URL"
    with urllib.request.urlopen(proc.metrics_url + "metrics", timeout=TIMEOUT) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        return Scrape(response.read().decode())


@pytest.fixture
def group_member(broker: BrokerProcess, topic: str) -> Iterator[str]:
    """A live member of group ``<topic>-group`` subscribed to ``topic`` (2 partitions, 30
    and 20 records), which committed offsets 12 and 5."""
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_per_partition(broker.bootstrap, topic, {0: 30, 1: 20})
    group = f"{topic}-group"
    consumer = committed_member(broker.bootstrap, topic, group, {0: 12, 1: 5})
    yield group
    consumer.close()


def test_a_scrape_has_kafkas_names_labels_and_values(broker: BrokerProcess, topic: str,
                                                     group_member: str) -> None:
    consume_confluent(broker.bootstrap, topic, 50, partitions=(0, 1))  # all of it, once
    metrics = scrape(broker)

    # BrokerTopicMetrics, per topic and for all topics
    assert metrics.value("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == 50
    assert metrics.value("kafka_server_brokertopicmetrics_messagesin_total") >= 50
    sizes = [metrics.value("kafka_log_log_size", topic=topic, partition=str(p)) for p in (0, 1)]
    assert all(size > 0 for size in sizes)
    # every appended batch is in the (one) segment: bytes in is what the logs hold
    assert metrics.value("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) \
        == sum(sizes)
    # the consumer read every batch at least once
    assert metrics.value("kafka_server_brokertopicmetrics_bytesout_total", topic=topic) \
        >= sum(sizes)

    # Log: start and end offsets per partition, as the clients see them
    for partition, produced in ((0, 30), (1, 20)):
        labels = {"topic": topic, "partition": str(partition)}
        assert watermarks(broker.bootstrap, topic, partition) == (0, produced)
        assert metrics.value("kafka_log_log_logstartoffset", **labels) == 0
        assert metrics.value("kafka_log_log_logendoffset", **labels) == produced
        assert metrics.value("kafka_log_log_numlogsegments", **labels) == 1
        assert metrics.value("kafka_topic_partition_current_offset", **labels) == produced
        assert metrics.value("kafka_topic_partition_oldest_offset", **labels) == 0
    assert metrics.value("kafka_topic_partitions", topic=topic) == 2

    # kafka-exporter's consumer group metrics
    for partition, committed, end in ((0, 12, 30), (1, 5, 20)):
        labels = {"consumergroup": group_member, "topic": topic, "partition": str(partition)}
        assert metrics.value("kafka_consumergroup_current_offset", **labels) == committed
        assert metrics.value("kafka_consumergroup_lag", **labels) == end - committed
    assert metrics.value("kafka_consumergroup_lag_sum", consumergroup=group_member,
                         topic=topic) == 18 + 15
    assert metrics.value("kafka_consumergroup_members", consumergroup=group_member) == 1

    # RequestMetrics: rate per API and version, latency histogram, errors by code
    produces = metrics.labelled("kafka_network_requestmetrics_requests_total",
                                request="Produce")
    assert produces and all(s.labels["version"].isdigit() for s in produces)
    count = metrics.value("kafka_network_requestmetrics_totaltimems_count", request="Produce")
    assert count == sum(s.value for s in produces)
    assert metrics.value("kafka_network_requestmetrics_totaltimems_bucket", request="Produce",
                         le="+Inf") == count
    assert metrics.value("kafka_network_requestmetrics_totaltimems_sum", request="Produce") > 0
    buckets = [s.value for s in metrics.labelled(
        "kafka_network_requestmetrics_totaltimems_bucket", request="Produce")]
    assert buckets == sorted(buckets), "buckets are cumulative"
    assert metrics.value("kafka_network_requestmetrics_errors_total", request="Produce",
                         error="NONE") >= 2  # one per partition
    for name in ("Fetch", "FetchConsumer", "OffsetCommit", "JoinGroup", "Metadata"):
        assert metrics.labelled("kafka_network_requestmetrics_requests_total", request=name)

    # the connections and the replica state of a single node
    assert metrics.value("kafka_server_socket_server_metrics_connection_count",
                         listener="PLAINTEXT", networkProcessor="0") >= 1
    # per client software (KIP-511): the group's member is librdkafka's
    assert metrics.value("kafka_server_socket_server_metrics_connections",
                         listener="PLAINTEXT", networkProcessor="0",
                         clientSoftwareName="confluent-kafka-python",
                         clientSoftwareVersion=f"{confluent_kafka.__version__}-rdkafka-"
                                               f"{confluent_kafka.libversion()[0]}") >= 1
    partitions = metrics.value("kafka_server_replicamanager_partitioncount")
    assert partitions >= 2 + 50  # the topic and __consumer_offsets
    assert metrics.value("kafka_server_replicamanager_leadercount") == partitions
    assert metrics.value("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert metrics.value("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert metrics.value("kafka_brokers") == 1


def test_a_scrape_holds_exactly_the_documented_families(broker: BrokerProcess) -> None:
    metrics = scrape(broker)
    kafka = {name: family.type for name, family in metrics.families.items()
             if name.startswith("kafka_")}
    assert kafka == FAMILIES
    assert "process_resident_memory_bytes" in metrics.families


def test_request_errors_are_counted_by_code(broker: BrokerProcess, topic: str) -> None:
    before = scrape(broker).labelled("kafka_network_requestmetrics_errors_total",
                                     request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION")
    with RawConnection(broker.bootstrap) as conn:
        answer = raw_produce(conn, topic, 0, build_batch([(None, b"v", (), now_ms())]))
    assert answer.error_code == 3
    after = scrape(broker).value("kafka_network_requestmetrics_errors_total",
                                 request="Produce", error="UNKNOWN_TOPIC_OR_PARTITION")
    assert after == (before[0].value if before else 0) + 1


def test_a_deleted_topics_series_go(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    produce_per_partition(broker.bootstrap, topic, {0: 3})
    consume_confluent(broker.bootstrap, topic, 3)
    assert scrape(broker).value("kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
    client = admin(broker.bootstrap)
    client.delete_topics([topic], operation_timeout=10)[topic].result(TIMEOUT)
    assert [s for s in scrape(broker).samples if s.labels.get("topic") == topic] == []


def test_the_status_json_shows_partitions_and_group_lag(broker: BrokerProcess, topic: str,
                                                        group_member: str) -> None:
    assert broker.metrics_url is not None
    with urllib.request.urlopen(broker.metrics_url + "status.json", timeout=TIMEOUT) as answer:
        data = json.load(answer)
    status = data["status"]
    mine = {p["partition"]: p for p in status["partitions"] if p["topic"] == topic}
    assert {p: (v["log_end_offset"], v["leader"], v["isr"]) for p, v in mine.items()} \
        == {0: (30, 0, [0]), 1: (20, 0, [0])}
    (group,) = [g for g in status["groups"] if g["group_id"] == group_member]
    assert group["state"] == "Stable" and len(group["members"]) == 1
    assert sorted(tp for m in group["members"] for tp, _ in m["assignment"]) == [topic]
    assert [(o["partition"], o["committed"], o["lag"]) for o in group["offsets"]] \
        == [(0, 12, 18), (1, 5, 15)]
    assert data["history"], "the rate history has its first sample"


def test_unknown_paths_are_404(broker: BrokerProcess) -> None:
    assert broker.metrics_url is not None
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(broker.metrics_url + "nothing-here", timeout=TIMEOUT)
    assert raised.value.code == 404


def _status(proc: BrokerProcess) -> dict:
    assert proc.metrics_url is not None
    with urllib.request.urlopen(proc.metrics_url + "status.json", timeout=TIMEOUT) as answer:
        return json.load(answer)["status"]  # type: ignore[no-any-return]


def test_the_cleaners_backlog_and_runs_are_measured(tmp_path: Path) -> None:
    # a cleaner round runs at start; with this backoff, no other one until the restart
    proc = start_broker(tmp_path, {**METRICS_ON, "log.cleaner.backoff.ms": "600000"})
    try:
        compacted = create_topic(proc.bootstrap, unique_topic("compacted"), config={
            "cleanup.policy": "compact", "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01"})
        for _ in range(20):  # 20 batches of the same 5 keys, a few per 1 KiB segment
            produce_confluent(proc.bootstrap, compacted, numbered(10, key_count=5, pad=40))
        backlog = scrape(proc)
        # nothing of it was ever cleaned: every inactive segment is dirty
        assert backlog.value("kafka_log_logcleanermanager_max_dirty_percent") == 100
        assert backlog.value("kafka_log_logcleaner_max_clean_time_secs") == 0
        assert backlog.value("kafka_log_logcleanermanager_time_since_last_run_ms") > 0
        assert backlog.value("kafka_log_logcleaner_deadthreadcount") == 0
        assert _status(proc)["cleaner"]["cleans"] == 0
        size = backlog.value("kafka_log_log_size", topic=compacted, partition="0")

        proc.config["log.cleaner.backoff.ms"] = "50"
        proc.restart()
        wait_until(lambda: _status(proc)["cleaner"]["cleans"] >= 1, message="a clean")
        cleaned = scrape(proc)
        assert cleaned.value("kafka_log_logcleanermanager_max_dirty_percent") < 100
        assert cleaned.value("kafka_log_logcleaner_max_clean_time_secs") > 0
        assert 0 < cleaned.value("kafka_log_logcleaner_cleaner_recopy_percent") < 100
        assert cleaned.value("kafka_log_log_size", topic=compacted, partition="0") < size
        assert cleaned.value("kafka_log_logcleanermanager_uncleanable_partitions_count",
                             logDirectory=str(proc.data_dir)) == 0
    finally:
        assert proc.stop() == 0


# -- the Grafana dashboard ----------------------------------------------------------------------


def _panels(dashboard: dict) -> Iterator[dict]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold their panels


def test_the_grafana_dashboard_queries_only_metrics_the_broker_exports(
        broker: BrokerProcess) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["title"] and dashboard["uid"] and dashboard["schemaVersion"] >= 30
    assert any(v["type"] == "datasource" and v["query"] == "prometheus"
               for v in dashboard["templating"]["list"])
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "gauge": ("",)}
    exported = {name + suffix for name, family in scrape(broker).families.items()
                for suffix in suffixes.get(family.type, ("",))}  # families with no sample too
    queries = [v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    for panel in _panels(dashboard):
        assert panel["type"] in ("row", "timeseries", "stat", "table"), panel["type"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"
            queries.append(target["expr"])
    assert len(queries) >= 10
    queried = {name for query in queries
               for name in re.findall(r"\b((?:kafka|process)_[a-z0-9_]+)", query)}
    assert queried - exported == set(), "the dashboard queries names the broker does not export"
    # it shows each kind of metric: topics, requests, logs, cleaner, replicas, lag, clients
    for name in ("kafka_server_brokertopicmetrics_messagesin_total",
                 "kafka_network_requestmetrics_totaltimems_bucket",
                 "kafka_network_requestmetrics_errors_total", "kafka_log_log_size",
                 "kafka_log_logcleanermanager_max_dirty_percent",
                 "kafka_server_replicamanager_underreplicatedpartitions",
                 "kafka_consumergroup_lag", "kafka_client_telemetry_metric"):
        assert name in queried


# -- starting, and not starting, the listener ---------------------------------------------------


def test_the_listener_is_off_unless_set(tmp_path: Path) -> None:
    proc = start_broker(tmp_path)
    try:
        assert proc.metrics_url is None
    finally:
        assert proc.stop() == 0


@pytest.mark.parametrize("value", ["127.0.0.1:9404", "https://127.0.0.1:9404",
                                   "http://127.0.0.1", "http://127.0.0.1:9404/metrics"])
def test_a_bad_listener_is_refused_in_one_line_naming_the_key(tmp_path: Path,
                                                              value: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sparklog.cli", "broker", "--data-dir", str(tmp_path),
         "--listen", "127.0.0.1:0", "--set", f"metrics.listener={value}"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"sparklog broker: invalid value {value!r} for broker config metrics.listener: "
        "expected http://HOST:PORT, e.g. http://127.0.0.1:9404"]


def test_a_listener_that_cannot_bind_stops_the_broker_cleanly(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "sparklog.cli", "broker", "--data-dir",
             str(tmp_path / "data"), "--listen", "127.0.0.1:0",
             "--set", f"metrics.listener=http://127.0.0.1:{port}"],
            capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert f"cannot listen on metrics.listener http://127.0.0.1:{port}/" in done.stderr
    assert (tmp_path / "data" / ".kafka_cleanshutdown").exists(), "the logs were closed"


# -- rate-limited connection warnings -----------------------------------------------------------


def test_a_burst_of_half_open_connections_gives_a_few_warnings_and_a_count(
        tmp_path: Path) -> None:
    proc = start_broker(tmp_path)
    try:
        for _ in range(200):  # each sends part of a frame, then ends its side of the stream
            with RawConnection(proc.bootstrap) as conn:
                conn.send(struct.pack(">i", 100) + b"x" * 10)
                conn.sock.shutdown(socket.SHUT_WR)
                assert conn.read_until_closed() == b""

        def warnings() -> list[str | int]:
            """The warning lines in order: a line logged one by one as "one", a summary
            as the number of warnings it counts."""
            found: list[str | int] = []
            for line in proc.log_file.read_text().splitlines():
                summary = re.search(r"(\d+) more connections closed for bad input", line)
                if summary:
                    found.append(int(summary[1]))
                elif " WARNING " in line and "closing connection from" in line:
                    found.append("one")
            return found

        wait_until(lambda: sum(1 if w == "one" else w for w in warnings()) == 200, timeout=60,
                   message="every bad connection logged or counted in a summary")
        # each window: at most 5 lines one by one, then (when more came) one summary
        windows = "".join("." if w == "one" else "|" for w in warnings()).split("|")
        assert all(len(window) <= 5 for window in windows), windows
        assert len(windows) >= 2, "a summary was written"
    finally:
        assert proc.stop() == 0
