"""SASL (issue 15): PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 over SASL_PLAINTEXT and SASL_SSL
with every client; refused logins (wrong password, unknown user) answered
SASL_AUTHENTICATION_FAILED while other clients are served; nothing but ApiVersions and the
SASL APIs before authenticating; SCRAM users managed with ``sparklog users`` (the SCRAM
credential APIs), kept salted across restarts; no secret in the broker's log."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_fixtures import (
    CLIENTS,
    CONSUMERS,
    PRODUCERS,
    RawConnection,
    kp_request,
    kp_response,
    numbered,
    produce_confluent,
    request_frame,
    unique_topic,
    wait_until,
)
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient
from security_support import USERS, certificates, listeners_config, security

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.process import BrokerProcess
from sparklog.broker.replication.inter_broker import (
    InterBrokerError,
    InterBrokerSecurity,
    LeaderConnection,
)
from sparklog.broker.security.scram_credentials import STORE_FILE
from sparklog.cli import main as sparklog_main
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

__all__ = ["certificates"]

SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def users(broker: EmbeddedBroker, *argv: str, stdin: str = "") -> tuple[int, str]:
    """``sparklog users ARGV`` against the broker's PLAINTEXT listener: exit code, stdout."""
    out = io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out):
            code = sparklog_main(["users", *argv, "--bootstrap-server", broker.bootstrap])
    finally:
        sys.stdin = saved
    return code, out.getvalue()


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory, certificates: Path
                ) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("sasl") / "data",
                        listeners_config(certificates)) as broker:
        for name, password in USERS.items():
            assert users(broker, "add", name, "--password", password)[0] == 0
        yield broker


def _address(broker: EmbeddedBroker, listener: str) -> str:
    return f"127.0.0.1:{broker.listeners[listener]}"


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_every_client_authenticates_with_every_mechanism(
        sasl_broker: EmbeddedBroker, certificates: Path, client: str, mechanism: str,
        listener: str) -> None:
    topic = unique_topic(f"sasl-{client}")
    settings = security(client, listener, certificates, mechanism=mechanism, user="alice")
    address = _address(sasl_broker, listener)
    records = numbered(10)
    PRODUCERS[client](address, topic, records, **settings)
    assert [r.value for r in CONSUMERS[client](address, topic, 10, **settings)] == \
        [r.value for r in records]


def _admin_fails(address: str, settings: dict[str, object]) -> str:
    """The error librdkafka reports when it cannot log in with ``settings``."""
    errors: list[KafkaError] = []
    admin = AdminClient({"bootstrap.servers": address, "error_cb": errors.append, **settings})
    wait_until(lambda: (admin.poll(0.1), any(
        e.code() == KafkaError._AUTHENTICATION for e in errors))[1],
        message="an authentication error")
    return next(e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)


@pytest.mark.parametrize("mechanism", ["PLAIN", *SCRAM])
def test_a_wrong_password_or_unknown_user_is_refused_and_others_are_served(
        sasl_broker: EmbeddedBroker, certificates: Path, mechanism: str,
        caplog: pytest.LogCaptureFixture) -> None:
    address = _address(sasl_broker, "SASL_SSL")
    caplog.set_level(logging.DEBUG)
    for user, password in (("alice", "wrong-secret"), ("mallory", "mallory-secret")):
        settings = security("confluent", "SASL_SSL", certificates, mechanism=mechanism,
                            user=user, password=password)
        assert "Authentication failed" in _admin_fails(address, settings)
        good = security("confluent", "SASL_SSL", certificates, mechanism=mechanism,
                        user="bob")
        assert len(produce_confluent(address, unique_topic("sasl-good"), numbered(2),
                                     **good)) == 2
    assert "failed authentication on listener SASL_SSL" in caplog.text
    for secret in ("wrong-secret", "mallory-secret", "alice-secret", "bob-secret"):
        assert secret not in caplog.text


