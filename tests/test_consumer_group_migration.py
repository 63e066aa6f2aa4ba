"""Online migration between classic and consumer groups (KIP-848, Kafka 4's
``group.consumer.migration.policy``) with real clients: confluent-kafka 2.16 members with
``group.protocol=classic`` consume, a ``group.protocol=consumer`` member joins (the group
upgrades; every partition stays assigned exactly once, the classic members keep consuming
and committing), the coordinator is unloaded and loaded again (the converted group and its
classic members come back from ``__consumer_offsets``), and the consumer member leaves (the
group downgrades to a classic group that rebalances its members).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_fixtures import create_topic, produce_per_partition, unique_topic, wait_until
from consumer_members import Member, consumer_conf, every_partition, shared, start_members

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.state import Broker
from sparklog.coordinator.consumer_group_coordinator import ConsumerGroupConfig, MigrationPolicy
from sparklog.coordinator.group_records import partition_for
from sparklog.errors import InvalidConfigError

pytestmark = pytest.mark.timeout(120)

CONFIG = {
    "offsets.topic.num.partitions": "3",
    "group.consumer.heartbeat.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(Path(tmp_path_factory.mktemp("migration")) / "data", CONFIG) as proc:
        yield proc


def member_kinds(embedded: EmbeddedBroker, group: str) -> dict[str, bool] | None:
    """Member id -> uses the classic protocol, of the consumer group (None: not one)."""
    def kinds(broker: Broker) -> dict[str, bool] | None:
        found = broker.coordinator.consumer.groups.get(group)
        if found is None:
            return None
        return {m.member_id: m.classic is not None for m in found.members.values()}

    return embedded.call(kinds)


def classic_members(embedded: EmbeddedBroker, group: str) -> tuple[str, int]:
    def state(broker: Broker) -> tuple[str, int]:
        found = broker.coordinator.groups.get(group)
        return ("", 0) if found is None else (str(found.state), len(found.members))

    return embedded.call(state)


def test_upgrade_replay_and_downgrade(embedded: EmbeddedBroker) -> None:
    group = unique_topic("migrating")
    topic = create_topic(embedded.bootstrap, unique_topic("migrated"), partitions=6)
    partitions = every_partition(topic, 6)
    classic = start_members(2, consumer_conf(embedded.bootstrap, group, "classic"), [topic])
    modern: Member | None = None
    try:
        wait_until(lambda: shared(classic, partitions))
        assert member_kinds(embedded, group) is None
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(6), 20))
        wait_until(lambda: sum(len(m.received) for m in classic) >= 120)

        modern = Member(consumer_conf(embedded.bootstrap, group), [topic])
        modern.start()
        wait_until(lambda: shared([*classic, modern], partitions))
        kinds = member_kinds(embedded, group)
        assert kinds is not None and sorted(kinds.values()) == [False, True, True]
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(6), 20))
        wait_until(lambda: sum(len(m.received) for m in (*classic, modern)) >= 240)
        assert all(not m.errors for m in (*classic, modern))

        # A coordinator failover keeps the converted group, its classic members included.
        def reload(broker: Broker) -> None:
            partition = partition_for(group, 3)
            broker.coordinator.unload(partition)
            broker.coordinator.load(partition)

        embedded.call(reload)
        assert member_kinds(embedded, group) == kinds
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(6), 20))
        wait_until(lambda: sum(len(m.received) for m in (*classic, modern)) >= 360)

        modern.stop()  # the last consumer-protocol member leaves: back to a classic group
        wait_until(lambda: member_kinds(embedded, group) is None)
        wait_until(lambda: classic_members(embedded, group) == ("Stable", 2))
        wait_until(lambda: shared(classic, partitions))
        produce_per_partition(embedded.bootstrap, topic, dict.fromkeys(range(6), 20))
        every = {(topic, p, o) for p in range(6) for o in range(80)}
        wait_until(lambda: {r for m in (*classic, modern) for r in m.records()} == every)
    finally:
        for member in (*classic, *([modern] if modern else [])):
            member.stop()
    assert all(not m.errors for m in (*classic, modern))


def test_migration_policy_setting() -> None:
    assert ConsumerGroupConfig.from_props({}).migration_policy is MigrationPolicy.BIDIRECTIONAL
    config = ConsumerGroupConfig.from_props({"group.consumer.migration.policy": "Upgrade"})
    assert config.migration_policy.upgrades and not config.migration_policy.downgrades
    with pytest.raises(InvalidConfigError, match=r"group\.consumer\.migration\.policy"):
        ConsumerGroupConfig.from_props({"group.consumer.migration.policy": "sideways"})
