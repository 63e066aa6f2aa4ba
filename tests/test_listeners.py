"""Where clients are told to connect: ``advertised.listeners`` with its host AND port (the
Docker and NAT set-ups, where the published port differs from the bound one), per listener
when there are several, and the checks of the listener settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from broker_fixtures import (
    RawConnection,
    consume_confluent,
    create_topic,
    numbered,
    produce_confluent,
    unique_topic,
)
from kafka.protocol.metadata import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)

from sparklog.broker.config import BrokerConfig
from sparklog.broker.embedded import EmbeddedBroker
from sparklog.errors import InvalidConfigError


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


TWO_LISTENERS = {
    "listeners": "INTERNAL://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
    # the internal name is unreachable from here: a client that is told it fails
    "advertised.listeners": "INTERNAL://broker.invalid:19092,EXTERNAL://127.0.0.1:0",
    "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT",
}


def _coordinator(bootstrap: str) -> tuple[str, int]:
    with RawConnection(bootstrap) as conn:
        response = conn.call(FindCoordinatorRequest(version=2, key="g", key_type=0),
                             FindCoordinatorResponse)
    return response.host, response.port


def test_each_listener_advertises_its_own_address(tmp_path: Path) -> None:
    """As Kafka images run it: one listener for the containers' network, one published to
    the host; a client is told the address of the listener it came in through."""
    with EmbeddedBroker(tmp_path / "data", TWO_LISTENERS) as broker:
        ports = broker.listeners
        assert list(ports) == ["INTERNAL", "EXTERNAL"] and ports["INTERNAL"] == broker.port
        external = f"127.0.0.1:{ports['EXTERNAL']}"
        assert _advertised(broker.bootstrap) == [("broker.invalid", 19092)]
        assert _coordinator(broker.bootstrap) == ("broker.invalid", 19092)
        assert _advertised(external) == [("127.0.0.1", ports["EXTERNAL"])]
        assert _coordinator(external) == ("127.0.0.1", ports["EXTERNAL"])
        # a real client bootstrapped on the external listener produces and consumes there
        topic = create_topic(external, unique_topic("two-listeners"))
        produce_confluent(external, topic, numbered(5))
        assert [r.value for r in consume_confluent(external, topic, 5)] == \
            [r.value for r in numbered(5)]


@pytest.mark.parametrize(("config", "message"), [
    ({"listeners": "0.0.0.0:9092"}, "invalid value '0.0.0.0:9092' for broker config listeners"),
    ({"listeners": "A://h:1,A://h:2"}, "a listener named twice"),
    ({"advertised.listeners": "EXTERNAL://h:1"},
     "advertised.listeners names EXTERNAL, not one of listeners (PLAINTEXT)"),
    ({"listeners": "EXTERNAL://h:1"},
     "listener EXTERNAL has no security protocol in listener.security.protocol.map"),
    ({"listeners": "SSL://h:1"}, "listener SSL: ssl.keystore.location is not set"),
    ({"listeners": "K://h:1", "listener.security.protocol.map": "K:KERBEROS"},
     "listener K maps to 'KERBEROS' in listener.security.protocol.map: expected one of "
     "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"listeners": "S://h:1", "listener.security.protocol.map": "S:SASL_PLAINTEXT",
      "sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI is not served"),
    ({"listeners": "S://h:1", "listener.security.protocol.map": "S:SASL_PLAINTEXT",
      "listener.name.s.sasl.enabled.mechanisms": "PLAIN"},
     "listener S enables SASL PLAIN but has no users"),
])
def test_listener_settings_are_checked_at_start_up(config: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=re.escape(message)):
        BrokerConfig(config)
