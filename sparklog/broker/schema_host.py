"""What the schema registry (``schema_registry``) needs of its broker, alone or in a
cluster: ``_schemas`` while this broker leads it, who leads it otherwise, and the registry
URL of each broker.

Invariants:
- ``_schemas`` has one partition. A single node creates it with its other internal topics
  (``Broker.schemas_topic``); a cluster creates it through the replica manager, like
  ``__consumer_offsets`` (``offsets.topic.replication.factor`` replicas, compacted), on the
  registry's first request once enough brokers live.
- Only the leader of ``_schemas``-0 reads and writes it (``leader_epoch`` is its epoch
  there, None elsewhere); a write is answered once the ISR has it (``replicated``), so an
  id handed out survives the leader's death and is never handed out again by the next one.
- In a cluster each broker publishes its registry URL in ZooKeeper
  (``/sparklog/schema_registry/<broker id>``, ephemeral), so the others can forward to the
  leader; on a single node ``url_of`` is this broker's own.
- Logins are the status page's (``security.page_logins``): with a SASL listener, a PLAIN or
  SCRAM user of the broker; ACLs are the broker's authorizer's (none: everything allowed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from sparklog.broker.internal_topics import LogTopic
from sparklog.broker.schema_registry.records import TOPIC
from sparklog.broker.security.acls import Operation, ResourceType
from sparklog.broker.security.listener import ListenerSecurity
from sparklog.broker.security.page_logins import PageLogins
from sparklog.broker.state import Broker
from sparklog.cluster.registry_urls import publish_url, read_url
from sparklog.cluster.session import ClusterSession
from sparklog.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

REPLICATION_TIMEOUT_S = 10.0


_OPERATIONS = {"READ": Operation.READ, "WRITE": Operation.WRITE,
               "ALTER_CONFIGS": Operation.ALTER_CONFIGS}
_RESOURCES = {"topic": ResourceType.TOPIC, "cluster": ResourceType.CLUSTER}


class SchemaHost:
    def __init__(self, broker: Broker, listeners: Iterable[ListenerSecurity]) -> None:
        self._broker = broker
        self._logins = PageLogins(listeners, broker.security)
        self._url: str | None = None
        self._topic: LogTopic | None = broker.schemas_topic

    def now_ms(self) -> int:
        return self._broker.now_ms()

    def _session(self) -> ClusterSession | None:
        store = self._broker.replicas.store
        return store if isinstance(store, ClusterSession) else None

    async def publish(self, url: str) -> None:
        self._url = url
        session = self._session()
        if session is None:
            return
        await self._broker.replicas.call(publish_url, session.zk, self._broker.node_id, url)

    async def prepare(self) -> None:
        """Create ``_schemas`` in a cluster if it is not there yet (a failure is retried on
        the next request)."""
        replicas = self._broker.replicas
        if self._session() is None or TOPIC in replicas.assignments:
            return
        try:
            await replicas.create_topic(
                TOPIC, 1, self._broker.config.get_int("offsets.topic.replication.factor"),
                {"cleanup.policy": "compact"})
        except KafkaError as exc:
            log.info("%s not created yet: %s", TOPIC, exc)

    def leader(self) -> int | None:
        partition = self._broker.replicas.partitions.get((TOPIC, 0))
        return None if partition is None or partition.leader < 0 else partition.leader

    def leader_epoch(self) -> int | None:
        """The epoch in which this broker leads ``_schemas``-0; None when it does not."""
        partition = self._broker.replicas.partitions.get((TOPIC, 0))
        if partition is None or partition.leader != self._broker.node_id:
            return None
        return partition.leader_epoch

    def topic(self) -> LogTopic:
        """``_schemas`` over this broker's log (only while it leads it)."""
        if self._topic is None:
            replicas = self._broker.replicas
            self._topic = LogTopic(self._broker.logs, TOPIC, 1, {}, replicas.leader_epoch,
                                   replicas.appended)
        return self._topic

    async def replicated(self) -> bool:
        code = await self._broker.replicas.internal_replicated(TOPIC, 0, REPLICATION_TIMEOUT_S)
        return code == ErrorCode.NONE

    def principal(self, credentials: tuple[str, str] | None) -> str | None:
        """The principal of a basic-auth login (the status page's logins: the broker's PLAIN
        and SCRAM users when a listener is SASL); None when refused."""
        return self._logins.principal(credentials)

    def allowed(self, principal: str, client_host: str,
                needs: tuple[str, str, str] | None) -> bool:
        authorizer = self._broker.security.authorizer
        if authorizer is None or needs is None:
            return True
        kind, name, operation = needs
        return authorizer.authorize(principal, client_host, _OPERATIONS[operation],
                                    _RESOURCES[kind], name)

    async def url_of(self, broker_id: int) -> str | None:
        session = self._session()
        if session is None:
            return self._url if broker_id == self._broker.node_id else None

        return await self._broker.replicas.call(read_url, session.zk, broker_id)
