"""``sparklog dump-log``: print the batches, records or index entries of segment files.

Mirrors Kafka's ``kafka-dump-log.sh --files``: a ``.log`` gives one line per batch, and with
``--deep-iteration`` (implied by ``--print-data-log``) one ``| offset: ...`` line per record;
``.index`` and ``.timeindex`` files give one line per entry, offsets made absolute with the
base offset in the 20-digit file name; a producer-state ``.snapshot`` gives one line per
producer (its epoch and last batch). Files are named with ``--files a,b`` (Kafka's flag) or
as arguments. ``--offsets-decoder`` (implies ``--print-data-log``) prints the records of
``__consumer_offsets`` decoded, as Kafka's; the decoders come from ``record_decoders``, one
flag each.

Invariants:
- Files are streamed: a ``.log`` is read one batch at a time (its header, then the rest of the
  batch) and an index in fixed-size chunks, so memory stays bounded by the largest batch.
- Every problem is reported on stdout where it occurs and makes the exit code 1. A batch that
  fails its CRC is printed with ``isvalid: false`` and iteration goes on (its length still
  frames the next batch); records that do not decode get a line of their own; a torn or
  corrupt tail (a batch that does not frame, a partial index entry) ends the file with a line
  naming its position. An intact file exits 0; a file that is not a segment file exits 2.
- Nothing is written: the command only reads.
"""

from __future__ import annotations

import argparse
import os
import re
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from sparklog.commands.record_decoders import DECODERS, RecordDecoder
from sparklog.errors import CorruptRecordError
from sparklog.record.batch import (
    HEADER_SIZE,
    LOG_APPEND_TIME,
    BatchHeader,
    check_header,
    crc_matches,
    parse_header,
)
from sparklog.record.control import decode_marker
from sparklog.record.records import Record, decode_records
from sparklog.storage.index import OffsetIndex, TimeIndex
from sparklog.storage.producer_state import SNAPSHOT_SUFFIX, read_snapshot
from sparklog.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIMEINDEX_SUFFIX

OK, CORRUPT, USAGE = 0, 1, 2

_BASE_OFFSET_STEM = re.compile(r"[0-9]{20}")
_ENTRIES_PER_READ = 4096
# C0 control characters would break the one-line-per-record output: show them escaped.
_ESCAPE_CONTROLS = {code: f"\\x{code:02x}" for code in range(0x20)}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dump-log", help="print the batches and records of segment files",
        description="Print the batches (and records) of .log segment files, or the entries of "
                    ".index and .timeindex files, like kafka-dump-log.sh --files. Exits 1 if "
                    "a file is corrupt or torn.",
    )
    parser.add_argument("paths", nargs="*", type=Path, metavar="PATH", help="segment files")
    parser.add_argument("--files", action="append", default=[], metavar="FILE,FILE...",
                        help="segment files, comma-separated (Kafka's flag; repeatable)")
    parser.add_argument("--deep-iteration", action="store_true", help="print every record")
    parser.add_argument(
        "--print-data-log", action="store_true",
        help="print record keys and payloads (implies --deep-iteration)",
    )
    for name in DECODERS:
        parser.add_argument(f"--{name}-decoder", dest="decoder", action="store_const",
                            const=name, help=f"decode the records of the {name} internal "
                                             "topic (implies --print-data-log)")
    parser.set_defaults(func=run, decoder=None)


def run(args: argparse.Namespace) -> int:
    paths = [*args.paths, *(Path(p) for item in args.files for p in item.split(",") if p)]
    if not paths:
        print("sparklog dump-log: no files given (--files FILE,... or PATH ...)",
              file=sys.stderr)
        return USAGE
    decoder = DECODERS[args.decoder] if args.decoder else None
    print_data = args.print_data_log or decoder is not None
    deep = args.deep_iteration or print_data
    return max(_dump_file(path, deep=deep, print_data=print_data, decoder=decoder)
               for path in paths)


