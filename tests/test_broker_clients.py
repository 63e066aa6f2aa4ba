"""The broker driven by real clients: confluent-kafka, kafka-python and aiokafka.

Covers, against one broker process for the module:
- produce and consume with every compression codec each client can run here, checking the
  batches on disk carry that codec (so compression really happened) and that every client
  able to decompress it reads the same records back;
- acks 0, 1 and all with every client (and that acks=0 gets no response on the wire);
- idempotent producers: each client's idempotent producer delivers exactly once in order
  with contiguous sequences; a batch sent twice on the wire is answered with its first base
  offset and stored once; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER and an old epoch
  INVALID_PRODUCER_EPOCH, both appending nothing;
- keys, values and headers round trip between every pair of clients (null key, empty and
  null value, binary data, repeated and null-valued headers, a non-ASCII header key);
- order per partition with many keyed records over several partitions;
- offsets by timestamp (confluent-kafka, kafka-python, aiokafka) and earliest/latest, and
  reading from an offset in the middle of a batch;
- a record larger than every fetch size limit is still delivered; producing to a topic that
  does not exist creates it; a LogAppendTime topic stamps records with the broker's clock;
  a consumer waiting on an empty partition gets a new record at once.

Codecs: confluent-kafka and aiokafka (cramjam) all five; kafka-python only none and gzip
(it needs python-snappy, lz4 and zstandard for the others, which this venv does not have).
The on-disk codec check matters: librdkafka silently sends ``lz4`` batches uncompressed
unless the broker advertises FindCoordinator (its "LZ4" feature probe).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import replace

import aiokafka.codec
import kafka.codec
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from broker_fixtures import (
    CLIENT_ID,
    CLIENTS,
    CODECS,
    CONSUMERS,
    PRODUCERS,
    TIMEOUT,
    RawConnection,
    Rec,
    admin,
    broker,
    compression_conf,
    confluent_consumer,
    consume_confluent,
    create_topic,
    init_producer_id,
    numbered,
    produce_confluent,
    produce_request,
    raw_produce,
    stored_batches,
    topic,
    watermarks,
)
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import OffsetSpec
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from sparklog.broker.process import BrokerProcess
from sparklog.errors import ErrorCode
from sparklog.record.records import build_batch

__all__ = ["broker", "topic"]  # fixtures, imported for pytest

pytestmark = pytest.mark.timeout(60)

_OPTIONAL = ("snappy", "lz4", "zstd")
CLIENT_CODECS: dict[str, set[str]] = {
    "confluent": set(CODECS),
    "kafka-python": {"none", "gzip"} | {c for c in _OPTIONAL
                                        if getattr(kafka.codec, f"has_{c}")()},
    "aiokafka": {"none", "gzip"} | {c for c in _OPTIONAL
                                    if getattr(aiokafka.codec, f"has_{c}")()},
}


def _codec_cases() -> list[object]:
    cases: list[object] = []
    for client in CLIENTS:
        for codec in CODECS:
            marks = () if codec in CLIENT_CODECS[client] else pytest.mark.skip(
                reason=f"{client} has no {codec} library in this environment")
            cases.append(pytest.param(client, codec, marks=marks, id=f"{client}-{codec}"))
    return cases


def _contents(records: list[Rec]) -> list[tuple[bytes | None, bytes | None, tuple]]:
    return [r.content for r in records]


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- compression ------------------------------------------------------------------------------


@pytest.mark.parametrize(("client", "codec"), _codec_cases())
def test_compressed_round_trip(broker: BrokerProcess, topic: str, client: str,
                               codec: str) -> None:
    create_topic(broker.bootstrap, topic)
    records = [Rec(r.key, r.value, (("codec", codec.encode()),)) for r in
               numbered(40, key_count=4, pad=300)]

    acked = PRODUCERS[client](broker.bootstrap, topic, records, **compression_conf(client, codec))

    assert [r.offset for r in acked] == list(range(40))
    batches = stored_batches(broker, topic)
    assert {b.compression_name for b in batches} == {codec}
    assert sum(b.record_count for b in batches) == 40
    readers = [c for c in CLIENTS if codec in CLIENT_CODECS[c]]
    for reader in readers:
        consumed = CONSUMERS[reader](broker.bootstrap, topic, 40)
        assert _contents(consumed) == _contents(records), reader
        assert [r.offset for r in consumed] == list(range(40)), reader


# -- acks -------------------------------------------------------------------------------------


def _acks_conf(client: str, acks: str) -> dict[str, object]:
    if client == "confluent":
        return {"acks": acks}
    value = acks if acks == "all" else int(acks)
    if client == "kafka-python":  # idempotent by default, which needs acks=all
        return {"acks": value, "enable_idempotence": False}
    return {"acks": value}


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("client", CLIENTS)
def test_acks(broker: BrokerProcess, topic: str, client: str, acks: str) -> None:
    create_topic(broker.bootstrap, topic)
    records = numbered(50)

    acked = PRODUCERS[client](broker.bootstrap, topic, records, **_acks_conf(client, acks))

    assert len(acked) == 50  # every delivery report succeeded
    if acks != "0":  # with acks=0 the client never learns offsets
        assert [r.offset for r in acked] == list(range(50))
    consumed = consume_confluent(broker.bootstrap, topic, 50)
    assert _contents(consumed) == _contents(records)
    assert watermarks(broker.bootstrap, topic) == (0, 50)


def test_acks_zero_is_not_answered(broker: BrokerProcess, topic: str) -> None:
    """No response frame for acks=0: the next answer on the connection is the next request's."""
    create_topic(broker.bootstrap, topic)
    batch = build_batch([(None, b"fire and forget", (), _now_ms())])
    with RawConnection(broker.bootstrap) as conn:
        conn.send_message(produce_request(topic, 0, batch, acks=0))
        body = conn.request(18, 0, b"")  # ApiVersions v0; asserts the correlation id
        assert body[:2] == b"\x00\x00"
    assert watermarks(broker.bootstrap, topic) == (0, 1)


