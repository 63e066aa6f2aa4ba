"""Every fenced code block of README.md runs as written, one test per block, in README order.

How a block runs is chosen by a marker it contains (``PLANS``; each block matches exactly
one, so a new block cannot go untested): shell blocks run with ``bash -euo pipefail`` from
the repository root with the development venv first on ``PATH``; the broker block is
started in the background and the blocks after it talk to it; Python blocks run in a child
process; Spark blocks run in the session's local SparkSession (``spark`` is defined, as in
``pyspark``); a block that runs until stopped gets SIGTERM once it has printed and must
exit 0; the metered broker's block must serve Prometheus metrics, then stop with exit 0.
Substitutions make the blocks safe to run on a shared machine: ``127.0.0.1:9092`` (and
the ports 9093, 9095, 9096 and 9404) become free ports and ``/tmp/sparklog`` a temporary
directory. A block that cannot run here is skipped with its reason, explicitly.
"""

from __future__ import annotations

import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(?P<language>\w*)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)
BROKER_ADDRESS = "127.0.0.1:9092"
OTHER_PORTS = ("9093", "9404", "9095", "9096")
"""The metered broker's listener and metrics listener, the secured broker's two listeners."""
DATA_ROOT = "/tmp/sparklog"
RUN_TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    line: int
    language: str
    code: str

    @property
    def name(self) -> str:
        return f"README.md:{self.line}"


def readme_blocks() -> list[Block]:
    text = README.read_text()
    return [Block(text.count("\n", 0, m.start()) + 1, m["language"], m["code"])
            for m in FENCE.finditer(text)]


SKIP = "skip"
NO_CONTAINER_ENGINE = ("docker compose needs a container engine, and there is none here; "
                       "tests/test_docker_compose.py checks the files it reads")
PLANS: list[tuple[str, str, str]] = [
    # (marker, how, reason for a skip)
    ("make demo", SKIP, "`make test` is this suite (running it here would recurse), and "
                        "`make demo` is `python -m sparklog.demo` after the venv set-up, which "
                        "tests/test_wheel_install.py runs from an installed wheel"),
    ("--config conf/server.properties", "broker", ""),
    ("metrics.listener=http", "metered_broker", ""),
    ("sparklog topics create --bootstrap-server 127.0.0.1:9092", "shell", ""),
    ("sparklog cluster up", "shell", ""),
    ("from confluent_kafka import Producer", "python", ""),
    ("import sparklog.datasource", "spark", ""),
    ("ConsumerLoop(", "until_signal", ""),
    ("df = spark.createDataFrame", "spark", ""),
    ('option("deliveryGuarantee", "exactly-once")', "spark", ""),
    ('option("latestPerKey", "true")', "spark", ""),
    ("sparklog transactions list", "shell", ""),
    ('"kafka.sasl.jaas.config"', "spark", ""),
    ("sparklog certs create", "shell", ""),
    ("python -m sparklog.jobs.stream_to_delta", "shell", ""),
    ("docker compose up", SKIP, NO_CONTAINER_ENGINE),
    ("docker compose exec", SKIP, NO_CONTAINER_ENGINE),
]


def plan_of(block: Block) -> tuple[str, str]:
    found = [(how, reason) for marker, how, reason in PLANS if marker in block.code]
    assert len(found) == 1, f"{block.name} matches {len(found)} plans: give it exactly one"
    return found[0]


BLOCKS = readme_blocks()


def test_every_block_and_every_plan_are_matched() -> None:
    for block in BLOCKS:
        plan_of(block)
    for marker, _, _ in PLANS:
        assert any(marker in b.code for b in BLOCKS), f"no README block contains {marker!r}"


# -- the environment the blocks run in ------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Place:
    """Where the blocks run: the substitutions, the environment, the background broker."""

    port: int
    root: Path
    broker: subprocess.Popen[str] | None = None
    other_ports: dict[str, int] = field(
        default_factory=lambda: {port: _free_port() for port in OTHER_PORTS})

    def code(self, block: Block) -> str:
        code = (block.code.replace(BROKER_ADDRESS, f"127.0.0.1:{self.port}")
                .replace(DATA_ROOT, str(self.root / "sparklog")))
        for port, free in self.other_ports.items():
            code = code.replace(f"127.0.0.1:{port}", f"127.0.0.1:{free}")
        return code

    @property
    def env(self) -> dict[str, str]:
        venv_bin = str(Path(sys.executable).parent)
        return {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}",
                "PYSPARK_PYTHON": sys.executable, "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Place]:
    where = Place(_free_port(), tmp_path_factory.mktemp("readme"))
    yield where
    if where.broker is not None and where.broker.poll() is None:
        os.killpg(where.broker.pid, signal.SIGTERM)
        assert where.broker.wait(60) == 0, "the README's broker did not stop cleanly"


