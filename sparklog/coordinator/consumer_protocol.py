"""The "consumer" embedded protocol: the subscription members put in JoinGroup metadata.

Format (Kafka's ``ConsumerProtocolSubscription``, non-flexible, versions 0-3): int16 version,
topics ``[string]``, user_data ``nullable bytes``; v1 adds owned_partitions
``[(topic string, partitions [int32])]``, v2 generation_id ``int32``, v3 rack_id
``nullable string``.

Invariants:
- Parsing is forward compatible as in Kafka: a newer version is read by its known prefix, so
  only the version and the topics are required and everything after them is ignored.
- The coordinator only needs the subscribed topic names (to rebalance when one of them gains
  partitions); it relays assignments unchanged. Bytes that do not parse raise ``ValueError``.
- ``subscription`` reads the whole subscription (a classic member of a consumer group is
  served from it) and ``assignment_bytes`` writes an assignment (its SyncGroup answer).
- ``assigned_partitions`` reads a ``ConsumerProtocolAssignment`` (int16 version,
  assigned_partitions ``[(topic string, partitions [int32])]``, user_data; the same prefix in
  every version) for the broker's status page.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from sparklog.protocol.data_records import DataSchema, Field, decode

_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")

PROTOCOL_TYPE = "consumer"

# The topics are all the coordinator reads: each version is read as its first field, which
# is what "read by its known prefix" means for every version, older or newer.
_SUBSCRIPTION_TOPICS = DataSchema("ConsumerProtocolSubscription", (
    Field("topics", "[]string"),
), newest=0)


_TOPIC_PARTITION = DataSchema("TopicPartition", (
    Field("topic", "string"),
    Field("partitions", "[]int32"),
))
_ASSIGNMENT_PARTITIONS = DataSchema("ConsumerProtocolAssignment", (
    Field("assigned_partitions", struct=_TOPIC_PARTITION),
), newest=0)


_SUBSCRIPTION = DataSchema("ConsumerProtocolSubscription", (
    Field("topics", "[]string"),
    Field("user_data", "bytes", nullable_from=0),
    Field("owned_partitions", struct=_TOPIC_PARTITION, first=1),
    Field("generation_id", "int32", first=2),
    Field("rack_id", "string", first=3, nullable_from=3),
), newest=3)


def subscription(metadata: bytes) -> tuple[int, tuple[str, ...], dict[str, frozenset[int]],
                                           str | None]:
    """(version, topics, owned partitions by topic, rack) of a subscription (any version;
    a v0 subscription owns nothing: its eager client revoked everything before joining)."""
    version, decoded = decode(_SUBSCRIPTION, metadata, read_newer=True)
    owned: dict[str, frozenset[int]] = {}
    for tp in getattr(decoded, "owned_partitions", ()):
        owned[tp.topic] = owned.get(tp.topic, frozenset()) | frozenset(tp.partitions)
    return version, tuple(decoded.topics), owned, getattr(decoded, "rack_id", None)


def assignment_bytes(version: int, partitions: Mapping[str, frozenset[int]]) -> bytes:
    """A ``ConsumerProtocolAssignment`` of ``version`` (0-3: the same layout), no user data."""
    out = bytearray(_INT16.pack(min(max(version, 0), 3)))
    out += _INT32.pack(len(partitions))
    for topic, numbers in sorted(partitions.items()):
        name = topic.encode()
        out += _INT16.pack(len(name)) + name + _INT32.pack(len(numbers))
        out += b"".join(_INT32.pack(p) for p in sorted(numbers))
    return bytes(out + _INT32.pack(-1))


def subscribed_topics(metadata: bytes) -> tuple[str, ...]:
    """The topics of a ``ConsumerProtocolSubscription`` (any version)."""
    _, subscription = decode(_SUBSCRIPTION_TOPICS, metadata, read_newer=True)
    return tuple(subscription.topics)


def assigned_partitions(assignment: bytes) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(topic, partitions) pairs of a ``ConsumerProtocolAssignment`` (any version)."""
    _, decoded = decode(_ASSIGNMENT_PARTITIONS, assignment, read_newer=True)
    return tuple((tp.topic, tuple(tp.partitions)) for tp in decoded.assigned_partitions)
