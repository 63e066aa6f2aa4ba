"""Every fenced code block of README.md runs as written, one test per block, each on its own.

How a block runs is chosen by a marker it contains (``PLANS``; each block matches exactly
one, so a new block cannot go untested): shell blocks run with ``bash -euo pipefail`` from
the repository root in a shell where only what the README says has been done: ``PATH``
without the virtualenv (and no ``VIRTUAL_ENV`` or ``PYSPARK_PYTHON``), then the README's
``. .venv/bin/activate`` (``SETUP``, which the README must say before its first command
line); the broker block is
started in the background, must listen, and must stop with exit 0 on SIGTERM; Python blocks
run in a child process; Spark blocks run in the session's local SparkSession (``spark`` is
defined, as in ``pyspark``); a block that runs until stopped gets SIGTERM once it has
printed and must exit 0; the metered broker's block must serve Prometheus metrics, then
stop with exit 0. The stream job's block must leave in its Delta tables what the README
says (the sink's rows in the table, the console producer's records, which lack ``user``,
out of it).

Each test sets up what its block relies on, as the README's earlier blocks leave it, in a
place of its own (``Needs``): the README's broker started from its broker block, the
``events`` topic, the records the README's producers write into it, a committed
transaction of ``orders-enricher``. So any block runs alone, and the blocks in any order.
Substitutions make the blocks safe to run on a shared machine: ``127.0.0.1:9092`` (and the
ports 9093, 9095, 9096 and 9404) become free ports and ``/tmp/sparklog`` the test's
temporary directory. A block that cannot run here is skipped with its reason, explicitly.
"""
from __future__ import annotations

import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import TIMEOUT, Rec, create_topic, produce_confluent
from confluent_kafka import Producer
from deltalake import DeltaTable

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FENCE = re.compile(r"^```(?P<language>\w*)\n(?P<code>.*?)^```$", re.MULTILINE | re.DOTALL)
BROKER_ADDRESS = "127.0.0.1:9092"
OTHER_PORTS = ("9093", "9404", "9095", "9096", "8081")
"""The metered broker's listener and metrics listener, the secured broker's two listeners,
the README broker's schema registry."""
DATA_ROOT = "/tmp/sparklog"
SETUP = ". .venv/bin/activate"
"""What the README tells a reader to run once in a shell before its command lines."""
COMMAND_LINE = re.compile(r"^(\S*/)?(sparklog|python) ", re.MULTILINE)
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


class Need(Enum):
    """What a block relies on that the README's earlier blocks set up."""

    BROKER = "the README's broker, started from its broker block"
    EVENTS = "the topic events, with 3 partitions"
    RECORDS = "the records the README's producers write into events"
    TRANSACTION = "a committed transaction of the transactional id orders-enricher"


BROKER, EVENTS, RECORDS, TRANSACTION = Need
READS_EVENTS = (BROKER, EVENTS, RECORDS)


@dataclass(frozen=True)
class Plan:
    how: str
    needs: tuple[Need, ...] = ()
    reason: str = ""  # why a block is skipped


PLANS: list[tuple[str, Plan]] = [
    ("make demo", Plan(SKIP, reason=(
        "`make test` is this suite (running it here would recurse), and `make demo` is "
        "`python -m sparklog.demo` after the venv set-up, which tests/test_wheel_install.py "
        "runs from an installed wheel"))),
    ("--config conf/server.properties", Plan("broker")),
    ("metrics.listener=http", Plan("metered_broker")),
    ("sparklog topics create --bootstrap-server 127.0.0.1:9092", Plan("shell", (BROKER,))),
    ("sparklog cluster up", Plan("shell")),
    ("from confluent_kafka import Producer", Plan("python", (BROKER, EVENTS))),
    ('"group.protocol": "consumer"', Plan("python", (BROKER, EVENTS))),
    ("import sparklog.datasource", Plan("spark", (BROKER, EVENTS))),
    ("ConsumerLoop(", Plan("until_signal", READS_EVENTS)),
    ("df = spark.createDataFrame", Plan("spark", (BROKER, EVENTS))),
    ('option("deliveryGuarantee", "exactly-once")', Plan("spark", READS_EVENTS)),
    ('option("latestPerKey", "true")', Plan("spark", (BROKER,))),
    ('option("valueFormat", "json")', Plan("spark", (BROKER,))),
    ('option("valueFormat", "avro")', Plan("spark", (BROKER,))),
    ("sparklog transactions list", Plan("shell", (BROKER, EVENTS, TRANSACTION))),
    ('"kafka.sasl.jaas.config"', Plan("spark")),
    ("sparklog certs create", Plan("shell")),
    ("--checkpoint /tmp/sparklog/checkpoints/events", Plan("shell", READS_EVENTS)),
    ("--schema-registry http://127.0.0.1:8081", Plan("shell", (BROKER,))),
    ("docker compose up", Plan(SKIP, reason=NO_CONTAINER_ENGINE)),
    ("docker compose exec", Plan(SKIP, reason=NO_CONTAINER_ENGINE)),
]


