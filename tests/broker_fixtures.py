"""Shared fixtures and helpers of the broker integration tests (``tests/test_broker_*.py``).

Everything here drives a real broker (``BrokerProcess``, a child process on 127.0.0.1) with
real clients; nothing is mocked.

- ``broker``: one running broker per test module (module scope); at teardown it must still
  be alive, its log must hold no internal error (an unhandled exception in a handler), and
  it must exit 0 on SIGTERM.
  ``fresh_broker`` starts a private one for tests that stop, kill or restart it.
- ``embedded``: a broker on a thread of the test process (``EmbeddedBroker``, module scope)
  whose fault hooks a test arms (``embedded.faults.add(Fault(...))``); faults left by a test
  are cleared after it. Same real TCP and clients, no process start.
- ``topic``: a unique topic name per test, so tests sharing a broker never see each other.
- ``Rec`` is one record as every client sees it; ``PRODUCERS`` and ``CONSUMERS`` map a client
  name (``confluent``, ``kafka-python``, ``aiokafka``) to a function producing or consuming
  ``Rec`` lists, so a test can be parametrised over clients without repeating client code.
  Consumers use ``assign()`` and commit nothing, so no group coordinator is involved.
- ``RawConnection`` and the ``*_request`` helpers speak the wire protocol directly, for
  requests no client would send (retried batches, corrupt CRCs, garbage frames), or
  pipelined where clients would need many connections (``init_producer_ids``).
- ``zookeeper`` is one throwaway ZooKeeper per test module (module scope); ``Cluster``
  starts broker processes of one cluster under a chroot of their own (so tests of a module
  share the server, not the cluster) and reads its metadata with real clients;
  ``paused`` freezes processes (a broker, the ZooKeeper server) for a block.
- ``BackgroundProducer`` keeps a confluent-kafka producer writing numbered records in a
  thread while a test misbehaves on another connection, then checks every record arrived.

Import the fixtures explicitly into each test module (``from broker_fixtures import broker,
topic``): ``tests/conftest.py`` belongs to other suites.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import os
import pkgutil
import re
import signal
import socket
import struct
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import kafka.protocol
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder
from kazoo.client import KazooClient
from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema
from prometheus_client.parser import text_string_to_metric_families

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.process import BrokerProcess
from sparklog.cluster.zookeeper_server import ZooKeeperServer
from sparklog.protocol.versions import ApiKey
from sparklog.record.batch import BatchHeader, split_batches

TIMEOUT = 20.0
"""Seconds any single client operation may take before a test gives up."""
CLIENT_ID = "sparklog-tests"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CLIENTS = ("confluent", "kafka-python", "aiokafka")

Header = tuple[str, bytes | None]


# -- brokers and topics ---------------------------------------------------------------------


def start_broker(directory: Path, config: dict[str, str] | None = None) -> BrokerProcess:
    return BrokerProcess(directory / "data", config or {}).start()


def internal_errors(broker: BrokerProcess) -> list[str]:
    """Lines of the broker log that report an unhandled exception."""
    if not broker.log_file.exists():
        return []
    return [line for line in broker.log_file.read_text().splitlines()
            if "Traceback" in line or "internal error" in line]


def _first_error(broker: BrokerProcess) -> str:
    """The broker log around its first unhandled exception."""
    text = broker.log_file.read_text()
    first = min((text.find(mark) for mark in ("Traceback", "internal error") if mark in text),
                default=len(text))
    return text[max(first - 1000, 0):first + 3000]


def assert_healthy(broker: BrokerProcess) -> None:
    """The broker process is alive and has logged no unhandled exception."""
    assert broker.running, f"broker exited; log:\n{broker.log_file.read_text()[-3000:]}"
    assert internal_errors(broker) == [], _first_error(broker)


def _stop_checked(broker: BrokerProcess) -> None:
    """Stop a broker a fixture started: it must have lived until now, logged no internal
    error, and exit 0 on SIGTERM (a clean shutdown)."""
    alive = broker.running
    errors = internal_errors(broker)
    code = broker.stop()
    assert alive, f"the broker died during the module; log:\n{broker.log_file.read_text()[-3000:]}"
    assert errors == [], _first_error(broker)
    assert code == 0, f"exit code {code}; log:\n{broker.log_file.read_text()[-3000:]}"


def module_broker(config: dict[str, str] | None = None) -> Any:
    """A module-scoped ``broker`` fixture started with ``config`` (broker properties)."""

    @pytest.fixture(scope="module", name="broker")
    def broker_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
        proc = start_broker(tmp_path_factory.mktemp("broker"), config)
        yield proc
        _stop_checked(proc)

    return broker_fixture


broker = module_broker()
"""One broker for the whole test module, with default settings."""


def private_broker(config: dict[str, str] | None = None) -> Any:
    """A ``fresh_broker`` fixture: a broker of one test's own, started with ``config`` (for
    tests that stop, kill or restart it)."""

    @pytest.fixture(name="fresh_broker")
    def fresh_broker_fixture(tmp_path: Path) -> Iterator[BrokerProcess]:
        proc = start_broker(tmp_path, config)
        yield proc
        if proc.running:  # a test may have stopped or killed it for good
            _stop_checked(proc)
        assert internal_errors(proc) == [], proc.log_file.read_text()[-3000:]

    return fresh_broker_fixture


fresh_broker = private_broker()
"""A private broker with default settings."""


@pytest.fixture(scope="module")
def embedded_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("embedded") / "data") as proc:
        yield proc


@pytest.fixture
def embedded(embedded_module: EmbeddedBroker) -> Iterator[EmbeddedBroker]:
    """The module's in-process broker, with no fault armed when the test starts or ends."""
    embedded_module.faults.clear()
    yield embedded_module
    embedded_module.faults.clear()