def _handshake(conn: RawConnection, mechanism: str, version: int = 1) -> object:
    return conn.call(kp_request(ApiKey.SASL_HANDSHAKE)(version=version, mechanism=mechanism),
                     kp_response(ApiKey.SASL_HANDSHAKE))


def test_a_failed_login_gets_sasl_authentication_failed_then_the_connection_closes(
        sasl_broker: EmbeddedBroker) -> None:
    with RawConnection(_address(sasl_broker, "SASL_PLAINTEXT")) as conn:
        assert _handshake(conn, "PLAIN").error_code == ErrorCode.NONE
        answer = conn.call(kp_request(ApiKey.SASL_AUTHENTICATE)(
            version=1, auth_bytes=b"\0alice\0nope"), kp_response(ApiKey.SASL_AUTHENTICATE))
        assert answer.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
        assert "nope" not in answer.error_message
        assert conn.read_until_closed() == b""


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_sasl_authenticate_version_logs_in(sasl_broker: EmbeddedBroker,
                                                 version: int) -> None:
    """SaslAuthenticate v0-v2 (v2 flexible) log in; the session lifetime (v1+) is 0, as
    Kafka answers without ``connections.max.reauth.ms``; the connection then serves."""
    with RawConnection(_address(sasl_broker, "SASL_PLAINTEXT")) as conn:
        assert _handshake(conn, "PLAIN").error_code == ErrorCode.NONE
        answer = conn.call(kp_request(ApiKey.SASL_AUTHENTICATE)(
            version=version, auth_bytes=b"\0alice\0alice-secret"),
            kp_response(ApiKey.SASL_AUTHENTICATE))
        assert (answer.error_code, answer.auth_bytes, answer.session_lifetime_ms) == \
            (ErrorCode.NONE, b"", 0)
        assert conn.request(ApiKey.METADATA, 1, b"\xff\xff\xff\xff")  # served


def test_an_unknown_mechanism_is_answered_with_the_enabled_ones(
        sasl_broker: EmbeddedBroker) -> None:
    with RawConnection(_address(sasl_broker, "SASL_PLAINTEXT")) as conn:
        answer = _handshake(conn, "GSSAPI")
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert list(answer.mechanisms) == ["PLAIN", *SCRAM]


def test_nothing_but_sasl_is_served_before_authenticating(sasl_broker: EmbeddedBroker) -> None:
    with RawConnection(_address(sasl_broker, "SASL_PLAINTEXT")) as conn:
        conn.send(request_frame(ApiKey.METADATA, 1, 1, b"\xff\xff\xff\xff"))
        assert conn.read_until_closed() == b""


def test_old_clients_send_bare_tokens_after_a_v0_handshake(sasl_broker: EmbeddedBroker) -> None:
    with RawConnection(_address(sasl_broker, "SASL_PLAINTEXT")) as conn:
        assert _handshake(conn, "PLAIN", version=0).error_code == ErrorCode.NONE
        token = b"\0alice\0alice-secret"
        conn.send(len(token).to_bytes(4, "big") + token)
        assert conn.recv_frame() == b""  # an empty server token: authenticated
        metadata = conn.request(ApiKey.METADATA, 1, b"\xff\xff\xff\xff")
        assert metadata  # served


def test_sparklog_users_adds_lists_and_deletes_scram_users(
        sasl_broker: EmbeddedBroker, certificates: Path) -> None:
    code, out = users(sasl_broker, "add", "carol", "--mechanism", "SCRAM-SHA-512",
                      "--iterations", "4096", stdin="carol-secret\n")
    assert (code, out) == (0, "Added SCRAM-SHA-512 credentials for user 'carol'.\n")
    assert users(sasl_broker, "list", "carol") == (
        0, "SCRAM credential configs for user-principal 'carol' are "
           "SCRAM-SHA-512=iterations=4096\n")
    assert "user-principal 'alice' are SCRAM-SHA-256=iterations=8192, " \
           "SCRAM-SHA-512=iterations=8192" in users(sasl_broker, "list")[1]
    address = _address(sasl_broker, "SASL_SSL")
    carol = security("confluent", "SASL_SSL", certificates, mechanism="SCRAM-SHA-512",
                     user="carol", password="carol-secret")
    assert len(produce_confluent(address, unique_topic("carol"), numbered(1), **carol)) == 1
    assert users(sasl_broker, "delete", "carol", "--mechanism", "SCRAM-SHA-512")[0] == 0
    assert "Authentication failed" in _admin_fails(address, carol)
    assert users(sasl_broker, "list", "carol")[0] == 1
    assert users(sasl_broker, "add", "dave", "--password", "x", "--iterations", "100")[0] == 1


