"""The source's options, with the names and meaning of Spark's Kafka source, parsed once.

Invariants:
- ``parse_read_options`` either returns a complete, valid ``ReadOptions`` or raises
  ``OptionError`` naming the option and what is allowed: unknown options, zero or several
  of subscribe/subscribePattern/assign, bad JSON or numbers, ``latest`` as a batch start,
  ``earliest`` as a batch end, and ending options on a stream are all refused. It runs in
  the driver at ``load()`` (``SparklogDataSource.schema``, with ``streaming=None``: every
  check that does not depend on batch or stream, as Spark's Kafka source validates when
  the DataFrame is created), and again when the reader is built, with the checks of its
  mode.
- Precedence of starting (and ending) options is Spark's: ``startingTimestamp`` over
  ``startingOffsetsByTimestamp`` over ``startingOffsets``.
- Defaults are Spark's: streams start at latest, batches at earliest and end at latest;
  ``failOnDataLoss`` true; ``maxTriggerDelay`` 15m; ``includeHeaders`` false.
- ``ReadOptions`` is immutable and picklable (readers are pickled to executors).
- ``latestPerKey`` (batch only) reads each topic-partition range in one task, so it is
  refused with ``minPartitions`` and ``maxRecordsPerPartition``, and on a stream.
- Typed columns' options (``typed_options``) are parsed here too: ``ReadOptions.typed``;
  their schemas are resolved by the readers on the driver (``typed_columns.resolve``) and
  shipped in ``TaskSettings.decoding``.
- ``groupId`` (or ``kafka.group.id``) names a consumer group that mirrors the stream's
  progress (``ReadOptions.group_id``); the stream reader commits to it through
  ``sparklog.datasource.group_offsets``, which matches offsets with
  ``Subscription.reads``, and the driver's listener (``group_commits``) parses the
  source's options with this same function. ``groupIdPrefix`` is accepted for
  compatibility and unused.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.client.settings import BOOTSTRAP_TIMEOUT_S, ClientConfig, RetryPolicy
from sparklog.datasource.options import (
    OptionError,
    check_known,
    get_option,
    kafka_params,
    parse_bool,
    parse_duration_s,
    parse_int,
)
from sparklog.datasource.read.client_options import client_config
from sparklog.datasource.read.offsets import (
    EARLIEST,
    LATEST,
    PartitionOffsets,
    TopicPartition,
    parse_assign_option,
    parse_offsets_option,
    parse_timestamps_option,
)
from sparklog.datasource.read.typed_options import (
    TYPED_OPTIONS,
    Decoding,
    TypedOptions,
    parse_typed_options,
)

if TYPE_CHECKING:
    from sparklog.client.cluster import Cluster

_SUBSCRIPTIONS = ("subscribe", "subscribePattern", "assign")
_STARTING = ("startingOffsets", "startingTimestamp", "startingOffsetsByTimestamp",
             "startingOffsetsByTimestampStrategy")
_ENDING = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")
_STREAMING = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
_TABLE = ("latestPerKey",)
_COMMON = ("failOnDataLoss", "includeHeaders", "minPartitions", "maxRecordsPerPartition",
           "groupId", "groupIdPrefix", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
           "fetchOffset.retryIntervalMs")
SOURCE_OPTIONS = frozenset(_SUBSCRIPTIONS + _STARTING + _ENDING + _STREAMING + _TABLE + _COMMON
                           ) | TYPED_OPTIONS



# -- where to start and end ------------------------------------------------------------------


@dataclass(frozen=True)
class EarliestOffsets:
    pass


@dataclass(frozen=True)
class LatestOffsets:
    pass


@dataclass(frozen=True)
class SpecificOffsets:
    """Offsets per partition, -2 earliest, -1 latest; must name every partition read."""

    option: str
    offsets: PartitionOffsets


@dataclass(frozen=True)
class TimestampOffsets:
    """The first offset at or after a timestamp: one for all partitions or one each.

    ``latest_if_missing``: a partition with no such record starts (or ends) at latest;
    otherwise the query fails (startingOffsetsByTimestampStrategy=error).
    """

    option: str
    timestamp: int | None
    per_partition: PartitionOffsets | None
    latest_if_missing: bool


OffsetSpec = EarliestOffsets | LatestOffsets | SpecificOffsets | TimestampOffsets


# -- what to read ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Subscription:
    """Exactly one of: topic names, a topic regex (full match), or fixed partitions."""

    option: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[TopicPartition, ...] = ()

    def metadata_topics(self) -> list[str] | None:
        """Topics to ask Metadata about (None: all of them, for a pattern)."""
        if self.pattern is not None:
            return None
        return list(self.topics) if self.topics else sorted({tp.topic for tp in self.assigned})

    def reads(self, tp: TopicPartition, internal: Container[str] = frozenset()) -> bool:
        """Whether ``tp`` is read. A pattern never matches an internal topic (``internal``:
        the topics Metadata marks internal, such as ``__consumer_offsets``), as Kafka's
        consumer excludes them; a topic named or assigned is read even when internal."""
        if self.pattern is not None:
            return tp.topic not in internal and re.fullmatch(self.pattern, tp.topic) is not None
        if self.topics:
            return tp.topic in self.topics
        return tp in self.assigned

    def partitions(self, cluster: Cluster) -> list[TopicPartition]:
        """The existing partitions this subscription reads, sorted."""
        return [tp for tp in cluster.partitions(cluster.topics)
                if self.reads(tp, cluster.internal)]


@dataclass(frozen=True)
class TaskSettings:
    """What every task of a query needs besides its offset range."""

    client: ClientConfig
    retry: RetryPolicy
    fail_on_data_loss: bool
    include_headers: bool
    latest_per_key: bool = False
    """Reduce the task's range to the latest record per key (``latest_per_key``)."""
    decoding: Decoding | None = None
    """The typed columns' schemas, resolved on the driver (``typed_columns``); None: the
    key and value are bytes."""


