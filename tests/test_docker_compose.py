"""The structure of docker-compose.yml and the Dockerfile (no Docker engine runs here).

PyYAML is not a dependency, so the file is read with ``parse_compose``: a parser for the
YAML subset the file is written in (block mappings, block sequences of scalars, flow
sequences and empty flow mappings, possibly over several lines, quoted or plain scalars, ``#``
comments). Anything outside that subset fails the test, which keeps the file in it. Scalars
stay strings.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from sparklog.broker.config import BrokerConfig
from sparklog.cli import build_parser
from sparklog.jobs import stream_to_delta

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"


def _strip_comment(line: str) -> str:
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _split_flow(body: str) -> list[str]:
    items, depth, quote, current = [], 0, None, ""
    for char in body:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        items.append(current.strip())
    return items


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith("["):
        assert text.endswith("]"), f"unterminated flow sequence: {text}"
        return [_scalar(item) for item in _split_flow(text[1:-1])]
    if text.startswith("{"):
        assert text == "{}", f"only empty flow mappings are in the subset: {text}"
        return {}
    if text.startswith('"'):
        return json.loads(text)
    if text.startswith("'"):
        assert text.endswith("'")
        return text[1:-1].replace("''", "'")
    assert not text.startswith(("&", "*", "!", "|", ">")), f"outside the subset: {text}"
    return text


def _logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    pending = ""
    for raw in text.splitlines():
        assert "\t" not in raw, "tabs are not YAML indentation"
        line = _strip_comment(raw)
        if not line.strip():
            continue
        if pending:
            pending += " " + line.strip()
        else:
            pending = line
        if pending.count("[") == pending.count("]"):
            lines.append((len(pending) - len(pending.lstrip()), pending.strip()))
            pending = ""
    assert not pending, f"unterminated: {pending}"
    return lines


def _block(lines: list[tuple[int, str]], i: int, indent: int) -> tuple[Any, int]:
    if lines[i][1].startswith("- "):
        items = []
        while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("- "):
            items.append(_scalar(lines[i][1][2:]))
            i += 1
        return items, i
    mapping: dict[str, Any] = {}
    while i < len(lines) and lines[i][0] == indent:
        key, sep, rest = lines[i][1].partition(":")
        assert sep and key.strip() and key.strip() not in mapping, f"bad line: {lines[i][1]}"
        i += 1
        if rest.strip():
            mapping[key.strip()] = _scalar(rest)
        elif i < len(lines) and lines[i][0] > indent:
            mapping[key.strip()], i = _block(lines, i, lines[i][0])
        else:
            mapping[key.strip()] = None
    assert i == len(lines) or lines[i][0] < indent, f"bad indentation at: {lines[i][1]}"
    return mapping, i


def parse_compose(text: str) -> dict[str, Any]:
    lines = _logical_lines(text)
    document, end = _block(lines, 0, 0)
    assert end == len(lines)
    return document


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return parse_compose(COMPOSE.read_text())


def test_the_parser_reads_the_subset() -> None:
    text = """
a: 1  # comment
b:
  c: "x # not a comment"
  d: [p, "q r", 's''t']
  e:
    - one
    - two
  f: {}
g: ["x",
    y]
