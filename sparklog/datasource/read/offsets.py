"""Partition offsets and the JSON forms Spark's Kafka options and checkpoints use.

Invariants:
- An offset map is ``{TopicPartition: next offset to read}``.
- ``to_json`` gives ``{"topic": {"partition": offset}}`` with topics sorted by name and
  partitions by number, partition keys as strings: Structured Streaming stores offsets as
  JSON and compares them as strings, so equal maps must serialise identically.
- ``from_json`` is its inverse and accepts exactly that shape (what ``json.loads`` gives
  back from a checkpoint); anything else raises ``ValueError`` naming what is wrong.
- The option parsers raise ``OptionError`` naming the option and showing the expected form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sparklog.client.cluster import TopicPartition
from sparklog.datasource.options import OptionError

PartitionOffsets = dict[TopicPartition, int]

EARLIEST = -2
LATEST = -1


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    result: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        result.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return result


def from_json(value: Any) -> PartitionOffsets:
    return _partition_map(value, "offsets")


def parse_offsets_option(option: str, text: str) -> PartitionOffsets:
    """``{"t":{"0":23,"1":-2}}``: offsets, -2 earliest, -1 latest."""
    example = 'earliest, latest or JSON like {"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'
    offsets = _parse_json_option(option, text, example)
    for tp, offset in offsets.items():
        if offset < EARLIEST:
            raise OptionError(f"option {option}: offset {offset} for {tp} is invalid; use an "
                              "offset >= 0, -1 for latest or -2 for earliest")
    return offsets


def parse_timestamps_option(option: str, text: str) -> PartitionOffsets:
    """``{"t":{"0":1700000000000}}``: a timestamp in milliseconds per partition."""
    timestamps = _parse_json_option(option, text, 'JSON like {"topicA":{"0":1700000000000}}')
    for tp, timestamp in timestamps.items():
        if timestamp < 0:
            raise OptionError(f"option {option}: timestamp {timestamp} for {tp} is invalid; "
                              "use milliseconds since the epoch (>= 0)")
    return timestamps


def parse_assign_option(text: str) -> list[TopicPartition]:
    """``{"topicA":[0,1],"topicB":[2,4]}``."""
    example = '{"topicA":[0,1],"topicB":[2,4]}'
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(parts, list) and all(type(p) is int and p >= 0 for p in parts)
        for parts in value.values()
    ):
        raise OptionError(f"option assign: expected JSON like {example}, got {text!r}")
    assigned = sorted({TopicPartition(t, p) for t, parts in value.items() for p in parts})
    if not assigned:
        raise OptionError(f"option assign: no topic partitions to assign in {text!r}")
    return assigned


def _parse_json_option(option: str, text: str, example: str) -> PartitionOffsets:
    try:
        return _partition_map(json.loads(text), option)
    except ValueError as exc:
        raise OptionError(f"option {option}: expected {example}, got {text!r} ({exc})") from None


def _partition_map(value: Any, what: str) -> PartitionOffsets:
    if not isinstance(value, dict):
        raise ValueError(f"{what} must be a JSON object of topics")
    result: PartitionOffsets = {}
    for topic, partitions in value.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"{what}: topic {topic!r} must map partition numbers to values")
        for partition, number in partitions.items():
            if not (isinstance(partition, str) and partition.isdigit()):
                raise ValueError(f"{what}: partition {partition!r} of {topic!r} is not a number")
            if type(number) is not int:
                raise ValueError(f"{what}: value {number!r} for {topic}-{partition} is not an "
                                 "integer")
            result[TopicPartition(topic, int(partition))] = number
    return result
