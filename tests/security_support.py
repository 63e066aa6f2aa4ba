"""Helpers of the security tests: a test CA made by ``sparklog certs``, a broker config with
one listener per security protocol, and each client's settings for each protocol.

- ``certificates``: a directory made once per test session with ``sparklog certs create``
  (CA, broker, and client certificates for ``alice`` and ``bob``).
- ``listeners_config(certs, **extra)``: listeners PLAINTEXT, SSL, MTLS (SSL with
  ``ssl.client.auth=required``), SASL_PLAINTEXT and SASL_SSL, all on port 0, with PLAIN users
  ``admin``/``alice``/``bob`` (password ``<name>-secret``).
- ``security(client, protocol, certs, ...)``: the keyword arguments confluent-kafka,
  kafka-python or aiokafka take for that protocol, in the form the ``PRODUCERS`` and
  ``CONSUMERS`` helpers of ``broker_fixtures`` pass on.
- ``sasl_raw(address, user)``: a ``RawConnection`` logged in with SASL/PLAIN.
- ``listener_broker``: a module's in-process broker with those listeners and the ``USERS``
  as SCRAM users too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka.helpers import create_ssl_context
from broker_fixtures import RawConnection, kp_request, kp_response

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.cli import main as sparklog_main
from sparklog.protocol.versions import ApiKey

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
PROTOCOL_MAP = ("PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                "SASL_SSL:SASL_SSL")


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    directory = tmp_path_factory.mktemp("certs")
    assert sparklog_main(["certs", "create", "--dir", str(directory), "--client", "alice",
                          "--client", "bob"]) == 0
    yield directory


@pytest.fixture(scope="module")
def listener_broker(tmp_path_factory: pytest.TempPathFactory, certificates: Path
                    ) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("listeners") / "data",
                        listeners_config(certificates)) as broker:
        plaintext = f"127.0.0.1:{broker.listeners['PLAINTEXT']}"
        for name, password in USERS.items():
            assert sparklog_main(["users", "add", name, "--password", password,
                                  "--bootstrap-server", plaintext]) == 0
        yield broker


def plain_jaas(users: dict[str, str]) -> str:
    entries = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    return ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="admin" password="admin-secret" {entries};')


def listeners_config(certs: Path, **extra: str) -> dict[str, str]:
    return {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in
                              ("PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")),
        "listener.security.protocol.map": PROTOCOL_MAP,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.crt"),
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas(USERS),
        **extra,
    }


def security(client: str, protocol: str, certs: Path, *, mechanism: str = "PLAIN",
             user: str | None = None, password: str | None = None,
             certificate: str | None = None) -> dict[str, Any]:
    """``client``'s settings to speak ``protocol`` (``MTLS`` is SSL with ``certificate``)."""
    tls = protocol in ("SSL", "MTLS", "SASL_SSL")
    sasl = protocol.startswith("SASL_")
    wire = "SSL" if protocol == "MTLS" else protocol
    if user is not None and password is None:
        password = USERS[user]
    if client == "confluent":
        conf: dict[str, Any] = {"security.protocol": wire}
        if tls:
            conf["ssl.ca.location"] = str(certs / "ca.crt")
        if certificate:
            conf["ssl.certificate.location"] = str(certs / f"{certificate}.crt")
            conf["ssl.key.location"] = str(certs / f"{certificate}.key")
        if sasl:
            conf.update({"sasl.mechanism": mechanism, "sasl.username": user,
                         "sasl.password": password})
        return conf
    conf = {"security_protocol": wire}
    if sasl:
        conf.update(sasl_mechanism=mechanism, sasl_plain_username=user,
                    sasl_plain_password=password)
    if client == "kafka-python":
        if tls:
            conf["ssl_cafile"] = str(certs / "ca.crt")
        if certificate:
            conf.update(ssl_certfile=str(certs / f"{certificate}.crt"),
                        ssl_keyfile=str(certs / f"{certificate}.key"))
        return conf
    if tls:
        conf["ssl_context"] = create_ssl_context(
            cafile=str(certs / "ca.crt"),
            certfile=str(certs / f"{certificate}.crt") if certificate else None,
            keyfile=str(certs / f"{certificate}.key") if certificate else None)
    return conf


def sasl_raw(address: str, user: str, password: str | None = None) -> RawConnection:
    """A raw connection logged in with SASL/PLAIN (SaslHandshake v1, SaslAuthenticate v1), for
    requests whose exact error codes a test checks."""
    conn = RawConnection(address)
    handshake = conn.call(kp_request(ApiKey.SASL_HANDSHAKE)(version=1, mechanism="PLAIN"),
                          kp_response(ApiKey.SASL_HANDSHAKE))
    assert handshake.error_code == 0
    token = f"\0{user}\0{password or USERS[user]}".encode()
    answer = conn.call(kp_request(ApiKey.SASL_AUTHENTICATE)(version=1, auth_bytes=token),
                       kp_response(ApiKey.SASL_AUTHENTICATE))
    assert answer.error_code == 0, answer
    return conn


def inter_broker_config(certs: Path, login: str) -> dict[str, str]:
    """Clients on a PLAINTEXT listener (CLIENT), replication on a SASL_SSL one (REPLICATION)
    where each broker logs in with PLAIN as ``login``; only ``User:broker`` is a super user
    among them."""
    jaas = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
            f'username="{login}" password="{login}-secret" user_broker="broker-secret" '
            'user_rogue="rogue-secret";')
    return {
        "listeners": "CLIENT://127.0.0.1:0,REPLICATION://127.0.0.1:0",
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:SASL_SSL",
        "inter.broker.listener.name": "REPLICATION",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "broker.pem"),
        "ssl.truststore.location": str(certs / "ca.crt"),
        "listener.name.replication.sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.replication.plain.sasl.jaas.config": jaas,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:ANONYMOUS",
    }