# -- idempotence ------------------------------------------------------------------------------


IDEMPOTENT = {
    "confluent": {"enable.idempotence": True, "batch.num.messages": 25,
                  "max.in.flight.requests.per.connection": 5},
    "kafka-python": {"enable_idempotence": True, "batch_size": 2000},
    "aiokafka": {"enable_idempotence": True, "max_batch_size": 2000},
}


@pytest.mark.parametrize("client", CLIENTS)
def test_idempotent_producer_delivers_exactly_once_in_order(broker: BrokerProcess, topic: str,
                                                            client: str) -> None:
    create_topic(broker.bootstrap, topic)
    records = numbered(600)

    acked = PRODUCERS[client](broker.bootstrap, topic, records, **IDEMPOTENT[client])

    assert [r.offset for r in acked] == list(range(600))
    consumed = consume_confluent(broker.bootstrap, topic, 600)
    assert [r.value for r in consumed] == [r.value for r in records]
    assert watermarks(broker.bootstrap, topic) == (0, 600)
    batches = stored_batches(broker, topic)
    assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    sequences = [b.base_sequence for b in batches]
    counts = [b.record_count for b in batches]
    assert sequences == [sum(counts[:i]) for i in range(len(counts))]


@pytest.mark.parametrize("api_version", [None, (2, 4), (3, 9), (4, 0)],
                         ids=["negotiated", "2.4", "3.9", "4.0"])
def test_kafka_python_at_each_kafka_release_produces_and_consumes_in_a_group(
        broker: BrokerProcess, topic: str, api_version: tuple[int, int] | None) -> None:
    """kafka-python 3 told the broker is Kafka 2.4, 3.9 or 4.0 (as applications and its own
    test fixture set ``api_version``) trusts its own version table for that release, and
    with it unset negotiates the newest versions both know: either way its default
    (idempotent) producer delivers in order and a consumer group commits and resumes, on
    connections the broker never closes for a request it cannot serve."""
    create_topic(broker.bootstrap, topic, partitions=2)
    pinned = {} if api_version is None else {"api_version": api_version}
    records = numbered(40, key_count=4)
    acked = PRODUCERS["kafka-python"](broker.bootstrap, topic, records, **pinned)
    assert sorted(r.offset for r in acked if r.partition == 0) == \
        list(range(sum(r.partition == 0 for r in acked)))
    group = f"{topic}-group"

    def consume(count: int) -> list[ConsumerRecord]:
        consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 fetch_max_wait_ms=50, **pinned)
        got: list[ConsumerRecord] = []
        try:
            deadline = time.monotonic() + TIMEOUT
            while len(got) < count and time.monotonic() < deadline:
                for messages in consumer.poll(timeout_ms=500).values():
                    got.extend(messages)
            consumer.commit()
        finally:
            consumer.close()
        return got

    first = consume(len(records))
    assert sorted(m.value for m in first) == sorted(r.value for r in records)
    for partition in (0, 1):  # each partition in the order produced
        offsets = [m.offset for m in first if m.partition == partition]
        assert offsets == sorted(offsets)
    PRODUCERS["kafka-python"](broker.bootstrap, topic, numbered(6, pad=1), **pinned)
    assert len(consume(6)) == 6, "the group resumed at its committed offsets"
    closed = [line for line in broker.log_file.read_text().splitlines()
              if "closing connection" in line and "not served" in line]
    assert closed == []


