"""KIP-848 consumer groups on a real cluster: one ZooKeeper (module), three broker processes,
confluent-kafka members at ``group.protocol=consumer``. When the group coordinator's broker
(the leader of the group's ``__consumer_offsets`` partition) is SIGKILLed while the members
consume, the new coordinator replays the group: every member keeps its epoch and its
partitions (nobody rejoins, no partition moves), and no record is consumed twice. The same
holds for a group that migrated online: two ``group.protocol=classic`` members upgraded by a
consumer-protocol member (the classic members' epochs and protocols are replayed too).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from broker_fixtures import TIMEOUT, Cluster, create_topic, running_cluster, wait_until, zookeeper
from confluent_kafka import Producer
from consumer_members import consumer_conf, every_partition, shared, start_members

from sparklog.client.consumer_groups import ConsumerGroupEpochs, describe_consumer_group
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap
from sparklog.cluster.zookeeper_server import ZooKeeperServer

__all__ = ["zookeeper"]  # fixtures, imported for pytest

pytestmark = pytest.mark.timeout(180)

CONFIG = {"offsets.topic.num.partitions": "1", "group.consumer.heartbeat.interval.ms": "500"}
TOPIC = "kip848-events"
GROUP = "kip848-readers"


@pytest.fixture(scope="module")
def cluster(zookeeper: ZooKeeperServer,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(zookeeper, tmp_path_factory.mktemp("kip848"), "kip848",
                         CONFIG) as running:
        yield running


def epochs(cluster: Cluster, group: str) -> ConsumerGroupEpochs:
    config = ClientConfig(parse_bootstrap(cluster.bootstrap, "bootstrap"))
    with KafkaClient(config, RetryPolicy(TIMEOUT, 0.1)) as client:
        found = describe_consumer_group(client, group)
    assert found is not None
    return found


@pytest.mark.parametrize("classic", [0, 2], ids=["consumer", "migrated"])
def test_a_coordinator_kill_keeps_every_assignment(cluster: Cluster, classic: int) -> None:
    topic, group = f"{TOPIC}-{classic}", f"{GROUP}-{classic}"
    create_topic(cluster.bootstrap, topic, 6, replication_factor=3)
    for partition in range(6):
        cluster.wait_for_isr(topic, {0, 1, 2}, partition)
    stop = threading.Event()
    produced: set[bytes] = set()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                             "enable.idempotence": True, "log_level": 3})
        n = 0
        while not stop.is_set():
            producer.produce(topic, str(n).encode(), partition=n % 6,
                             on_delivery=lambda err, msg: err or produced.add(msg.value()))
            producer.poll(0)
            n += 1
            time.sleep(0.005)
        assert producer.flush(TIMEOUT) == 0

    conf = consumer_conf(cluster.bootstrap, group, log_level=3)
    members = start_members(classic, conf | {"group.protocol": "classic"}, [topic])
    producing = threading.Thread(target=produce, daemon=True)
    try:
        if classic:  # a classic group first, upgraded by the consumer-protocol members
            wait_until(lambda: shared(members, every_partition(topic, 6)))
        members += start_members(3 - classic, conf, [topic])
        wait_until(lambda: shared(members, every_partition(topic, 6)))
        wait_until(lambda: epochs(cluster, group).state == "Stable")
        before = epochs(cluster, group)
        assert sorted(before.upgraded.values()) == [False] * classic + [True] * (3 - classic)
        held = [set(m.assigned) for m in members]
        producing.start()
        wait_until(lambda: all(m.received for m in members))
        coordinator = cluster.leader("__consumer_offsets")
        cluster.brokers[coordinator].kill()
        wait_until(lambda: cluster.partition("__consumer_offsets").leader
                   not in (-1, coordinator), message="a new coordinator")
        time.sleep(3)  # six heartbeats on the new coordinator, under load
        after = epochs(cluster, group)
        assert [set(m.assigned) for m in members] == held
        stop.set()
        producing.join(TIMEOUT)
        wait_until(lambda: sum(len(m.received) for m in members) >= len(produced))
        time.sleep(1)
    finally:
        stop.set()
        for member in members:
            member.stop()
        for broker in cluster.brokers:
            if not broker.running:
                broker.start()
    assert (after.group_epoch, after.assignment_epoch, after.member_epochs, after.upgraded) == (
        before.group_epoch, before.assignment_epoch, before.member_epochs, before.upgraded)
    consumed = Counter(record for m in members for record in m.records())
    assert [record for record, count in consumed.items() if count > 1] == []
    assert len(consumed) == len(produced)
