"""The producer-id and transaction APIs at the versions Kafka 4 serves, with real clients at
their newest protocol (and kafka-python pinned to Kafka 2.4's) and raw requests where a
client never sends a case: what each new version means to a user.

- InitProducerId v2-v5: kafka-python's idempotent producer, negotiating its newest versions
  or pinned to ``api_version=(2, 4)`` (InitProducerId v2), produces and recovers from a
  timeout by its retry; at its newest it goes on after UNKNOWN_PRODUCER_ID under a new
  producer id (KIP-360's InitProducerId), with its order kept; a
  transactional producer naming its current id and epoch (KIP-360) resumes under the next
  epoch, its retry gets the same answer, a stale epoch is fenced.
- AddPartitionsToTxn v4+: a broker's batch, ``verify_only`` adds nothing.
- EndTxn v5 answers the producer's id and its bumped epoch (KIP-890).
- TxnOffsetCommit v3 (KIP-447): a member the request names is checked as OffsetCommit
  checks it, so offsets sent with a consumer's stale group metadata are refused.
- ListTransactions v2: the transactional id pattern.
- DescribeProducers v0: a partition's active producers, by kafka-python's admin client and
  ``sparklog transactions describe-producers``.
- With an authorizer, each new version asks for Kafka's ACLs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    RawConnection,
    consume_confluent,
    create_topic,
    kp_request,
    kp_response,
    unique_topic,
    wait_until,
)
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.errors import KafkaError
from security_support import certificates, listeners_config, sasl_raw, security
from storage_support import NOW, Clock, restart
from storage_support import TOPIC as STORAGE_TOPIC

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.fault_hooks import Fault
from sparklog.cli import main
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey
from sparklog.record.control import ControlType
from sparklog.record.records import build_batch
from sparklog.storage.log_manager import LogManager

__all__ = ["certificates"]

E = ErrorCode
CONFIG = {
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("txn-k4") / "data", CONFIG) as running:
        yield running


@pytest.fixture
def topic(broker: EmbeddedBroker, request: pytest.FixtureRequest) -> str:
    broker.faults.clear()
    return create_topic(broker.bootstrap, unique_topic(request.node.name))


def call(conn: RawConnection, key: ApiKey, version: int, **fields: Any) -> Any:
    """One request built and decoded with kafka-python's protocol classes."""
    return conn.call(kp_request(key)(version=version, **fields), kp_response(key))


# -- InitProducerId ---------------------------------------------------------------------------


def sent(producer: KafkaProducer, topic: str, prefix: str, count: int = 5) -> list[int]:
    """Offsets of ``count`` records sent and flushed (KafkaError for a failed one)."""
    futures = [producer.send(topic, f"{prefix}{i}".encode()) for i in range(count)]
    producer.flush()
    return [f.get().offset for f in futures]


def read_values(broker: EmbeddedBroker, topic: str, count: int) -> list[bytes | None]:
    return [r.value for r in consume_confluent(broker.bootstrap, topic, count)]


