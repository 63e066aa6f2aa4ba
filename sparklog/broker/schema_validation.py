"""Validated produce: Confluent Server's ``confluent.key.schema.validation`` and
``confluent.value.schema.validation`` topic configs, checked against the broker's schema
registry (``schema.registry.listeners``) before a batch is appended.

Invariants:
- A topic without validation costs Produce one attribute read per topic
  (``LogConfig.schema_validation``, computed once per config); nothing here runs for it.
- Every record of a validated batch is checked before anything of it is appended (the
  batch's framing and CRC first, then its records, decompressed, read by the compiled
  decoder into columns whose first five bytes Arrow's kernels reduce to the distinct
  prefixes: a Python object per distinct id, not per record; without the extension the
  records are decoded one by one, with the same answers): each non-null key and
  value (as configured; a null one, a tombstone, passes) must start with magic byte 0 and a
  4-byte schema id registered, live, under the subject its strategy names:
  ``<topic>-key``/``-value`` (TopicNameStrategy), the id's schema's record name
  (RecordNameStrategy), ``<topic>-<record name>`` (TopicRecordNameStrategy). One failure
  refuses the whole batch: INVALID_RECORD, every failing record in ``record_errors``
  (its index in the batch and why), the first one's reason as the error message.
- Where the answers come from: on the broker leading ``_schemas``-0 (a single node always)
  the registry's store itself, in-process and always current (what was read of it is
  forgotten at its next change); on any other broker the leader's registry over HTTP
  (``schema_registry.ids.fetch``, as the inter-broker SASL user when the listeners are
  SASL), on a thread pool of its own (``LOOKUP_THREADS``): the event loop never waits on
  the network, and a flood of unknown ids cannot take the default executor from
  ZooKeeper's writes. A fetched id is kept ``CACHE_TTL_S`` at most, ``MAX_CACHED_IDS``
  ids at most (least recently used dropped first); an id absent, or not under the
  subject, is fetched again before its record is refused (never remembered as absent), so
  a schema registered a moment ago validates at once; concurrent batches wanting the same
  id share one fetch. A batch needing more than ``MAX_LOOKUPS_PER_BATCH`` fetches is
  refused (INVALID_RECORD) rather than flooding the registry.
- Fails closed: while the registry cannot answer (no registry on this broker, not started
  yet, no ``_schemas`` leader, the leader unreachable or failing) a validated batch is
  refused REQUEST_TIMED_OUT, retriable for every client (librdkafka, the Java client and
  kafka-python retry it until their delivery timeout), with the reason as its message:
  never appended unchecked.
- Enabling validation needs a registry: CreateTopics, AlterConfigs and
  IncrementalAlterConfigs refuse it (INVALID_CONFIG naming ``schema.registry.listeners``)
  on a broker without one (``check_config``).
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from sparklog.broker.schema_registry import ids
from sparklog.broker.schema_registry.ids import RegistryUnavailable, SchemaIdInfo
from sparklog.broker.schema_registry.store import SchemaStore
from sparklog.errors import ErrorCode, InvalidConfigError, InvalidRecordError, KafkaError
from sparklog.record.batch import BatchHeader, validate_produced
from sparklog.record.records import decode_section, records_section
from sparklog.storage.config import SUBJECT_NAME_STRATEGIES, LogConfig

try:
    from sparklog.record._columns import RecordColumns
except ImportError:  # not built: records decoded one by one
    RecordColumns = None

TOPIC_NAME, RECORD_NAME, TOPIC_RECORD_NAME = SUBJECT_NAME_STRATEGIES
FIELDS = ("key", "value")
LOOKUP_THREADS = 4
LOOKUP_TIMEOUT_S = 5.0
CACHE_TTL_S = 30.0
MAX_CACHED_IDS = 10_000
MAX_LOOKUPS_PER_BATCH = 32
MAGIC = 0
ID_END = 5  # magic byte and a 4-byte big-endian id


class Registry(Protocol):
    """The registry's answers the check reads (``schema_registry.listener.RegistryListener``)."""

    def leader_store(self) -> SchemaStore | None: ...
    async def leader_url(self) -> str | None: ...


