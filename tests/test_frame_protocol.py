"""FrameProtocol: the frames a connection receives, however the bytes arrive, and its refusals."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.protocol.frame_protocol import BACKLOG_BYTES, STAGING_BYTES, FrameProtocol
from sparklog.protocol.framing import FrameError


class Transport(asyncio.Transport):
    """What the protocol calls on its transport: reading paused or not."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def is_closing(self) -> bool:
        return False


def frames(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">i", len(p)) + p for p in payloads)


def deliver(protocol: FrameProtocol, data: bytes, chunks: list[int]) -> None:
    """``data`` into the protocol as a transport would, ``chunks`` bytes per receive at
    most (cycled), never more than the buffer it asks for."""
    position, turn = 0, 0
    while position < len(data):
        buffer = protocol.get_buffer(-1)
        assert len(buffer) > 0
        size = min(len(buffer), chunks[turn % len(chunks)], len(data) - position)
        buffer[:size] = data[position:position + size]
        protocol.buffer_updated(size)
        position, turn = position + size, turn + 1


def run(test: Callable[[FrameProtocol, Transport], Awaitable[Any]],
        max_size: int = 1 << 24, *, keep_buffer: bool = False) -> Any:
    async def body() -> Any:
        protocol = FrameProtocol(max_size, keep_buffer=keep_buffer)
        transport = Transport()
        protocol.connection_made(transport)
        return await test(protocol, transport)
    return asyncio.run(body())


async def read_all(protocol: FrameProtocol) -> list[bytes | None]:
    read: list[bytes | None] = []
    while True:
        frame = await protocol.read_frame()
        read.append(None if frame is None else bytes(frame))
        if frame is None:
            return read


payload_sizes = st.one_of(st.integers(0, 300), st.integers(STAGING_BYTES - 8, STAGING_BYTES + 8),
                          st.integers(STAGING_BYTES, 3 * STAGING_BYTES))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(payload_sizes, max_size=12),
       chunks=st.lists(st.integers(1, 2 * STAGING_BYTES), min_size=1, max_size=5))
def test_every_frame_comes_out_whole_and_in_order_however_the_bytes_arrive(
        sizes: list[int], chunks: list[int]) -> None:
    payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]

    async def test(protocol: FrameProtocol, _: Transport) -> list[bytes | None]:
        deliver(protocol, frames(*payloads), chunks)
        protocol.eof_received()
        return await read_all(protocol)

    assert run(test) == [*payloads, None]


def test_a_frame_is_a_read_only_view_of_exactly_its_bytes() -> None:
    async def test(protocol: FrameProtocol, _: Transport) -> memoryview | None:
        deliver(protocol, frames(b"abc"), [1 << 20])
        return await protocol.read_frame()

    frame = run(test)
    assert frame is not None and frame.readonly and bytes(frame) == b"abc"


@pytest.mark.parametrize(("data", "message"), [
    (struct.pack(">i", 101) + b"x" * 101, "frame size 101 above the limit 100"),
    (struct.pack(">i", -1), "negative frame size -1"),
    (struct.pack(">i", 10) + b"short", "end of stream after 5 of 10 bytes"),
    (b"\x00\x00", "end of stream inside a frame size"),
])
def test_refuses_what_cannot_be_a_frame_after_the_frames_before_it(data: bytes,
                                                                   message: str) -> None:
    async def test(protocol: FrameProtocol, _: Transport) -> tuple[bytes, str]:
        deliver(protocol, frames(b"first") + data, [7])
        protocol.eof_received()
        first = await protocol.read_frame()
        with pytest.raises(FrameError) as refused:
            await protocol.read_frame()
        return bytes(first or b""), str(refused.value)

    assert run(test, max_size=100) == (b"first", message)


def test_a_large_frame_cut_by_the_end_of_stream_says_how_much_arrived() -> None:
    async def test(protocol: FrameProtocol, _: Transport) -> str:
        deliver(protocol, frames(b"x" * (3 * STAGING_BYTES))[:2 * STAGING_BYTES], [1000])
        protocol.eof_received()
        with pytest.raises(FrameError) as refused:
            await protocol.read_frame()
        return str(refused.value)

    assert run(test) == f"end of stream after {2 * STAGING_BYTES - 4} of {3 * STAGING_BYTES} bytes"


def test_reading_pauses_while_a_backlog_waits_and_resumes_when_read() -> None:
    half = b"h" * (BACKLOG_BYTES // 2)

    async def test(protocol: FrameProtocol, transport: Transport) -> list[bool]:
        deliver(protocol, frames(half, b"x" * 10), [1 << 20])
        seen = [transport.paused]
        deliver(protocol, frames(half), [1 << 20])  # now the backlog's worth waits unread
        seen.append(transport.paused)
        await protocol.read_frame()
        seen.append(transport.paused)
        await protocol.read_frame()
        return [*seen, transport.paused]

    assert run(test) == [False, True, False, False]


def test_a_lost_connection_raises_its_error_after_the_frames_received_before_it() -> None:
    async def test(protocol: FrameProtocol, _: Transport) -> bytes:
        deliver(protocol, frames(b"kept"), [1 << 20])
        protocol.connection_lost(ConnectionResetError("reset by peer"))
        kept = await protocol.read_frame()
        with pytest.raises(ConnectionResetError):
            await protocol.read_frame()
        return bytes(kept or b"")

    assert run(test) == b"kept"


def test_a_reader_waiting_for_a_frame_wakes_when_it_arrives() -> None:
    async def test(protocol: FrameProtocol, _: Transport) -> bytes:
        waiting = asyncio.ensure_future(protocol.read_frame())
        await asyncio.sleep(0)
        assert not waiting.done()
        deliver(protocol, frames(b"late"), [2])
        return bytes(await waiting or b"")

    assert run(test) == b"late"


def test_a_kept_buffer_is_received_into_again_only_once_no_frame_uses_it() -> None:
    large = 2 * STAGING_BYTES
    first, second, third = b"1" * large, b"2" * large, b"3" * (large - 10)

    async def test(protocol: FrameProtocol, _: Transport) -> tuple[bool, bool, bytes, bytes]:
        deliver(protocol, frames(first), [1 << 20])
        held = await protocol.read_frame()
        assert held is not None
        deliver(protocol, frames(second), [1 << 20])  # arrives while ``held`` is in use
        other = await protocol.read_frame()
        assert other is not None
        shared = other.obj is held.obj
        intact = bytes(held) == first
        del held, other
        deliver(protocol, frames(third), [1 << 20])
        again = await protocol.read_frame()
        assert again is not None
        return shared, intact, bytes(again), len(again.obj) == large  # the kept buffer

    shared, intact, third_read, reused = run(test, keep_buffer=True)
    assert (shared, intact, third_read) == (False, True, third)
    assert reused
