"""The names of Kafka's consumer settings, to tell a mistyped ``kafka.*`` option from one a
client merely does not use, and to name the setting it was meant to be.

Invariants:
- ``CONSUMER_SETTINGS`` holds Apache Kafka's consumer configs (``ConsumerConfig`` with the
  common, SASL and TLS ones) and the librdkafka spellings sparklog reads
  (``settings.SECURITY_KEYS``); names only, lower case.
- ``nearest_setting`` answers the closest known name or None, never a guess far off.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from sparklog.client.settings import SECURITY_KEYS

_COMMON = """
bootstrap.servers client.dns.lookup client.id client.rack connections.max.idle.ms
default.api.timeout.ms metadata.max.age.ms metadata.recovery.strategy
metadata.recovery.rebootstrap.trigger.ms metric.reporters metrics.num.samples
metrics.recording.level metrics.sample.window.ms auto.include.jmx.reporter
receive.buffer.bytes send.buffer.bytes reconnect.backoff.ms reconnect.backoff.max.ms
request.timeout.ms retry.backoff.ms retry.backoff.max.ms security.protocol security.providers
socket.connection.setup.timeout.ms socket.connection.setup.timeout.max.ms enable.metrics.push
"""
_CONSUMER = """
group.id group.instance.id group.protocol group.remote.assignor session.timeout.ms
heartbeat.interval.ms partition.assignment.strategy enable.auto.commit
auto.commit.interval.ms max.partition.fetch.bytes fetch.min.bytes fetch.max.bytes
fetch.max.wait.ms auto.offset.reset check.crcs key.deserializer value.deserializer
interceptor.classes max.poll.records max.poll.interval.ms exclude.internal.topics
internal.leave.group.on.close isolation.level allow.auto.create.topics
"""
_SASL = """
sasl.mechanism sasl.jaas.config sasl.client.callback.handler.class
sasl.login.callback.handler.class sasl.login.class sasl.kerberos.service.name
sasl.kerberos.kinit.cmd sasl.kerberos.ticket.renew.window.factor
sasl.kerberos.ticket.renew.jitter sasl.kerberos.min.time.before.relogin
sasl.login.refresh.window.factor sasl.login.refresh.window.jitter
sasl.login.refresh.min.period.seconds sasl.login.refresh.buffer.seconds
sasl.login.connect.timeout.ms sasl.login.read.timeout.ms sasl.login.retry.backoff.ms
sasl.login.retry.backoff.max.ms sasl.oauthbearer.scope.claim.name
sasl.oauthbearer.sub.claim.name sasl.oauthbearer.token.endpoint.url
sasl.oauthbearer.jwks.endpoint.url sasl.oauthbearer.jwks.endpoint.refresh.ms
sasl.oauthbearer.jwks.endpoint.retry.backoff.ms
sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms sasl.oauthbearer.clock.skew.seconds
sasl.oauthbearer.expected.audience sasl.oauthbearer.expected.issuer
"""
_SSL = """
ssl.protocol ssl.provider ssl.cipher.suites ssl.enabled.protocols ssl.keystore.type
ssl.keystore.location ssl.keystore.password ssl.key.password ssl.keystore.key
ssl.keystore.certificate.chain ssl.truststore.certificates ssl.truststore.type
ssl.truststore.location ssl.truststore.password ssl.keymanager.algorithm
ssl.trustmanager.algorithm ssl.endpoint.identification.algorithm
ssl.secure.random.implementation ssl.engine.factory.class
"""

CONSUMER_SETTINGS = frozenset(" ".join((_COMMON, _CONSUMER, _SASL, _SSL)).split()) | SECURITY_KEYS
"""Every setting a Kafka consumer knows (and librdkafka's spellings sparklog reads)."""


def nearest_setting(name: str, known: Iterable[str] = CONSUMER_SETTINGS) -> str | None:
    """The known setting ``name`` most likely meant, or None."""
    found = difflib.get_close_matches(name.lower(), sorted(known), n=1, cutoff=0.8)
    return found[0] if found else None
