"""Receiving size-prefixed frames with one copy: an asyncio buffered protocol that receives
small frames through a staging buffer and a large frame straight into its own buffer.

Invariants:
- ``read_frame`` returns each frame's bytes after its size, in order, as a read-only
  ``memoryview`` of exactly that size (kio decodes read-only buffers only); None at a
  clean end of stream (no byte of a next frame received). A negative size, a size above
  ``max_size`` or an end of stream inside a frame raises ``FrameError`` (the connection
  cannot be resynchronised), once the frames before it are read; nothing after a bad size
  is parsed. A connection lost with an error raises that error the same way.
- The staging buffer is held only while bytes are staged: once every staged byte is split
  into frames, or the stream ends with none staged, it goes back to a small shared pool
  (``POOLED_STAGING`` buffers), and the next ``get_buffer`` of any connection takes one
  from there; an idle or closing connection holds no buffer (10,000 idle connections would
  otherwise pin 640 MiB, and 10,000 closed at once as much until their tasks end).
- Bytes are copied from the kernel once, into their frame's own buffer for a frame larger
  than the staging buffer (from its first bytes on: the ones already staged are copied
  once), else into the staging buffer, many frames per ``recv``, and then once out of it
  (an incomplete frame at the buffer's end may first be moved to its start).
  ``asyncio.StreamReader`` copies a 1 MB Produce request three times more (into its
  buffer, which grows by reallocation, then out of it twice).
- With ``keep_buffer``, the buffer of the last large frame is kept and received into again
  once no view of it is left (CPython's reference count says so): a follower fetching
  1 MB at a time allocates and zero-fills that buffer once, not for every answer (a
  quarter of its event loop's time). A connection keeps one such buffer, as large as its
  largest frame; without ``keep_buffer`` (a server's connections: many, mostly idle)
  none.
- Reading pauses while frames of ``BACKLOG_BYTES`` or more wait unread, and resumes when
  fewer do: a connection holds at most that backlog and its last frame, the staging buffer
  and one frame in progress (``asyncio.StreamReader`` pauses at 128 KiB buffered).
- Writes go through ``writer``, an ``asyncio.StreamWriter`` on this protocol (flow control
  and ``drain`` as with ``asyncio.start_server``).
"""

from __future__ import annotations

import asyncio
import struct
import sys
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from sparklog.protocol.framing import FrameError

STAGING_BYTES = 64 * 1024
POOLED_STAGING = 64
"""Staging buffers kept for reuse, at most: a connection holds one only while it has bytes
staged, so an idle connection costs none and a busy one allocates none."""
_POOL: list[bytearray] = []
BACKLOG_BYTES = 256 * 1024
_SIZE = struct.Struct(">i")

Connected = Callable[["FrameProtocol", asyncio.StreamWriter], Coroutine[Any, Any, None]]


