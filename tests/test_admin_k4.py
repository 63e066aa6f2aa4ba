"""Kafka 4's admin, configuration and offset-lookup versions, with real clients at their
newest protocol (kafka-python 3 with ``api_version`` unset, confluent-kafka's AdminClient and
Consumer) and raw requests (kafka-python's codec) for what each version means.

Covers: ListOffsets' max timestamp (KIP-734, v7) through confluent-kafka's
``OffsetSpec.max_timestamp()`` and kafka-python's ``OffsetSpec.MAX_TIMESTAMP``, across batches
and inside one batch; the tiered-storage specs answered as Kafka without tiering (-4 the log
start, -5 and -6 offset -1) and refused per partition before their version; timestamps
through ``offsets_for_times``; DescribeCluster (cluster id, controller, brokers, endpoint
types of v1, fenced brokers of v2, authorized operations); ListConfigResources (KIP-1142);
DescribeConfigs v4 of a broker (synonyms, config types, documentation).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    RawConnection,
    admin,
    create_topic,
    embedded,
    embedded_module,
    kp_request,
    kp_response,
    topic,
)
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import OffsetSpec as CkOffsetSpec
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import OffsetSpec as KpOffsetSpec

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

__all__ = ["embedded", "embedded_module", "topic"]  # fixtures, imported for pytest

NOW = int(time.time() * 1000)
STAMPS = [NOW - 60_000, NOW - 20_000, NOW - 40_000, NOW - 20_000, NOW - 50_000]
"""Record timestamps, out of order: the largest first held by offset 1, again by offset 3."""


def _produce(bootstrap: str, topic: str, partition: int, *, one_batch: bool) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 200 if one_batch else 0})
    for i, stamp in enumerate(STAMPS):
        producer.produce(topic, value=b"v%d" % i, partition=partition, timestamp=stamp)
        if not one_batch:
            producer.flush(TIMEOUT)  # a batch per record
    assert producer.flush(TIMEOUT) == 0


@pytest.fixture
def stamped(embedded: EmbeddedBroker, topic: str) -> str:
    """``topic`` with STAMPS in partition 0 (a batch each) and partition 1 (one batch)."""
    create_topic(embedded.bootstrap, topic, partitions=2)
    _produce(embedded.bootstrap, topic, 0, one_batch=False)
    _produce(embedded.bootstrap, topic, 1, one_batch=True)
    return topic


def _kp_admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)


def test_max_timestamp_names_the_first_record_holding_the_largest_timestamp(
        embedded: EmbeddedBroker, stamped: str) -> None:
    """KIP-734: confluent-kafka's OffsetSpec.max_timestamp() and kafka-python's
    MAX_TIMESTAMP answer offset 1 and its timestamp, whether the records came in a batch
    each or in one batch (where the batch's last offset would be 4)."""
    client = admin(embedded.bootstrap)
    futures = client.list_offsets({CkTopicPartition(stamped, p): CkOffsetSpec.max_timestamp()
                                   for p in (0, 1)})
    for tp, future in futures.items():
        info = future.result(TIMEOUT)
        assert (tp.partition, info.offset, info.timestamp) == (tp.partition, 1, STAMPS[1])
        assert info.leader_epoch == 0
    kp = _kp_admin(embedded.bootstrap)
    try:
        found = kp.list_partition_offsets({KpTopicPartition(stamped, p): KpOffsetSpec.MAX_TIMESTAMP
                                           for p in (0, 1)})
    finally:
        kp.close()
    assert {tp.partition: (o.offset, o.timestamp) for tp, o in found.items()} == \
        {0: (1, STAMPS[1]), 1: (1, STAMPS[1])}


def test_tiered_specs_are_answered_as_kafka_without_tiered_storage(
        embedded: EmbeddedBroker, stamped: str) -> None:
    """kafka-python (ListOffsets v11): EARLIEST_LOCAL is the log start (moved by
    DeleteRecords), LATEST_TIERED -1; earliest and latest as ever."""
    kp = _kp_admin(embedded.bootstrap)
    tp = KpTopicPartition(stamped, 0)
    try:
        kp.delete_records({tp: 2})
        specs = (KpOffsetSpec.EARLIEST, KpOffsetSpec.EARLIEST_LOCAL, KpOffsetSpec.LATEST_TIERED,
                 KpOffsetSpec.LATEST)
        found = [kp.list_partition_offsets({tp: spec})[tp].offset for spec in specs]
    finally:
        kp.close()
    assert found == [2, 2, -1, len(STAMPS)]


def _list_offsets(bootstrap: str, version: int, topic: str, timestamp: int,
                  isolation: int = 0) -> Any:
    """One ListOffsets of partition 0 at ``version`` (kafka-python's codec)."""
    request_class = kp_request(ApiKey.LIST_OFFSETS)
    topics = [request_class.ListOffsetsTopic(name=topic, partitions=[
        request_class.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=timestamp)])]
    with RawConnection(bootstrap) as conn:
        answer = conn.call(request_class(version=version, replica_id=-1,
                                         isolation_level=isolation,
                                         topics=topics, timeout_ms=1000),
                           kp_response(ApiKey.LIST_OFFSETS))
    (only,) = answer.topics[0].partitions
    return only