"""
    assert parse_compose(text) == {"a": "1", "b": {"c": "x # not a comment",
                                                 "d": ["p", "q r", "s't"],
                                                 "e": ["one", "two"], "f": {}},
                                   "g": ["x", "y"]}
    with pytest.raises(AssertionError):
        parse_compose("a: &anchor x\n")


def test_services_of_the_default_setup(compose: dict[str, Any]) -> None:
    services = compose["services"]
    default = {name for name, s in services.items() if "profiles" not in s}
    assert default == {"broker", "spark-master", "spark-worker", "sample-events", "stream-job"}
    assert services["broker"]["command"][:2] == ["sparklog", "broker"]
    assert "org.apache.spark.deploy.master.Master" in services["spark-master"]["command"]
    assert "spark://spark-master:7077" in services["spark-worker"]["command"]
    sparklog = {name for name, s in services.items() if s.get("image") != "zookeeper:3.9"}
    for name in sparklog - {"kafka"}:
        assert services[name]["image"] == "sparklog:local"
        assert services[name]["build"] == "."
    for name, service in services.items():
        needs = service.get("depends_on", [])
        assert all(dep in services for dep in needs), f"{name} depends on an unknown service"


def _broker_config(command: list[str]) -> BrokerConfig:
    """The broker service's settings, read by the broker's own parser and checks."""
    args = build_parser().parse_args(command[1:])
    assert args.command == "broker" and args.listen is None
    return BrokerConfig.load(args.config, args.set)


def _published(service: dict[str, Any]) -> dict[int, int]:
    """container port -> host port of a service's ``ports``."""
    return {int(container): int(host) for host, container in
            (p.split(":") for p in service.get("ports", []))}


def test_the_broker_has_an_internal_and_a_published_listener(compose: dict[str, Any]) -> None:
    """As Kafka images do: clients in the containers' network use one listener, clients on
    the host another, each advertised with an address its clients can reach."""
    broker = compose["services"]["broker"]
    config = _broker_config(broker["command"])
    listeners = config.listeners()
    advertised = config.listeners("advertised.listeners")
    assert set(listeners) == set(advertised) == {"PLAINTEXT", "PLAINTEXT_HOST"}
    assert all(host == "0.0.0.0" for host, _ in listeners.values())
    published = _published(broker)
    # internal: the service's name and the listener's own port, not published
    assert advertised["PLAINTEXT"] == (broker["hostname"], listeners["PLAINTEXT"][1])
    assert listeners["PLAINTEXT"][1] not in published
    # host: localhost and a published port that reaches the listener
    host, port = advertised["PLAINTEXT_HOST"]
    assert host == "localhost" and published[listeners["PLAINTEXT_HOST"][1]] == port
    # the metrics and status page, on all interfaces, published
    metrics_host, metrics_port = config.metrics_listener() or ("", 0)
    assert metrics_host == "0.0.0.0" and published[metrics_port] == metrics_port
    # every other sparklog service bootstraps on the internal listener
    internal = "{}:{}".format(*advertised["PLAINTEXT"])
    for name in ("sample-events", "stream-job"):
        command = compose["services"][name]["command"]
        assert command[command.index("--bootstrap") + 1] == internal


def test_the_readme_shows_the_tools_in_the_broker_container(compose: dict[str, Any]) -> None:
    config = _broker_config(compose["services"]["broker"]["command"])
    reachable = {"{}:{}".format(*address)
                 for address in config.listeners("advertised.listeners").values()}
    readme = (REPO / "README.md").read_text()
    lines = re.findall(r"^docker compose exec broker (sparklog .+)$", readme, re.MULTILINE)
    assert any(line.startswith("sparklog topics ") for line in lines)
    for line in lines:
        args = build_parser().parse_args(shlex.split(line)[1:])  # the tool accepts them
        assert args.bootstrap in reachable


@pytest.mark.parametrize(("job", "bootstrap", "table"), [
    ("stream-job", "broker:19092", "/lake/events"),
    ("stream-job-kafka", "kafka:9092", "/lake/events-kafka"),
    ("stream-job-cluster", "broker-0:19092,broker-1:19092,broker-2:19092",
     "/lake/events-cluster"),
])
def test_the_streaming_jobs_run_on_the_cluster(compose: dict[str, Any], job: str, bootstrap: str,
                                               table: str) -> None:
    services = compose["services"]
    command = services[job]["command"]
    assert command[:3] == ["python", "-m", "sparklog.jobs.stream_to_delta"]
    args = stream_to_delta.parse_args(command[3:])  # the job accepts them
    assert args.bootstrap == bootstrap and args.table == table
    assert args.master == "spark://spark-master:7077"
    assert args.checkpoint.startswith("/lake/") and args.trigger == "processingTime=10s"
    # the driver moves files the executors wrote: both mount the table's volume at one path
    mounts = {tuple(v.split(":")[:2]) for v in services[job]["volumes"]}
    assert mounts == {tuple(v.split(":")[:2]) for v in services["spark-worker"]["volumes"]}
    assert any(table.startswith(path + "/") for _, path in mounts)
    producer = services[job]["depends_on"]
    assert any(producer[name]["condition"] == "service_completed_successfully"
               for name in producer)
    assert services[job]["hostname"] == job  # executors connect back to the driver


