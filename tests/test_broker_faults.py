"""Misbehaving connections, restarts and crashes, against a real broker process.

Covers:
- raw garbage on the wire: random bytes, truncated frames and sizes, a frame too short for a
  header, a truncated body, an oversized and a negative frame size, an unknown API key, an
  unsupported version, an invalid client id, null arrays: each closes that connection
  without an answer, while a confluent-kafka producer and consumer on other connections keep
  going (every record acknowledged and read back in order), and the broker stays up with no
  internal error in its log;
- ApiVersions at an unsupported version (v99) is answered with error 35 and the version
  list, and the connection stays usable; trailing bytes after a request are ignored;
- a Produce request with a bad CRC (or a cut-short batch) is answered CORRUPT_MESSAGE and
  appends nothing; the connection stays usable;
- CreateTopics/CreatePartitions asking for absurd partition counts are refused whole;
- a client hanging up while its Fetch is long-polling does not disturb the broker;
- mutated copies of valid requests (seeded, reproducible) never crash the broker;
- a clean restart (SIGTERM, start) keeps every record, offset, timestamp, header, the log
  start offset, topic configs and idempotent-producer state; after SIGKILL and a restart
  every acknowledged record is still there and the log takes new writes.
"""

from __future__ import annotations

import random
import socket
import struct
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    BackgroundProducer,
    RawConnection,
    Rec,
    admin,
    assert_healthy,
    broker,
    consume_confluent,
    create_topic,
    fetch_request,
    frame,
    fresh_broker,
    init_producer_id,
    numbered,
    parse_api_versions_v0,
    produce_confluent,
    produce_request,
    raw_produce,
    raw_produce_to,
    request_frame,
    request_header,
    stored_batches,
    topic,
    unique_topic,
    watermarks,
)
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, ResourceType
from kafka.protocol.admin import DeleteRecordsRequest, DescribeConfigsRequest
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import ListOffsetsRequest, OffsetForLeaderEpochRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest
from test_decoder_fuzz import ABORTING_METADATA_V12

from sparklog.broker.config import BROKER_DEFAULTS
from sparklog.broker.process import BrokerProcess
from sparklog.broker.registry import load_handlers, served
from sparklog.errors import ErrorCode
from sparklog.protocol.codec import encode_request, request_class
from sparklog.protocol.entities import build
from sparklog.record.batch import CRC_OFFSET, HEADER_SIZE
from sparklog.record.records import build_batch

__all__ = ["broker", "fresh_broker", "topic"]  # fixtures, imported for pytest

pytestmark = pytest.mark.timeout(90)

MAX_FRAME = int(BROKER_DEFAULTS["socket.request.max.bytes"])
API_VERSIONS, METADATA, PRODUCE, DELETE_TOPICS = 18, 3, 0, 20


def _now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def background(broker: BrokerProcess, topic: str) -> Iterator[BackgroundProducer]:
    """A producer and a consumer working on their own connections during the test."""
    worker = BackgroundProducer(broker.bootstrap, topic).start()
    yield worker
    worker.abort()  # no-op after stop_and_verify; stops the threads if the test failed


def _still_serving(broker: BrokerProcess, background: BackgroundProducer) -> None:
    """Other clients were unaffected and the broker is healthy."""
    background.wait_for_progress(20)
    background.stop_and_verify()
    assert_healthy(broker)


# -- garbage on the wire ----------------------------------------------------------------------


_RANDOM = random.Random(7)
# (payload, half-close after sending: the broker then sees the end of the stream)
GARBAGE: dict[str, tuple[bytes, bool]] = {
    "random-bytes": (_RANDOM.randbytes(4096), True),
    "random-frame": (frame(b"\x7f\x00" + _RANDOM.randbytes(500)), False),
    "truncated-size": (b"\x00\x00", True),
    "truncated-frame": (struct.pack(">i", 100) + b"x" * 10, True),
    "frame-shorter-than-header": (frame(b"abc"), False),
    "truncated-body": (request_frame(METADATA, 8, 1, struct.pack(">ih", 1, 10) + b"abc"), False),
    "oversized-size": (struct.pack(">i", MAX_FRAME + 1), False),
    "max-int-size": (struct.pack(">i", 2**31 - 1), False),
    "negative-size": (struct.pack(">i", -1), False),
    "min-int-size": (struct.pack(">i", -(2**31)), False),
    "unknown-api-key": (request_frame(999, 0, 1), False),
    "unsupported-version": (request_frame(METADATA, 99, 1), False),
    "flexible-produce-v9": (request_frame(PRODUCE, 9, 1, b"\x00" * 20), False),
    "client-id-not-utf8": (frame(request_header(METADATA, 8, 1, b"\xff\xfe") + b"\x00" * 7),
                           False),
    "client-id-past-end": (frame(struct.pack(">hhih", METADATA, 8, 1, 500)), False),
    "null-topic-array": (request_frame(DELETE_TOPICS, 3, 1, struct.pack(">ii", -1, 1000)),
                         False),
    "null-produce-data": (request_frame(PRODUCE, 8, 1, struct.pack(">hhii", -1, 1, 1000, -1)),
                          False),
}


