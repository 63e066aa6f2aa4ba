"""Framing, version table and codec, cross-checked against kafka-python's ``kafka.protocol``.

kafka-python is an independent implementation: requests it encodes must decode with our codec
to the same values, and responses we encode must decode with its response classes.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import struct
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from broker_fixtures import kio_versions, kp_request
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer import (
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from sparklog.broker.registry import load_handlers, served
from sparklog.errors import ErrorCode, InvalidRequestError, UnsupportedVersionError
from sparklog.protocol.codec import (
    decode_request,
    encode_api_versions_error,
    encode_response,
    response_class,
)
from sparklog.protocol.fetch_response import (
    FetchPartition,
    FetchTopic,
    FileRegion,
    NodeEndpoint,
    encode_fetch_response,
)
from sparklog.protocol.fetch_response import FetchResponse as FetchAnswer
from sparklog.protocol.framing import (
    FrameError,
    RequestHeader,
    parse_request_header,
)
from sparklog.protocol.versions import (
    ApiKey,
    is_flexible,
    request_header_version,
    response_header_version,
)

load_handlers()
ADVERTISED = served()
"""What the broker's handlers serve: the versions this codec must read and write."""

# --- helpers ---------------------------------------------------------------------------------


def kp_frame(
    request: Any, correlation_id: int = 7, client_id: str | None = "sparklog-test"
) -> bytes:
    """A request frame (without the size prefix) encoded by kafka-python."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True))


def decode(frame: bytes) -> tuple[RequestHeader, Any]:
    header, offset = parse_request_header(frame)
    return header, decode_request(header, frame, offset)


def build(cls: type, **values: Any) -> Any:
    """Instantiate a kio dataclass with the given values its version has."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{name: value for name, value in values.items() if name in names})


def nested(cls: type, name: str) -> type:
    """An entity class defined next to the kio payload class ``cls``."""
    return getattr(importlib.import_module(cls.__module__), name)


def answer(api_key: int, version: int, response: Any, correlation_id: int = 7) -> bytes:
    header = RequestHeader(api_key, version, correlation_id, "client")
    return encode_response(header, response)


def kp_decode(response_cls: Any, version: int, frame: bytes, correlation_id: int = 7) -> Any:
    (size,) = struct.unpack_from(">i", frame)
    assert size == len(frame) - 4
    decoded = response_cls.decode(frame, version=version, header=True, framed=True)
    assert decoded.header.correlation_id == correlation_id
    return decoded


