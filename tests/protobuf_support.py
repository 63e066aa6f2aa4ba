"""A Protobuf file for the tests (built at run time, no generated code): ``shop.Order``
with a nested message, an enum, repeated and map fields, a Timestamp and unsigned ints, and a
second message ``shop.Refund``; records of it as confluent-kafka's ``ProtobufSerializer``
writes them."""

from __future__ import annotations

import base64
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

F = descriptor_pb2.FieldDescriptorProto


def order_file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="shop/order.proto", package="shop", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"])
    order = proto.message_type.add(name="Order")
    line = order.nested_type.add(name="Line")
    line.field.add(name="sku", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    line.field.add(name="qty", number=2, type=F.TYPE_INT32, label=F.LABEL_OPTIONAL)
    entry = order.nested_type.add(name="TotalsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    status = order.enum_type.add(name="Status")
    status.value.add(name="NEW", number=0)
    status.value.add(name="PAID", number=1)
    fields = [("id", F.TYPE_INT64, None, F.LABEL_OPTIONAL),
              ("status", F.TYPE_ENUM, ".shop.Order.Status", F.LABEL_OPTIONAL),
              ("lines", F.TYPE_MESSAGE, ".shop.Order.Line", F.LABEL_REPEATED),
              ("totals", F.TYPE_MESSAGE, ".shop.Order.TotalsEntry", F.LABEL_REPEATED),
              ("at", F.TYPE_MESSAGE, ".google.protobuf.Timestamp", F.LABEL_OPTIONAL),
              ("first", F.TYPE_MESSAGE, ".shop.Order.Line", F.LABEL_OPTIONAL),
              ("big", F.TYPE_UINT64, None, F.LABEL_OPTIONAL),
              ("raw", F.TYPE_BYTES, None, F.LABEL_OPTIONAL),
              ("price", F.TYPE_DOUBLE, None, F.LABEL_OPTIONAL),
              ("tags", F.TYPE_STRING, None, F.LABEL_REPEATED)]
    for number, (name, kind, type_name, label) in enumerate(fields, 1):
        field = order.field.add(name=name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = type_name
    refund = proto.message_type.add(name="Refund")
    refund.field.add(name="order_id", number=1, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    return proto


ORDER_PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";

message Order {
  message Line {
    string sku = 1;
    int32 qty = 2;
  }
  enum Status {
    NEW = 0;
    PAID = 1;
  }
  int64 id = 1;
  Status status = 2;
  repeated Line lines = 3;
  map<string, int64> totals = 4;
  google.protobuf.Timestamp at = 5;
  Line first = 6;
  uint64 big = 7;
  bytes raw = 8;
  double price = 9;
  repeated string tags = 10;
}

message Refund {
  int64 order_id = 1;
}
"""
"""``order_file`` as .proto text."""


def order_schema() -> str:
    """The file as confluent-kafka registers it (base64 FileDescriptorProto)."""
    return base64.b64encode(order_file().SerializeToString()).decode()


def message_classes() -> tuple[Any, Any]:
    """``(Order, Refund)`` message classes."""
    pool = descriptor_pool.DescriptorPool()
    known = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(known)
    pool.Add(known)
    pool.Add(order_file())
    return tuple(message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
                 for name in ("shop.Order", "shop.Refund"))


def orders(order: Any) -> list[Any]:
    """Three orders: full, empty (every field absent), and with edge values."""
    full = order(id=7, status=1, lines=[order.Line(sku="a", qty=2), order.Line(sku="b")],
                 totals={"eur": 12, "usd": -3}, first=order.Line(sku="a", qty=2),
                 big=2**64 - 1, raw=b"\x00\xff", price=2.5, tags=["x", "y"])
    full.at.FromMicroseconds(1_700_000_000_123_456)
    return [full, order(), order(id=-1, status=5, big=5)]


def expected(message: Any) -> dict[str, Any]:
    """What a decoded ``shop.Order`` row should hold, written out by hand per field."""
    import datetime

    return {
        "id": message.id,
        "status": {0: "NEW", 1: "PAID"}.get(message.status, str(message.status)),
        "lines": [{"sku": line.sku, "qty": line.qty} for line in message.lines],
        "totals": sorted(message.totals.items()),
        "at": (datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
               + datetime.timedelta(microseconds=message.at.ToMicroseconds()))
        if message.HasField("at") else None,
        "first": {"sku": message.first.sku, "qty": message.first.qty}
        if message.HasField("first") else None,
        "big": message.big - 2**64 if message.big >= 2**63 else message.big,
        "raw": message.raw, "price": message.price, "tags": list(message.tags)}


def sorted_maps(rows: list[dict[str, Any] | None]) -> list[dict[str, Any] | None]:
    """Decoded rows with their ``totals`` map in key order (a map's wire order is not kept)."""
    return [row if row is None else {**row, "totals": sorted(row["totals"])} for row in rows]


def serializer(order: Any, registry: SchemaRegistryClient) -> Any:
    return ProtobufSerializer(order, registry, {"use.deprecated.format": False})


def context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)
