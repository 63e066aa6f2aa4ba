"""Data loss: offsets a query should read that the log no longer holds.

Invariant: with ``failOnDataLoss=true`` (the default) ``report_data_loss`` raises
``DataLossError``, whose message names the topic, partition and offsets and how to skip;
with false it logs the same facts as a warning and the caller skips the missing offsets.
Offsets missing inside a compacted log, and transaction markers, are never data loss.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

_HINT = ("Some data may have been lost: it aged out of the log (retention or DeleteRecords) "
         "or the topic was deleted before the query read it. If you want the query to go on "
         "in such cases, set the source option failOnDataLoss to false.")


class DataLossError(RuntimeError):
    """Offsets the query must read are gone from the log, and failOnDataLoss is true."""


def report_data_loss(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(f"{message}. {_HINT}")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)