def test_the_kafka_profile_uses_apache_kafka_in_kraft_mode(compose: dict[str, Any]) -> None:
    services = compose["services"]
    kafka_services = {name for name, s in services.items() if s.get("profiles") == ["kafka"]}
    assert kafka_services == {"kafka", "sample-events-kafka", "stream-job-kafka"}
    kafka = services["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    assert env["KAFKA_ADVERTISED_LISTENERS"] == "PLAINTEXT://kafka:9092"
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka:9093"
    assert not any("ZOOKEEPER" in key for key in env)
    assert "kafka:9092" in services["sample-events-kafka"]["command"]
    assert {"broker-data", "kafka-data", "lake"} <= set(compose["volumes"])


def test_the_cluster_profile_runs_three_brokers_on_zookeeper(compose: dict[str, Any]) -> None:
    """Three brokers of one cluster (one ZooKeeper chroot), each with its id, rack, data
    volume, an internal listener the other containers reach and a published one for the
    host; the job and the sample events bootstrap on all three internal listeners."""
    services = compose["services"]
    cluster = {name for name, s in services.items() if s.get("profiles") == ["cluster"]}
    names = [f"broker-{i}" for i in range(3)]
    assert cluster == {"zookeeper", *names, "sample-events-cluster", "stream-job-cluster"}
    assert services["zookeeper"]["hostname"] == "zookeeper"
    configs = [_broker_config(services[name]["command"]) for name in names]
    assert [c.get_int("broker.id") for c in configs] == [0, 1, 2]
    assert len({c.get("broker.rack") for c in configs}) == 3
    assert {c.get("zookeeper.connect") for c in configs} == {"zookeeper:2181/sparklog"}
    for config in configs:
        assert config.get_int("default.replication.factor") == 3
        assert config.get_int("min.insync.replicas") == 2
        assert config.get_int("offsets.topic.replication.factor") == 3
    internal = []
    for name, config in zip(names, configs, strict=True):
        listeners = config.listeners()
        advertised = config.listeners("advertised.listeners")
        assert advertised["PLAINTEXT"] == (name, listeners["PLAINTEXT"][1])
        host, port = advertised["PLAINTEXT_HOST"]
        assert host == "localhost"
        assert _published(services[name])[listeners["PLAINTEXT_HOST"][1]] == port
        assert services[name]["volumes"] == [f"{name}-data:/data/broker"]
        internal.append("{}:{}".format(*advertised["PLAINTEXT"]))
    published = [p for name in names for p in _published(services[name]).values()]
    single = set(_published(services["broker"]).values())
    assert len(set(published)) == 3 and not set(published) & single
    for name in ("sample-events-cluster", "stream-job-cluster"):
        command = services[name]["command"]
        assert command[command.index("--bootstrap") + 1] == ",".join(internal)


def test_the_dockerfile_ships_what_the_services_run() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    copied = {word for line in dockerfile.splitlines() if line.startswith("COPY")
              for word in shlex.split(line)[1:-1]}
    # the jobs and their default conf are in the package (tests/test_wheel_install.py checks
    # that an installed wheel runs them), which the image installs with pip
    assert {"sparklog", "pyproject.toml", "pyspark_sparklog.py"} <= copied
    assert all((REPO / path).exists() for path in copied)
    assert "openjdk-17" in dockerfile and "pip install" in dockerfile
    assert Path(REPO / "sparklog" / "jobs" / "stream_to_delta.py").is_file()
    assert Path(REPO / "sparklog" / "conf" / "jobs.properties").is_file()