@pytest.mark.parametrize("api_version", [None, (2, 4)], ids=["newest", "pinned-2.4"])
def test_an_idempotent_producer_retries_a_timed_out_produce_without_a_duplicate(
        broker: EmbeddedBroker, topic: str, api_version: tuple[int, int] | None) -> None:
    """kafka-python's default producer (idempotent) at its newest protocol (InitProducerId
    v5) and pinned to Kafka 2.4 (InitProducerId v2, whose request the broker closed the
    connection on before): a Produce answered past the request timeout is retried, and the
    broker answers the retry as the duplicate it is."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                             request_timeout_ms=1500, retries=5)
    try:
        assert sent(producer, topic, "a") == [0, 1, 2, 3, 4]
        slow = broker.faults.add(Fault(ApiKey.PRODUCE, delay_s=2.5, topic=topic))
        assert sent(producer, topic, "b") == [5, 6, 7, 8, 9]
        assert slow.hits == 1
        assert sent(producer, topic, "c") == [10, 11, 12, 13, 14]
    finally:
        producer.close()
    assert read_values(broker, topic, 15) == [f"{p}{i}".encode() for p in "abc"
                                               for i in range(5)]


def test_an_idempotent_producer_goes_on_after_unknown_producer_id_under_a_new_id(
        broker: EmbeddedBroker, topic: str) -> None:
    """kafka-python (newest) meets UNKNOWN_PRODUCER_ID: it fails that batch (its choice)
    and asks for the next epoch naming its producer id and epoch (InitProducerId v5,
    KIP-360); the broker hands an idempotent producer a new producer id, as Kafka does, and
    the producer's later records follow its earlier ones."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        assert sent(producer, topic, "a") == [0, 1, 2, 3, 4]
        first = producer._transaction_manager.producer_id_and_epoch.producer_id
        refused = broker.faults.add(Fault(ApiKey.PRODUCE, error=E.UNKNOWN_PRODUCER_ID,
                                          topic=topic))
        with pytest.raises(KafkaError):  # one record: one batch, the one the fault refuses
            sent(producer, topic, "lost", count=1)
        assert refused.hits == 1
        assert sent(producer, topic, "b") == [5, 6, 7, 8, 9]
        assert producer._transaction_manager.producer_id_and_epoch.producer_id != first
    finally:
        producer.close()
    assert read_values(broker, topic, 10) == [f"{p}{i}".encode() for p in "ab"
                                               for i in range(5)]


