"""API keys, which header versions a request or response of a (key, version) uses, and the
small enumerations requests carry (isolation levels, coordinator key types).

Which APIs and versions the broker serves is not decided here: each handler declares it
(``sparklog.broker.registry``). This module only knows protocol facts.

Invariants:
- The header functions answer for any (key, version), also ones nobody serves: whether a
  version is flexible (KIP-482: compact strings and arrays, tagged fields) is read from
  Kafka's message schemas as kio carries them; versions kio has no schema for (the oldest
  ones, removed in Kafka 4) and unknown keys are non-flexible (request header v1), so a
  broker can still parse their header and answer them.
- ApiVersions responses always use response header v0, whatever the version.
"""

from __future__ import annotations

from enum import IntEnum
from functools import cache

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema


class ApiKey(IntEnum):
    """Kafka's API keys, named as in Apache Kafka's ``ApiKeys``."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
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
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    VOTE = 52
    BEGIN_QUORUM_EPOCH = 53
    END_QUORUM_EPOCH = 54
    DESCRIBE_QUORUM = 55
    ALTER_PARTITION = 56
    UPDATE_FEATURES = 57
    ENVELOPE = 58
    FETCH_SNAPSHOT = 59
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    CONTROLLER_REGISTRATION = 70
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    ASSIGN_REPLICAS_TO_DIRS = 73
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    UPDATE_RAFT_VOTER = 82
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    STREAMS_GROUP_HEARTBEAT = 88
    STREAMS_GROUP_DESCRIBE = 89
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


class IsolationLevel(IntEnum):
    """Fetch and ListOffsets ``isolation_level`` (Kafka's ``IsolationLevel``)."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class CoordinatorType(IntEnum):
    """FindCoordinator ``key_type`` (Kafka's ``CoordinatorType``)."""

    GROUP = 0
    TRANSACTION = 1


class ConfigSource(IntEnum):
    """Where a config's value comes from, as DescribeConfigs and CreateTopics v5+ answer
    it (Kafka's ``DescribeConfigsResponse.ConfigSource``)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


TOPIC_CONFIG_SOURCES = {"topic": ConfigSource.DYNAMIC_TOPIC_CONFIG,
                        "broker": ConfigSource.STATIC_BROKER_CONFIG,
                        "default": ConfigSource.DEFAULT_CONFIG}
"""A topic config's source as the log config names it (``LogConfig.source_of``), as Kafka
answers it."""


def api_name(api_key: int) -> str:
    """Kafka's name of an API (``ApiKeys.LIST_OFFSETS.name`` is ``ListOffsets``), or
    ``API <key>`` for a key Kafka has none for."""
    try:
        return "".join(part.capitalize() for part in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"API {api_key}"


@cache
def is_flexible(api_key: int, version: int) -> bool:
    """Whether the version uses compact strings/arrays and tagged fields (KIP-482)."""
    try:
        return bool(load_request_schema(api_key, version).__flexible__)
    except (UnknownAPIKey, UnknownEntity):  # no schema: not flexible
        return False


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
