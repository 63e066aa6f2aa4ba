"""The data directory's ``.lock``: one broker per data directory, as Kafka's ``FileLock``.

Invariants:
- ``lock_data_dir`` checks the path before creating anything: a path that exists and is not
  a directory, or a directory that cannot be created or written, raises ``DataDirError``
  naming it and the cause; nothing is written then.
- The lock is an exclusive POSIX record lock (``fcntl.lockf``, what Java's
  ``FileChannel.tryLock`` takes on Linux) on ``<data dir>/.lock``, taken without waiting:
  a directory another process holds raises ``DataDirError`` at once, before any other file
  of the directory is read or written. The operating system releases the lock when the
  holder exits, however it exits, so a crash never leaves a stale lock behind.
- POSIX locks belong to the process: a second ``LogManager`` of the same process (a test
  reopening a directory it "crashed") is not refused, as a second process is.
- ``lock_holder`` names the process holding a data directory's lock (``F_GETLK``), however
  it was started: what finds a broker by its data directory.
- Nothing of sparklog is imported here but the module path.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from pathlib import Path

LOCK_FILE = ".lock"
_FLOCK = "@hhqqi"
"""Linux's ``struct flock``: type, whence, start, length, pid (then padding to 32 bytes)."""


class DataDirError(Exception):
    """The data directory cannot be used; the message names it and says why."""


class DataDirLock:
    """A held lock on a data directory; ``release`` (idempotent) lets it go."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the record lock
            self._fd = None


def lock_data_dir(data_dir: Path) -> DataDirLock:
    """Create ``data_dir`` if needed and lock it (see the module invariants)."""
    if data_dir.exists() and not data_dir.is_dir():
        raise DataDirError(f"data directory {data_dir} is not a directory")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        path = data_dir / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise DataDirError(f"data directory {data_dir} cannot be used: "
                           f"{exc.strerror or exc}") from None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EACCES, errno.EAGAIN):
            raise DataDirError(
                f"data directory {data_dir} is in use by another broker (its {LOCK_FILE} is "
                "locked); stop that broker or choose another --data-dir") from None
        raise DataDirError(f"cannot lock {path}: {exc.strerror or exc}") from None
    return DataDirLock(fd, path)


def lock_holder(data_dir: Path) -> int | None:
    """The pid of the process (a broker) holding ``data_dir``'s lock, or None."""
    try:
        fd = os.open(data_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0).ljust(32, b"\0")
        kind, _, _, _, pid = struct.unpack_from(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    finally:
        os.close(fd)
    return pid if kind != fcntl.F_UNLCK and pid > 0 else None
