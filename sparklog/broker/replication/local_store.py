"""A single node's cluster metadata: what ZooKeeper holds for a cluster, kept by this process.

Without ``zookeeper.connect`` the broker is a one-broker cluster: the replica manager, its
partitions and every handler run exactly as in a cluster, and this store stands where the
``ClusterSession`` does, answering the same calls from the data directory.

Invariants:
- The data directory is the store: topics, partition counts and configs are the
  ``LogManager``'s, each partition assigned to this broker alone; nothing else is persisted
  here but the producer-id block (``producer-id-block``, its end written before any id of
  the block is used, so ids are never reused across restarts).
- Every change is told to the listener (the replica manager) before the call returns, as
  ZooKeeper's watches would tell it later: a topic created here is led (leader this broker,
  epoch 0, ISR of itself) when ``create_topic`` returns, so nothing waits for it.
- This broker is the controller from ``start`` on; ElectLeaders runs the controller's
  election rule on it (every election is ELECTION_NOT_NEEDED: the only replica leads).
- Calls are cheap and run on the event loop (``blocking`` is False), unlike ZooKeeper's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from sparklog.cluster.controller import requested_election
from sparklog.cluster.layout import BrokerInfo, PartitionState, TopicAssignment
from sparklog.cluster.session import ClusterListener
from sparklog.errors import ErrorCode, UnknownTopicOrPartitionError
from sparklog.storage.checkpoint import write_atomically
from sparklog.storage.log_manager import LogManager

TopicPartition = tuple[str, int]

PRODUCER_ID_FILE = "producer-id-block"
EPOCH = 0
"""The single node's leader and controller epoch: it never changes hands."""


class LocalController:
    """The controller of a one-broker cluster."""

    active = True

    def __init__(self, store: LocalStore) -> None:
        self._store = store

    def elect_leaders(self, partitions: Iterable[TopicPartition] | None, election: int,
                      ) -> dict[TopicPartition, PartitionState | ErrorCode]:
        me, topics = self._store.me.broker_id, self._store.logs.topics
        wanted = set(partitions) if partitions is not None else {
            (t, p) for t, topic in topics.items() for p in range(topic.partitions)}
        results: dict[TopicPartition, PartitionState | ErrorCode] = {}
        for topic, partition in sorted(wanted):
            found = topics.get(topic)
            if found is None or not 0 <= partition < found.partitions:
                results[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                results[(topic, partition)] = requested_election(
                    (me,), self._store.state(), {me}, election, EPOCH)
        return results

    def wake(self) -> None:
        """Nothing to elect again: the only replica always leads."""


class LocalStore:
    blocking = False
    zk = None  # SCRAM credentials and ACLs stay the data directory's

    def __init__(self, logs: LogManager, me: BrokerInfo, listener: ClusterListener) -> None:
        self.logs = logs
        self.me = me
        self.listener = listener
        self.controller = LocalController(self)
        self.cluster_id = logs.cluster_id
        self._producer_ids: Path = logs.data_dir / PRODUCER_ID_FILE

    def state(self) -> PartitionState:
        me = self.me.broker_id
        return PartitionState(me, EPOCH, (me,), EPOCH, 0)

    def assignment(self, name: str) -> TopicAssignment | None:
        """``name``'s assignment: every partition on this broker (None: no such topic)."""
        topic = self.logs.topics.get(name)
        if topic is None:
            return None
        return TopicAssignment(dict.fromkeys(range(topic.partitions), (self.me.broker_id,)),
                               topic.topic_id)

    # -- life ------------------------------------------------------------------------------
    def start(self) -> None:
        self.listener.brokers({self.me.broker_id: self.me})
        self.listener.controller(self.me.broker_id)
        self.listener.topic_names(set(self.logs.topics))
        for name, topic in list(self.logs.topics.items()):
            self._announce(name, range(topic.partitions))

    def deregister(self, timeout_s: float) -> bool:
        return True  # no other broker to hand leadership to

    def close(self) -> None:
        """Nothing to leave."""

    def _announce(self, name: str, partitions: Iterable[int]) -> None:
        """Tell the listener the topic as the logs now have it, and ``partitions``' state."""
        self.listener.topic(name, self.assignment(name),
                            dict(self.logs.topics[name].overrides_raw))
        state = self.state()
        for partition in partitions:
            self.listener.partition_state(name, partition, state)

    # -- writes ----------------------------------------------------------------------------
    def create_topic(self, topic: str, assignment: TopicAssignment,
                     config: dict[str, str]) -> bool:
        if topic in self.logs.topics:
            return False
        self.logs.create_topic(topic, len(assignment.partitions), config,
                               topic_id=assignment.topic_id)
        self._announce(topic, range(len(assignment.partitions)))
        return True

    def update_topic(self, topic: str,
                     change: Callable[[TopicAssignment], TopicAssignment | None],
                     ) -> TopicAssignment | None:
        current = self.assignment(topic)
        if current is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
        new = change(current)
        if new is None:
            return None
        old = len(current.partitions)
        if len(new.partitions) > old:
            self.logs.create_partitions(topic, len(new.partitions))
            self._announce(topic, range(old, len(new.partitions)))
        return new

    def read_topics(self, topics: list[str]) -> dict[str, TopicAssignment]:
        return {t: found for t in topics if (found := self.assignment(t)) is not None}

    def delete_topic(self, topic: str) -> None:
        self.listener.topic(topic, None, {})

    def write_topic_config(self, topic: str, config: dict[str, str]) -> None:
        self.logs.set_topic_config(topic, config)

    def write_state(self, topic: str, partition: int, state: PartitionState) -> int | None:
        return None  # the ISR is this broker alone: it never changes

    def allocate_producer_ids(self, size: int) -> tuple[int, int]:
        return next_producer_id_block(self._producer_ids, size)


def next_producer_id_block(path: Path, size: int) -> tuple[int, int]:
    """The next block [start, end) of a single node's producer ids, its end written (at
    ``path``) before any id of it is handed out."""
    start = int(path.read_text()) if path.exists() else 0
    write_atomically(path, str(start + size).encode())
    return start, start + size
