"""librdkafka's log lines through Python logging, for every confluent-kafka client sparklog
opens (the tools, the jobs, the data source's producers and consumers).

Invariants:
- ``routed(config)`` is the config with confluent-kafka's ``logger`` set: librdkafka then
  prints nothing itself (no ``%4|1700000000.123|OFFSET|rdkafka#consumer-1| [thrd:main]:``
  lines on stderr); each line goes to the Python logger ``sparklog.librdkafka`` as
  ``FACILITY: message`` (librdkafka's prefix and thread tag dropped), a warning or worse at
  its own level, anything less (notice, info, debug) at DEBUG.
- A config that names its own ``logger`` keeps it. A watched client's (``watched_routing``)
  connection failures are at DEBUG: its error callback reports them as one line.
- The router is stateless and pickles (a config may travel to Spark's executors); on an
  executor the lines go to that Python worker's logging.
- confluent-kafka hands a client's lines to the logger while the client is polled (``poll``,
  ``consume``, ``flush``), on the thread that polls. An admin client's user never polls, so
  ``admin_client`` opens one whose lines a daemon thread serves while the client lives (it
  ends within ``LOG_POLL_S`` of the client being collected).
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from confluent_kafka.admin import AdminClient

LOGGER = logging.getLogger("sparklog.librdkafka")
_THREAD = re.compile(r"^\[thrd:[^\]]*\]: ")
LOG_POLL_S = 0.2


class _Router:
    """What confluent-kafka calls: ``log(level, "%s [%s] %s", facility, name, message)``;
    the ``quiet`` facilities' lines go to DEBUG whatever their level."""

    def __init__(self, quiet: frozenset[str] = frozenset()) -> None:
        self.quiet = quiet

    def log(self, level: int, _format: str, facility: str, _name: str, message: str) -> None:
        loud = level >= logging.WARNING and facility not in self.quiet
        LOGGER.log(level if loud else logging.DEBUG, "%s: %s",
                   facility, _THREAD.sub("", message))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_router, (self.quiet,))


_ROUTER = _Router()
_WATCHED_ROUTER = _Router(frozenset({"FAIL"}))


def _router(quiet: frozenset[str]) -> _Router:
    return _WATCHED_ROUTER if quiet else _ROUTER


def routed(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with librdkafka's log lines routed through Python logging."""
    return {"logger": _ROUTER, **config}


def watched_routing(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` of a client whose ``error_cb`` reports its connection failures
    (``client.watch``): if routed, its connection failures (librdkafka's ``FAIL`` lines,
    which the error callback hears too and turns into the one line naming their cause) are
    logged at DEBUG instead of repeating that line."""
    return {**config, "logger": _WATCHED_ROUTER} if config.get("logger") is _ROUTER \
        else dict(config)


def admin_client(config: Mapping[str, Any]) -> AdminClient:
    """An ``AdminClient`` whose log lines reach Python logging (see the invariants)."""
    admin = AdminClient(routed(config))
    ref = weakref.ref(admin)

    def serve_logs() -> None:
        while (client := ref()) is not None:
            client.poll(LOG_POLL_S)
            del client

    threading.Thread(target=serve_logs, name="librdkafka-admin-log", daemon=True).start()
    return admin