@pytest.mark.parametrize("case", list(GARBAGE))
def test_garbage_closes_only_that_connection(broker: BrokerProcess,
                                             background: BackgroundProducer,
                                             case: str) -> None:
    payload, half_close = GARBAGE[case]
    with RawConnection(broker.bootstrap) as bad:
        bad.send(payload)
        if half_close:
            bad.sock.shutdown(socket.SHUT_WR)
        assert bad.read_until_closed() == b"", "closed without an answer"
    _still_serving(broker, background)


def test_many_bad_connections_at_once(broker: BrokerProcess,
                                      background: BackgroundProducer) -> None:
    connections = [RawConnection(broker.bootstrap) for _ in range(50)]
    try:
        for index, conn in enumerate(connections):
            conn.send(list(GARBAGE.values())[index % len(GARBAGE)][0])
            conn.sock.shutdown(socket.SHUT_WR)
        assert all(conn.read_until_closed() == b"" for conn in connections)
    finally:
        for conn in connections:
            conn.close()
    _still_serving(broker, background)


def test_unsupported_api_versions_version_gets_the_version_list(broker: BrokerProcess) -> None:
    # A newer client's request: header v2 (an empty tagged-field section after the client
    # id), then a v3-style body (compact client software name and version, tagged fields).
    future_request = b"\x00" + b"\x09sparklog" + b"\x041.0" + b"\x00"
    with RawConnection(broker.bootstrap) as conn:
        error, versions = parse_api_versions_v0(conn.request(API_VERSIONS, 99, future_request))
        assert error == ErrorCode.UNSUPPORTED_VERSION
        load_handlers()
        assert versions == served(), "the whole table, as ApiVersions answers it"
        # The client retries at a version it found in the list, on the same connection.
        error, again = parse_api_versions_v0(conn.request(API_VERSIONS, 0, b""))
        assert error == ErrorCode.NONE
        assert again == versions
    assert_healthy(broker)


def test_trailing_bytes_after_a_request_are_ignored(broker: BrokerProcess) -> None:
    """librdkafka's Metadata "all topics" request carries extra bytes; Kafka ignores them."""
    with RawConnection(broker.bootstrap) as conn:
        error, _ = parse_api_versions_v0(conn.request(API_VERSIONS, 0, b"\x00\x00\x00"))
        assert error == ErrorCode.NONE
        body = conn.request(METADATA, 1, struct.pack(">i", -1) + b"\x01\x02\x03")
        assert struct.unpack_from(">i", body)[0] == 1  # one broker listed
    assert_healthy(broker)


# -- bad record batches -----------------------------------------------------------------------


def _corruptions(batch: bytes) -> dict[str, bytes]:
    flipped_body = bytearray(batch)
    flipped_body[HEADER_SIZE + 3] ^= 0x01
    flipped_crc = bytearray(batch)
    flipped_crc[CRC_OFFSET] ^= 0x80
    return {"flipped record byte": bytes(flipped_body), "flipped crc": bytes(flipped_crc),
            "cut short": batch[:-5], "garbage after the batch": batch + b"\x00" * 20}