def test_confluent_kafkas_idempotent_producer_bumps_its_epoch_and_loses_nothing(
        broker: EmbeddedBroker, topic: str) -> None:
    """librdkafka meets UNKNOWN_PRODUCER_ID: it drains, bumps its own epoch (KIP-360 for an
    idempotent producer) and resends from sequence 0; every record arrives once, in order,
    and DescribeProducers shows the producer at its new epoch."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    failures: list[Any] = []

    def send(prefix: str) -> None:
        for i in range(5):
            producer.produce(topic, f"{prefix}{i}".encode(),
                             on_delivery=lambda err, _: err and failures.append(err))
        producer.flush(TIMEOUT)

    send("a")
    refused = broker.faults.add(Fault(ApiKey.PRODUCE, error=E.UNKNOWN_PRODUCER_ID,
                                      topic=topic))
    send("b")
    send("c")
    assert refused.hits == 1 and failures == []
    assert read_values(broker, topic, 15) == [f"{p}{i}".encode() for p in "abc"
                                               for i in range(5)]
    request = kp_request(ApiKey.DESCRIBE_PRODUCERS)
    with RawConnection(broker.bootstrap) as conn:
        answer = call(conn, ApiKey.DESCRIBE_PRODUCERS, 0, topics=[
            request.TopicRequest(name=topic, partition_indexes=[0])])
    (state,) = answer.topics[0].partitions[0].active_producers
    assert (state.producer_epoch, state.last_sequence) == (1, 9)


def init_producer_id(conn: RawConnection, version: int, tid: str | None,
                     producer: tuple[int, int] = (-1, -1)) -> tuple[int, int, int]:
    """(error, producer id, epoch) of one InitProducerId."""
    fields: dict[str, Any] = {"transactional_id": tid, "transaction_timeout_ms": 60000}
    if version >= 3:
        fields.update(producer_id=producer[0], producer_epoch=producer[1])
    answer = call(conn, ApiKey.INIT_PRODUCER_ID, version, **fields)
    return answer.error_code, answer.producer_id, answer.producer_epoch


def test_a_transactional_producer_naming_its_epoch_resumes_and_a_stale_one_is_fenced(
        broker: EmbeddedBroker, request: pytest.FixtureRequest) -> None:
    tid = unique_topic(request.node.name)
    with RawConnection(broker.bootstrap) as conn:
        error, pid, epoch = init_producer_id(conn, 5, tid)
        assert (error, epoch) == (E.NONE, 0)
        assert init_producer_id(conn, 4, tid, (pid, 0)) == (E.NONE, pid, 1)
        # the answer was lost: the retry names epoch 0 again and gets the same epoch
        assert init_producer_id(conn, 4, tid, (pid, 0)) == (E.NONE, pid, 1)
        assert init_producer_id(conn, 5, tid, (pid, 1)) == (E.NONE, pid, 2)
        # epoch 0 is neither the current one nor the one just left: fenced, as each
        # version knows it
        assert init_producer_id(conn, 4, tid, (pid, 0))[0] == E.PRODUCER_FENCED
        assert init_producer_id(conn, 3, tid, (pid, 0))[0] == E.INVALID_PRODUCER_EPOCH
        assert init_producer_id(conn, 5, tid, (pid + 1000, 2))[0] == E.PRODUCER_FENCED
        assert init_producer_id(conn, 5, tid, (pid, -1))[0] == E.INVALID_REQUEST
        # a new producer (no id named, v2 is flexible) fences the one of epoch 2
        assert init_producer_id(conn, 2, tid) == (E.NONE, pid, 3)
        assert init_producer_id(conn, 5, tid, (pid, 2))[0] == E.PRODUCER_FENCED
        # an idempotent producer that recovers gets a new producer id, as Kafka's
        error, other, epoch = init_producer_id(conn, 5, None, (pid, 3))
        assert (error, epoch) == (E.NONE, 0) and other != pid


def test_a_resuming_producer_with_an_open_transaction_has_it_aborted(
        broker: EmbeddedBroker, topic: str) -> None:
    """KIP-360 with a transaction open (Kafka's handleInitProducerId): the open transaction
    is aborted under a fencing epoch and the request answered CONCURRENT_TRANSACTIONS; the
    producer's records are never read committed, and the id serves a new producer after."""
    tid = f"{topic}-tx"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid,
                         "log_level": 0})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"never-committed")
    producer.flush(TIMEOUT)
    with RawConnection(broker.bootstrap) as conn:
        (state,) = call(conn, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                        transactional_ids=[tid]).transaction_states
        assert state.transaction_state == "Ongoing"
        pid, epoch = state.producer_id, state.producer_epoch
        assert init_producer_id(conn, 5, tid, (pid, epoch))[0] == E.CONCURRENT_TRANSACTIONS

        def aborted() -> bool:
            (now,) = call(conn, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                          transactional_ids=[tid]).transaction_states
            return now.transaction_state == "CompleteAbort"

        wait_until(aborted)
        assert init_producer_id(conn, 5, tid)[::2] == (E.NONE, epoch + 2)
    after = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid})
    after.init_transactions(TIMEOUT)
    after.begin_transaction()
    after.produce(topic, b"committed")
    after.commit_transaction(TIMEOUT)
    values = [r.value for r in consume_confluent(broker.bootstrap, topic, 1,
                                                 **{"isolation.level": "read_committed"})]
    assert values == [b"committed"]


# -- AddPartitionsToTxn v4+, EndTxn v5 ----------------------------------------------------


def add_partitions_v4(conn: RawConnection, version: int, tid: str, pid: int, epoch: int,
                      topic: str, verify_only: bool) -> Any:
    request = kp_request(ApiKey.ADD_PARTITIONS_TO_TXN)
    transaction = request.AddPartitionsToTxnTransaction(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=verify_only,
        topics=[request.AddPartitionsToTxnTransaction.AddPartitionsToTxnTopic(
            name=topic, partitions=[0, 1])])
    return conn.call(request(version=version, transactions=[transaction]),
                     kp_response(ApiKey.ADD_PARTITIONS_TO_TXN))


def partition_errors(answer: Any) -> dict[tuple[str, str, int], int]:
    return {(r.transactional_id, t.name, p.partition_index): p.partition_error_code
            for r in answer.results_by_transaction for t in r.topic_results
            for p in t.results_by_partition}


