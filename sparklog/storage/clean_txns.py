"""What the log cleaner must know of transactions, batch by batch (Kafka's
``CleanedTransactionMetadata``): which data batches belong to aborted transactions, and which
transaction markers may go.

A ``TransactionTracker`` is fed every batch a cleaning pass reads, in offset order: data
batches with ``on_data``, control batches with ``on_marker``. It knows the aborted
transactions overlapping the pass from the partition's ``.txnindex`` entries.

Invariants (Kafka's rules):
- A transactional data batch whose producer has an aborted transaction open at that offset
  (between the transaction's first offset and its ABORT marker) is aborted data: ``on_data``
  says it may go. Other data batches stay (the key rules decide about their records).
- An ABORT marker stays while the pass has seen data of its transaction (that data goes in
  this pass, or stays empty to keep its producer's state): the marker then keeps the reader
  and a replay of producer state right, and its index entry is carried into the cleaned
  segment (``take_retained``). An ABORT marker whose data is all gone may go.
- A COMMIT marker stays while the pass has seen data of its transaction; then it may go.
- A control batch the cleaner emptied before may go.
- "May go" is subject to the marker's delete horizon, which the cleaner applies (markers are
  kept ``delete.retention.ms`` after their data is gone, as tombstones are).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from sparklog.record.batch import BatchHeader
from sparklog.record.control import ControlType, Marker
from sparklog.storage.txn_index import AbortedTxn


@dataclass(slots=True)
class _OpenAbort:
    txn: AbortedTxn
    seen_data: bool = False


class TransactionTracker:
    """The transactions of one cleaning pass (see the module invariants)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._upcoming = deque(sorted(aborted, key=lambda t: t.first_offset))
        self._aborting: dict[int, _OpenAbort] = {}  # producer id -> its aborted txn, open here
        self._committing: set[int] = set()  # producers with committed data seen, marker not yet
        self._retained: list[AbortedTxn] = []

    def _reach(self, offset: int) -> None:
        """Open the aborted transactions that started at or before ``offset``."""
        while self._upcoming and self._upcoming[0].first_offset <= offset:
            txn = self._upcoming.popleft()
            self._aborting[txn.producer_id] = _OpenAbort(txn)

    def on_data(self, header: BatchHeader) -> bool:
        """Whether the data batch is aborted data (it may go)."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        open_abort = self._aborting.get(header.producer_id)
        if open_abort is not None:
            open_abort.seen_data = True
            return True
        self._committing.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, marker: Marker | None) -> bool:
        """Whether the control batch (holding ``marker``, None when emptied) may go."""
        self._reach(header.last_offset)
        if marker is None:
            return True
        producer = header.producer_id
        if marker.kind == ControlType.ABORT:
            open_abort = self._aborting.pop(producer, None)
            if open_abort is not None and open_abort.seen_data:
                self._retained.append(open_abort.txn)
                return False
            return True
        if marker.kind == ControlType.COMMIT:
            seen = producer in self._committing
            self._committing.discard(producer)
            return not seen
        return False

    def take_retained(self) -> list[AbortedTxn]:
        """The index entries of the ABORT markers kept since the last call, in order."""
        retained, self._retained = self._retained, []
        return retained