@dataclass(frozen=True)
class ReadOptions:
    subscription: Subscription
    client: ClientConfig
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_s: float
    driver_retry: RetryPolicy
    """The driver's metadata and offset lookups retry retriable errors for
    ``kafka.default.api.timeout.ms`` (60 s, as Kafka's admin client inside each attempt of
    Spark's Kafka source) plus ``fetchOffset.numRetries`` x ``fetchOffset.retryIntervalMs``:
    long enough to ride out a partition leader's failover. A driver whose client no broker
    has answered yet fails once no bootstrap server accepted a connection for
    ``BOOTSTRAP_TIMEOUT_S``."""
    executor_retry: RetryPolicy
    group_id: str | None
    """The consumer group that mirrors the stream's progress (``groupId`` or
    ``kafka.group.id``), or None."""
    latest_per_key: bool
    """``latestPerKey``: a batch read gives the latest record of each key (a compacted
    topic read as its table)."""
    typed: TypedOptions | None = None
    """Typed key / value columns (``valueFormat``, ``keyFormat``), or None."""

    @property
    def task_settings(self) -> TaskSettings:
        """The tasks' settings, without typed columns (the readers add ``decoding``)."""
        return TaskSettings(self.client, self.executor_retry, self.fail_on_data_loss,
                            self.include_headers, self.latest_per_key)


