"""Client quotas over the Kafka protocol (DescribeClientQuotas, AlterClientQuotas: KIP-546),
as Kafka's admin client ``describeClientQuotas`` / ``alterClientQuotas``; confluent-kafka
does not offer them.

Invariants:
- An entity is a mapping of entity type (``user``, ``client-id``) to a name, None naming
  the default entity of the type; a filter maps each type to a name, None (the default) or
  ``ANY`` (every entity of the type), and is strict (Kafka's ``containsOnly``): entities
  with other types are left out.
- Both requests go to one broker of the cluster (the lowest id Metadata lists): any broker
  of a sparklog cluster writes quotas to ZooKeeper, and a Kafka cluster forwards them to
  its controller. An error raises ``KafkaClientError`` naming the API, the error and the
  broker's message.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.errors import ErrorCode
from sparklog.protocol.versions import ApiKey

ANY = object()
"""A filter's name matching every entity of its type, the default included."""
QuotaEntity = dict[str, str | None]


def describe_client_quotas(client: KafkaClient, wanted: Mapping[str, object]
                           ) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """Every entity ``wanted`` matches (strictly) with its quotas, in the broker's order."""
    components = [{"entity_type": kind, "match_type": 2 if name is ANY else
                   1 if name is None else 0, "match": name if isinstance(name, str) else None}
                  for kind, name in wanted.items()]
    answer = client.admin_request(ApiKey.DESCRIBE_CLIENT_QUOTAS,
                      {"components": components, "strict": True})
    if answer.error_code != ErrorCode.NONE:
        raise KafkaClientError.of("DescribeClientQuotas", answer.error_code, answer.error_message)
    return [({e.entity_type: e.entity_name for e in entry.entity},
             {v.key: v.value for v in entry.values}) for entry in answer.entries or ()]


def alter_client_quotas(client: KafkaClient, entity: QuotaEntity,
                        changes: Mapping[str, float | None], validate_only: bool = False
                        ) -> None:
    """Set (a value) or remove (None) quotas of ``entity``."""
    body = {"validate_only": validate_only, "entries": [{
        "entity": [{"entity_type": kind, "entity_name": name} for kind, name in entity.items()],
        "ops": [{"key": key, "value": 0.0 if value is None else float(value),
                 "remove": value is None} for key, value in changes.items()]}]}
    (entry,) = client.admin_request(ApiKey.ALTER_CLIENT_QUOTAS, body).entries
    if entry.error_code != ErrorCode.NONE:
        raise KafkaClientError.of("AlterClientQuotas", entry.error_code, entry.error_message)
