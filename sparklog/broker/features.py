"""The feature levels the broker supports and has finalized (KIP-584), as ApiVersions v3+
reports them.

Invariants:
- ``SUPPORTED`` maps a feature name to the (min, max) levels this broker implements;
  ``FINALIZED`` to the level in force in the cluster, which clients read to choose the
  protocol they speak (Kafka 4's clients use transactions v2, KIP-890, only when
  ``transaction.version`` is finalized at 2, and the consumer group protocol, KIP-848,
  when ``group.version`` is at 1). A level is finalized here only once the broker
  implements it: every broker of a cluster runs the same code, so the cluster's levels are
  this broker's.
- Level 0 of a feature is "off": it is supported by every broker and never listed as
  finalized (Kafka lists only levels above 0).
"""

from __future__ import annotations

SUPPORTED: dict[str, tuple[int, int]] = {
    "transaction.version": (0, 2),
    "group.version": (0, 1),
}
FINALIZED: dict[str, int] = {name: high for name, (_, high) in SUPPORTED.items() if high > 0}
FINALIZED_EPOCH = 0
"""The finalized levels never change while a broker runs: one epoch."""
