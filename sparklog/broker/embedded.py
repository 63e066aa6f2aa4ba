"""A broker on a thread of the calling process: the in-process broker of fast tests.

``EmbeddedBroker`` runs a ``BrokerService`` on an event loop of its own thread, listening on
127.0.0.1 (an ephemeral port by default), so a test talks to it with real clients over TCP
and reaches into it directly: its fault hooks (``fault_hooks``) and, through ``call``, its state.

Invariants:
- ``start`` returns once the broker accepts connections (``bootstrap`` is usable) and raises
  what the broker raised if it could not start; ``stop`` is a clean shutdown (logs flushed,
  marker written) and is idempotent.
- Broker state belongs to the broker's loop thread: ``call(fn)`` runs ``fn(broker)`` there
  and returns its result; only ``faults`` (``fault_hooks.Faults``) may be touched from
  other threads directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from sparklog.broker.config import BrokerConfig
from sparklog.broker.fault_hooks import Faults
from sparklog.broker.runner import BrokerService
from sparklog.broker.state import Broker

T = TypeVar("T")


class EmbeddedBroker:
    def __init__(self, data_dir: Path, config: Mapping[str, str] | None = None, *,
                 port: int = 0) -> None:
        self.data_dir = data_dir
        self.config = BrokerConfig(dict(config or {}))
        self.port = port
        self._service: BrokerService | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def listeners(self) -> dict[str, int]:
        """Each listener's bound port, by name (the first is ``port``)."""
        assert self._service is not None, "not started"
        return {server.listener: server.port for server in self._service.servers}

    @property
    def metrics_url(self) -> str | None:
        """The status page's URL (``metrics.listener``), None without one."""
        assert self._service is not None, "not started"
        return self._service.metrics_url

    def client_software(self) -> dict[str, Counter[tuple[str, str]]]:
        """Per listener, open connections per client software (KIP-511)."""
        service = self._service
        assert service is not None, "not started"
        return self.call(lambda _: service.client_software())

    @property
    def faults(self) -> Faults:
        return self._broker.faults

    @property
    def _broker(self) -> Broker:
        assert self._service is not None and self._service.broker is not None, "not started"
        return self._service.broker

    def start(self, timeout: float = 30) -> EmbeddedBroker:
        started: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, args=(started,),
                                        name=f"embedded-broker-{self.data_dir.name}",
                                        daemon=True)
        self._thread.start()
        started.result(timeout)
        return self

    def _run(self, started: concurrent.futures.Future[None]) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stopped = asyncio.Event()
            service = BrokerService(self.config, self.data_dir, f"127.0.0.1:{self.port}")
            try:
                await service.start()
            except BaseException as exc:
                started.set_exception(exc)
                return
            self._service = service
            self.port = service.port
            started.set_result(None)
            try:
                await self._stopped.wait()
            finally:
                await service.stop()

        asyncio.run(main())

    def call(self, fn: Callable[[Broker], T], timeout: float = 30) -> T:
        """``fn(broker)`` on the broker's loop thread; its result."""
        assert self._loop is not None, "not started"

        async def on_loop() -> T:
            return fn(self._broker)

        return asyncio.run_coroutine_threadsafe(on_loop(), self._loop).result(timeout)

    def stop(self, timeout: float = 60) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        self._thread.join(timeout)
        self._thread = None
        self._service = None

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
