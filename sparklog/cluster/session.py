"""A broker's ZooKeeper session: registration, controller election, watches on the cluster.

Invariants:
- ``start`` connects (creating the chroot of ``zookeeper.connect`` and Kafka's persistent
  paths when missing), adopts ``/cluster/id`` (the first broker's id proposal), registers
  ``/brokers/ids/<id>`` as an ephemeral znode, and runs for ``/controller``. A registration
  left by this broker's previous, killed process is waited out (its session expires within
  ``zookeeper.session.timeout.ms``); another live broker with the same id is a
  ``ClusterError`` naming ``broker.id``.
- Winning ``/controller`` increments ``/controller_epoch`` by compare-and-set and starts a
  ``Controller`` with that epoch; losing the session stops it. Every broker watches
  ``/controller`` and runs again when it goes.
- ``listener`` hears everything the cluster says, on kazoo's threads: live brokers
  (``brokers``), the names of every topic (``topic_names``, the whole list on each change),
  topics and their assignments and configs (``topic``, None once deleted), partition states
  (``partition_state``, None while a partition has none), and the controller (``controller``).
  The listener hands them to its own thread; nothing here blocks on it.
- ``deregister`` (controlled shutdown) deletes the registration and steps down as
  controller while the watches keep reporting, so the broker sees its leadership move; it
  gives up after ``timeout_s`` without ZooKeeper (False), so a broker cut off from
  ZooKeeper still stops (its registration goes when its session expires).
- After a session loss the registration and the candidacy are renewed on reconnection; the
  watches renew themselves (kazoo's recipes).
- ``write_state`` is the leader's compare-and-set on a state znode (ISR changes): it writes
  only over the version it read and answers the new version, or None when someone else
  wrote first. ``update_topic`` is the compare-and-set of a topic's assignment (added
  partitions, reassignments), retried on a fresh read until it wins; ``delete_topic`` asks
  the controller to delete a topic (``/admin/delete_topics/<t>``).
- Topic configs, as Kafka 2.x's: ``write_topic_config`` replaces ``/config/topics/<t>`` and
  announces it with a sequential ``/config/changes/config_change_<seq>`` in one transaction
  (``config_changes.alter_config``; an unchanged config is not written). The session's one
  watcher of ``/config/changes`` (``config_changes.ConfigChanges``, which the security
  store and entity configs on this session share) hands each topic named by a notification
  not processed yet to ``listener.topic_config`` with the znode's current config, so all
  brokers end on the last config written (at start-up, every notification still there is
  replayed). Notifications older than 15 minutes are purged by the watchers (Kafka's
  ``changeExpirationMs``); a broker that was away longer gets the config with the topic's
  assignment (``topic``) when it starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError

from sparklog.cluster.config_changes import ConfigChanges, Listener, alter_config
from sparklog.cluster.controller import Controller, ControllerConfig
from sparklog.cluster.layout import (
    BROKER_IDS,
    CLUSTER_ID,
    CONTROLLER,
    CONTROLLER_EPOCH,
    PERSISTENT_PATHS,
    PRODUCER_ID_BLOCK,
    TOPICS,
    BrokerInfo,
    PartitionState,
    TopicAssignment,
    broker_path,
    config_path,
    decode_cluster_id,
    decode_controller,
    decode_producer_id_block_end,
    decode_topic_config,
    delete_topic_path,
    encode_cluster_id,
    encode_controller,
    encode_producer_id_block,
    encode_topic_config,
    state_path,
    topic_path,
)
from sparklog.errors import UnknownTopicOrPartitionError

log = logging.getLogger(__name__)

class ClusterError(Exception):
    """The broker cannot join the cluster; the message is one line naming the cause."""


class ClusterListener(Protocol):
    def brokers(self, live: dict[int, BrokerInfo]) -> None: ...
    def topic_names(self, names: set[str]) -> None: ...
    def topic(self, name: str, assignment: TopicAssignment | None,
              config: dict[str, str]) -> None: ...
    def partition_state(self, topic: str, partition: int,
                        state: PartitionState | None) -> None: ...
    def controller(self, broker_id: int) -> None: ...
    def topic_config(self, name: str, config: dict[str, str]) -> None: ...


def split_connect(connect: str) -> tuple[str, str]:
    """``host:port,...[/chroot]`` -> (hosts, chroot or '')."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, (slash + chroot).rstrip("/")


