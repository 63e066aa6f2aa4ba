"""A partition's leader-epoch cache and its ``leader-epoch-checkpoint`` file (KIP-101).

Invariants:
- Entries map each leader epoch to the first offset written in it; epochs and start offsets
  both increase. ``assign`` ignores an epoch not above the latest (a leader appending again
  in its own epoch), and replaces entries whose start offset it does not exceed.
- The file is Kafka's text format (a version line ``0``, a count line, then ``epoch offset``
  lines) written atomically on every change, so a crash leaves the old or the new cache.
- ``end_offset(epoch, log_end)`` is KIP-101's answer to OffsetForLeaderEpoch: the largest
  epoch <= the one asked for, and the start offset of the next epoch (the log end for the
  latest); (-1, -1) below the first epoch known.
- ``truncate_from_end(offset)`` drops what a log truncation to ``offset`` removed.
- The file is read when the entries are first asked for, not when the cache is made: a
  broker restarting with 100,000 partitions opens none of these files until a partition
  changes leader or answers OffsetForLeaderEpoch (a tenth of a restart was these reads).
"""

from __future__ import annotations

import os
from pathlib import Path

from sparklog.storage.checkpoint import write_atomically

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED = (-1, -1)


class LeaderEpochCache:
    __slots__ = ("_directory", "_entries")

    def __init__(self, directory: Path | str) -> None:
        self._directory = directory
        self._entries: list[tuple[int, int]] | None = None  # not read yet

    @property
    def path(self) -> Path:
        return Path(self._directory, FILE_NAME)

    @property
    def entries(self) -> list[tuple[int, int]]:
        entries = self._entries
        if entries is None:
            entries = self._entries = self._read()
        return entries

    @entries.setter
    def entries(self, entries: list[tuple[int, int]]) -> None:
        self._entries = entries

    def _read(self) -> list[tuple[int, int]]:
        try:  # one open, no stat first
            with open(os.path.join(self._directory, FILE_NAME), "rb") as file:
                lines = file.read().split(b"\n")
        except FileNotFoundError:
            return []
        count = int(lines[1])
        return [(int(e), int(o)) for e, o in (line.split() for line in lines[2:2 + count])]

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        if epoch <= self.latest_epoch:
            return
        self.entries = [(e, o) for e, o in self.entries if o < start_offset]
        self.entries.append((epoch, start_offset))
        self._save()

    def end_offset(self, epoch: int, log_end: int) -> tuple[int, int]:
        earlier = [i for i, (e, _) in enumerate(self.entries) if e <= epoch]
        if not earlier:
            return UNDEFINED
        i = earlier[-1]
        end = self.entries[i + 1][1] if i + 1 < len(self.entries) else log_end
        return self.entries[i][0], end

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch ``offset`` was written in (the latest starting at or before it), -1
        before every epoch known (Kafka's ``epochForOffset``)."""
        return next((e for e, o in reversed(self.entries) if o <= offset), -1)

    def truncate_from_end(self, offset: int) -> None:
        kept = [(e, o) for e, o in self.entries if o < offset]
        if kept != self.entries:
            self.entries = kept
            self._save()

    def _save(self) -> None:
        lines = ["0", str(len(self.entries)), *(f"{e} {o}" for e, o in self.entries)]
        write_atomically(self.path, ("\n".join(lines) + "\n").encode())
