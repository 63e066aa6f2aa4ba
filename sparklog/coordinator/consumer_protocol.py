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
- ``assigned_partitions`` reads a ``ConsumerProtocolAssignment`` (int16 version,
  assigned_partitions ``[(topic string, partitions [int32])]``, user_data; the same prefix in
  every version) for the broker's status page.
"""

from __future__ import annotations

from sparklog.protocol.data_records import DataSchema, Field, decode

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


def subscribed_topics(metadata: bytes) -> tuple[str, ...]:
    """The topics of a ``ConsumerProtocolSubscription`` (any version)."""
    _, subscription = decode(_SUBSCRIPTION_TOPICS, metadata, read_newer=True)
    return tuple(subscription.topics)


def assigned_partitions(assignment: bytes) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(topic, partitions) pairs of a ``ConsumerProtocolAssignment`` (any version)."""
    _, decoded = decode(_ASSIGNMENT_PARTITIONS, assignment, read_newer=True)
    return tuple((tp.topic, tuple(tp.partitions)) for tp in decoded.assigned_partitions)
