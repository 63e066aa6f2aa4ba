"""KIP-890 as a user sees it: the partition leader's verification of transactional
produce (part 1, for every client version) and transactions v2 (part 2: implicit adds,
an epoch bump on every end). No client here speaks transactions v2 (kafka-python 3.0.12
sends Produce v9 and EndTxn v3, aiokafka less, librdkafka 2.16 has no KIP-890), so v2 is
driven with raw requests built by kafka-python's protocol classes; v1 by real clients too.

- A transactional batch to a partition its transaction never added is refused (Produce v9:
  INVALID_TXN_STATE; v11: TRANSACTION_ABORTABLE) and never appended: neither a
  read_committed nor a read_uncommitted consumer sees it. A fenced epoch is refused.
- Produce v12 adds the partition implicitly; TxnOffsetCommit v5 the group's offsets.
- EndTxn v5 bumps the epoch: a late write of the previous transaction is fenced, in a
  partition of that transaction and in another; the next transaction starts at sequence 0.
- One verification per partition and transaction, not one per batch.
- InitProducerId v6: two-phase commit is refused; ApiVersions finalizes transaction.version 2.
- The v2 fields survive a restart of the coordinator (``__transaction_state`` v1 values).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from broker_fixtures import (
    RawConnection,
    consume_confluent,
    create_topic,
    kp_request,
    kp_response,
    unique_topic,
)
from confluent_kafka import Producer

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey
from sparklog.record.records import build_batch

E = ErrorCode


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    one_partition = {f"{name}.num.partitions": "1"
                     for name in ("transaction.state.log", "offsets.topic")}
    with EmbeddedBroker(tmp_path_factory.mktemp("txn-v2") / "data", one_partition) as running:
        yield running


@pytest.fixture
def topic(broker: EmbeddedBroker, request: pytest.FixtureRequest) -> str:
    """A topic of two partitions, the test's own."""
    return create_topic(broker.bootstrap, unique_topic(request.node.name), partitions=2)


def call(conn: RawConnection, key: ApiKey, version: int, **fields: Any) -> Any:
    return conn.call(kp_request(key)(version=version, **fields), kp_response(key))


def producer_of(conn: RawConnection, tid: str) -> tuple[int, int]:
    answer = call(conn, ApiKey.INIT_PRODUCER_ID, 5, transactional_id=tid,
                  transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1)
    assert answer.error_code == E.NONE
    return answer.producer_id, answer.producer_epoch


def produce(conn: RawConnection, version: int, tid: str, topic: str, partition: int,
            pid: int, epoch: int, sequence: int, value: bytes) -> tuple[int, int]:
    """(error, base offset) of one transactional batch of one record."""
    batch = build_batch([(None, value, (), int(time.time() * 1000))], producer_id=pid,
                        producer_epoch=epoch, base_sequence=sequence, transactional=True)
    request = kp_request(ApiKey.PRODUCE)
    topic_data = request.TopicProduceData
    answer = conn.call(request(
        version=version, transactional_id=tid, acks=-1, timeout_ms=10000,
        topic_data=[topic_data(name=topic, partition_data=[
            topic_data.PartitionProduceData(index=partition, records=batch)])]),
        kp_response(ApiKey.PRODUCE))
    (result,) = answer.responses[0].partition_responses
    return result.error_code, result.base_offset


def add_partition(conn: RawConnection, tid: str, pid: int, epoch: int, topic: str,
                  partition: int) -> None:
    request = kp_request(ApiKey.ADD_PARTITIONS_TO_TXN)
    answer = conn.call(request(
        version=3, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
            request.AddPartitionsToTxnTopic(name=topic, partitions=[partition])]),
        kp_response(ApiKey.ADD_PARTITIONS_TO_TXN))
    codes = {p.partition_error_code for t in answer.results_by_topic_v3_and_below
             for p in t.results_by_partition}
    assert codes == {E.NONE}


def end_txn(conn: RawConnection, version: int, tid: str, pid: int, epoch: int,
            commit: bool) -> tuple[int, int, int]:
    answer = call(conn, ApiKey.END_TXN, version, transactional_id=tid, producer_id=pid,
                  producer_epoch=epoch, committed=commit)
    return answer.error_code, getattr(answer, "producer_id", -1), \
        getattr(answer, "producer_epoch", -1)


def state_of(conn: RawConnection, tid: str) -> Any:
    (state,) = call(conn, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                    transactional_ids=[tid]).transaction_states
    return state


def values(broker: EmbeddedBroker, topic: str, count: int, partition: int,
           isolation: str) -> list[bytes | None]:
    return [r.value for r in consume_confluent(broker.bootstrap, topic, count, (partition,),
                                               **{"isolation.level": isolation})]


def log_end(broker: EmbeddedBroker, topic: str, partition: int) -> int:
    return broker.call(lambda b: b.logs.get_log(topic, partition).log_end_offset)


# -- KIP-890 part 1: every client version ----------------------------------------------------


