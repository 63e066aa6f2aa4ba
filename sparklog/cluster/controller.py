"""The controller: leader election and ISR upkeep over ZooKeeper state znodes.

The broker that wins ``/controller`` runs one ``Controller``: on every change of live
brokers or topics it walks every partition and writes what Kafka's controller decides into
``/brokers/topics/<t>/partitions/<p>/state``. Brokers watch those znodes (see
``session.ClusterSession``): the state znodes are how decisions reach them, in place of the
LeaderAndIsr requests kio lacks.

Invariants:
- Each write is one ZooKeeper transaction that checks the ``/controller_epoch`` version this
  controller set when it took office, and compares-and-sets the state znode's version: a
  controller that a newer one replaced can write nothing (split-brain fencing), and a
  decision made on a stale read (a leader changed the ISR meanwhile) is retried on a new read.
- Every state it writes carries its controller epoch; it never touches a state written by a
  newer controller.
- ``elect`` is Kafka's rule: a partition whose leader is gone gets the first replica (in
  assignment order) that is in the ISR and alive, with the leader epoch bumped; with none,
  the partition goes offline (leader -1, the ISR kept) unless unclean election is enabled
  for its topic, which elects the first live replica and logs the possible loss. Dead
  followers leave the ISR; a new partition's ISR is its live replicas.
- A broker is live while ``/brokers/ids/<id>`` exists; the znode's creation zxid is its
  broker epoch (KIP-380). A broker whose epoch changed between two passes restarted in
  between (a bounce too quick for the pass to see it gone): the pass first handles it as
  dead (out of every ISR, its leaderships moved), then as live again, as Kafka's
  controller does, so a restarted replica rejoins an ISR only by catching up again.
- With ``auto.leader.rebalance.enable`` (``rebalance_interval_s``:
  ``leader.imbalance.check.interval.seconds``) a pass without changes to wait for also
  hands leadership back to each partition's preferred (first assigned) replica that is
  alive and in sync (``prefer``), a higher leader epoch again. Kafka first weighs each
  broker's imbalance ratio; here any partition away from its preferred leader moves.
- Each pass first deletes the topics ``/admin/delete_topics`` asks to delete
  (``topic_deletion``), so it never writes a state znode of a topic being deleted, and ends
  by completing the partition reassignments whose target replicas are all in sync
  (``reassignment``).
- ``elect_leaders`` is the ElectLeaders API's election (``requested_election``): PREFERRED
  moves leadership to the preferred replica when it is alive and in sync
  (PREFERRED_LEADER_NOT_AVAILABLE otherwise, ELECTION_NOT_NEEDED when it leads already);
  UNCLEAN elects, for a partition whose leader is gone, the first live ISR member, else
  (only then) the first live replica (ELIGIBLE_LEADERS_NOT_AVAILABLE with none,
  ELECTION_NOT_NEEDED while the leader lives). Its writes are fenced like a pass's.
- A ``/admin/preferred_replica_election`` znode (Kafka's, written by operators' ZooKeeper
  tools) runs a PREFERRED ``elect_leaders`` for the partitions it lists, then is deleted.
- Reconciliation runs on the controller's own thread, one pass at a time (ZooKeeper watches,
  and ``wake`` when a topic config changed, only queue a request for one); an ElectLeaders
  election runs on the caller's thread but never at the same time as a pass (``_work``).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import ConnectionLoss, NoNodeError, RolledBackError, SessionExpiredError

from sparklog.cluster.fencing import FencedError
from sparklog.cluster.layout import (
    BROKER_IDS,
    CONTROLLER_EPOCH,
    DELETE_TOPICS,
    NO_LEADER,
    PREFERRED_REPLICA_ELECTION,
    TOPICS,
    PartitionState,
    broker_path,
    decode_assignment,
    decode_partitions,
    state_path,
    topic_path,
)
from sparklog.cluster.reassignment import Reassignments
from sparklog.cluster.topic_deletion import delete_requested_topics
from sparklog.errors import ErrorCode

__all__ = ["Controller", "ControllerConfig", "FencedError", "elect", "prefer"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ControllerConfig:
    """What the controller reads of the broker's configuration."""

    unclean: Callable[[str], bool]  # unclean.leader.election.enable of a topic
    rebalance_interval_s: float | None = None  # auto.leader.rebalance.enable: check interval


def prefer(replicas: Sequence[int], state: PartitionState, live: Collection[int],
           controller_epoch: int) -> PartitionState | None:
    """Preferred-leader election: the first assigned replica leads again once it is alive
    and in sync; None when it already leads or cannot."""
    preferred = replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch)


