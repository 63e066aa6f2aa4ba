"""What a write task reports to the driver, in a module that imports nothing heavy: Spark
unpickles the messages in a fresh Python process for every micro-batch's commit, and the
class of a pickled object is imported with it.

Invariants:
- A ``SinkCommitMessage`` counts only records the broker acknowledged; with exactly-once it
  names the task's open transaction, which holds all of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import WriterCommitMessage

if TYPE_CHECKING:
    from sparklog.datasource.write.commit_intents import SinkTransaction


@dataclass(frozen=True)
class SinkCommitMessage(WriterCommitMessage):
    """What one write task sent: every record counted here was acknowledged by the broker."""

    records: int
    bytes: int
    """Key and value bytes (headers not counted)."""
    transaction: SinkTransaction | None = None
    """With exactly-once: the task's open transaction, holding all of its records."""