def record_batch(*values: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for offset, value in enumerate(values):
        builder.append(
            offset, timestamp=1_700_000_000_000 + offset, key=None, value=value, headers=[]
        )
    return bytes(builder.build())


# --- versions ----------------------------------------------------------------------------------


def test_version_table() -> None:
    """The table the handlers declare is sorted, names only Kafka's API keys, and reaches no
    further than kio's newest schema for each (the codec could not read beyond it)."""
    assert list(ADVERTISED) == sorted(ADVERTISED)
    assert set(ADVERTISED) <= set(ApiKey)
    for key, (low, high) in ADVERTISED.items():
        assert 0 <= low <= high <= max(kio_versions(key)), ApiKey(key).name


def test_header_versions() -> None:
    """Which versions are flexible (request header v2, response header v1) agrees with
    kafka-python's schemas, an independent reading of Kafka's JSON, for every served
    version; ApiVersions answers with response header v0 whatever its version."""
    for key, (low, high) in ADVERTISED.items():
        first, last = kp_request(key)._flexible_versions
        for version in range(low, high + 1):
            flexible = first <= version <= last
            assert is_flexible(key, version) is flexible, (ApiKey(key).name, version)
            assert request_header_version(key, version) == (2 if flexible else 1)
            expected = 0 if key == ApiKey.API_VERSIONS else (1 if flexible else 0)
            assert response_header_version(key, version) == expected
    assert not is_flexible(ApiKey.SASL_HANDSHAKE, 100)
    assert request_header_version(999, 5) == 1


# --- framing -----------------------------------------------------------------------------------


def test_request_header_v1() -> None:
    frame = kp_frame(MetadataRequest(version=8, topics=None), correlation_id=42, client_id="me")
    header, offset = parse_request_header(frame)
    assert header == RequestHeader(ApiKey.METADATA, 8, 42, "me")
    assert offset == 10 + len("me")


def test_request_header_v2_flexible() -> None:
    request = ApiVersionsRequest(version=3, client_software_name="sw", client_software_version="1")
    frame = kp_frame(request, correlation_id=9, client_id="cid")
    header, offset = parse_request_header(frame)
    assert header == RequestHeader(ApiKey.API_VERSIONS, 3, 9, "cid")
    assert frame[offset:] == b"\x03sw\x021\x00"  # the body: compact strings + tagged fields


def test_request_header_v2_with_tagged_fields() -> None:
    tagged = b"\x02" + b"\x00\x02hi" + b"\x05\x00"  # two tags: (0, b"hi"), (5, b"")
    frame = struct.pack(">hhih", ApiKey.METADATA, 12, 1, 1) + b"c" + tagged + b"BODY"
    header, offset = parse_request_header(frame)
    assert header == RequestHeader(ApiKey.METADATA, 12, 1, "c")
    assert frame[offset:] == b"BODY"


def test_request_header_null_client_id() -> None:
    frame = kp_frame(MetadataRequest(version=1, topics=None), correlation_id=3, client_id=None)
    header, offset = parse_request_header(frame)
    assert header == RequestHeader(ApiKey.METADATA, 1, 3, None)
    assert offset == 10


def test_request_header_unknown_api_key_parses_as_v1() -> None:
    frame = struct.pack(">hhih", 999, 7, 5, 2) + b"id" + b"\x00rest"
    header, offset = parse_request_header(frame)
    assert header == RequestHeader(999, 7, 5, "id")
    assert offset == 12


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x03\x00\x01\x00",  # shorter than the fixed header
        struct.pack(">hhih", 3, 1, 1, 10) + b"abc",  # client_id past the end
        struct.pack(">hhih", 3, 12, 1, -1) + b"\x01\x00",  # tagged field past the end
    ],
)
def test_request_header_rejects_truncated(frame: bytes) -> None:
    with pytest.raises(FrameError):
        parse_request_header(frame)


# --- codec: every advertised version -------------------------------------------------------


def all_advertised() -> Iterator[tuple[int, int]]:
    for key, (low, high) in ADVERTISED.items():
        for version in range(low, high + 1):
            yield key, version


@pytest.mark.parametrize(("api_key", "version"), list(all_advertised()))
def test_every_advertised_version_has_a_codec(api_key: int, version: int) -> None:
    """Each served version decodes a request encoded by an independent encoder
    (kafka-python's), and has a response class of its API, flexible where Kafka's is."""
    cls = response_class(api_key, version)
    assert cls.__api_key__ == api_key
    first, last = kp_request(api_key)._flexible_versions
    assert cls.__flexible__ is (first <= version <= last)
    header, request = decode(kp_frame(kp_request(api_key)(version=version)))
    assert (header.api_key, header.api_version) == (api_key, version)
    assert request.__api_key__ == api_key


def test_versions_without_a_schema_are_refused() -> None:
    """The codec refuses what it has no schema for; which versions are served is the
    handlers' decision, checked by the server before decoding (tests/test_api_table.py)."""
    header = RequestHeader(ApiKey.METADATA, 99, 1, None)
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(header, b"", 0)
    assert caught.value.code == ErrorCode.UNSUPPORTED_VERSION
    with pytest.raises(UnsupportedVersionError):
        response_class(ApiKey.METADATA, 99)
    with pytest.raises(UnsupportedVersionError):
        response_class(999, 0)


def test_trailing_bytes_are_ignored() -> None:
    frame = kp_frame(MetadataRequest(version=8, topics=None)) + b"\x00\x00\x00"
    _, request = decode(frame)
    assert request.topics is None


def test_truncated_body_is_an_invalid_request() -> None:
    frame = kp_frame(
        MetadataRequest(version=4, topics=[MetadataRequest.MetadataRequestTopic(name="abc")])
    )
    with pytest.raises(InvalidRequestError) as caught:
        decode(frame[:-3])
    assert caught.value.code == ErrorCode.INVALID_REQUEST


def test_encode_response_checks_the_class() -> None:
    wrong = response_class(ApiKey.METADATA, 7)
    response = build(wrong, throttle_time=timedelta(0), brokers=(), topics=())
    with pytest.raises(TypeError):
        answer(ApiKey.METADATA, 8, response)