def test_a_brokers_add_partitions_verifies_without_adding_and_end_txn_v5_answers_the_epoch(
        broker: EmbeddedBroker, request: pytest.FixtureRequest) -> None:
    topic = create_topic(broker.bootstrap, unique_topic(request.node.name), partitions=2)
    tid = f"{topic}-tx"
    with RawConnection(broker.bootstrap) as conn:
        _, pid, epoch = init_producer_id(conn, 5, tid)
        # nothing added yet: a leader's verification finds neither partition
        answer = add_partitions_v4(conn, 5, tid, pid, epoch, topic, verify_only=True)
        assert answer.error_code == E.NONE
        assert set(partition_errors(answer).values()) == {E.TRANSACTION_ABORTABLE}
        assert add_partitions_v4(conn, 4, tid, pid, epoch, topic, verify_only=True
                                 ).results_by_transaction[0].topic_results[0] \
            .results_by_partition[0].partition_error_code == E.INVALID_TXN_STATE
        (state,) = call(conn, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                        transactional_ids=[tid]).transaction_states
        assert state.transaction_state == "Empty"  # verifying added nothing
        added = add_partitions_v4(conn, 5, tid, pid, epoch, topic, verify_only=False)
        assert set(partition_errors(added).values()) == {E.NONE}
        verified = add_partitions_v4(conn, 5, tid, pid, epoch, topic, verify_only=True)
        assert set(partition_errors(verified).values()) == {E.NONE}
        fenced = add_partitions_v4(conn, 5, tid, pid, epoch - 1, topic, verify_only=True)
        assert set(partition_errors(fenced).values()) == {E.PRODUCER_FENCED}
        for _ in range(2):  # its retry (the answer lost) is answered the same
            ended = call(conn, ApiKey.END_TXN, 5, transactional_id=tid, producer_id=pid,
                         producer_epoch=epoch, committed=False)
            assert (ended.error_code, ended.producer_id, ended.producer_epoch) == (
                E.NONE, pid, epoch + 1)  # transaction.version 2: every end bumps the epoch
        refused = call(conn, ApiKey.END_TXN, 5, transactional_id=tid, producer_id=pid,
                       producer_epoch=epoch + 1, committed=False)
        assert (refused.error_code, refused.producer_id, refused.producer_epoch) == (
            E.PRODUCER_FENCED, -1, -1)


# -- TxnOffsetCommit v3 (KIP-447) -------------------------------------------------------------


def joined_member(conn: RawConnection, group: str, instance_id: str) -> tuple[str, int]:
    """(member id, generation) of a static member that formed ``group`` alone."""
    join_request = kp_request(ApiKey.JOIN_GROUP)
    joined = call(conn, ApiKey.JOIN_GROUP, 5, group_id=group, session_timeout_ms=30000,
                  rebalance_timeout_ms=30000, member_id="", group_instance_id=instance_id,
                  protocol_type="consumer", protocols=[
                      join_request.JoinGroupRequestProtocol(name="range", metadata=b"")])
    assert joined.error_code == E.NONE
    synced = call(conn, ApiKey.SYNC_GROUP, 3, group_id=group, generation_id=joined.generation_id,
                  member_id=joined.member_id, group_instance_id=instance_id, assignments=[])
    assert synced.error_code == E.NONE
    return joined.member_id, joined.generation_id