class ClusterSession:
    blocking = True
    """Its writes are ZooKeeper round trips: callers on an event loop run them in an
    executor."""

    def __init__(self, connect: str, session_timeout_ms: int, me: BrokerInfo,
                 listener: ClusterListener, controller_config: ControllerConfig,
                 proposed_cluster_id: str) -> None:
        self.proposed_cluster_id = proposed_cluster_id
        self.hosts, self.chroot = split_connect(connect)
        self.session_timeout_ms = session_timeout_ms
        self.me = me
        self.listener = listener
        self.controller_config = controller_config
        self.zk = KazooClient(hosts=self.hosts, timeout=session_timeout_ms / 1000)
        self.controller: Controller | None = None
        self._topics: set[str] = set()
        self._states: set[tuple[str, int]] = set()
        self._config_changes: Listener | None = None
        self.cluster_id = ""
        self._lock = threading.Lock()
        self._closed = False
        self._leaving = False  # deregistered: no new registration or candidacy

    # -- life ----------------------------------------------------------------------------
    def start(self, timeout_s: float = 30) -> None:
        try:
            self.zk.start(timeout=timeout_s)
        except KazooTimeoutError:
            raise ClusterError(f"cannot reach ZooKeeper at {self.hosts} (zookeeper.connect) "
                               f"within {timeout_s:.0f} s") from None
        if self.chroot:
            self.zk.ensure_path(self.chroot)
            self.zk.chroot = self.chroot
        for path in PERSISTENT_PATHS:
            self.zk.ensure_path(path)
        self.cluster_id = self._cluster_id()
        self._register(timeout_s + self.session_timeout_ms / 1000)
        self.zk.add_listener(self._on_session)
        self.zk.ChildrenWatch(BROKER_IDS, self._quiet(self._on_brokers))
        self.zk.ChildrenWatch(TOPICS, self._quiet(self._on_topics))
        self.zk.DataWatch(CONTROLLER, self._quiet(self._on_controller))
        self._config_changes = ConfigChanges(self.zk).listen(
            ("topics",), self._on_config_change, since=-1)

    def deregister(self, timeout_s: float) -> bool:
        """Delete ``/brokers/ids/<id>`` but keep the session (and its watches): the
        controller moves leadership away as from a dead broker (a controlled shutdown).
        False when ZooKeeper did not answer within ``timeout_s``."""
        with self._lock:
            self._leaving = True
            controller, self.controller = self.controller, None
        if controller is not None:
            controller.stop()
        paths = [CONTROLLER] if controller is not None else []
        paths.append(broker_path(self.me.broker_id))
        deadline = time.monotonic() + timeout_s
        return all(self._delete(path, deadline) for path in paths)

    def _delete(self, path: str, deadline: float) -> bool:
        try:
            self.zk.delete_async(path).get(timeout=max(deadline - time.monotonic(), 0.01))
        except NoNodeError:
            pass
        except KazooTimeoutError:
            return False
        return True

    def close(self) -> None:
        """Leave the cluster: the registration (and ``/controller``) go at once."""
        self._closed = True
        if self._config_changes is not None:
            self._config_changes.leave()
        if self.controller is not None:
            self.controller.stop()
        self.zk.stop()
        self.zk.close()

    @property
    def negotiated_timeout_ms(self) -> int:
        return int(self.zk._session_timeout)

    def _cluster_id(self) -> str:
        """Kafka's ``/cluster/id``: the first broker's proposal, everyone's afterwards."""
        try:
            self.zk.create(CLUSTER_ID, encode_cluster_id(self.proposed_cluster_id),
                           makepath=True)
        except NodeExistsError:
            pass
        return decode_cluster_id(self.zk.get(CLUSTER_ID)[0])

    def _register(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        path = broker_path(self.me.broker_id)
        while True:
            try:
                self.zk.create(path, self.me.encode(), ephemeral=True)
                return
            except NodeExistsError:
                if time.monotonic() > deadline:
                    raise ClusterError(
                        f"broker.id {self.me.broker_id} is registered by another live broker "
                        f"({path} in ZooKeeper): give each broker its own broker.id") from None
                time.sleep(0.2)

    def _on_session(self, state: str) -> None:
        if state == KazooState.LOST and self.controller is not None:
            self.controller.stop()
            self.controller = None
        if state == KazooState.CONNECTED and not (self._closed or self._leaving):
            # kazoo calls listeners on its connection thread: renew elsewhere
            self.zk.handler.spawn(self._renew)

    def _renew(self) -> None:
        try:
            if self.zk.exists(broker_path(self.me.broker_id)) is None:
                self._register(self.session_timeout_ms / 1000)
            self._elect()
        except Exception:
            log.exception("renewing the ZooKeeper registration failed")

    # -- controller ----------------------------------------------------------------------
    def _on_controller(self, data: bytes | None, _stat: object) -> bool:
        if self._closed:
            return False
        if data is None:
            self.zk.handler.spawn(self._elect)
        else:
            self.listener.controller(decode_controller(data))
        return True

    def _elect(self) -> None:
        with self._lock:
            if self._closed or self._leaving or (self.controller is not None
                                                  and self.controller.active):
                return
            try:
                self.zk.create(CONTROLLER, encode_controller(self.me.broker_id), ephemeral=True)
            except NodeExistsError:
                return
            epoch, version = self._bump_epoch()
            self.controller = Controller(self.zk, self.me.broker_id, epoch, version,
                                         self.controller_config)
            self.controller.start()

    def _bump_epoch(self) -> tuple[int, int]:
        """Increment ``/controller_epoch`` (compare-and-set): the new epoch and its version."""
        while True:
            try:
                data, stat = self.zk.get(CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.zk.create(CONTROLLER_EPOCH, b"1")
                    return 1, 0
                except NodeExistsError:
                    continue
            epoch = int(data) + 1
            try:
                new = self.zk.set(CONTROLLER_EPOCH, str(epoch).encode(), stat.version)
                return epoch, new.version
            except BadVersionError:
                continue

    # -- watches -------------------------------------------------------------------------
    def _quiet(self, watch: Callable[..., bool]) -> Callable[..., bool]:
        """``watch`` as a kazoo watch callback that, once ``close`` began, meets the closing
        connection silently (its reads fail; nothing is left to report) instead of kazoo
        logging the error."""
        def quiet(*args: Any) -> bool:
            try:
                return watch(*args)
            except (ConnectionLoss, ConnectionClosedError, SessionExpiredError):
                if self._closed:
                    return False
                raise
        return quiet

    def _on_brokers(self, children: list[str]) -> bool:
        live = {}
        for child in children:
            try:
                live[int(child)] = BrokerInfo.decode(int(child),
                                                     self.zk.get(broker_path(int(child)))[0])
            except NoNodeError:
                continue
        self.listener.brokers(live)
        return not self._closed

    def _on_topics(self, topics: list[str]) -> bool:
        self.listener.topic_names(set(topics))
        for topic in topics:
            if topic not in self._topics:
                self._topics.add(topic)
                self._watch_assignment(topic)
        return not self._closed

    def _watch_assignment(self, topic: str) -> None:
        def changed(data: bytes | None, stat: object) -> bool:
            return self._on_assignment(topic, data, stat)

        self.zk.DataWatch(topic_path(topic), self._quiet(changed))

    def _on_assignment(self, topic: str, data: bytes | None, stat: object) -> bool:
        if data is None:
            self._topics.discard(topic)
            self.listener.topic(topic, None, {})
            return False
        assignment = TopicAssignment.decode(data, stat.version)  # type: ignore[attr-defined]
        try:
            config = decode_topic_config(self.zk.get(config_path(topic))[0])
        except NoNodeError:
            config = {}
        self.listener.topic(topic, assignment, config)
        for partition in assignment.partitions:
            self._watch_state(topic, partition)
        return not self._closed

    def _watch_state(self, topic: str, partition: int) -> None:
        if (topic, partition) in self._states:
            return
        self._states.add((topic, partition))

        def changed(data: bytes | None, stat: object) -> bool:
            if data is None and topic not in self._topics:  # the topic was deleted
                self._states.discard((topic, partition))
                return False
            state = None if data is None else PartitionState.decode(data, stat.version)  # type: ignore[attr-defined]
            self.listener.partition_state(topic, partition, state)
            return not self._closed

        self.zk.DataWatch(state_path(topic, partition), self._quiet(changed))

    def _on_config_change(self, entity: str) -> None:
        """Hand the topic a notification names to the listener with its current config."""
        topic = entity.partition("/")[2]
        try:
            config = decode_topic_config(self.zk.get(config_path(topic))[0])
        except NoNodeError:
            return
        self.listener.topic_config(topic, config)

    # -- writes (blocking: call from a worker thread) ------------------------------------
    def write_topic_config(self, topic: str, config: dict[str, str]) -> None:
        """Replace the topic's config overrides and announce the change to every broker."""
        alter_config(self.zk, f"topics/{topic}", lambda _: config)

    def create_topic(self, topic: str, assignment: TopicAssignment,
                     config: dict[str, str]) -> bool:
        """Write a new topic's config and assignment; False when it already exists."""
        if self.zk.exists(topic_path(topic)) is not None:
            return False
        self.zk.ensure_path(config_path(topic))
        self.zk.set(config_path(topic), encode_topic_config(config))
        try:
            self.zk.create(topic_path(topic), assignment.encode())
        except NodeExistsError:
            return False
        return True

    def update_topic(self, topic: str,
                     change: Callable[[TopicAssignment], TopicAssignment | None],
                     ) -> TopicAssignment | None:
        """Compare-and-set ``/brokers/topics/<topic>`` to what ``change`` makes of it (None:
        write nothing; it may raise to refuse); UNKNOWN_TOPIC_OR_PARTITION without the topic."""
        while True:
            try:
                data, stat = self.zk.get(topic_path(topic))
            except NoNodeError:
                raise UnknownTopicOrPartitionError(f"unknown topic {topic}") from None
            new = change(TopicAssignment.decode(data, stat.version))
            if new is None:
                return None
            try:
                self.zk.set(topic_path(topic), new.encode(), stat.version)
                return new
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownTopicOrPartitionError(f"unknown topic {topic}") from None

    def read_topics(self, topics: list[str]) -> dict[str, TopicAssignment]:
        """The assignments of ``topics`` as ZooKeeper has them now (missing ones left out)."""
        found = {}
        for topic in topics:
            try:
                data, stat = self.zk.get(topic_path(topic))
            except NoNodeError:
                continue
            found[topic] = TopicAssignment.decode(data, stat.version)
        return found

    def delete_topic(self, topic: str) -> None:
        """Ask the controller to delete ``topic`` (Kafka's ``/admin/delete_topics/<t>``)."""
        try:
            self.zk.create(delete_topic_path(topic), makepath=True)
        except NodeExistsError:
            pass

    def allocate_producer_ids(self, size: int) -> tuple[int, int]:
        """The next block [start, end) of producer ids, by compare-and-set on Kafka's
        ``/latest_producer_id_block``: no two brokers ever get the same block."""
        while True:
            try:
                data, stat = self.zk.get(PRODUCER_ID_BLOCK)
            except NoNodeError:
                try:
                    self.zk.create(PRODUCER_ID_BLOCK, encode_producer_id_block(
                        self.me.broker_id, 0, size))
                    return 0, size
                except NodeExistsError:
                    continue
            start = decode_producer_id_block_end(data)
            try:
                self.zk.set(PRODUCER_ID_BLOCK, encode_producer_id_block(
                    self.me.broker_id, start, start + size), stat.version)
                return start, start + size
            except BadVersionError:
                continue

    def write_state(self, topic: str, partition: int, state: PartitionState) -> int | None:
        """Compare-and-set a partition's state (a leader's ISR change); None when it was not
        written: changed meanwhile, gone, or the session lost or expired (a leader frozen
        past its session writes nothing)."""
        try:
            return int(self.zk.set(state_path(topic, partition), state.encode(),
                                   state.zk_version).version)
        except (BadVersionError, NoNodeError, SessionExpiredError, ConnectionLoss,
                ConnectionClosedError):
            return None