# --- ApiVersions -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_api_versions_round_trip(version: int) -> None:
    header, request = decode(kp_frame(ApiVersionsRequest(version=version), correlation_id=11))
    assert header.api_version == version
    assert type(request).__name__ == "ApiVersionsRequest"

    cls = response_class(ApiKey.API_VERSIONS, version)
    api_version = nested(cls, "ApiVersion")
    response = build(
        cls,
        error_code=ErrorCode.NONE,
        api_keys=tuple(
            api_version(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in ADVERTISED.items()
        ),
        throttle_time=timedelta(milliseconds=5),
    )
    decoded = kp_decode(ApiVersionsResponse, version, answer(18, version, response, 11), 11)
    assert decoded.error_code == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys} == {
        (key, low, high) for key, (low, high) in ADVERTISED.items()
    }
    if version >= 1:
        assert decoded.throttle_time_ms == 5


def test_api_versions_error_is_v0_encoded() -> None:
    frame = encode_api_versions_error(77, ADVERTISED)
    # Clients that asked with v3 read the body as v0 when the error code is set.
    decoded = kp_decode(ApiVersionsResponse, 3, frame, 77)
    assert decoded.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert {(k.api_key, k.min_version, k.max_version) for k in decoded.api_keys} == {
        (key, low, high) for key, (low, high) in ADVERTISED.items()
    }
    assert frame[:8] == struct.pack(">ii", len(frame) - 4, 77)
    assert frame[8:10] == struct.pack(">h", 35)


# --- Metadata --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(9))
def test_metadata_request(version: int) -> None:
    topic = MetadataRequest.MetadataRequestTopic
    request = MetadataRequest(
        version=version,
        topics=[topic(name="orders"), topic(name="payments")],
        allow_auto_topic_creation=False,
        include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True,
    )
    header, decoded = decode(kp_frame(request, correlation_id=5, client_id="cli"))
    assert header == RequestHeader(3, version, 5, "cli")
    assert [t.name for t in decoded.topics] == ["orders", "payments"]
    if version >= 4:
        assert decoded.allow_auto_topic_creation is False
    if version >= 8:
        assert decoded.include_cluster_authorized_operations is True
        assert decoded.include_topic_authorized_operations is True


def metadata_response(version: int) -> Any:
    cls = response_class(ApiKey.METADATA, version)
    broker, topic, partition = (
        nested(cls, name)
        for name in ("MetadataResponseBroker", "MetadataResponseTopic", "MetadataResponsePartition")
    )
    partitions = tuple(
        build(
            partition,
            error_code=ErrorCode.NONE,
            partition_index=i,
            leader_id=1,
            leader_epoch=-1,
            replica_nodes=(1,),
            isr_nodes=(1,),
            offline_replicas=(),
        )
        for i in range(3)
    )
    return build(
        cls,
        throttle_time=timedelta(milliseconds=3),
        brokers=(build(broker, node_id=1, host="127.0.0.1", port=9092, rack=None),),
        cluster_id="sparklog",
        controller_id=1,
        topics=(
            build(
                topic,
                error_code=ErrorCode.NONE,
                name="orders",
                is_internal=False,
                partitions=partitions,
            ),
            build(
                topic,
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                name="missing",
                is_internal=False,
                partitions=(),
            ),
        ),
    )


@pytest.mark.parametrize("version", range(9))
def test_metadata_response(version: int) -> None:
    decoded = kp_decode(MetadataResponse, version, answer(3, version, metadata_response(version)))
    assert [(b.node_id, b.host, b.port) for b in decoded.brokers] == [(1, "127.0.0.1", 9092)]
    assert [t.name for t in decoded.topics] == ["orders", "missing"]
    assert [t.error_code for t in decoded.topics] == [0, 3]
    orders = decoded.topics[0]
    assert [
        (p.partition_index, p.leader_id, p.replica_nodes, p.isr_nodes) for p in orders.partitions
    ] == [(i, 1, [1], [1]) for i in range(3)]
    if version >= 1:
        assert decoded.controller_id == 1
        assert decoded.brokers[0].rack is None
    if version >= 2:
        assert decoded.cluster_id == "sparklog"
    if version >= 3:
        assert decoded.throttle_time_ms == 3
    if version >= 7:
        assert orders.partitions[0].leader_epoch == -1


# --- Produce -----------------------------------------------------------------------------------