def test_txn_offset_commit_checks_the_member_it_names(broker: EmbeddedBroker,
                                                      topic: str) -> None:
    group, tid = f"{topic}-g", f"{topic}-tx"
    with RawConnection(broker.bootstrap) as conn:
        member, generation = joined_member(conn, group, "instance-1")
        _, pid, epoch = init_producer_id(conn, 5, tid)
        assert call(conn, ApiKey.ADD_OFFSETS_TO_TXN, 4, transactional_id=tid, producer_id=pid,
                    producer_epoch=epoch, group_id=group).error_code == E.NONE
        request = kp_request(ApiKey.TXN_OFFSET_COMMIT)
        topics = [request.TxnOffsetCommitRequestTopic(name=topic, partitions=[
            request.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                partition_index=0, committed_offset=3, committed_metadata="")])]

        def commit(version: int, **member_fields: Any) -> int:
            answer = call(conn, ApiKey.TXN_OFFSET_COMMIT, version, transactional_id=tid,
                          group_id=group, producer_id=pid, producer_epoch=epoch,
                          topics=topics, **member_fields)
            return answer.topics[0].partitions[0].error_code

        assert commit(3, generation_id=generation + 1, member_id=member,
                      group_instance_id=None) == E.ILLEGAL_GENERATION
        assert commit(4, generation_id=generation, member_id="someone-else",
                      group_instance_id=None) == E.UNKNOWN_MEMBER_ID
        assert commit(5, generation_id=generation, member_id="someone-else",
                      group_instance_id="instance-1") == E.FENCED_INSTANCE_ID
        assert commit(3, generation_id=generation, member_id=member,
                      group_instance_id="instance-1") == E.NONE
        # naming no member (as before v3) is not checked against the members, as Kafka's
        assert commit(3, generation_id=-1, member_id="", group_instance_id=None) == E.NONE
        assert commit(2) == E.NONE
        assert call(conn, ApiKey.END_TXN, 4, transactional_id=tid, producer_id=pid,
                    producer_epoch=epoch, committed=True).error_code == E.NONE


def test_offsets_sent_with_a_consumers_stale_group_metadata_are_refused(
        broker: EmbeddedBroker, topic: str) -> None:
    """Exactly-once processing (KIP-447): a consumer's group metadata goes with the offsets
    (confluent-kafka's ``send_offsets_to_transaction``, TxnOffsetCommit v3); once the group
    moved on (another member joined: a new generation), offsets sent with the metadata of
    the old generation are refused and the transaction cannot commit them."""
    group = f"{topic}-g"
    feed = Producer({"bootstrap.servers": broker.bootstrap})
    feed.produce(topic, b"x")
    feed.flush(TIMEOUT)
    conf = {"bootstrap.servers": broker.bootstrap, "group.id": group,
            "enable.auto.commit": False, "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    first = Consumer(conf)
    first.subscribe([topic])
    second: Consumer | None = None
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": group,
                         "log_level": 0})
    producer.init_transactions(TIMEOUT)
    try:
        wait_until(lambda: first.poll(0.2) is not None or bool(first.assignment()))
        current = first.consumer_group_metadata()
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)], current, TIMEOUT)
        producer.commit_transaction(TIMEOUT)
        assert first.committed([TopicPartition(topic, 0)], TIMEOUT)[0].offset == 1
        stale = first.consumer_group_metadata()
        second = Consumer(conf)
        second.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while not second.assignment() and time.monotonic() < deadline:
            first.poll(0.2)
            second.poll(0.2)
        producer.begin_transaction()
        with pytest.raises(KafkaException) as refused:
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], stale, TIMEOUT)
        assert refused.value.args[0].code() in (E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID)
    finally:
        first.close()
        if second is not None:
            second.close()
    assert Consumer(conf).committed([TopicPartition(topic, 0)], TIMEOUT)[0].offset == 1


# -- ListTransactions v2 ---------------------------------------------------------------------


def test_transactions_are_listed_by_a_transactional_id_pattern(
        broker: EmbeddedBroker, request: pytest.FixtureRequest) -> None:
    prefix = unique_topic(request.node.name)
    with RawConnection(broker.bootstrap) as conn:
        for suffix in ("a", "b", "zz"):
            assert init_producer_id(conn, 5, f"{prefix}-{suffix}")[0] == E.NONE
        listed = call(conn, ApiKey.LIST_TRANSACTIONS, 2, state_filters=[],
                      producer_id_filters=[], duration_filter=-1,
                      transactional_id_pattern="(")
        assert listed.error_code == E.INVALID_REGULAR_EXPRESSION
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        def ids(pattern: str) -> set[str]:
            found = admin.list_transactions(transactional_id_pattern=pattern)
            return {t.transactional_id for listings in found.values() for t in listings}

        assert ids(f"{prefix}-[a-z]") == {f"{prefix}-a", f"{prefix}-b"}
        assert ids(f"{prefix}-.*") == {f"{prefix}-a", f"{prefix}-b", f"{prefix}-zz"}
        assert ids("zz") == set()  # the whole id must match
    finally:
        admin.close()


