"""sparklog's own clients over TLS and SASL (issue 15): the source's protocol client, the
Spark source and sink, the group commits of a stream, and the CLI tools, with Kafka's client
security settings, against a broker whose ACLs limit what each principal may do."""

from __future__ import annotations

import contextlib
import io
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import TIMEOUT, numbered, produce_confluent
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from security_support import certificates, listeners_config, security

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.cli import main as sparklog_main
from sparklog.client.cluster import TopicPartition as Partition
from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, KafkaClient
from sparklog.client.settings import ClientConfig, ClientSecurity, RetryPolicy, parse_bootstrap
from sparklog.datasource import register

__all__ = ["certificates"]

pytestmark = [pytest.mark.timeout(300)]
AUTHORIZED = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "super.users": "User:admin", "group.initial.rebalance.delay.ms": "0",
              "offsets.topic.num.partitions": "3"}
RETRY = RetryPolicy(timeout_s=10, backoff_s=0.1)
READER, READER_PASSWORD = "reader", "reader-secret"


def cli(broker: EmbeddedBroker, certs: Path, *argv: str) -> tuple[int, str]:
    """``sparklog ARGV`` as the super user ``admin`` on the SASL_PLAINTEXT listener."""
    settings = [f"{k}={v}" for k, v in
                security("confluent", "SASL_PLAINTEXT", certs, user="admin").items()]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = sparklog_main([*argv, "--bootstrap-server", _address(broker, "SASL_PLAINTEXT"),
                              "-X", *settings])
    return code, out.getvalue()


def _address(broker: EmbeddedBroker, listener: str) -> str:
    return f"127.0.0.1:{broker.listeners[listener]}"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, certificates: Path
            ) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("clients") / "data",
                        listeners_config(certificates, **AUTHORIZED)) as broker:
        assert cli(broker, certificates, "users", "add", READER, "--password",
                   READER_PASSWORD)[0] == 0
        yield broker


def _topic(broker: EmbeddedBroker, certs: Path, records: int, partitions: int = 2) -> str:
    name = f"secure-{uuid.uuid4().hex[:8]}"
    admin_settings = security("confluent", "SASL_PLAINTEXT", certs, user="admin")
    admin = AdminClient({"bootstrap.servers": _address(broker, "SASL_PLAINTEXT"),
                         **admin_settings})
    admin.create_topics([NewTopic(name, partitions)])[name].result(TIMEOUT)
    if records:
        produce_confluent(_address(broker, "SASL_PLAINTEXT"), name,
                          numbered(records, key_count=7), **admin_settings)
    return name


def _reader_options(broker: EmbeddedBroker, certs: Path) -> dict[str, str]:
    """The Spark source's options for ``reader`` over SASL_SSL, in Java's names."""
    return {"kafka.bootstrap.servers": _address(broker, "SASL_SSL"),
            "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
            "kafka.sasl.jaas.config":
                "org.apache.kafka.common.security.scram.ScramLoginModule required "
                f'username="{READER}" password="{READER_PASSWORD}";',
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": str(certs / "ca.crt")}


@pytest.mark.parametrize(("listener", "mechanism"), [
    ("SASL_SSL", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_PLAINTEXT", "PLAIN")])
def test_the_protocol_client_reads_over_sasl(secured: EmbeddedBroker, certificates: Path,
                                             listener: str, mechanism: str) -> None:
    topic = _topic(secured, certificates, 20, partitions=1)
    cli(secured, certificates, "acls", "add", "--allow-principal", "User:alice",
        "--operation", "Read", "--topic", topic)
    cli(secured, certificates, "users", "add", "alice", "--password", "alice-secret")
    settings = {"security.protocol": listener, "sasl.mechanism": mechanism,
                "sasl.username": "alice", "sasl.password": "alice-secret",
                "ssl.ca.location": str(certificates / "ca.crt")}
    config = ClientConfig(parse_bootstrap(_address(secured, listener)),
                          security=ClientSecurity.from_settings(settings))
    with KafkaClient(config, RETRY) as client:
        assert topic in client.metadata([topic]).topics
        partition = Partition(topic, 0)
        (start,) = client.list_offsets({partition: EARLIEST_TIMESTAMP}).values()
        (end,) = client.list_offsets({partition: LATEST_TIMESTAMP}).values()
        assert (start, end) == (0, 20)
        assert client.fetch(partition, 0, 1 << 20).records


def test_the_protocol_client_is_refused_a_wrong_password(secured: EmbeddedBroker,
                                                         certificates: Path) -> None:
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": READER, "sasl.password": "wrong",
                "ssl.ca.location": str(certificates / "ca.crt")}
    config = ClientConfig(parse_bootstrap(_address(secured, "SASL_SSL")),
                          security=ClientSecurity.from_settings(settings))
    with KafkaClient(config, RETRY) as client, \
            pytest.raises(KafkaClientError, match="SASL_AUTHENTICATION_FAILED"):
        client.metadata(None)


def test_mutual_tls_with_the_protocol_client(secured: EmbeddedBroker, certificates: Path) -> None:
    topic = _topic(secured, certificates, 3, partitions=1)
    cli(secured, certificates, "acls", "add", "--allow-principal", "User:CN=bob",
        "--operation", "Describe", "--topic", topic)
    settings = {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(certificates / "bob.pem"),
                "ssl.truststore.location": str(certificates / "ca.crt")}
    config = ClientConfig(parse_bootstrap(_address(secured, "MTLS")),
                          security=ClientSecurity.from_settings(settings))
    with KafkaClient(config, RETRY) as client:
        assert list(client.metadata(None).topics) == [topic]  # only what CN=bob may see


def _admin_consumer(broker: EmbeddedBroker, certs: Path, group: str) -> Consumer:
    return Consumer({"bootstrap.servers": _address(broker, "SASL_PLAINTEXT"), "group.id": group,
                     **security("confluent", "SASL_PLAINTEXT", certs, user="admin")})


def _committed(broker: EmbeddedBroker, certs: Path, group: str, topic: str) -> dict[int, int]:
    consumer = _admin_consumer(broker, certs, group)
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(2)], TIMEOUT)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def _log_end(broker: EmbeddedBroker, certs: Path, topic: str) -> dict[int, int]:
    consumer = _admin_consumer(broker, certs, "log-end")
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), TIMEOUT)[1]
                for p in range(2)}
    finally:
        consumer.close()