@pytest.mark.parametrize(("version", "refusal"), [(9, E.INVALID_TXN_STATE),
                                                  (11, E.TRANSACTION_ABORTABLE)])
def test_a_batch_to_a_partition_never_added_is_refused_and_never_appended(
        broker: EmbeddedBroker, topic: str, version: int, refusal: ErrorCode) -> None:
    tid = f"{topic}-tx"
    with RawConnection(broker.bootstrap) as conn:
        pid, epoch = producer_of(conn, tid)
        add_partition(conn, tid, pid, epoch, topic, 0)
        assert produce(conn, version, tid, topic, 0, pid, epoch, 0, b"added")[0] == E.NONE
        # a v1 client's bug or a zombie: partition 1 is not in the transaction
        assert produce(conn, version, tid, topic, 1, pid, epoch, 0, b"hanging") == (refusal, -1)
        assert log_end(broker, topic, 1) == 0
        # a fenced epoch is refused too, even where the transaction is ongoing: the log's
        # producer state fences it there, the coordinator elsewhere
        assert produce(conn, version, tid, topic, 1, pid, epoch - 1 if epoch else epoch,
                       0, b"stale")[0] in (refusal, E.INVALID_PRODUCER_EPOCH)
        assert end_txn(conn, 3, tid, pid, epoch, commit=True)[0] == E.NONE
    assert state_of_partition_empty(broker, topic)


def state_of_partition_empty(broker: EmbeddedBroker, topic: str) -> bool:
    """Partition 1 holds nothing for either isolation level: a plain record written after
    the refused batch is the first either reads."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, b"plain", partition=1)
    producer.flush(10)
    return all(values(broker, topic, 1, 1, isolation) == [b"plain"]
               for isolation in ("read_committed", "read_uncommitted"))


def test_a_stale_epoch_to_a_partition_not_in_the_transaction_is_fenced(
        broker: EmbeddedBroker, topic: str) -> None:
    tid = f"{topic}-tx"
    with RawConnection(broker.bootstrap) as conn:
        old_pid, old_epoch = producer_of(conn, tid)
        pid, epoch = producer_of(conn, tid)  # a new producer of the id fences the old one
        assert (pid, epoch) == (old_pid, old_epoch + 1)
        add_partition(conn, tid, pid, epoch, topic, 0)
        assert produce(conn, 9, tid, topic, 1, old_pid, old_epoch, 0, b"zombie") == (
            E.INVALID_PRODUCER_EPOCH, -1)
        assert log_end(broker, topic, 1) == 0


def test_one_verification_per_partition_and_transaction(broker: EmbeddedBroker,
                                                        topic: str) -> None:
    tid = f"{topic}-tx"
    asked: list[tuple[str, int]] = []

    def count(b: Any) -> None:
        coordinator = b.txn_coordinator
        verify = coordinator.verify_partitions

        def counted(*args: Any) -> Any:
            asked.extend(args[3])
            return verify(*args)
        coordinator.verify_partitions = counted

    def uncount(b: Any) -> None:
        del b.txn_coordinator.verify_partitions

    broker.call(count)
    try:
        with RawConnection(broker.bootstrap) as conn:
            pid, epoch = producer_of(conn, tid)
            for txn in range(2):
                for partition in (0, 1):
                    add_partition(conn, tid, pid, epoch, topic, partition)
                for sequence in range(3 * txn, 3 * txn + 3):  # one epoch: sequences go on
                    for partition in (0, 1):
                        assert produce(conn, 9, tid, topic, partition, pid, epoch, sequence,
                                       b"v")[0] == E.NONE
                assert end_txn(conn, 3, tid, pid, epoch, commit=True)[0] == E.NONE
    finally:
        broker.call(uncount)
    assert sorted(asked) == [(topic, 0), (topic, 0), (topic, 1), (topic, 1)]
    assert values(broker, topic, 6, 0, "read_committed") == [b"v"] * 6


def test_a_v1_client_keeps_working(broker: EmbeddedBroker, topic: str) -> None:
    """confluent-kafka (transaction.version 1: AddPartitionsToTxn, then verified batches)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap,
                         "transactional.id": f"{topic}-tx"})
    producer.init_transactions(10)
    for commit in (True, False, True):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, f"{commit}-{i}".encode(), partition=i % 2)
        (producer.commit_transaction if commit else producer.abort_transaction)(10)
    got = sorted(v or b"" for p, count in ((0, 6), (1, 4))
                 for v in values(broker, topic, count, p, "read_committed"))
    assert got == sorted([f"True-{i}".encode() for i in range(5)] * 2)


# -- KIP-890 part 2: transaction.version 2 ---------------------------------------------------


def test_transaction_version_2_is_finalized(broker: EmbeddedBroker) -> None:
    with RawConnection(broker.bootstrap) as conn:
        answer = call(conn, ApiKey.API_VERSIONS, 3, client_software_name="t",
                      client_software_version="1")
    finalized = {f.name: f.max_version_level for f in answer.finalized_features}
    assert finalized["transaction.version"] == 2


