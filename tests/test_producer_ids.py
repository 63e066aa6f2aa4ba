"""Producer ids: blocks persisted on a single node, taken from ZooKeeper in a cluster.

What a user relies on: no producer id is handed out twice, across restarts and between
brokers; in a cluster the block is fetched off the event loop (a ZooKeeper round trip never
stalls the broker's other requests), once for callers that run out of ids together.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from sparklog.broker.replication.local_store import PRODUCER_ID_FILE, next_producer_id_block
from sparklog.broker.state import PRODUCER_ID_BLOCK, ProducerIdManager


def test_ids_are_not_reused_after_a_restart(tmp_path: Path) -> None:
    async def take(count: int) -> list[int]:
        async def allocate(size: int) -> tuple[int, int]:
            return next_producer_id_block(tmp_path / PRODUCER_ID_FILE, size)

        ids = ProducerIdManager(allocate)
        return [await ids.next_id() for _ in range(count)]

    first = asyncio.run(take(3))
    second = asyncio.run(take(3))
    assert first == [0, 1, 2]
    assert second == [PRODUCER_ID_BLOCK, PRODUCER_ID_BLOCK + 1, PRODUCER_ID_BLOCK + 2]


def test_cluster_blocks_are_fetched_off_the_loop_once(tmp_path: Path) -> None:
    fetched: list[str] = []
    release = threading.Event()

    def allocate(size: int) -> tuple[int, int]:  # ZooKeeper's compare-and-set, slowly
        fetched.append(threading.current_thread().name)
        release.wait(5)
        start = 5000 * len(fetched)
        return start, start + size

    async def run() -> tuple[list[int], bool]:
        loop = asyncio.get_running_loop()
        ids = ProducerIdManager(lambda size: loop.run_in_executor(None, allocate, size))
        callers = [asyncio.ensure_future(ids.next_id()) for _ in range(3)]
        await asyncio.sleep(0.05)
        loop_free = not any(c.done() for c in callers)  # the loop ran on while fetching
        release.set()
        return list(await asyncio.gather(*callers)), loop_free

    taken, loop_free = asyncio.run(run())
    assert loop_free
    assert sorted(taken) == [5000, 5001, 5002]
    assert len(fetched) == 1 and fetched[0] != threading.main_thread().name
