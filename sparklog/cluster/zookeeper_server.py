"""A throwaway standalone ZooKeeper server in a child process (tests, ``sparklog cluster up``).

Invariants:
- It runs Debian's ZooKeeper (``/usr/share/java/zookeeper.jar``; ``make zookeeper`` installs
  it) as ``ZooKeeperServerMain <port> <dataDir> <tickTime>``, with a log4j configuration of
  its own so its log goes to ``<data_dir>/zookeeper.log``, never to a pipe, and without the
  AdminServer (its fixed port 8080 would let only one ZooKeeper run per machine).
- ``tickTime`` is ``tick_ms`` (500 by default): the server clamps session timeouts to
  [2, 20] ticks, so the short sessions tests use (2-3 s) are honoured.
- ``start`` returns once the server answers the ``srvr`` four-letter command (ZooKeeper's
  default whitelist), so ``connect`` is ready to use; a server that exits or stays silent
  raises ``ZooKeeperError`` with the tail of its log. ``stop`` (SIGTERM) is idempotent.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType

JARS = Path("/usr/share/java")
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
_LOG4J = """log4j.rootLogger=INFO, FILE
log4j.appender.FILE=org.apache.log4j.FileAppender
log4j.appender.FILE.File={log}
log4j.appender.FILE.layout=org.apache.log4j.PatternLayout
log4j.appender.FILE.layout.ConversionPattern=%d %p [%t] %c{{1}}: %m%n
"""


class ZooKeeperError(Exception):
    """ZooKeeper is missing or did not start; the message is one line and says why."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def installed() -> bool:
    return (JARS / "zookeeper.jar").exists()


class ZooKeeperServer:
    def __init__(self, data_dir: Path, port: int = 0, tick_ms: int = 500) -> None:
        self.data_dir = data_dir
        self.port = port
        self.tick_ms = tick_ms
        self.host = "127.0.0.1"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` value of this server (no chroot)."""
        return f"{self.host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def command(self) -> list[str]:
        config = self.data_dir / "log4j.properties"
        config.write_text(_LOG4J.format(log=self.log_file))
        # the AdminServer (Jetty on port 8080 by default) is off: a second ZooKeeper on the
        # machine would fail to start on the taken port
        return ["java", f"-Dlog4j.configuration=file:{config}", "-Xmx256m",
                "-Dzookeeper.admin.enableServer=false",
                "-cp", f"{JARS / 'zookeeper.jar'}:{JARS}/*", MAIN,
                str(self.port), str(self.data_dir / "data"), str(self.tick_ms)]

    def start(self, timeout: float = 60, *, detached: bool = False) -> ZooKeeperServer:
        if not installed():
            raise ZooKeeperError(f"ZooKeeper is not installed ({JARS / 'zookeeper.jar'} is "
                                 "missing): run `make zookeeper` or apt-get install zookeeper")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=detached)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            if serving(self.host, self.port):
                return self
            time.sleep(0.1)
        self.stop()
        tail = self.log_file.read_text()[-2000:] if self.log_file.exists() else ""
        raise ZooKeeperError(f"ZooKeeper did not start on port {self.port}; its log: {tail}")

    def stop(self, timeout: float = 30) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def serving(host: str, port: int) -> bool:
    """Whether a ZooKeeper server answers ``srvr`` on (host, port)."""
    try:
        with socket.create_connection((host, port), timeout=1) as sock:
            sock.sendall(b"srvr")
            return sock.recv(64).startswith(b"Zookeeper version")
    except OSError:
        return False
