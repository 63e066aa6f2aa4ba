"""The registry's store on an in-memory ``_schemas``, driven by random sequences of
registrations, soft and hard deletes and level changes: ids are never handed out twice to
different schemas, identical schemas share theirs, and a replay of the written records (a
restart) gives the same state."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker.schema_registry.errors import RegistryError
from sparklog.broker.schema_registry.store import SchemaStore

SUBJECTS = ("a", "b", "c")
SCHEMAS = [json.dumps({"type": "record", "name": "R", "fields": [
    {"name": f"f{i}", "type": "int", "default": 0} for i in range(n)]}) for n in range(5)]

OPERATIONS = st.lists(st.tuples(
    st.sampled_from(["register", "soft", "hard", "soft_version", "hard_version", "level"]),
    st.sampled_from(SUBJECTS), st.integers(0, len(SCHEMAS) - 1)), max_size=40)


def _state(store: SchemaStore) -> object:
    return ({s: dict(v) for s, v in store.subjects.items()}, dict(store.configs))


@settings(max_examples=200, deadline=None, database=None)
@given(operations=OPERATIONS)
def test_ids_are_unique_and_a_replay_restores_the_state(
        operations: list[tuple[str, str, int]]) -> None:
    log: list[tuple[bytes, bytes | None]] = []
    store = SchemaStore(log.extend)
    given_ids: dict[int, str] = {}
    for operation, subject, index in operations:
        try:
            if operation == "register":
                parsed = store.parse("AVRO", SCHEMAS[index], ())
                entry = store.register(subject, parsed)
                assert given_ids.setdefault(entry.id, parsed.canonical) == parsed.canonical
            elif operation in ("soft", "hard"):
                store.delete_subject(subject, permanent=operation == "hard")
            elif operation in ("soft_version", "hard_version"):
                store.delete_version(subject, None, permanent=operation == "hard_version")
            else:
                store.set_level(subject, ["NONE", "BACKWARD", "FORWARD", "FULL"][index % 4])
        except RegistryError as refused:
            assert refused.error_code in (409, 40401, 40402, 40404, 40405, 40406, 40407)
    for versions in store.subjects.values():
        for version, entry in versions.items():
            assert entry.version == version
            assert given_ids[entry.id] == entry.schema
    restarted = SchemaStore(log.extend)
    restarted.replay(list(log))
    assert _state(restarted) == _state(store)