def _idempotent_batch(pid: int, epoch: int, sequence: int, values: list[bytes]) -> bytes:
    now = _now_ms()
    return build_batch([(None, v, (), now) for v in values], producer_id=pid,
                       producer_epoch=epoch, base_sequence=sequence)


def test_retried_idempotent_batch_is_stored_once(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap) as conn:
        pid, epoch = init_producer_id(conn)
        first = _idempotent_batch(pid, epoch, 0, [b"a", b"b", b"c"])
        second = _idempotent_batch(pid, epoch, 3, [b"d", b"e"])

        assert raw_produce(conn, topic, 0, first) == (ErrorCode.NONE, 0)
        assert raw_produce(conn, topic, 0, second) == (ErrorCode.NONE, 3)
        # Retries (a lost response): answered with the original offsets, not appended.
        assert raw_produce(conn, topic, 0, second) == (ErrorCode.NONE, 3)
        assert raw_produce(conn, topic, 0, first) == (ErrorCode.NONE, 0)

    assert watermarks(broker.bootstrap, topic) == (0, 5)
    consumed = consume_confluent(broker.bootstrap, topic, 5)
    assert [r.value for r in consumed] == [b"a", b"b", b"c", b"d", b"e"]
    assert [b.base_sequence for b in stored_batches(broker, topic)] == [0, 3]


def test_sequence_gap_is_out_of_order(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap) as conn:
        pid, epoch = init_producer_id(conn)
        assert raw_produce(conn, topic, 0, _idempotent_batch(pid, epoch, 0, [b"a", b"b"])) == (
            ErrorCode.NONE, 0)

        gap = raw_produce(conn, topic, 0, _idempotent_batch(pid, epoch, 5, [b"x"]))
        assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        new_epoch_not_at_zero = raw_produce(conn, topic, 0,
                                            _idempotent_batch(pid, epoch + 1, 2, [b"y"]))
        assert new_epoch_not_at_zero.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        # The producer can carry on with the sequence it owes.
        assert raw_produce(conn, topic, 0, _idempotent_batch(pid, epoch, 2, [b"c"])) == (
            ErrorCode.NONE, 2)

    consumed = consume_confluent(broker.bootstrap, topic, 3)
    assert [r.value for r in consumed] == [b"a", b"b", b"c"]
    assert watermarks(broker.bootstrap, topic) == (0, 3)