class Unavailable(KafkaError):
    code = ErrorCode.REQUEST_TIMED_OUT


@dataclass(frozen=True, slots=True)
class Field:
    """One validated field of a topic: ``key`` or ``value`` and its subject name strategy."""
    name: str
    strategy: str

    def subject(self, topic: str, info: SchemaIdInfo) -> str | None:
        if self.strategy == TOPIC_NAME:
            return f"{topic}-{self.name}"
        if info.name is None:
            return None
        return info.name if self.strategy == RECORD_NAME else f"{topic}-{info.name}"


def _fields(config: LogConfig) -> tuple[Field, ...]:
    return tuple(Field(field, config.get(f"confluent.{field}.subject.name.strategy"))
                 for field in FIELDS if config.get(f"confluent.{field}.schema.validation"))


def _schema_id(data: bytes) -> int | None:
    if len(data) < ID_END or data[0] != MAGIC:
        return None
    return int.from_bytes(data[1:ID_END], "big")


class _Prefixes(Protocol):
    """One field (key or value) of a batch's records, by their first ``ID_END`` bytes."""

    def distinct(self) -> set[bytes]:
        """The distinct prefixes of the non-null keys or values (shorter ones whole)."""
        ...

    def where(self, failed: Mapping[bytes, str]) -> list[tuple[int, str]]:
        """(batch index, reason) of each record whose prefix is failed."""
        ...


class _ListedPrefixes:
    """Prefixes of records decoded one by one (``sparklog.record.records``)."""

    def __init__(self, prefixes: list[bytes | None]) -> None:
        self._prefixes = prefixes

    def distinct(self) -> set[bytes]:
        return {p for p in self._prefixes if p is not None}

    def where(self, failed: Mapping[bytes, str]) -> list[tuple[int, str]]:
        return [(i, failed[p]) for i, p in enumerate(self._prefixes)
                if p is not None and p in failed]


class _ColumnPrefixes:
    """Prefixes of a column the compiled decoder (``record._columns``) filled, read with
    Arrow's kernels: no Python object per record unless one fails."""

    def __init__(self, column: Any) -> None:
        import pyarrow as pa  # the broker loads Arrow only once a validated batch comes
        import pyarrow.compute as pc
        self._pa, self._pc = pa, pc
        validity = pa.py_buffer(column.validity) if column.null_count else None
        values = pa.Array.from_buffers(pa.binary(), column.length, [
            validity, pa.py_buffer(column.offsets), pa.py_buffer(column.data)],
            null_count=column.null_count)
        self._prefixes = pc.binary_slice(values, 0, ID_END)

    def distinct(self) -> set[bytes]:
        return {p for p in self._prefixes.unique().to_pylist() if p is not None}

    def where(self, failed: Mapping[bytes, str]) -> list[tuple[int, str]]:
        pc = self._pc
        found = pc.indices_nonzero(pc.is_in(self._prefixes, value_set=self._pa.array(
            list(failed), self._pa.binary())))
        return [(i, failed[self._prefixes[i].as_py()]) for i in found.to_pylist()]


def prefixes(records: bytes, header: BatchHeader, fields: tuple[Field, ...]
              ) -> list[_Prefixes]:
    """Each field's prefixes over the records of a produced batch (a producer's bytes, CRC
    checked: any damage is a ``KafkaError``, as ``test_decoder_fuzz`` checks)."""
    section = records_section(records, header)
    if RecordColumns is None:
        decoded = decode_section(bytes(section), header)
        return [_ListedPrefixes([None if (d := r.key if f.name == "key" else r.value) is None
                                 else d[:ID_END] for r in decoded]) for f in fields]
    columns = RecordColumns(False)
    columns.add(section, header, -(1 << 63), (1 << 63) - 1)  # every record
    taken = columns.take()
    return [_ColumnPrefixes(taken.keys if f.name == "key" else taken.values) for f in fields]


