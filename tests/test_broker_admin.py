"""Topic administration against a real broker, with confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient (every test runs with both, through one small adapter).

Covers: CreateTopics (partitions and configs, validate_only, TOPIC_ALREADY_EXISTS,
INVALID_REPLICATION_FACTOR for a factor of 3, INVALID_CONFIG for bad values and unknown
keys, and that a failed create leaves nothing behind); DescribeConfigs values and sources
(topic override, broker ``log.*`` setting, default); AlterConfigs (replaces the overrides)
and IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT), validate_only, bad values, and
that a changed config applies to the live log at once; CreatePartitions (grow, validate_only,
no shrinking); DeleteTopics (gone from metadata and disk; a re-created topic starts empty);
DeleteRecords (low watermark moves, the records below it are unreadable: a Fetch there is
OFFSET_OUT_OF_RANGE, consumers start at the new earliest offset); Metadata v12's topic ids
(stable while a topic lives, new for a re-created one) and leader epochs; DescribeLogDirs
(the data directory, partition sizes) with kafka-python and ``sparklog log-dirs``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, Protocol

import pytest
from broker_fixtures import (
    TIMEOUT,
    RawConnection,
    Rec,
    admin,
    consume_confluent,
    create_topic,
    fetch_request,
    metadata_v12,
    module_broker,
    numbered,
    one_batch,
    produce_confluent,
    raw_fetch,
    raw_produce,
    topic,
    watermarks,
)
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import AlterConfigOp
from kafka.admin import ConfigResource as KpConfigResource
from kafka.errors import KafkaError as KpKafkaError
from kafka.protocol.consumer import FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from sparklog.broker.process import BrokerProcess
from sparklog.cli import main as sparklog_main
from sparklog.errors import ErrorCode
from sparklog.record.records import build_batch

__all__ = ["broker", "topic"]  # fixtures, imported for pytest

# A broker-level topic default, to see the STATIC_BROKER_CONFIG source (1 GiB: harmless).
BROKER_RETENTION_BYTES = "1073741824"
broker = module_broker({"log.retention.bytes": BROKER_RETENTION_BYTES})

pytestmark = pytest.mark.timeout(60)

Op = tuple[str, str, str | None]
"""An incremental config change: (name, "SET" | "DELETE" | "APPEND" | "SUBTRACT", value)."""


class Admin(Protocol):
    """What the tests ask of an admin client; errors come back as Kafka error codes."""

    def create(self, name: str, partitions: int = 1, replication: int = 1,
               configs: dict[str, str] | None = None, validate_only: bool = False) -> int: ...
    def describe(self, name: str) -> dict[str, tuple[str | None, str]]: ...
    def alter(self, name: str, configs: dict[str, str], validate_only: bool = False) -> int: ...
    def incremental(self, name: str, ops: list[Op]) -> int: ...
    def create_partitions(self, name: str, total: int, validate_only: bool = False) -> int: ...
    def delete_topic(self, name: str) -> int: ...
    def delete_records(self, name: str, partition: int, offset: int) -> tuple[int, int]: ...


def _confluent_code(future: Future[Any]) -> int:
    try:
        future.result(TIMEOUT)
    except KafkaException as exc:
        return int(exc.args[0].code())
    return ErrorCode.NONE


class ConfluentAdmin:
    def __init__(self, bootstrap: str) -> None:
        self.client: AdminClient = admin(bootstrap)

    def create(self, name: str, partitions: int = 1, replication: int = 1,
               configs: dict[str, str] | None = None, validate_only: bool = False) -> int:
        futures = self.client.create_topics(
            [NewTopic(name, partitions, replication, config=configs or {})],
            validate_only=validate_only, request_timeout=TIMEOUT)
        return _confluent_code(futures[name])

    def describe(self, name: str) -> dict[str, tuple[str | None, str]]:
        resource = ConfigResource(ResourceType.TOPIC, name)
        entries = self.client.describe_configs([resource])[resource].result(TIMEOUT)
        return {k: (e.value, ConfigSource(e.source).name) for k, e in entries.items()}

    def alter(self, name: str, configs: dict[str, str], validate_only: bool = False) -> int:
        resource = ConfigResource(ResourceType.TOPIC, name, set_config=configs)
        futures = self.client.alter_configs([resource], validate_only=validate_only)
        return _confluent_code(futures[resource])

    def incremental(self, name: str, ops: list[Op]) -> int:
        entries = [ConfigEntry(key, value, incremental_operation=AlterConfigOpType[op])
                   for key, op, value in ops]
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        return _confluent_code(self.client.incremental_alter_configs([resource])[resource])

    def create_partitions(self, name: str, total: int, validate_only: bool = False) -> int:
        futures = self.client.create_partitions([NewPartitions(name, total)],
                                                validate_only=validate_only)
        return _confluent_code(futures[name])

    def delete_topic(self, name: str) -> int:
        return _confluent_code(self.client.delete_topics([name], operation_timeout=10)[name])

    def delete_records(self, name: str, partition: int, offset: int) -> tuple[int, int]:
        (future,) = self.client.delete_records(
            [CkTopicPartition(name, partition, offset)]).values()
        try:
            return ErrorCode.NONE, future.result(TIMEOUT).low_watermark
        except KafkaException as exc:
            return int(exc.args[0].code()), -1


def _kafka_python_code(result: str) -> int:
    """kafka-python reports alter results as 'OK' or '[Error 40] InvalidConfigurationError...'."""
    if result == "OK":
        return ErrorCode.NONE
    match = re.match(r"\[Error (-?\d+)\]", result)
    assert match, result
    return int(match[1])


class KafkaPythonAdmin:
    def __init__(self, bootstrap: str) -> None:
        self.client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="sparklog-tests",
                                       request_timeout_ms=int(TIMEOUT * 1000))

    def close(self) -> None:
        self.client.close()

    def create(self, name: str, partitions: int = 1, replication: int = 1,
               configs: dict[str, str] | None = None, validate_only: bool = False) -> int:
        result = self.client.create_topics(
            {name: {"num_partitions": partitions, "replication_factor": replication,
                    "configs": configs or {}}},
            validate_only=validate_only, raise_errors=False)
        (answer,) = result["topics"]
        return int(answer["error_code"])

    def describe(self, name: str) -> dict[str, tuple[str | None, str]]:
        result = self.client.describe_configs([KpConfigResource("TOPIC", name)],
                                              config_filter="all")
        entries = result["topic"][name]
        return {k: (e["value"], e["config_source"]) for k, e in entries.items()}

    def alter(self, name: str, configs: dict[str, str], validate_only: bool = False) -> int:
        result = self.client.alter_configs([KpConfigResource("TOPIC", name, configs=configs)],
                                           validate_only=validate_only, incremental=False,
                                           raise_on_unknown=False)
        return _kafka_python_code(result["topic"][name])

    def incremental(self, name: str, ops: list[Op]) -> int:
        configs = {key: (AlterConfigOp[op], value) for key, op, value in ops}
        result = self.client.alter_configs([KpConfigResource("TOPIC", name, configs=configs)],
                                           incremental=True, raise_on_unknown=False)
        return _kafka_python_code(result["topic"][name])

    def create_partitions(self, name: str, total: int, validate_only: bool = False) -> int:
        response = self.client.create_partitions({name: total}, validate_only=validate_only,
                                                 raise_errors=False)
        (answer,) = response.results
        return int(answer.error_code)

    def delete_topic(self, name: str) -> int:
        result = self.client.delete_topics([name], raise_errors=False)
        (answer,) = result["topics"]
        return int(answer["error_code"])

    def delete_records(self, name: str, partition: int, offset: int) -> tuple[int, int]:
        tp = KpTopicPartition(name, partition)
        try:
            result = self.client.delete_records({tp: offset})
        except KpKafkaError as exc:
            return int(exc.errno), -1
        return ErrorCode.NONE, int(result[tp]["low_watermark"])


@pytest.fixture(scope="module")
def confluent_admin(broker: BrokerProcess) -> ConfluentAdmin:
    return ConfluentAdmin(broker.bootstrap)


@pytest.fixture(scope="module")
def kafka_python_admin(broker: BrokerProcess) -> Iterator[KafkaPythonAdmin]:
    client = KafkaPythonAdmin(broker.bootstrap)
    yield client
    client.close()


@pytest.fixture(params=["confluent", "kafka-python"])
def client(request: pytest.FixtureRequest) -> Admin:
    return request.getfixturevalue(request.param.replace("-", "_") + "_admin")


def topic_names(bootstrap: str) -> set[str]:
    """Every topic in the cluster (a Metadata request for all topics creates none)."""
    return set(admin(bootstrap).list_topics(timeout=TIMEOUT).topics)


def partition_count(bootstrap: str, name: str) -> int:
    return len(admin(bootstrap).list_topics(name, timeout=TIMEOUT).topics[name].partitions)


def produce_time() -> int:
    return int(time.time() * 1000)


def _value_and_source(configs: dict[str, tuple[str | None, str]], *keys: str) -> dict[str, Any]:
    return {k: configs[k] for k in keys}


# -- CreateTopics -------------------------------------------------------------------------------


def test_create_topic_with_configs(broker: BrokerProcess, topic: str, client: Admin) -> None:
    overrides = {"retention.ms": "3600000", "cleanup.policy": "compact",
                 "max.message.bytes": "2000000"}

    assert client.create(topic, partitions=3, configs=overrides) == ErrorCode.NONE

    assert topic in topic_names(broker.bootstrap)
    assert partition_count(broker.bootstrap, topic) == 3
    assert _value_and_source(client.describe(topic), *overrides, "segment.bytes",
                             "retention.bytes") == {
        "retention.ms": ("3600000", "DYNAMIC_TOPIC_CONFIG"),
        "cleanup.policy": ("compact", "DYNAMIC_TOPIC_CONFIG"),
        "max.message.bytes": ("2000000", "DYNAMIC_TOPIC_CONFIG"),
        "segment.bytes": ("1073741824", "DEFAULT_CONFIG"),
        "retention.bytes": (BROKER_RETENTION_BYTES, "STATIC_BROKER_CONFIG"),
    }
    # The configs are live: a compacted topic refuses records without a key.
    now = produce_time()
    with RawConnection(broker.bootstrap) as conn:
        keyless = raw_produce(conn, topic, 0, build_batch([(None, b"v", (), now)]))
        keyed = raw_produce(conn, topic, 0, build_batch([(b"k", b"v", (), now)]))
    assert keyless.error_code == ErrorCode.INVALID_RECORD
    assert keyed == (ErrorCode.NONE, 0)


def test_create_validate_only_changes_nothing(broker: BrokerProcess, topic: str,
                                              client: Admin) -> None:
    assert client.create(topic, partitions=2, configs={"retention.ms": "1000"},
                         validate_only=True) == ErrorCode.NONE
    assert client.create(topic, configs={"retention.ms": "soon"},
                         validate_only=True) == ErrorCode.INVALID_CONFIG

    assert topic not in topic_names(broker.bootstrap)
    assert not list(broker.data_dir.glob(f"{topic}-*"))


def test_create_errors(broker: BrokerProcess, topic: str, client: Admin) -> None:
    assert client.create(topic) == ErrorCode.NONE
    assert client.create(topic) == ErrorCode.TOPIC_ALREADY_EXISTS
    assert client.create(topic + "-rf3", replication=3) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert client.create(topic + "-bad", configs={"retention.ms": "soon"}) == (
        ErrorCode.INVALID_CONFIG)
    assert client.create(topic + "-bad", configs={"cleanup.policy": "shred"}) == (
        ErrorCode.INVALID_CONFIG)
    assert client.create(topic + "-bad", configs={"no.such.config": "1"}) == (
        ErrorCode.INVALID_CONFIG)

    names = topic_names(broker.bootstrap)
    assert topic in names
    assert not {topic + "-rf3", topic + "-bad"} & names
    assert partition_count(broker.bootstrap, topic) == 1  # the duplicate create changed nothing


# -- configs ----------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_alter_configs_replaces_overrides(broker: BrokerProcess, topic: str,
                                          client: Admin) -> None:
    """AlterConfigs is deprecated in clients but still sent by older tools: it must work."""
    assert client.create(topic, configs={"retention.ms": "3600000",
                                         "cleanup.policy": "compact"}) == ErrorCode.NONE

    assert client.alter(topic, {"retention.ms": "1000"}, validate_only=True) == ErrorCode.NONE
    assert client.describe(topic)["retention.ms"] == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert client.alter(topic, {"retention.ms": "-7"}) == ErrorCode.INVALID_CONFIG
    assert client.describe(topic)["retention.ms"] == ("3600000", "DYNAMIC_TOPIC_CONFIG")

    assert client.alter(topic, {"retention.ms": "7200000"}) == ErrorCode.NONE

    configs = client.describe(topic)
    assert configs["retention.ms"] == ("7200000", "DYNAMIC_TOPIC_CONFIG")
    # AlterConfigs replaces the whole override set; kafka-python resends the other
    # overrides it read first (documented), confluent-kafka sends only what it is given.
    if isinstance(client, ConfluentAdmin):
        assert configs["cleanup.policy"] == ("delete", "DEFAULT_CONFIG")
    else:
        assert configs["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")


def test_incremental_alter_configs(broker: BrokerProcess, topic: str, client: Admin) -> None:
    assert client.create(topic, configs={"retention.ms": "3600000",
                                         "segment.ms": "600000"}) == ErrorCode.NONE

    assert client.incremental(topic, [("retention.ms", "SET", "7200000"),
                                      ("segment.ms", "DELETE", None),
                                      ("cleanup.policy", "APPEND", "compact")]) == ErrorCode.NONE
    configs = client.describe(topic)
    assert _value_and_source(configs, "retention.ms", "segment.ms", "cleanup.policy") == {
        "retention.ms": ("7200000", "DYNAMIC_TOPIC_CONFIG"),
        "segment.ms": ("604800000", "DEFAULT_CONFIG"),
        "cleanup.policy": ("delete,compact", "DYNAMIC_TOPIC_CONFIG"),
    }

    assert client.incremental(topic, [("cleanup.policy", "SUBTRACT", "delete")]) == (
        ErrorCode.NONE)
    assert client.describe(topic)["cleanup.policy"] == ("compact", "DYNAMIC_TOPIC_CONFIG")
    assert client.incremental(topic, [("max.message.bytes", "SET", "lots")]) == (
        ErrorCode.INVALID_CONFIG)
    assert client.incremental(topic, [("retention.ms", "APPEND", "1")]) == (
        ErrorCode.INVALID_CONFIG)  # APPEND needs a list config
    assert client.describe(topic)["retention.ms"] == ("7200000", "DYNAMIC_TOPIC_CONFIG")

    # A change applies to the live log at once.
    assert client.incremental(topic, [("max.message.bytes", "SET", "1000")]) == ErrorCode.NONE
    now = produce_time()
    with RawConnection(broker.bootstrap) as conn:
        big = raw_produce(conn, topic, 0, build_batch([(b"k", b"x" * 2000, (), now)]))
        small = raw_produce(conn, topic, 0, build_batch([(b"k", b"x" * 10, (), now)]))
    assert big.error_code == ErrorCode.MESSAGE_TOO_LARGE
    assert small == (ErrorCode.NONE, 0)


# -- partitions and topics ----------------------------------------------------------------------


def test_create_partitions(broker: BrokerProcess, topic: str, client: Admin) -> None:
    assert client.create(topic) == ErrorCode.NONE
    produce_confluent(broker.bootstrap, topic, numbered(3))

    assert client.create_partitions(topic, 5, validate_only=True) == ErrorCode.NONE
    assert partition_count(broker.bootstrap, topic) == 1
    assert client.create_partitions(topic, 3) == ErrorCode.NONE
    assert partition_count(broker.bootstrap, topic) == 3
    assert client.create_partitions(topic, 2) == ErrorCode.INVALID_PARTITIONS
    assert client.create_partitions(topic, 3) == ErrorCode.INVALID_PARTITIONS
    assert partition_count(broker.bootstrap, topic) == 3

    # The new partitions are usable, the old one kept its records.
    records = [Rec(r.key, r.value, partition=2) for r in numbered(4)]
    acked = produce_confluent(broker.bootstrap, topic, records)
    assert [(r.partition, r.offset) for r in acked] == [(2, i) for i in range(4)]
    assert len(consume_confluent(broker.bootstrap, topic, 7, partitions=(0, 1, 2))) == 7
    assert watermarks(broker.bootstrap, topic, 1) == (0, 0)


def test_delete_topic(broker: BrokerProcess, topic: str, client: Admin) -> None:
    assert client.create(topic, partitions=2) == ErrorCode.NONE
    produce_confluent(broker.bootstrap, topic, numbered(5))
    assert list(broker.data_dir.glob(f"{topic}-*"))

    assert client.delete_topic(topic) == ErrorCode.NONE

    assert topic not in topic_names(broker.bootstrap)
    # as in Kafka: renamed at once, removed after file.delete.delay.ms (reads under way end)
    assert sorted(p.name.endswith("-delete") for p in broker.data_dir.glob(f"{topic}-*")) \
        == [True, True]
    assert client.delete_topic(topic) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    # A topic created again under the same name starts empty.
    assert client.create(topic) == ErrorCode.NONE
    assert watermarks(broker.bootstrap, topic) == (0, 0)


def test_kafka_python_creates_and_deletes_topics_at_the_newest_versions(
        broker: BrokerProcess, topic: str) -> None:
    """kafka-python 3 (versions negotiated): CreateTopics v7 answers what was created (its
    id, partitions, replication factor, every config with its source: KIP-525), or what
    would be (validate_only: no id, nothing created); DeleteTopics v6 deletes by id, and an
    id no topic has is UNKNOWN_TOPIC_ID."""
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (created,) = client.create_topics(
            {topic: {"num_partitions": 2, "configs": {"retention.ms": "3600000"}}})["topics"]
        assert (created["error_code"], created["num_partitions"],
                created["replication_factor"]) == (0, 2, 1)
        assert uuid.UUID(created["topic_id"]) == metadata_v12(
            broker.bootstrap, topic).topics[0].topic_id
        configs = dict(created["configs"])
        assert (configs["retention.ms"]["value"], configs["retention.ms"]["config_source"]) == \
            ("3600000", "DYNAMIC_TOPIC_CONFIG")
        assert configs["retention.bytes"]["config_source"] == "STATIC_BROKER_CONFIG"
        assert configs["cleanup.policy"] == {"value": "delete", "read_only": False,
                                             "config_source": "DEFAULT_CONFIG",
                                             "is_sensitive": False}
        (checked,) = client.create_topics({f"{topic}-checked": {}},
                                          validate_only=True)["topics"]
        assert (checked["error_code"], checked["topic_id"], checked["num_partitions"]) == \
            (0, None, 1)
        assert f"{topic}-checked" not in client.list_topics()
        unknown = uuid.uuid4()
        deleted = client.delete_topics([uuid.UUID(created["topic_id"]), unknown],
                                       raise_errors=False)["topics"]
        assert [(t["name"], t["error_code"]) for t in deleted] == \
            [(topic, 0), (None, ErrorCode.UNKNOWN_TOPIC_ID)]
        assert topic not in client.list_topics()
    finally:
        client.close()


def test_describe_topic_partitions_pages_through_topics_with_a_cursor(
        broker: BrokerProcess, topic: str) -> None:
    """DescribeTopicPartitions (Kafka 3.8's admin client): topics in name order, at most
    the limit of partitions per answer, the next cursor naming the first left out; an
    unknown topic is answered as such, a cursor on a topic not asked for is refused."""
    first, second = f"{topic}-a", f"{topic}-b"
    create_topic(broker.bootstrap, first, partitions=3)
    create_topic(broker.bootstrap, second, partitions=2)
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        pages, cursor = [], None
        while True:
            page = client.describe_topic_partitions([second, first], response_partition_limit=2,
                                                    cursor=cursor)
            pages.append([(t["name"], [p["partition_index"] for p in t["partitions"]])
                          for t in page["topics"]])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == [[(first, [0, 1])], [(first, [2]), (second, [0])], [(second, [1])]]
        (described,) = client.describe_topic_partitions([first])["topics"]
        assert described["topic_id"] == metadata_v12(broker.bootstrap, first).topics[0].topic_id
        assert [(p["leader_id"], p["replica_nodes"], p["isr_nodes"])
                for p in described["partitions"]] == [(0, [0], [0])] * 3
        (unknown,) = client.describe_topic_partitions([f"{topic}-never"])["topics"]
        assert unknown["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert f"{topic}-never" not in client.list_topics()
        refused = client.describe_topic_partitions(
            [first], cursor={"topic_name": second, "partition_index": 0})["topics"]
        assert [t["error_code"] for t in refused] == [ErrorCode.INVALID_REQUEST]
    finally:
        client.close()


def test_metadata_names_topic_ids_and_leader_epochs(broker: BrokerProcess,
                                                    topic: str) -> None:
    """What librdkafka reads from Metadata v9+: leader epochs, and (v10+) topic ids, each
    topic's own and kept while it lives; from v12 a topic is found by its id alone, and the
    id of a deleted topic (even one re-created under its name) finds nothing."""
    create_topic(broker.bootstrap, topic, partitions=2)
    found, missing = metadata_v12(broker.bootstrap, topic, f"{topic}-never").topics
    assert found.error_code == ErrorCode.NONE and found.topic_id.int != 0
    assert [(p.leader_id, p.leader_epoch) for p in found.partitions] == [(0, 0), (0, 0)]
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert metadata_v12(broker.bootstrap, topic).topics[0].topic_id == found.topic_id
    (by_id,) = metadata_v12(broker.bootstrap, found.topic_id).topics
    assert (by_id.error_code, by_id.name, by_id.topic_id) == \
        (ErrorCode.NONE, topic, found.topic_id)
    assert [p.partition_index for p in by_id.partitions] == [0, 1]
    deleting = admin(broker.bootstrap)  # kept: its futures fail once it is freed
    deleting.delete_topics([topic])[topic].result(TIMEOUT)
    create_topic(broker.bootstrap, topic)
    assert metadata_v12(broker.bootstrap, topic).topics[0].topic_id != found.topic_id
    (gone,) = metadata_v12(broker.bootstrap, found.topic_id).topics
    assert (gone.error_code, gone.name) == (ErrorCode.UNKNOWN_TOPIC_ID, None)


def test_produce_and_fetch_by_an_unknown_topic_id_change_nothing(broker: BrokerProcess,
                                                                 topic: str) -> None:
    """Produce v13 and Fetch v13+ name topics by id: an id no topic has is
    UNKNOWN_TOPIC_ID for each partition asked for, and nothing is appended."""
    create_topic(broker.bootstrap, topic)
    unknown = uuid.uuid4()
    produced = ProduceRequest.TopicProduceData
    with RawConnection(broker.bootstrap) as conn:
        answer = conn.call(ProduceRequest(
            version=13, transactional_id=None, acks=-1, timeout_ms=10000,
            topic_data=[produced(topic_id=unknown, partition_data=[
                produced.PartitionProduceData(index=p, records=one_batch(b"x"))
                for p in (0, 1)])]), ProduceResponse)
        assert [(t.topic_id, [p.error_code for p in t.partition_responses])
                for t in answer.responses] == [(unknown, [ErrorCode.UNKNOWN_TOPIC_ID] * 2)]
        answer = conn.call(fetch_request(unknown, 0, 0, max_wait_ms=500, min_bytes=1,
                                         version=18), FetchResponse)
        assert [(t.topic_id, [p.error_code for p in t.partitions])
                for t in answer.responses] == [(unknown, [ErrorCode.UNKNOWN_TOPIC_ID])]
    assert watermarks(broker.bootstrap, topic) == (0, 0)


def test_delete_records(broker: BrokerProcess, topic: str, client: Admin) -> None:
    create_topic(broker.bootstrap, topic)
    for start in range(0, 10, 2):  # five batches of two records
        produce_confluent(broker.bootstrap, topic, numbered(10)[start:start + 2])

    assert client.delete_records(topic, 0, 5) == (ErrorCode.NONE, 5)  # inside a batch

    assert watermarks(broker.bootstrap, topic) == (5, 10)
    consumed = consume_confluent(broker.bootstrap, topic, 5)
    assert [r.offset for r in consumed] == [5, 6, 7, 8, 9]
    with RawConnection(broker.bootstrap) as conn:
        below = raw_fetch(conn, topic, 0, 2)
        at = raw_fetch(conn, topic, 0, 5)
    assert below.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert below.log_start_offset == 5
    assert at.error_code == ErrorCode.NONE and at.records

    assert client.delete_records(topic, 0, 3) == (ErrorCode.NONE, 5)  # never moves back
    assert client.delete_records(topic, 0, 11)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
    assert client.delete_records(topic, 0, 10) == (ErrorCode.NONE, 10)
    assert watermarks(broker.bootstrap, topic) == (10, 10)


def test_describe_log_dirs(broker: BrokerProcess, topic: str,
                           capsys: pytest.CaptureFixture[str]) -> None:
    """DescribeLogDirs (kafka-python's describe_log_dirs, and ``sparklog log-dirs``): the
    data directory, each partition's size in bytes (its segment files), no lag."""
    create_topic(broker.bootstrap, topic, partitions=2)
    produce_confluent(broker.bootstrap, topic, [Rec(None, b"x" * 500, partition=0)] * 3)
    on_disk = sum(p.stat().st_size for p in (broker.data_dir / f"{topic}-0").glob("*.log"))
    assert on_disk > 1500
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        (answer,) = client.describe_log_dirs(topic_partitions={topic: [0, 1, 7]})
    finally:
        client.close()
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == str(broker.data_dir.resolve())
    assert 0 < log_dir["usable_bytes"] <= log_dir["total_bytes"]
    (found,) = log_dir["topics"]
    assert found["name"] == topic
    assert [(p["partition_index"], p["partition_size"], p["offset_lag"], p["is_future_key"])
            for p in found["partitions"]] == [(0, on_disk, 0, False), (1, 0, 0, False)]

    capsys.readouterr()
    assert sparklog_main(["log-dirs", "--describe", "--bootstrap-server", broker.bootstrap,
                          "--topic-list", topic]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0"]
    assert json.loads(lines[2]) == {"version": 1, "brokers": [{"broker": 0, "logDirs": [{
        "logDir": str(broker.data_dir.resolve()), "error": None, "partitions": [
            {"partition": f"{topic}-0", "size": on_disk, "offsetLag": 0, "isFuture": False},
            {"partition": f"{topic}-1", "size": 0, "offsetLag": 0, "isFuture": False}]}]}]}
    assert sparklog_main(["log-dirs", "--describe", "--bootstrap-server", broker.bootstrap,
                          "--broker-list", "0,3"]) == 1
    assert "The given brokers do not exist: 3. Current existent brokers: 0" in \
        capsys.readouterr().err


def test_alter_replica_log_dirs(broker: BrokerProcess, topic: str) -> None:
    """AlterReplicaLogDirs (kafka-python's alter_replica_log_dirs, as its own integration suite
    calls it): a move to the directory a replica is in is done; another directory is
    LOG_DIR_NOT_FOUND, a partition the broker holds no replica of REPLICA_NOT_AVAILABLE."""
    from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError
    from kafka.structs import TopicPartitionReplica

    create_topic(broker.bootstrap, topic, partitions=1)
    here, gone = (TopicPartitionReplica(topic, 0, 0), TopicPartitionReplica(topic, 5, 0))
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        current = client.describe_log_dirs()[0]["log_dirs"][0]["log_dir"]
        assert client.alter_replica_log_dirs({here: current, gone: current}) == \
            {here: NoError, gone: ReplicaNotAvailableError}
        assert client.alter_replica_log_dirs({here: "/elsewhere"}) == \
            {here: LogDirNotFoundError}
    finally:
        client.close()
