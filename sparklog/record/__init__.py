"""Kafka's record format (magic 2), apart from storage and the wire: batch headers and their
in-place rewrites (``batch``), the records inside a batch (``records``), the codecs of the
records section (``compression``) and transaction control records (``control``).

Invariant: this package depends on nothing of sparklog but ``sparklog.errors``; storage, the
protocol, the coordinators and the data source all read and write batches through it.
"""