def parse_read_options(options: Mapping[str, str], streaming: bool | None) -> ReadOptions:
    """The options parsed for a stream (True), a batch (False), or either (None: only the
    checks both modes share; the result is then for validation only)."""
    if streaming:
        for name in _ENDING:
            if get_option(options, name) is not None:
                raise OptionError(f"option {name} is not valid in streaming queries; ending "
                                  "offsets apply to batch reads (spark.read) only")
        if get_option(options, "latestPerKey") is not None:
            raise OptionError("option latestPerKey is not valid in streaming queries: it reads "
                              "a compacted topic as a table, with spark.read only")
    check_known(options, set(SOURCE_OPTIONS), "source")
    client = client_config(kafka_params(options))
    poll_timeout_ms = _number(options, "kafkaConsumer.pollTimeoutMs", 120_000, minimum=1)
    retries = _number(options, "fetchOffset.numRetries", 3, minimum=0)
    retry_interval_ms = _number(options, "fetchOffset.retryIntervalMs", 1000, minimum=1)
    latest_per_key = _latest_per_key(options)
    return ReadOptions(
        subscription=_subscription(options),
        client=client,
        starting=_starting(options, streaming),
        ending=LatestOffsets() if streaming else _ending(options),
        fail_on_data_loss=parse_bool(options, "failOnDataLoss", True),
        include_headers=parse_bool(options, "includeHeaders", False),
        min_partitions=_positive(options, "minPartitions"),
        max_records_per_partition=_positive(options, "maxRecordsPerPartition"),
        max_offsets_per_trigger=_positive(options, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=_positive(options, "minOffsetsPerTrigger"),
        max_trigger_delay_s=parse_duration_s(options, "maxTriggerDelay", "15m"),
        driver_retry=RetryPolicy(
            client.default_api_timeout_s + retries * retry_interval_ms / 1000,
            retry_interval_ms / 1000, bootstrap_timeout_s=BOOTSTRAP_TIMEOUT_S),
        executor_retry=RetryPolicy(poll_timeout_ms / 1000, client.retry_backoff_s),
        group_id=get_option(options, "groupId") or get_option(options, "kafka.group.id") or None,
        latest_per_key=latest_per_key,
        typed=parse_typed_options(options),
    )


def _latest_per_key(options: Mapping[str, str]) -> bool:
    """``latestPerKey``, refused with the options that would split a partition's range."""
    if not parse_bool(options, "latestPerKey", False):
        return False
    for name in ("minPartitions", "maxRecordsPerPartition"):
        if get_option(options, name) is not None:
            raise OptionError(
                f"option {name} cannot be combined with latestPerKey: latestPerKey reduces "
                "each topic-partition in one task (a key's latest record may be anywhere in "
                f"its partition), and {name} would split partitions across tasks; remove "
                f"{name}")
    return True


def _subscription(options: Mapping[str, str]) -> Subscription:
    given = [name for name in _SUBSCRIPTIONS if get_option(options, name) is not None]
    if len(given) != 1:
        got = f", got {' and '.join(given)}" if given else ", got none"
        raise OptionError("exactly one of the options subscribe, subscribePattern, assign "
                          f"must be specified{got}")
    (name,) = given
    raw = get_option(options, name) or ""
    if name == "subscribe":
        topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
        if not topics:
            raise OptionError(f"option subscribe: no topics to subscribe to in {raw!r}; "
                              "expected a comma-separated list of topic names")
        return Subscription(name, topics=topics)
    if name == "subscribePattern":
        if not raw.strip():
            raise OptionError("option subscribePattern: the pattern is empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(f"option subscribePattern: {raw!r} is not a valid regular "
                              f"expression ({exc})") from None
        return Subscription(name, pattern=raw)
    return Subscription(name, assigned=tuple(parse_assign_option(raw)))


def _starting(options: Mapping[str, str], streaming: bool | None) -> OffsetSpec:
    strategy = (get_option(options, "startingOffsetsByTimestampStrategy") or "error").lower()
    if strategy not in ("error", "latest"):
        raise OptionError("option startingOffsetsByTimestampStrategy must be error or latest, "
                          f"got {strategy!r}")
    by_time = _by_timestamp(options, "startingTimestamp", "startingOffsetsByTimestamp",
                            latest_if_missing=strategy == "latest")
    if by_time is not None:
        return by_time
    spec = _offsets(options, "startingOffsets",
                    LatestOffsets() if streaming else EarliestOffsets())
    if streaming is False and (isinstance(spec, LatestOffsets) or (
            isinstance(spec, SpecificOffsets) and LATEST in spec.offsets.values())):
        raise OptionError("option startingOffsets: latest (-1) is not a valid start for batch "
                          "queries; allowed: earliest, or JSON offsets with -2 for earliest")
    return spec


def _ending(options: Mapping[str, str]) -> OffsetSpec:
    by_time = _by_timestamp(options, "endingTimestamp", "endingOffsetsByTimestamp",
                            latest_if_missing=True)
    if by_time is not None:
        return by_time
    spec = _offsets(options, "endingOffsets", LatestOffsets())
    if isinstance(spec, EarliestOffsets) or (
            isinstance(spec, SpecificOffsets) and EARLIEST in spec.offsets.values()):
        raise OptionError("option endingOffsets: earliest (-2) is not a valid end for batch "
                          "queries; allowed: latest, or JSON offsets with -1 for latest")
    return spec


def _offsets(options: Mapping[str, str], name: str, default: OffsetSpec) -> OffsetSpec:
    raw = get_option(options, name)
    if raw is None:
        return default
    word = raw.strip().lower()
    if word == "earliest":
        return EarliestOffsets()
    if word == "latest":
        return LatestOffsets()
    return SpecificOffsets(name, parse_offsets_option(name, raw))


def _by_timestamp(options: Mapping[str, str], global_name: str, per_partition_name: str,
                  latest_if_missing: bool) -> TimestampOffsets | None:
    timestamp = parse_int(options, global_name, None, minimum=0)
    if timestamp is not None:
        return TimestampOffsets(global_name, timestamp, None, latest_if_missing)
    raw = get_option(options, per_partition_name)
    if raw is not None:
        return TimestampOffsets(per_partition_name, None,
                                parse_timestamps_option(per_partition_name, raw),
                                latest_if_missing)
    return None


def _positive(options: Mapping[str, str], name: str) -> int | None:
    """A positive integer option, or None when not given."""
    return parse_int(options, name, None, minimum=1)


def _number(options: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    value = parse_int(options, name, default, minimum=minimum)
    assert value is not None
    return value
