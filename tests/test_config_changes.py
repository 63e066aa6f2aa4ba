"""``/config/changes`` as one mechanism per ZooKeeper session (``cluster.config_changes``):
one watcher reads each notification once and dispatches it by entity type, a listener added
late hears only what came after the sequence it loaded at, one transactional writer."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from broker_fixtures import TIMEOUT, wait_until, zookeeper
from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss

from sparklog.cluster.config_changes import CONFIG_CHANGES, ConfigChanges, alter_config
from sparklog.cluster.zookeeper_server import ZooKeeperServer

__all__ = ["zookeeper"]  # a fixture, imported for pytest


@pytest.fixture
def sessions(zookeeper: ZooKeeperServer, request: pytest.FixtureRequest
             ) -> Iterator[tuple[KazooClient, KazooClient]]:
    """A writer's and a reader's session under a chroot of their own."""
    clients = [KazooClient(hosts=zookeeper.connect) for _ in range(2)]
    for client in clients:
        client.start(timeout=TIMEOUT)
        client.ensure_path(f"/{request.node.name}")
        client.chroot = f"/{request.node.name}"
    try:
        yield clients[0], clients[1]
    finally:
        for client in clients:
            client.stop()
            client.close()


def test_one_watcher_dispatches_each_notification_by_entity_type(
        sessions: tuple[KazooClient, KazooClient]) -> None:
    writer, reader = sessions
    alter_config(writer, "topics/early", lambda _: {"retention.ms": "1"})
    reads: list[str] = []
    get = reader.get

    def counting_get(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.startswith(f"{CONFIG_CHANGES}/"):
            reads.append(path)
        return get(path, *args, **kwargs)

    reader.get = counting_get  # type: ignore[method-assign]
    heard: dict[str, list[str]] = {"topics": [], "quotas": [], "late": []}
    lock = threading.Lock()

    def hear(who: str) -> Any:
        def on_change(entity: str) -> None:
            with lock:
                heard[who].append(entity)
        return on_change

    changes = ConfigChanges(reader)
    topics = changes.listen(("topics",), hear("topics"), since=-1)
    wait_until(lambda: heard["topics"] == ["topics/early"], message="replayed from -1")
    changes.listen(("users", "users/clients"), hear("quotas"), since=changes.latest())
    alter_config(writer, "users/u/clients/c", lambda _: {"producer_byte_rate": "1"})
    alter_config(writer, "client-metrics/m", lambda _: {"interval.ms": "1000"})
    wait_until(lambda: heard["quotas"] == ["users/u/clients/c"], message="quota pair heard")
    since = changes.latest()
    changes.listen(("topics", "users"), hear("late"), since=since)
    alter_config(writer, "topics/t", lambda _: {"retention.ms": "2"})
    alter_config(writer, "users/u", lambda _: {"producer_byte_rate": "2"})
    wait_until(lambda: heard["late"] == ["topics/t", "users/u"], message="late listener")
    wait_until(lambda: heard["quotas"] == ["users/u/clients/c", "users/u"])
    assert heard["topics"] == ["topics/early", "topics/t"]
    # one watcher: every notification was read once on the reader's session
    assert len(reads) == len(set(reads)) == 5
    topics.leave()
    alter_config(writer, "topics/t", lambda _: {"retention.ms": "3"})
    wait_until(lambda: heard["late"] == ["topics/t", "users/u", "topics/t"])
    assert heard["topics"] == ["topics/early", "topics/t"]


def test_writer_puts_config_and_notification_in_one_transaction(
        sessions: tuple[KazooClient, KazooClient]) -> None:
    writer, _ = sessions
    racing = [threading.Thread(target=alter_config, args=(
        writer, "clients/c", lambda config, n=n: {**config, f"k{n}": "v"}))
        for n in range(8)]
    for thread in racing:
        thread.start()
    for thread in racing:
        thread.join(TIMEOUT)
    config = json.loads(writer.get("/config/clients/c")[0])["config"]
    assert config == {f"k{n}": "v" for n in range(8)}  # no write lost to a race
    notes = [json.loads(writer.get(f"{CONFIG_CHANGES}/{c}")[0])
             for c in writer.get_children(CONFIG_CHANGES)]
    assert notes == [{"version": 2, "entity_path": "clients/c"}] * 8
    assert alter_config(writer, "clients/c", lambda config: config) == config
    assert len(writer.get_children(CONFIG_CHANGES)) == 8  # an unchanged config: no write
    alter_config(writer, "clients/c", lambda _: {}, delete_when_empty=True)
    assert writer.exists("/config/clients/c") is None


@pytest.mark.internal_errors_expected  # the failed read is logged
def test_a_failed_read_leaves_the_rest_to_the_next_pass(
        sessions: tuple[KazooClient, KazooClient]) -> None:
    writer, reader = sessions
    for name in ("a", "b"):
        alter_config(writer, f"topics/{name}", lambda _: {"retention.ms": "1"})
    heard: list[str] = []
    get = reader.get
    failed: list[str] = []

    def failing_get(path: str, *args: Any, **kwargs: Any) -> Any:
        if path.endswith("0000000001") and not failed:  # the second notification, once
            failed.append(path)
            raise ConnectionLoss()
        return get(path, *args, **kwargs)

    reader.get = failing_get  # type: ignore[method-assign]
    ConfigChanges(reader).listen(("topics",), heard.append, since=-1)
    assert heard == ["topics/a"] and failed  # what was read before the failure is heard
    alter_config(writer, "topics/c", lambda _: {"retention.ms": "1"})
    wait_until(lambda: heard == ["topics/a", "topics/b", "topics/c"],
               message="the next pass hears the one whose read failed")
