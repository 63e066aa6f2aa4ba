"""Topic-level log configs with Kafka's names, types, defaults and broker-level synonyms.

Invariants:
- Every key here is a topic config Apache Kafka knows, with Kafka's default, or one of
  Confluent Server's schema validation configs (``confluent.*.schema.validation`` and
  ``confluent.*.subject.name.strategy``, topic-level only: no broker synonym), with
  Confluent's default.
- ``LogConfig`` is immutable: an alter builds a new one. Values are typed (int, float, str,
  bool, list of str); ``validate`` raises ``InvalidConfigError`` naming the key and what is
  allowed, so a bad ``--set`` or AlterConfigs answers with a clear message.
- A topic's effective value is: its own override, else the broker's ``log.*`` synonym, else
  the default. ``source_of`` tells which, for DescribeConfigs.
- Deprecated configs Kafka 3.x still accepts (``message.format.version``) are accepted,
  stored and described, and change nothing; ``DEPRECATED`` says why, for the warnings.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sparklog.errors import InvalidConfigError

LONG_MAX = (1 << 63) - 1
SUBJECT_NAME_STRATEGIES = tuple(f"io.confluent.kafka.serializers.subject.{name}" for name in (
    "TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy"))
"""Confluent's subject name strategies (their Java class names), the default first."""


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: str  # "int" | "long" | "double" | "string" | "boolean" | "list"
    default: Any
    doc: str
    broker_synonym: str | None = None
    allowed: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    def parse(self, raw: Any) -> Any:
        """Parse a string (or already typed) value, raising InvalidConfigError when invalid."""
        try:
            value = _PARSERS[self.type](raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(
                f"invalid value {raw!r} for config {self.name}: expected {self.type}"
            ) from None
        items = value if isinstance(value, list) else [value]
        if self.allowed:
            for item in items:
                if item not in self.allowed:
                    raise InvalidConfigError(
                        f"invalid value {raw!r} for config {self.name}: allowed values are "
                        + ", ".join(self.allowed)
                    )
        if self.minimum is not None and value < self.minimum:
            raise InvalidConfigError(f"invalid value {raw!r} for config {self.name}: "
                                     f"must be at least {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise InvalidConfigError(f"invalid value {raw!r} for config {self.name}: "
                                     f"must be at most {self.maximum:g}")
        return value


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(raw)
    return text == "true"


def _parse_list(raw: Any) -> list[str]:
    if isinstance(raw, list):
        return [str(x) for x in raw]
    return [part.strip() for part in str(raw).split(",") if part.strip()]


_PARSERS: dict[str, Callable[[Any], Any]] = {
    "int": int,
    "long": int,
    "double": float,
    "string": str,
    "boolean": _parse_bool,
    "list": _parse_list,
}

_KEYS = [
    ConfigKey("segment.bytes", "int", 1073741824, "Size at which a segment rolls.",
              "log.segment.bytes", minimum=14),
    ConfigKey("segment.ms", "long", 604800000, "Age after which a segment rolls.",
              "log.roll.ms", minimum=1),
    ConfigKey("segment.jitter.ms", "long", 0, "Random jitter subtracted from segment.ms.",
              "log.roll.jitter.ms", minimum=0),
    ConfigKey("segment.index.bytes", "int", 10485760, "Maximum size of an offset index.",
              "log.index.size.max.bytes", minimum=4),
    ConfigKey("index.interval.bytes", "int", 4096, "Bytes between offset index entries.",
              "log.index.interval.bytes", minimum=0),
    ConfigKey("retention.ms", "long", 604800000, "Age after which segments are deleted "
              "(-1: no limit).", "log.retention.ms", minimum=-1),
    ConfigKey("retention.bytes", "long", -1, "Partition size above which the oldest segments "
              "are deleted (-1: no limit).", "log.retention.bytes"),
    ConfigKey("flush.messages", "long", LONG_MAX, "Records between forced fsyncs.",
              "log.flush.interval.messages", minimum=1),
    ConfigKey("flush.ms", "long", LONG_MAX, "Milliseconds between forced fsyncs.",
              "log.flush.interval.ms", minimum=0),
    ConfigKey("cleanup.policy", "list", ["delete"], "delete, compact, or both.",
              "log.cleanup.policy", allowed=("delete", "compact")),
    ConfigKey("min.cleanable.dirty.ratio", "double", 0.5, "Dirty ratio above which the log "
              "is compacted.", "log.cleaner.min.cleanable.ratio", minimum=0, maximum=1),
    ConfigKey("delete.retention.ms", "long", 86400000, "How long tombstones are kept after "
              "their segment was cleaned.", "log.cleaner.delete.retention.ms", minimum=0),
    ConfigKey("min.compaction.lag.ms", "long", 0, "Minimum age of a record before it can be "
              "compacted.", "log.cleaner.min.compaction.lag.ms", minimum=0),
    ConfigKey("max.compaction.lag.ms", "long", LONG_MAX, "Maximum time a record stays "
              "uncompacted.", "log.cleaner.max.compaction.lag.ms", minimum=1),
    ConfigKey("message.timestamp.type", "string", "CreateTime", "CreateTime or LogAppendTime.",
              "log.message.timestamp.type", allowed=("CreateTime", "LogAppendTime")),
    ConfigKey("max.message.bytes", "int", 1048588, "Largest record batch accepted.",
              "message.max.bytes", minimum=0),
    ConfigKey("compression.type", "string", "producer", "Final compression: producer keeps "
              "the producer's codec.", "compression.type",
              allowed=("producer", "uncompressed", "gzip", "snappy", "lz4", "zstd")),
    ConfigKey("file.delete.delay.ms", "long", 60000, "Delay before a deleted file is removed.",
              "log.segment.delete.delay.ms", minimum=0),
    ConfigKey("min.insync.replicas", "int", 1, "Replicas that must acknowledge acks=all.",
              "min.insync.replicas", minimum=1),
    ConfigKey("preallocate", "boolean", False, "Preallocate segment files.",
              "log.preallocate"),
    ConfigKey("unclean.leader.election.enable", "boolean", False, "Elect a replica outside "
              "the ISR when no ISR member lives (records may be lost).",
              "unclean.leader.election.enable"),
    ConfigKey("message.timestamp.before.max.ms", "long", LONG_MAX, "Largest allowed age of a "
              "CreateTime timestamp.", "log.message.timestamp.before.max.ms", minimum=0),
    ConfigKey("message.timestamp.after.max.ms", "long", 3600000, "Largest allowed lead of a "
              "CreateTime timestamp over the broker clock.",
              "log.message.timestamp.after.max.ms", minimum=0),
    *(ConfigKey(f"confluent.{field}.schema.validation", "boolean", False, f"Refuse a produced "
                f"batch whose record {field}s lack a schema id registered for the topic's "
                f"subject (needs schema.registry.listeners).") for field in ("key", "value")),
    *(ConfigKey(f"confluent.{field}.subject.name.strategy", "string", SUBJECT_NAME_STRATEGIES[0],
                f"How a record {field}'s subject is named for its validation: <topic>-{field} "
                "(TopicNameStrategy), the schema's record name (RecordNameStrategy) or "
                "<topic>-<record name> (TopicRecordNameStrategy).",
                allowed=SUBJECT_NAME_STRATEGIES) for field in ("key", "value")),
    ConfigKey("message.format.version", "string", "3.0-IV1", "Deprecated: ignored, every "
              "batch is stored in the format the producer sent (v2).",
              "log.message.format.version"),
]

DEPRECATED: dict[str, str] = {
    "message.format.version": "message.format.version is deprecated and ignored (as in Kafka "
                              "3.x): record batches are stored as sent, in format v2",
}

CONFIG_KEYS: dict[str, ConfigKey] = {key.name: key for key in _KEYS}

# Broker settings that have no topic-level name but set a topic default (Kafka's units).
_BROKER_ALIASES: dict[str, tuple[str, int]] = {
    "log.retention.hours": ("retention.ms", 3600000),
    "log.retention.minutes": ("retention.ms", 60000),
    "log.roll.hours": ("segment.ms", 3600000),
}


def broker_defaults(broker_props: Mapping[str, str]) -> dict[str, Any]:
    """Topic defaults set by broker properties (``log.segment.bytes`` -> ``segment.bytes``).

    As in Kafka, ``log.retention.ms`` wins over ``.minutes``, which wins over ``.hours``.
    """
    out: dict[str, Any] = {}
    for alias, (name, unit) in sorted(_BROKER_ALIASES.items(), key=lambda kv: -kv[1][1]):
        if alias in broker_props:
            out[name] = CONFIG_KEYS[name].parse(int(broker_props[alias]) * unit)
    for key in _KEYS:
        if key.broker_synonym and key.broker_synonym in broker_props:
            out[key.name] = key.parse(broker_props[key.broker_synonym])
    return out


def validate(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Parse topic-level overrides; unknown keys and bad values raise InvalidConfigError."""
    parsed: dict[str, Any] = {}
    for name, raw in overrides.items():
        key = CONFIG_KEYS.get(name)
        if key is None:
            raise InvalidConfigError(f"unknown topic config {name!r}")
        parsed[name] = key.parse(raw)
    return parsed


def render(value: Any) -> str:
    """A value as Kafka prints it in DescribeConfigs and properties files."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


@dataclass(frozen=True)
class LogConfig:
    """The effective configuration of one topic's logs."""

    overrides: Mapping[str, Any]
    broker: Mapping[str, Any]

    @classmethod
    def of(cls, overrides: Mapping[str, Any] | None = None,
           broker: Mapping[str, Any] | None = None) -> LogConfig:
        return cls(validate(overrides or {}), dict(broker or {}))

    def get(self, name: str) -> Any:
        if name in self.overrides:
            return self.overrides[name]
        if name in self.broker:
            return self.broker[name]
        return CONFIG_KEYS[name].default

    def source_of(self, name: str) -> str:
        """'topic', 'broker' or 'default': where the effective value comes from."""
        if name in self.overrides:
            return "topic"
        return "broker" if name in self.broker else "default"

    @property
    def segment_bytes(self) -> int:
        return self.get("segment.bytes")

    @property
    def segment_ms(self) -> int:
        return self.get("segment.ms")

    @property
    def segment_index_bytes(self) -> int:
        return self.get("segment.index.bytes")

    @property
    def index_interval_bytes(self) -> int:
        return self.get("index.interval.bytes")

    @property
    def retention_ms(self) -> int:
        return self.get("retention.ms")

    @property
    def retention_bytes(self) -> int:
        return self.get("retention.bytes")

    @property
    def flush_messages(self) -> int:
        return self.get("flush.messages")

    @property
    def flush_ms(self) -> int:
        return self.get("flush.ms")

    @property
    def compact(self) -> bool:
        return "compact" in self.get("cleanup.policy")

    @property
    def delete(self) -> bool:
        return "delete" in self.get("cleanup.policy")

    @property
    def log_append_time(self) -> bool:
        return self.get("message.timestamp.type") == "LogAppendTime"

    @property
    def max_message_bytes(self) -> int:
        return self.get("max.message.bytes")

    @cached_property
    def schema_validation(self) -> bool:
        """Whether produced keys or values must carry a registered schema id (computed once
        per config: a topic without validation costs Produce one attribute read)."""
        return bool(self.get("confluent.key.schema.validation")
                    or self.get("confluent.value.schema.validation"))
