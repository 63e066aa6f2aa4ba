"""The data directory: topic metadata, every partition log, checkpoints and clean shutdown.

Layout of ``--data-dir`` (Kafka's where Kafka has one):
- ``<topic>-<partition>/``: one PartitionLog per local partition;
- ``topics.json``: topic ids, partition counts, config overrides and, in a cluster, which
  partitions have a replica here (Kafka keeps these in its metadata log; one small
  atomically replaced file serves a single node);
- ``meta.properties``: the cluster id and node id;
- ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``;
- ``.kafka_cleanshutdown``: present only after a clean close, removed at start-up;
- ``.lock``: locked while a ``LogManager`` has the directory open (``storage/dir_lock.py``).

Invariants:
- The directory is locked before anything in it is read or written, and unlocked only after
  the clean-shutdown marker is written: a second broker on a live directory fails with
  ``DataDirError`` and changes nothing.
- Topic names are Kafka's: 1-249 of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``, and no two
  topics whose names are equal once ``.`` is read as ``_`` (Kafka's metric names collide).
- ``topics.json`` is the source of truth: a partition directory whose topic is not in it, or
  whose partition is not local, is a leftover of an interrupted delete and is removed at
  start-up.
- A topic knows every partition of the cluster (its count, configs, id: unique, and found
  by ``topic_by_id``); its *local*
  partitions (``TopicMetadata.local``) each have a log. On a single node every partition is
  local (``local_partitions`` None); in a cluster only those with a replica here
  (``open_partition`` / ``delete_partition`` follow the assignment).
- A clean shutdown writes every log's data, index and producer snapshot without an fsync
  each, then syncs the filesystem once (``syncfs``), and only then writes the recovery
  points and the clean-shutdown marker: 100,000 partitions close in one barrier, not
  300,000 fsyncs.
- Metadata changes are written before the logs change (create: metadata then directories;
  delete: metadata then directories), so a crash between the two is repaired at start-up.
- Segments removed by retention are renamed ``*.deleted`` and only unlinked after
  ``file.delete.delay.ms``, so a fetch already sending from them completes. A deleted
  partition log (topic deleted, replica moved away) is likewise renamed at once, to
  ``<dir>.<uuid>-delete`` (the name is free again), and closed and removed after the
  delay, as Kafka's ``asyncDelete``; ``close`` removes whatever is still waiting, and
  closes once: a second call does nothing, a segment closes its descriptor once.
- A full disk stops only writes: a checkpoint that cannot be written keeps the old files
  (``checkpoint_error`` says why until one works again), and a close that could not flush a
  log or write the checkpoints leaves no clean-shutdown marker, so the next start recovers.
  ``storage_errors`` lists what is failing (the partitions' and the checkpoints' errors).
- Partitions' objects are long-lived: after loading and after each creation they are moved
  out of the cyclic collector's reach (``gc.freeze``), so the collector's pauses do not grow
  with the number of partitions.
- Descriptors: at start the soft RLIMIT_NOFILE is raised to the hard limit; segment files
  are opened through one bounded cache (``file_handles.OPEN_FILES``, of
  ``log.open.files.max`` files, by default a quarter of the limit), so partitions cost
  none at rest. ``max.broker.partitions`` (the name KIP-578 proposed; by default ten per
  descriptor of the limit) bounds the local partitions: a creation that would pass it, or
  that finds too few descriptors left to open a partition's files (connections hold
  them), is refused whole before anything is written (POLICY_VIOLATION), so no topic is
  ever left half made for want of descriptors.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparklog.errors import (
    ErrorCode,
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from sparklog.heap import freeze_alive
from sparklog.storage.checkpoint import (
    read_checkpoint,
    sync_filesystem,
    write_atomically,
    write_checkpoint,
)
from sparklog.storage.config import DEPRECATED, LogConfig, broker_defaults, render, validate
from sparklog.storage.dir_lock import lock_data_dir
from sparklog.storage.file_handles import (
    CACHE_SHARE,
    OPEN_FILES,
    PARTITIONS_PER_DESCRIPTOR,
    open_descriptors,
    raise_descriptor_limit,
)
from sparklog.storage.log import PartitionLog

log = logging.getLogger(__name__)

TOPICS_FILE = "topics.json"
META_FILE = "meta.properties"
RECOVERY_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
MIN_OPEN_FILES = 32
DESCRIPTORS_PER_NEW_PARTITION = 3  # its first segment's .log, .index and .timeindex
DESCRIPTOR_RESERVE = 16
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


@dataclass
class TopicMetadata:
    name: str
    topic_id: str
    partitions: int
    config: LogConfig
    internal: bool = False
    overrides_raw: dict[str, str] = field(default_factory=dict)
    local_partitions: set[int] | None = None  # None: every partition (a single node)

    def is_local(self, partition: int) -> bool:
        """Whether ``partition`` has a log here (without listing them all)."""
        if self.local_partitions is None:
            return 0 <= partition < self.partitions
        return partition in self.local_partitions

    @property
    def local(self) -> list[int]:
        """The partitions with a log here, ascending."""
        if self.local_partitions is None:
            return list(range(self.partitions))
        return sorted(self.local_partitions)


def validate_topic_name(name: str) -> None:
    if name in (".", "..") or not _LEGAL_TOPIC.match(name):
        raise InvalidTopicError(
            f"invalid topic name {name!r}: use 1-249 characters from [a-zA-Z0-9._-], "
            "not '.' or '..'"
        )


def metric_name(topic: str) -> str:
    """The topic's name in metric names, where Kafka reads ``.`` as ``_``: two topics with
    the same metric name collide."""
    return topic.replace(".", "_")


def _warn_deprecated(topic: str, names: Iterable[str]) -> None:
    for name in sorted(set(names) & DEPRECATED.keys()):
        log.warning("topic %s: %s", topic, DEPRECATED[name])


class LogManager:
    def __init__(self, data_dir: Path, broker_props: Mapping[str, str] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self._lock = lock_data_dir(data_dir)
        self._closed = False
        self.checkpoint_error: str | None = None  # why the last checkpoint failed
        try:
            self._load(broker_props or {})
        except BaseException:
            self._lock.release()
            raise

    def _load(self, broker_props: Mapping[str, str]) -> None:
        data_dir = self.data_dir
        self._set_file_budget(broker_props)
        self.topic_defaults = broker_defaults(broker_props)
        marker = data_dir / CLEAN_SHUTDOWN_FILE
        self.clean_start = marker.exists()
        first_start = not (data_dir / META_FILE).exists()
        self.cluster_id, self.node_id = self._load_meta()
        self.topics: dict[str, TopicMetadata] = self._load_topics()
        self._names_by_id = {t.topic_id: t.name for t in self.topics.values()}
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        # (due time, what removes it): segments and logs waiting out file.delete.delay.ms
        self._pending_deletes: list[tuple[int, Callable[[], None]]] = []
        # Called with (topic, partition) when a log is deleted (the cleaner drops its offset).
        self.on_log_deleted: list[Callable[[tuple[str, int]], None]] = []
        self._remove_orphans()
        recovery = read_checkpoint(data_dir / RECOVERY_CHECKPOINT)
        starts = read_checkpoint(data_dir / LOG_START_CHECKPOINT)
        started = time.monotonic()
        for topic in self.topics.values():
            for partition in topic.local:
                tp = (topic.name, partition)
                self.logs[tp] = self._open_log(topic, partition, recovery.get(tp, 0),
                                               starts.get(tp, 0))
        marker.unlink(missing_ok=True)
        freeze_alive()
        how = "first start" if first_start else (
            "after a clean shutdown" if self.clean_start else "after an unclean shutdown")
        log.info("loaded %d partitions of %d topics from %s in %.2fs (%s)", len(self.logs),
                 len(self.topics), data_dir, time.monotonic() - started, how)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- the descriptor budget -----------------------------------------------------------
    def _set_file_budget(self, props: Mapping[str, str]) -> None:
        """Raise the soft descriptor limit to the hard one, size the open-file cache and
        the partition budget from it (module docstring)."""
        self.descriptor_limit = raise_descriptor_limit()
        cache = int(props.get("log.open.files.max", "-1"))
        OPEN_FILES.capacity = cache if cache > 0 else max(
            MIN_OPEN_FILES, self.descriptor_limit // CACHE_SHARE)
        budget = int(props.get("max.broker.partitions", "-1"))
        self.partition_budget = budget if budget >= 0 else \
            self.descriptor_limit * PARTITIONS_PER_DESCRIPTOR
        log.info("descriptor limit %d: at most %d segment files open at once, %d partitions",
                 self.descriptor_limit, OPEN_FILES.capacity, self.partition_budget)

    def check_partition_budget(self, added: int) -> None:
        """Refuse ``added`` more local partitions, up front (POLICY_VIOLATION, as Kafka's
        controller refuses too many partitions at once), when they would take the broker
        past ``max.broker.partitions``, or when the descriptors not held by the open-file
        cache (connections, listeners, other files) leave too few to open a segment's
        files: then nothing is created, rather than failing half way."""
        if added <= 0:
            return
        have = len(self.logs)
        if have + added > self.partition_budget:
            raise KafkaError(
                f"creating {added} partitions would take this broker to {have + added}, past "
                f"its budget of {self.partition_budget} (max.broker.partitions; by default "
                f"{PARTITIONS_PER_DESCRIPTOR} per descriptor of its limit "
                f"{self.descriptor_limit}): {have} partitions exist",
                ErrorCode.POLICY_VIOLATION)
        in_use = open_descriptors()
        if in_use < 0:
            return
        spare = self.descriptor_limit - (in_use - len(OPEN_FILES))
        if spare < DESCRIPTORS_PER_NEW_PARTITION + DESCRIPTOR_RESERVE:
            raise KafkaError(
                f"cannot create {added} partitions: {in_use} of this broker's "
                f"{self.descriptor_limit} descriptors are open ({len(OPEN_FILES)} of them "
                f"segment files the cache can close), which leaves {spare}; opening a new "
                f"partition's files needs {DESCRIPTORS_PER_NEW_PARTITION} and a reserve of "
                f"{DESCRIPTOR_RESERVE}", ErrorCode.POLICY_VIOLATION)

    # -- persistence ---------------------------------------------------------------------
    def _load_meta(self) -> tuple[str, int]:
        path = self.data_dir / META_FILE
        props: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                if "=" in line and not line.startswith("#"):
                    key, value = line.split("=", 1)
                    props[key.strip()] = value.strip()
        if "cluster.id" not in props:
            props = {"version": "1", "cluster.id": uuid.uuid4().hex[:22], "node.id": "0"}
            text = "".join(f"{k}={v}\n" for k, v in props.items())
            write_atomically(path, text.encode())
        return props["cluster.id"], int(props.get("node.id", "0"))

    def _load_topics(self) -> dict[str, TopicMetadata]:
        path = self.data_dir / TOPICS_FILE
        if not path.exists():
            return {}
        raw = json.loads(path.read_text())
        topics = {}
        for name, entry in raw["topics"].items():
            local = entry.get("local_partitions")
            topics[name] = TopicMetadata(
                name, entry["id"], entry["partitions"],
                LogConfig.of(entry["configs"], self.topic_defaults),
                entry.get("internal", False), dict(entry["configs"]),
                None if local is None else set(local),
            )
        return topics

    def _save_topics(self) -> None:
        data = {"version": 1, "topics": {
            t.name: {"id": t.topic_id, "partitions": t.partitions, "configs": t.overrides_raw,
                     "internal": t.internal}
            | ({} if t.local_partitions is None else {"local_partitions": t.local})
            for t in self.topics.values()}}
        write_atomically(self.data_dir / TOPICS_FILE, json.dumps(data, indent=1).encode())

    def _remove_orphans(self) -> None:
        with os.scandir(self.data_dir) as entries:  # no stat per entry: the listing says
            directories = [Path(entry.path) for entry in entries if entry.is_dir()]
        for path in directories:
            if path.name.endswith("-delete"):
                shutil.rmtree(path, ignore_errors=True)
                continue
            match = _PARTITION_DIR.match(path.name)
            if match and (
                match["topic"] not in self.topics
                or not self.topics[match["topic"]].is_local(int(match["partition"]))
            ):
                log.warning("removing %s: its topic or partition no longer exists", path)
                shutil.rmtree(path, ignore_errors=True)

    def _open_log(self, topic: TopicMetadata, partition: int, recovery_point: int,
                  log_start_offset: int) -> PartitionLog:
        return PartitionLog(
            os.path.join(self.data_dir, f"{topic.name}-{partition}"), topic.config,
            now_ms=self.now_ms(),
            recovery_point=recovery_point, log_start_offset=log_start_offset,
            clean_shutdown=self.clean_start,
        )

    def checkpoint(self) -> None:
        """Write both checkpoints; on a full disk keep the old files, warn once, note it in
        ``checkpoint_error`` and try again at the next checkpoint."""
        try:
            write_checkpoint(self.data_dir / RECOVERY_CHECKPOINT,
                             {tp: lg.recovery_point for tp, lg in self.logs.items()})
            write_checkpoint(self.data_dir / LOG_START_CHECKPOINT,
                             {tp: lg.log_start_offset for tp, lg in self.logs.items()})
        except OSError as exc:
            if self.checkpoint_error is None:
                log.warning("cannot write the offset checkpoints: %s", exc.strerror)
            self.checkpoint_error = f"checkpoint: {exc.strerror}"
            return
        if self.checkpoint_error is not None:
            log.info("offset checkpoints written again")
        self.checkpoint_error = None

    def storage_errors(self) -> dict[str, str]:
        """What failed at the last write of each place still failing: a partition
        (``topic-partition``) or the checkpoints; empty while every write works."""
        failing = {f"{topic}-{partition}": lg.storage_error
                   for (topic, partition), lg in self.logs.items() if lg.storage_error}
        if self.checkpoint_error:
            failing["checkpoints"] = self.checkpoint_error
        return failing

    # -- topics --------------------------------------------------------------------------
    def get_log(self, topic: str, partition: int) -> PartitionLog:
        found = self.logs.get((topic, partition))
        if found is None:
            raise UnknownTopicOrPartitionError(f"unknown topic or partition {topic}-{partition}")
        return found

    def get_topic(self, name: str) -> TopicMetadata:
        found = self.topics.get(name)
        if found is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name}")
        return found

    def topic_by_id(self, topic_id: str) -> TopicMetadata | None:
        """The topic whose id (32 hex digits) is ``topic_id``, if there is one."""
        name = self._names_by_id.get(topic_id)
        return None if name is None else self.topics[name]

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, Any] | None = None,
                     *, validate_only: bool = False, internal: bool = False,
                     topic_id: str | None = None, local: Iterable[int] | None = None,
                     ) -> TopicMetadata:
        """A new topic; ``local`` (a cluster) names the partitions with a log here (default:
        all), ``topic_id`` the cluster's id for it (default: a new one)."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicExistsError(f"topic {name!r} already exists")
        colliding = [t for t in self.topics if metric_name(t) == metric_name(name)]
        if colliding:
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic {colliding[0]!r}: names that "
                "differ only in '.' and '_' are refused, as in Kafka (they share metric names)")
        if partitions < 1:
            raise InvalidPartitionsError(f"partition count must be at least 1, not {partitions}")
        raw = {k: render(v) for k, v in (configs or {}).items()}
        topic = TopicMetadata(name, topic_id or uuid.uuid4().hex, partitions,
                              LogConfig.of(raw, self.topic_defaults), internal, raw,
                              None if local is None else set(local))
        if not internal:  # the coordinators' topics are the broker's own
            self.check_partition_budget(len(topic.local))
        if validate_only:
            return topic
        _warn_deprecated(name, raw)
        self.topics[name] = topic
        self._names_by_id[topic.topic_id] = name
        self._save_topics()
        for partition in topic.local:
            self.logs[(name, partition)] = self._open_log(topic, partition, 0, 0)
        freeze_alive()
        log.info("created topic %s with %d partitions %s", name, partitions, raw or "")
        return topic

    def delete_topic(self, name: str) -> None:
        topic = self.get_topic(name)
        del self.topics[name]
        self._names_by_id.pop(topic.topic_id, None)
        self._save_topics()
        for partition in topic.local:
            self._remove_log(name, partition)
        log.info("deleted topic %s", name)

    def _remove_log(self, name: str, partition: int) -> None:
        partition_log = self.logs.pop((name, partition))
        partition_log.retire()
        for forget in self.on_log_deleted:
            forget((name, partition))
        doomed = partition_log.directory.with_name(
            f"{partition_log.directory.name}.{uuid.uuid4().hex}-delete")
        partition_log.directory.rename(doomed)

        def remove() -> None:
            partition_log.discard()
            shutil.rmtree(doomed, ignore_errors=True)

        self._delete_later(partition_log, remove, self.now_ms())

    def open_partition(self, name: str, partition: int) -> PartitionLog:
        """Make ``partition`` of ``name`` local (a replica was assigned here): its log, new
        and empty unless it is local already."""
        topic = self.get_topic(name)
        found = self.logs.get((name, partition))
        if found is not None:
            return found
        if not 0 <= partition < topic.partitions:
            raise UnknownTopicOrPartitionError(f"unknown partition {name}-{partition}")
        if topic.local_partitions is None:
            topic.local_partitions = set(topic.local)
        topic.local_partitions.add(partition)
        self._save_topics()
        opened = self.logs[(name, partition)] = self._open_log(topic, partition, 0, 0)
        log.info("%s-%d: log created (a replica here)", name, partition)
        return opened

    def delete_partition(self, name: str, partition: int) -> None:
        """Drop ``partition``'s local log (its replica moved away); the topic stays."""
        topic = self.get_topic(name)
        if (name, partition) not in self.logs:
            return
        topic.local_partitions = set(topic.local) - {partition}
        self._save_topics()
        self._remove_log(name, partition)
        log.info("%s-%d: log deleted (no replica here any more)", name, partition)

    def create_partitions(self, name: str, total: int, *, validate_only: bool = False,
                          local: Iterable[int] | None = None) -> None:
        """Grow ``name`` to ``total`` partitions; ``local`` (a cluster) names the new ones
        with a log here (default: all)."""
        topic = self.get_topic(name)
        if total <= topic.partitions:
            raise InvalidPartitionsError(
                f"topic {name} has {topic.partitions} partitions; the new count {total} must be "
                "larger"
            )
        old = topic.partitions
        added = sorted(set(range(old, total)) if local is None
                       else set(local) & set(range(old, total)))
        self.check_partition_budget(len(added))
        if validate_only:
            return
        if local is not None and topic.local_partitions is None:
            topic.local_partitions = set(range(old))
        if topic.local_partitions is not None:
            topic.local_partitions |= set(added)
        topic.partitions = total
        self._save_topics()
        for partition in added:
            self.logs[(name, partition)] = self._open_log(topic, partition, 0, 0)
        freeze_alive()
        log.info("topic %s now has %d partitions", name, total)

    def set_topic_defaults(self, defaults: dict[str, Any]) -> None:
        """New topic defaults (dynamic broker configs): every topic's config is its overrides
        over them again, applied to its live logs."""
        self.topic_defaults = defaults
        for name, topic in self.topics.items():
            config = LogConfig.of(topic.overrides_raw, defaults)
            if config != topic.config:
                topic.config = config
                for partition in topic.local:
                    self.logs[(name, partition)].update_config(config)

    def set_topic_config(self, name: str, overrides: Mapping[str, Any], *,
                         validate_only: bool = False) -> LogConfig:
        """Replace the topic's overrides (AlterConfigs semantics)."""
        topic = self.get_topic(name)
        raw = {k: render(v) for k, v in validate(overrides).items()}
        config = LogConfig.of(raw, self.topic_defaults)
        if validate_only:
            return config
        _warn_deprecated(name, raw.keys() - topic.overrides_raw.keys())
        topic.config, topic.overrides_raw = config, raw
        self._save_topics()
        for partition in topic.local:
            self.logs[(name, partition)].update_config(config)
        log.info("topic %s configs now %s", name, raw)
        return config

    # -- maintenance ---------------------------------------------------------------------
    def flush_due(self) -> None:
        """Flush the logs whose ``flush.ms`` has passed (default: never, as in Kafka)."""
        now = self.now_ms()
        for partition_log in self.logs.values():
            partition_log.flush_if_due(now)

    def apply_retention(self) -> None:
        """Delete segments expired by retention or DeleteRecords, then checkpoint."""
        now = self.now_ms()
        for (topic, partition), partition_log in self.logs.items():
            for segment in partition_log.expired_segments(now):
                log.info("%s-%d: deleting segment %s (retention)", topic, partition,
                         segment.log_path.name)
                segment.mark_deleted()
                self._delete_later(partition_log, segment.delete, now)
        self._delete_due(now)
        self.checkpoint()

    def run_maintenance(self) -> None:
        """Everything periodic at once (tools and tests; the broker schedules them apart)."""
        self.flush_due()
        self.apply_retention()

    def _delete_later(self, partition_log: PartitionLog, remove: Callable[[], None],
                      now: int) -> None:
        """Run ``remove`` once the log's ``file.delete.delay.ms`` has passed."""
        delay = partition_log.config.get("file.delete.delay.ms")
        self._pending_deletes.append((now + delay, remove))

    def _delete_due(self, now: int) -> None:
        keep = []
        for due, remove in self._pending_deletes:
            if due <= now:
                remove()
            else:
                keep.append((due, remove))
        self._pending_deletes = keep

    def close(self) -> None:
        """Clean shutdown: flush every log, checkpoint, then write the clean-shutdown marker.
        A second call does nothing (its descriptors may since have been reused)."""
        if self._closed:
            return
        self._closed = True
        now = self.now_ms()
        failed = []
        synced = {tp: lg.recovery_point for tp, lg in self.logs.items()}
        for tp, partition_log in self.logs.items():
            try:
                partition_log.close(now, sync=False)
            except OSError as exc:  # a full disk: the next start recovers this log
                failed.append(f"{tp[0]}-{tp[1]}: {exc.strerror}")
        try:  # one barrier for every log, not three fsyncs each
            sync_filesystem(self.data_dir)
        except OSError as exc:  # nothing new is known durable: the old recovery points stay
            failed.append(f"sync: {exc.strerror}")
            for tp, point in synced.items():
                self.logs[tp].recovery_point = point
        self._delete_due(now=1 << 62)
        self.checkpoint()
        if self.checkpoint_error:
            failed.append(self.checkpoint_error)
        try:
            if not failed:
                write_atomically(self.data_dir / CLEAN_SHUTDOWN_FILE, b"")
        except OSError as exc:
            failed.append(f"{CLEAN_SHUTDOWN_FILE}: {exc.strerror}")
        if failed:
            log.warning("shutdown not clean (%s): the logs are recovered at the next start",
                        "; ".join(failed))
        self._lock.release()
        log.info("closed %d partitions cleanly", len(self.logs))