def unique_topic(hint: str) -> str:
    clean = re.sub(r"[^a-zA-Z0-9._-]+", "-", hint).strip("-")[:60]
    return f"{clean}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses (not created: see ``create_topic``)."""
    return unique_topic(request.node.name)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000})


def create_topic(bootstrap: str, name: str, partitions: int = 1,
                 config: dict[str, str] | None = None, replication_factor: int = 1,
                 replicas: Sequence[Sequence[int]] | None = None) -> str:
    """Create ``name``; ``replicas`` assigns each partition's replicas by hand (the first
    is its preferred leader), in place of ``partitions`` and ``replication_factor``."""
    client = admin(bootstrap)  # keep a reference: the futures fail if the client is freed
    topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                     config=config or {}) if replicas is None else NewTopic(
        name, num_partitions=len(replicas), replica_assignment=[list(r) for r in replicas],
        config=config or {})
    futures = client.create_topics([topic], operation_timeout=10, request_timeout=TIMEOUT)
    futures[name].result(TIMEOUT)
    return name


def request_counts(broker: BrokerProcess) -> dict[tuple[str, int], float]:
    """Requests the broker answered so far, by (Kafka's API name, version), from its request
    metrics (a broker started with ``metrics.listener`` set)."""
    assert broker.metrics_url is not None, "the broker has no metrics.listener"
    with urllib.request.urlopen(broker.metrics_url + "metrics", timeout=TIMEOUT) as answer:
        text = answer.read().decode()
    return {(s.labels["request"], int(s.labels["version"])): s.value
            for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "kafka_network_requestmetrics_requests_total"}


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(log start offset, log end offset) as a client sees them (ListOffsets)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": CLIENT_ID})
    try:
        low, high = consumer.get_watermark_offsets(CkTopicPartition(topic, partition),
                                                   timeout=TIMEOUT)
        return low, high
    finally:
        consumer.close()


def stored_batches(broker: BrokerProcess, topic: str, partition: int = 0) -> list[BatchHeader]:
    """Every batch header in the partition's segment files, validated (framing and CRC)."""
    directory = broker.data_dir / f"{topic}-{partition}"
    headers: list[BatchHeader] = []
    for path in sorted(directory.glob("*.log")):
        headers.extend(split_batches(path.read_bytes()))
    return headers


def wait_until(condition: Callable[[], bool], timeout: float = TIMEOUT,
               message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message}")
        time.sleep(0.02)


# -- records and clients ----------------------------------------------------------------------


