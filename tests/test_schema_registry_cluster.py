"""The schema registry on a 3-broker cluster (a real ZooKeeper): every broker serves the
same registry, ids are handed out once across brokers registering at the same time, and the
registry survives the death of the broker that wrote it."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from broker_fixtures import registry_serves, running_cluster, wait_until, zookeeper
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from sparklog.cluster.zookeeper_server import ZooKeeperServer

__all__ = ["zookeeper"]

REGISTRY = {"schema.registry.listeners": "http://127.0.0.1:0"}


def avro_record(name: str, fields: int) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [
        {"name": f"f{i}", "type": "int", "default": 0} for i in range(fields)]})


def test_every_broker_serves_the_same_registry_and_it_survives_its_writer(
        zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    with running_cluster(zookeeper, tmp_path, "registry", REGISTRY) as cluster:
        clients = [SchemaRegistryClient({"url": b.schema_registry_url})
                   for b in cluster.brokers]
        # the topic is created on the first request: retried until it has a leader
        wait_until(lambda: registry_serves(clients[0]), message="_schemas to have a leader")
        # three brokers register different schemas at the same time: ids unique, versions
        # of one subject consecutive
        ids: dict[int, list[int]] = {}

        def register(index: int) -> None:
            ids[index] = [clients[index].register_schema(
                "shared-value", Schema(avro_record("R", 1 + index * 10 + n), "AVRO"))
                for n in range(5)]

        threads = [threading.Thread(target=register, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        every = [i for found in ids.values() for i in found]
        assert len(set(every)) == 15
        assert clients[1].get_versions("shared-value") == list(range(1, 16))
        views = [{v: c.get_version("shared-value", v).schema_id for v in range(1, 16)}
                 for c in clients]
        assert views[0] == views[1] == views[2]
        leader = cluster.leader("_schemas")
        cluster.brokers[leader].kill()
        survivors = [c for i, c in enumerate(clients) if i != leader]
        wait_until(lambda: registry_serves(survivors[0]) and registry_serves(survivors[1]),
                   message="a new _schemas leader serving")
        for client in survivors:
            fresh = SchemaRegistryClient({"url": client._rest_client.base_urls[0]})
            assert {v: fresh.get_version("shared-value", v).schema_id
                    for v in range(1, 16)} == views[0]
        # the new leader hands out a new id, never one the dead leader gave
        new_id = survivors[0].register_schema("after-value", Schema(avro_record("N", 99),
                                                                    "AVRO"))
        assert new_id not in every
        assert survivors[1].register_schema("after-value", Schema(avro_record("N", 99),
                                                                  "AVRO")) == new_id

