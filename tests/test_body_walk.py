"""The bounds walk (``sparklog.protocol.body_walk``) against kio's own reader, its model.

Covers:
- for every request and response class kio has (all APIs, all versions) and any entity of
  it, the walk of its encoding ends exactly where kio's reader ends, and the checked
  reader returns what kio's reader returns: the walk never refuses what kio reads and
  follows the same layout;
- unknown tagged fields added to every tagged-field section of a flexible encoding are
  dropped, and what remains decodes to the same entity;
- null where an array may not be null, and a count larger than the bytes left, are refused
  before kio sees them; a nullable array may be null.
"""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from sparklog.protocol.body_walk import BodyError, checked_reader, walk, without_unknown_tags

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))


def _every_class() -> list[type]:
    found = []
    for key, name in sorted(api_key_map.items()):
        for version in sorted(schema_name_map[name]):
            for load in (load_request_schema, load_response_schema):
                try:
                    found.append(load(key, version))
                except UnknownEntity:
                    pass
    return found


CLASSES = _every_class()


def _encode(cls: type, entity: object) -> bytes:
    out = io.BytesIO()
    entity_writer(cls)(out, entity)
    return out.getvalue()


@st.composite
def _encoded(draw: st.DrawFn, classes: list[type]) -> tuple[type, object, bytes]:
    """A class of ``classes``, an entity of it, and its encoding."""
    cls = draw(st.sampled_from(classes))
    entity = draw(st.from_type(cls))
    return cls, entity, _encode(cls, entity)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_walk_ends_where_kio_ends(data: st.DataObject) -> None:
    cls, _, body = data.draw(_encoded(CLASSES))
    prefix = data.draw(st.binary(max_size=3))
    assert walk(cls, prefix + body, len(prefix)) == len(prefix) + len(body)
    assert checked_reader(cls)(prefix + body + b"\xff", len(prefix)) == \
        entity_reader(cls)(prefix + body, len(prefix))


def _with_unknown_tags(body: bytes, sections: list[int]) -> bytes:
    """``body`` with an unknown tag (9999, two bytes) added to the tagged-field section at
    each offset of ``sections`` (each holds a count below 127: one byte)."""
    out = bytearray(body)
    for start in sorted(sections, reverse=True):
        count = out[start]
        out[start:start + 1] = bytes([count + 1]) + b"\xcf\x4e\x02ab"  # uvarint 9999, size 2
    return bytes(out)


def _tag_sections(cls: type, body: bytes) -> list[int]:
    """Where the walk found each tagged-field section of ``body``."""
    from sparklog.protocol import body_walk

    found: list[int] = []
    original = body_walk._Walk.tagged_fields

    def spy(self: body_walk._Walk, plan: body_walk.Plan, offset: int) -> int:
        found.append(offset)
        return original(self, plan, offset)

    body_walk._Walk.tagged_fields = spy  # type: ignore[method-assign]
    try:
        walk(cls, body, 0)
    finally:
        body_walk._Walk.tagged_fields = original  # type: ignore[method-assign]
    return found


FLEXIBLE = [cls for cls in CLASSES if cls.__flexible__]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_unknown_tags_are_dropped_everywhere(data: st.DataObject) -> None:
    cls, entity, body = data.draw(_encoded(FLEXIBLE))
    sections = [s for s in _tag_sections(cls, body) if body[s] < 127]
    tagged = _with_unknown_tags(body, sections)
    stripped = without_unknown_tags(cls, tagged, 0)
    if not sections:
        assert stripped is None
        return
    assert stripped == body
    assert checked_reader(cls)(tagged, 0)[0] == entity


def _metadata_v8(topics_count: bytes) -> bytes:
    return topics_count + b"\x00" * 3  # then three booleans


def test_null_where_the_schema_allows_it() -> None:
    cls = load_request_schema(3, 8)  # Metadata v8: topics is nullable (null: all topics)
    assert walk(cls, _metadata_v8(struct.pack(">i", -1)), 0) == 7
    create_topics = load_request_schema(19, 4)  # CreateTopics v4: topics is not
    with pytest.raises(BodyError, match="non-nullable array is null"):
        walk(create_topics, struct.pack(">i", -1) + b"\x00" * 5, 0)


@pytest.mark.parametrize("count", [8, 2**31 - 1])
def test_a_count_larger_than_the_bytes_left_is_refused(count: int) -> None:
    cls = load_request_schema(3, 8)
    with pytest.raises(BodyError, match=f"array of {count} elements in 3 bytes"):
        walk(cls, _metadata_v8(struct.pack(">i", count)), 0)