def test_bad_crc_is_corrupt_message_and_appends_nothing(broker: BrokerProcess,
                                                        background: BackgroundProducer) -> None:
    name = create_topic(broker.bootstrap, unique_topic("crc"))
    batch = build_batch([(b"key", b"value" * 20, (("h", b"1"),), _now_ms())] * 3)
    with RawConnection(broker.bootstrap) as conn:
        for what, corrupt in _corruptions(batch).items():
            assert raw_produce(conn, name, 0, corrupt).error_code == ErrorCode.CORRUPT_MESSAGE, (
                what)
        assert watermarks(broker.bootstrap, name) == (0, 0)
        assert stored_batches(broker, name) == []
        # The same connection is still good for a valid batch.
        assert raw_produce(conn, name, 0, batch) == (ErrorCode.NONE, 0)
    assert watermarks(broker.bootstrap, name) == (0, 3)
    assert [r.value for r in consume_confluent(broker.bootstrap, name, 3)] == [b"value" * 20] * 3
    _still_serving(broker, background)


def test_no_batch_or_two_batches_are_invalid_record(broker: BrokerProcess) -> None:
    """Magic 2 produce requests carry exactly one intact batch per partition (Kafka's rule)."""
    name = create_topic(broker.bootstrap, unique_topic("count"))
    batch = build_batch([(b"k", b"v", (), _now_ms())])
    with RawConnection(broker.bootstrap) as conn:
        for records in (b"", None, batch + batch):
            assert raw_produce(conn, name, 0, records).error_code == ErrorCode.INVALID_RECORD
    assert watermarks(broker.bootstrap, name) == (0, 0)
    assert_healthy(broker)


def test_a_bad_partition_does_not_affect_the_others(broker: BrokerProcess) -> None:
    name = create_topic(broker.bootstrap, unique_topic("mixed"), partitions=3)
    batch = build_batch([(b"k", b"v", (), _now_ms())] * 2)
    corrupt = _corruptions(batch)["flipped crc"]
    with RawConnection(broker.bootstrap) as conn:
        results = raw_produce_to(conn, name, {0: batch, 1: corrupt, 2: batch, 7: batch})
    assert results == {0: (ErrorCode.NONE, 0), 1: (ErrorCode.CORRUPT_MESSAGE, -1),
                       2: (ErrorCode.NONE, 0), 7: (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1)}
    assert [watermarks(broker.bootstrap, name, p) for p in range(3)] == [(0, 2), (0, 0), (0, 2)]
    assert_healthy(broker)


# -- requests asking for too much ---------------------------------------------------------------


def test_absurd_partition_counts_are_refused(broker: BrokerProcess) -> None:
    name = unique_topic("huge")
    client = admin(broker.bootstrap)
    created = client.create_topics([NewTopic(name, 20_000, 1)], request_timeout=TIMEOUT)
    with pytest.raises(KafkaException) as refused:
        created[name].result(TIMEOUT)
    assert refused.value.args[0].code() == ErrorCode.POLICY_VIOLATION
    assert name not in client.list_topics(timeout=TIMEOUT).topics

    create_topic(broker.bootstrap, name)
    grown = client.create_partitions([NewPartitions(name, 20_001)])
    with pytest.raises(KafkaException) as refused:
        grown[name].result(TIMEOUT)
    assert refused.value.args[0].code() == ErrorCode.POLICY_VIOLATION
    assert len(client.list_topics(name, timeout=TIMEOUT).topics[name].partitions) == 1
    assert_healthy(broker)


def test_client_hanging_up_during_a_long_poll(broker: BrokerProcess,
                                              background: BackgroundProducer) -> None:
    name = create_topic(broker.bootstrap, unique_topic("longpoll"))
    for _ in range(5):
        conn = RawConnection(broker.bootstrap)
        conn.send_message(fetch_request(name, 0, 0, max_wait_ms=3000, min_bytes=1))
        conn.close()
    produce_confluent(broker.bootstrap, name, numbered(3))  # wakes the abandoned fetches
    assert len(consume_confluent(broker.bootstrap, name, 3)) == 3
    _still_serving(broker, background)


# -- mutated requests ---------------------------------------------------------------------------


