"""What a read_committed consumer keeps of a Fetch answer: the records of aborted
transactions dropped, with Kafka's consumer algorithm.

A read_committed Fetch answer lists the transactions aborted in its range, as (producer id,
first offset). Walking the batches in offset order, a producer starts aborting at the first
of its batches at or after such a first offset; while it does, its transactional batches
are dropped; its ABORT marker ends it. Control batches carry no data and are dropped too.

Invariants:
- Kept batches are the input's bytes unchanged, in order, offsets untouched: a reader still
  knows exactly which offsets it has passed. With no aborted transaction listed the input
  is returned as it is (no copy).
- Each answer is filtered on its own: an aborted transaction that spans several answers is
  listed in each of them (the broker lists every one overlapping the answer's range).
- A cut-short last batch (a Fetch may end inside one) is kept as it is; decoders ignore it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from sparklog.record.batch import BatchHeader, complete_batches, end_of
from sparklog.record.control import ControlType, batch_marker

AbortedTransaction = tuple[int, int]
"""(producer id, first offset), as a Fetch answer lists it."""


def committed_only(records: bytes, aborted: Iterable[AbortedTransaction]) -> bytes:
    """``records`` without the batches of the ``aborted`` transactions (see the invariants)."""
    pending = [(first, pid) for pid, first in aborted]
    if not pending:
        return records
    heapq.heapify(pending)
    aborting: set[int] = set()
    kept: list[memoryview] = []
    view = memoryview(records)
    header = None
    for header in complete_batches(records):
        while pending and pending[0][0] <= header.last_offset:
            aborting.add(heapq.heappop(pending)[1])
        if header.is_control:
            if header.producer_id in aborting and _is_abort(records, header):
                aborting.discard(header.producer_id)
        elif not (header.is_transactional and header.producer_id in aborting):
            kept.append(view[header.position:end_of(header)])
    kept.append(view[end_of(header):])  # a cut-short last batch, as it is
    return b"".join(kept)


def _is_abort(records: bytes, header: BatchHeader) -> bool:
    marker = batch_marker(records, header)
    return marker is not None and marker.kind == ControlType.ABORT
