"""Broker-wide totals sampled every few seconds over the last minutes: the status page's
produce and consume chart.

Invariants:
- ``sample`` runs on the broker's event loop thread (a task of the listener), like
  ``samples``, which returns a copy; a sample is (time ms, messages in, bytes in, bytes out),
  each cumulative since the broker started, and only the newest ``capacity`` are kept.
- Rates are derived from consecutive samples by the reader, so a late sample widens one
  interval and loses nothing. A deleted topic's counts leave the totals (its logs are gone);
  a reader shows such a drop as a rate of 0.
"""

from __future__ import annotations

from collections import deque

from sparklog.broker.monitoring.requests import RequestMetrics
from sparklog.broker.monitoring.status import Broker

Sample = tuple[int, int, int, int]

INTERVAL_S = 5.0
CAPACITY = 73  # six minutes of intervals, so the last five are always covered


class RateHistory:
    def __init__(self, broker: Broker, requests: RequestMetrics,
                 capacity: int = CAPACITY) -> None:
        self._broker = broker
        self._requests = requests
        self._samples: deque[Sample] = deque(maxlen=capacity)

    def sample(self) -> None:
        messages = bytes_in = 0
        for log in self._broker.logs.logs.values():
            messages += log.appended_records
            bytes_in += log.appended_bytes
        self._samples.append((self._broker.now_ms(), messages, bytes_in,
                              self._requests.bytes_out_total()))

    def samples(self) -> tuple[Sample, ...]:
        return tuple(self._samples)
