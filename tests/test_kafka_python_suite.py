"""kafka-python's own integration suite, run against a sparklog broker as against Kafka 4.0.

kafka-python's suite (``test/integration`` of the release pinned in ``constraints.txt``,
from its source distribution on PyPI) takes an external broker from ``KAFKA_URI``; it is
told ``KAFKA_VERSION=4.0.0`` and the broker runs with the settings its own Kafka fixture
writes into ``server.properties`` (four partitions per topic, two offsets partitions, a
one-second minimum session timeout, no initial rebalance delay, the standard authorizer with
everyone allowed when no ACL is found). Every test passes or is skipped by the suite itself,
except those in ``EXPECTED_FAILURES``, which must fail (so the list stays true).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ElementTree
from importlib.metadata import version
from pathlib import Path

import pytest

from sparklog.broker.process import BrokerProcess
from sparklog.cluster.zookeeper_server import free_port

EXPECTED_FAILURES = {
    "test_admin_integration.py::test_describe_metadata_quorum":
        "DescribeQuorum is KRaft's; sparklog's cluster runs on ZooKeeper",
    "test_consumer_integration.py::test_kafka_version_infer":
        "the broker serves the newest versions kio carries, which kafka-python reads as 4.3",
    "test_ssl_integration.py::TestSSLConnection::test_ssl_handshake":
        "starts a Kafka of its own (Java's keytool, Kafka's scripts) whatever KAFKA_URI says",
    "test_ssl_integration.py::TestSSLConnection::test_legacy_kafka_client_ssl":
        "starts a Kafka of its own, as above",
}
"""The suite's tests that fail against sparklog, and why none of them is a defect."""


_SERVICE = '''"""What the suite's fixtures need of kafka-python's test/service.py, which its source
distribution leaves out: the external broker (KAFKA_URI) only; nothing is spawned."""


class ExternalService:
    def __init__(self, host, port):
        self.host, self.port = host, port

    def open(self):
        pass

    def close(self):
        pass

    def dump_logs(self):
        pass

    def wait_for(self, pattern, timeout=30):
        return True


class SpawnedService:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("this run uses the external broker of KAFKA_URI only")
'''


def _suite(cache: Path) -> Path:
    """The unpacked source distribution of the installed kafka-python. Its ``test`` package
    lacks an ``__init__.py`` there (added, so that it shadows the standard library's) and
    ``service.py`` (``_SERVICE`` stands in for the part the suite uses against an external
    broker)."""
    release = version("kafka-python")
    done = cache / f"kafka_python-{release}"
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--no-deps", "--no-binary", ":all:", "--dest", str(cache), f"kafka-python=={release}"],
        capture_output=True, text=True, timeout=300)
    if download.returncode != 0:
        message = f"cannot download kafka-python {release}'s sources: {download.stderr[-500:]}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    (archive,) = cache.glob("kafka_python-*.tar.gz")
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    (done / "test" / "__init__.py").touch()
    (done / "test" / "service.py").write_text(_SERVICE)
    return done


def test_kafka_python_integration_suite(tmp_path: Path) -> None:
    suite = _suite(tmp_path / "suite")
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", {
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "num.partitions": "4",
        "offsets.topic.num.partitions": "2",
        "group.min.session.timeout.ms": "1000",
        "group.initial.rebalance.delay.ms": "0",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    }, port=port).start()
    (tmp_path / "kafka-bin").mkdir()  # the fixture wants Kafka's directory even when external
    report = tmp_path / "report.xml"
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--tb=line",
             "-W", "ignore::DeprecationWarning", f"--junitxml={report}", "test/integration"],
            cwd=suite, capture_output=True, text=True, timeout=900, env={
                **os.environ, "KAFKA_VERSION": "4.0.0", "KAFKA_URI": f"PLAINTEXT://{broker.bootstrap}",
                "KAFKA_ROOT": str(tmp_path / "kafka-bin")})
    finally:
        broker.stop()
    assert report.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    outcomes = _outcomes(report)
    failed = {name for name, outcome in outcomes.items() if outcome == "failed"}
    assert failed == set(EXPECTED_FAILURES), run.stdout[-5000:]
    assert sum(outcome == "passed" for outcome in outcomes.values()) >= 50, outcomes


def _outcomes(report: Path) -> dict[str, str]:
    """Each test case of a JUnit report (``file.py::[Class::]name``) -> passed, failed or
    skipped (an error in set-up counts as failed)."""
    outcomes = {}
    for case in ElementTree.parse(report).iter("testcase"):
        module, _, cls = case.get("classname", "").rpartition(".")
        file = module.rpartition(".")[2] + ".py" if cls[:1].isupper() else cls + ".py"
        name = f"{file}::{cls}::{case.get('name')}" if cls[:1].isupper() else \
            f"{file}::{case.get('name')}"
        kinds = {child.tag for child in case}
        outcomes[name] = ("failed" if kinds & {"failure", "error"} else
                          "skipped" if "skipped" in kinds else "passed")
    return outcomes
