"""A refused login or a client speaking the wrong security protocol ends every tool (and
sparklog's own client) within seconds with one line naming the listener's address and
security protocol, the user and the SASL mechanism; a bootstrap list where nothing answers
fails naming the addresses.

The tools run in-process through ``sparklog.cli.main`` against one broker with a listener
per security protocol (``security_support.listeners_config``) and SCRAM users; one job
runs as its own process, as users run it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from security_support import USERS, certificates, listener_broker

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.cli import main
from sparklog.client.errors import KafkaClientError
from sparklog.client.failures import ConnectionFailure, listener_protocol
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, ClientSecurity, RetryPolicy

__all__ = ["certificates", "listener_broker"]

FAST_S = 8.0
"""Every failure here ends well within this (librdkafka's and the tools' own waits are 30 s
and more)."""


def _address(broker: EmbeddedBroker, listener: str) -> str:
    return f"127.0.0.1:{broker.listeners[listener]}"


def _tool(capsys: pytest.CaptureFixture[str], argv: list[str], bootstrap: str,
          settings: dict[str, str]) -> tuple[int, list[str], float]:
    """Run a tool: exit code, the lines it wrote on stderr, and how long it took."""
    capsys.readouterr()
    options = [f"{key}={value}" for key, value in settings.items()]
    started = time.monotonic()
    code = main([*argv, "--bootstrap-server", bootstrap, *(["-X", *options] if options else [])])
    took = time.monotonic() - started
    return code, capsys.readouterr().err.splitlines(), took


TOOLS = {
    "produce": ["produce", "--topic", "fail-fast", "--value", "v"],
    "consume": ["consume", "--topic", "fail-fast", "--from-beginning", "--timeout-ms", "60000"],
    "consume-group": ["consume", "--topic", "fail-fast", "--group", "g",
                      "--timeout-ms", "60000"],
    "topics": ["topics", "list"],
    "transactions": ["transactions", "list"],
}


def _sasl(certs: Path, password: str) -> dict[str, str]:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice", "sasl.password": password,
            "ssl.ca.location": str(certs / "ca.crt")}


@pytest.mark.parametrize("tool", TOOLS)
def test_a_wrong_password_ends_every_tool_at_once_with_one_line(
        listener_broker: EmbeddedBroker, certificates: Path, capsys: pytest.CaptureFixture[str],
        tool: str) -> None:
    address = _address(listener_broker, "SASL_SSL")
    code, lines, took = _tool(capsys, TOOLS[tool], address, _sasl(certificates, "wrong"))
    name = TOOLS[tool][0]
    assert code == 1 and took < FAST_S, (code, took, lines)
    failures = [line for line in lines if line.startswith(f"sparklog {name}: ")]
    assert len(failures) == 1, lines
    assert failures[0].startswith(
        f"sparklog {name}: authentication failed on the SASL_SSL listener at {address} for "
        "user 'alice' with SASL mechanism SCRAM-SHA-256"), failures
    assert "wrong" not in "\n".join(lines)


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize(("client", "listener"), [
    ("PLAINTEXT", "SASL_SSL"), ("PLAINTEXT", "SASL_PLAINTEXT"), ("SSL", "PLAINTEXT")])
def test_a_client_of_another_security_protocol_ends_every_tool_at_once(
        listener_broker: EmbeddedBroker, certificates: Path, capsys: pytest.CaptureFixture[str],
        tool: str, client: str, listener: str) -> None:
    address = _address(listener_broker, listener)
    settings = {} if client == "PLAINTEXT" else {
        "security.protocol": client, "ssl.ca.location": str(certificates / "ca.crt")}
    code, lines, took = _tool(capsys, TOOLS[tool], address, settings)
    name = TOOLS[tool][0]
    assert code == 1 and took < FAST_S, (code, took, lines)
    assert [line for line in lines if line.startswith(f"sparklog {name}: ")] == [
        f"sparklog {name}: the listener at {address} speaks {listener} but the client's "
        f"security.protocol={client} (no SASL login): set security.protocol={listener}"
        + (" with sasl.mechanism, sasl.username and sasl.password"
           if listener.startswith("SASL_") else "")], lines


def test_a_good_login_is_not_disturbed(listener_broker: EmbeddedBroker, certificates: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    address = _address(listener_broker, "SASL_SSL")
    settings = _sasl(certificates, USERS["alice"])
    assert _tool(capsys, ["topics", "create", "--topic", "fail-fast-good"], address,
                 settings)[0] == 0
    assert _tool(capsys, ["produce", "--topic", "fail-fast-good", "--value", "v"], address,
                 settings)[0] == 0
    code, lines, _ = _tool(capsys, ["topics", "list"], address, settings)
    assert code == 0, lines


def test_listener_protocol_tells_each_listener_apart(listener_broker: EmbeddedBroker) -> None:
    for listener in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        assert listener_protocol(("127.0.0.1", listener_broker.listeners[listener])) == listener


def _client(port: int, security: ClientSecurity, retry: RetryPolicy) -> KafkaClient:
    return KafkaClient(ClientConfig((("127.0.0.1", port),), security=security), retry)


PATIENT = RetryPolicy(timeout_s=30.0, backoff_s=0.1)


@pytest.mark.parametrize(("listener", "security", "message"), [
    ("SASL_SSL", "wrong-password",
     "authentication failed on the SASL_SSL listener at {address} for user 'alice' with SASL "
     "mechanism SCRAM-SHA-512 (security.protocol=SASL_SSL): SASL_AUTHENTICATION_FAILED (58)"),
    ("SASL_SSL", "plaintext", "the listener at {address} speaks SASL_SSL but the client's "
                              "security.protocol=PLAINTEXT"),
    ("SASL_PLAINTEXT", "plaintext", "the listener at {address} speaks SASL_PLAINTEXT"),
    ("SSL", "untrusted", "the TLS certificate of the broker at {address} is not trusted"),
])
def test_sparklogs_client_fails_for_good_at_once(
        listener_broker: EmbeddedBroker, certificates: Path, listener: str, security: str,
        message: str) -> None:
    settings = {
        "wrong-password": ClientSecurity("SASL_SSL", "SCRAM-SHA-512", "alice", "wrong",
                                         str(certificates / "ca.crt")),
        "plaintext": ClientSecurity(),
        "untrusted": ClientSecurity("SSL"),
    }[security]
    started = time.monotonic()
    with pytest.raises(ConnectionFailure, match=re.escape(message.format(
            address=_address(listener_broker, listener)))), \
            _client(listener_broker.listeners[listener], settings, PATIENT) as client:
        client.metadata(None)
    assert time.monotonic() - started < FAST_S


def test_no_bootstrap_server_answering_fails_naming_them_after_the_bootstrap_timeout(
        ) -> None:
    started = time.monotonic()
    with pytest.raises(KafkaClientError, match=re.escape(
            "no broker answered at bootstrap servers 127.0.0.1:1 within 1 s: cannot connect to "
            "127.0.0.1:1")), \
            _client(1, ClientSecurity(), RetryPolicy(30.0, 0.1, bootstrap_timeout_s=1.0)) as c:
        c.metadata(None)
    assert time.monotonic() - started < FAST_S


@pytest.mark.timeout(300)
def test_a_job_with_a_wrong_password_ends_with_one_line(
        listener_broker: EmbeddedBroker, certificates: Path, tmp_path: Path) -> None:
    address = _address(listener_broker, "SASL_SSL")
    security = [f"source.kafka.{key}={value}"
                for key, value in _sasl(certificates, "wrong").items()]
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "sparklog.jobs.backfill", "--bootstrap-server", address,
         "--topic", "t", "--table", str(tmp_path / "table"), "--schema", "id BIGINT",
         "--from-offsets", '{"t":{"0":0}}', "--to-offsets", '{"t":{"0":1}}',
         *(item for setting in security for item in ("--set", setting))],
        capture_output=True, text=True, timeout=240, cwd=tmp_path,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    took = time.monotonic() - started
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.rstrip().splitlines()[-1].startswith(
        f"authentication failed on the SASL_SSL listener at {address} for user 'alice' with "
        "SASL mechanism SCRAM-SHA-256"), result.stderr
    assert took < 120, took  # Spark's start-up; the failure itself takes well under a second


def test_a_broker_that_went_away_is_retried_for_the_whole_timeout(tmp_path: Path) -> None:
    """Only a client no broker ever answered fails fast: one whose broker went away (a
    leader moving, a broker restarting) retries as long as its policy says."""
    retry = RetryPolicy(timeout_s=2.0, backoff_s=0.1, bootstrap_timeout_s=0.1)
    with EmbeddedBroker(tmp_path / "data") as broker:
        client = _client(broker.port, ClientSecurity(), retry)
        client.metadata(None)
    started = time.monotonic()
    with pytest.raises(KafkaClientError, match="still failing after 2 s: no bootstrap server "
                                               "reachable"), client:
        client.metadata(None)
    assert time.monotonic() - started >= 1.5
