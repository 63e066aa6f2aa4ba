"""The registry's state: subjects, versions, ids, configs and modes, kept in ``_schemas``.

The store replays ``_schemas`` (one partition, compacted) at start and then applies each
change it writes: the topic is the registry, memory only its index.

Invariants:
- Everything here runs on the broker's event loop, one call at a time, and on the broker
  that leads ``_schemas``-0 (the only writer), so a change is decided on the state that
  includes every earlier change: an id is handed out once (the largest id the topic holds
  plus one), a subject's versions grow by one.
- A change is written first (one batch per change: the SCHEMA records of a subject's
  deletion together) and applied to memory only once the log took it, through the same
  ``_apply`` a replay uses, so memory never holds what the log does not.
- Registering a schema identical (``ParsedSchema.identity``) to one already registered
  anywhere reuses its id; one identical to a live version of the subject returns that
  version without writing anything.
- Soft-deleted versions stay readable by id and with ``deleted=true`` but are left out of
  listings, lookups and compatibility checks; a hard delete needs a soft one first and
  writes the SCHEMA key's tombstone. A version another live schema references cannot be
  deleted (42206).
- READONLY (global or the subject's) refuses every write but mode changes; IMPORT keeps
  the ids and versions the caller gives, only into an empty registry unless forced.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from sparklog.broker.schema_registry import errors
from sparklog.broker.schema_registry.compatibility import DEFAULT_LEVEL, LEVELS, check
from sparklog.broker.schema_registry.records import (
    Change,
    ConfigChange,
    ModeChange,
    Reference,
    SchemaEntry,
    SchemaRemoved,
    SubjectDeleted,
    decode,
    encode,
)
from sparklog.broker.schema_registry.schema_types import ParsedSchema, parse

MODES = ("READWRITE", "READONLY", "IMPORT")
MAX_VERSION = 2**31 - 1

Write = Callable[[list[tuple[bytes, bytes | None]]], None]
"""Append records to ``_schemas`` as one batch (raises when the log refuses them)."""


class SchemaStore:
    def __init__(self, write: Write) -> None:
        self._write = write
        self.writes = 0  # changes written so far (the listener waits for their replication)
        self.subjects: dict[str, dict[int, SchemaEntry]] = {}
        self._ids: dict[int, SchemaEntry] = {}  # id -> its first registration
        self._by_identity: dict[tuple[object, ...], int] = {}
        self._max_id = 0
        self.configs: dict[str | None, str] = {}
        self.modes: dict[str | None, str] = {}
        self._parsed: dict[SchemaEntry, ParsedSchema] = {}  # versions parsed once

    # -- replay and apply ----------------------------------------------------------------
    def replay(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        for key, value in records:
            change = decode(key, value)
            if change is not None:
                self._apply(change)

    def _apply(self, change: Change) -> None:
        match change:
            case SchemaEntry():
                self.subjects.setdefault(change.subject, {})[change.version] = change
                self._ids.setdefault(change.id, change)
                self._max_id = max(self._max_id, change.id)
            case SchemaRemoved():
                versions = self.subjects.get(change.subject, {})
                removed = versions.pop(change.version, None)
                if removed is not None:
                    self._parsed.pop(removed, None)
                if not versions:
                    self.subjects.pop(change.subject, None)
            case ConfigChange():
                _set(self.configs, change.subject, change.level)
            case ModeChange():
                _set(self.modes, change.subject, change.mode)
            case SubjectDeleted():
                for entry in list(self.subjects.get(change.subject, {}).values()):
                    if entry.version <= change.version:
                        self._apply(replace(entry, deleted=True))

    def _commit(self, changes: list[Change]) -> None:
        self._write([encode(change) for change in changes])
        self.writes += 1
        for change in changes:
            self._apply(change)

    # -- reads ---------------------------------------------------------------------------
    def entry_of_id(self, schema_id: int) -> SchemaEntry:
        found = self._ids.get(schema_id)
        if found is None or not any(e.id == schema_id for e in self.subjects_entries()):
            raise errors.schema_not_found(schema_id)
        return found

    def subjects_entries(self) -> Iterable[SchemaEntry]:
        """Every version of every subject, soft-deleted ones included."""
        for versions in self.subjects.values():
            yield from versions.values()

    def usages(self, schema_id: int, deleted: bool) -> list[SchemaEntry]:
        self.entry_of_id(schema_id)
        return sorted((e for e in self.subjects_entries() if e.id == schema_id
                       and (deleted or not e.deleted)), key=lambda e: (e.subject, e.version))

    def subject_names(self, deleted: bool) -> list[str]:
        return sorted(s for s, versions in self.subjects.items()
                      if deleted or any(not e.deleted for e in versions.values()))

    def versions(self, subject: str, deleted: bool = False) -> list[SchemaEntry]:
        """The subject's versions, oldest first (40401 when it has none to show)."""
        found = [e for _, e in sorted(self.subjects.get(subject, {}).items())
                 if deleted or not e.deleted]
        if not found:
            raise errors.subject_not_found(subject)
        return found

    def version(self, subject: str, version: int | None, deleted: bool = False) -> SchemaEntry:
        """A version (None: the latest live one)."""
        if version is None:
            return self.versions(subject)[-1]
        if subject not in self.subjects:
            raise errors.subject_not_found(subject)
        found = self.subjects[subject].get(version)
        if found is None or (found.deleted and not deleted):
            raise errors.version_not_found(version)
        return found

    def resolve(self, ref: Reference) -> SchemaEntry:
        return self.version(ref.subject, None if ref.version == -1 else ref.version)

    def parse(self, schema_type: str, text: str, references: tuple[Reference, ...]
              ) -> ParsedSchema:
        return parse(schema_type, text, references, self.resolve)

    def parsed(self, entry: SchemaEntry) -> ParsedSchema:
        found = self._parsed.get(entry)
        if found is None:
            found = self._parsed[entry] = self.parse(entry.schema_type, entry.schema,
                                                     entry.references)
        return found

    def lookup(self, subject: str, schema: ParsedSchema, deleted: bool) -> SchemaEntry:
        for entry in reversed(self.versions(subject, deleted)):
            if self.parsed(entry).identity == schema.identity:
                return entry
        raise errors.schema_not_found()

    def level(self, subject: str | None) -> str:
        if subject is not None and subject in self.configs:
            return self.configs[subject]
        return self.configs.get(None, DEFAULT_LEVEL)

    def mode(self, subject: str | None) -> str:
        if subject is not None and subject in self.modes:
            return self.modes[subject]
        return self.modes.get(None, "READWRITE")

    def incompatibilities(self, subject: str, schema: ParsedSchema,
                          against: SchemaEntry | None = None) -> list[str]:
        """What ``schema`` breaks at the subject's level (against one version if given)."""
        if against is not None:
            return check(self.level(subject).removesuffix("_TRANSITIVE"), schema,
                         [self.parsed(against)])
        live = self.subjects.get(subject, {})
        return check(self.level(subject), schema,
                     [self.parsed(e) for _, e in sorted(live.items()) if not e.deleted])

    # -- writes --------------------------------------------------------------------------
    def _writable(self, subject: str | None) -> None:
        if self.mode(subject) == "READONLY":
            raise errors.operation_not_permitted(
                f"Subject {subject} is in read-only mode" if subject else
                "The registry is in read-only mode")

    def register(self, subject: str, schema: ParsedSchema, schema_id: int | None = None,
                 version: int | None = None) -> SchemaEntry:
        self._writable(subject)
        importing = self.mode(subject) == "IMPORT"
        if (schema_id is not None or version is not None) and not importing:
            raise errors.operation_not_permitted(
                "Subject must be in IMPORT mode to register a schema with an id or version")
        live = [e for _, e in sorted(self.subjects.get(subject, {}).items()) if not e.deleted]
        for entry in live:
            if self.parsed(entry).identity == schema.identity:
                return entry
        if not importing:
            found = self.incompatibilities(subject, schema)
            if found:
                raise errors.incompatible(subject, found)
        known = self._by_identity_id(schema)
        if schema_id is None:
            schema_id = known if known is not None else self._max_id + 1
        elif schema_id in self._ids and self.parsed(self._ids[schema_id]).identity \
                != schema.identity:
            raise errors.RegistryError(42205, f"Overwrite new schema with id {schema_id} is "
                                              "not permitted.")
        versions = self.subjects.get(subject, {})
        if version is None:
            version = max(versions, default=0) + 1
        elif version in versions:
            raise errors.RegistryError(42205, f"Version {version} of subject {subject} "
                                              "already exists")
        if version > MAX_VERSION:
            raise errors.invalid_version(version)
        entry = SchemaEntry(subject, version, schema_id, schema.schema_type, schema.canonical,
                            schema.references)
        self._commit([entry])
        self._by_identity[schema.identity] = schema_id
        return entry

    def _by_identity_id(self, schema: ParsedSchema) -> int | None:
        known = self._by_identity.get(schema.identity)
        if known is not None:
            return known
        for schema_id, entry in self._ids.items():
            if self.parsed(entry).identity == schema.identity:
                self._by_identity[schema.identity] = schema_id
                return schema_id
        return None

    def _referenced(self, entry: SchemaEntry) -> None:
        for other in self.subjects_entries():
            if not other.deleted and any(
                    r.subject == entry.subject and r.version == entry.version
                    for r in other.references):
                raise errors.references_exist(entry.subject, entry.version)

    def delete_subject(self, subject: str, permanent: bool) -> list[int]:
        self._writable(subject)
        versions = self.subjects.get(subject)
        if not versions:
            raise errors.subject_not_found(subject)
        live = [e for _, e in sorted(versions.items()) if not e.deleted]
        for entry in live:
            self._referenced(entry)
        if permanent:
            if live:
                raise errors.subject_not_soft_deleted(subject)
            numbers = sorted(versions)
            self._commit([SchemaRemoved(subject, v) for v in numbers]
                         + [ConfigChange(subject, None)] * (subject in self.configs)
                         + [ModeChange(subject, None)] * (subject in self.modes))
            return numbers
        if not live:
            raise errors.subject_soft_deleted(subject)
        self._commit([replace(e, deleted=True) for e in live]
                     + [SubjectDeleted(subject, live[-1].version)])
        return [e.version for e in live]

    def delete_version(self, subject: str, version: int | None, permanent: bool) -> int:
        self._writable(subject)
        if version is None:
            entry = self.versions(subject, deleted=permanent)[-1]
        else:
            entry = self.version(subject, version, deleted=True)
        self._referenced(entry)
        if permanent:
            if not entry.deleted:
                raise errors.version_not_soft_deleted(subject, entry.version)
            self._commit([SchemaRemoved(subject, entry.version)])
        else:
            if entry.deleted:
                raise errors.version_soft_deleted(subject, entry.version)
            self._commit([replace(entry, deleted=True)])
        return entry.version

    def set_level(self, subject: str | None, level: str) -> None:
        self._writable(subject)
        if level not in LEVELS:
            raise errors.invalid_compatibility_level(level)
        self._commit([ConfigChange(subject, level)])

    def delete_level(self, subject: str | None) -> str:
        self._writable(subject)
        previous = self.level(subject)
        if subject is not None and subject not in self.configs:
            raise errors.subject_config_not_found(subject)
        self._commit([ConfigChange(subject, None)])
        return previous

    def set_mode(self, subject: str | None, mode: str, force: bool) -> None:
        if mode not in MODES:
            raise errors.invalid_mode(mode)
        if mode == "IMPORT" and not force and (
                self.subject_names(False) if subject is None else
                self.subjects.get(subject)):
            raise errors.operation_not_permitted(
                "Cannot import since found existing subjects")
        self._commit([ModeChange(subject, mode)])

    def delete_mode(self, subject: str) -> str:
        if subject not in self.modes:
            raise errors.subject_mode_not_found(subject)
        previous = self.modes[subject]
        self._commit([ModeChange(subject, None)])
        return previous


def _set(table: dict[str | None, str], key: str | None, value: str | None) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value