@pytest.mark.parametrize(("timestamp", "first_version"),
                         [(-3, 7), (-4, 8), (-5, 9), (-6, 11)])
def test_each_special_timestamp_needs_its_version(embedded: EmbeddedBroker, stamped: str,
                                                  timestamp: int, first_version: int) -> None:
    """Before the version that brought it a special timestamp is UNSUPPORTED_VERSION for
    the partition (Kafka's ``timestampMinSupportedVersion``); from it on it is answered."""
    before = _list_offsets(embedded.bootstrap, first_version - 1, stamped, timestamp)
    assert (before.error_code, before.offset) == (ErrorCode.UNSUPPORTED_VERSION, -1)
    answer = _list_offsets(embedded.bootstrap, first_version, stamped, timestamp)
    expected = {-3: (1, STAMPS[1], 0), -4: (0, -1, 0), -5: (-1, -1, -1), -6: (-1, -1, -1)}
    assert answer.error_code == ErrorCode.NONE
    assert (answer.offset, answer.timestamp, answer.leader_epoch) == expected[timestamp]
    unknown = _list_offsets(embedded.bootstrap, 11, stamped, -7)
    assert unknown.error_code == ErrorCode.UNSUPPORTED_VERSION


def test_max_timestamp_under_read_committed_waits_for_the_commit(embedded: EmbeddedBroker,
                                                                 stamped: str) -> None:
    """As Kafka: the record with the largest timestamp is answered only below the last
    fetchable offset, the last stable offset under read_committed: while its transaction
    is open -3 answers it to read_uncommitted and no offset to read_committed. (Its time
    is ahead of the COMMIT marker's, which would otherwise be the largest, as in Kafka.)"""
    producer = Producer({"bootstrap.servers": embedded.bootstrap,
                         "transactional.id": f"{stamped}-txn"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    ahead = NOW + 600_000  # within message.timestamp.after.max.ms
    producer.produce(stamped, value=b"late", partition=0, timestamp=ahead)
    producer.flush(TIMEOUT)

    def max_timestamp(isolation: int) -> tuple[int, int]:
        answer = _list_offsets(embedded.bootstrap, 11, stamped, -3, isolation)
        return answer.offset, answer.timestamp

    assert max_timestamp(0) == (len(STAMPS), ahead)
    assert max_timestamp(1) == (-1, -1)
    producer.commit_transaction(TIMEOUT)
    assert max_timestamp(1) == (len(STAMPS), ahead)


def test_max_timestamp_of_an_empty_partition_is_no_offset(embedded: EmbeddedBroker,
                                                          topic: str) -> None:
    create_topic(embedded.bootstrap, topic)
    answer = _list_offsets(embedded.bootstrap, 11, topic, -3)
    assert (answer.error_code, answer.offset, answer.timestamp) == (ErrorCode.NONE, -1, -1)


def test_offsets_for_times_finds_the_first_record_at_or_after(embedded: EmbeddedBroker,
                                                              stamped: str) -> None:
    consumer = Consumer({"bootstrap.servers": embedded.bootstrap, "group.id": stamped})
    try:
        found = consumer.offsets_for_times(
            [CkTopicPartition(stamped, 0, NOW - 45_000), CkTopicPartition(stamped, 1, NOW)],
            TIMEOUT)
    finally:
        consumer.close()
    assert [(tp.partition, tp.offset) for tp in found] == [(0, 1), (1, -1)]


def test_describe_cluster_with_both_clients(embedded: EmbeddedBroker) -> None:
    """kafka-python (DescribeCluster v2) and confluent-kafka (whose describe_cluster
    librdkafka answers from Metadata v10) see the cluster id, this broker as the only broker
    and the controller, and, asked for, the cluster's operations."""
    node_id, cluster_id = embedded.call(lambda b: (b.node_id, b.cluster_id))
    client = admin(embedded.bootstrap)  # referenced: its futures fail once it is freed
    described = client.describe_cluster(include_authorized_operations=True).result(TIMEOUT)
    assert described.cluster_id == cluster_id
    assert [(n.id, n.host, n.port) for n in described.nodes] == \
        [(node_id, "127.0.0.1", int(embedded.bootstrap.rsplit(":", 1)[1]))]
    assert described.controller.id == node_id
    assert {op.name for op in described.authorized_operations} >= {"DESCRIBE", "ALTER"}
    kp = _kp_admin(embedded.bootstrap)
    try:
        kp_described = kp.describe_cluster()
    finally:
        kp.close()
    assert kp_described["cluster_id"] == cluster_id
    assert kp_described["controller_id"] == node_id
    assert [(b["broker_id"], b["is_fenced"]) for b in kp_described["brokers"]] == \
        [(node_id, False)]
    assert "DESCRIBE" in str(kp_described["authorized_operations"])


def _describe_cluster(bootstrap: str, version: int, **fields: Any) -> Any:
    fields.setdefault("include_cluster_authorized_operations", False)
    request = kp_request(ApiKey.DESCRIBE_CLUSTER)(version=version, **fields)
    with RawConnection(bootstrap) as conn:
        return conn.call(request, kp_response(ApiKey.DESCRIBE_CLUSTER))


def test_describe_cluster_endpoint_types(embedded: EmbeddedBroker) -> None:
    """v1's endpoint type: brokers are described; controllers are a mismatch at a broker
    (KIP-919), another type is unsupported; v2 lists the same unfenced broker either way."""
    brokers = _describe_cluster(embedded.bootstrap, 1, endpoint_type=1)
    assert (brokers.error_code, brokers.endpoint_type, len(brokers.brokers)) == (0, 1, 1)
    assert brokers.authorized_operations is None  # not asked for (-2**31)
    asked = _describe_cluster(embedded.bootstrap, 0, include_cluster_authorized_operations=True)
    assert asked.authorized_operations  # every cluster operation, without an authorizer
    controllers = _describe_cluster(embedded.bootstrap, 1, endpoint_type=2)
    assert (controllers.error_code, controllers.brokers) == \
        (ErrorCode.MISMATCHED_ENDPOINT_TYPE, [])
    unknown = _describe_cluster(embedded.bootstrap, 1, endpoint_type=3)
    assert unknown.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
    for fenced in (False, True):
        answer = _describe_cluster(embedded.bootstrap, 2, include_fenced_brokers=fenced)
        assert [(b.broker_id, b.is_fenced) for b in answer.brokers] == \
            [(embedded.call(lambda b: b.node_id), False)]


def test_list_config_resources(embedded: EmbeddedBroker, topic: str) -> None:
    """kafka-python's list_config_resources (v1): every topic and the broker; a type of
    which this broker has no configs lists nothing; a type Kafka 4.1 does not list fails
    the request (UNSUPPORTED_VERSION); v0 (client metrics) is empty."""
    create_topic(embedded.bootstrap, topic)
    kp = _kp_admin(embedded.bootstrap)
    try:
        listed = kp.list_config_resources()
        groups = kp.list_config_resources(["GROUP"])
    finally:
        kp.close()
    assert topic in listed["topic"]
    assert listed["broker"] == [str(embedded.call(lambda b: b.node_id))]
    assert set(listed) == {"topic", "broker"}
    assert groups == {}
    request_class = kp_request(ApiKey.LIST_CONFIG_RESOURCES)
    with RawConnection(embedded.bootstrap) as conn:
        bad = conn.call(request_class(version=1, resource_types=[2, 64]),
                        kp_response(ApiKey.LIST_CONFIG_RESOURCES))
        legacy = conn.call(request_class(version=0), kp_response(ApiKey.LIST_CONFIG_RESOURCES))
    assert (bad.error_code, bad.config_resources) == (ErrorCode.UNSUPPORTED_VERSION, [])
    assert (legacy.error_code, legacy.config_resources) == (0, [])


def test_broker_configs_carry_synonyms_and_types(embedded: EmbeddedBroker) -> None:
    """DescribeConfigs v4 of the broker (kafka-python): every config with synonyms (the
    default last) and its type; a topic default's documentation is its topic config's."""
    node_id = str(embedded.call(lambda b: b.node_id))
    request_class = kp_request(ApiKey.DESCRIBE_CONFIGS)
    resource = request_class.DescribeConfigsResource(
        resource_type=4, resource_name=node_id,
        configuration_keys=["num.partitions", "log.retention.ms", "auto.create.topics.enable"])
    with RawConnection(embedded.bootstrap) as conn:
        answer = conn.call(request_class(version=4, resources=[resource], include_synonyms=True,
                                         include_documentation=True),
                           kp_response(ApiKey.DESCRIBE_CONFIGS))
    (result,) = answer.results
    configs = {c.name: c for c in result.configs}
    assert {name: c.config_type for name, c in configs.items()} == \
        {"num.partitions": 3, "log.retention.ms": 5, "auto.create.topics.enable": 1}
    assert [(s.name, s.source) for s in configs["num.partitions"].synonyms] == \
        [("num.partitions", 5)]
    assert configs["log.retention.ms"].documentation
    assert configs["num.partitions"].documentation is None
    kp = _kp_admin(embedded.bootstrap)
    try:
        described = kp.describe_configs([KpConfigResource("BROKER", node_id)],
                                        include_synonyms=True, config_filter="all")
    finally:
        kp.close()
    assert "num.partitions" in str(described)
    with RawConnection(embedded.bootstrap) as conn:
        every = conn.call(request_class(version=4, resources=[request_class.DescribeConfigsResource(
            resource_type=4, resource_name=node_id, configuration_keys=None)],
            include_synonyms=False, include_documentation=False),
            kp_response(ApiKey.DESCRIBE_CONFIGS))
    untyped = [c.name for c in every.results[0].configs if c.config_type == 0]
    assert untyped == [], "kafka-python's admin test reads advertised.listeners' type"
