"""The records of ``_schemas``, in Confluent Schema Registry's format.

Keys (JSON): ``{"keytype":"SCHEMA","subject":S,"version":V,"magic":1}``,
``{"keytype":"CONFIG","subject":S|null,"magic":0}``, ``{"keytype":"MODE",...}`` and
``{"keytype":"DELETE_SUBJECT","subject":S,"magic":0}``. Values: a SCHEMA's
``{"subject","version","id","schemaType"?,"references"?,"schema","deleted"}`` (no
``schemaType`` for AVRO, as Confluent writes it), a CONFIG's ``{"compatibilityLevel": L}``,
a MODE's ``{"mode": M}``, a DELETE_SUBJECT's ``{"subject","version"}`` (the latest version
deleted). A null value is a tombstone: a hard-deleted version, a removed config or mode.

Invariants:
- ``decode`` never raises on a record it does not know (another writer's, a NOOP): it
  returns None and the record is skipped, so a topic shared with Confluent's registry
  replays.
- The compacted topic keeps the last value per key, so every change a replay must see is
  keyed by what it changes (one SCHEMA key per subject and version).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

TOPIC = "_schemas"


@dataclass(frozen=True)
class Reference:
    name: str
    subject: str
    version: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class SchemaEntry:
    """One version of a subject."""

    subject: str
    version: int
    id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()
    deleted: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Confluent's JSON of a registered version (GET /subjects/{s}/versions/{v})."""
        out: dict[str, Any] = {"subject": self.subject, "version": self.version, "id": self.id}
        if self.schema_type != "AVRO":
            out["schemaType"] = self.schema_type
        if self.references:
            out["references"] = [r.as_dict() for r in self.references]
        out["schema"] = self.schema
        return out


@dataclass(frozen=True)
class ConfigChange:
    subject: str | None
    level: str | None  # None: removed


@dataclass(frozen=True)
class ModeChange:
    subject: str | None
    mode: str | None


@dataclass(frozen=True)
class SchemaRemoved:
    """A hard-deleted version (the SCHEMA key's tombstone)."""

    subject: str
    version: int


@dataclass(frozen=True)
class SubjectDeleted:
    subject: str
    version: int


Change = SchemaEntry | ConfigChange | ModeChange | SchemaRemoved | SubjectDeleted


def _dump(data: dict[str, Any]) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def encode(change: Change) -> tuple[bytes, bytes | None]:
    """The record (key, value) of a change."""
    match change:
        case SchemaEntry():
            key = {"keytype": "SCHEMA", "subject": change.subject, "version": change.version,
                   "magic": 1}
            return _dump(key), _dump({**change.as_dict(), "deleted": change.deleted})
        case SchemaRemoved():
            key = {"keytype": "SCHEMA", "subject": change.subject, "version": change.version,
                   "magic": 1}
            return _dump(key), None
        case ConfigChange():
            value = None if change.level is None else _dump(
                {"compatibilityLevel": change.level})
            return _dump({"keytype": "CONFIG", "subject": change.subject, "magic": 0}), value
        case ModeChange():
            value = None if change.mode is None else _dump({"mode": change.mode})
            return _dump({"keytype": "MODE", "subject": change.subject, "magic": 0}), value
        case SubjectDeleted():
            return (_dump({"keytype": "DELETE_SUBJECT", "subject": change.subject, "magic": 0}),
                    _dump({"subject": change.subject, "version": change.version}))
    raise TypeError(change)


def decode(key: bytes, value: bytes | None) -> Change | None:
    """The change a record makes; None for one this registry does not apply."""
    try:
        k = json.loads(key)
        v = None if value is None else json.loads(value)
        keytype, subject = k.get("keytype"), k.get("subject")
        if keytype == "SCHEMA":
            if v is None:
                return SchemaRemoved(str(subject), int(k["version"]))
            refs = tuple(Reference(str(r["name"]), str(r["subject"]), int(r["version"]))
                         for r in v.get("references") or ())
            return SchemaEntry(str(v["subject"]), int(v["version"]), int(v["id"]),
                               str(v.get("schemaType") or "AVRO"), str(v["schema"]), refs,
                               bool(v.get("deleted", False)))
        if keytype == "CONFIG":
            return ConfigChange(subject, None if v is None else str(v["compatibilityLevel"]))
        if keytype == "MODE":
            return ModeChange(subject, None if v is None else str(v["mode"]))
        if keytype == "DELETE_SUBJECT" and v is not None:
            return SubjectDeleted(str(v["subject"]), int(v["version"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return None
