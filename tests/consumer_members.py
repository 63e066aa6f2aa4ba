"""Consumer group members for tests: a confluent-kafka consumer polling on a thread of its own,
recording every record it got with when it got it, and its assignment.
"""

from __future__ import annotations

import threading
import time
from itertools import pairwise
from typing import Any

from broker_fixtures import TIMEOUT
from confluent_kafka import Consumer


def consumer_conf(bootstrap: str, group: str, protocol: str = "consumer",
                  **conf: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"bootstrap.servers": bootstrap, "group.id": group,
                            "group.protocol": protocol, "auto.offset.reset": "earliest",
                            "enable.auto.commit": True, "auto.commit.interval.ms": 200}
    return base | conf


class Member(threading.Thread):
    """A consumer polling on its own thread: every record it got, with when it got it."""

    def __init__(self, conf: dict[str, Any], topics: list[str]) -> None:
        super().__init__(daemon=True)
        self.conf, self.topics = conf, topics
        self.received: list[tuple[float, str, int, int]] = []
        self.assigned: set[tuple[str, int]] = set()
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        consumer = Consumer(self.conf)
        consumer.subscribe(self.topics)
        try:
            while not self.stopping.is_set():
                message = consumer.poll(0.05)
                if message is not None:
                    if message.error():
                        self.errors.append(str(message.error()))
                    else:
                        self.received.append((time.monotonic(), message.topic() or "",
                                              message.partition() or 0, message.offset() or 0))
                self.assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
        finally:
            consumer.close()
            self.assigned = set()

    def stop(self) -> None:
        self.stopping.set()
        self.join(TIMEOUT)

    def records(self) -> list[tuple[str, int, int]]:
        return [(topic, partition, offset) for _, topic, partition, offset in self.received]

    def longest_gap(self, start: float, end: float) -> float:
        times = [start, *(t for t, *_ in self.received if start <= t <= end), end]
        return max(b - a for a, b in pairwise(times))


def start_members(count: int, conf: dict[str, Any], topics: list[str]) -> list[Member]:
    members = [Member(conf, topics) for _ in range(count)]
    for member in members:
        member.start()
    return members


def shared(members: list[Member], partitions: set[tuple[str, int]]) -> bool:
    """Every partition is assigned to exactly one of ``members``, and each has some."""
    held = [member.assigned for member in members]
    return (all(held) and sum(len(h) for h in held) == len(partitions)
            and set().union(*held) == partitions)


def every_partition(topic: str, count: int) -> set[tuple[str, int]]:
    return {(topic, p) for p in range(count)}