def _valid_requests(name: str) -> list[ApiMessage]:
    """Well-formed requests of the read, produce and describe APIs for topic ``name``."""
    offsets_topic = ListOffsetsRequest.ListOffsetsTopic
    batch = build_batch([(b"k", b"v", (("h", b"x"),), _now_ms())] * 2)
    return [
        produce_request(name, 0, batch, acks=1, version=8),
        fetch_request(name, 0, 1, max_bytes=100_000),
        ListOffsetsRequest(version=5, replica_id=-1, isolation_level=0, topics=[offsets_topic(
            name=name, partitions=[offsets_topic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=0, timestamp=_now_ms() - 1000)])]),
        MetadataRequest(version=8, topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                        allow_auto_topic_creation=False,
                        include_cluster_authorized_operations=False,
                        include_topic_authorized_operations=False),
        DescribeConfigsRequest(version=3, resources=[(2, name, None), (4, "0", None)],
                               include_synonyms=True, include_documentation=True),
        OffsetForLeaderEpochRequest(version=3, replica_id=-1, topics=[(name, [(0, 0, 0)])]),
        DeleteRecordsRequest(version=1, topics=[(name, [(0, 1)])], timeout_ms=1000),
        InitProducerIdRequest(version=1, transactional_id=None, transaction_timeout_ms=1000),
    ]


def _flexible_requests(name: str) -> list[bytes]:
    """Frames of served flexible versions (header v2, compact arrays, tagged fields)."""
    bodies: list[tuple[int, int, dict[str, Any]]] = [
        (METADATA, 12, {"topics": [{"name": name, "topic_id": None}],
                        "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": True}),
        (35, 4, {"topics": [{"topic": name, "partitions": [0, 1]}]}),  # DescribeLogDirs
        (46, 0, {"timeout": timedelta(seconds=1),  # ListPartitionReassignments
                 "topics": [{"name": name, "partition_indexes": [0, 1]}]}),
        (50, 0, {"users": [{"name": "alice"}]}),  # DescribeUserScramCredentials
    ]
    return [encode_request(key, version, 1, b"fuzz", build(request_class(key, version), body))
            for key, version, body in bodies]


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    """Change a few bytes after the request header's api key, version and correlation id."""
    data = bytearray(frame)
    start = 12  # size, api key, version, correlation id
    position = rng.randrange(start, len(data))
    kind = rng.randrange(5)
    if kind == 4:  # a count of 4 billion as a compact array's unsigned varint
        data[position:position] = b"\xff\xff\xff\xff\x0f"
    elif kind == 0:
        data[position] = rng.randrange(256)
    elif kind == 1 and position + 4 <= len(data):
        struct.pack_into(">i", data, position, rng.choice([-1, -2, 0, 2**31 - 1, 1 << 20]))
    elif kind == 2:
        del data[position:]
    else:
        data[position:position] = rng.randbytes(rng.randint(1, 8))
    struct.pack_into(">i", data, 0, len(data) - 4)
    return bytes(data)


def test_mutated_requests_never_crash_the_broker(broker: BrokerProcess,
                                                 background: BackgroundProducer) -> None:
    name = create_topic(broker.bootstrap, unique_topic("mutated"), partitions=2)
    produce_confluent(broker.bootstrap, name, numbered(10))
    frames = _flexible_requests(name)
    for request in _valid_requests(name):
        request.with_header(correlation_id=1, client_id="fuzz")
        frames.append(bytes(request.encode(header=True, framed=True)))
    rng = random.Random(20240611)
    answered = closed = 0
    for _ in range(600):
        with RawConnection(broker.bootstrap, timeout=5) as conn:
            conn.send(_mutate(rng, rng.choice(frames)))
            conn.sock.shutdown(socket.SHUT_WR)
            response = conn.read_until_closed(timeout=5)
        assert response is not None, "the broker neither answered nor closed"
        if response:
            size, correlation_id = struct.unpack_from(">ii", response)
            assert (size, correlation_id) == (len(response) - 4, 1)
            answered += 1
        else:
            closed += 1
    assert answered and closed  # both paths were exercised
    _still_serving(broker, background)


def test_a_frame_that_aborted_kio_closes_only_that_connection(
        fresh_broker: BrokerProcess) -> None:
    """Issue 26: a 58-byte Metadata v12 request whose topics array claims 24 billion
    elements made kio's native reader abort the broker process. Now that connection is
    closed with one log line naming the API and version, and nothing else changes (a
    broker of its own: the module's has rate-limited such lines after the garbage tests)."""
    background = BackgroundProducer(fresh_broker.bootstrap, unique_topic("kio")).start()
    try:
        with RawConnection(fresh_broker.bootstrap) as bad:
            bad.send(frame(ABORTING_METADATA_V12))
            assert bad.read_until_closed() == b"", "closed without an answer"
        _still_serving(fresh_broker, background)
    finally:
        background.abort()
    lines = [line for line in fresh_broker.log_file.read_text().splitlines()
             if "Metadata v12 does not decode: an array of 24350279303 elements" in line]
    assert len(lines) == 1 and "closing connection from" in lines[0], lines


