"""Parquet files Spark staged for a batch: their partition values and Delta statistics.

Invariants:
- Partition values come from the Hive-style directory names Spark wrote (``col=value``,
  ``%XX``-escaped, ``__HIVE_DEFAULT_PARTITION__`` for null); for the supported partition
  types (strings, integers, dates, booleans) Spark's text is Delta's serialisation.
- Statistics are read from the file's footer and never guessed: ``numRecords`` always;
  ``nullCount`` for top-level columns whose every row group has a null count; ``minValues`` /
  ``maxValues`` only for top-level integer, date and short (<= 64 characters) string columns
  whose every row group has both. Anything else is left out, which readers treat as
  "unknown" (no data skipping), never as a wrong answer.
- Paths are relative to the table root and not URL-encoded: delta-rs encodes them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake.transaction import AddAction

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
MAX_STRING_STAT = 64


@dataclass(frozen=True)
class StagedFile:
    """One Parquet file of a batch: where it is now, and where it goes in the table."""

    path: Path  # in the staging directory
    relative: str  # its path under the table root once published: partition dirs + file name
    partition_values: dict[str, str | None]
    rows: int
    stats: dict[str, Any]

    def add_action(self, size: int, modification_time_ms: int) -> AddAction:
        return AddAction(self.relative, size, self.partition_values, modification_time_ms,
                         True, json.dumps(self.stats, separators=(",", ":")))


def partition_values(relative_dir: str, partition_by: list[str]) -> dict[str, str | None]:
    parts = [p for p in relative_dir.split("/") if p]
    values: dict[str, str | None] = {}
    for part in parts:
        name, sep, raw = part.partition("=")
        if not sep:
            raise ValueError(f"unexpected directory {part!r} in staged output (not col=value)")
        text = unquote(raw)
        values[unquote(name)] = None if text == HIVE_NULL else text
    if list(values) != partition_by:
        raise ValueError(f"staged directory {relative_dir!r} does not match partition columns "
                         f"{partition_by}")
    return values


def _stat_value(arrow_type: pa.DataType, value: Any) -> Any:
    if pa.types.is_integer(arrow_type):
        return int(value)
    if pa.types.is_date32(arrow_type) and isinstance(value, date):
        return value.isoformat()
    if (pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)) and isinstance(
            value, str) and len(value) <= MAX_STRING_STAT:
        return value
    return None


def footer_stats(metadata: pq.FileMetaData) -> dict[str, Any]:
    """Delta ``stats`` for one Parquet file, from its footer."""
    arrow = metadata.schema.to_arrow_schema()
    top_level = {f.name: f.type for f in arrow}
    nulls: dict[str, int] = {}
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    for i in range(metadata.num_columns):
        name = metadata.schema.column(i).path
        if name not in top_level:
            continue  # a nested leaf
        column_stats = [metadata.row_group(g).column(i).statistics
                        for g in range(metadata.num_row_groups)]
        if not column_stats or any(s is None for s in column_stats):
            continue
        if all(s.has_null_count for s in column_stats):
            nulls[name] = sum(s.null_count for s in column_stats)
        if all(s.has_min_max for s in column_stats):
            low = _stat_value(top_level[name], min(s.min for s in column_stats))
            high = _stat_value(top_level[name], max(s.max for s in column_stats))
            if low is not None and high is not None:
                mins[name], maxs[name] = low, high
    stats: dict[str, Any] = {"numRecords": metadata.num_rows}
    if mins:
        stats["minValues"], stats["maxValues"] = mins, maxs
    if nulls:
        stats["nullCount"] = nulls
    return stats


def staged_files(staging: Path, partition_by: list[str]) -> list[StagedFile]:
    """Every non-empty Parquet data file under ``staging`` (hidden and ``_`` files skipped)."""
    found = []
    for directory, dirs, names in os.walk(staging):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        for name in sorted(names):
            if name.startswith(("_", ".")) or not name.endswith(".parquet"):
                continue
            path = Path(directory) / name
            relative = path.relative_to(staging).as_posix()
            metadata = pq.read_metadata(path)
            if metadata.num_rows == 0:
                continue
            found.append(StagedFile(path, relative,
                                    partition_values(os.path.dirname(relative), partition_by),
                                    metadata.num_rows, footer_stats(metadata)))
    return found
