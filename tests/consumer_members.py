"""Consumer group members for tests (and ``bench/group_join.py``): a confluent-kafka consumer
polling on a thread of its own, recording every record it got with when it got it, and each
assignment it held in turn; a fourth member joining three that keep consuming (``join_fourth``).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from broker_fixtures import TIMEOUT, create_topic, unique_topic, wait_until
from confluent_kafka import Consumer, Producer


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
        self.assignments: list[tuple[float, frozenset[tuple[str, int]]]] = []
        """Each assignment the member held, from when its poll loop first saw it."""
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
                if not self.assignments or self.assignments[-1][1] != self.assigned:
                    self.assignments.append((time.monotonic(), frozenset(self.assigned)))
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

    def assignments_since(self, start: float) -> list[frozenset[tuple[str, int]]]:
        """The assignment held at ``start`` and each one after it."""
        held = [i for i, (t, _) in enumerate(self.assignments) if t <= start]
        first = held[-1] if held else 0
        return [assignment for _, assignment in self.assignments[first:]]


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


@dataclass(frozen=True)
class JoinRun:
    """Three members consumed a 12-partition topic (fed about 1,000 records/s) for a while
    (from ``before``), then a fourth joined them (at ``joined``), and all four consumed until
    ``settled``; every member is stopped."""

    members: list[Member]
    before: float
    joined: float
    settled: float

    def gap(self) -> float:
        """The longest pause of any of the first three members from the join on."""
        return max(m.longest_gap(self.joined, self.settled) for m in self.members[:3])

    def noise(self) -> float:
        """The same measure over as long a time before the join (fetch waits, threads, the
        producer's pace)."""
        end = min(self.before + (self.settled - self.joined), self.joined)
        return max(m.longest_gap(self.before, end) for m in self.members[:3])

    def consumed_twice(self) -> int:
        records = [record for member in self.members for record in member.records()]
        return len(records) - len(set(records))


def join_fourth(bootstrap: str, group: str, protocol: str, settle_s: float = 1.5) -> JoinRun:
    """A fourth member of ``protocol`` joins three that keep consuming."""
    topic = create_topic(bootstrap, unique_topic(f"join-{protocol}"), partitions=12)
    stop = threading.Event()

    def produce() -> None:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        n = 0
        while not stop.is_set():
            producer.produce(topic, b"x", partition=n % 12)
            producer.poll(0)
            n += 1
            time.sleep(0.001)
        producer.flush(10)

    producing = threading.Thread(target=produce, daemon=True)
    producing.start()
    conf = consumer_conf(bootstrap, group, protocol)
    members = start_members(3, conf, [topic])
    try:
        wait_until(lambda: shared(members, every_partition(topic, 12)))
        time.sleep(0.5)
        before = time.monotonic()
        time.sleep(settle_s)
        joined = time.monotonic()
        members.extend(start_members(1, conf, [topic]))
        wait_until(lambda: shared(members, every_partition(topic, 12)))
        time.sleep(settle_s)
        settled = time.monotonic()
    finally:
        stop.set()
        for member in members:
            member.stop()
        producing.join(TIMEOUT)
    return JoinRun(members, before, joined, settled)
