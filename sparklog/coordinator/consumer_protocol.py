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
"""

from __future__ import annotations

from sparklog.coordinator.binary import Reader

PROTOCOL_TYPE = "consumer"


def subscribed_topics(metadata: bytes) -> tuple[str, ...]:
    """The topics of a ``ConsumerProtocolSubscription`` (any version)."""
    reader = Reader(metadata)
    reader.int16()
    return tuple(reader.string() for _ in range(reader.count()))
