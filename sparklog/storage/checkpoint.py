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

import ctypes
import ctypes.util
import os
from collections.abc import Callable, Mapping
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


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` durably: temp file, fsync, rename, fsync the directory.
    With ``sync`` False the fsyncs are left to the caller's ``sync_filesystem`` (many files
    written at once, then one barrier: a clean shutdown)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:  # a full disk: the old file stays whole, and no partial temp file
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_directory(path.parent)


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        return libc.syncfs  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_SYNCFS = _load_syncfs()


def sync_filesystem(directory: Path) -> None:
    """Write back everything written to the filesystem holding ``directory`` (syncfs(2);
    sync(2) where there is none) and wait for it: one barrier for thousands of files.
    A write-back that failed (a full disk, EIO) raises ``OSError``, as an fsync would."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        if _SYNCFS is None:
            os.sync()
        elif _SYNCFS(fd) != 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), os.fspath(directory))
    finally:
        os.close(fd)


def fsync_directory(directory: Path) -> None:
    """Make the renames and creations done in ``directory`` durable."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