def produce_request(version: int, records: bytes) -> Any:
    topic = ProduceRequest.TopicProduceData
    return ProduceRequest(
        version=version,
        transactional_id="txn" if version >= 3 else None,
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            topic(
                name="orders", partition_data=[topic.PartitionProduceData(index=2, records=records)]
            ),
            topic(name="empty", partition_data=[topic.PartitionProduceData(index=0, records=None)]),
        ],
    )


@pytest.mark.parametrize("version", range(9))
def test_produce_request_records_are_byte_exact(version: int) -> None:
    batch = record_batch(b"one", b"two", b"x" * 1000)
    header, decoded = decode(kp_frame(produce_request(version, batch)))
    assert header.api_version == version
    assert decoded.__version__ == max(version, 3)  # v0-v2 arrive as kio's v3 class
    assert decoded.transactional_id == ("txn" if version >= 3 else None)
    assert decoded.acks == -1
    assert decoded.timeout == timedelta(milliseconds=1500)
    orders, empty = decoded.topic_data
    assert orders.name == "orders"
    assert orders.partition_data[0].index == 2
    assert type(orders.partition_data[0].records) is bytes
    assert orders.partition_data[0].records == batch
    assert empty.partition_data[0].records is None


@pytest.mark.parametrize("version", range(9))
def test_produce_response(version: int) -> None:
    cls = response_class(ApiKey.PRODUCE, version)
    topic, partition = nested(cls, "TopicProduceResponse"), nested(cls, "PartitionProduceResponse")
    append_time = datetime.fromtimestamp(1_700_000_000.123, tz=UTC)
    response = build(
        cls,
        responses=(
            topic(
                name="orders",
                partition_responses=(
                    build(
                        partition,
                        index=2,
                        error_code=ErrorCode.NONE,
                        base_offset=1234,
                        log_append_time=append_time,
                        log_start_offset=17,
                        record_errors=(),
                        error_message=None,
                    ),
                ),
            ),
        ),
        throttle_time=timedelta(milliseconds=9),
    )
    decoded = kp_decode(ProduceResponse, version, answer(0, version, response))
    result = decoded.responses[0].partition_responses[0]
    assert decoded.responses[0].name == "orders"
    assert (result.index, result.error_code, result.base_offset) == (2, 0, 1234)
    if version >= 1:
        assert decoded.throttle_time_ms == 9
    if version >= 2:
        assert result.log_append_time_ms == 1_700_000_000_123
    if version >= 5:
        assert result.log_start_offset == 17


# --- ListOffsets -------------------------------------------------------------------------------


def list_offsets_request(
    version: int, timestamp: int, replica_id: int = -1, isolation: int = 0
) -> Any:
    topic = ListOffsetsRequest.ListOffsetsTopic
    return ListOffsetsRequest(
        version=version,
        replica_id=replica_id,
        isolation_level=isolation,
        topics=[
            topic(
                name="orders",
                partitions=[
                    topic.ListOffsetsPartition(
                        partition_index=p, current_leader_epoch=-1, timestamp=timestamp
                    )
                    for p in range(2)
                ],
            )
        ],
    )


@pytest.mark.parametrize("version", range(1, 6))
def test_list_offsets_request(version: int) -> None:
    _, decoded = decode(kp_frame(list_offsets_request(version, -2, isolation=1)))
    assert decoded.replica_id == -1
    assert [(p.partition_index, p.timestamp) for p in decoded.topics[0].partitions] == [
        (0, -2),
        (1, -2),
    ]
    if version >= 2:
        assert decoded.isolation_level == 1


def test_list_offsets_v0_request() -> None:
    # kafka-python's schema has no v0 (MaxNumOffsets was removed), so build it by hand.
    partition = struct.pack(">iqi", 4, -1, 1)  # partition_index, timestamp, max_num_offsets
    body = struct.pack(">ii", -1, 1) + b"\x00\x06orders" + struct.pack(">i", 1) + partition
    frame = struct.pack(">hhih", 2, 0, 1, -1) + body
    _, decoded = decode(frame)
    assert decoded.__version__ == 1
    assert decoded.topics[0].name == "orders"
    assert [(p.partition_index, p.timestamp) for p in decoded.topics[0].partitions] == [(4, -1)]


