"""Safety rails of the broker and the tools: one broker per data directory (``.lock``),
internal topics that stay as they are, topic names that would collide in metrics, and
start-up errors that are one line and touch nothing.

Brokers run as child processes (``BrokerProcess`` or ``python -m sparklog.cli broker``), and
the checks go through real clients (confluent-kafka's AdminClient) and the ``sparklog`` tools.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_fixtures import TIMEOUT, broker
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from sparklog.broker.process import BrokerProcess
from sparklog.storage.log_manager import CLEAN_SHUTDOWN_FILE

__all__ = ["broker"]


def sparklog(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``sparklog ARGV`` in a child process; its exit code, stdout and stderr."""
    return subprocess.run([sys.executable, "-m", "sparklog.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def one_line(stderr: str) -> str:
    """The only line of ``stderr``: a start-up error must be one line, never a traceback."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# -- one broker per data directory ------------------------------------------------------------


@pytest.fixture
def live(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data").start()
    yield process
    process.kill()


def test_a_second_broker_on_a_live_data_directory_is_refused(live: BrokerProcess,
                                                             tmp_path: Path) -> None:
    before = sorted(p.name for p in live.data_dir.iterdir())
    second = sparklog("broker", "--data-dir", str(live.data_dir), "--listen", "127.0.0.1:0")
    assert second.returncode == 1
    line = one_line(second.stderr)
    assert str(live.data_dir) in line and "in use by another broker" in line
    # The refused broker wrote nothing: above all no clean-shutdown marker under the live one.
    assert sorted(p.name for p in live.data_dir.iterdir()) == before
    assert not (live.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    # A crash of the live broker releases the lock, and the next start recovers.
    live.kill()
    live.start()
    assert "after an unclean shutdown" in live.log_file.read_text()


def test_a_cleanly_stopped_broker_leaves_the_directory_to_the_next(live: BrokerProcess) -> None:
    assert live.stop() == 0
    live.start()
    assert "after a clean shutdown" in live.log_file.read_text()


# -- start-up errors ----------------------------------------------------------------------------


def test_a_port_in_use_is_one_line_before_the_data_directory_is_touched(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        data_dir = tmp_path / "data"
        result = sparklog("broker", "--data-dir", str(data_dir), "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line == f"sparklog broker: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert not data_dir.exists()


def test_a_data_directory_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "data"
    path.write_text("not a directory")
    result = sparklog("broker", "--data-dir", str(path), "--listen", "127.0.0.1:0")
    assert result.returncode == 1
    assert one_line(result.stderr) == f"sparklog broker: data directory {path} is not a directory"
    assert path.read_text() == "not a directory"


@pytest.mark.parametrize(("listen", "cause"), [
    ("127.0.0.1:99999", "port 99999 is outside 0-65535"),
    ("127.0.0.1", "--listen expects HOST:PORT"),
])
def test_a_bad_listen_address_is_one_line(tmp_path: Path, listen: str, cause: str) -> None:
    data_dir = tmp_path / "data"
    result = sparklog("broker", "--data-dir", str(data_dir), "--listen", listen)
    assert result.returncode == 2
    assert cause in one_line(result.stderr)
    assert not data_dir.exists()


def test_a_bad_config_value_is_one_line(tmp_path: Path) -> None:
    result = sparklog("broker", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0",
                      "--set", "num.partitions=many")
    assert result.returncode == 2
    assert "num.partitions" in one_line(result.stderr)
    assert not (tmp_path / "data").exists()


# -- internal topics ----------------------------------------------------------------------------


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _error(future: object) -> KafkaError:
    with pytest.raises(KafkaException) as caught:
        future.result(TIMEOUT)  # type: ignore[attr-defined]
    return caught.value.args[0]


def test_the_offsets_topic_cannot_be_deleted_nor_grown(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    # The offsets topic exists once a client asked for a coordinator; a listing shows it.
    assert sparklog("groups", "list", "--bootstrap-server", broker.bootstrap).returncode == 0
    partitions = len(admin.list_topics(timeout=TIMEOUT).topics["__consumer_offsets"].partitions)

    deleted = admin.delete_topics(["__consumer_offsets"], request_timeout=TIMEOUT)
    assert _error(deleted["__consumer_offsets"]).code() == KafkaError.INVALID_REQUEST
    grown = admin.create_partitions([NewPartitions("__consumer_offsets", partitions + 1)],
                                    request_timeout=TIMEOUT)
    error = _error(grown["__consumer_offsets"])
    assert error.code() == KafkaError.INVALID_REQUEST and "internal topic" in error.str()
    topics = admin.list_topics(timeout=TIMEOUT).topics
    assert len(topics["__consumer_offsets"].partitions) == partitions

    tool = sparklog("topics", "delete", "--topic", "__consumer_offsets",
                    "--bootstrap-server", broker.bootstrap)
    assert tool.returncode == 1
    assert one_line(tool.stderr) == ("sparklog topics: topic __consumer_offsets is an internal "
                                     "topic and is not allowed to be deleted")
    tool = sparklog("topics", "alter", "--topic", "__consumer_offsets", "--partitions", "60",
                    "--bootstrap-server", broker.bootstrap)
    assert tool.returncode == 1 and "not allowed to be given more partitions" in tool.stderr


# -- topic names --------------------------------------------------------------------------------


@pytest.mark.parametrize(("first", "second"), [("my.topic", "my_topic"),
                                               ("my_topic2", "my.topic2")])
def test_names_that_collide_in_metrics_are_refused(broker: BrokerProcess, first: str,
                                                   second: str) -> None:
    admin = _admin(broker)
    admin.create_topics([NewTopic(first, 1)], request_timeout=TIMEOUT)[first].result(TIMEOUT)
    created = admin.create_topics([NewTopic(second, 1)], request_timeout=TIMEOUT)
    error = _error(created[second])
    assert error.code() == KafkaError.TOPIC_EXCEPTION
    assert f"collides with existing topic {first!r}" in error.str()
    assert second not in admin.list_topics(timeout=TIMEOUT).topics