def elect(replicas: Sequence[int], state: PartitionState | None, live: Collection[int],
          unclean: bool, controller_epoch: int) -> PartitionState | None:
    """The partition's next state, or None when it needs no change (module invariants)."""
    alive = [r for r in replicas if r in live]
    if state is None:
        leader = alive[0] if alive else NO_LEADER
        return PartitionState(leader, 0, tuple(alive), controller_epoch)
    if state.leader in live:
        isr = tuple(r for r in state.isr if r in live)
        if isr == state.isr:
            return None
        return PartitionState(state.leader, state.leader_epoch, isr, controller_epoch)
    candidates = [r for r in replicas if r in state.isr and r in live]
    if candidates:
        isr = tuple(r for r in state.isr if r in live)
        return PartitionState(candidates[0], state.leader_epoch + 1, isr, controller_epoch)
    if unclean and alive:
        log.warning("unclean leader election: broker %d was not in the ISR %s; records "
                    "acknowledged by the ISR may be lost", alive[0], list(state.isr))
        return PartitionState(alive[0], state.leader_epoch + 1, (alive[0],), controller_epoch)
    if state.leader == NO_LEADER:
        return None
    log.warning("no live in-sync replica among %s: partition offline", list(state.isr))
    return PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch)


PREFERRED, UNCLEAN = 0, 1
"""ElectLeaders' election types (Kafka's ``ElectionType``)."""

TopicPartition = tuple[str, int]


def requested_election(replicas: Sequence[int], state: PartitionState | None,
                       live: Collection[int], election: int,
                       controller_epoch: int) -> PartitionState | ErrorCode:
    """An ElectLeaders election of one partition: its new state, or the error code answered
    (module invariants)."""
    if election == PREFERRED:
        if state is not None and state.leader == replicas[0]:
            return ErrorCode.ELECTION_NOT_NEEDED
        new = None if state is None else prefer(replicas, state, live, controller_epoch)
        return new if new is not None else ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
    if state is not None and state.leader != NO_LEADER and state.leader in live:
        return ErrorCode.ELECTION_NOT_NEEDED
    new = elect(replicas, state, live, True, controller_epoch)
    if new is None or new.leader == NO_LEADER:
        return ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return new


