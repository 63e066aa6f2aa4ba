"""Fetches waiting for data (Kafka's DelayedFetch purgatory): long polls, woken, never polling.

Invariants:
- ``wake(tp)`` resolves every wait registered on ``tp``; partitions call it when their log
  end or high watermark moves, and the replica manager when a replica goes away.
- A wait ends at its first wake or after its timeout, and leaves nothing registered behind.
- Everything runs on the broker's event loop.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

TopicPartition = tuple[str, int]


class FetchWaiters:
    def __init__(self) -> None:
        self._waiters: dict[TopicPartition, set[asyncio.Future[None]]] = defaultdict(set)

    def wake(self, tp: TopicPartition) -> None:
        for future in self._waiters.pop(tp, ()):
            if not future.done():
                future.set_result(None)

    async def wait(self, tps: Iterable[TopicPartition], timeout_s: float) -> None:
        """Return when any of ``tps`` is woken, or after ``timeout_s``."""
        if timeout_s <= 0:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(tps)
        for tp in keys:
            self._waiters[tp].add(future)
        try:
            await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            pass
        finally:
            for tp in keys:
                waiters = self._waiters.get(tp)
                if waiters is not None:
                    waiters.discard(future)
                    if not waiters:
                        del self._waiters[tp]