class SchemaValidation:
    """The broker's validated produce (module invariants)."""

    def __init__(self, registry_configured: bool,
                 credentials: tuple[str, str] | None = None) -> None:
        self._configured = registry_configured
        self._credentials = credentials
        self._registry: Registry | None = None
        self._cache: OrderedDict[int, tuple[SchemaIdInfo, float]] = OrderedDict()
        self._local: tuple[SchemaStore, int] | None = None  # the store version cached
        self._fetching: dict[int, asyncio.Future[SchemaIdInfo | None]] = {}
        self._pool: ThreadPoolExecutor | None = None

    def attach(self, registry: Registry) -> None:
        """The registry started: validated batches are checked from now on."""
        self._registry = registry

    def close(self) -> None:
        self._registry = None
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def check_config(self, config: LogConfig) -> None:
        """Refuse validation on a broker without a schema registry."""
        if config.schema_validation and not self._configured:
            enabled = [f"confluent.{f}.schema.validation" for f in FIELDS
                       if config.get(f"confluent.{f}.schema.validation")]
            raise InvalidConfigError(f"{', '.join(enabled)} needs the broker's schema "
                                     "registry: set schema.registry.listeners")

    async def refusals(self, batches: Mapping[tuple[str, int], tuple[LogConfig, bytes | None]]
                       ) -> dict[tuple[str, int], KafkaError]:
        """The error each partition's batch is refused with (those that pass are absent)."""
        found: dict[tuple[str, int], KafkaError] = {}
        for (topic, index), (config, records) in batches.items():
            try:
                await self._check(topic, _fields(config), records or b"")
            except KafkaError as exc:
                found[(topic, index)] = exc
        return found

    async def _check(self, topic: str, fields: tuple[Field, ...], records: bytes) -> None:
        header = validate_produced(records)  # CORRUPT_MESSAGE / INVALID_RECORD as the log's
        if header.is_control:
            return  # the log refuses a producer's control batch
        columns = prefixes(records, header, fields)
        distinct = {(field, prefix) for field, column in zip(fields, columns, strict=True)
                    for prefix in column.distinct()}
        ids_of = {prefix: _schema_id(prefix) for _, prefix in distinct}
        known = await self._lookup({sid for sid in ids_of.values() if sid is not None})
        failed = self._failures(topic, distinct, ids_of, known)
        stale = {ids_of[prefix] for _, prefix in failed} - {None}
        if stale:  # absent or not under the subject: ask again before refusing
            known.update(await self._lookup(stale, fresh=True))
            failed = self._failures(topic, distinct, ids_of, known)
        if not failed:
            return
        errors = sorted((index, f"Record {index} of topic {topic}: {field.name}{reason}")
                        for field, column in zip(fields, columns, strict=True)
                        for index, reason in column.where(
                            {p: r for (f, p), r in failed.items() if f == field}))
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise InvalidRecordError(errors[0][1] + more, record_errors=tuple(errors))

    @staticmethod
    def _failures(topic: str, distinct: Iterable[tuple[Field, bytes]],
                  ids_of: Mapping[bytes, int | None], known: Mapping[int, SchemaIdInfo | None]
                  ) -> dict[tuple[Field, bytes], str]:
        """Why each failing (field, prefix) fails, said after ``Record i of topic t: key``."""
        failed = {}
        for field, prefix in distinct:
            sid = ids_of[prefix]
            info = None if sid is None else known.get(sid)
            if sid is None:
                failed[(field, prefix)] = (f" has no schema id (magic byte {MAGIC} and a "
                                           "4-byte id expected)")
            elif info is None:
                failed[(field, prefix)] = f" has schema id {sid}, which is not registered"
            elif (subject := field.subject(topic, info)) is None:
                failed[(field, prefix)] = (f" has schema id {sid}, whose schema has no record "
                                           f"name for {field.strategy.rsplit('.', 1)[-1]}")
            elif subject not in info.subjects:
                failed[(field, prefix)] = (f": schema id {sid} is not registered under "
                                           f"subject {subject}")
        return failed

    # -- lookups -------------------------------------------------------------------------
    async def _lookup(self, wanted: set[int], fresh: bool = False
                      ) -> dict[int, SchemaIdInfo | None]:
        registry = self._registry
        if registry is None:
            raise Unavailable("schema validation: this broker's schema registry is "
                              + ("not started yet" if self._configured else
                                 "off (schema.registry.listeners is not set)"))
        store = registry.leader_store()
        if store is not None:
            return self._from_store(store, wanted)
        now = time.monotonic()
        found: dict[int, SchemaIdInfo | None] = {}
        missing = []
        for sid in wanted:
            cached = self._cache.get(sid)
            if cached is not None and not fresh and now - cached[1] < CACHE_TTL_S:
                self._cache.move_to_end(sid)
                found[sid] = cached[0]
            else:
                missing.append(sid)
        if len(missing) > MAX_LOOKUPS_PER_BATCH:
            raise InvalidRecordError(f"schema validation: the batch has {len(missing)} schema "
                                     f"ids this broker does not know (at most "
                                     f"{MAX_LOOKUPS_PER_BATCH} looked up per batch)")
        if missing:
            try:
                url = await registry.leader_url()
            except Exception as exc:  # ZooKeeper's read of the URL failed (kazoo's errors)
                raise Unavailable(f"schema validation: the registry's leader is unknown: "
                                  f"{exc!r}") from None
            if url is None:
                raise Unavailable("schema validation: _schemas has no leader with a registry")
            answers = await asyncio.gather(*(self._fetch(url, sid) for sid in missing))
            found.update(zip(missing, answers, strict=True))
        return found

    def _from_store(self, store: SchemaStore, wanted: set[int]
                    ) -> dict[int, SchemaIdInfo | None]:
        if self._local is None or self._local[0] is not store or self._local[1] != store.writes:
            self._cache.clear()  # the store changed (or this broker just became its leader)
            self._local = (store, store.writes)
        found: dict[int, SchemaIdInfo | None] = {}
        for sid in wanted:
            cached = self._cache.get(sid)
            found[sid] = cached[0] if cached is not None else self._remember(
                sid, ids.from_store(store, sid))
        return found

    def _remember(self, sid: int, info: SchemaIdInfo | None) -> SchemaIdInfo | None:
        if info is not None:
            self._cache[sid] = (info, time.monotonic())
            self._cache.move_to_end(sid)
            while len(self._cache) > MAX_CACHED_IDS:
                self._cache.popitem(last=False)
        else:
            self._cache.pop(sid, None)
        return info

    async def _fetch(self, url: str, sid: int) -> SchemaIdInfo | None:
        """One fetch of ``sid`` at a time; batches wanting it meanwhile share its answer."""
        pending = self._fetching.get(sid)
        if pending is None:
            pending = self._fetching[sid] = asyncio.ensure_future(self._fetch_now(url, sid))
            pending.add_done_callback(partial(self._fetched, sid))
        return await asyncio.shield(pending)

    def _fetched(self, sid: int, done: asyncio.Future[SchemaIdInfo | None]) -> None:
        self._fetching.pop(sid, None)
        if not done.cancelled():
            done.exception()  # retrieved: its waiters may all have been cancelled

    async def _fetch_now(self, url: str, sid: int) -> SchemaIdInfo | None:
        self._local = None  # answers from another broker: the leader's version is unknown
        if self._pool is None:
            self._pool = ThreadPoolExecutor(LOOKUP_THREADS, "schema-validation")
        try:
            info = await asyncio.get_running_loop().run_in_executor(
                self._pool, ids.fetch, url, sid, self._credentials, LOOKUP_TIMEOUT_S)
        except RegistryUnavailable as exc:
            raise Unavailable(f"schema validation: the schema registry did not answer: "
                              f"{exc}") from None
        return self._remember(sid, info)
