"""Kafka's ZooKeeper layout: znode paths and the JSON each holds (Kafka 2.x's formats).

Invariants:
- Paths are relative to the chroot of ``zookeeper.connect``, as Kafka's are, so an operator
  reads a sparklog cluster with ``zkCli`` exactly like a Kafka 2.x one.
- ``/brokers/ids/<id>`` (ephemeral) is a ``BrokerInfo``; ``/controller`` (ephemeral) names
  the controller; ``/controller_epoch`` (persistent) is the controller epoch as a decimal;
  ``/brokers/topics/<t>`` is a ``TopicAssignment``: the replicas per partition (first =
  preferred leader), the topic id (Kafka's base64 form on the wire, hex here) and KIP-455's
  ``adding_replicas`` / ``removing_replicas`` while a reassignment is in flight;
  ``/brokers/topics/<t>/partitions/<p>/state`` is a ``PartitionState``; ``/config/topics/<t>``
  holds a topic's config overrides, and each change of them is announced by a sequential
  ``/config/changes/config_change_<seq>`` naming ``topics/<t>`` (Kafka's version 2
  notification); ``/admin/preferred_replica_election`` (Kafka's ``{"version":1,
  "partitions":[{"topic":..,"partition":..}]}``) asks the controller for preferred
  elections; ``/latest_producer_id_block`` the last producer-id block handed out (its end
  is the next block's start); ``/admin/delete_topics/<t>`` (empty) asks the controller to
  delete topic ``t``.
- Decoding is lenient on fields Kafka added over the years (absent ones take Kafka's
  defaults), strict on what the cluster needs (a state without a leader is an error).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPIC_CONFIGS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
DELETE_TOPICS = "/admin/delete_topics"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CLUSTER_ID = "/cluster/id"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, TOPIC_CONFIGS, CONFIG_CHANGES, DELETE_TOPICS,
                    "/isr_change_notification")

NO_LEADER = -1


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def config_path(topic: str) -> str:
    return f"{TOPIC_CONFIGS}/{topic}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _dump(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


class Endpoint(NamedTuple):
    """One advertised listener of a broker: its name, security protocol and address."""

    listener: str
    protocol: str
    host: str
    port: int


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as ``/brokers/ids/<id>`` registers it: every advertised listener
    (``endpoints``, in the order of ``listeners``; Kafka's ``NAME://HOST:PORT`` strings and
    ``listener_security_protocol_map``), the top-level host and port being the first
    PLAINTEXT one's (null and -1 without one), as Kafka writes them. ``metrics_url`` is
    sparklog's own field (its ``metrics.listener``'s URL, absent when it has none): the
    status pages of the other brokers read this broker's groups there; Kafka's readers
    ignore a field they do not know."""

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    metrics_url: str | None = None

    @property
    def host(self) -> str:
        return self.endpoints[0].host

    @property
    def port(self) -> int:
        return self.endpoints[0].port

    def endpoint(self, listener: str | None) -> Endpoint | None:
        """The endpoint of ``listener`` (None: the first), None when it has no such one."""
        if listener is None:
            return self.endpoints[0]
        return next((e for e in self.endpoints if e.listener == listener), None)

    def encode(self) -> bytes:
        plaintext = next((e for e in self.endpoints if e.protocol == "PLAINTEXT"), None)
        return _dump({"version": 4, "host": plaintext.host if plaintext else None,
                      "port": plaintext.port if plaintext else -1,
                      "endpoints": [f"{e.listener}://{_bracket(e.host)}:{e.port}"
                                    for e in self.endpoints],
                      "listener_security_protocol_map": {e.listener: e.protocol
                                                         for e in self.endpoints},
                      "rack": self.rack, "jmx_port": -1, "features": {},
                      "timestamp": _now_ms(),
                      **({"metrics_url": self.metrics_url} if self.metrics_url else {})})

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerInfo:
        value = json.loads(data)
        protocols = value.get("listener_security_protocol_map") or {}
        endpoints = []
        for item in value.get("endpoints") or []:
            name, _, address = item.partition("://")
            host, _, port = address.rpartition(":")
            endpoints.append(Endpoint(name, protocols.get(name, name), host.strip("[]"),
                                      int(port)))
        if not endpoints:
            endpoints.append(Endpoint("PLAINTEXT", "PLAINTEXT", value["host"],
                                      int(value["port"])))
        return cls(broker_id, tuple(endpoints), value.get("rack"), value.get("metrics_url"))


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True)
class PartitionState:
    """``.../partitions/<p>/state``; ``zk_version`` is the znode version it was read at (the
    compare-and-set token of the next write), not part of the JSON."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = field(default=-1, compare=False)

    def encode(self) -> bytes:
        return _dump({"controller_epoch": self.controller_epoch, "leader": self.leader,
                      "version": 1, "leader_epoch": self.leader_epoch, "isr": list(self.isr)})

    @classmethod
    def decode(cls, data: bytes, zk_version: int) -> PartitionState:
        value = json.loads(data)
        return cls(int(value["leader"]), int(value["leader_epoch"]),
                   tuple(int(b) for b in value["isr"]), int(value["controller_epoch"]),
                   zk_version)


Replicas = dict[int, tuple[int, ...]]


def _replicas(value: dict[str, Any] | None) -> Replicas:
    return {int(p): tuple(int(b) for b in r) for p, r in (value or {}).items()}


def _listed(replicas: Replicas) -> dict[str, list[int]]:
    return {str(p): list(r) for p, r in sorted(replicas.items())}


def encode_topic_id(topic_id: str) -> str:
    """Kafka's text form of a topic id (URL-safe base64 of its 16 bytes, unpadded)."""
    return base64.urlsafe_b64encode(uuid.UUID(hex=topic_id).bytes).rstrip(b"=").decode()