# -- DescribeProducers ------------------------------------------------------------------------


def test_a_partitions_producers_are_described_with_their_open_transaction(
        broker: EmbeddedBroker, topic: str, capsys: pytest.CaptureFixture[str]) -> None:
    """kafka-python's admin ``describe_producers`` and ``sparklog transactions
    describe-producers`` (kafka-transactions.sh's columns) show an idempotent producer and a
    transactional one, whose open transaction starts at its first record; once committed it
    has none, and its marker's coordinator epoch shows."""
    idempotent = KafkaProducer(bootstrap_servers=broker.bootstrap)
    assert sent(idempotent, topic, "i") == [0, 1, 2, 3, 4]
    idempotent.close()
    transactional = Producer({"bootstrap.servers": broker.bootstrap,
                              "transactional.id": f"{topic}-tx", "log_level": 0})
    transactional.init_transactions(TIMEOUT)
    transactional.begin_transaction()
    for value in (b"t0", b"t1"):
        transactional.produce(topic, value)
    transactional.flush(TIMEOUT)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    tp = KafkaTopicPartition(topic, 0)
    server = ["--bootstrap-server", broker.bootstrap]
    try:
        before = {p.current_transaction_start_offset: p
                  for p in admin.describe_producers([tp])[tp].active_producers}
        assert set(before) == {-1, 5}
        assert (before[-1].last_sequence, before[-1].coordinator_epoch) == (4, -1)
        assert (before[5].last_sequence, before[5].producer_epoch) == (1, 0)
        assert before[5].last_timestamp > 0
        transactional.commit_transaction(TIMEOUT)
        after = {p.producer_id: p for p in admin.describe_producers([tp])[tp].active_producers}
        committed = after[before[5].producer_id]
        assert (committed.current_transaction_start_offset, committed.coordinator_epoch) == (
            -1, 0)
        assert main(["transactions", "describe-producers", *server, "--topic", topic,
                     "--partition", "0"]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == ["PRODUCERID", "PRODUCEREPOCH", "LATESTCOORDINATOREPOCH",
                                    "LASTSEQUENCE", "LASTTIMESTAMP",
                                    "CURRENTTRANSACTIONSTARTOFFSET"]
        rows = sorted(line.split() for line in lines[1:])
        assert [row[:4] + row[5:] for row in rows] == sorted([
            [str(before[-1].producer_id), "0", "-1", "4", "None"],
            [str(committed.producer_id), "0", "0", "1", "None"]])
    finally:
        admin.close()


def test_describe_producers_answers_partitions_this_broker_cannot_describe(
        broker: EmbeddedBroker, topic: str) -> None:
    request = kp_request(ApiKey.DESCRIBE_PRODUCERS)
    with RawConnection(broker.bootstrap) as conn:
        answer = call(conn, ApiKey.DESCRIBE_PRODUCERS, 0, topics=[
            request.TopicRequest(name=topic, partition_indexes=[0, 7]),
            request.TopicRequest(name=f"{topic}-missing", partition_indexes=[0])])
    assert [[(p.partition_index, p.error_code, list(p.active_producers)) for p in t.partitions]
            for t in answer.topics] == [
        [(0, E.NONE, []), (7, E.UNKNOWN_TOPIC_OR_PARTITION, [])],
        [(0, E.UNKNOWN_TOPIC_OR_PARTITION, [])]]


# -- authorization ---------------------------------------------------------------------------


def test_the_new_versions_are_authorized_as_kafka_authorizes_them(
        tmp_path: Path, certificates: Path) -> None:
    """With an authorizer: DescribeProducers needs READ on the TOPIC; AddPartitionsToTxn v4+
    (a broker's) CLUSTER_ACTION on the CLUSTER; InitProducerId v5 of an idempotent producer
    IDEMPOTENT_WRITE (or WRITE on a topic), of a transactional id WRITE on it; ListTransactions
    v2 leaves out ids the principal may not DESCRIBE."""
    config = listeners_config(certificates, **{
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin", "transaction.state.log.num.partitions": "1"})
    with EmbeddedBroker(tmp_path / "data", config) as secured:
        address = f"127.0.0.1:{secured.listeners['SASL_PLAINTEXT']}"
        admin = AdminClient({"bootstrap.servers": address,
                             **security("confluent", "SASL_PLAINTEXT", certificates,
                                        user="admin")})
        admin.create_topics([NewTopic("guarded", 1)])["guarded"].result(TIMEOUT)
        request = kp_request(ApiKey.DESCRIBE_PRODUCERS)

        def described(user: str) -> int:
            with sasl_raw(address, user) as conn:
                answer = call(conn, ApiKey.DESCRIBE_PRODUCERS, 0, topics=[
                    request.TopicRequest(name="guarded", partition_indexes=[0])])
            return answer.topics[0].partitions[0].error_code

        def batched_add(user: str) -> int:
            with sasl_raw(address, user) as conn:
                return add_partitions_v4(conn, 5, "t", 1, 0, "guarded", verify_only=True
                                         ).error_code

        assert described("alice") == E.TOPIC_AUTHORIZATION_FAILED
        assert described("admin") == E.NONE
        assert batched_add("alice") == E.CLUSTER_AUTHORIZATION_FAILED
        assert batched_add("admin") == E.NONE
        with sasl_raw(address, "alice") as conn:
            assert init_producer_id(conn, 5, None)[0] == E.CLUSTER_AUTHORIZATION_FAILED
            assert init_producer_id(conn, 5, "alices")[0] == (
                E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        with sasl_raw(address, "admin") as conn:
            assert init_producer_id(conn, 5, "admins")[0] == E.NONE
        for user, listed in (("alice", []), ("admin", ["admins"])):
            with sasl_raw(address, user) as conn:
                answer = call(conn, ApiKey.LIST_TRANSACTIONS, 2, state_filters=[],
                              producer_id_filters=[], duration_filter=-1,
                              transactional_id_pattern="adm.*")
            assert [t.transactional_id for t in answer.transaction_states] == listed


@pytest.mark.parametrize("clean", [True, False], ids=["snapshot", "replayed"])
def test_a_producers_timestamp_and_coordinator_epoch_survive_a_restart(
        tmp_path: Path, clean: bool) -> None:
    """What DescribeProducers shows of a producer comes back after a clean restart (from the
    producer-state snapshot) and after a crash (replayed from the log, the marker read for
    its coordinator epoch)."""
    manager = LogManager(tmp_path / "data", clock=Clock())
    manager.create_topic(STORAGE_TOPIC, 1)
    log = manager.get_log(STORAGE_TOPIC, 0)
    log.append(build_batch([(b"k", b"v", (), NOW - 5)], producer_id=7, producer_epoch=2,
                           base_sequence=0, transactional=True), now_ms=NOW)
    log.append_marker(ControlType.COMMIT, 7, 2, 9, now_ms=NOW)
    entry = log.producer_state.producers[7]
    assert (entry.epoch, entry.last_seq, entry.last_timestamp, entry.coordinator_epoch,
            entry.txn_first_offset) == (2, 0, NOW, 9, -1)
    reopened = restart(manager, clean=clean, crash_dir=tmp_path / "crash")
    try:
        again = reopened.get_log(STORAGE_TOPIC, 0).producer_state.producers[7]
        assert (again.epoch, again.last_seq, again.last_timestamp, again.coordinator_epoch,
                again.txn_first_offset) == (2, 0, NOW, 9, -1)
    finally:
        reopened.close()