def test_old_producer_epoch_is_fenced(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawConnection(broker.bootstrap) as conn:
        pid, epoch = init_producer_id(conn)
        assert raw_produce(conn, topic, 0, _idempotent_batch(pid, epoch, 0, [b"old"])) == (
            ErrorCode.NONE, 0)
        assert raw_produce(conn, topic, 0, _idempotent_batch(pid, epoch + 1, 0, [b"new"])) == (
            ErrorCode.NONE, 1)

        zombie = raw_produce(conn, topic, 0, _idempotent_batch(pid, epoch, 1, [b"zombie"]))
        assert zombie.error_code == ErrorCode.INVALID_PRODUCER_EPOCH

    consumed = consume_confluent(broker.bootstrap, topic, 2)
    assert [r.value for r in consumed] == [b"old", b"new"]
    assert watermarks(broker.bootstrap, topic) == (0, 2)


# -- keys, values, headers --------------------------------------------------------------------

SPECIAL_RECORDS = [
    Rec(None, b"null key"),
    Rec(b"empty value", b""),
    Rec(b"tombstone", None),
    Rec(b"", b"empty key"),
    Rec(bytes(range(256)), bytes(range(255, -1, -1)),
        (("dup", b"1"), ("dup", b"2"), ("dup", b"3"), ("empty", b""),
         ("binary", b"\x00\xff\x80"), ("null", None), ("ключ", "значение".encode()))),
    Rec(b"k" * 5000, b"v" * 100_000, (("big", b"h" * 1000),)),
]


@pytest.mark.parametrize("producer", CLIENTS)
def test_keys_values_and_headers_round_trip(broker: BrokerProcess, topic: str,
                                            producer: str) -> None:
    create_topic(broker.bootstrap, topic)
    records = SPECIAL_RECORDS
    if producer == "kafka-python":  # it refuses null header values before sending
        records = [replace(r, headers=tuple(h for h in r.headers if h[1] is not None))
                   for r in records]

    PRODUCERS[producer](broker.bootstrap, topic, records)

    for consumer in CLIENTS:
        consumed = CONSUMERS[consumer](broker.bootstrap, topic, len(records))
        assert _contents(consumed) == _contents(records), consumer


# -- ordering ---------------------------------------------------------------------------------


@pytest.mark.parametrize("consumer", CLIENTS)
def test_order_kept_per_partition(broker: BrokerProcess, topic: str, consumer: str) -> None:
    partitions = 4
    create_topic(broker.bootstrap, topic, partitions=partitions)
    records = numbered(2000, key_count=40)

    acked = produce_confluent(broker.bootstrap, topic, records, **{"batch.num.messages": 50})

    consumed = CONSUMERS[consumer](broker.bootstrap, topic, len(records),
                                   partitions=range(partitions))
    assert len(consumed) == len(records)
    assert {(r.partition, r.offset, r.value) for r in consumed} == {
        (r.partition, r.offset, r.value) for r in acked}
    by_partition: dict[int | None, list[Rec]] = defaultdict(list)
    for rec in consumed:  # consumed is sorted by (partition, offset)
        by_partition[rec.partition].append(rec)
    assert len(by_partition) == partitions  # the keys spread over every partition
    values_by_key: dict[bytes | None, list[int]] = defaultdict(list)
    partition_of_key: dict[bytes | None, set[int | None]] = defaultdict(set)
    for partition, recs in by_partition.items():
        assert [r.offset for r in recs] == list(range(len(recs))), partition
        for rec in recs:
            values_by_key[rec.key].append(int(rec.value or b""))
            partition_of_key[rec.key].add(rec.partition)
    for key, values in values_by_key.items():
        assert values == sorted(values), key  # produced in increasing order per key
        assert len(partition_of_key[key]) == 1, key


# -- offsets ----------------------------------------------------------------------------------


def test_offsets_for_times_and_earliest_latest(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    base = _now_ms() - 600_000
    records = [Rec(None, str(i).encode(), partition=0, timestamp=base + 1000 * i)
               for i in range(10)]
    # one batch: the flush sends at once, the long linger only keeps a busy machine from
    # splitting the ten records
    produce_confluent(broker.bootstrap, topic, records, **{"linger.ms": 5000})
    # timestamp asked for -> (offset, timestamp of that record); None: after the last record
    expected = {base - 5000: (0, base), base: (0, base), base + 3000: (3, base + 3000),
                base + 3500: (4, base + 4000), base + 9000: (9, base + 9000),
                base + 9001: None}

    consumer = confluent_consumer(broker.bootstrap)
    try:
        for ts, want in expected.items():  # one partition per request: librdkafka merges
            (found,) = consumer.offsets_for_times([CkTopicPartition(topic, 0, ts)],
                                                  timeout=TIMEOUT)
            assert found.offset == (want[0] if want else -1), ts
        assert consumer.get_watermark_offsets(CkTopicPartition(topic, 0),
                                              timeout=TIMEOUT) == (0, 10)
    finally:
        consumer.close()

    tp = KpTopicPartition(topic, 0)
    kp = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, client_id=CLIENT_ID)
    try:
        for ts, want in expected.items():
            answer = kp.offsets_for_times({tp: ts})[tp]
            assert (None if answer is None else (answer.offset, answer.timestamp)) == want, ts
        assert kp.beginning_offsets([tp]) == {tp: 0}
        assert kp.end_offsets([tp]) == {tp: 10}
    finally:
        kp.close()

    async def aiokafka_lookup() -> None:
        aio = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
        await aio.start()
        try:
            atp = AioTopicPartition(topic, 0)
            answer = (await aio.offsets_for_times({atp: base + 3500}))[atp]
            assert (answer.offset, answer.timestamp) == (4, base + 4000)
            assert await aio.beginning_offsets([atp]) == {atp: 0}
            assert await aio.end_offsets([atp]) == {atp: 10}
        finally:
            await aio.stop()

    asyncio.run(aiokafka_lookup())

    # Reading from an offset inside a batch returns that record and the ones after it.
    assert len(stored_batches(broker, topic)) == 1
    tail = consume_confluent(broker.bootstrap, topic, 6, start=4)
    assert [(r.offset, r.value, r.timestamp) for r in tail] == [
        (i, str(i).encode(), base + 1000 * i) for i in range(4, 10)]


def test_admin_list_offsets(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    base = _now_ms() - 60_000
    produce_confluent(broker.bootstrap, topic,
                      [Rec(None, b"x", partition=0, timestamp=base + 10 * i) for i in range(5)])
    tp = CkTopicPartition(topic, 0)
    specs = {"earliest": OffsetSpec.earliest(), "latest": OffsetSpec.latest(),
             "time": OffsetSpec.for_timestamp(base + 25)}
    client = admin(broker.bootstrap)
    answers = {name: client.list_offsets({tp: spec})[tp].result(TIMEOUT).offset
               for name, spec in specs.items()}
    assert answers == {"earliest": 0, "latest": 5, "time": 3}


# -- fetching and topic creation --------------------------------------------------------------

SMALL_FETCH = {
    "confluent": {"fetch.max.bytes": 1024, "message.max.bytes": 1000,
                  "max.partition.fetch.bytes": 1024},
    "kafka-python": {"fetch_max_bytes": 1024, "max_partition_fetch_bytes": 1024},
    "aiokafka": {"fetch_max_bytes": 1024, "max_partition_fetch_bytes": 1024},
}


@pytest.mark.parametrize("consumer", CLIENTS)
def test_record_larger_than_the_fetch_limits_is_delivered(broker: BrokerProcess, topic: str,
                                                          consumer: str) -> None:
    """Fetch returns at least one whole batch, whatever the size limits (as Kafka does)."""
    create_topic(broker.bootstrap, topic)
    records = [Rec(b"small", b"x"), Rec(b"big", bytes(range(256)) * 400), Rec(b"small", b"y")]
    produce_confluent(broker.bootstrap, topic, records, **{"linger.ms": 0})

    consumed = CONSUMERS[consumer](broker.bootstrap, topic, 3, **SMALL_FETCH[consumer])

    assert _contents(consumed) == _contents(records)


@pytest.mark.parametrize("producer", CLIENTS)
def test_producing_to_a_new_topic_creates_it(broker: BrokerProcess, topic: str,
                                             producer: str) -> None:
    acked = PRODUCERS[producer](broker.bootstrap, topic, numbered(3))

    assert [(r.partition, r.offset) for r in acked] == [(0, 0), (0, 1), (0, 2)]
    assert _contents(consume_confluent(broker.bootstrap, topic, 3)) == _contents(numbered(3))


def test_log_append_time_topic(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, config={"message.timestamp.type": "LogAppendTime"})
    old = _now_ms() - 3_600_000
    before = _now_ms()
    records = [Rec(None, str(i).encode() * 100, timestamp=old) for i in range(5)]
    produce_confluent(broker.bootstrap, topic, records, **{"compression.type": "gzip"})
    after = _now_ms()

    consumer = confluent_consumer(broker.bootstrap)
    try:
        consumer.assign([CkTopicPartition(topic, 0, 0)])
        messages = consumer.consume(5, timeout=TIMEOUT)
    finally:
        consumer.close()
    assert [m.value() for m in messages] == [r.value for r in records]
    kinds = {m.timestamp()[0] for m in messages}
    stamps = {m.timestamp()[1] for m in messages}
    assert kinds == {TIMESTAMP_LOG_APPEND_TIME}
    # the broker's clock, one stamp per batch (librdkafka may split the five in two)
    assert all(before <= stamp <= after for stamp in stamps) and len(stamps) <= 2
    batches = stored_batches(broker, topic)  # resealed: the CRCs still check out
    assert [(b.timestamp_type, b.compression_name) for b in batches] == [(1, "gzip")]


def test_waiting_fetch_wakes_up_on_append(broker: BrokerProcess, topic: str) -> None:
    """A consumer long-polling an empty partition gets a new record at once, not after
    ``fetch.wait.max.ms``."""
    create_topic(broker.bootstrap, topic)
    consumer = confluent_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 10_000})
    try:
        consumer.assign([CkTopicPartition(topic, 0, 0)])
        assert consumer.consume(1, timeout=1.0) == []  # the fetch is now waiting
        started = time.monotonic()
        produce_confluent(broker.bootstrap, topic, [Rec(None, b"wake up")])
        messages = consumer.consume(1, timeout=TIMEOUT)
        waited = time.monotonic() - started
    finally:
        consumer.close()
    assert [m.value() for m in messages] == [b"wake up"]
    assert waited < 3.0
