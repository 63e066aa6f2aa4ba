"""Where clients are told to connect: ``advertised.listeners`` with its host AND port (the
Docker and NAT set-ups, where the published port differs from the bound one)."""

from __future__ import annotations

from pathlib import Path

from broker_fixtures import RawConnection
from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from sparklog.broker.embedded import EmbeddedBroker


def _advertised(bootstrap: str) -> list[tuple[str, int]]:
    with RawConnection(bootstrap) as conn:
        response = conn.call(MetadataRequest(version=8, topics=None), MetadataResponse)
    return [(b.host, b.port) for b in response.brokers]


def test_advertised_listener_host_and_port_are_what_metadata_names(tmp_path: Path) -> None:
    config = {"advertised.listeners": "PLAINTEXT://broker.example.com:19092"}
    with EmbeddedBroker(tmp_path / "data", config) as broker:
        assert broker.port != 19092  # bound elsewhere, reached here through the bound port
        assert _advertised(broker.bootstrap) == [("broker.example.com", 19092)]


def test_without_advertised_listeners_the_bound_address_is_advertised(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data") as broker:
        assert _advertised(broker.bootstrap) == [("127.0.0.1", broker.port)]