def test_produce_v12_adds_the_partition_and_end_txn_v5_fences_the_previous_transaction(
        broker: EmbeddedBroker, topic: str) -> None:
    tid = f"{topic}-tx"
    with RawConnection(broker.bootstrap) as conn:
        pid, epoch = producer_of(conn, tid)
        # no AddPartitionsToTxn: the first batch adds its partition
        assert produce(conn, 12, tid, topic, 0, pid, epoch, 0, b"first")[0] == E.NONE
        state = state_of(conn, tid)
        assert state.transaction_state == "Ongoing"
        assert [(t.topic, list(t.partitions)) for t in state.topics] == [(topic, [0])]
        assert end_txn(conn, 5, tid, pid, epoch, commit=True) == (E.NONE, pid, epoch + 1)
        # a late write of the ended transaction, where it wrote and where it did not
        assert produce(conn, 12, tid, topic, 0, pid, epoch, 1, b"late")[0] == \
            E.INVALID_PRODUCER_EPOCH
        assert produce(conn, 12, tid, topic, 1, pid, epoch, 0, b"late")[0] == \
            E.INVALID_PRODUCER_EPOCH
        assert state_of(conn, tid).transaction_state == "CompleteCommit"  # nothing added
        # the next transaction, under the bumped epoch, starts at sequence 0; aborted
        assert produce(conn, 12, tid, topic, 0, pid, epoch + 1, 0, b"aborted")[0] == E.NONE
        assert end_txn(conn, 5, tid, pid, epoch + 1, commit=False) == (
            E.NONE, pid, epoch + 2)
        # its retry (the answer lost) gets the same answer; an EndTxn of the new epoch
        # with no transaction open is fenced, as Kafka's coordinator answers it
        assert end_txn(conn, 5, tid, pid, epoch + 1, commit=False) == (
            E.NONE, pid, epoch + 2)
        assert end_txn(conn, 5, tid, pid, epoch + 2, commit=False)[0] == E.PRODUCER_FENCED
        assert produce(conn, 12, tid, topic, 0, pid, epoch + 2, 0, b"last")[0] == E.NONE
        assert end_txn(conn, 5, tid, pid, epoch + 2, commit=True)[0] == E.NONE
    assert values(broker, topic, 2, 0, "read_committed") == [b"first", b"last"]
    assert log_end(broker, topic, 1) == 0


def test_txn_offset_commit_v5_adds_the_offsets_partition(broker: EmbeddedBroker,
                                                         topic: str) -> None:
    tid, group = f"{topic}-tx", f"{topic}-group"
    request = kp_request(ApiKey.TXN_OFFSET_COMMIT)

    def commit(version: int, pid: int, epoch: int) -> set[int]:
        answer = conn.call(request(
            version=version, transactional_id=tid, group_id=group, producer_id=pid,
            producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None,
            topics=[request.TxnOffsetCommitRequestTopic(name=topic, partitions=[
                request.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=7, committed_leader_epoch=-1,
                    committed_metadata="")])]), kp_response(ApiKey.TXN_OFFSET_COMMIT))
        return {p.error_code for t in answer.topics for p in t.partitions}

    with RawConnection(broker.bootstrap) as conn:
        pid, epoch = producer_of(conn, tid)
        # a v1 client that skipped AddOffsetsToTxn is refused (v3: INVALID_TXN_STATE)
        assert commit(3, pid, epoch) == {E.INVALID_TXN_STATE}
        assert commit(4, pid, epoch) == {E.TRANSACTION_ABORTABLE}
        assert state_of(conn, tid).transaction_state == "Empty"
        assert commit(5, pid, epoch) == {E.NONE}
        assert state_of(conn, tid).transaction_state == "Ongoing"
        assert end_txn(conn, 5, tid, pid, epoch, commit=True) == (E.NONE, pid, epoch + 1)
        fetched = call(conn, ApiKey.OFFSET_FETCH, 7, group_id=group, topics=[
            kp_request(ApiKey.OFFSET_FETCH).OffsetFetchRequestTopic(
                name=topic, partition_indexes=[0])], require_stable=True)
    assert fetched.topics[0].partitions[0].committed_offset == 7


def test_init_producer_id_v6_refuses_two_phase_commit(broker: EmbeddedBroker,
                                                      topic: str) -> None:
    with RawConnection(broker.bootstrap) as conn:
        fields = {"transactional_id": f"{topic}-tx", "transaction_timeout_ms": 60000,
                  "producer_id": -1, "producer_epoch": -1}
        refused = call(conn, ApiKey.INIT_PRODUCER_ID, 6, enable2_pc=True,
                       keep_prepared_txn=False, **fields)
        assert (refused.error_code, refused.producer_id) == (
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1)
        served = call(conn, ApiKey.INIT_PRODUCER_ID, 6, enable2_pc=False,
                      keep_prepared_txn=False, **fields)
        assert served.error_code == E.NONE and served.producer_id >= 0
        assert (served.ongoing_txn_producer_id, served.ongoing_txn_producer_epoch) == (-1, -1)
