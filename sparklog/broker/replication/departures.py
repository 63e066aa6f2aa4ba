"""The brokers a cluster broker's Metadata answers list: the live ones, and a broker that
just left the cluster for ``LISTED_AFTER_LEAVING_S`` more.

Why: librdkafka (2.5 and later) decommissions a broker as soon as a Metadata answer stops
listing it. A leader's death shows in one answer twice, its partitions led by another
broker and itself gone, and librdkafka's thread of the gone broker then undoes the move:
the partition falls back to "no leader" until the client's next one-second scan of
leaderless partitions, so each failover cost its producers one second more. Listed a little
longer, the broker is decommissioned by a later answer, after its partitions moved. Kafka
lists live brokers only; a client that connects to a just-departed broker in that window
is refused at once, as it already was while the broker's session had not yet expired.

Invariants:
- Only Metadata's broker list uses ``listed``; everything else (offline replicas, ISR
  expansion, elections, endpoints of leaders) uses the live brokers.
- A broker that registers again is live, whatever it left behind; a departure is forgotten
  once its time is up.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sparklog.cluster.layout import BrokerInfo

LISTED_AFTER_LEAVING_S = 3.0
"""Covers the election after a broker's session expired (tens of milliseconds) and a
librdkafka client's next one-second scan that finds the new leaders."""


class Departures:
    def __init__(self, listed_for_s: float = LISTED_AFTER_LEAVING_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.listed_for_s = listed_for_s
        self.clock = clock
        self._until: dict[int, tuple[BrokerInfo, float]] = {}

    def update(self, before: dict[int, BrokerInfo], after: dict[int, BrokerInfo]) -> None:
        """Live brokers changed from ``before`` to ``after``."""
        until = self.clock() + self.listed_for_s
        for broker_id, info in before.items():
            if broker_id not in after:
                self._until[broker_id] = (info, until)
        for broker_id in after:
            self._until.pop(broker_id, None)

    def listed(self, live: dict[int, BrokerInfo]) -> dict[int, BrokerInfo]:
        """``live`` and the brokers that left less than ``listed_for_s`` ago (``live``
        itself when none did: every Metadata answer asks)."""
        now = self.clock()
        for broker_id in [b for b, (_, until) in self._until.items() if until <= now]:
            del self._until[broker_id]
        if not self._until:
            return live
        return {**{b: info for b, (info, _) in self._until.items()}, **live}
