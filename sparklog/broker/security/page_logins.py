"""Who may read records on the status page's message browser: the broker's SASL users (HTTP
basic auth) and their READ ACLs.

Invariants:
- A login is required when any listener is SASL (SASL_PLAINTEXT, SASL_SSL), and is then a
  user and password that would log in over one of them: a PLAIN user of a listener that
  enables PLAIN (its JAAS ``user_<name>`` password, compared in constant time), or a user
  whose SCRAM credential of a mechanism some listener enables has the StoredKey the
  password derives (the check a SCRAM exchange makes, RFC 5802). Its principal is
  ``User:<name>``. Without a SASL listener nobody logs in: the principal is
  ``User:ANONYMOUS``, as on a PLAINTEXT listener.
- Reading a topic's records needs READ on the topic, as a Fetch does, when the broker has
  an authorizer (its ACLs, super users and ``allow.everyone.if.no.acl.found``); without one
  anyone may.
- ``may_read`` runs on the broker's event loop, which owns the ACLs (on a cluster
  ZooKeeper's, through ``BrokerSecurity``). ``principal`` runs on the HTTP request's own
  thread: it reads one credential (a single dict lookup in the current store, atomic under
  the GIL) and derives the password's key there, so a login (thousands of PBKDF2 rounds)
  never holds the loop.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable

from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.security.broker_security import BrokerSecurity
from sparklog.broker.security.listener import ANONYMOUS, ListenerSecurity
from sparklog.broker.security.scram_credentials import MECHANISM_IDS
from sparklog.protocol.scram import client_key, salted_password, stored_key


class PageLogins:
    def __init__(self, listeners: Iterable[ListenerSecurity], security: BrokerSecurity) -> None:
        sasl = [listener for listener in listeners if listener.sasl]
        self.required = bool(sasl)
        self._plain: dict[str, str] = {}
        for listener in sasl:
            if "PLAIN" in listener.mechanisms:
                self._plain.update(listener.plain_users)
        self._scram = sorted({m for listener in sasl for m in listener.mechanisms
                              if m in MECHANISM_IDS})
        self._security = security

    def principal(self, credentials: tuple[str, str] | None) -> str | None:
        """The principal of a (user, password) login; None when it is refused (or missing
        while a login is required)."""
        if not self.required:
            return ANONYMOUS
        if credentials is None:
            return None
        user, password = credentials
        expected = self._plain.get(user)
        if expected is not None and hmac.compare_digest(expected.encode(), password.encode()):
            return f"User:{user}"
        for mechanism in self._scram:
            credential = self._security.scram.get(user, mechanism)
            if credential is None:
                continue
            salted = salted_password(mechanism, password, credential.salt, credential.iterations)
            if hmac.compare_digest(stored_key(mechanism, client_key(mechanism, salted)),
                                   credential.stored_key):
                return f"User:{user}"
        return None

    def may_read(self, principal: str, host: str, topic: str) -> bool:
        """Whether ``principal`` from ``host`` may read ``topic``'s records."""
        authorizer = self._security.authorizer
        return authorizer is None or authorizer.authorize(principal, host, Operation.READ,
                                                          ResourceType.TOPIC, topic)
