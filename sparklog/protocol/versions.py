"""The APIs and version ranges the broker advertises, and which header versions they use.

Invariants:
- ``ADVERTISED`` is the one source of truth for what ApiVersions announces and for what the
  codec accepts; it holds the last non-flexible version of each API (the table in
  ``kafka-wire.md``), so every advertised version uses request header v1 and response
  header v0.
- The header functions answer for any (key, version), also ones we do not advertise: a key
  we do not know is treated as non-flexible (request header v1), so a broker can still parse
  its header and answer it.
- ApiVersions responses always use response header v0, whatever the version.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from types import MappingProxyType


class ApiKey(IntEnum):
    """Kafka's API keys, named as in Apache Kafka's ``ApiKeys`` (only those we advertise)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44


# key -> (min advertised, max advertised, first flexible version or None if never flexible)
_TABLE: dict[int, tuple[int, int, int | None]] = {
    ApiKey.PRODUCE: (0, 8, 9),
    ApiKey.FETCH: (0, 11, 12),
    ApiKey.LIST_OFFSETS: (0, 5, 6),
    ApiKey.METADATA: (0, 8, 9),
    ApiKey.OFFSET_COMMIT: (0, 7, 8),
    ApiKey.OFFSET_FETCH: (0, 5, 6),
    ApiKey.FIND_COORDINATOR: (0, 2, 3),
    ApiKey.JOIN_GROUP: (0, 5, 6),
    ApiKey.HEARTBEAT: (0, 3, 4),
    ApiKey.LEAVE_GROUP: (0, 3, 4),
    ApiKey.SYNC_GROUP: (0, 3, 4),
    ApiKey.DESCRIBE_GROUPS: (0, 4, 5),
    ApiKey.LIST_GROUPS: (0, 2, 3),
    ApiKey.SASL_HANDSHAKE: (0, 1, None),
    ApiKey.API_VERSIONS: (0, 2, 3),
    ApiKey.CREATE_TOPICS: (0, 4, 5),
    ApiKey.DELETE_TOPICS: (0, 3, 4),
    ApiKey.DELETE_RECORDS: (0, 1, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 1, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 3, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 2, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 2, 3),
    ApiKey.END_TXN: (0, 2, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 2, 3),
    ApiKey.DESCRIBE_CONFIGS: (0, 3, 4),
    ApiKey.ALTER_CONFIGS: (0, 1, 2),
    ApiKey.SASL_AUTHENTICATE: (0, 1, 2),
    ApiKey.CREATE_PARTITIONS: (0, 1, 2),
    ApiKey.DELETE_GROUPS: (0, 1, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 0, 1),
}

ADVERTISED: Mapping[int, tuple[int, int]] = MappingProxyType(
    {key: (low, high) for key, (low, high, _) in _TABLE.items()}
)
"""api key -> (min, max) version, in api key order: the ApiVersions response body."""

_FIRST_FLEXIBLE: dict[int, int] = {
    key: first for key, (_, _, first) in _TABLE.items() if first is not None
}


def supported(api_key: int) -> tuple[int, int] | None:
    """The advertised (min, max) versions of ``api_key``, or None if we do not serve it."""
    return ADVERTISED.get(api_key)


def is_supported(api_key: int, version: int) -> bool:
    """Whether ``version`` of ``api_key`` lies inside the advertised range."""
    bounds = ADVERTISED.get(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]


def is_flexible(api_key: int, version: int) -> bool:
    """Whether the version uses compact strings/arrays and tagged fields (KIP-482)."""
    first = _FIRST_FLEXIBLE.get(api_key)
    return first is not None and version >= first


def request_header_version(api_key: int, version: int) -> int:
    """2 for flexible versions (tagged fields after client_id), else 1."""
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    """1 for flexible versions (tagged fields after the correlation id), else 0.

    ApiVersions is the exception: its response header is always v0, so that a client can
    read the answer before it knows which versions the broker supports.
    """
    if api_key == ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, version) else 0
