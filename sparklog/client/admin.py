"""Topic administration that the command-line tools, the jobs and the demo share, through
confluent-kafka's ``AdminClient``.

Invariants:
- ``admin_result`` is the one place a per-topic admin request is waited for: True on success,
  False on an error code the caller tolerates, the client's ``KafkaException`` otherwise.
- ``ensure_topics`` creates only the topics that are missing; one that exists is left as it
  is, whatever its partition count. ``topic_partitions`` and ``partition_count`` never create
  a topic.
- ``ensure_topics`` and ``partition_count`` fail with a ``TopicError`` whose message names
  the topic and the broker's reason; they log in with the client settings given (Kafka's
  security settings) and fail at once on a refused login or a protocol mismatch
  (``watch.connected_admin``).
- An ``AdminClient`` outlives the futures of its requests (once collected, they fail with
  "Handle is terminating").
- Every ``AdminClient`` sparklog opens is ``watch.connected_admin``'s (its log lines served
  by ``rdkafka_log.admin_client``).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.client.watch import connected_admin

REQUEST_TIMEOUT_S = 30.0
MISSING_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
TOPIC_EXISTS = frozenset({KafkaError.TOPIC_ALREADY_EXISTS})


class TopicError(Exception):
    """A topic could not be created or found; the message says which and why."""


def kafka_error(exc: KafkaException) -> KafkaError:
    """The ``KafkaError`` an exception of the client carries."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else KafkaError(KafkaError._FAIL, str(exc))


def admin_result(future: Future, tolerated: frozenset[int] = frozenset()) -> bool:
    """Wait for one topic's admin result: True on success, False on a tolerated error."""
    try:
        future.result()
    except KafkaException as exc:
        if kafka_error(exc).code() in tolerated:
            return False
        raise
    return True


def topic_partitions(admin: AdminClient, topic: str) -> list[int]:
    """The partition ids of ``topic``; a ``KafkaException`` when it does not exist."""
    future = admin.describe_topics(TopicCollection([topic]),
                                   request_timeout=REQUEST_TIMEOUT_S)[topic]
    return [partition.id for partition in future.result().partitions]


def partition_count(bootstrap: str, topic: str,
                    client_config: Mapping[str, str] | None = None) -> int:
    """The number of partitions of ``topic``; ``client_config`` adds settings (security)."""
    admin = connected_admin({"bootstrap.servers": bootstrap, **(client_config or {})})
    try:
        return len(topic_partitions(admin, topic))
    except KafkaException as exc:
        error = kafka_error(exc)
        reason = "not found" if error.code() in MISSING_TOPIC else error.str()
        raise TopicError(f"topic {topic} on {bootstrap}: {reason}") from None


def ensure_topics(bootstrap: str, topics: Mapping[str, int],
                  client_config: Mapping[str, str] | None = None) -> None:
    """Create the topics that do not exist yet (``{name: partitions}``)."""
    admin = connected_admin({"bootstrap.servers": bootstrap, **(client_config or {})})
    futures = admin.create_topics([NewTopic(name, partitions) for name, partitions in
                                   topics.items()], operation_timeout=REQUEST_TIMEOUT_S)
    for name, future in futures.items():
        try:
            admin_result(future, TOPIC_EXISTS)
        except KafkaException as exc:
            raise TopicError(f"could not create topic {name}: {kafka_error(exc).str()}") from None