class FrameProtocol(asyncio.streams.FlowControlMixin, asyncio.BufferedProtocol):
    """One connection's frames; ``connected(protocol, writer)`` runs as a task once the
    connection is made (a server's connection handler)."""

    def __init__(self, max_size: int, connected: Connected | None = None, *,
                 keep_buffer: bool = False) -> None:
        super().__init__()
        self._max_size = max_size
        self._keep_buffer = keep_buffer
        self._kept: bytearray | None = None
        self._connected = connected
        self._staging: bytearray | None = None  # taken from the pool while bytes are staged
        self._start = self._end = 0  # the staged bytes not yet split into frames
        self._frame: memoryview | None = None  # a large frame being received in place
        self._filled = 0
        self._frames: deque[bytearray | memoryview] = deque()
        self._backlog = 0  # bytes in _frames
        self._failure: BaseException | None = None
        self._eof = False
        self._reading_paused = False
        self._waiter: asyncio.Future[None] | None = None
        self._closed: asyncio.Future[None] = self._loop.create_future()
        self.transport: asyncio.Transport | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task[None] | None = None

    async def read_frame(self) -> memoryview | None:
        """The next frame's payload; None at a clean end of stream."""
        while not self._frames:
            if self._failure is not None:
                raise self._failure
            if self._eof:
                if self._frame is not None:
                    raise FrameError(f"end of stream after {self._filled} of "
                                     f"{len(self._frame)} bytes")
                staged = self._end - self._start
                if staged >= _SIZE.size and self._staging is not None:
                    (size,) = _SIZE.unpack_from(self._staging, self._start)
                    raise FrameError(f"end of stream after {staged - _SIZE.size} of {size} "
                                     "bytes")
                if staged:
                    raise FrameError("end of stream inside a frame size")
                return None
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        frame = self._frames.popleft()
        self._backlog -= len(frame)
        if self._reading_paused and self._backlog < BACKLOG_BYTES \
                and self.transport is not None:
            self._reading_paused = False
            self.transport.resume_reading()
        return memoryview(frame).toreadonly()

    # asyncio's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.writer = asyncio.StreamWriter(transport, self, None, self._loop)
        if self._connected is not None:
            self.task = self._loop.create_task(self._connected(self, self.writer))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return self._frame[self._filled:]
        if self._staging is None:
            try:
                self._staging = _POOL.pop()
            except IndexError:
                self._staging = bytearray(STAGING_BYTES)
        if self._start and len(self._staging) - self._end < STAGING_BYTES // 4:
            staged = self._end - self._start
            self._staging[:staged] = memoryview(self._staging)[self._start:self._end]
            self._start, self._end = 0, staged
        return memoryview(self._staging)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._failure is not None:  # after a bad size: nothing more is parsed
            return
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                frame, self._frame = self._frame, None
                self._deliver(frame)
            return
        self._end += nbytes
        self._split()

    def eof_received(self) -> bool:
        self._end_of_stream()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if exc is not None and self._failure is None:
            self._failure = exc
        self._end_of_stream()
        if not self._closed.done():
            self._closed.set_result(None)

    def _end_of_stream(self) -> None:
        """No more bytes: the staging buffer the transport took for its last ``recv`` (one
        that read the end of stream) goes back to the pool unless bytes are staged (a
        truncated frame, reported by ``read_frame``). Else every connection a burst of
        clients closes together would hold a buffer of its own until its task ends, and
        the memory freed then stays with the process (10,000 closed connections left the
        broker 600 MiB larger)."""
        self._eof = True
        if self._start == self._end:
            self._release_staging()
        self._wake()

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future[None]:
        return self._closed

    # framing

    def _split(self) -> None:
        staging = self._staging
        assert staging is not None
        while self._end - self._start >= _SIZE.size:
            (size,) = _SIZE.unpack_from(staging, self._start)
            if size < 0:
                return self._fail(FrameError(f"negative frame size {size}"))
            if size > self._max_size:
                return self._fail(FrameError(f"frame size {size} above the limit "
                                             f"{self._max_size}"))
            begin = self._start + _SIZE.size
            if self._end - begin >= size:
                self._start = begin + size
                self._deliver(staging[begin:self._start])
                continue
            if _SIZE.size + size > len(staging):  # too large to stage: received in place
                frame = self._large(size)
                self._filled = self._end - begin
                frame[:self._filled] = memoryview(staging)[begin:self._end]
                self._frame = frame
                self._start = self._end = 0
            break
        if self._start == self._end:
            self._start = self._end = 0
            self._release_staging()

    def _release_staging(self) -> None:
        """Nothing is staged: give the buffer back to the pool (an idle connection holds
        none)."""
        staging, self._staging = self._staging, None
        if staging is not None and len(_POOL) < POOLED_STAGING:
            _POOL.append(staging)

    def _large(self, size: int) -> memoryview:
        """A buffer of ``size`` bytes for a frame too large to stage: the kept one when no
        view of it is left (its only references: ``_kept`` and ``getrefcount``'s)."""
        if self._kept is not None and len(self._kept) >= size \
                and sys.getrefcount(self._kept) == 2:
            return memoryview(self._kept)[:size]
        buffer = bytearray(size)
        if self._keep_buffer:
            self._kept = buffer
        return memoryview(buffer)

    def _deliver(self, frame: bytearray | memoryview) -> None:
        self._frames.append(frame)
        self._backlog += len(frame)
        if self._backlog >= BACKLOG_BYTES and not self._reading_paused \
                and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()
        self._wake()

    def _fail(self, failure: FrameError) -> None:
        self._failure = failure
        self._start = self._end = 0
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