@pytest.mark.spark
def test_a_spark_stream_over_sasl_ssl_reads_its_topic_and_commits_its_group(
        spark: Any, secured: EmbeddedBroker, certificates: Path, tmp_path: Path) -> None:
    """``reader`` may only read its topic and commit its group: the stream reads every
    record and its group's offsets reach the log end; another topic is refused."""
    register(spark)
    topic, group = _topic(secured, certificates, 40), f"readers-{uuid.uuid4().hex[:6]}"
    cli(secured, certificates, "acls", "add", "--consumer", "--allow-principal",
        f"User:{READER}", "--topic", topic, "--group", group)
    reader = spark.readStream.format("sparklog")
    for key, value in _reader_options(secured, certificates).items():
        reader = reader.option(key, value)
    query = (reader.option("subscribe", topic).option("startingOffsets", "earliest")
             .option("groupId", group).load()
             .writeStream.format("memory").queryName(f"q{uuid.uuid4().hex[:6]}")
             .trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    query.awaitTermination(120)
    assert query.exception() is None
    assert spark.sql(f"select count(*) from {query.name}").first()[0] == 40
    deadline, end = time.monotonic() + 30, _log_end(secured, certificates, topic)
    while _committed(secured, certificates, group, topic) != end:
        assert time.monotonic() < deadline, _committed(secured, certificates, group, topic)
        time.sleep(0.3)
    other = _topic(secured, certificates, 1)
    batch = spark.read.format("sparklog")
    for key, value in _reader_options(secured, certificates).items():
        batch = batch.option(key, value)
    with pytest.raises(Exception, match=r"TOPIC_AUTHORIZATION_FAILED"):
        batch.option("subscribe", other).load().count()


@pytest.mark.spark
def test_the_spark_sink_writes_over_sasl_ssl(spark: Any, secured: EmbeddedBroker,
                                             certificates: Path) -> None:
    topic = _topic(secured, certificates, 0)
    cli(secured, certificates, "acls", "add", "--producer", "--allow-principal",
        f"User:{READER}", "--topic", topic)
    writer = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(10)],
                                   "key string, value string").write.format("sparklog")
    for key, value in _reader_options(secured, certificates).items():
        writer = writer.option(key, value)
    writer.option("topic", topic).mode("append").save()
    assert sum(_log_end(secured, certificates, topic).values()) == 10


def test_the_transactions_tool_and_a_kafka_client_properties_file(
        secured: EmbeddedBroker, certificates: Path, tmp_path: Path) -> None:
    properties = tmp_path / "client.properties"
    properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{READER}" password="{READER_PASSWORD}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={certificates / 'ca.crt'}\n")
    topic = _topic(secured, certificates, 0)
    cli(secured, certificates, "acls", "add", "--allow-principal", f"User:{READER}",
        "--operation", "Describe", "--topic", topic)
    for argv in (["topics", "list"], ["transactions", "list"]):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert sparklog_main([*argv, "--bootstrap-server", _address(secured, "SASL_SSL"),
                                  "--command-config", str(properties)]) == 0
        if argv[0] == "topics":
            assert topic in out.getvalue().split()