def decode_topic_id(text: str) -> str:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))).hex


@dataclass(frozen=True)
class TopicAssignment:
    """``/brokers/topics/<t>``: ``partitions`` maps each partition to its replicas (during a
    reassignment: target + original, KIP-455), ``adding`` / ``removing`` the replicas a
    reassignment adds and removes; ``zk_version`` is the compare-and-set token."""

    partitions: Replicas
    topic_id: str | None = None
    adding: Replicas = field(default_factory=dict)
    removing: Replicas = field(default_factory=dict)
    zk_version: int = field(default=-1, compare=False)

    def encode(self) -> bytes:
        value: dict[str, Any] = {"version": 2, "partitions": _listed(self.partitions),
                                 "adding_replicas": _listed(self.adding),
                                 "removing_replicas": _listed(self.removing)}
        if self.topic_id is not None:
            value["version"], value["topic_id"] = 3, encode_topic_id(self.topic_id)
        return _dump(value)

    @classmethod
    def decode(cls, data: bytes, zk_version: int = -1) -> TopicAssignment:
        value = json.loads(data)
        topic_id = value.get("topic_id")
        return cls(_replicas(value["partitions"]),
                   None if topic_id is None else decode_topic_id(topic_id),
                   _replicas(value.get("adding_replicas")),
                   _replicas(value.get("removing_replicas")), zk_version)


def encode_assignment(assignment: Replicas) -> bytes:
    return TopicAssignment(assignment).encode()


def decode_assignment(data: bytes) -> Replicas:
    return TopicAssignment.decode(data).partitions


def encode_controller(broker_id: int) -> bytes:
    return _dump({"version": 1, "brokerid": broker_id, "timestamp": _now_ms()})


def decode_controller(data: bytes) -> int:
    return int(json.loads(data)["brokerid"])


def encode_topic_config(config: dict[str, str]) -> bytes:
    return _dump({"version": 1, "config": config})


def decode_topic_config(data: bytes) -> dict[str, str]:
    return {k: str(v) for k, v in json.loads(data).get("config", {}).items()}


def encode_partitions(partitions: list[tuple[str, int]]) -> bytes:
    return _dump({"version": 1, "partitions": [{"topic": t, "partition": p}
                                                for t, p in partitions]})


def decode_partitions(data: bytes) -> list[tuple[str, int]]:
    return [(str(e["topic"]), int(e["partition"])) for e in json.loads(data)["partitions"]]


def encode_producer_id_block(broker_id: int, start: int, end: int) -> bytes:
    """Kafka's block: ``block_end`` is the block's last id (inclusive)."""
    return _dump({"version": 1, "broker": broker_id, "block_start": str(start),
                  "block_end": str(end - 1)})


def decode_producer_id_block_end(data: bytes) -> int:
    """The first id after the block (the next block's start)."""
    return int(json.loads(data)["block_end"]) + 1


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    return str(json.loads(data)["id"])
