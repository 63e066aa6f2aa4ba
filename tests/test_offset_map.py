"""The log cleaner's two offset maps give the same verdicts, and a spliced batch holds exactly
the records kept.

The compiled map (``sparklog.storage._offset_map``, built by ``make venv``) and the pure
Python ``OffsetMap`` it falls back to are fed the same random batches (every codec, null keys
and values, headers, offset gaps, timestamps before and after the base); for every batch and
both tombstone rules their ``Retained`` must be equal, and the Python map is itself checked
against a plain dict of the latest offset per key. ``splice_batch`` of a verdict must decode
to exactly the kept records, with their offsets and timestamps, with or without a new delete
horizon.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.record.batch import DELETE_HORIZON_MASK, validate_batch
from sparklog.record.compression import CODECS
from sparklog.record.records import (
    Record,
    build_batch,
    decode_records,
    records_section,
    splice_batch,
)
from sparklog.storage.offset_map import NativeOffsetMap, OffsetMap, new_offset_map

KEYS = [None, b"", b"a", b"b" * 7, b"c" * 8, b"d" * 9, b"e" * 40]

records = st.lists(st.tuples(st.sampled_from(KEYS), st.none() | st.binary(max_size=30),
                             st.lists(st.tuples(st.text(max_size=4),
                                                st.none() | st.binary(max_size=5)), max_size=2),
                             st.integers(-1000, 1000)),
                   min_size=1, max_size=8)
batches = st.lists(st.tuples(records, st.sampled_from(CODECS), st.integers(0, 3)),
                   min_size=1, max_size=8)


def make_batches(specs: list) -> list[tuple[bytes, list[Record]]]:
    """Batches in offset order; each record ``gap`` offsets after the previous one."""
    out, offset = [], 0
    for items, codec, gap in specs:
        deltas = [i * (gap + 1) for i in range(len(items))]
        batch = build_batch([(k, v, tuple(h), 10_000 + t) for k, v, h, t in items],
                            base_offset=offset, codec=codec, offset_deltas=deltas)
        out.append((batch, decode_records(batch, validate_batch(batch))))
        offset += deltas[-1] + 1
    return out


def test_the_compiled_map_is_built_and_is_the_default() -> None:
    assert NativeOffsetMap is not None, "make venv builds sparklog.storage._offset_map"
    assert isinstance(new_offset_map(1 << 20), NativeOffsetMap)


@settings(max_examples=150, deadline=None)
@given(batches)
def test_both_maps_keep_the_same_records(specs: list) -> None:
    built = make_batches(specs)
    maps = [NativeOffsetMap(1 << 16, 0.9), OffsetMap(1 << 16)]
    latest: dict[bytes, int] = {}
    for batch, decoded in built:
        header = validate_batch(batch)
        for offset_map in maps:
            offset_map.add_keys(records_section(batch, header), header)
        latest.update((r.key, r.offset) for r in decoded if r.key is not None)
    assert len(maps[0]) == len(maps[1]) == len(latest)
    for batch, decoded in built:
        header = validate_batch(batch)
        section = records_section(batch, header)
        for drop in (False, True):
            verdicts = [m.retained(section, header, drop) for m in maps]
            assert verdicts[0] == verdicts[1]
            kept = [r for r in decoded if r.key is not None and latest[r.key] == r.offset
                    and not (drop and r.value is None)]
            assert verdicts[0].kept == len(kept)
            assert verdicts[0].tombstones == any(r.value is None for r in kept)


@settings(max_examples=150, deadline=None)
@given(batches, st.booleans(), st.data())
def test_a_spliced_batch_holds_exactly_the_kept_records(specs: list, horizon: bool,
                                                        data: st.DataObject) -> None:
    offset_map = NativeOffsetMap(1 << 16, 0.9)
    built = make_batches(specs)
    for batch, _ in built:
        header = validate_batch(batch)
        offset_map.add_keys(records_section(batch, header), header)
    batch, decoded = data.draw(st.sampled_from(built))
    header = validate_batch(batch)
    section = records_section(batch, header)
    retained = offset_map.retained(section, header, False)
    if not retained.kept:
        return
    horizon_ms = 99_999 if horizon else -1
    spliced = splice_batch(header, section, retained, horizon_ms)
    new = validate_batch(spliced)
    kept = [r for r in decoded if r.key is not None
            and r.offset >= offset_map_latest(built).get(r.key, -1)]
    assert decode_records(spliced, new) == kept
    assert new._replace(batch_length=0, crc=0, record_count=0, base_timestamp=0,
                        max_timestamp=0, attributes=0) == header._replace(
        batch_length=0, crc=0, record_count=0, base_timestamp=0, max_timestamp=0,
        attributes=0)
    assert new.record_count == len(kept)
    assert new.max_timestamp == max(r.timestamp for r in kept)
    if horizon:
        assert new.delete_horizon_ms == horizon_ms
        assert new.attributes == header.attributes | DELETE_HORIZON_MASK
    else:
        assert (new.base_timestamp, new.attributes) == (header.base_timestamp,
                                                        header.attributes)


def offset_map_latest(built: list[tuple[bytes, list[Record]]]) -> dict[bytes, int]:
    return {r.key: r.offset for _, decoded in built for r in decoded if r.key is not None}


def test_a_first_batch_larger_than_the_map_is_taken_whole() -> None:
    """The cleaner always maps one batch, whatever its size; the table grows for it."""
    offset_map = NativeOffsetMap(3 * 24, 0.9)
    assert offset_map.capacity == 2
    batch = build_batch([(b"k%d" % n, b"v", (), 0) for n in range(50)])
    header = validate_batch(batch)
    offset_map.add_keys(records_section(batch, header), header)
    assert len(offset_map) == 50 and not offset_map.has_room_for(1)
    assert offset_map.retained(records_section(batch, header), header, False).kept == 50
    offset_map.clear()
    assert len(offset_map) == 0 and offset_map.has_room_for(2)


@pytest.mark.parametrize("memory_bytes", [24 * 10, 1 << 20])
def test_capacity_follows_the_memory_budget(memory_bytes: int) -> None:
    assert NativeOffsetMap(memory_bytes, 0.9).capacity == int(memory_bytes // 24 * 0.9)