def test_scram_credentials_survive_a_restart_salted(tmp_path: Path, certificates: Path) -> None:
    config = listeners_config(certificates)
    with EmbeddedBroker(tmp_path / "data", config) as broker:
        assert users(broker, "add", "erin", "--password", "erin-secret")[0] == 0
    stored = (tmp_path / "data" / STORE_FILE).read_text()
    assert "erin" in stored and "erin-secret" not in stored
    with EmbeddedBroker(tmp_path / "data", config) as broker:
        settings = security("confluent", "SASL_PLAINTEXT", certificates,
                            mechanism="SCRAM-SHA-256", user="erin", password="erin-secret")
        assert len(produce_confluent(_address(broker, "SASL_PLAINTEXT"), "t", numbered(1),
                                     **settings)) == 1


def test_without_plain_users_the_default_mechanisms_are_scram_only(tmp_path: Path) -> None:
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
              "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT"}
    with EmbeddedBroker(tmp_path / "data", config) as broker, \
            RawConnection(broker.bootstrap) as conn:
        answer = _handshake(conn, "PLAIN")
        assert answer.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM
        assert list(answer.mechanisms) == list(SCRAM)


def test_the_first_scram_user_is_made_in_a_stopped_brokers_data_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    assert sparklog_main(["users", "add", "admin", "--password", "admin-secret",
                          "--mechanism", "SCRAM-SHA-256", "--data-dir", str(data)]) == 0
    assert capsys.readouterr().out == "Added SCRAM-SHA-256 credentials for user 'admin'.\n"
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
              "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT",
              "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
              "super.users": "User:admin"}
    with BrokerProcess(data, config) as broker:  # another process: the lock is per process
        admin = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-256",
                 "sasl.username": "admin", "sasl.password": "admin-secret"}
        assert len(produce_confluent(broker.bootstrap, "t", numbered(1), **admin)) == 1
        assert sparklog_main(["users", "list", "--data-dir", str(data)]) == 1
        assert "broker" in capsys.readouterr().err  # the running broker holds the lock


@pytest.mark.parametrize("mechanism", SCRAM)
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_a_broker_logs_in_to_another_as_its_inter_broker_listener_says(
        sasl_broker: EmbeddedBroker, certificates: Path, mechanism: str, listener: str) -> None:
    """The connection a follower opens to its leader (``inter_broker``): TLS checked against
    the listener's truststore, a SCRAM login as the listener's JAAS line says."""
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            'username="alice" password="{}";')
    props = {**listeners_config(certificates), "inter.broker.listener.name": listener,
             "sasl.mechanism.inter.broker.protocol": mechanism}
    protocols = {name: name for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL")}
    port = sasl_broker.listeners[listener]

    async def api_versions(password: str) -> int:
        props[f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"] = \
            jaas.format(password)
        security = InterBrokerSecurity.load(props, protocols)
        connection = await LeaderConnection.open("127.0.0.1", port, "replica-test", security)
        try:
            return (await connection.request(ApiKey.API_VERSIONS, 0, {})).error_code
        finally:
            connection.close()

    assert asyncio.run(api_versions(USERS["alice"])) == ErrorCode.NONE
    with pytest.raises(InterBrokerError, match=r"refused the .* login of alice") as refused:
        asyncio.run(api_versions("wrong-secret"))
    assert "wrong-secret" not in str(refused.value)
