"""Running a broker: load the handlers, serve, run maintenance, stop cleanly on a signal.

Invariants:
- The listen address is printed (``sparklog broker listening on HOST:PORT``) only once the
  socket accepts connections; with port 0 it names the port the OS chose.
- The advertised host is 127.0.0.1 when listening on loopback, on all interfaces or on
  ``localhost`` (librdkafka may resolve ``localhost`` to ::1), unless
  ``advertised.listeners`` says otherwise.
- SIGTERM and SIGINT stop accepting, close connections, then flush and close every log and
  write the clean-shutdown marker; the process exits 0.
- Maintenance (time-based flushes, retention, checkpoints) runs on the event loop at the
  intervals Kafka's settings name; log compaction runs in the ``LogCleaner`` threads
  (``log.cleaner.*``), stopped before the logs are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import Callable
from pathlib import Path

from sparklog.broker.config import BrokerConfig
from sparklog.broker.server import BrokerServer
from sparklog.broker.state import Broker
from sparklog.signals import WATCHED, Stop
from sparklog.storage.cleaner import CleanerConfig, LogCleaner

log = logging.getLogger(__name__)

HANDLER_MODULES = (
    "api_versions", "metadata", "produce", "fetch", "list_offsets", "producer_ids",
    "leader_epoch", "delete_records", "topics_admin", "configs", "groups", "offset_commit",
)


def load_handlers() -> None:
    for name in HANDLER_MODULES:
        importlib.import_module(f"sparklog.broker.{name}")


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"--listen expects HOST:PORT, got {listen!r}")
    host = host.removeprefix("PLAINTEXT://").strip("[]")
    return host or "0.0.0.0", int(port)


def advertised_host(config: BrokerConfig, listen_host: str) -> str:
    advertised = config.get("advertised.listeners")
    if advertised:
        return parse_listen(advertised.split(",")[0])[0]
    if listen_host in ("0.0.0.0", "", "::", "localhost"):
        return "127.0.0.1"
    return listen_host


async def _every(interval_ms: int, action: Callable[[], None]) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            action()
        except Exception:
            log.exception("maintenance task failed")


async def serve(config: BrokerConfig, data_dir: Path, listen: str,
                stop: asyncio.Event) -> None:
    load_handlers()
    host, port = parse_listen(listen)
    broker = Broker(config, data_dir)
    broker.start()
    server = BrokerServer(broker, host, port)
    _, broker.port = await server.start()
    broker.host = advertised_host(config, host)
    cleaner = LogCleaner(broker.logs, CleanerConfig.from_props(config.props))
    if cleaner.config.enable:
        cleaner.start()
    tasks = [
        asyncio.create_task(_every(config.get_int("log.flush.scheduler.interval.ms"),
                                   broker.logs.flush_due)),
        asyncio.create_task(_every(config.get_int("log.retention.check.interval.ms"),
                                   broker.logs.apply_retention)),
        asyncio.create_task(_every(config.get_int("log.flush.offset.checkpoint.interval.ms"),
                                   broker.logs.checkpoint)),
    ]
    print(f"sparklog broker listening on {broker.host}:{broker.port}", flush=True)
    log.info("serving %s (data in %s)", f"{host}:{broker.port}", data_dir)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        for task in tasks:
            task.cancel()
        await server.stop()
        cleaner.stop()
        broker.close()
        log.info("stopped cleanly")


def run(config: BrokerConfig, data_dir: Path, listen: str) -> int:
    """Run in the foreground until SIGTERM or Ctrl-C."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        shutdown = Stop(on_request=stop.set)  # every signal, not just the first, stops cleanly
        for sig in WATCHED:
            loop.add_signal_handler(sig, shutdown.request, sig)
        await serve(config, data_dir, listen, stop)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
    return 0
