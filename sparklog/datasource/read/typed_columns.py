"""Typed key and value columns: their schemas resolved on the driver, decoded in the tasks.

Driver: ``resolve`` turns ``TypedOptions`` into a ``Decoding``: each column's reader
schema (inline, or from the registry: ``<column>SchemaId``, else ``<column>SchemaVersion``
of the subject, else its latest version; the subject defaults to ``<topic>-<column>``) and
its Arrow type. It runs at ``load()`` (the DataFrame's schema) and once per reader (a batch
query, or a stream for its whole run, so every micro-batch has the schema the DataFrame was
created with), and the result travels in every task's ``TaskSettings``: tasks never ask
which version is latest. A reader whose choice differs from the DataFrame's schema (the
subject got a new latest version in between) fails, saying so.

Executors: ``read_typed`` wraps the plain reader's Arrow batches, replacing the ``key`` /
``value`` column by the decoded one (``sparklog.schemas``: fastavro into the reader
schema, Arrow's JSON reader, or protobuf's parser into the reader's message). Writer
schemas of other ids are asked of the registry once per id per task.

Invariants:
- Every batch ``read_typed`` yields has exactly ``arrow_source_schema`` of the typed
  columns. A null key or value stays null.
- A record that does not decode (``onDecodeError``): ``fail`` raises
  ``UndecodableRecordError`` naming the topic, partition, offset, column and why; ``skip``
  drops it, counts it, and logs the count and the first error once at the task's end;
  ``deadLetter`` drops it and sends it (key, value and own headers as read) to
  ``deadLetterTopic`` through ``sparklog.dlq``'s producer, with its ``dlq.*`` headers
  (origin, error class and message). The task's dead letters are sent at its end, before
  it completes: a task that could not send them fails. Writer id and batch id are the
  task's topic-partition and offset range, so a retried task does not send them twice
  (the intents are kept in the executor's temp directory).
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from sparklog.datasource.options import OptionError
from sparklog.datasource.read.planning import KafkaInputPartition
from sparklog.datasource.read.read_options import Subscription
from sparklog.datasource.read.typed_options import (
    ColumnDecoding,
    ColumnOptions,
    Decoding,
    TypedOptions,
)
from sparklog.datasource.schema import arrow_source_schema, source_schema
from sparklog.schemas.avro_types import UnsupportedSchemaError
from sparklog.schemas.registry import SchemaLookupError, WriterSchemas
from sparklog.schemas.wire import Decoded

log = logging.getLogger(__name__)


class UndecodableRecordError(ValueError):
    """A record's key or value does not decode with its column's schema (onDecodeError=fail)."""


# -- driver ---------------------------------------------------------------------------------


def resolve(typed: TypedOptions, subscription: Subscription,
            loaded: StructType | None = None, include_headers: bool = False) -> Decoding:
    """The columns' schemas; with ``loaded`` (the schema the DataFrame got at ``load()``),
    an error when the registry's choice changed since (a newer latest version)."""
    decoding = Decoding(tuple(_resolve_column(typed, column, subscription)
                              for column in typed.columns),
                        typed.registry, typed.on_decode_error, typed.dead_letter_topic)
    if loaded is not None and loaded != source_schema(
            include_headers, decoding.arrow_type("key"), decoding.arrow_type("value")):
        raise OptionError("the schema chosen for the typed columns changed since the "
                          "DataFrame was loaded (a new version of the subject?): load it "
                          "again, or pin the version with valueSchemaVersion / keySchemaVersion")
    return decoding


def _resolve_column(typed: TypedOptions, column: ColumnOptions,
                    subscription: Subscription) -> ColumnDecoding:
    from sparklog.schemas.registry import ChosenSchema, choose

    expected = column.format.upper()
    if column.inline_schema is not None:
        chosen = ChosenSchema(expected, column.inline_schema)
    else:
        assert typed.registry is not None
        try:
            chosen = choose(typed.registry, _subject(column, subscription), column.version,
                            column.schema_id)
        except SchemaLookupError as exc:
            raise OptionError(f"option {column.column}Format={column.format}: {exc}") from None
        if chosen.schema_type != expected:
            raise OptionError(f"option {column.column}Format={column.format}: the registry's "
                              f"schema is {chosen.schema_type}, not {expected}")
    try:
        if column.format == "protobuf":
            from sparklog.schemas.protobuf_types import arrow_type as protobuf_type

            kind = protobuf_type(chosen.schema_str, column.message)
        else:
            if column.format == "avro":
                from sparklog.schemas.avro_types import arrow_type
            else:
                from sparklog.schemas.json_types import arrow_type
            kind = arrow_type(chosen.schema_str)
    except UnsupportedSchemaError as exc:
        raise OptionError(f"the {column.column} schema cannot be read as typed columns: "
                          f"{exc}") from None
    except ValueError as exc:  # not JSON
        raise OptionError(f"the {column.column} schema is not valid JSON: {exc}") from None
    return ColumnDecoding(column.column, column.format, chosen.schema_str, chosen.schema_id,
                          kind, framed=typed.registry is not None, message=column.message)


def _subject(column: ColumnOptions, subscription: Subscription) -> str:
    """The subject named, or TopicNameStrategy's ``<topic>-<column>`` of the one topic."""
    if column.subject is not None:
        return column.subject
    if len(subscription.topics) == 1:
        return f"{subscription.topics[0]}-{column.column}"
    raise OptionError(f"the {column.column} subject defaults to <topic>-{column.column}, "
                      f"for one subscribed topic; with {subscription.option} name it with "
                      f"option {column.column}Subject")