# -- restarts and crashes -----------------------------------------------------------------------


def _describe_segment_bytes(bootstrap: str, name: str) -> str:
    resource = ConfigResource(ResourceType.TOPIC, name)
    client = admin(bootstrap)  # referenced until the result is in
    entries = client.describe_configs([resource])[resource].result(TIMEOUT)
    return str(entries["segment.bytes"].value)


def test_clean_restart_keeps_everything(fresh_broker: BrokerProcess) -> None:
    bootstrap = fresh_broker.bootstrap
    name = create_topic(bootstrap, unique_topic("restart"), partitions=2,
                        config={"segment.bytes": "4096"})  # several segments per partition
    base = _now_ms() - 60_000
    records = [Rec(f"k{i % 7}".encode(), f"value-{i}".encode() * 5, (("n", str(i).encode()),),
                   timestamp=base + i) for i in range(400)]
    acked = produce_confluent(bootstrap, name, records, **{"enable.idempotence": True,
                                                           "batch.num.messages": 20})
    client = admin(bootstrap)
    (deleted,) = client.delete_records([CkTopicPartition(name, 0, 10)]).values()
    assert deleted.result(TIMEOUT).low_watermark == 10
    with RawConnection(bootstrap) as conn:
        pid, epoch = init_producer_id(conn)
        idempotent = build_batch([(b"once", b"only once", (), _now_ms())], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=0)
        first = raw_produce(conn, name, 1, idempotent)
    marks = {p: watermarks(bootstrap, name, p) for p in (0, 1)}
    assert marks[0][0] == 10 and sum(high for _, high in marks.values()) == len(acked) + 1
    before = {p: consume_confluent(bootstrap, name, high - low, partitions=(p,))
              for p, (low, high) in marks.items()}
    assert len(list(fresh_broker.data_dir.glob(f"{name}-0/*.log"))) > 1

    assert fresh_broker.stop() == 0
    fresh_broker.start()

    assert {p: watermarks(bootstrap, name, p) for p in (0, 1)} == marks
    after = {p: consume_confluent(bootstrap, name, len(before[p]), partitions=(p,))
             for p in (0, 1)}
    assert after == before  # keys, values, headers, offsets, timestamps
    assert _describe_segment_bytes(bootstrap, name) == "4096"
    with RawConnection(bootstrap) as conn:
        assert raw_produce(conn, name, 1, idempotent) == first  # still a known retry
    more = produce_confluent(bootstrap, name, [Rec(None, b"after", partition=0)])
    assert more[0].offset == marks[0][1]
    assert_healthy(fresh_broker)


def test_crash_keeps_every_acknowledged_record(fresh_broker: BrokerProcess) -> None:
    name = unique_topic("crash")
    retried = create_topic(fresh_broker.bootstrap, unique_topic("retried"))
    with RawConnection(fresh_broker.bootstrap) as conn:
        pid, epoch = init_producer_id(conn)
        idempotent = build_batch([(b"once", b"only once", (), _now_ms())], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=0)
        first = raw_produce(conn, retried, 0, idempotent)
    worker = BackgroundProducer(fresh_broker.bootstrap, name, consume=False, idempotent=False)
    worker.start()
    worker.wait_for_progress(300)

    fresh_broker.kill()
    acked = worker.abort()
    fresh_broker.start()

    with RawConnection(fresh_broker.bootstrap) as conn:  # producer state rebuilt from the log
        assert raw_produce(conn, retried, 0, idempotent) == first
    assert watermarks(fresh_broker.bootstrap, retried) == (0, 1)

    end = watermarks(fresh_broker.bootstrap, name)[1]
    assert end >= len(acked)
    values = [int(r.value or b"-1") for r in consume_confluent(fresh_broker.bootstrap, name, end)]
    assert values[:len(acked)] == acked == list(range(len(acked)))  # nothing lost, in order
    assert values == list(range(end))  # and nothing but whole records that were sent
    more = produce_confluent(fresh_broker.bootstrap, name, [Rec(None, b"after")])
    assert more[0].offset == end
    assert_healthy(fresh_broker)