def list_offsets_response(version: int, offset: int) -> Any:
    cls = response_class(ApiKey.LIST_OFFSETS, version)
    topic, partition = (
        nested(cls, "ListOffsetsTopicResponse"),
        nested(cls, "ListOffsetsPartitionResponse"),
    )
    return build(
        cls,
        throttle_time=timedelta(0),
        topics=(
            topic(
                name="orders",
                partitions=(
                    build(
                        partition,
                        partition_index=0,
                        error_code=ErrorCode.NONE,
                        timestamp=-1,
                        offset=offset,
                        leader_epoch=-1,
                    ),
                ),
            ),
        ),
    )


@pytest.mark.parametrize("version", range(1, 6))
def test_list_offsets_response(version: int) -> None:
    decoded = kp_decode(
        ListOffsetsResponse, version, answer(2, version, list_offsets_response(version, 42))
    )
    result = decoded.topics[0].partitions[0]
    assert (result.partition_index, result.error_code) == (0, 0)
    assert (result.timestamp, result.offset) == (-1, 42)


def test_list_offsets_v0_response_has_old_style_offsets() -> None:
    frame = answer(2, 0, list_offsets_response(0, 42))
    body = frame[8:]
    partition = struct.pack(">ihiq", 0, 0, 1, 42)  # index, error, old_style_offsets [42]
    assert body == struct.pack(">i", 1) + b"\x00\x06orders" + struct.pack(">i", 1) + partition


# --- CreateTopics ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", range(5))
def test_create_topics_round_trip(version: int) -> None:
    topic = CreateTopicsRequest.CreatableTopic
    request = CreateTopicsRequest(
        version=version,
        topics=[
            topic(
                name="orders",
                num_partitions=3,
                replication_factor=1,
                assignments=[],
                configs=[topic.CreatableTopicConfig(name="cleanup.policy", value="compact")],
            )
        ],
        timeout_ms=30000,
        validate_only=True,
    )
    _, decoded = decode(kp_frame(request))
    created = decoded.topics[0]
    assert (created.name, created.num_partitions, created.replication_factor) == ("orders", 3, 1)
    assert [(c.name, c.value) for c in created.configs] == [("cleanup.policy", "compact")]
    assert decoded.timeout == timedelta(seconds=30)
    assert decoded.validate_only is (version >= 1)

    cls = response_class(ApiKey.CREATE_TOPICS, version)
    result = nested(cls, "CreatableTopicResult")
    response = build(
        cls,
        throttle_time=timedelta(milliseconds=1),
        topics=(
            build(result, name="orders", error_code=ErrorCode.NONE, error_message=None),
            build(
                result,
                name="dup",
                error_code=ErrorCode.TOPIC_ALREADY_EXISTS,
                error_message="exists",
            ),
        ),
    )
    answered = kp_decode(CreateTopicsResponse, version, answer(19, version, response))
    assert [(t.name, t.error_code) for t in answered.topics] == [("orders", 0), ("dup", 36)]
    if version >= 1:
        assert answered.topics[1].error_message == "exists"
    if version >= 2:
        assert answered.throttle_time_ms == 1


# --- legacy versions kio has no schema for -----------------------------------------------------


def test_offset_commit_v1_request() -> None:
    partition = struct.pack(">iqq", 0, 99, 1_700_000_000_000) + b"\x00\x02md"  # + commit_timestamp
    body = (
        b"\x00\x01g" + struct.pack(">i", 5) + b"\x00\x01m"  # group, generation, member
        + struct.pack(">i", 1) + b"\x00\x01t" + struct.pack(">i", 1) + partition
    )  # fmt: skip
    _, decoded = decode(struct.pack(">hhih", 8, 1, 1, -1) + body)
    assert decoded.__version__ == 2
    assert (decoded.group_id, decoded.generation_id_or_member_epoch, decoded.member_id) == (
        "g",
        5,
        "m",
    )
    committed = decoded.topics[0].partitions[0]
    assert (
        committed.partition_index,
        committed.committed_offset,
        committed.committed_metadata,
    ) == (0, 99, "md")


