"""The broker driven by JavaScript clients: @platformatic/kafka 2.12 (the current pure
JavaScript client: KIP-511's ApiVersions v3 first, then the highest version of each API both
sides know, up to Kafka 4's) and kafkajs 2.2.4 (ApiVersions v2, Kafka 2.x versions).

One broker process serves the module. Each scenario is one ``node`` run of the client's
script in ``tests/js`` (``<client>.mjs <bootstrap> <scenario> <topic> <group>``, installed
by ``make test`` with ``npm ci``), which prints one JSON line: what the client saw, and the
(API key, version) of every request it sent. The 16 scenarios a user tries first, per client:
connect (ApiVersions, checked in the broker's request metrics too), metadata, create and
delete a topic, produce with acks 1 and all, idempotent produce, consume from the beginning,
a group that commits and a second run resuming there, a rebalance of two members, list and
describe groups, offsets (earliest, latest, by timestamp, max timestamp), describe and alter
configs, transactions (commit, abort, read_committed), keys and headers, and each codec.

What is asserted is what a user sees: records in order, exactly once, at the right offsets,
and the batches on disk (codec, producer id and sequences, transaction markers). A request
the broker cannot serve closes the connection with a "closing connection" log line; a test
fails on any such line, naming it.

Skips are client limitations, reported by the client script (kafkajs ships only gzip; zstd
in @platformatic/kafka needs Node 22's ``node:zlib``). Node itself or the npm packages
missing is a failure, not a skip: ``make test`` installs them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import module_broker, request_counts, stored_batches

from sparklog.broker.process import BrokerProcess
from sparklog.protocol.versions import api_name

pytestmark = pytest.mark.timeout(60)

JS_DIR = Path(__file__).parent / "js"
CLIENTS = ("platformatic", "kafkajs")
API_VERSIONS_SENT = {"platformatic": 3, "kafkajs": 2}
"""The ApiVersions version each client sends first (and, answered, only)."""
SCENARIO_TIMEOUT = 30.0
CLIENT_ID = "sparklog-js-tests"  # the scripts' (tests/js/common.mjs)
DEFAULT_RETENTION_MS = "604800000"

broker = module_broker({
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "metrics.listener": "http://127.0.0.1:0",
})

Run = Callable[[str], dict[str, Any]]


@pytest.fixture(scope="module")
def node() -> str:
    """The ``node`` binary, with the clients' packages installed (``make test`` does both)."""
    path = shutil.which("node")
    if path is None:
        pytest.fail("node is not installed: `make test` installs Debian's nodejs and npm")
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir() or not (
            JS_DIR / "node_modules" / "@platformatic" / "kafka").is_dir():
        pytest.fail("the JavaScript clients are not installed: run `npm ci` in tests/js "
                    "(`make test` does)")
    return path


def refusals(broker: BrokerProcess) -> list[str]:
    """The broker's log lines for connections it closed (a request it could not serve)."""
    return [line for line in broker.log_file.read_text().splitlines()
            if "closing connection" in line]


VERSIONS_USED: dict[str, dict[str, set[int]]] = {client: {} for client in CLIENTS}
"""Every API version each client sent in this module (printed at its end, with ``-s``)."""


@pytest.fixture(scope="module", autouse=True)
def versions_report() -> Iterator[None]:
    yield
    for client, apis in VERSIONS_USED.items():
        print(f"\n{client}: " + ", ".join(f"{name} v{'/'.join(map(str, sorted(v)))}"
                                           for name, v in sorted(apis.items())))


