"""Schema lookups in a Confluent-compatible registry (``registry_client``).

``choose`` picks the reader schema once (on the Spark driver): a schema id, else a version
of the subject, else its latest version. ``WriterSchemas`` gives the schema text of a
record's id (in a task: the writer schemas of records written by older versions).

Invariants:
- ``RegistryConfig`` holds the client's settings in confluent-kafka's names (``url``,
  ``basic.auth.user.info``, ``ssl.ca.location``, ...), is immutable and picklable (it
  travels to tasks); clients are built from it where needed, never pickled.
- A lookup that fails raises ``SchemaLookupError`` naming the registry, the subject,
  version or id and the registry's answer, except an id the registry does not know in
  ``WriterSchemas``: that is the record's fault, a ``DecodeError``.
- A schema with references is given standing alone (``SchemaRegistry.standalone``: the
  referenced types written in), so its readers need no registry; references that cannot be
  resolved are a ``SchemaLookupError`` like any other failed lookup.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sparklog.schemas.wire import DecodeError

if TYPE_CHECKING:
    from sparklog.schemas.registry_client import SchemaRegistry


class SchemaLookupError(ValueError):
    """The registry could not give the schema asked for."""


@dataclass(frozen=True)
class RegistryConfig:
    settings: tuple[tuple[str, str], ...]

    @property
    def url(self) -> str:
        return dict(self.settings)["url"]

    def client(self) -> SchemaRegistry:
        # urllib's client is imported where a registry is asked: the source's options
        # (RegistryConfig) are read in every micro-batch's process
        from sparklog.schemas.registry_client import RegistryError, SchemaRegistry

        try:
            return SchemaRegistry.from_settings(dict(self.settings))
        except RegistryError as exc:
            raise SchemaLookupError(str(exc)) from None


@dataclass(frozen=True)
class ChosenSchema:
    schema_type: str  # AVRO, JSON or PROTOBUF
    schema_str: str
    schema_id: int | None = None  # None: given inline
    subject: str | None = None
    version: int | None = None


def choose(config: RegistryConfig, subject: str, version: int | None = None,
           schema_id: int | None = None) -> ChosenSchema:
    """The reader schema: by id, else by the subject's version, else the subject's latest."""
    from sparklog.schemas.registry_client import RegistryError

    client = config.client()
    what = (f"schema id {schema_id}" if schema_id is not None
            else f"version {version} of subject {subject!r}" if version is not None
            else f"the latest version of subject {subject!r}")
    try:
        if schema_id is not None:
            schema = client.schema(schema_id)
            return ChosenSchema(schema.schema_type, client.standalone(schema), schema_id)
        registered = client.version(subject, version)
        return ChosenSchema(registered.schema_type, client.standalone(registered),
                            registered.schema_id, subject, registered.version)
    except RegistryError as exc:
        raise SchemaLookupError(f"schema registry {config.url}: {what}: {exc}") from None


class WriterSchemas:
    """Schema text by id, from one client made on first use (a task's writer schemas)."""

    def __init__(self, config: RegistryConfig) -> None:
        self.config = config
        self._client: SchemaRegistry | None = None

    def __call__(self, schema_id: int) -> str:
        from sparklog.schemas.registry_client import SCHEMA_NOT_FOUND, RegistryError

        if self._client is None:
            self._client = self.config.client()
        try:
            schema = self._client.schema(schema_id)
        except RegistryError as exc:
            if exc.error_code == SCHEMA_NOT_FOUND:
                raise DecodeError(f"schema id {schema_id} is unknown to the schema registry "
                                  f"{self.config.url}") from None
            raise SchemaLookupError(f"schema registry {self.config.url}: schema id "
                                    f"{schema_id}: {exc}") from None
        try:
            return self._client.standalone(schema)
        except RegistryError as exc:
            raise SchemaLookupError(f"schema registry {self.config.url}: schema id "
                                    f"{schema_id}: {exc}") from None