def _dump_file(path: Path, *, deep: bool, print_data: bool,
               decoder: RecordDecoder | None) -> int:
    suffixes = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX, SNAPSHOT_SUFFIX)
    if not (_BASE_OFFSET_STEM.fullmatch(path.stem) and path.suffix in suffixes):
        print(f"{path}: not a segment file (<20-digit base offset>.log|.index|.timeindex"
              f"|.snapshot)", file=sys.stderr)
        return USAGE
    base_offset = int(path.stem)
    print(f"Dumping {path}")
    try:
        if path.suffix == LOG_SUFFIX:
            print(f"Log starting offset: {base_offset}")
            return _dump_log(path, deep=deep, print_data=print_data, decoder=decoder)
        if path.suffix == INDEX_SUFFIX:
            return _dump_index(path, base_offset, OffsetIndex.ENTRY, _offset_index_line)
        if path.suffix == SNAPSHOT_SUFFIX:
            return _dump_snapshot(path)
        return _dump_index(path, base_offset, TimeIndex.ENTRY, _time_index_line)
    except OSError as exc:
        print(f"{path}: {exc.strerror or exc}", file=sys.stderr)
        return CORRUPT


# -- .log -------------------------------------------------------------------------------------


def _read_batch(file: BinaryIO, position: int, file_size: int) -> tuple[BatchHeader, bytes]:
    """Read the batch at ``position``, where ``file`` stands; the header describes it at 0."""
    head = file.read(HEADER_SIZE)
    if len(head) < HEADER_SIZE:
        raise CorruptRecordError(f"{len(head)} bytes cannot hold a batch header")
    header = parse_header(head)
    # Check the framing before reading the body: a corrupt length must not be allocated.
    check_header(header._replace(position=position), file_size - position, from_producer=False)
    return header, head + file.read(header.size - HEADER_SIZE)


def _iter_batches(file: BinaryIO) -> Iterator[tuple[int, BatchHeader, bytes]]:
    """Yield (position, header, batch bytes); a batch that does not frame ends the file."""
    file_size = os.fstat(file.fileno()).st_size
    position = 0
    while position < file_size:
        try:
            header, batch = _read_batch(file, position, file_size)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"Found a torn or corrupt tail at position {position} "
                f"({file_size - position} bytes): {exc}"
            ) from exc
        yield position, header, batch
        position += header.size


def _dump_log(path: Path, *, deep: bool, print_data: bool,
              decoder: RecordDecoder | None) -> int:
    status = OK
    with path.open("rb") as file:
        try:
            for position, header, batch in _iter_batches(file):
                valid = crc_matches(batch, header)
                print(_batch_line(position, header, valid))
                if not valid:
                    status = CORRUPT
                if deep and not _print_records(position, header, batch, print_data, decoder):
                    status = CORRUPT
        except CorruptRecordError as exc:
            print(exc)
            return CORRUPT
    return status


def _print_records(position: int, header: BatchHeader, batch: bytes, print_data: bool,
                   decoder: RecordDecoder | None) -> bool:
    """Print the batch's record lines; False (after a line saying why) if they do not decode."""
    try:
        records = decode_records(batch, header)
    except CorruptRecordError as exc:
        print(f"| corrupt records in the batch at position {position}: {exc}")
        return False
    for record in records:
        print(_record_line(header, record, print_data, decoder))
    return True


def _timestamp_type_name(header: BatchHeader) -> str:
    return "LogAppendTime" if header.timestamp_type == LOG_APPEND_TIME else "CreateTime"


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _batch_line(position: int, header: BatchHeader, valid: bool) -> str:
    return (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} baseSequence: {header.base_sequence} "
        f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
        f"producerEpoch: {header.producer_epoch} partitionLeaderEpoch: {header.leader_epoch} "
        f"isTransactional: {_flag(header.is_transactional)} "
        f"isControl: {_flag(header.is_control)} position: {position} "
        f"{_timestamp_type_name(header)}: {header.max_timestamp} size: {header.size} "
        f"magic: {header.magic} compresscodec: {header.compression_name} crc: {header.crc} "
        f"isvalid: {_flag(valid)}"
    )


