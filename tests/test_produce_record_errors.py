"""Produce's per-record errors (KIP-467): a batch refused because of some of its records
answers which ones (``record_errors``: batch index and reason) and why (``error_message``),
so a client can tell the bad records from the good ones.

The batches are built and the answers decoded with kafka-python's classes (an encoder and a
decoder independent of the broker's), over a raw connection to a real broker process.
"""

from __future__ import annotations

import time

import pytest
from broker_fixtures import (
    RawConnection,
    broker,
    create_topic,
    produce_request,
    topic,
    watermarks,
)
from kafka.protocol.producer import ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder

from sparklog.broker.process import BrokerProcess
from sparklog.errors import ErrorCode

__all__ = ["broker", "topic"]

HOUR_MS = 3_600_000


def batch(records: list[tuple[bytes | None, int]]) -> bytes:
    """A v2 batch of (key, timestamp) records built by kafka-python."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for offset, (key, timestamp) in enumerate(records):
        builder.append(offset, timestamp=timestamp, key=key, value=b"v", headers=[])
    return bytes(builder.build())


def produce_v8(bootstrap: str, name: str, records: bytes) -> object:
    with RawConnection(bootstrap) as conn:
        response = conn.call(produce_request(name, 0, records, version=8), ProduceResponse)
    ((answer,),) = [t.partition_responses for t in response.responses]
    return answer


def test_keyless_records_on_a_compacted_topic_are_named(broker: BrokerProcess,
                                                       topic: str) -> None:
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    answer = produce_v8(broker.bootstrap, topic,
                        batch([(b"k0", now), (None, now), (b"k2", now), (None, now)]))
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (1, "Compacted topic cannot accept message without key"),
        (3, "Compacted topic cannot accept message without key")]
    assert "batch index 1, 3" in answer.error_message
    assert watermarks(broker.bootstrap, topic) == (0, 0)  # nothing of the batch was appended
    # The good records alone go through.
    answer = produce_v8(broker.bootstrap, topic, batch([(b"k0", now), (b"k2", now)]))
    assert answer.error_code == 0 and list(answer.record_errors) == []


def test_records_with_timestamps_out_of_range_are_named(broker: BrokerProcess,
                                                       topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    now = int(time.time() * 1000)
    answer = produce_v8(broker.bootstrap, topic,
                        batch([(b"a", now), (b"b", now + 2 * HOUR_MS), (b"c", now)]))
    assert answer.error_code == ErrorCode.INVALID_TIMESTAMP
    ((index, reason),) = [(e.batch_index, e.batch_index_error_message)
                          for e in answer.record_errors]
    assert index == 1 and f"Timestamp {now + 2 * HOUR_MS} of message with offset 1" in reason


@pytest.mark.parametrize("version", [3, 7])
def test_older_versions_get_the_error_code_alone(broker: BrokerProcess, topic: str,
                                                 version: int) -> None:
    create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    with RawConnection(broker.bootstrap) as conn:
        response = conn.call(produce_request(topic, 0, batch([(None, int(time.time() * 1000))]),
                                             version=version), ProduceResponse)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_RECORD
