"""Request rate, latency and errors per API, and bytes sent per topic: what the server's
dispatch records for each request (Kafka's ``RequestMetrics`` and ``BytesOutPerSec``).

Invariants:
- Only the broker's event loop thread touches these: the server records on it and the status
  snapshot copies them on it (``copy``), so nothing is locked and a copy is consistent.
- A request costs a few dict and list updates, plus one per topic or partition of its
  response (error codes, bytes out): nothing per record.
- Names are Kafka's: requests by ``ApiKeys`` name (``Produce``, ``ListOffsets``...); a
  consumer's Fetch also counts as ``FetchConsumer`` (a follower's as ``FetchFollower``), as
  in Kafka. Errors are counted per error code of the response (``NONE`` included), and a
  request that failed without a response as its exception's code (else
  ``UNKNOWN_SERVER_ERROR``).
- A deleted topic's bytes out are forgotten (``forget_topic``), as Kafka removes a deleted
  topic's meters; a topic of the same name starts again from 0.
- Latency runs from the whole request frame being read to its response being encoded (with
  a Fetch's long poll; the socket write is not included), in milliseconds, into the fixed
  buckets ``LATENCY_BUCKETS_MS`` (the last bucket takes everything above them).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Any

from sparklog.errors import ErrorCode, KafkaError
from sparklog.protocol.entities import count_error_codes
from sparklog.protocol.fetch_response import FetchResponse
from sparklog.protocol.framing import RequestHeader
from sparklog.protocol.versions import ApiKey, api_name

LATENCY_BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
                      2500.0, 5000.0, 10000.0, 30000.0)


class _ApiCounters:
    """One API's running counts (mutable; ``ApiTotals`` is its copy)."""

    __slots__ = ("buckets", "by_version", "errors", "total_ms")

    def __init__(self) -> None:
        self.by_version: dict[int, int] = {}
        self.buckets = [0] * (len(LATENCY_BUCKETS_MS) + 1)
        self.total_ms = 0.0
        self.errors: dict[int, int] = {}

    def add(self, version: int, ms: float, errors: dict[int, int]) -> None:
        self.by_version[version] = self.by_version.get(version, 0) + 1
        self.buckets[bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
        self.total_ms += ms
        for code, count in errors.items():
            self.errors[code] = self.errors.get(code, 0) + count


@dataclass(frozen=True, slots=True)
class ApiTotals:
    """One API's counts at a moment: requests per version, latency bucket counts (not
    cumulative; one more than ``LATENCY_BUCKETS_MS``), their sum, and errors per code."""

    by_version: dict[int, int]
    buckets: tuple[int, ...]
    total_ms: float
    errors: dict[int, int]

    @property
    def requests(self) -> int:
        return sum(self.by_version.values())


@dataclass(frozen=True, slots=True)
class RequestTotals:
    apis: dict[str, ApiTotals]
    bytes_out: dict[str, int]
    refused_connections: dict[str, int]  # per listener: max.connections(.per.ip)


class RequestMetrics:
    def __init__(self) -> None:
        self._apis: dict[str, _ApiCounters] = {}
        self._names: dict[int, str] = {}
        self._bytes_out: dict[str, int] = {}
        self._refused: dict[str, int] = {}

    def refused_connection(self, listener: str) -> None:
        """A connection to ``listener`` was refused (``max.connections``, ``.per.ip``)."""
        self._refused[listener] = self._refused.get(listener, 0) + 1

    def answered(self, header: RequestHeader, request: Any, result: Any, seconds: float) -> None:
        """A request was handled and ``result`` (a response entity, a FetchResponse, or None
        when no response is sent) encoded ``seconds`` after its frame was read."""
        errors: dict[int, int] = {}
        if isinstance(result, FetchResponse):
            self._fetched(result, errors)
        elif result is not None:
            count_error_codes(result, errors)
        self._add(header, request, seconds, errors)

    def failed(self, header: RequestHeader, request: Any, error: Exception,
               seconds: float) -> None:
        """A request's handling raised ``error`` (its connection is then closed)."""
        code = error.code if isinstance(error, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR
        self._add(header, request, seconds, {int(code): 1})

    def _fetched(self, response: FetchResponse, errors: dict[int, int]) -> None:
        errors[response.error_code] = 1
        bytes_out = self._bytes_out
        for topic in response.topics:
            sent = 0
            for partition in topic.partitions:
                errors[partition.error_code] = errors.get(partition.error_code, 0) + 1
                records = partition.records
                if records is not None:
                    sent += len(records) if isinstance(records, bytes) else records.length
            if sent:
                bytes_out[topic.topic] = bytes_out.get(topic.topic, 0) + sent

    def _add(self, header: RequestHeader, request: Any, seconds: float,
             errors: dict[int, int]) -> None:
        key = header.api_key
        name = self._names.get(key) or self._names.setdefault(key, api_name(key))
        ms = seconds * 1000
        self._counters(name).add(header.api_version, ms, errors)
        if key == ApiKey.FETCH:
            from_follower = getattr(request, "replica_id", -1) >= 0
            self._counters("FetchFollower" if from_follower else "FetchConsumer").add(
                header.api_version, ms, errors)

    def _counters(self, name: str) -> _ApiCounters:
        found = self._apis.get(name)
        if found is None:
            found = self._apis[name] = _ApiCounters()
        return found

    def forget_topic(self, topic: str) -> None:
        self._bytes_out.pop(topic, None)

    def bytes_out_total(self) -> int:
        return sum(self._bytes_out.values())

    def copy(self) -> RequestTotals:
        return RequestTotals(
            {name: ApiTotals(dict(c.by_version), tuple(c.buckets), c.total_ms, dict(c.errors))
             for name, c in self._apis.items()},
            dict(self._bytes_out), dict(self._refused))
