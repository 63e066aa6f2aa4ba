"""One log line for the coordinator partitions a broker loads together.

Invariants:
- A broker becomes the leader of many internal-topic partitions at once (every partition of
  ``__consumer_offsets`` and ``__transaction_state`` at a single node's start): each load is
  logged at DEBUG by its coordinator, and ``CoordinatorLoads`` logs one INFO line for the
  loads that came within ``QUIET_S`` of one another, naming how many partitions of each
  topic were loaded and how many groups and transactional ids the coordinators then serve.
- Without a running event loop (a unit test loading by hand) the line is logged at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable

log = logging.getLogger(__name__)

QUIET_S = 0.5


class CoordinatorLoads:
    """Counts loads per internal topic and logs them as one line once they pause.

    ``served`` gives the line's tail: what the coordinators serve after the loads."""

    def __init__(self, served: Callable[[], str]) -> None:
        self._served = served
        self._loaded: Counter[str] = Counter()
        self._timer: asyncio.TimerHandle | None = None

    def loaded(self, topic: str) -> None:
        self._loaded[topic] += 1
        if self._timer is not None:
            self._timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._log()
            return
        self._timer = loop.call_later(QUIET_S, self._log)

    def _log(self) -> None:
        self._timer = None
        partitions = ", ".join(f"{count} of {topic}" for topic, count in sorted(
            self._loaded.items()))
        self._loaded.clear()
        log.info("coordinators loaded partitions %s: %s", partitions, self._served())
