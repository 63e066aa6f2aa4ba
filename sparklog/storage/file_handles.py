"""Open segment files, a bounded number at a time: one process-wide LRU cache of the
descriptors and index maps segments hold, so partitions are not bounded by the process's
file descriptor limit.

A segment's ``.log``, ``.index``, ``.timeindex`` and ``.txnindex`` are each a ``CachedFile``
(or an index map registered the same way): opened when first used, kept while recently used
(the active segments of recently written partitions, the segments recently read), closed
when the cache needs the room.

Invariants:
- The cache holds at most ``capacity`` open files (``OPEN_FILES.capacity``, set by the
  log manager from ``log.open.files.max``); opening one more evicts the least recently
  used. Every use of a file (``CachedFile.handle``, ``touch``) makes it the most recent.
- Eviction and ``close`` only drop the owner's reference; the descriptor (``Descriptor``)
  or map is released by CPython's reference counting when its last user lets go. A
  ``FileSlice`` on its way out with ``sendfile``, or a reader thread in the middle of a
  binary search over an index map, holds its own reference: the file stays open (pinned)
  until it is done, and its descriptor number is never reused under it. Callers therefore
  keep the ``Descriptor`` in a local variable for the length of a system call, and never
  keep a bare descriptor number. Descriptors held past the cache that way are bounded
  too: a reader asks ``may_pin`` before keeping one beyond the call (a Fetch answer's
  ``sendfile``), and copies the bytes instead past ``capacity`` such descriptors.
- A file written through a ``CachedFile`` is marked dirty until fsynced; ``sync`` fsyncs
  only a dirty file (reopening it if it was evicted: Linux's fsync writes back an inode's
  pages whichever descriptor wrote them), so flushing an idle partition opens nothing.
- Thread safety: the event loop, the log cleaner and the segment flusher all open files;
  the cache's bookkeeping is under one lock, and eviction is a reference drop, safe from
  any thread.
- Opening a file that fails with EMFILE or ENFILE (descriptors taken by connections)
  evicts half the cache and tries once more before the error is raised.
"""

from __future__ import annotations

import errno
import mmap
import os
import resource
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

DEFAULT_CAPACITY = 1024
PARTITIONS_PER_DESCRIPTOR = 10
"""The default partition budget (``max.broker.partitions`` -1): this many partitions per
descriptor of the process's limit. A partition at rest costs no descriptor, but each
written one reopens its active segment's files when the cache evicted them, and each costs
memory: a broker with far more partitions than descriptors thrashes the cache."""
CACHE_SHARE = 4
"""The default cache size (``log.open.files.max`` -1): a quarter of the descriptor limit;
the rest is for connections, the listeners, ZooKeeper and the broker's other files."""


class Descriptor:
    """An open descriptor, closed when the last reference to this object goes."""

    __slots__ = ("fd",)
    alive = 0
    """Descriptors open now, held by the cache or by readers (a count, not locked: a hint)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        Descriptor.alive += 1

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        type(self).alive -= 1  # (no module globals: they may be gone at interpreter exit)
        _close(self.fd)


class Evictable(Protocol):
    def evict(self) -> None:
        """Drop the owner's reference to its open file."""


