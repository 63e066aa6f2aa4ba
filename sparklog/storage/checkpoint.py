"""Offset checkpoint files in Kafka's text format, written atomically.

Format (as Kafka's ``recovery-point-offset-checkpoint`` and ``log-start-offset-checkpoint``)::

    0                      <- version
    2                      <- entry count
    topic-a 0 1234         <- topic, partition, offset
    topic-a 1 99

Invariant: a checkpoint is replaced by write-to-temp, fsync, rename, so a reader sees the old
file or the new one, never a torn one; an unreadable file reads as empty (offsets then fall
back to a full recovery, which is always safe). A write that fails (a full disk) leaves the
old file as it was and removes its partial temp file before the error propagates.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

TopicPartition = tuple[str, int]


def write_checkpoint(path: Path, offsets: Mapping[TopicPartition, int]) -> None:
    lines = ["0", str(len(offsets))]
    lines += [f"{topic} {partition} {offset}" for (topic, partition), offset in
              sorted(offsets.items())]
    write_atomically(path, ("\n".join(lines) + "\n").encode())


def read_checkpoint(path: Path) -> dict[TopicPartition, int]:
    try:
        lines = path.read_text().split("\n")
        if lines[0] != "0":
            return {}
        count = int(lines[1])
        out: dict[TopicPartition, int] = {}
        for line in lines[2 : 2 + count]:
            topic, partition, offset = line.split(" ")
            out[(topic, int(partition))] = int(offset)
        return out if len(out) == count else {}
    except (OSError, ValueError, IndexError):
        return {}


def write_atomically(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably: temp file, fsync, rename, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:  # a full disk: the old file stays whole, and no partial temp file
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make the renames and creations done in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
