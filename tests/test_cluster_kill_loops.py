"""Wider kill loops on a real cluster (issue 31): one ZooKeeper (module), three broker
processes, three partitions led by different brokers (replication factor 3,
min.insync.replicas 2), a confluent-kafka producer per partition with acks=all and
idempotence writing throughout, while a seeded random sequence of faults runs:

- ``kill-leader``: SIGKILL a partition's leader, wait for a new one, restart it;
- ``kill-follower``: SIGKILL one of a partition's followers, restart it;
- ``kill-shrunk``: SIGKILL a follower, wait until the ISR has shrunk, then SIGKILL the
  leader as well (the last in-sync replica leads alone: acks=all is refused until one
  returns), restart both;
- ``pause-leader``: SIGSTOP a partition's leader past its ZooKeeper session, wait until
  another broker leads, then SIGCONT it (it must step down and follow);
- ``pause-controller``: SIGSTOP the controller until another broker took office, SIGCONT.

After each fault every partition gets its full ISR back and the producers progress. At
the end nothing acknowledged is lost, duplicated or reordered, and every replica of every
partition holds byte-identical log data.

The seed is printed (``-s`` shows it; a failure's captured output has it) and
``SPARKLOG_KILL_SEED`` replays it; ``SPARKLOG_KILL_LOOPS`` sets the number of faults: each
kind once in a seeded order, then random ones (CI runs the five in about 80 s; a long run,
past pytest-timeout's 300 s: ``SPARKLOG_KILL_LOOPS=50 pytest --timeout=0 -s ...``)."""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable

from broker_fixtures import (
    BackgroundProducer,
    Cluster,
    consume_confluent,
    own_cluster,
    paused,
    wait_until,
    zk_client,
    zookeeper,
)
from kazoo.exceptions import NoNodeError

from sparklog.cluster.layout import CONTROLLER

__all__ = ["own_cluster", "zookeeper"]  # fixtures, imported for pytest

LOOPS = int(os.environ.get("SPARKLOG_KILL_LOOPS", "5"))
SEED = int(os.environ.get("SPARKLOG_KILL_SEED", str(random.SystemRandom().randrange(1 << 32))))
TOPICS = ("kl-a", "kl-b", "kl-c")
PROGRESS = 50
"""Records each producer gets acknowledged after every fault."""


class Faults:
    """The faults of the loop, on ``cluster`` with ``producers`` running."""

    def __init__(self, cluster: Cluster, producers: list[BackgroundProducer],
                 rng: random.Random) -> None:
        self.cluster = cluster
        self.producers = producers
        self.rng = rng

    def settle(self) -> None:
        """Every broker up, every partition's ISR whole, every producer progressing."""
        for broker in self.cluster.brokers:
            if not broker.running:
                broker.start()
        for topic in TOPICS:
            self.cluster.wait_for_isr(topic, {0, 1, 2})
        for producer in self.producers:
            producer.wait_for_progress(PROGRESS)

    def _victims(self) -> tuple[str, int, list[int]]:
        topic = self.rng.choice(TOPICS)
        leader = self.cluster.leader(topic)
        return topic, leader, [i for i in range(3) if i != leader]

    def _new_leader(self, topic: str, old: int) -> None:
        wait_until(lambda: self.cluster.leader(topic) != old, message=f"{topic}: a new leader")

    def kill_leader(self) -> str:
        topic, leader, _ = self._victims()
        self.cluster.brokers[leader].kill()
        self._new_leader(topic, leader)
        return f"kill-leader {topic} broker {leader}"

    def kill_follower(self) -> str:
        topic, _, followers = self._victims()
        victim = self.rng.choice(followers)
        self.cluster.brokers[victim].kill()
        for producer in self.producers:
            producer.wait_for_progress(PROGRESS)  # two in-sync replicas are enough
        return f"kill-follower {topic} broker {victim}"

    def kill_shrunk(self) -> str:
        topic, leader, followers = self._victims()
        follower = self.rng.choice(followers)
        self.cluster.brokers[follower].kill()
        self.cluster.wait_for_isr(topic, {0, 1, 2} - {follower})
        self.cluster.brokers[leader].kill()
        self._new_leader(topic, leader)
        return f"kill-shrunk {topic} follower {follower} then leader {leader}"

    def pause_leader(self) -> str:
        topic, leader, _ = self._victims()
        with paused(self.cluster.brokers[leader]):
            self._new_leader(topic, leader)
        return f"pause-leader {topic} broker {leader}"

    def pause_controller(self) -> str:
        with zk_client(self.cluster) as zk:
            old = json.loads(zk.get(CONTROLLER)[0])["brokerid"]

            def replaced() -> bool:
                try:
                    return bool(json.loads(zk.get(CONTROLLER)[0])["brokerid"] != old)
                except NoNodeError:  # between two controllers
                    return False

            with paused(self.cluster.brokers[old]):
                wait_until(replaced, message="another controller")
        return f"pause-controller broker {old}"


def log_bytes(cluster: Cluster, broker: int, topic: str) -> bytes:
    directory = cluster.brokers[broker].data_dir / f"{topic}-0"
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def test_acks_all_survives_random_kills_and_pauses(own_cluster: Cluster) -> None:
    cluster = own_cluster
    print(f"kill loop seed {SEED} ({LOOPS} faults): SPARKLOG_KILL_SEED={SEED} replays it")
    rng = random.Random(SEED)  # the victims
    pick = random.Random(SEED + 1)  # the faults: a run of N faults replays any shorter one
    # a record waits out a whole fault: kill-shrunk refuses acks=all until a broker is back
    # and in sync again, which takes longer than the usual 15 s on a loaded machine
    producers = [BackgroundProducer(cluster.bootstrap, topic, consume=False,
                                    replication_factor=3, replicas=[i, (i + 1) % 3, (i + 2) % 3],
                                    producer_conf={"message.timeout.ms": 120_000})
                 for i, topic in enumerate(TOPICS)]
    for producer in producers:
        producer.start()
    faults = Faults(cluster, producers, rng)
    kinds: list[Callable[[], str]] = [faults.kill_leader, faults.kill_follower,
                                      faults.kill_shrunk, faults.pause_leader,
                                      faults.pause_controller]
    first = pick.sample(kinds, len(kinds))  # every kind once, then random ones
    faults.settle()
    for loop in range(LOOPS):
        fault = first[loop] if loop < len(first) else pick.choice(kinds)
        started = time.monotonic()
        done = fault()
        faults.settle()
        print(f"fault {loop}: {done}, settled in {time.monotonic() - started:.1f} s")

    acked = {}
    for producer in producers:
        acked[producer.topic] = producer.stop_and_verify()
    for topic in TOPICS:
        cluster.wait_for_isr(topic, {0, 1, 2})
        values = [int(r.value or b"-1")
                  for r in consume_confluent(cluster.bootstrap, topic, acked[topic])]
        assert values == list(range(acked[topic])), topic
        wait_until(lambda topic=topic: log_bytes(cluster, 0, topic) == log_bytes(cluster, 1, topic)
                   == log_bytes(cluster, 2, topic),
                   message=f"{topic}: byte-identical replicas")
