"""What a read_committed consumer of a topic sees, for the exactly-once tests.

``read_committed`` reads every partition up to its last stable offset with a confluent-kafka
``isolation.level=read_committed`` consumer (until it reports each partition's end), after
checking that no transaction is left open (the stable offset equals the log end offset): a
test of exactly-once output fails on a transaction a crash or a failed task left behind, not
only on a missing or doubled record.
"""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError
from confluent_kafka import TopicPartition as CkTopicPartition

from sparklog.client.cluster import TopicPartition
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap

TIMEOUT = 30.0
LATEST = -1


def _ends(bootstrap: str, tps: list[TopicPartition], isolation: int) -> dict[TopicPartition, int]:
    config = ClientConfig(parse_bootstrap(bootstrap), isolation_level=isolation)
    with KafkaClient(config, RetryPolicy(TIMEOUT, 0.1)) as client:
        return client.list_offsets(dict.fromkeys(tps, LATEST))


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[bytes | None]:
    """The values a read_committed consumer reads, in (partition, offset) order."""
    return [value for _, _, _, value in read_committed_records(bootstrap, topic, partitions)]


Record = tuple[int, int, bytes | None, bytes | None]
"""(partition, offset, key, value)."""


def read_committed_records(bootstrap: str, topic: str, partitions: int) -> list[Record]:
    """What a read_committed consumer reads, in (partition, offset) order."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    stable = _ends(bootstrap, tps, isolation=1)
    assert _ends(bootstrap, tps, isolation=0) == stable, f"a transaction is open in {topic}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "committed-reader",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    read: list[Record] = []
    at_end: set[int] = set()  # partitions whose last stable offset the consumer reached
    try:
        consumer.assign([CkTopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.monotonic() + TIMEOUT
        while len(at_end) < partitions:
            assert time.monotonic() < deadline, f"{topic}: the stable offsets were not reached"
            for message in consumer.consume(1000, 0.2):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                assert error is None, error
                at_end.discard(message.partition())
                read.append((message.partition(), message.offset(), message.key(),
                             message.value()))
    finally:
        consumer.close()
    assert len(read) <= sum(stable.values()), "more records than offsets below the stable ones"
    return sorted(read, key=lambda r: r[:2])