# -- executors ------------------------------------------------------------------------------


def read_typed(task: KafkaInputPartition,
               read: Callable[[KafkaInputPartition], Iterator[pa.RecordBatch]]
               ) -> Iterator[pa.RecordBatch]:
    """``read(task)``'s batches with the typed columns decoded (see the module)."""
    settings = task.settings
    decoding = settings.decoding
    assert decoding is not None
    dead_letters = decoding.on_decode_error == "deadLetter"
    raw_task = task
    if dead_letters and not settings.include_headers:  # a dead letter keeps its headers
        raw_task = replace(task, settings=replace(settings, include_headers=True))
    schema = arrow_source_schema(settings.include_headers, decoding.arrow_type("key"),
                                 decoding.arrow_type("value"))
    writers = WriterSchemas(decoding.registry) if decoding.registry is not None else None
    decoders = {column.column: _decoder(column, writers) for column in decoding.columns}
    failed: list[tuple[pa.RecordBatch, dict[int, tuple[str, str]]]] = []
    skipped = 0
    first_error = ""
    for batch in read(raw_task):
        arrays = {name: batch.column(name) for name in batch.schema.names}
        bad: dict[int, tuple[str, str]] = {}  # row -> (column, why)
        for name, decoder in decoders.items():
            decoded: Decoded = decoder(arrays[name].to_pylist())
            arrays[name] = decoded.array
            for row, why in decoded.errors.items():
                bad.setdefault(row, (name, why))
        if bad:
            if decoding.on_decode_error == "fail":
                row, (name, why) = min(bad.items())
                raise UndecodableRecordError(
                    f"topic {task.topic} partition {task.partition} offset "
                    f"{batch.column('offset')[row].as_py()}: the {name} does not decode as "
                    f"{_format(decoding, name)}: {why} (option onDecodeError=skip or "
                    "deadLetter passes over such records)")
            if dead_letters:
                failed.append((batch, bad))
            skipped += len(bad)
            first_error = first_error or f"offset {batch.column('offset')[min(bad)]}: " \
                f"{bad[min(bad)][1]}"
        typed = pa.RecordBatch.from_arrays([arrays[name] for name in schema.names],
                                           schema=schema)
        if bad:
            typed = typed.filter(pc.invert(pa.array(
                [row in bad for row in range(typed.num_rows)], pa.bool_())))
        yield typed
    if failed:
        _send_dead_letters(task, decoding, failed)
    if skipped:
        log.warning("%s-%d [%d, %d): %d records did not decode and were %s; the first: %s",
                    task.topic, task.partition, task.start, task.until, skipped,
                    "sent to " + str(decoding.dead_letter_topic) if dead_letters else "skipped",
                    first_error)


def _format(decoding: Decoding, column: str) -> str:
    return next(c.format for c in decoding.columns if c.column == column)


def _decoder(column: ColumnDecoding,
             writers: WriterSchemas | None) -> Callable[[list[bytes | None]], Decoded]:
    if column.format == "avro":
        from sparklog.schemas.avro_decode import AvroDecoder

        return AvroDecoder(column.schema_str, column.arrow_type, framed=column.framed,
                           reader_id=column.schema_id, writer_schema=writers).decode
    if column.format == "protobuf":
        from sparklog.schemas.protobuf_decode import ProtobufDecoder

        return ProtobufDecoder(column.schema_str, column.arrow_type, framed=column.framed,
                               message=column.message, reader_id=column.schema_id,
                               writer_schema=writers).decode
    from sparklog.schemas.json_decode import JsonDecoder

    return JsonDecoder(column.arrow_type, framed=column.framed).decode


def _send_dead_letters(task: KafkaInputPartition, decoding: Decoding,
                       failed: list[tuple[pa.RecordBatch, dict[int, tuple[str, str]]]]) -> None:
    from sparklog.dlq.headers import DeadLetter
    from sparklog.dlq.producer import DeadLetterProducer

    topic = decoding.dead_letter_topic
    assert topic is not None
    letters = []
    for batch, bad in failed:
        rows = batch.take(pa.array(sorted(bad), pa.int64())).to_pylist()
        for row, record in zip(sorted(bad), rows, strict=True):
            column, why = bad[row]
            stamp = record["timestamp"]
            letters.append((topic, DeadLetter.from_record(
                key=record["key"], value=record["value"],
                headers=[(h["key"], h["value"]) for h in record["headers"] or ()],
                topic=task.topic, partition=task.partition, offset=record["offset"],
                timestamp_ms=None if stamp is None else int(stamp.timestamp() * 1000),
                error_class=UndecodableRecordError.__name__,
                error_message=f"the {column} does not decode as "
                              f"{_format(decoding, column)}: {why}")))
    client = task.settings.client
    writer_id = f"sparklog-source-{task.topic}-{task.partition}"
    producer = DeadLetterProducer(
        client.servers, writer_id=writer_id,
        state_dir=Path(tempfile.gettempdir()) / "sparklog-source-dlq" / writer_id,
        destinations=[topic], client_config=client.security.librdkafka())
    try:
        producer.send(f"{task.start}-{task.until}", letters)
    finally:
        producer.close()
