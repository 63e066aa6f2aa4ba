"""The Spark source's two decoders give the same Arrow data, and the fallback is chosen when
the compiled one is missing.

``ColumnarRecordBuilder`` (the compiled ``sparklog.record._columns``, built by
``make venv``) and ``AiokafkaRecordBuilder`` (aiokafka's decoder, the fallback) are fed the
same random Fetch answers: batches of every codec, CreateTime and LogAppendTime, null keys
and values, headers with null values, offset gaps (compaction), transaction markers (control
batches), a cut-short last batch, and a random [start, until) range. Every chunk must have
exactly the schema pyspark requires, and all chunks together the same rows in the same order.
"""

from __future__ import annotations

import logging
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema

from sparklog.datasource.read import arrow_records
from sparklog.datasource.read.arrow_records import (
    AiokafkaRecordBuilder,
    ColumnarRecordBuilder,
    RecordBuilder,
    new_record_builder,
)
from sparklog.datasource.schema import source_schema
from sparklog.errors import CorruptRecordError
from sparklog.record.compression import CODECS
from sparklog.record.records import build_batch

headers = st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=8)),
                   max_size=3)
records = st.lists(st.tuples(st.none() | st.binary(max_size=20),
                             st.none() | st.binary(max_size=60), headers,
                             st.integers(-(2**40), 2**40)), min_size=1, max_size=10)
batch_specs = st.lists(st.tuples(records, st.sampled_from(CODECS), st.integers(0, 1),
                                 st.integers(0, 2), st.booleans()), min_size=1, max_size=6)


def fetch_answer(specs: list, cut: int) -> tuple[bytes, int]:
    """The batches back to back (a control batch after each flagged one), the last one cut
    ``cut`` bytes short; and the offset after the last batch."""
    parts, offset = [], 0
    for items, codec, timestamp_type, gap, marker in specs:
        deltas = [i * (gap + 1) for i in range(len(items))]
        parts.append(build_batch(items, base_offset=offset, codec=codec,
                                 timestamp_type=timestamp_type, offset_deltas=deltas))
        offset += deltas[-1] + 1
        if marker:
            parts.append(build_batch(
                [(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 0), (), 0)],
                base_offset=offset, producer_id=5, producer_epoch=0, transactional=True,
                is_control=True))
            offset += 1
    answer = b"".join(parts)
    return answer[: len(answer) - cut], offset


def decode(builder: RecordBuilder, answers: list[bytes], start: int, until: int
           ) -> list[pa.RecordBatch]:
    chunks = [chunk for answer in answers for chunk in builder.add(answer, start, until)]
    return [*chunks, builder.build()]


@settings(max_examples=200, deadline=None)
@given(batch_specs, st.booleans(), st.integers(0, 70), st.data())
def test_both_decoders_give_the_same_rows(specs: list, include_headers: bool, cut: int,
                                          data: st.DataObject) -> None:
    answer, end = fetch_answer(specs, cut)
    start = data.draw(st.integers(0, end))
    until = data.draw(st.integers(start, end + 2))
    split = data.draw(st.integers(0, len(answer)))  # two Fetch answers: the first is cut
    answers = [answer[:split], answer] if split else [answer]
    schema = to_arrow_schema(source_schema(include_headers), timezone="UTC")
    tables = []
    for builder_class in (ColumnarRecordBuilder, AiokafkaRecordBuilder):
        chunks = decode(builder_class("topic", 3, include_headers), answers, start, until)
        assert all(chunk.schema.equals(schema) for chunk in chunks)
        tables.append(pa.Table.from_batches(chunks, schema=schema).combine_chunks())
    assert tables[0].equals(tables[1])
    assert all(start <= offset < until for offset in tables[0].column("offset").to_pylist())


def test_chunks_are_bounded_and_hold_every_record() -> None:
    value = b"v" * 1000
    answer = b"".join(build_batch([(None, value, (), 1)] * 500, base_offset=500 * n)
                      for n in range(60))
    builder = ColumnarRecordBuilder("t", 0, include_headers=False)
    chunks = decode(builder, [answer], 0, 30_000)
    assert len(chunks) > 30_000 * 1000 // ColumnarRecordBuilder.max_bytes  # several chunks
    assert all(chunk.num_rows <= 2 * ColumnarRecordBuilder.max_bytes // 1000 for chunk in chunks)
    offsets = pa.Table.from_batches(chunks).column("offset").to_pylist()
    assert offsets == list(range(30_000))


def test_a_header_key_that_is_not_utf8_is_corrupt() -> None:
    batch = build_batch([(b"k", b"v", (("h", b"1"),), 1)])
    bad = batch.replace(b"\x02h", b"\x02\xff")  # the header key (CRCs are not checked)
    builder = ColumnarRecordBuilder("t", 0, include_headers=True)
    assert list(builder.add(bad, 0, 1)) == []
    with pytest.raises(CorruptRecordError, match="header key is not UTF-8"):
        builder.build()


def test_the_compiled_decoder_is_built_and_chosen(caplog: pytest.LogCaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_records, "_announced", False)
    with caplog.at_level(logging.INFO, logger=arrow_records.__name__):
        assert isinstance(new_record_builder("t", 0, False), ColumnarRecordBuilder)
        new_record_builder("t", 1, False)
    assert [r.getMessage() for r in caplog.records] == [
        "the sparklog source decodes record batches with the compiled columnar decoder "
        "(sparklog.record._columns)"]


def test_without_the_extension_aiokafka_decodes(caplog: pytest.LogCaptureFixture,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrow_records, "_announced", False)
    monkeypatch.setattr(arrow_records, "RecordColumns", None)
    with caplog.at_level(logging.INFO, logger=arrow_records.__name__):
        builder = new_record_builder("t", 0, False)
    assert isinstance(builder, AiokafkaRecordBuilder)
    assert "aiokafka's decoder" in caplog.records[0].getMessage()
    assert list(builder.add(build_batch([(b"k", b"v", (), 1)]), 0, 1)) == []
    assert builder.build().column("value").to_pylist() == [b"v"]
