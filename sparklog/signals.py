"""One way to stop on SIGTERM or SIGINT (Ctrl-C), for every long-running part of sparklog: the
command-line tools, the consumer loop, the jobs, and the broker (through asyncio).

Invariants:
- A ``Stop`` is a request to stop that the code polls (``requested``) between two steps, so
  a unit of work (a record, a batch) is never half done. ``request()`` only records it and
  calls ``on_request``: it is safe from any thread and from a signal handler.
- While a ``Stop`` is installed (``install`` ... ``restore``, or the ``stop_on_signals``
  block), the first SIGINT or SIGTERM requests it (``signal`` names which), and a blocking
  call made through ``wait`` returns None at once; ``wait`` does not start the call once a
  stop was requested, so a signal just before it is not missed. Nothing else is interrupted.
- That first signal puts back the handlers that were there before, so a second one does what
  it would have done without us (Python's default: KeyboardInterrupt for SIGINT, the end of
  the process for SIGTERM). With ``exit_on_second`` the second one ends the process at once
  instead (exit status 128 + the signal's number), for programs whose clean stop can take
  long.
- Handlers can only be installed in the main thread: elsewhere ``install`` does nothing, and
  only ``request`` stops.
- Nothing of sparklog is imported here (a bottom-layer module).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

WATCHED = (signal.SIGINT, signal.SIGTERM)
T = TypeVar("T")


class _Interrupted(Exception):
    """Raised by the first signal inside ``Stop.wait`` only, and caught there."""


class Stop:
    """Whether a stop was requested, by a signal or by ``request()``."""

    def __init__(self, on_request: Callable[[], object] | None = None, *,
                 exit_on_second: bool = False) -> None:
        self.requested = False
        self.signal: signal.Signals | None = None
        self._on_request = on_request
        self._exit_on_second = exit_on_second
        self._previous: dict[signal.Signals, Any] = {}
        self._waiting = False

    def request(self, signum: int | None = None) -> None:
        """Ask to stop (``signum``: the signal that asked, if any)."""
        if signum is not None and self.signal is None:
            self.signal = signal.Signals(signum)
        self.requested = True
        if self._on_request is not None:
            self._on_request()

    def wait(self, blocking: Callable[..., T], *args: Any) -> T | None:
        """``blocking(*args)``, or None if a stop is requested before it returns."""
        try:
            self._waiting = True
            if self.requested:  # the signal came between the caller's check and now
                return None
            return blocking(*args)
        except _Interrupted:
            return None
        finally:
            self._waiting = False

    def install(self) -> Stop:
        """Handle SIGINT and SIGTERM until ``restore`` (main thread only)."""
        if threading.current_thread() is threading.main_thread():
            for sig in WATCHED:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced (idempotent)."""
        while self._previous:
            sig, handler = self._previous.popitem()
            if handler is not None:  # None: installed outside Python, cannot be put back
                signal.signal(sig, handler)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal is not None:  # only with exit_on_second: restore() ran otherwise
            os._exit(128 + signum)
        if not self._exit_on_second:
            self.restore()
        self.request(signum)
        if self._waiting:
            raise _Interrupted


@contextmanager
def stop_on_signals(on_request: Callable[[], object] | None = None, *,
                    exit_on_second: bool = False) -> Iterator[Stop]:
    """Within the block, the first SIGINT or SIGTERM requests a stop (see ``Stop``)."""
    stop = Stop(on_request, exit_on_second=exit_on_second).install()
    try:
        yield stop
    finally:
        stop.restore()