class Controller:
    """The controller's work while this broker holds ``/controller`` with ``epoch`` (the
    ``/controller_epoch`` znode is at ``epoch_version``)."""

    def __init__(self, zk: KazooClient, broker_id: int, epoch: int, epoch_version: int,
                 config: ControllerConfig) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self.epoch = epoch
        self.epoch_version = epoch_version
        self.config = config
        self._requests: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._work = threading.Lock()  # a pass or an ElectLeaders election, one at a time
        self._watched: set[str] = set()
        self._broker_epochs: dict[int, int] = {}  # live broker -> its epoch, last pass
        self.reassignments = Reassignments(zk, self._on_change)
        self._thread = threading.Thread(target=self._run, name="controller", daemon=True)

    def start(self) -> None:
        log.info("broker %d is the controller, epoch %d", self.broker_id, self.epoch)
        self._thread.start()
        self.zk.ChildrenWatch(BROKER_IDS, self._on_change)
        self.zk.ChildrenWatch(TOPICS, self._on_topics)
        self.zk.DataWatch(PREFERRED_REPLICA_ELECTION, self._on_preferred_election)
        self.zk.ChildrenWatch(DELETE_TOPICS, self._on_change)

    def stop(self) -> None:
        self._stopped.set()
        self._requests.put(False)

    @property
    def active(self) -> bool:
        return not self._stopped.is_set()

    def wake(self) -> None:
        """Ask for a pass: something the decisions read changed (a topic's
        ``unclean.leader.election.enable``), as Kafka's controller re-elects when it is
        turned on."""
        self._requests.put(True)

    def _on_change(self, *_: object) -> bool:
        self._requests.put(True)
        return self.active  # False ends the watch

    def _on_topics(self, topics: list[str]) -> bool:
        for topic in topics:
            if topic not in self._watched:
                self._watched.add(topic)
                self.zk.DataWatch(topic_path(topic), self._on_change)
        return self._on_change()

    def _run(self) -> None:
        while True:
            try:
                self._requests.get(timeout=self.config.rebalance_interval_s)
                preferred = False
            except queue.Empty:  # the auto.leader.rebalance.enable check is due
                preferred = True
            while not self._requests.empty():  # one pass serves every request queued so far
                self._requests.get_nowait()
            if not self.active:
                return
            try:
                self.reconcile(preferred)
            except FencedError:
                log.warning("controller epoch %d was superseded: stepping down", self.epoch)
                self.stop()
            except Exception:
                log.exception("controller pass failed; retrying on the next change")

    def reconcile(self, preferred: bool = False) -> None:
        """One pass over every partition (module invariants); ``preferred`` also moves
        leadership back to preferred replicas that are alive and in sync."""
        with self._work:
            epochs = self._live_epochs()
            bounced = {b for b, epoch in epochs.items()
                       if self._broker_epochs.get(b, epoch) != epoch}
            if bounced:
                log.info("brokers %s restarted since the last pass: out of every ISR first",
                         sorted(bounced))
            live = set(epochs) - bounced
            retry = not delete_requested_topics(self.zk, self.epoch_version)
            for topic, assignment in self._assignments():
                unclean = self.config.unclean(topic)
                for partition, replicas in sorted(assignment.items()):
                    retry |= not self._update(topic, partition, replicas, live, unclean,
                                              preferred)
            retry |= not self.reassignments.advance(live, self.epoch, self.epoch_version)
            if not retry:  # a pass that did not finish sees the bounce again
                self._broker_epochs = epochs
            retry |= bool(bounced)  # and a next pass with them live
        if retry:
            self._requests.put(True)

    def _live_epochs(self) -> dict[int, int]:
        """Each live broker's epoch: the creation zxid of its registration."""
        epochs = {}
        for child in self.zk.get_children(BROKER_IDS):
            stat = self.zk.exists(broker_path(int(child)))
            if stat is not None:
                epochs[int(child)] = stat.czxid
        return epochs

    def _assignments(self) -> Iterable[tuple[str, dict[int, tuple[int, ...]]]]:
        for topic in self.zk.get_children(TOPICS):
            try:
                yield topic, decode_assignment(self.zk.get(topic_path(topic))[0])
            except NoNodeError:
                continue

    def elect_leaders(self, partitions: Iterable[TopicPartition] | None, election: int,
                      ) -> dict[TopicPartition, PartitionState | ErrorCode]:
        """ElectLeaders: run ``election`` for ``partitions`` (None: every partition) and
        answer each one's new state or its error code. Blocking (ZooKeeper); raises
        ``FencedError`` when a newer controller took office, or when this broker's session
        is lost or expired (it cannot know that it still holds the office)."""
        try:
            return self._elect_leaders(partitions, election)
        except (SessionExpiredError, ConnectionLoss) as exc:
            raise FencedError(f"ZooKeeper session lost: {type(exc).__name__}") from None

    def _elect_leaders(self, partitions: Iterable[TopicPartition] | None, election: int,
                       ) -> dict[TopicPartition, PartitionState | ErrorCode]:
        with self._work:
            live = {int(b) for b in self.zk.get_children(BROKER_IDS)}
            assignments = dict(self._assignments())
            wanted = set(partitions) if partitions is not None else {
                (t, p) for t, assignment in assignments.items() for p in assignment}
            results: dict[TopicPartition, PartitionState | ErrorCode] = {}
            for topic, partition in sorted(wanted):
                replicas = assignments.get(topic, {}).get(partition)
                if replicas is None:
                    results[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    continue
                while True:  # a concurrent write (a leader's ISR change): decide again
                    state = self._read_state(topic, partition)
                    outcome = requested_election(replicas, state, live, election, self.epoch)
                    if isinstance(outcome, ErrorCode) or self._write(
                            topic, partition, state, outcome):
                        break
                results[(topic, partition)] = outcome
        return results

    def _on_preferred_election(self, data: bytes | None, _stat: object) -> bool:
        if data is not None and self.active:
            self.zk.handler.spawn(self._preferred_election, data)
        return self.active

    def _preferred_election(self, data: bytes) -> None:
        """Kafka's ZooKeeper-triggered preferred election: elect, then delete the request."""
        try:
            partitions = decode_partitions(data)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s is not Kafka's partition list (%s): deleted",
                        PREFERRED_REPLICA_ELECTION, exc)
            partitions = []
        try:
            for (topic, partition), outcome in self.elect_leaders(partitions,
                                                                  PREFERRED).items():
                if isinstance(outcome, ErrorCode):
                    log.info("preferred election of %s-%d: %s", topic, partition,
                             outcome.name)
            self.zk.delete(PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            pass
        except FencedError:
            log.warning("controller epoch %d was superseded: stepping down", self.epoch)
            self.stop()

    def _read_state(self, topic: str, partition: int) -> PartitionState | None:
        try:
            data, stat = self.zk.get(state_path(topic, partition))
        except NoNodeError:
            return None
        state = PartitionState.decode(data, stat.version)
        if state.controller_epoch > self.epoch:
            raise FencedError
        return state

    def _update(self, topic: str, partition: int, replicas: Sequence[int], live: set[int],
                unclean: bool, preferred: bool) -> bool:
        """Write the partition's next state; False when a concurrent write beat it."""
        state = self._read_state(topic, partition)
        new = elect(replicas, state, live, unclean, self.epoch)
        if new is None and preferred and state is not None:
            new = prefer(replicas, state, live, self.epoch)
        if new is None:
            return True
        return self._write(topic, partition, state, new)

    def _write(self, topic: str, partition: int, state: PartitionState | None,
               new: PartitionState) -> bool:
        """Write ``new`` over ``state`` in one transaction fenced by the controller epoch;
        False when a concurrent write beat it."""
        path = state_path(topic, partition)
        transaction = self.zk.transaction()
        transaction.check(CONTROLLER_EPOCH, self.epoch_version)
        if state is None:
            self.zk.ensure_path(path.rpartition("/")[0])
            transaction.create(path, new.encode())
        else:
            transaction.set_data(path, new.encode(), state.zk_version)
        results = transaction.commit()
        if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
            raise FencedError
        if any(isinstance(r, Exception) for r in results):
            return False
        log.info("%s-%d: leader %d, leader epoch %d, isr %s (controller epoch %d)", topic,
                 partition, new.leader, new.leader_epoch, list(new.isr), self.epoch)
        return True