def _size(data: bytes | None) -> int:
    return -1 if data is None else len(data)


def _sequence(header: BatchHeader, record: Record) -> int:
    """The record's producer sequence: baseSequence + offset delta, wrapping at int32."""
    if header.base_sequence < 0:
        return -1
    return (header.base_sequence + record.offset - header.base_offset) % (1 << 31)


def _show(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace").translate(_ESCAPE_CONTROLS)


def _control_marker(record: Record) -> str | None:
    """Kafka's text for a transaction marker record, or None if it is not one."""
    marker = decode_marker(record.key, record.value)
    if marker is None:
        return None
    return f" endTxnMarker: {marker.name} coordinatorEpoch: {marker.coordinator_epoch}"


def _data_text(header: BatchHeader, record: Record, decoder: RecordDecoder | None) -> str:
    """` key: .. payload: ..` (each only when not null; both, decoded, with a decoder), or
    a control record's marker."""
    if header.is_control and (marker := _control_marker(record)):
        return marker
    if decoder is not None:
        key_text, payload_text = decoder(record.key, record.value)
        return f" key: {key_text} payload: {payload_text}"
    key = "" if record.key is None else f" key: {_show(record.key)}"
    payload = "" if record.value is None else f" payload: {_show(record.value)}"
    return key + payload


def _record_line(header: BatchHeader, record: Record, print_data: bool,
                 decoder: RecordDecoder | None) -> str:
    line = (
        f"| offset: {record.offset} {_timestamp_type_name(header)}: {record.timestamp} "
        f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
        f"sequence: {_sequence(header, record)} "
        f"headerKeys: [{','.join(key for key, _ in record.headers)}]"
    )
    return line + _data_text(header, record, decoder) if print_data else line


# -- producer-state snapshots -------------------------------------------------------------------


def _dump_snapshot(path: Path) -> int:
    """One line per producer: its epoch and its last batch, as Kafka's tool prints them."""
    try:
        _, producers = read_snapshot(path)
    except ValueError as exc:
        print(exc)
        return CORRUPT
    for producer_id, entry in sorted(producers.items()):
        line = f"producerId: {producer_id} producerEpoch: {entry.epoch}"
        if entry.batches:
            last = entry.batches[-1]
            line += (f" firstSequence: {last.first_seq} lastSequence: {last.last_seq}"
                     f" lastOffset: {last.last_offset}"
                     f" offsetDelta: {last.last_offset - last.first_offset}")
        print(line)
    return OK


# -- .index and .timeindex --------------------------------------------------------------------


def _iter_entries(file: BinaryIO, entry: struct.Struct) -> Iterator[tuple[int, ...]]:
    """Unpack fixed-size entries chunk by chunk; a partial entry at the end is corrupt."""
    position = 0
    while chunk := file.read(entry.size * _ENTRIES_PER_READ):
        whole = len(chunk) - len(chunk) % entry.size
        yield from entry.iter_unpack(memoryview(chunk)[:whole])
        position += whole
        if whole < len(chunk):
            raise CorruptRecordError(
                f"Found a torn entry at position {position}: {len(chunk) - whole} of "
                f"{entry.size} bytes"
            )


def _offset_index_line(base_offset: int, relative_offset: int, position: int) -> str:
    return f"offset: {base_offset + relative_offset} position: {position}"


def _time_index_line(base_offset: int, timestamp: int, relative_offset: int) -> str:
    return f"timestamp: {timestamp} offset: {base_offset + relative_offset}"


def _dump_index(
    path: Path, base_offset: int, entry: struct.Struct, line: Callable[[int, int, int], str]
) -> int:
    """Print each entry; all-zero entries after the first are unused preallocated space."""
    with path.open("rb") as file:
        try:
            for number, fields in enumerate(_iter_entries(file, entry)):
                if number and not any(fields):
                    break
                print(line(base_offset, *fields))
        except CorruptRecordError as exc:
            print(exc)
            return CORRUPT
    return OK