class OpenFiles:
    """The LRU of open files (module docstring)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._lru: OrderedDict[Evictable, None] = OrderedDict()
        self._lock = threading.Lock()
        self.opened = 0  # files opened since start (a reopen after eviction counts)
        self.evicted = 0
        self.descriptors = 0  # of the files held, the ``CachedFile`` descriptors

    def may_pin(self) -> bool:
        """Whether a reader may keep one more descriptor open past the cache (a Fetch's
        ``sendfile`` of a slice): descriptors the cache let go of but readers still hold
        stay under ``capacity``. Past that a reader copies its bytes now instead, so one
        Fetch of thousands of partitions cannot hold thousands of descriptors."""
        return Descriptor.alive - self.descriptors < self.capacity

    def __len__(self) -> int:
        return len(self._lru)

    def touch(self, owner: Evictable) -> None:
        """``owner`` holds an open file, used now."""
        lru = self._lru
        try:  # the common case, one call into C (atomic under the GIL): no lock taken
            lru.move_to_end(owner)
            return
        except KeyError:
            pass
        with self._lock:
            if owner in lru:
                lru.move_to_end(owner)
                return
            lru[owner] = None
            self.opened += 1
            doomed = [lru.popitem(last=False)[0] for _ in range(len(lru) - self.capacity)]
            self.evicted += len(doomed)
        for victim in doomed:
            victim.evict()

    def forget(self, owner: Evictable) -> None:
        """``owner`` closed its file itself."""
        with self._lock:
            self._lru.pop(owner, None)

    def shrink(self, keep: int) -> None:
        """Evict all but the ``keep`` most recently used files."""
        with self._lock:
            doomed = [self._lru.popitem(last=False)[0]
                      for _ in range(max(len(self._lru) - keep, 0))]
            self.evicted += len(doomed)
        for victim in doomed:
            victim.evict()

    def open(self, path: os.PathLike[str] | str, flags: int, mode: int = 0o644) -> int:
        """``os.open``, making room in the cache first when descriptors have run out."""
        try:
            return os.open(path, flags, mode)
        except OSError as exc:
            if exc.errno not in (errno.EMFILE, errno.ENFILE):
                raise
        self.shrink(len(self._lru) // 2)
        return os.open(path, flags, mode)

    def map(self, path: os.PathLike[str] | str, size: int) -> mmap.mmap:
        """A read-only map of the first ``size`` bytes of ``path`` (its descriptor is the
        map's own: closed with the map)."""
        fd = self.open(path, os.O_RDONLY)
        try:
            return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)


def raise_descriptor_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as far as the kernel allows) and
    return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        for target in (hard, _nr_open(), 1 << 20):
            if target == resource.RLIM_INFINITY or target <= soft:
                continue
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            except (ValueError, OSError):
                continue
            soft = target
            break
    return soft


def _nr_open() -> int:
    """The kernel's cap on a process's descriptors (an infinite hard limit stops there)."""
    try:
        return int(Path("/proc/sys/fs/nr_open").read_text())
    except (OSError, ValueError):
        return 1 << 20


def open_descriptors() -> int:
    """Descriptors the process has open now (-1 where the count is not available)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # the listing's own
    except OSError:
        return -1


OPEN_FILES = OpenFiles()
"""The process's cache: descriptors are a process-wide resource."""


class NamedFile:
    """A file by its directory (a string the partition's files share) and its name: one
    small string per file rather than a ``Path`` object each (a third of an idle
    partition's memory went to those)."""

    __slots__ = ("directory", "name")

    def __init__(self, directory: str | Path, name: str) -> None:
        self.directory = directory
        self.name = name

    @property
    def path(self) -> Path:
        return Path(self.directory, self.name)

    @property
    def where(self) -> str:
        """The path as a string: what system calls take, cheaper to build than ``path``."""
        return os.path.join(self.directory, self.name)

    def _moved(self, path: Path) -> None:
        """The file was renamed to ``path``."""
        if os.fspath(path.parent) != os.fspath(self.directory):
            self.directory = os.fspath(path.parent)
        self.name = path.name


class CachedFile:
    """One file, opened on demand through ``OPEN_FILES`` with ``flags``; ``path`` a plain
    string (a ``Path`` object costs several times its length)."""

    __slots__ = ("_handle", "dirty", "flags", "path")

    def __init__(self, path: str, flags: int) -> None:
        self.path = path
        self.flags = flags
        self.dirty = False
        self._handle: Descriptor | None = None

    def handle(self) -> Descriptor:
        """The open descriptor (opened now if need be); keep it in a local variable while
        a system call uses its number."""
        handle = self._handle
        if handle is None:
            handle = self._handle = Descriptor(OPEN_FILES.open(self.path, self.flags))
            OPEN_FILES.descriptors += 1
        OPEN_FILES.touch(self)
        return handle

    @property
    def is_open(self) -> bool:
        return self._handle is not None

    def evict(self) -> None:
        if self._handle is not None:
            self._handle = None
            OPEN_FILES.descriptors -= 1

    def close(self) -> None:
        """Release the file (a pending user keeps it open until it is done)."""
        OPEN_FILES.forget(self)
        self.evict()

    def sync(self) -> None:
        """fsync what was written since the last sync (nothing to do when clean)."""
        if self.dirty:
            handle = self.handle()
            self.dirty = False  # before: a write meanwhile marks it again
            os.fsync(handle.fd)
