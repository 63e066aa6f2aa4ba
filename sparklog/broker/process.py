"""A broker in a child process: what the demo, the benchmarks and the tests start.

Invariants:
- ``start`` returns only once the child printed its listening line, so ``bootstrap`` is
  ready to use (and ``metrics_url``, with ``metrics.listener`` set, ``schema_registry_url`` with
  ``schema.registry.listeners``, and the further
  listeners' addresses, ``listeners``); a child that exits
  before that raises with the child's output.
- ``stop`` sends SIGTERM and waits (a clean shutdown: logs flushed, marker written);
  ``kill`` sends SIGKILL (an unclean one, for crash tests). Both are idempotent.
- ``detached`` children (``sparklog cluster up``) get a session of their own and write their
  stdout to ``<log>.out``, so they outlive the process that started them.
- The child runs ``python -m sparklog.cli broker`` with the same interpreter, so it sees the
  same installed packages; its stderr goes to ``<data_dir>/../broker-<port>.log`` or a given
  file, never to a pipe that could fill up and block it.
- ``max_open_files`` sets the child's RLIMIT_NOFILE, soft and hard, before it starts (tests
  of a broker short of descriptors); without it the child inherits this process's limits.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

_LISTENING = re.compile(r"listening on (?P<host>[^\s:]+):(?P<port>\d+)")
_LISTENER = re.compile(r"listener (?P<name>\S+) on \S+, advertised as (?P<address>\S+)")
_METRICS = re.compile(r"metrics and status page on (?P<url>\S+)")
_REGISTRY = re.compile(r"schema registry on (?P<url>\S+)")


class BrokerProcess:
    def __init__(self, data_dir: Path, config: Mapping[str, str] | None = None, *,
                 port: int = 0, log_file: Path | None = None,
                 env: Mapping[str, str] | None = None, detached: bool = False,
                 max_open_files: int | None = None) -> None:
        self.data_dir = data_dir
        self.config = dict(config or {})
        self.env = dict(env or {})  # e.g. SPARKLOG_FAULT_POINT for crash tests
        self.port = port
        self.log_file = log_file or data_dir.with_name(data_dir.name + ".broker.log")
        self.host = "127.0.0.1"
        self.metrics_url: str | None = None
        self.schema_registry_url: str | None = None
        self.listeners: dict[str, str] = {}
        """Further listeners (after the first, ``bootstrap``): name -> advertised address."""
        self.detached = detached  # outlives this process: own session, stdout to a file
        self.max_open_files = max_open_files  # RLIMIT_NOFILE, soft and hard (tests)
        self._proc: subprocess.Popen[str] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30) -> BrokerProcess:
        cmd = [sys.executable, "-m", "sparklog.cli", "broker", "--data-dir", str(self.data_dir),
               "--listen", f"127.0.0.1:{self.port}"]
        for key, value in self.config.items():
            cmd += ["--set", f"{key}={value}"]
        stderr = open(self.log_file, "a")  # the child inherits it; ours closes below
        stdout_file = self.log_file.with_suffix(".out")
        stdout = open(stdout_file, "w") if self.detached else subprocess.PIPE
        self._proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, text=True,
                                      stdin=subprocess.DEVNULL, start_new_session=self.detached,
                                      env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
                                      preexec_fn=self._limit_open_files
                                      if self.max_open_files else None)
        stderr.close()
        if self.detached:
            stdout.close()  # type: ignore[union-attr]
            follower = _Follow(stdout_file, self._proc)
            try:
                return self._await_listening(follower, timeout)
            finally:
                follower.close()
        assert self._proc.stdout is not None
        return self._await_listening(self._proc.stdout, timeout)

    def _limit_open_files(self) -> None:
        """In the child, before it runs the broker: its descriptor limit, soft and hard."""
        limit = self.max_open_files
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    def _await_listening(self, lines: _Follow | IO[str], timeout: float) -> BrokerProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = lines.readline()
            if not line:
                break
            listener = _LISTENER.search(line)
            if listener:
                self.listeners[listener["name"]] = listener["address"]
            metrics = _METRICS.search(line)
            if metrics:
                self.metrics_url = metrics["url"]
            registry = _REGISTRY.search(line)
            if registry:
                self.schema_registry_url = registry["url"]
            match = _LISTENING.search(line)
            if match:
                self.host, self.port = match["host"], int(match["port"])
                return self
        self.kill()
        raise RuntimeError(f"broker did not start; its log:\n{self.log_file.read_text()[-4000:]}")

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM and wait: a clean shutdown. Returns the exit code."""
        return self._end(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL: an unclean shutdown, as after a crash or power loss."""
        return self._end(signal.SIGKILL, 30)

    def restart(self) -> BrokerProcess:
        """Stop cleanly and start again on the same port and data directory."""
        self.stop()
        return self.start()

    def _end(self, sig: signal.Signals, timeout: float) -> int | None:
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            self._proc.send_signal(sig)
        try:
            code = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            code = self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None
        return code

    def __enter__(self) -> BrokerProcess:
        return self.start() if not self.running else self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


class _Follow:
    """``readline`` over a file another process is writing (a detached child's stdout):
    waits for each line; '' once the child exited."""

    def __init__(self, path: Path, proc: subprocess.Popen[str]) -> None:
        self._file = open(path)
        self._proc = proc
        self._partial = ""

    def readline(self) -> str:
        while True:
            self._partial += self._file.readline()
            if self._partial.endswith("\n"):
                line, self._partial = self._partial, ""
                return line
            if self._proc.poll() is not None:
                return ""
            time.sleep(0.05)

    def close(self) -> None:
        self._file.close()
