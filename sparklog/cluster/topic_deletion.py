"""Topic deletion, the controller's part (Kafka's ZooKeeper-era protocol).

A DeleteTopics request writes ``/admin/delete_topics/<t>``; the controller then removes the
topic from ZooKeeper: its partitions' state znodes, its assignment ``/brokers/topics/<t>``,
its configs ``/config/topics/<t>``, and the ``/admin`` request itself. Every broker watching
the assignment sees it go and deletes its logs of the topic (``ReplicaManager``), and the
broker that took the request answers once it saw it.

Invariants:
- A topic goes from ZooKeeper in one fenced transaction (``fencing``): all of it, or nothing
  (a deposed controller deletes nothing; a write that raced it is retried on the next pass).
- A request for a topic that does not exist is simply removed.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient

from sparklog.cluster.fencing import commit, fenced_transaction
from sparklog.cluster.layout import DELETE_TOPICS, config_path, delete_topic_path, topic_path

log = logging.getLogger(__name__)


def _znodes(zk: KazooClient, topic: str) -> list[str]:
    """The topic's znodes, children before parents."""
    found = []
    partitions = f"{topic_path(topic)}/partitions"
    if zk.exists(partitions) is not None:
        for partition in zk.get_children(partitions):
            path = f"{partitions}/{partition}"
            found += [f"{path}/{child}" for child in zk.get_children(path)] + [path]
        found.append(partitions)
    return found + [p for p in (topic_path(topic), config_path(topic))
                    if zk.exists(p) is not None]


def delete_requested_topics(zk: KazooClient, epoch_version: int) -> bool:
    """Delete every topic ``/admin/delete_topics`` names; False when one must be retried."""
    done = True
    for topic in zk.get_children(DELETE_TOPICS):
        transaction = fenced_transaction(zk, epoch_version)
        for path in [*_znodes(zk, topic), delete_topic_path(topic)]:
            transaction.delete(path)
        if commit(transaction):
            log.info("topic %s deleted", topic)
        else:
            done = False
    return done
