"""The controller's writes are fenced by the controller epoch.

Invariants:
- Every controller write is one ZooKeeper transaction whose first operation checks the
  ``/controller_epoch`` version the controller set when it took office; ``commit`` raises
  ``FencedError`` when that check failed (a newer controller took office: this one must stop
  writing), and answers False when another operation failed (a concurrent write: decide
  again on a new read).
"""

from __future__ import annotations

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import RolledBackError

from sparklog.cluster.layout import CONTROLLER_EPOCH


class FencedError(Exception):
    """A newer controller took office: this one must stop writing."""


def fenced_transaction(zk: KazooClient, epoch_version: int) -> TransactionRequest:
    """A transaction that only commits while ``/controller_epoch`` is at ``epoch_version``."""
    transaction = zk.transaction()
    transaction.check(CONTROLLER_EPOCH, epoch_version)
    return transaction


def commit(transaction: TransactionRequest) -> bool:
    """Commit; False if a write lost a race, ``FencedError`` if the epoch moved on."""
    results = transaction.commit()
    if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
        raise FencedError
    return not any(isinstance(r, Exception) for r in results)
