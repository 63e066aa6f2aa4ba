"""Warnings of one kind, rate-limited: at most ``burst`` lines per window, then one summary.

Many clients misbehaving at once (200 half-open connections, a port scanner, a client
stuck in a reconnect loop) must not flood the log with one WARNING per connection.

Invariants:
- In each window of ``window_s`` seconds, starting at its first warning, the first ``burst``
  warnings are logged as given; later ones are only counted, and when the window ends one
  WARNING says how many were not logged and quotes the last of them. Every warning is
  either logged or counted in exactly one summary: ``flush`` (called at stop) writes the
  pending summary at once.
- It runs on the broker's event loop thread (the summary is a ``call_later`` on it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any


class WarningLimiter:
    def __init__(self, logger: logging.Logger, kind: str, *, burst: int = 5,
                 window_s: float = 10.0) -> None:
        self._log = logger
        self._kind = kind
        self._burst = burst
        self._window_s = window_s
        self._window_end = 0.0
        self._logged = 0
        self._suppressed = 0
        self._last = ""
        self._timer: asyncio.TimerHandle | None = None

    def warning(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now >= self._window_end:
            self.flush()
            self._window_end = now + self._window_s
            self._logged = 0
        if self._logged < self._burst:
            self._logged += 1
            self._log.warning(message, *args)
            return
        self._suppressed += 1
        self._last = message % args
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                self._window_end - now, self.flush)

    def flush(self) -> None:
        """Log the pending summary now, if any warning was held back."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._suppressed:
            self._log.warning("%d more %s in the last %.0f s were not logged one by one; "
                              "the last: %s", self._suppressed, self._kind, self._window_s,
                              self._last)
            self._suppressed = 0
