"""The exactly-once sink's commit intents: which transactions make up a micro-batch, kept in
the query's checkpoint directory before any of them is committed.

An intent is the sink's PrepareCommit: once ``<checkpointLocation>/sparklog-sink/<batchId>``
exists, the batch's outcome is decided (those transactions get committed, whatever happens
to the driver), and a re-run of the batch (Spark replays a batch its commit log lacks) must
publish nothing of its own.

Invariants:
- An intent file is written whole or not at all (written under a temporary name, then
  moved over the final name: a rename on a local disk); ``committed`` turns true, in a
  second write, only after every transaction of the intent was committed.
- The newest ``RETAINED`` intents are kept (as Spark keeps its commit log's newest 100
  batches); older ones are deleted after each write. Only the newest can be unfinished:
  the sink finishes an intent before the next batch starts.
- The directory is found with ``pyarrow.fs`` (local paths and ``file:`` URIs, and the
  schemes pyarrow serves: ``s3://`` (``s3a://``, ``s3n://`` read as it), ``gs://``,
  ``hdfs://``, ``abfs://``); another scheme is refused when the writer is created.
- Deleting the checkpoint directory deletes the intents with it: a query started afresh
  (batch ids from 0 again) never mistakes an old query's intent for its own.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import asdict, dataclass

import pyarrow.fs as pafs

from sparklog.datasource.options import OptionError

INTENTS_DIR = "sparklog-sink"
RETAINED = 100
_SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}
_SUFFIX = ".json"


@dataclass(frozen=True, slots=True)
class SinkTransaction:
    """A write task's transaction, open and flushed: what the driver needs to end it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    records: int


@dataclass(frozen=True, slots=True)
class CommitIntent:
    """A micro-batch's transactions, and whether all of them are committed yet."""

    batch_id: int
    transactions: tuple[SinkTransaction, ...]
    committed: bool = False

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> CommitIntent:
        data = json.loads(raw)
        return cls(data["batch_id"], tuple(SinkTransaction(**t) for t in data["transactions"]),
                   data["committed"])


def _filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    scheme, sep, rest = location.partition("://")
    if sep and scheme.lower() != "file":
        try:
            return pafs.FileSystem.from_uri(f"{_SCHEME_ALIASES.get(scheme.lower(), scheme)}"
                                            f"://{rest}")
        except (ValueError, OSError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise OptionError(
                f"checkpointLocation {location!r}: the exactly-once sink keeps its commit "
                f"intents there and cannot open it ({exc}); use a local path or an s3://, "
                "gs://, hdfs:// or abfs:// location") from None
    path = rest if sep else location.removeprefix("file:")
    return pafs.LocalFileSystem(), os.path.abspath(path)


class CommitIntents:
    """The intents of one query, in ``<checkpointLocation>/sparklog-sink``."""

    def __init__(self, checkpoint_location: str) -> None:
        fs, root = _filesystem(checkpoint_location)
        self._fs = fs
        self._dir = f"{root.rstrip('/')}/{INTENTS_DIR}"

    def _batch_ids(self) -> list[int]:
        selector = pafs.FileSelector(self._dir, allow_not_found=True)
        return sorted(int(info.base_name[: -len(_SUFFIX)])
                      for info in self._fs.get_file_info(selector)
                      if info.base_name.endswith(_SUFFIX)
                      and info.base_name[: -len(_SUFFIX)].isdigit())

    def _path(self, batch_id: int) -> str:
        return f"{self._dir}/{batch_id}{_SUFFIX}"

    def _read(self, batch_id: int) -> CommitIntent:
        with self._fs.open_input_stream(self._path(batch_id)) as stream:
            return CommitIntent.from_json(stream.read())

    def get(self, batch_id: int) -> CommitIntent | None:
        """The intent of ``batch_id``, if one was written."""
        info = self._fs.get_file_info(self._path(batch_id))
        return self._read(batch_id) if info.type == pafs.FileType.File else None

    def latest(self) -> CommitIntent | None:
        """The intent of the newest batch, if any."""
        ids = self._batch_ids()
        return self._read(ids[-1]) if ids else None

    def write(self, intent: CommitIntent) -> None:
        """Write (or replace) ``intent`` atomically, then drop intents past ``RETAINED``."""
        self._fs.create_dir(self._dir, recursive=True)
        temporary = f"{self._dir}/.{intent.batch_id}-{uuid.uuid4().hex}.tmp"
        with self._fs.open_output_stream(temporary) as stream:
            stream.write(intent.to_json())
        self._fs.move(temporary, self._path(intent.batch_id))
        for old in self._batch_ids()[:-RETAINED]:
            self._fs.delete_file(self._path(old))

    def delete(self, batch_id: int) -> None:
        """Forget an intent none of whose transactions could be committed."""
        self._fs.delete_file(self._path(batch_id))