def test_describe_configs_v0_response() -> None:
    cls = response_class(ApiKey.DESCRIBE_CONFIGS, 0)
    result, entry = (
        nested(cls, "DescribeConfigsResult"),
        nested(cls, "DescribeConfigsResourceResult"),
    )
    response = cls(
        throttle_time=timedelta(0),
        results=(
            result(
                error_code=ErrorCode.NONE,
                error_message=None,
                resource_type=2,
                resource_name="t",
                configs=(
                    entry(
                        name="a",
                        value="1",
                        read_only=False,
                        config_source=5,
                        is_sensitive=False,
                        synonyms=(),
                    ),
                    entry(
                        name="b",
                        value=None,
                        read_only=True,
                        config_source=1,
                        is_sensitive=True,
                        synonyms=(),
                    ),
                ),
            ),
        ),
    )
    body = answer(32, 0, response)[8:]
    head = struct.pack(">iihhb", 0, 1, 0, -1, 2) + b"\x00\x01t" + struct.pack(">i", 2)
    entries = b"\x00\x01a\x00\x011" + bytes([0, 1, 0]) + b"\x00\x01b\xff\xff" + bytes([1, 0, 1])
    assert body == head + entries  # name, value, read_only, is_default, is_sensitive


# --- Fetch -------------------------------------------------------------------------------------


@pytest.fixture
def segment() -> Iterator[tuple[int, bytes, int]]:
    """An open file holding junk, then a record batch at a known position."""
    batch = record_batch(b"alpha", b"beta")
    with tempfile.TemporaryFile() as file:
        file.write(b"junk" * 10 + batch + b"tail")
        file.flush()
        yield file.fileno(), batch, 40


def materialise(parts: list[bytes | FileRegion]) -> bytes:
    out = bytearray()
    for part in parts:
        if isinstance(part, FileRegion):
            out += os.pread(part.fd, part.length, part.position)
        else:
            assert type(part) is bytes
            out += part
    return bytes(out)


@pytest.mark.parametrize("version", range(19))
def test_fetch_response(version: int, segment: tuple[int, bytes, int]) -> None:
    fd, batch, position = segment
    inline = record_batch(b"inline")
    ids = uuid.uuid4(), uuid.uuid4()
    topics = [
        FetchTopic(
            "orders",
            [
                FetchPartition(0, 0, 100, 90, 10, FileRegion(fd, position, len(batch))),
                FetchPartition(1, 0, 5, 5, 0, inline),
                FetchPartition(2, ErrorCode.OFFSET_OUT_OF_RANGE, 7, 7, 3, None),
                FetchPartition(3, ErrorCode.NOT_LEADER_OR_FOLLOWER, current_leader=(2, 9)),
            ],
            ids[0],
        ),
        FetchTopic("empty", [], ids[1]),
    ]
    leaders = [NodeEndpoint(2, "broker-2.example", 9093, "rack-b")]
    parts = encode_fetch_response(31, version, FetchAnswer(topics, throttle_ms=12,
                                                           node_endpoints=leaders))
    assert type(parts[0]) is bytes
    assert any(isinstance(part, FileRegion) for part in parts)
    assert any(part is inline for part in parts)  # not copied
    decoded = kp_decode(FetchResponse, version, materialise(parts), 31)

    orders, empty = decoded.responses
    if version >= 13:
        assert (orders.topic_id, empty.topic_id, empty.partitions) == (*ids, [])
    else:
        assert (orders.topic, empty.topic, empty.partitions) == ("orders", "empty", [])
    moved = orders.partitions.pop()
    assert moved.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    if version >= 12:  # KIP-951's fields, tagged
        assert (moved.current_leader.leader_id, moved.current_leader.leader_epoch) == (2, 9)
    if version >= 16:
        (endpoint,) = decoded.node_endpoints
        assert (endpoint.node_id, endpoint.host, endpoint.port, endpoint.rack) == \
            (2, "broker-2.example", 9093, "rack-b")
    records = [bytes(p.records) if p.records is not None else None for p in orders.partitions]
    assert records == [batch, inline, b""]
    assert [p.high_watermark for p in orders.partitions] == [100, 5, 7]
    assert [p.error_code for p in orders.partitions] == [0, 0, 1]
    if version >= 1:
        assert decoded.throttle_time_ms == 12
    if version >= 4:
        assert [p.last_stable_offset for p in orders.partitions] == [90, 5, 7]
        assert [p.aborted_transactions for p in orders.partitions] == [[], [], []]
    if version >= 5:
        assert [p.log_start_offset for p in orders.partitions] == [10, 0, 3]
    if version >= 7:
        assert (decoded.error_code, decoded.session_id) == (0, 0)
    if version >= 11:
        assert [p.preferred_read_replica for p in orders.partitions] == [-1, -1, -1]


