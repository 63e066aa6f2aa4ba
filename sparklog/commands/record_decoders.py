"""Decoders of internal topics' records for ``sparklog dump-log``, one per ``--NAME-decoder``.

``DECODERS`` maps a name to a ``RecordDecoder``; ``dump-log`` offers one flag per entry
(``offsets`` gives ``--offsets-decoder``, as Kafka's tool), so an internal topic added later
(``__transaction_state``: ``--transaction-log-decoder``) registers its decoder here with
``register`` and needs nothing else.

Invariants:
- A decoder turns a record's key and value into the text printed after ``key:`` and
  ``payload:``, in Kafka 3.x's layout: JSON ``{"type": "<key version>", "data": {...}}`` for a
  key and ``{"version": "<value version>", "data": {...}}`` for a value, ``<DELETE>`` for a
  tombstone. Field names are Kafka's (camelCase, as its JSON message converters write them).
- A record a decoder cannot read is printed as ``unknown`` with the reason, never an
  exception: dump-log keeps going.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from dataclasses import asdict, fields, is_dataclass
from typing import Any

from sparklog.coordinator.consumer_protocol import PROTOCOL_TYPE, subscribed_topics
from sparklog.coordinator.group_records import (
    ConsumerGroupKey,
    GroupKey,
    decode_consumer_value,
    decode_group_value,
    decode_key,
    decode_offset_value,
)

RecordDecoder = Callable[[bytes | None, bytes | None], tuple[str, str]]
"""(key, value) -> (key text, payload text)."""

TOMBSTONE = "<DELETE>"
DECODERS: dict[str, RecordDecoder] = {}


def register(name: str, decoder: RecordDecoder) -> None:
    """Offer ``decoder`` as ``dump-log --NAME-decoder``."""
    DECODERS[name] = decoder


def _version(data: bytes) -> str:
    return str(int.from_bytes(data[:2], "big", signed=True))


def _json(kind: str, version: str, data: dict[str, Any]) -> str:
    return json.dumps({kind: version, "data": data}, separators=(",", ":"))


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _fields(record: Any, rename: dict[str, str] | None = None) -> dict[str, Any]:
    return {(rename or {}).get(k, _camel(k)): v for k, v in asdict(record).items()}


def offsets_decoder(key: bytes | None, value: bytes | None) -> tuple[str, str]:
    """``__consumer_offsets`` records: offset commits, classic group metadata and KIP-848
    consumer groups' records (topic ids as Kafka prints them: base64 URL-safe, unpadded)."""
    if key is None:
        return "unknown (a record of __consumer_offsets has a key)", TOMBSTONE
    try:
        decoded_key = decode_key(key)
    except ValueError as exc:
        return f"unknown ({exc})", "unknown"
    key_text = _json("type", _version(key), _key_fields(decoded_key))
    if value is None:
        return key_text, TOMBSTONE
    try:
        if isinstance(decoded_key, ConsumerGroupKey):
            data = _jsonable(decode_consumer_value(decoded_key.record_type, value))
        elif isinstance(decoded_key, GroupKey):
            group = decode_group_value(value)
            data = _fields(group, {"state_timestamp": "currentStateTimestamp"})
            data["members"] = [_member(m, group.protocol_type) for m in group.members]
        else:
            data = _fields(decode_offset_value(value))
    except ValueError as exc:
        return key_text, f"unknown ({exc})"
    return key_text, _json("version", _version(value), data)


def _key_fields(key: Any) -> dict[str, Any]:
    if isinstance(key, ConsumerGroupKey):
        return {"groupId": key.group, **({"memberId": key.member_id} if key.member_id else {})}
    return _fields(key)


def _jsonable(value: Any) -> Any:
    """A decoded record (kio entities, tuples, topic ids, bytes) as JSON-ready data,
    camelCase; a tagged field at its default is left out, as Kafka's JSON leaves it."""
    if is_dataclass(value) and not isinstance(value, type):
        return {_camel(f.name): _jsonable(getattr(value, f.name)) for f in fields(value)
                if "tag" not in f.metadata or getattr(value, f.name) != f.default}
    if isinstance(value, tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, uuid.UUID):
        return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()
    if isinstance(value, bytes):  # a classic member's protocol metadata: base64, as Kafka's
        return base64.b64encode(value).decode()
    return value


def _member(member: Any, protocol_type: str) -> dict[str, Any]:
    data = _fields(member, {"rebalance_timeout_ms": "rebalanceTimeout",
                            "session_timeout_ms": "sessionTimeout"})
    subscription, assignment = data.pop("subscription"), data.pop("assignment")
    if protocol_type == PROTOCOL_TYPE:
        try:
            data["subscription"] = {"topics": list(subscribed_topics(subscription))}
        except ValueError:
            data["subscription"] = f"<{len(subscription)} bytes>"
    else:
        data["subscription"] = f"<{len(subscription)} bytes>"
    data["assignment"] = f"<{len(assignment)} bytes>"
    return data


register("offsets", offsets_decoder)
