"""Runs a Spark job as a child process group for crash tests: killed with SIGKILL at a fault
point (``sparklog.faults``) or at a moment the test picks, or stopped with a signal.

Invariant: a run returns only once the whole process group (driver, JVM, Python workers) is
gone, so the next run never overlaps the last one's leftovers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sparklog.faults import MARKER_ENV, POINT_ENV

RUN_TIMEOUT_S = 240


def _group_gone(pgid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


class ChildRunner:
    """Runs ``command`` (a Spark job) as a child process group, optionally killing it at a
    fault point, at a moment of the test's choosing, or stopping it with a signal."""

    def __init__(self, workdir: Path, command: list[str]) -> None:
        self.workdir = workdir
        self.command = command
        self.runs = 0
        self.signalled_at = 0  # how much the log held when the stop signal was sent

    @property
    def log_path(self) -> Path:
        return self.workdir / f"run-{self.runs}.log"

    def run(self, fault: str | None = None, *, stop_when: Callable[[], bool] | None = None,
            stop_with: signal.Signals = signal.SIGTERM,
            extra: tuple[str, ...] = ()) -> tuple[str, str]:
        """Run until it exits, is killed at ``fault``, or ``stop_when()``: then ``stop_with``
        goes to the process (as ``kill`` or ``docker stop`` send it) or, for SIGINT and
        SIGKILL, to its whole group (as Ctrl-C in a terminal does; as a crash would)."""
        self.runs += 1
        log_path = self.log_path
        marker = self.workdir / f"fault-{self.runs}"
        env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}
        if fault:
            env.update({POINT_ENV: fault, MARKER_ENV: str(marker)})
        with open(log_path, "w") as log:
            proc = subprocess.Popen([*self.command, *extra], stdout=log,
                                    stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
                                    start_new_session=True)
        deadline = time.monotonic() + RUN_TIMEOUT_S
        outcome = None
        while outcome is None:
            time.sleep(0.2)
            if fault and marker.exists():
                os.killpg(proc.pid, signal.SIGKILL)
                outcome = "killed"
            elif stop_when and stop_when():
                self.signalled_at = len(log_path.read_text())
                if stop_with in (signal.SIGINT, signal.SIGKILL):
                    os.killpg(proc.pid, stop_with)
                else:
                    proc.send_signal(stop_with)
                outcome = f"exit {proc.wait(60)} after {stop_with.name}"
            elif proc.poll() is not None:
                outcome = f"exit {proc.returncode}"
            elif time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                pytest.fail(f"run {self.runs} timed out:\n{log_path.read_text()[-3000:]}")
        proc.wait()
        assert _group_gone(proc.pid), "the job left processes behind"
        return outcome, log_path.read_text()
