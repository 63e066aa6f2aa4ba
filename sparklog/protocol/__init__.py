"""Kafka wire protocol: framing, API keys and header versions, and the one adapter to kio
(request and response codecs for the broker and for clients, entity building).

Invariant: importing the package imports kio first through ``kio_import`` (without kio's
hypothesis hook), so no module anywhere pays for that hook by importing kio directly.
"""

from sparklog.protocol import kio_import  # noqa: F401  (first: kio without hypothesis)
