"""TLS listeners (issue 15): every client over SSL and mutual TLS, a plaintext client on the
TLS port refused while TLS clients are served, and the start-up checks of the TLS settings."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_fixtures import (
    CLIENTS,
    CONSUMERS,
    PRODUCERS,
    TIMEOUT,
    RawConnection,
    numbered,
    produce_confluent,
    request_frame,
    unique_topic,
)
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from security_support import certificates, listeners_config, security

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.runner import StartupError

__all__ = ["certificates"]


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory: pytest.TempPathFactory, certificates: Path
               ) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("tls") / "data",
                        listeners_config(certificates)) as broker:
        yield broker


def _address(broker: EmbeddedBroker, listener: str) -> str:
    return f"127.0.0.1:{broker.listeners[listener]}"


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_every_client_produces_and_consumes_over_tls(
        tls_broker: EmbeddedBroker, certificates: Path, client: str, listener: str) -> None:
    topic = unique_topic(f"tls-{client}")
    settings = security(client, listener, certificates,
                        certificate="alice" if listener == "MTLS" else None)
    address = _address(tls_broker, listener)
    records = numbered(20, pad=1000)
    PRODUCERS[client](address, topic, records, **settings)
    got = CONSUMERS[client](address, topic, 20, **settings)
    assert [r.value for r in got] == [r.value for r in records]


def test_a_plaintext_client_on_the_tls_port_is_refused_and_others_are_served(
        tls_broker: EmbeddedBroker, certificates: Path) -> None:
    address = _address(tls_broker, "SSL")
    for _ in range(3):
        with RawConnection(address) as conn:  # an ApiVersions frame in the clear
            conn.send(request_frame(18, 0, 1))
            assert not conn.read_until_closed()
    topic = unique_topic("tls-served")
    acked = produce_confluent(address, topic, numbered(5),
                              **security("confluent", "SSL", certificates))
    assert len(acked) == 5
    with pytest.raises(KafkaException):  # librdkafka in the clear gets no metadata
        AdminClient({"bootstrap.servers": address}).list_topics(timeout=3)


def test_mutual_tls_refuses_a_client_without_a_certificate(
        tls_broker: EmbeddedBroker, certificates: Path) -> None:
    context = ssl.create_default_context(cafile=str(certificates / "ca.crt"))
    with socket.create_connection(("127.0.0.1", tls_broker.listeners["MTLS"]), TIMEOUT) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            # TLS 1.3 reports a missing client certificate after the handshake
            with pytest.raises((ssl.SSLError, ConnectionError)):
                conn.sendall(request_frame(18, 0, 1))
                assert conn.recv(4) == b""
                raise ConnectionError("closed without an answer")


def test_only_tls_1_2_and_newer_is_accepted(tls_broker: EmbeddedBroker,
                                            certificates: Path) -> None:
    context = ssl.create_default_context(cafile=str(certificates / "ca.crt"))
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with socket.create_connection(("127.0.0.1", tls_broker.listeners["SSL"]), TIMEOUT) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            assert conn.version() == "TLSv1.2"


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("ssl.keystore.location", "/nowhere/broker.pem", "listener SSL: ssl.keystore.location "
                                                     "/nowhere/broker.pem: cannot load"),
    ("ssl.keystore.type", "JKS", "only PEM stores are read"),
    ("ssl.client.auth", "sometimes", "expected required, requested or none"),
    ("ssl.enabled.protocols", "TLSv1,TLSv1.1", "TLSv1.2 or TLSv1.3 must be enabled"),
])
def test_a_bad_tls_setting_is_a_one_line_start_up_error_naming_it(
        tmp_path: Path, certificates: Path, setting: str, value: str, message: str) -> None:
    broker = EmbeddedBroker(tmp_path / "data", listeners_config(certificates, **{setting: value}))
    with pytest.raises(StartupError, match=message) as caught:
        broker.start()
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "data").exists()  # nothing touched before the check