def plan_of(block: Block) -> Plan:
    found = [plan for marker, plan in PLANS if marker in block.code]
    assert len(found) == 1, f"{block.name} matches {len(found)} plans: give it exactly one"
    return found[0]


BLOCKS = readme_blocks()
BROKER_BLOCK = next(b for b in BLOCKS if plan_of(b).how == "broker")


def test_the_readme_says_how_to_put_the_tools_on_path() -> None:
    """Before its first command line the README says how to put ``sparklog`` on ``PATH``,
    and the blocks' shell has it nowhere else."""
    first = min(b.line for b in BLOCKS if COMMAND_LINE.search(b.code))
    before = "\n".join(README.read_text().splitlines()[:first])
    assert f"`{SETUP}`" in before
    assert shutil.which("sparklog", path=Place(0, ROOT).env["PATH"]) is None


def test_every_block_and_every_plan_are_matched() -> None:
    for block in BLOCKS:
        plan_of(block)
    for marker in [m for m, _ in PLANS] + list(CHECKS):
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
        """A fresh shell's: the virtualenv is not on ``PATH`` until a block runs ``SETUP``."""
        venvs = {str(Path(sys.executable).parent), str(ROOT / ".venv" / "bin"),
                 os.environ.get("VIRTUAL_ENV", "-") + "/bin"}
        path = ":".join(d for d in os.environ["PATH"].split(":") if d.rstrip("/") not in venvs)
        unset = {"VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
        return {**{k: v for k, v in os.environ.items() if k not in unset}, "PATH": path,
                "PYTHONUNBUFFERED": "1"}

    def shell(self, block: Block, exec_: bool = False) -> list[str]:
        """``bash`` running the block after ``SETUP`` (``exec_``: as the shell's process)."""
        return ["bash", "-euo", "pipefail", "-c",
                f"{SETUP}\n{'exec ' if exec_ else ''}{self.code(block)}"]


    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Place]:
    """A place of the test's own; the README's broker, if the test started it, must still
    run at the end and stop cleanly on SIGTERM."""
    where = Place(_free_port(), tmp_path)
    yield where
    if where.broker is not None:
        assert where.broker.poll() is None, "the README's broker died during the test"
        os.killpg(where.broker.pid, signal.SIGTERM)
        assert where.broker.wait(60) == 0, "the README's broker did not stop cleanly"


README_RECORDS = [
    (b"user-1", b'{"clicks": 3}'), (b"user-2", b'{"clicks": 5}'),  # the console producer's
    (b"user-3", b'{"user":"user-3","clicks":7}'),  # the Spark sink's rows, as its
    (b"user-4", b'{"user":"user-4","clicks":1}'),  # to_json writes them
]
"""What the README's producers write into ``events`` (its Python producers repeat the
console producer's first record)."""


def _prepare(place: Place, need: Need) -> None:
    """Set ``need`` up in ``place`` as the README's earlier blocks would."""
    if need is BROKER:
        _start_broker(place, BROKER_BLOCK)
    elif need is EVENTS:
        create_topic(place.bootstrap, "events", partitions=3)
    elif need is RECORDS:
        produce_confluent(place.bootstrap, "events",
                          [Rec(key, value) for key, value in README_RECORDS])
    else:
        assert need is TRANSACTION
        producer = Producer({"bootstrap.servers": place.bootstrap,
                             "transactional.id": "orders-enricher"})
        producer.init_transactions(TIMEOUT)
        producer.begin_transaction()
        producer.produce("events", key=b"user-1", value=b'{"clicks": 3}')
        producer.commit_transaction(TIMEOUT)


