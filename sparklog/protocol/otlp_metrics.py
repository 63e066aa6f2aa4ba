"""OpenTelemetry's ``MetricsData`` (OTLP metrics v1, protobuf): what a KIP-714 client pushes
in PushTelemetry, decoded into one flat ``DataPoint`` per metric and attribute set.

Decoding is the ``opentelemetry-proto`` package's generated classes over protobuf's upb
runtime (its parser is bounded by the input: a length beyond the bytes left, a nesting
deeper than 100 messages or a string that is not UTF-8 is a ``DecodeError``).

Invariants:
- ``decode_metrics`` returns the data points or raises ``MalformedMetricsError`` (a
  ``ValueError``); nothing else escapes for any input (``tests/test_decoder_fuzz.py``).
- What it returns is bounded whatever the payload holds: at most ``max_points`` points
  (the first ones, in payload order), at most ``MAX_ATTRIBUTES`` attributes per point,
  names, units and attribute keys and values cut to ``MAX_TEXT`` characters.
- A gauge or sum point's value is its number (``as_double`` or ``as_int``); a histogram's,
  exponential histogram's or summary's is its mean (sum / count, 0 without a count). A sum
  tells its temporality (``delta``: the point is the change since the previous push, which
  Kafka's brokers ask clients for) so its reader can add deltas up.
- Attributes are kept as strings (a bool as ``true``/``false``, an int or double as
  ``str`` gives it; an array, key-value list or bytes as its kind's name), sorted by key;
  only a point's own attributes are kept (resource and scope attributes are not merged).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_DELTA,
    Metric,
    MetricsData,
)

MAX_ATTRIBUTES = 16
MAX_TEXT = 200


class MalformedMetricsError(ValueError):
    """The payload is not an OTLP ``MetricsData`` message."""


@dataclass(frozen=True, slots=True)
class DataPoint:
    name: str
    kind: str  # gauge, sum, histogram, exponential_histogram or summary
    unit: str
    attributes: tuple[tuple[str, str], ...]
    value: float
    time_unix_nano: int
    delta: bool  # a sum pushed with delta temporality


def decode_metrics(payload: bytes, max_points: int) -> list[DataPoint]:
    """The data points of an OTLP ``MetricsData`` payload (see the module invariants)."""
    try:
        data = MetricsData.FromString(payload)
    except DecodeError as exc:
        raise MalformedMetricsError(f"not an OTLP MetricsData message: {exc}") from exc
    points: list[DataPoint] = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in _points(metric):
                    if len(points) >= max_points:
                        return points
                    points.append(point)
    return points


def _points(metric: Metric) -> Iterator[DataPoint]:
    kind = metric.WhichOneof("data")
    if kind is None:
        return
    body: Any = getattr(metric, kind)
    name, unit = metric.name[:MAX_TEXT], metric.unit[:MAX_TEXT]
    delta = kind == "sum" and body.aggregation_temporality == AGGREGATION_TEMPORALITY_DELTA
    for point in body.data_points:
        if kind in ("gauge", "sum"):
            value = float(point.as_int if point.WhichOneof("value") == "as_int"
                          else point.as_double)
        else:
            value = point.sum / point.count if point.count else 0.0
        yield DataPoint(name, kind, unit, _attributes(point.attributes), value,
                        point.time_unix_nano, delta)


def _attributes(pairs: Any) -> tuple[tuple[str, str], ...]:
    found = {pair.key[:MAX_TEXT]: _text(pair.value) for pair in pairs[:MAX_ATTRIBUTES]}
    return tuple(sorted(found.items()))


def _text(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    if kind in ("string_value", "int_value", "double_value"):
        return str(getattr(value, kind))[:MAX_TEXT]
    if kind == "bool_value":
        return "true" if value.bool_value else "false"
    return kind or ""
