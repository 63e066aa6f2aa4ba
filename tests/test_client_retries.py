"""The source's Kafka client (``sparklog.client``) and task reader against a broker that
misbehaves on purpose (the in-process broker's fault hooks): retriable errors, dropped
connections, slow answers and a cached leader that refuses connections are retried until
the policy's deadline, fatal ones fail at once naming the error, and a task still yields
exactly its offset range."""

from __future__ import annotations

import logging

import pytest
from broker_fixtures import (
    Rec,
    create_topic,
    embedded,
    embedded_module,
    produce_confluent,
    unique_topic,
)

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.fault_hooks import Fault
from sparklog.client.cluster import TopicPartition
from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.client.transactions import abort_by_id
from sparklog.cluster.zookeeper_server import free_port
from sparklog.datasource.read.fetcher import read_partition
from sparklog.datasource.read.planning import KafkaInputPartition
from sparklog.datasource.read.read_options import TaskSettings
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

__all__ = ["embedded", "embedded_module"]  # fixtures, imported for pytest

PATIENT = RetryPolicy(timeout_s=20, backoff_s=0.02)
IMPATIENT = RetryPolicy(timeout_s=0.5, backoff_s=0.05)
COUNT = 50


@pytest.fixture
def topic(embedded: EmbeddedBroker) -> TopicPartition:
    name = create_topic(embedded.bootstrap, unique_topic("retries"))
    produce_confluent(embedded.bootstrap, name,
                      [Rec(f"k{i}".encode(), str(i).encode()) for i in range(COUNT)])
    return TopicPartition(name, 0)


def client(broker: EmbeddedBroker, retry: RetryPolicy = PATIENT,
           **settings: object) -> KafkaClient:
    config = ClientConfig(parse_bootstrap(broker.bootstrap), **settings)  # type: ignore[arg-type]
    return KafkaClient(config, retry)


@pytest.mark.parametrize("error", [ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                   ErrorCode.LEADER_NOT_AVAILABLE,
                                   ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   ErrorCode.FENCED_LEADER_EPOCH])
def test_fetch_retries_retriable_partition_errors(embedded: EmbeddedBroker,
                                                  topic: TopicPartition,
                                                  error: ErrorCode) -> None:
    fault = embedded.faults.add(Fault(ApiKey.FETCH, error=error, topic=topic.topic, times=3))
    with client(embedded) as kafka:
        fetched = kafka.fetch(topic, 0, 1 << 20)
    assert fault.hits == 3
    assert (fetched.error_code, fetched.high_watermark) == (ErrorCode.NONE, COUNT)
    assert fetched.records


def test_list_offsets_and_metadata_retry(embedded: EmbeddedBroker, topic: TopicPartition) -> None:
    faults = [embedded.faults.add(Fault(ApiKey.LIST_OFFSETS, error=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                        topic=topic.topic, times=2)),
              embedded.faults.add(Fault(ApiKey.METADATA, error=ErrorCode.LEADER_NOT_AVAILABLE,
                                        topic=topic.topic, times=2))]
    with client(embedded) as kafka:
        assert kafka.offsets_at([topic], EARLIEST_TIMESTAMP) == {topic: 0}
        assert kafka.offsets_at([topic], LATEST_TIMESTAMP) == {topic: COUNT}
    assert [f.hits for f in faults] == [2, 2]


def test_a_dropped_connection_and_a_slow_answer_are_retried(embedded: EmbeddedBroker,
                                                            topic: TopicPartition) -> None:
    drop = embedded.faults.add(Fault(ApiKey.FETCH, topic=topic.topic, drop=True))
    slow = embedded.faults.add(Fault(ApiKey.FETCH, topic=topic.topic, delay_s=2.0))
    with client(embedded, request_timeout_s=0.5) as kafka:
        fetched = kafka.fetch(topic, 0, 1 << 20)
    assert (drop.hits, slow.hits) == (1, 1)
    assert fetched.error_code == ErrorCode.NONE and fetched.records


def test_a_leader_that_refuses_connections_is_looked_up_again(embedded: EmbeddedBroker,
                                                              topic: TopicPartition) -> None:
    """A cached leader whose broker is gone (a killed leader in a cluster; here a port
    nothing listens on) is dropped, and Metadata names the broker that leads now."""
    gone = ("127.0.0.1", free_port())
    config = ClientConfig(parse_bootstrap(embedded.bootstrap))
    with KafkaClient(config, PATIENT, {topic: gone}) as kafka:
        assert kafka.fetch(topic, 0, 1 << 20).records
    with KafkaClient(config, PATIENT, {topic: gone}) as kafka:
        assert kafka.offsets_at([topic], LATEST_TIMESTAMP) == {topic: COUNT}


def test_a_fatal_error_fails_at_once_naming_it(embedded: EmbeddedBroker,
                                               topic: TopicPartition) -> None:
    fault = embedded.faults.add(Fault(ApiKey.LIST_OFFSETS,
                                      error=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                                      topic=topic.topic, times=5))
    with client(embedded) as kafka, pytest.raises(KafkaClientError,
                                                  match=r"TOPIC_AUTHORIZATION_FAILED \(29\)"):
        kafka.offsets_at([topic], LATEST_TIMESTAMP)
    assert fault.hits == 1


def test_retries_end_at_the_policy_deadline(embedded: EmbeddedBroker,
                                            topic: TopicPartition) -> None:
    embedded.faults.add(Fault(ApiKey.FETCH, error=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                              topic=topic.topic, times=10_000))
    with client(embedded, IMPATIENT) as kafka, pytest.raises(
            KafkaClientError, match=r"still failing after 0.5 s: .*NOT_LEADER_OR_FOLLOWER"):
        kafka.fetch(topic, 0, 1 << 20)


def test_a_task_reads_exactly_its_range_through_leader_errors(embedded: EmbeddedBroker,
                                                              topic: TopicPartition) -> None:
    """A Spark task's reader (executor side), small fetches so it takes many requests, every
    third of which fails: the Arrow rows are exactly offsets [10, 40), in order."""
    fault = embedded.faults.add(Fault(ApiKey.FETCH, error=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                      topic=topic.topic, times=5))
    config = ClientConfig(parse_bootstrap(embedded.bootstrap), fetch_max_bytes=200)
    task = KafkaInputPartition(topic.topic, 0, 10, 40, None,
                               TaskSettings(config, PATIENT, True, False))
    batches = list(read_partition(task))
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    values = [v for b in batches for v in b.column("value").to_pylist()]
    assert fault.hits == 5
    assert offsets == list(range(10, 40))
    assert values == [str(i).encode() for i in range(10, 40)]


def test_a_run_of_retries_logs_one_line_naming_the_request_once(
        embedded: EmbeddedBroker, caplog: pytest.LogCaptureFixture) -> None:
    """``transactions abort --transactional-id`` while the coordinator answers
    CONCURRENT_TRANSACTIONS: one INFO line naming InitProducerId and the id once, the later
    retries at DEBUG."""
    embedded.faults.add(Fault(ApiKey.INIT_PRODUCER_ID, error=ErrorCode.CONCURRENT_TRANSACTIONS,
                              times=3))
    with caplog.at_level(logging.DEBUG, "sparklog.client.kafka"), client(embedded) as kafka:
        abort_by_id(kafka, "hanging")
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert [r.levelno for r in retries] == [logging.INFO, logging.DEBUG, logging.DEBUG]
    assert retries[0].getMessage() == ("InitProducerId for 'hanging': "
                                       "CONCURRENT_TRANSACTIONS (51); retrying for up to 20 s")