def _wait_for_output(proc: subprocess.Popen[str], wanted: str, timeout: float) -> str:
    """Read ``proc``'s stdout until a line contains ``wanted``; what was read. The pipe is
    read with ``os.read``: a ``readline`` may buffer the next lines too, which ``select``
    then never reports (the broker prints its registry's URL just before it listens)."""
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        assert proc.poll() is None or wanted in seen, f"exited {proc.returncode}:\n{seen}"
        if time.monotonic() > deadline:
            raise AssertionError(f"no {wanted!r} within {timeout}s:\n{seen}")
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:  # the pipe, not readline: two lines in one write would leave one unseen
            seen += os.read(proc.stdout.fileno(), 65536).decode(errors="replace")
    return seen


def _run_shell(place: Place, block: Block) -> None:
    result = subprocess.run(place.shell(block), cwd=ROOT,
                            env=place.env, capture_output=True, text=True,
                            timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"{block.name}:\n{result.stdout}\n{result.stderr}"


def _start_broker(place: Place, block: Block) -> None:
    place.broker = subprocess.Popen(place.shell(block),
                                    cwd=ROOT, env=place.env, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True,
                                    start_new_session=True)
    _wait_for_output(place.broker, f"listening on 127.0.0.1:{place.port}", 60)


def _run_metered_broker(place: Place, block: Block) -> None:
    """The block's broker serves Prometheus metrics under Kafka's names, and stops cleanly."""
    proc = subprocess.Popen(place.shell(block, exec_=True),
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


def _the_lake_holds_what_the_readme_says(place: Place) -> None:
    """After the jobs: the sink's rows are in the stream job's table, the console
    producer's records (no ``user``) are not, and the backfill's table has the rows too."""
    lake = place.root / "sparklog" / "lake"
    rows = DeltaTable(str(lake / "events")).to_pyarrow_table().to_pylist()
    assert sorted((r["user"], r["clicks"]) for r in rows) == [("user-3", 7), ("user-4", 1)]
    backfilled = DeltaTable(str(lake / "events-backfill")).to_pyarrow_table().to_pylist()
    assert sorted(r["user"] for r in backfilled) == ["user-3", "user-4"]
    fields = {f.name: f.nullable for f in DeltaTable(str(lake / "events")).schema().fields}
    assert fields == {"user": False, "clicks": True}


def _the_users_table_has_the_registry_schema(place: Place) -> None:
    """The Avro records are in the table, with the subject's fields as its columns."""
    table = DeltaTable(str(place.root / "sparklog" / "lake" / "users"))
    assert sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "name": f"user-{i}"} for i in range(3)]


CHECKS = {"--checkpoint /tmp/sparklog/checkpoints/events": _the_lake_holds_what_the_readme_says,
          "--checkpoint /tmp/sparklog/checkpoints/users": _the_users_table_has_the_registry_schema}
"""What a block must leave behind, beyond exiting 0 (by a marker of the block)."""


@pytest.mark.parametrize("block", BLOCKS, ids=[f"line{b.line}" for b in BLOCKS])
def test_readme_block(block: Block, place: Place, request: pytest.FixtureRequest) -> None:
    plan = plan_of(block)
    if plan.how == SKIP:
        pytest.skip(f"{block.name}: {plan.reason}")
    for need in plan.needs:
        _prepare(place, need)
    if plan.how == "broker":
        _start_broker(place, block)
    elif plan.how == "shell":
        _run_shell(place, block)
    elif plan.how == "python":
        _run_python(place, block)
    elif plan.how == "until_signal":
        _run_until_signal(place, block)
    elif plan.how == "metered_broker":
        _run_metered_broker(place, block)
    else:
        _run_spark(place, block, request.getfixturevalue("spark"))
    for marker, check in CHECKS.items():
        if marker in block.code:
            check(place)
