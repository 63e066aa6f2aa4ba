"""The security state a broker keeps: SCRAM credentials (and, with an authorizer, ACLs).

Invariants:
- Everything here lives in the data directory and is touched from the event loop thread
  only, like the rest of ``Broker``.
"""

from __future__ import annotations

from pathlib import Path

from sparklog.broker.security.scram import ScramStore


class BrokerSecurity:
    def __init__(self, data_dir: Path) -> None:
        self.scram = ScramStore(data_dir)

