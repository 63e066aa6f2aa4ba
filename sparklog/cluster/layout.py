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
  holds a topic's config overrides; ``/latest_producer_id_block`` the last producer-id
  block handed out (its end is the next block's start); ``/admin/delete_topics/<t>``
  (empty) asks the controller to delete topic ``t``.
- Decoding is lenient on fields Kafka added over the years (absent ones take Kafka's
  defaults), strict on what the cluster needs (a state without a leader is an error).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
TOPIC_CONFIGS = "/config/topics"
DELETE_TOPICS = "/admin/delete_topics"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CLUSTER_ID = "/cluster/id"
PERSISTENT_PATHS = (BROKER_IDS, TOPICS, TOPIC_CONFIGS, "/config/changes", DELETE_TOPICS,
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


@dataclass(frozen=True)
class BrokerInfo:
    """A live broker as ``/brokers/ids/<id>`` registers it."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None

    def encode(self) -> bytes:
        return _dump({"version": 4, "host": self.host, "port": self.port,
                      "endpoints": [f"PLAINTEXT://{self.host}:{self.port}"],
                      "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
                      "rack": self.rack, "jmx_port": -1, "features": {},
                      "timestamp": _now_ms()})

    @classmethod
    def decode(cls, broker_id: int, data: bytes) -> BrokerInfo:
        value = json.loads(data)
        return cls(broker_id, value["host"], int(value["port"]), value.get("rack"))


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
