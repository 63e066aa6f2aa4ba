"""The broker's API table: what the handlers register is exactly what is advertised and
served, checked end to end with an independent encoder (kafka-python's protocol classes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from broker_fixtures import (
    RawConnection,
    embedded,
    embedded_module,
    frame,
    kio_versions,
    kp_request,
    kp_response,
    parse_api_versions_v0,
    request_frame,
    request_header,
)
from kafka.protocol.api_message import ApiMessage
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.registry import DuplicateHandlerError, handles, load_handlers, served
from sparklog.errors import ErrorCode
from sparklog.protocol.codec import decode_response
from sparklog.protocol.versions import ApiKey

__all__ = ["embedded", "embedded_module"]  # fixtures, imported for pytest

load_handlers()
SERVED = served()


NOT_CLIENT_FACING = {
    # KRaft's quorum and controller APIs: sparklog's cluster is coordinated by ZooKeeper
    ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH, ApiKey.DESCRIBE_QUORUM,
    ApiKey.FETCH_SNAPSHOT, ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT,
    ApiKey.UNREGISTER_BROKER, ApiKey.CONTROLLER_REGISTRATION, ApiKey.ADD_RAFT_VOTER,
    ApiKey.REMOVE_RAFT_VOTER, ApiKey.UPDATE_RAFT_VOTER, ApiKey.ALTER_PARTITION,
    ApiKey.ALLOCATE_PRODUCER_IDS, ApiKey.ASSIGN_REPLICAS_TO_DIRS, ApiKey.ENVELOPE,
    # broker to broker: a coordinator's markers, the share coordinator's state
    ApiKey.WRITE_TXN_MARKERS, ApiKey.INITIALIZE_SHARE_GROUP_STATE,
    ApiKey.READ_SHARE_GROUP_STATE, ApiKey.WRITE_SHARE_GROUP_STATE,
    ApiKey.DELETE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
}
"""Kafka 4's APIs no client sends: left out of the comparison with kio's schemas."""

NOT_SERVED = {
    ApiKey.CREATE_DELEGATION_TOKEN: "delegation tokens (KIP-48): no issue asks for them",
    ApiKey.RENEW_DELEGATION_TOKEN: "delegation tokens",
    ApiKey.EXPIRE_DELEGATION_TOKEN: "delegation tokens",
    ApiKey.DESCRIBE_DELEGATION_TOKEN: "delegation tokens",
    ApiKey.UPDATE_FEATURES: "the levels are the code's (broker/features.py), not an admin's",
    ApiKey.SHARE_GROUP_HEARTBEAT: "share groups (KIP-932): no issue asks for them",
    ApiKey.SHARE_GROUP_DESCRIBE: "share groups",
    ApiKey.SHARE_FETCH: "share groups",
    ApiKey.SHARE_ACKNOWLEDGE: "share groups",
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: "share groups",
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: "share groups",
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: "share groups",
    ApiKey.STREAMS_GROUP_HEARTBEAT: "streams groups (KIP-1071): no issue asks for them",
    ApiKey.STREAMS_GROUP_DESCRIBE: "streams groups",
}
"""Client-facing APIs the broker does not serve, and why (a client asking gets the
connection closed, as Kafka answers an API it lacks)."""

VERSIONS_LEFT_OUT: dict[int, tuple[tuple[int, int], str]] = {}
"""Versions of served APIs left out, and why."""


def test_every_client_facing_version_of_kafka_4_is_served() -> None:
    """Derived from kio's schemas (Kafka 4's message JSON): every version of every
    client-facing API is served, except the APIs and versions listed above, and each
    listed exception is still true (a version served since is taken off the list)."""
    missing: dict[int, list[int]] = {}
    for key in ApiKey:
        versions = kio_versions(key)
        if not versions or key in NOT_CLIENT_FACING:
            continue
        if key in NOT_SERVED:
            assert key not in SERVED, f"{key.name} is served: take it off NOT_SERVED"
            continue
        low, high = SERVED.get(key, (0, -1))
        gap = [v for v in versions if not low <= v <= high]
        if gap:
            missing[key] = gap
    expected = {key: list(range(low, high + 1))
                for key, ((low, high), _) in VERSIONS_LEFT_OUT.items()}
    assert {ApiKey(k).name: v for k, v in missing.items()} == \
        {ApiKey(k).name: v for k, v in expected.items()}


def _every_served_version() -> list[tuple[int, int]]:
    return [(key, version) for key, (low, high) in SERVED.items()
            for version in range(low, high + 1)]


def test_api_versions_advertises_exactly_the_served_table(embedded: EmbeddedBroker) -> None:
    with RawConnection(embedded.bootstrap) as conn:
        response = conn.call(ApiVersionsRequest(version=2), ApiVersionsResponse)
    assert response.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == SERVED


@pytest.mark.parametrize(("api_key", "version"), _every_served_version())
def test_every_advertised_version_is_answered(embedded: EmbeddedBroker, api_key: int,
                                              version: int) -> None:
    """A request (kafka-python's defaults: empty topics, ids and groups) gets a response
    that kafka-python decodes at the same version, on a connection that stays open."""
    request_class = kp_request(api_key)
    extra = {ApiKey.PRODUCE: {"acks": 1},  # KIP-511: Kafka refuses an empty name
             ApiKey.API_VERSIONS: {"client_software_name": "kafka-python",
                                   "client_software_version": "3"}}.get(api_key, {})
    request: ApiMessage = request_class(version=version, **extra)
    response_class = kp_response(api_key)
    with RawConnection(embedded.bootstrap) as conn:
        response = conn.call(request, response_class)
        assert response.header.correlation_id == 1
        again = conn.call(ApiVersionsRequest(version=0), ApiVersionsResponse)
        assert again.error_code == 0  # the connection still serves


def test_api_versions_v3_keeps_the_client_software_and_refuses_a_bad_name(
        embedded: EmbeddedBroker) -> None:
    """KIP-511: a client names its software; a name outside Kafka's pattern is answered
    INVALID_REQUEST (no APIs) on a connection that stays open, as Kafka answers it."""
    def software() -> list[tuple[str, str]]:
        return sorted(name for counts in embedded.client_software().values() for name in counts)

    with RawConnection(embedded.bootstrap) as conn:
        response = conn.call(ApiVersionsRequest(version=4, client_software_name="my-app",
                                                client_software_version="1.2.3"),
                             ApiVersionsResponse)
        assert response.error_code == 0 and response.api_keys
        assert ("my-app", "1.2.3") in software()
        # at the request's version, as Kafka (kafka-python reads any error as a v0 body)
        conn.send_message(ApiVersionsRequest(version=3, client_software_name="my app",
                                             client_software_version="1.2.3"))
        refused = decode_response(ApiKey.API_VERSIONS, 3, conn.recv_frame())
        assert (refused.error_code, refused.api_keys) == (ErrorCode.INVALID_REQUEST, ())
        assert ("my-app", "1.2.3") in software(), "the refused name was not kept"
    with RawConnection(embedded.bootstrap) as conn:
        conn.call(ApiVersionsRequest(version=2), ApiVersionsResponse)
        assert ("unknown", "unknown") in software()


def test_a_version_no_handler_serves_closes_the_connection(
        embedded: EmbeddedBroker, caplog: pytest.LogCaptureFixture) -> None:
    """As Kafka: an unsupported version, or a body that does not decode, closes that
    connection (with one log line naming the API and version); ApiVersions is answered."""
    high = SERVED[ApiKey.METADATA][1]
    with RawConnection(embedded.bootstrap) as conn:
        conn.send(request_frame(ApiKey.METADATA, high + 1, 1, b"\x00\x00"))
        assert conn.read_until_closed() == b""
    with RawConnection(embedded.bootstrap) as conn:  # 4 states in no bytes
        conn.send(frame(request_header(ApiKey.LIST_GROUPS, 4, 1) + b"\x00" + b"\x05\x00"))
        assert conn.read_until_closed() == b""
    with RawConnection(embedded.bootstrap) as conn:  # a header v2 without its tags
        conn.send(request_frame(ApiKey.LIST_GROUPS, 4, 1, b""))
        assert conn.read_until_closed() == b""
    closed = [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
    assert len(closed) == 3, closed
    assert f"Metadata (API key 3) version {high + 1} is not served" in closed[0]
    assert "ListGroups v4 does not decode" in closed[1]
    assert "ListGroups v4's request header" in closed[2]
    with RawConnection(embedded.bootstrap) as conn:  # ApiVersions answers instead
        error, versions = parse_api_versions_v0(conn.request(ApiKey.API_VERSIONS, 99, b""))
    assert error == ErrorCode.UNSUPPORTED_VERSION
    assert versions == SERVED


def test_an_api_without_a_handler_is_not_advertised_and_closes(embedded: EmbeddedBroker) -> None:
    assert ApiKey.UPDATE_FEATURES not in SERVED
    with RawConnection(embedded.bootstrap) as conn:
        conn.send(request_frame(ApiKey.UPDATE_FEATURES, 1, 1, b"\xff\xff\xff\xff"))
        assert conn.read_until_closed() == b""


def test_a_second_handler_for_a_key_is_refused_at_import() -> None:
    async def impostor(*args: object) -> None:
        return None

    with pytest.raises(DuplicateHandlerError, match=r"sparklog\.broker\.api\.produce\.produce"):
        handles(ApiKey.PRODUCE, versions=(0, 8))(impostor)
    assert served() == SERVED  # the first registration stands


def _readme_table() -> dict[int, tuple[int, int]]:
    """(low, high) of each API the README's "What the broker does" table lists."""
    text = (Path(__file__).parent.parent / "README.md").read_text()
    section = text.split("## What the broker does", 1)[1].split("\n## ", 1)[0]
    table: dict[int, tuple[int, int]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if not line.startswith("| ") or cells[0] == "Kafka API":
            continue
        names, ranges = cells[0].split(", "), cells[1].split(", ")
        assert len(names) == len(ranges), line
        for name, versions in zip(names, ranges, strict=True):
            key = ApiKey[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]
            low, _, high = versions.partition("-")
            table[key] = (int(low), int(high or low))
    return table


def test_the_readme_lists_exactly_the_served_versions() -> None:
    assert _readme_table() == SERVED


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


def _tags(*fields: tuple[int, bytes]) -> bytes:
    """A tagged-field section (KIP-482) holding ``fields`` as (tag, data)."""
    return _uvarint(len(fields)) + b"".join(
        _uvarint(tag) + _uvarint(len(data)) + data for tag, data in fields)


def test_unknown_tagged_fields_are_ignored_as_kafka_does(embedded: EmbeddedBroker) -> None:
    """A flexible request (DescribeUserScramCredentials v0, header v2) with tags no schema
    has, in its header, its body and a nested entity, is answered as without them, and the
    connection goes on serving."""
    key, version = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0
    header = request_header(key, version, 7) + _tags((40, b"?"))
    user = _uvarint(len("nobody") + 1) + b"nobody" + _tags((9, b"\x01\x02"))
    body = _uvarint(1 + 1) + user + _tags((99, b"xy"), (1000, b""))
    with RawConnection(embedded.bootstrap) as conn:
        conn.send(frame(header + body))
        answer = decode_response(key, version, conn.recv_frame())
        assert [(r.user, r.error_code) for r in answer.results] == \
            [("nobody", ErrorCode.RESOURCE_NOT_FOUND)]
        error, _ = parse_api_versions_v0(conn.request(ApiKey.API_VERSIONS, 0, b""))
        assert error == ErrorCode.NONE  # still open, still serving