def test_fetch_response_aborted_transactions_and_session_error() -> None:
    topics = [FetchTopic("t", [FetchPartition(0, 0, 9, 4, 0, b"",
                                              aborted_transactions=[(1000, 3)])])]
    parts = encode_fetch_response(
        1, 7, FetchAnswer(topics, error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND))
    assert len(parts) == 1  # empty records add no part
    decoded = kp_decode(FetchResponse, 7, materialise(parts), 1)
    assert decoded.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    aborted = decoded.responses[0].partitions[0].aborted_transactions
    assert [(a.producer_id, a.first_offset) for a in aborted] == [(1000, 3)]


def test_fetch_response_rejects_versions_beyond_the_newest() -> None:
    with pytest.raises(ValueError):
        encode_fetch_response(1, 19, FetchAnswer([]))


# --- property tests --------------------------------------------------------------------------

int32s = st.integers(-(2**31), 2**31 - 1)
int64s = st.integers(-(2**63), 2**63 - 1)
names = st.text(min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    version=st.integers(1, 5),
    replica_id=int32s,
    isolation=st.integers(0, 1),
    topics=st.lists(st.tuples(names, st.lists(st.tuples(int32s, int64s), max_size=4)), max_size=4),
    correlation_id=int32s,
    client_id=st.none() | st.text(max_size=20),
)
def test_list_offsets_request_property(
    version: int,
    replica_id: int,
    isolation: int,
    topics: list[tuple[str, list[tuple[int, int]]]],
    correlation_id: int,
    client_id: str | None,
) -> None:
    topic = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        version=version,
        replica_id=replica_id,
        isolation_level=isolation,
        topics=[
            topic(
                name=name,
                partitions=[
                    topic.ListOffsetsPartition(
                        partition_index=p, current_leader_epoch=-1, timestamp=ts
                    )
                    for p, ts in partitions
                ],
            )
            for name, partitions in topics
        ],
    )
    header, decoded = decode(kp_frame(request, correlation_id, client_id))
    assert header == RequestHeader(ApiKey.LIST_OFFSETS, version, correlation_id, client_id)
    assert decoded.replica_id == replica_id
    assert [
        (t.name, [(p.partition_index, p.timestamp) for p in t.partitions]) for t in decoded.topics
    ] == topics
    if version >= 2:
        assert decoded.isolation_level == isolation


@settings(max_examples=100, deadline=None)
@given(
    version=st.integers(0, 8),
    topics=st.lists(names, max_size=5),
    auto_create=st.booleans(),
    trailing=st.binary(max_size=3),
)
def test_metadata_request_property(
    version: int, topics: list[str], auto_create: bool, trailing: bytes
) -> None:
    request = MetadataRequest(
        version=version,
        topics=[MetadataRequest.MetadataRequestTopic(name=name) for name in topics],
        allow_auto_topic_creation=auto_create,
    )
    _, decoded = decode(kp_frame(request) + trailing)
    assert [t.name for t in decoded.topics] == topics
    if version >= 4:
        assert decoded.allow_auto_topic_creation is auto_create


@settings(max_examples=300, deadline=None)
@given(
    api=st.sampled_from(list(all_advertised())),
    body=st.binary(max_size=64)
    | st.lists(st.sampled_from([b"\x00", b"\xff", b"\x01", b"\x80"])).map(b"".join),
)
def test_garbage_bodies_decode_or_raise_invalid_request(api: tuple[int, int], body: bytes) -> None:
    """Garbage is InvalidRequestError; a body that does decode gives what handlers rely on:
    the API's request entity, no null where the schema has a non-nullable array, and the
    same request whatever bytes follow it."""
    header = RequestHeader(api[0], api[1], 1, None)
    try:
        request = decode_request(header, body, 0)
    except InvalidRequestError:
        return
    assert request.__api_key__ == api[0]
    assert_no_null_arrays(request)
    assert decode_request(header, body + b"\xff" * 8, 0) == request


def assert_no_null_arrays(entity: Any) -> None:
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        annotation = f.type if isinstance(f.type, str) else repr(f.type)
        if annotation.startswith("tuple[") and "None" not in annotation:
            assert value is not None, f"{type(entity).__name__}.{f.name} is null"
        if isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    assert_no_null_arrays(item)