def _wait_for_output(proc: subprocess.Popen[str], wanted: str, timeout: float) -> str:
    """Read ``proc``'s stdout until a line contains ``wanted``; what was read."""
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        assert proc.poll() is None or wanted in seen, f"exited {proc.returncode}:\n{seen}"
        if time.monotonic() > deadline:
            raise AssertionError(f"no {wanted!r} within {timeout}s:\n{seen}")
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            seen += proc.stdout.readline()
    return seen


def _run_shell(place: Place, block: Block) -> None:
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", place.code(block)], cwd=ROOT,
                            env=place.env, capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"{block.name}:\n{result.stdout}\n{result.stderr}"


def _start_broker(place: Place, block: Block) -> None:
    place.broker = subprocess.Popen(["bash", "-euo", "pipefail", "-c", place.code(block)],
                                    cwd=ROOT, env=place.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True,
                                    start_new_session=True)
    _wait_for_output(place.broker, f"listening on 127.0.0.1:{place.port}", 60)


def _run_metered_broker(place: Place, block: Block) -> None:
    """The block's broker serves Prometheus metrics under Kafka's names, and stops cleanly."""
    proc = subprocess.Popen(["bash", "-euo", "pipefail", "-c", f"exec {place.code(block)}"],
                            cwd=ROOT, env=place.env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    try:
        _wait_for_output(proc, "status page on", 60)  # printed once everything listens
        metrics_port = place.other_ports["9404"]
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
            assert b"kafka_server_socket_server_metrics_connection_count" in r.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, f"{block.name}: exit {code} after SIGTERM"


def _run_python(place: Place, block: Block) -> None:
    result = subprocess.run([sys.executable, "-c", place.code(block)], cwd=place.root,
                            env=place.env, capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S)
    assert result.returncode == 0, f"{block.name}:\n{result.stdout}\n{result.stderr}"


def _run_until_signal(place: Place, block: Block) -> None:
    proc = subprocess.Popen([sys.executable, "-c", place.code(block)], cwd=place.root,
                            env=place.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        output = _wait_for_output(proc, "clicks", 120)  # a record processed
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, f"{block.name}: exit {code} after SIGTERM:\n{output}"


def _run_spark(place: Place, block: Block, spark: Any) -> None:
    exec(compile(place.code(block), block.name, "exec"), {"spark": spark})


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line{b.line}" for b in BLOCKS])
def test_readme_block(block: Block, place: Place, request: pytest.FixtureRequest) -> None:
    how, reason = plan_of(block)
    if how == SKIP:
        pytest.skip(f"{block.name}: {reason}")
    if how != "broker":
        assert place.broker is not None and place.broker.poll() is None, \
            "the README's broker block did not run first, or its broker died"
    if how == "broker":
        _start_broker(place, block)
    elif how == "shell":
        _run_shell(place, block)
    elif how == "python":
        _run_python(place, block)
    elif how == "until_signal":
        _run_until_signal(place, block)
    elif how == "metered_broker":
        _run_metered_broker(place, block)
    else:
        _run_spark(place, block, request.getfixturevalue("spark"))


def test_the_blocks_did_what_the_readme_says(place: Place) -> None:
    """After every block: the sink's rows are in the stream job's table, the console
    producer's records (no ``user``) in the dead-letter topic, the backfill's table too."""
    lake = place.root / "sparklog" / "lake"
    rows = DeltaTable(str(lake / "events")).to_pyarrow_table().to_pylist()
    assert sorted((r["user"], r["clicks"]) for r in rows) == [("user-3", 7), ("user-4", 1)]
    backfilled = DeltaTable(str(lake / "events-backfill")).to_pyarrow_table().to_pylist()
    assert sorted(r["user"] for r in backfilled) == ["user-3", "user-4"]
    fields = {f.name: f.nullable for f in DeltaTable(str(lake / "events")).schema().fields}
    assert fields == {"user": False, "clicks": True}