@dataclass(frozen=True)
class Rec:
    """One record. ``partition`` None lets the client choose; offset -1 = not yet known."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    partition: int | None = None
    offset: int = -1
    timestamp: int | None = None

    @property
    def content(self) -> tuple[bytes | None, bytes | None, tuple[Header, ...]]:
        return self.key, self.value, self.headers


def numbered(count: int, *, key_count: int = 0, pad: int = 0) -> list[Rec]:
    """Records ``b"0"``, ``b"1"``...; keyed ``k<i % key_count>`` when ``key_count``.

    ``pad`` appends that many compressible bytes to each value.
    """
    filler = b" lorem ipsum" * (pad // 12 + 1)
    return [Rec(f"k{i % key_count}".encode() if key_count else None,
                str(i).encode() + filler[:pad]) for i in range(count)]


def _headers(raw: Any) -> tuple[Header, ...]:
    return tuple((k, None if v is None else bytes(v)) for k, v in (raw or ()))


def _deadline_loop(count: int, timeout: float, got: list[Rec]) -> Iterator[None]:
    deadline = time.monotonic() + timeout
    while len(got) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"consumed {len(got)} of {count} records in {timeout}s")
        yield


def _sorted(records: list[Rec]) -> list[Rec]:
    """Consumed records ordered by (partition, offset) (order across partitions is free)."""
    return sorted(records, key=lambda r: (r.partition or 0, r.offset))


# confluent-kafka

def confluent_producer(bootstrap: str, **conf: Any) -> Producer:
    settings = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 15000,
                "client.id": CLIENT_ID}
    settings.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(settings)


def produce_confluent(bootstrap: str, topic: str, records: Sequence[Rec], **conf: Any) -> list[Rec]:
    """Produce and flush; returns the records with the partition and offset acknowledged."""
    producer = confluent_producer(bootstrap, **conf)
    acked: list[Rec | None] = [None] * len(records)
    errors: list[Any] = []

    def report(index: int) -> Callable[[Any, Message], None]:
        def on_delivery(err: Any, msg: Message) -> None:
            if err is not None:
                errors.append(err)
            else:
                acked[index] = replace(records[index], partition=msg.partition(),
                                       offset=msg.offset())
        return on_delivery

    for index, rec in enumerate(records):
        kwargs: dict[str, Any] = {"key": rec.key, "value": rec.value,
                                  "headers": list(rec.headers) or None,
                                  "on_delivery": report(index)}
        if rec.partition is not None:
            kwargs["partition"] = rec.partition
        if rec.timestamp is not None:
            kwargs["timestamp"] = rec.timestamp
        producer.produce(topic, **kwargs)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0, "records still queued after flush"
    assert errors == []
    return [r for r in acked if r is not None]


def produce_per_partition(bootstrap: str, topic: str, counts: Mapping[int, int]) -> None:
    """Produce ``numbered`` records to chosen partitions: partition -> how many."""
    produce_confluent(bootstrap, topic, [Rec(r.key, r.value, partition=partition)
                                         for partition, count in counts.items()
                                         for r in numbered(count)])


def confluent_consumer(bootstrap: str, **conf: Any) -> Consumer:
    settings = {"bootstrap.servers": bootstrap, "group.id": CLIENT_ID,
                "enable.auto.commit": False, "auto.offset.reset": "error",
                "fetch.wait.max.ms": 50, "client.id": CLIENT_ID}
    settings.update(conf)
    return Consumer(settings)


def committed_member(bootstrap: str, topic: str, group: str,
                     offsets: Mapping[int, int]) -> Consumer:
    """A live member of ``group`` subscribed to ``topic``, returned once it owns every
    partition of ``offsets`` and committed them (partition -> offset); the caller closes it."""
    consumer = confluent_consumer(bootstrap, **{"group.id": group,
                                                "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    wait_until(lambda: (consumer.poll(0.1), len(consumer.assignment()))[1] == len(offsets),
               message=f"the assignment of {group}")
    consumer.commit(offsets=[CkTopicPartition(topic, p, o) for p, o in offsets.items()],
                    asynchronous=False)
    return consumer


def _from_confluent(msg: Message) -> Rec:
    return Rec(msg.key(), msg.value(), _headers(msg.headers()), msg.partition(), msg.offset(),
               msg.timestamp()[1])


def consume_confluent(bootstrap: str, topic: str, count: int, partitions: Sequence[int] = (0,),
                      start: int = OFFSET_BEGINNING, timeout: float = TIMEOUT,
                      **conf: Any) -> list[Rec]:
    consumer = confluent_consumer(bootstrap, **conf)
    got: list[Rec] = []
    try:
        consumer.assign([CkTopicPartition(topic, p, start) for p in partitions])
        for _ in _deadline_loop(count, timeout, got):
            for msg in consumer.consume(count - len(got), timeout=0.5):
                if msg.error():
                    raise KafkaException(msg.error())
                got.append(_from_confluent(msg))
    finally:
        consumer.close()
    return _sorted(got)


# kafka-python

def produce_kafka_python(bootstrap: str, topic: str, records: Sequence[Rec],
                         **conf: Any) -> list[Rec]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=CLIENT_ID, linger_ms=5,
                             **conf)
    try:
        futures = [producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                 partition=r.partition, timestamp_ms=r.timestamp)
                   for r in records]
        producer.flush(TIMEOUT)
        metadata = [f.get(TIMEOUT) for f in futures]
    finally:
        producer.close(TIMEOUT)
    return [replace(r, partition=m.partition, offset=m.offset) for r, m in zip(records, metadata,
                                                                              strict=True)]


def consume_kafka_python(bootstrap: str, topic: str, count: int,
                         partitions: Sequence[int] = (0,), timeout: float = TIMEOUT,
                         **conf: Any) -> list[Rec]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=CLIENT_ID, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             **{"fetch_max_wait_ms": 50, **conf})
    got: list[Rec] = []
    try:
        consumer.assign([KpTopicPartition(topic, p) for p in partitions])
        consumer.seek_to_beginning()
        for _ in _deadline_loop(count, timeout, got):
            for messages in consumer.poll(timeout_ms=500).values():
                got.extend(Rec(m.key, m.value, _headers(m.headers), m.partition, m.offset,
                               m.timestamp) for m in messages)
    finally:
        consumer.close()
    return _sorted(got)


# aiokafka

def produce_aiokafka(bootstrap: str, topic: str, records: Sequence[Rec], **conf: Any) -> list[Rec]:
    async def run() -> list[Rec]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=CLIENT_ID,
                                    linger_ms=5, request_timeout_ms=int(TIMEOUT * 1000), **conf)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=r.key, value=r.value,
                                           headers=list(r.headers), partition=r.partition,
                                           timestamp_ms=r.timestamp) for r in records]
            metadata = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        return [r if m is None else replace(r, partition=m.partition, offset=m.offset)
                for r, m in zip(records, metadata, strict=True)]  # None: acks=0

    return asyncio.run(asyncio.wait_for(run(), TIMEOUT * 2))


def consume_aiokafka(bootstrap: str, topic: str, count: int, partitions: Sequence[int] = (0,),
                     timeout: float = TIMEOUT, **conf: Any) -> list[Rec]:
    async def run() -> list[Rec]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=CLIENT_ID,
                                    group_id=None, enable_auto_commit=False,
                                    auto_offset_reset="earliest",
                                    **{"fetch_max_wait_ms": 50, **conf})
        await consumer.start()
        got: list[Rec] = []
        try:
            consumer.assign([AioTopicPartition(topic, p) for p in partitions])
            await consumer.seek_to_beginning()
            for _ in _deadline_loop(count, timeout, got):
                batches = await consumer.getmany(timeout_ms=500)
                for messages in batches.values():
                    got.extend(Rec(m.key, m.value, _headers(m.headers), m.partition, m.offset,
                                   m.timestamp) for m in messages)
        finally:
            await consumer.stop()
        return got

    return _sorted(asyncio.run(run()))


Produce = Callable[..., list[Rec]]
Consume = Callable[..., list[Rec]]
PRODUCERS: dict[str, Produce] = {
    "confluent": produce_confluent, "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
}
CONSUMERS: dict[str, Consume] = {
    "confluent": consume_confluent, "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}
def compression_conf(client: str, codec: str) -> dict[str, Any]:
    """The producer keyword argument selecting ``codec`` for ``client``."""
    if client == "confluent":
        return {"compression.type": codec}
    return {"compression_type": None if codec == "none" else codec}


# -- the wire protocol, by hand -----------------------------------------------------------------

_SIZE = struct.Struct(">i")


def frame(payload: bytes) -> bytes:
    """``payload`` with its int32 size prefix."""
    return _SIZE.pack(len(payload)) + payload


def request_header(api_key: int, version: int, correlation_id: int,
                   client_id: bytes | None = CLIENT_ID.encode()) -> bytes:
    """Request header v1 (every version the broker advertises uses it)."""
    if client_id is None:
        return struct.pack(">hhih", api_key, version, correlation_id, -1)
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def request_frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    """A framed request: header v1, then ``body``."""
    return frame(request_header(api_key, version, correlation_id) + body)


class RawConnection:
    """A plain TCP connection to the broker: send bytes, read frames, see it being closed."""

    def __init__(self, bootstrap: str, timeout: float = 10.0) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self._correlation = 0

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next_correlation_id(self) -> int:
        self._correlation += 1
        return self._correlation

    def _read_exactly(self, size: int) -> bytes | None:
        chunks, left = [], size
        while left:
            chunk = self.sock.recv(left)
            if not chunk:
                return None
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def recv_frame(self) -> bytes:
        """The next response frame without its size prefix (raises at end of stream)."""
        prefix = self._read_exactly(4)
        assert prefix is not None, "the broker closed the connection"
        body = self._read_exactly(_SIZE.unpack(prefix)[0])
        assert body is not None, "the broker closed the connection inside a frame"
        return body

    def request(self, api_key: int, version: int, body: bytes) -> bytes:
        """Send one request and return its response after the correlation id."""
        correlation_id = self.next_correlation_id()
        self.send(request_frame(api_key, version, correlation_id, body))
        frame = self.recv_frame()
        assert _SIZE.unpack_from(frame)[0] == correlation_id
        return frame[4:]

    def send_message(self, request: ApiMessage) -> None:
        """Send a request built with kafka-python's protocol classes; do not wait."""
        request.with_header(correlation_id=self.next_correlation_id(), client_id=CLIENT_ID)
        self.send(bytes(request.encode(header=True, framed=True)))

    def call(self, request: ApiMessage, response_class: type[ApiMessage]) -> Any:
        """Send a kafka-python protocol request; decode its response with kafka-python."""
        self.send_message(request)
        return response_class.decode(self.recv_frame(), version=request.version, header=True)

    def read_until_closed(self, timeout: float = 5.0) -> bytes | None:
        """Everything the broker sends until it closes the connection; None if it does not
        close it within ``timeout``."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        received = b""
        try:
            while time.monotonic() < deadline:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return received
                received += chunk
        except (ConnectionResetError, BrokenPipeError):
            return received
        except TimeoutError:
            return None
        return None


@functools.cache
def _kp_requests() -> dict[int, type[ApiMessage]]:
    """kafka-python's request classes by API key, with ``kp_messages``' for the APIs it
    lacks (KIP-714's), built by its own machinery."""
    found: dict[int, type[ApiMessage]] = {}
    modules = [m.name for m in pkgutil.walk_packages(kafka.protocol.__path__, "kafka.protocol.")]
    for module in (*modules, "kp_messages"):
        for name, cls in vars(importlib.import_module(module)).items():
            if (isinstance(cls, type) and issubclass(cls, ApiMessage)
                    and name.endswith("Request") and hasattr(cls, "API_KEY")):
                found[cls.API_KEY] = cls
    return found


@functools.cache
def kio_versions(api_key: int) -> tuple[int, ...]:
    """The versions of ``api_key`` kio has a request schema for (Kafka 4's message JSON:
    what Kafka 4 serves, KIP-896 having dropped the oldest)."""
    found = []
    for version in range(64):
        try:
            load_request_schema(api_key, version)
        except (UnknownAPIKey, UnknownEntity):
            continue
        found.append(version)
    return tuple(found)


def kp_request(api_key: int) -> type[ApiMessage]:
    """kafka-python's request class of ``api_key``: an encoder independent of ours."""
    return _kp_requests()[api_key]


def kp_response(api_key: int) -> type[ApiMessage]:
    """kafka-python's response class of ``api_key`` (beside its request class)."""
    request = kp_request(api_key)
    module = importlib.import_module(request.__module__)
    return getattr(module, request.__name__.removesuffix("Request") + "Response")


def kp_build(cls: type[Any], version: int, values: dict[str, Any]) -> Any:
    """A kafka-python request (or nested struct) of ``values`` given as nested dicts."""
    converted: dict[str, Any] = {}
    for name, value in values.items():
        spec = next(f for f in cls._struct._fields if f.name == name)
        nested = spec.data_class or getattr(cls, spec.type_str, None) \
            if spec.is_struct_array() or spec.is_struct() else None
        if spec.is_struct_array() and value is not None:
            value = [kp_build(nested, version, v) for v in value]
        elif spec.is_struct() and isinstance(value, dict):
            value = kp_build(nested, version, value)
        converted[name] = value
    return cls(version=version, **converted)


def one_batch(value: bytes) -> bytes:
    """One record batch (magic 2, no producer id) holding one record of ``value``."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    builder.append(0, timestamp=None, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_request(topic: str, partition: int, records: bytes, *, acks: int = -1,
                    version: int = 3) -> ProduceRequest:
    """A Produce request (kafka-python's protocol classes) carrying one records blob."""
    return produce_request_to(topic, {partition: records}, acks=acks, version=version)


def metadata_v12_request(*topics: str | uuid.UUID, auto_create: bool = False
                         ) -> MetadataRequest:
    """Metadata v12 (flexible; leader epochs, topic ids) for ``topics`` (names, or ids
    asked for without a name), kafka-python's codec."""
    return MetadataRequest(
        version=12, topics=[MetadataRequest.MetadataRequestTopic(
            version=12, topic_id=t if isinstance(t, uuid.UUID) else None,
            name=None if isinstance(t, uuid.UUID) else t) for t in topics],
        allow_auto_topic_creation=auto_create, include_topic_authorized_operations=False)


def metadata_v12(bootstrap: str, *topics: str | uuid.UUID) -> Any:
    """``metadata_v12_request``'s answer from the first broker of ``bootstrap``."""
    with RawConnection(bootstrap.split(",")[0]) as conn:
        return conn.call(metadata_v12_request(*topics), MetadataResponse)


def produce_request_to(topic: str, blobs: Mapping[int, bytes | None], *, acks: int = -1,
                       version: int = 3) -> ProduceRequest:
    """A Produce request carrying a records blob for each of several partitions."""
    topic_data = ProduceRequest.TopicProduceData
    partition_data = topic_data.PartitionProduceData
    return ProduceRequest(version=version, transactional_id=None, acks=acks, timeout_ms=10000,
                          topic_data=[topic_data(name=topic, partition_data=[
                              partition_data(index=p, records=r) for p, r in blobs.items()])])


class ProduceResult(NamedTuple):
    error_code: int
    base_offset: int


def raw_produce_to(conn: RawConnection, topic: str,
                   blobs: Mapping[int, bytes | None]) -> dict[int, ProduceResult]:
    """Produce (acks=-1) to several partitions in one request: partition -> result."""
    response = conn.call(produce_request_to(topic, blobs), ProduceResponse)
    (topic_response,) = response.responses
    return {a.index: ProduceResult(a.error_code, a.base_offset)
            for a in topic_response.partition_responses}


def raw_produce(conn: RawConnection, topic: str, partition: int,
                records: bytes | None) -> ProduceResult:
    return raw_produce_to(conn, topic, {partition: records})[partition]


class FetchResult(NamedTuple):
    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes


def fetch_request(topic: str | uuid.UUID, partition: int, offset: int, *, max_wait_ms: int = 0,
                  min_bytes: int = 0, max_bytes: int = 1 << 20, version: int = 11
                  ) -> FetchRequest:
    """A Fetch (v11 unless told) of one partition (no fetch session, read_uncommitted);
    ``topic`` is an id from v13."""
    fetch_topic = FetchRequest.FetchTopic
    named = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"topic": topic}
    return FetchRequest(
        version=version, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes,
        max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
        forgotten_topics_data=[], topics=[fetch_topic(**named, partitions=[
            fetch_topic.FetchPartition(partition=partition, current_leader_epoch=-1,
                                       fetch_offset=offset, log_start_offset=-1,
                                       last_fetched_epoch=-1, partition_max_bytes=max_bytes)])])


def raw_fetch(conn: RawConnection, topic: str, partition: int, offset: int) -> FetchResult:
    """One Fetch of one partition, without waiting for data."""
    response = conn.call(fetch_request(topic, partition, offset), FetchResponse)
    (topic_response,) = response.responses
    (answer,) = topic_response.partitions
    return FetchResult(answer.error_code, answer.high_watermark, answer.log_start_offset,
                       bytes(answer.records or b""))


def init_producer_id_request() -> InitProducerIdRequest:
    """InitProducerId v0 without a transactional id: what an idempotent producer sends."""
    return InitProducerIdRequest(version=0, transactional_id=None,
                                 transaction_timeout_ms=60000)


def read_producer_id(conn: RawConnection) -> tuple[int, int]:
    """The (producer id, epoch) of the next InitProducerId answer on ``conn``."""
    response = InitProducerIdResponse.decode(conn.recv_frame(), version=0, header=True)
    assert response.error_code == 0, f"InitProducerId answered error {response.error_code}"
    return response.producer_id, response.producer_epoch


def init_producer_id(conn: RawConnection) -> tuple[int, int]:
    """A fresh (producer id, epoch) from InitProducerId, as an idempotent producer gets."""
    conn.send_message(init_producer_id_request())
    return read_producer_id(conn)


def init_producer_ids(conn: RawConnection, count: int, window: int = 100) -> list[int]:
    """``count`` fresh producer ids, in answer order, from InitProducerId requests sent
    ``window`` at a time before their answers are read (pipelined: many idempotent
    producers starting at once, at the cost of few round trips)."""
    ids: list[int] = []
    while len(ids) < count:
        batch = min(window, count - len(ids))
        for _ in range(batch):
            conn.send_message(init_producer_id_request())
        for _ in range(batch):
            pid, epoch = read_producer_id(conn)
            assert epoch == 0
            ids.append(pid)
    return ids


def elect_leaders_request(partitions: Sequence[tuple[str, int]], election: int = 0
                          ) -> ApiMessage:
    """ElectLeaders v1 (kafka-python's codec) of ``election`` (0 PREFERRED, 1 UNCLEAN) for
    ``partitions``."""
    request_class = kp_request(ApiKey.ELECT_LEADERS)
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return request_class(version=1, election_type=election, timeout_ms=10_000,
                         topic_partitions=[request_class.TopicPartitions(topic=t, partitions=p)
                                           for t, p in by_topic.items()])


def read_elect_leaders(conn: RawConnection) -> tuple[int, dict[tuple[str, int], int]]:
    """The next ElectLeaders v1 answer on ``conn``: (top-level error code, partition ->
    error code)."""
    answer = kp_response(ApiKey.ELECT_LEADERS).decode(conn.recv_frame(), version=1, header=True)
    return answer.error_code, {(r.topic, p.partition_id): p.error_code
                               for r in answer.replica_election_results
                               for p in r.partition_result}


def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """ApiVersions v0 response body: (error code, {api key: (min, max)})."""
    error_code, count = struct.unpack_from(">hi", body)
    versions = {}
    for index in range(count):
        key, low, high = struct.unpack_from(">hhh", body, 6 + 6 * index)
        versions[key] = (low, high)
    return error_code, versions


# -- a producer that keeps going while a test misbehaves elsewhere -----------------------------


class BackgroundProducer:
    """Produces numbered records with confluent-kafka in a thread, and reads them back in
    another, while the test does something else; ``stop_and_verify`` checks the outcome.
    ``replicas`` assigns the topic's one partition by hand (its first replica leads);
    ``producer_conf`` adds to (or overrides) the producer's settings.

    ``abort`` (for crash tests) drops whatever is unacknowledged instead of waiting for it.
    """

    def __init__(self, bootstrap: str, topic: str, *, consume: bool = True,
                 idempotent: bool = True, replication_factor: int = 1,
                 replicas: Sequence[int] | None = None,
                 producer_conf: Mapping[str, Any] | None = None) -> None:
        self.bootstrap = bootstrap
        self._producer_conf = dict(producer_conf or {})
        self.topic = topic
        self.replication_factor = replication_factor
        self._replicas = replicas
        self.acked: list[int] = []
        self.consumed: list[Rec] = []
        self.errors: list[str] = []
        self.sent = 0
        self._idempotent = idempotent
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._purge = False
        self._producer = threading.Thread(target=self._produce, daemon=True)
        self._consumer = threading.Thread(target=self._consume, daemon=True) if consume else None

    def start(self) -> BackgroundProducer:
        create_topic(self.bootstrap, self.topic, replication_factor=self.replication_factor,
                     replicas=None if self._replicas is None else [self._replicas])
        self._producer.start()
        if self._consumer is not None:
            self._consumer.start()
        self.wait_for_progress(20)
        return self

    def _produce(self) -> None:
        producer = confluent_producer(self.bootstrap, **{
            "linger.ms": 2, "acks": "all", "enable.idempotence": self._idempotent,
            **self._producer_conf})

        def on_delivery(err: Any, msg: Message) -> None:
            if err is None:
                self.acked.append(int(msg.value()))
            elif not self._purge:
                self.errors.append(str(err))

        while not self._stop_producing.is_set():
            producer.produce(self.topic, value=str(self.sent).encode(), on_delivery=on_delivery)
            self.sent += 1
            producer.poll(0.002)
        if self._purge:
            producer.purge()
            producer.flush(TIMEOUT)
        elif producer.flush(TIMEOUT):
            self.errors.append("records still queued after flush")

    def _consume(self) -> None:
        consumer = confluent_consumer(self.bootstrap)
        consumer.assign([CkTopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        give_up = float("inf")
        try:
            while not (self._stop_consuming.is_set() and len(self.consumed) >= self.sent):
                if self._purge:
                    break
                if self._stop_consuming.is_set():
                    give_up = min(give_up, time.monotonic() + TIMEOUT)
                    if time.monotonic() > give_up:
                        break
                for msg in consumer.consume(100, timeout=0.1):
                    if msg.error():
                        self.errors.append(str(msg.error()))
                    else:
                        self.consumed.append(_from_confluent(msg))
        finally:
            consumer.close()

    def wait_for_progress(self, records: int) -> None:
        """Wait until ``records`` more records were acknowledged (and consumed)."""
        acked, consumed = len(self.acked) + records, len(self.consumed) + records
        reading = self._consumer is not None
        wait_until(lambda: bool(self.errors) or (
            len(self.acked) >= acked and (not reading or len(self.consumed) >= consumed)),
            message=f"{records} more records produced and consumed")
        assert self.errors == [], self.errors

    @staticmethod
    def _stop(event: threading.Event, thread: threading.Thread) -> None:
        event.set()
        thread.join(TIMEOUT + 5)
        assert not thread.is_alive()

    def stop_and_verify(self) -> int:
        """Stop; every record was acknowledged and consumed exactly once, in order."""
        self._stop(self._stop_producing, self._producer)
        assert self.errors == []
        assert self.acked == list(range(self.sent))
        if self._consumer is not None:
            self._stop(self._stop_consuming, self._consumer)
            assert self.errors == []
            assert [int(r.value or b"-1") for r in self.consumed] == list(range(self.sent))
            assert [r.offset for r in self.consumed] == list(range(self.sent))
        return self.sent

    def abort(self) -> list[int]:
        """Stop without waiting for unacknowledged records; returns the acknowledged ones."""
        self._purge = True
        self._stop(self._stop_producing, self._producer)
        if self._consumer is not None:
            self._stop(self._stop_consuming, self._consumer)
        return list(self.acked)


# -- a ZooKeeper and a cluster of broker processes -----------------------------------------------


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One throwaway ZooKeeper per test module; each ``Cluster`` lives under its own chroot."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


CLUSTER_CONFIG = {"zookeeper.session.timeout.ms": "3000", "replica.lag.time.max.ms": "3000",
                  "default.replication.factor": "3", "min.insync.replicas": "2",
                  "num.partitions": "1", "offsets.topic.num.partitions": "1",
                  "transaction.state.log.num.partitions": "1"}
"""Broker settings of test clusters: short sessions, so failovers take seconds."""


class Cluster:
    """``size`` brokers (ids 0..size-1) of one cluster under chroot ``/<name>`` of
    ``zookeeper``; ``kill`` and ``start`` single brokers; ``stop`` checks each is healthy."""

    def __init__(self, zookeeper: ZooKeeperServer, directory: Path, name: str, size: int = 3,
                 config: Mapping[str, str] | None = None) -> None:
        self.connect = f"{zookeeper.connect}/{name}"
        self.brokers = [BrokerProcess(directory / f"broker-{i}", {
            **CLUSTER_CONFIG, **(config or {}), "broker.id": str(i),
            "zookeeper.connect": self.connect}) for i in range(size)]

    def start(self) -> Cluster:
        for broker in self.brokers:
            broker.start()
        wait_until(lambda: len(self.metadata().brokers) == len(self.brokers),
                   message="every broker registered")
        return self

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.running)

    def metadata(self, topic: str | None = None) -> Any:
        return admin(self.bootstrap).list_topics(topic, timeout=TIMEOUT)

    def partition(self, topic: str, partition: int = 0) -> Any:
        """The partition's metadata (leader, replicas, isrs) as a live broker tells it."""
        return self.metadata(topic).topics[topic].partitions[partition]

    def wait_for_isr(self, topic: str, isr: set[int], partition: int = 0) -> Any:
        wait_until(lambda: set(self.partition(topic, partition).isrs) == isr
                   and self.partition(topic, partition).leader in isr,
                   message=f"{topic}-{partition} to have the ISR {sorted(isr)}")
        return self.partition(topic, partition)

    def leader(self, topic: str, partition: int = 0) -> int:
        found = {}

        def elected() -> bool:
            found["leader"] = self.partition(topic, partition).leader
            return found["leader"] >= 0

        wait_until(elected, message=f"a leader for {topic}-{partition}")
        return found["leader"]

    def stop(self) -> None:
        """Stop every broker, then fail on the first that was not healthy (a broker left
        running would outlive the test session)."""
        failures = []
        for broker in self.brokers:
            if broker.running:
                try:
                    _stop_checked(broker)
                except AssertionError as failure:
                    failures.append(failure)
        if failures:
            raise failures[0]


def registry_serves(client: SchemaRegistryClient) -> bool:
    """Whether the registry answers (a cluster creates ``_schemas`` on its first request, and
    answers once it has a leader)."""
    try:
        client.get_subjects()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def running_cluster(zookeeper: ZooKeeperServer, directory: Path, name: str,
                    config: Mapping[str, str] | None = None) -> Iterator[Cluster]:
    """A started ``Cluster`` for the block, stopped (each broker checked) after it."""
    running = Cluster(zookeeper, directory, name, config=config)
    try:
        yield running.start()
    finally:
        running.stop()


@pytest.fixture
def own_cluster(zookeeper: ZooKeeperServer, tmp_path: Path,
                request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """A started three-broker cluster of the test's own (its chroot named after the test)."""
    with running_cluster(zookeeper, tmp_path, request.node.name) as running:
        yield running


class Process(Protocol):
    """A child process a test started (``BrokerProcess``, ``ZooKeeperServer``)."""

    @property
    def pid(self) -> int | None: ...


@contextlib.contextmanager
def paused(*processes: Process) -> Iterator[None]:
    """The processes frozen (SIGSTOP) for the block, as a long GC pause or a stalled
    machine freezes one, and continued (SIGCONT) after it, also when the block fails."""
    pids = [process.pid for process in processes]
    assert None not in pids, "a process to pause is not running"
    stopped: list[int] = []
    try:
        for pid in pids:
            assert pid is not None
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


@contextlib.contextmanager
def zk_client(cluster: Cluster) -> Iterator[KazooClient]:
    """A ZooKeeper client under the cluster's chroot, to read what the brokers wrote."""
    client = KazooClient(hosts=cluster.connect)
    client.start(timeout=TIMEOUT)
    try:
        yield client
    finally:
        client.stop()
        client.close()