@pytest.fixture(params=CLIENTS)
def client(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    return f"js-{request.node.originalname}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def js(node: str, broker: BrokerProcess, client: str, topic: str) -> Iterator[Run]:
    """``js(scenario)`` runs one scenario of ``client`` on the test's topic and group and
    returns its result; the client's own error fails the test (with the broker's refusals)."""
    group = f"{topic}-group"
    refused_before = len(refusals(broker))

    def run(scenario: str) -> dict[str, Any]:
        done = subprocess.run(
            [node, f"{client}.mjs", broker.bootstrap, scenario, topic, group], cwd=JS_DIR,
            capture_output=True, text=True, timeout=SCENARIO_TIMEOUT, check=False)
        lines = done.stdout.strip().splitlines()
        assert lines, f"{client} {scenario} printed nothing; stderr:\n{done.stderr[-3000:]}"
        answer = json.loads(lines[-1])
        for key, versions in answer["versions"].items():
            VERSIONS_USED[client].setdefault(api_name(int(key)), set()).update(versions)
        assert answer["ok"], (f"{client} {scenario}: {answer['error']} {answer['causes']}; "
                              f"broker refusals: {refusals(broker)[refused_before:]}")
        result: dict[str, Any] = answer["result"]
        if "unsupported" in result:
            pytest.skip(f"{client}: {result['unsupported']}")
        result["versions"] = {api_name(int(key)): set(v) for key, v in answer["versions"].items()}
        return result

    yield run
    assert refusals(broker)[refused_before:] == []


def values(records: list[dict[str, Any]]) -> list[str]:
    return [r["value"] for r in records]


def offsets(records: list[dict[str, Any]]) -> list[int]:
    return [r["offset"] for r in records]


def numbered(count: int, start: int = 0) -> list[dict[str, Any]]:
    """The records the scripts produce (``numbered`` in common.mjs), as consumed at
    partition 0 and offsets from ``start``."""
    return [{"partition": 0, "offset": i, "key": f"k{i % 3}", "value": str(i), "headers": []}
            for i in range(start, start + count)]


# -- connecting and topics ------------------------------------------------------------------


def test_connect_negotiates_versions(js: Run, broker: BrokerProcess, client: str) -> None:
    sent = API_VERSIONS_SENT[client]
    before = request_counts(broker).get(("ApiVersions", sent), 0)

    result = js("connect")

    assert result["brokers"] == [broker.bootstrap]
    assert result["versions"]["ApiVersions"] == {sent}, "the client fell back to another version"
    assert request_counts(broker)[("ApiVersions", sent)] > before


def test_metadata_lists_topics(js: Run) -> None:
    result = js("metadata")

    assert result["listed"]
    assert len(result["brokers"]) == 1
    assert result["leaders"] == result["brokers"] * 2


def test_create_topic(js: Run, topic: str) -> None:
    result = js("create_topic")

    assert result["created"] == {"name": topic, "partitions": 3}
    assert result["partitions"] == 3
    if result["ids"] is not None:  # CreateTopics v7 and Metadata v10+ name the same topic id
        created, described = result["ids"]
        assert created == described != "00000000-0000-0000-0000-000000000000"


def test_delete_topic(js: Run, broker: BrokerProcess, topic: str) -> None:
    result = js("delete_topic")

    assert (result["before"], result["after"]) == (True, False)
    assert not (broker.data_dir / f"{topic}-0").exists()


# -- producing and consuming ----------------------------------------------------------------


@pytest.mark.parametrize("acks", ["acks1", "acks_all"])
def test_produce_and_consume(js: Run, topic: str, acks: str) -> None:
    result = js(f"produce_{acks}")

    assert result["offsets"] == [{"topic": topic, "partition": 0, "offset": 0},
                                 {"topic": topic, "partition": 0, "offset": 5}]
    assert result["records"] == numbered(10)


def test_idempotent_produce(js: Run, broker: BrokerProcess, topic: str) -> None:
    result = js("idempotent")

    assert result["records"] == numbered(10)
    batches = stored_batches(broker, topic)
    assert len({b.producer_id for b in batches}) == 1 and batches[0].producer_id >= 0
    assert [(b.base_offset, b.base_sequence) for b in batches] == [(0, 0), (5, 5)]


def test_consume_from_beginning(js: Run) -> None:
    assert js("consume_earliest")["records"] == numbered(20)


def test_headers_and_keys_round_trip(js: Run) -> None:
    assert js("headers_keys")["records"] == [
        {"partition": 0, "offset": 0, "key": "user-1", "value": "a",
         "headers": [["trace", "t1"], ["source", "web"]]},
        {"partition": 0, "offset": 1, "key": None, "value": "b", "headers": [["empty", ""]]},
        {"partition": 0, "offset": 2, "key": "user-2", "value": "c", "headers": []},
    ]


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(js: Run, broker: BrokerProcess, topic: str, codec: str) -> None:
    records = js(f"compression_{codec}")["records"]

    assert [v.split(" ")[0] for v in values(records)] == [str(i) for i in range(50)]
    assert offsets(records) == list(range(50))
    assert {b.compression_name for b in stored_batches(broker, topic)} == {codec}


def test_list_offsets(js: Run) -> None:
    result = js("list_offsets")

    assert (result["earliest"], result["latest"], result["byTimestamp"]) == (0, 3, 1)
    assert result["max"] in (None, 2)  # kafkajs cannot ask for the max timestamp's offset


# -- groups ---------------------------------------------------------------------------------


def test_group_resumes_from_committed_offset(js: Run) -> None:
    first = js("group_first_run")
    second = js("group_second_run")

    assert first["records"] == numbered(4)
    assert second["records"] == numbered(11, start=4)


def test_rebalance_two_members(js: Run) -> None:
    result = js("rebalance")

    assert result["alone"] == [0, 1]
    assert sorted(result["shared"]) == [[0], [1]]
    assert result["again"] == [0, 1]


def test_list_and_describe_groups(js: Run, topic: str) -> None:
    result = js("groups")

    assert result["listed"]
    assert result["state"] == "Stable"
    assert result["protocol"]
    assert result["members"] == [{"clientId": CLIENT_ID, "topics": [topic]}]


# -- configs and transactions ---------------------------------------------------------------


def test_describe_and_alter_configs(js: Run) -> None:
    result = js("configs")

    assert result["before"] == DEFAULT_RETENTION_MS
    assert result["after"] == "3600000"
    assert result["replaced"] == "compact"
    # AlterConfigs replaces the topic's whole set: retention.ms is back to its default
    assert result["retentionAfterReplace"] == DEFAULT_RETENTION_MS


def test_transactions(js: Run, broker: BrokerProcess, topic: str) -> None:
    result = js("transactions")

    # three transactions of 3 records (commit, abort, commit), each closed by a marker
    assert values(result["committed"]) == ["0", "1", "2", "6", "7", "8"]
    assert offsets(result["committed"]) == [0, 1, 2, 8, 9, 10]
    assert values(result["uncommitted"]) == [str(i) for i in range(9)]
    batches = stored_batches(broker, topic)
    assert [b.is_control for b in batches] == [False, True] * 3
    assert all(b.is_transactional for b in batches)
