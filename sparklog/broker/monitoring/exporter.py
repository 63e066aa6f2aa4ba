"""The broker's metrics for Prometheus, under the names Kafka's usual exporters give them.

Names and labels come from:
- the Prometheus JMX exporter's Kafka example rules (``example_configs/kafka-2_0_0.yml`` of
  prometheus/jmx_exporter, ``lowercaseOutputName: true``): an MBean
  ``kafka.<domain>:type=<T>,name=<N>PerSec,<k>=<v>`` ``Count`` becomes
  ``kafka_<domain>_<t>_<n>_total{<k>="<v>"}``, a ``Value`` becomes the gauge
  ``kafka_<domain>_<t>_<n>`` (dashes become underscores), so Kafka's
  ``BrokerTopicMetrics``, ``RequestMetrics``, ``Log``, ``LogCleaner``,
  ``LogCleanerManager``, ``ReplicaManager`` and ``KafkaController`` MBeans give the names
  below;
- Strimzi's rules for ``socket-server-metrics`` (``kafka.server<type=(.+),
  listener=(.+), networkProcessor=(.+)><>(.+)`` -> ``kafka_server_$1_$4``), which the
  Kafka example rules do not cover: the active connections, in all and per client
  software name and version (Kafka's ``clientSoftwareName``/``clientSoftwareVersion``
  MBean keys, KIP-511);
- the same Kafka example rules for the client quota sensors
  (``kafka.server<type=(.+), user=(.+), client-id=(.+)><>([a-z-]+)`` ->
  ``kafka_server_quota_$4`` with labels ``resource``, ``user``, ``clientId``): Kafka's
  ``Produce``/``Fetch`` ``byte-rate``, ``Request`` ``request-time`` and each one's
  ``throttle-time`` (ms, the average over throttled requests); an entity without a user
  or client id has an empty label (JMX leaves that key out);
- danielqsj/kafka_exporter for the consumer groups (``kafka_consumergroup_*``) and topic
  offsets (``kafka_topic_*``, ``kafka_brokers``).
- Kafka 4's group coordinator metrics (``kafka.coordinator.group`` domain,
  ``group-coordinator-metrics``): ``group-completed-rebalance-count`` (classic groups'
  completed rebalances) and ``consumer-group-rebalance-count`` (KIP-848 groups' target
  assignments) become the counters
  ``kafka_coordinator_group_group_completed_rebalance_total`` and
  ``kafka_coordinator_group_consumer_group_rebalance_total``, by the same ``-count`` ->
  ``_total`` rule.
- KIP-714 client telemetry has no MBean: ``kafka_client_telemetry_metric`` is one gauge
  family holding the latest value of every series the clients pushed, the OTLP metric name
  in the ``name`` label (``org.apache.kafka.producer.request.latency.avg``) and the data
  point's attributes in ``attributes`` (``key=value`` pairs, sorted, comma-separated), beside
  the client instance's id, client id and software; ``kafka_client_telemetry_pushes`` counts
  each instance's accepted pushes (a value that is not a finite number is left out). Both
  are bounded by what the broker keeps
  (``broker/client_metrics.py``: instances, series per instance).

Invariants:
- ``FAMILIES`` lists every family this module exports (name without ``_total``, type); a scrape
  holds exactly these families, and the Grafana dashboard (``sparklog/conf/``) queries only
  them (``tests/test_metrics.py`` checks both).
- BrokerTopicMetrics are exported per topic and once without a ``topic`` label for all topics,
  as Kafka registers both meters (so sum over ``{topic!=""}``, not over everything). They
  count since the broker started (in: since each log was opened); a deleted topic's series
  go, and the all-topics sum drops by its counts, which Prometheus reads as a counter reset.
- Request latency (``TotalTimeMs``) is a Prometheus histogram (``_bucket``, ``_sum``,
  ``_count``) in milliseconds: the JMX exporter's ``_count`` keeps its name, and its quantile
  gauges (from Kafka's own decaying reservoir) are replaced by buckets, from which
  ``histogram_quantile`` gives any quantile over any window.
- Everything is built from one ``BrokerStatus`` (read on the broker's loop in one step), so
  a scrape is consistent; this module only formats.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from sparklog.broker.monitoring.requests import LATENCY_BUCKETS_MS
from sparklog.broker.monitoring.status import BrokerStatus
from sparklog.errors import ErrorCode

FAMILIES: dict[str, str] = {
    "kafka_server_brokertopicmetrics_messagesin": "counter",
    "kafka_server_brokertopicmetrics_bytesin": "counter",
    "kafka_server_brokertopicmetrics_bytesout": "counter",
    "kafka_network_requestmetrics_requests": "counter",
    "kafka_network_requestmetrics_errors": "counter",
    "kafka_network_requestmetrics_totaltimems": "histogram",
    "kafka_server_socket_server_metrics_connection_count": "gauge",
    "kafka_server_socket_server_metrics_connections": "gauge",
    "kafka_server_socket_server_metrics_connections_refused": "counter",
    "kafka_log_log_size": "gauge",
    "kafka_log_log_logstartoffset": "gauge",
    "kafka_log_log_logendoffset": "gauge",
    "kafka_log_log_numlogsegments": "gauge",
    "kafka_log_log_storageerror": "gauge",
    "kafka_log_logmanager_offlinelogdirectorycount": "gauge",
    "kafka_log_logcleaner_max_clean_time_secs": "gauge",
    "kafka_log_logcleaner_cleaner_recopy_percent": "gauge",
    "kafka_log_logcleaner_deadthreadcount": "gauge",
    "kafka_log_logcleanermanager_max_dirty_percent": "gauge",
    "kafka_log_logcleanermanager_time_since_last_run_ms": "gauge",
    "kafka_log_logcleanermanager_uncleanable_partitions_count": "gauge",
    "kafka_server_replicamanager_partitioncount": "gauge",
    "kafka_server_replicamanager_leadercount": "gauge",
    "kafka_server_replicamanager_underreplicatedpartitions": "gauge",
    "kafka_controller_kafkacontroller_offlinepartitionscount": "gauge",
    "kafka_controller_kafkacontroller_activecontrollercount": "gauge",
    "kafka_server_quota_byte_rate": "gauge",
    "kafka_server_quota_request_time": "gauge",
    "kafka_server_quota_throttle_time": "gauge",
    "kafka_brokers": "gauge",
    "kafka_topic_partitions": "gauge",
    "kafka_topic_partition_current_offset": "gauge",
    "kafka_topic_partition_oldest_offset": "gauge",
    "kafka_consumergroup_current_offset": "gauge",
    "kafka_consumergroup_lag": "gauge",
    "kafka_consumergroup_lag_sum": "gauge",
    "kafka_consumergroup_members": "gauge",
    "kafka_coordinator_group_group_completed_rebalance": "counter",
    "kafka_coordinator_group_consumer_group_rebalance": "counter",
    "kafka_client_telemetry_metric": "gauge",
    "kafka_client_telemetry_pushes": "counter",
}

_PARTITION = ["topic", "partition"]
_GROUP_PARTITION = ["consumergroup", "topic", "partition"]
_CLIENT = ["client_instance_id", "client_id", "client_software_name", "client_software_version"]


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


class BrokerCollector(Collector):
    """A prometheus-client collector over ``read_status`` (called once per scrape)."""

    def __init__(self, read_status: Callable[[], BrokerStatus]) -> None:
        self._read_status = read_status

    def collect(self) -> Iterator[Metric]:
        status = self._read_status()
        yield from _topic_metrics(status)
        yield from _request_metrics(status)
        yield from _log_metrics(status)
        yield from _cleaner_metrics(status)
        yield from _replica_metrics(status)
        yield from _quota_metrics(status)
        yield from _group_metrics(status)
        yield from _telemetry_metrics(status)


def _topic_metrics(status: BrokerStatus) -> Iterator[Metric]:
    messages_in: dict[str, int] = {}
    bytes_in: dict[str, int] = {}
    for p in status.partitions:
        messages_in[p.topic] = messages_in.get(p.topic, 0) + p.messages_in
        bytes_in[p.topic] = bytes_in.get(p.topic, 0) + p.bytes_in
    for name, per_topic, doc in (
        ("messagesin", messages_in, "Records appended (Kafka's MessagesInPerSec)"),
        ("bytesin", bytes_in, "Bytes of record batches appended (BytesInPerSec)"),
        ("bytesout", status.requests.bytes_out, "Bytes of records sent to fetchers "
                                                "(BytesOutPerSec)"),
    ):
        family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc,
                                     labels=["topic"])
        family.add_metric([], sum(per_topic.values()))
        for topic, value in sorted(per_topic.items()):
            family.add_metric([topic], value)
        yield family


def _request_metrics(status: BrokerStatus) -> Iterator[Metric]:
    requests = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                   "Requests per API and version (RequestsPerSec)",
                                   labels=["request", "version"])
    errors = CounterMetricFamily("kafka_network_requestmetrics_errors",
                                 "Error codes in responses, per API (ErrorsPerSec)",
                                 labels=["request", "error"])
    latency = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                    "Milliseconds from request received to response ready "
                                    "(TotalTimeMs)", labels=["request"])
    for name, api in sorted(status.requests.apis.items()):
        for version, count in sorted(api.by_version.items()):
            requests.add_metric([name, str(version)], count)
        for code, count in sorted(api.errors.items()):
            errors.add_metric([name, _error_name(code)], count)
        cumulative, buckets = 0, []
        for bound, count in zip((*LATENCY_BUCKETS_MS, float("inf")), api.buckets, strict=True):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))
        latency.add_metric([name], buckets, api.total_ms)
    connections = GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                    "Open client connections", labels=["listener",
                                                                       "networkProcessor"])
    for listener, count in status.connections.items():
        connections.add_metric([listener, "0"], count)
    software = GaugeMetricFamily(
        "kafka_server_socket_server_metrics_connections",
        "Open client connections per client software name and version (KIP-511)",
        labels=["clientSoftwareName", "clientSoftwareVersion", "listener", "networkProcessor"])
    for client in status.clients:
        software.add_metric([client.name, client.version, client.listener, "0"],
                            client.connections)
    refused = CounterMetricFamily(
        "kafka_server_socket_server_metrics_connections_refused",
        "Client connections refused past max.connections or max.connections.per.ip",
        labels=["listener"])
    for listener, count in sorted(status.requests.refused_connections.items()):
        refused.add_metric([listener], count)
    yield from (requests, errors, latency, connections, software, refused)


def _log_metrics(status: BrokerStatus) -> Iterator[Metric]:
    families = {
        "size": ("Bytes in the partition's segments (Log Size)", lambda p: p.size),
        "logstartoffset": ("The partition's log start offset", lambda p: p.log_start_offset),
        "logendoffset": ("The partition's log end offset", lambda p: p.log_end_offset),
        "numlogsegments": ("Segments of the partition", lambda p: p.segments),
        "storageerror": ("1 while the partition's writes fail (KAFKA_STORAGE_ERROR: a full "
                         "disk), else 0", lambda p: int(bool(p.storage_error))),
    }
    for name, (doc, value) in families.items():
        family = GaugeMetricFamily(f"kafka_log_log_{name}", doc, labels=_PARTITION)
        for p in status.partitions:
            family.add_metric([p.topic, str(p.partition)], value(p))
        yield family
    yield GaugeMetricFamily(
        "kafka_log_logmanager_offlinelogdirectorycount",
        "Log directories whose writes fail (a full disk; reads go on), as Kafka's "
        "OfflineLogDirectoryCount", value=int(bool(status.storage_errors)))


def _cleaner_metrics(status: BrokerStatus) -> Iterator[Metric]:
    cleaner = status.cleaner
    if cleaner is None:
        return
    since_run = max(status.time_ms - cleaner.last_round_ms, 0)
    for name, doc, value in (
        ("logcleaner_max_clean_time_secs", "Seconds the last clean took",
         cleaner.last_clean_seconds),
        ("logcleaner_cleaner_recopy_percent", "Bytes written / bytes read by the last clean, %",
         cleaner.last_clean_recopy_percent),
        ("logcleaner_deadthreadcount", "Cleaner threads that died", cleaner.dead_threads),
        ("logcleanermanager_max_dirty_percent", "Highest dirty ratio of a compacted log, %",
         cleaner.max_dirty_percent),
        ("logcleanermanager_time_since_last_run_ms", "Milliseconds since a cleaner round ended",
         since_run),
    ):
        yield GaugeMetricFamily(f"kafka_log_{name}", doc, value=value)
    uncleanable = GaugeMetricFamily("kafka_log_logcleanermanager_uncleanable_partitions_count",
                                    "Logs found corrupt, not cleaned until restart",
                                    labels=["logDirectory"])
    uncleanable.add_metric([status.data_dir], cleaner.uncleanable_partitions)
    yield uncleanable


def _replica_metrics(status: BrokerStatus) -> Iterator[Metric]:
    partitions = status.partitions
    led = [p for p in partitions if p.leader == status.node_id]
    for name, doc, value in (
        ("server_replicamanager_partitioncount", "Partitions with a replica on this broker",
         len(partitions)),
        ("server_replicamanager_leadercount", "Partitions this broker leads", len(led)),
        ("server_replicamanager_underreplicatedpartitions",
         "Led partitions whose ISR is smaller than their replica set",
         sum(len(p.isr) < len(p.replicas) for p in led)),
        ("controller_kafkacontroller_offlinepartitionscount", "Partitions without a leader",
         status.offline_partitions),
        ("controller_kafkacontroller_activecontrollercount",
         "1 on the active controller", int(status.controller_id == status.node_id)),
    ):
        yield GaugeMetricFamily(f"kafka_{name}", doc, value=value)


def _quota_metrics(status: BrokerStatus) -> Iterator[Metric]:
    labels = ["resource", "user", "clientId"]
    families = {name: GaugeMetricFamily(f"kafka_server_quota_{name}", doc, labels=labels)
                for name, doc in (
                    ("byte_rate", "Bytes per second of a Produce or Fetch quota's clients"),
                    ("request_time", "Percent of a request thread a Request quota's clients "
                                     "use"),
                    ("throttle_time", "Average throttle time (ms) of a quota's throttled "
                                      "requests"))}
    for sensor in status.quotas:
        tags = [sensor.group, sensor.user, sensor.client_id]
        rate = "request_time" if sensor.group == "Request" else "byte_rate"
        families[rate].add_metric(tags, sensor.rate)
        families["throttle_time"].add_metric(tags, sensor.throttle_time_avg_ms)
    yield from families.values()


def _group_metrics(status: BrokerStatus) -> Iterator[Metric]:
    yield GaugeMetricFamily("kafka_brokers", "Brokers in the cluster", value=1)
    topics = GaugeMetricFamily("kafka_topic_partitions", "Partitions of the topic",
                               labels=["topic"])
    current = GaugeMetricFamily("kafka_topic_partition_current_offset",
                                "Log end offset of the partition", labels=_PARTITION)
    oldest = GaugeMetricFamily("kafka_topic_partition_oldest_offset",
                               "Log start offset of the partition", labels=_PARTITION)
    for p in status.partitions:
        current.add_metric([p.topic, str(p.partition)], p.log_end_offset)
        oldest.add_metric([p.topic, str(p.partition)], p.log_start_offset)
    for topic, count in status.topic_partitions.items():
        topics.add_metric([topic], count)
    yield from (topics, current, oldest)

    committed = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                  "Committed offset of the group on the partition",
                                  labels=_GROUP_PARTITION)
    lag = GaugeMetricFamily("kafka_consumergroup_lag",
                            "Log end offset minus the group's committed offset",
                            labels=_GROUP_PARTITION)
    lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum",
                                "The group's lag over the topic's partitions",
                                labels=["consumergroup", "topic"])
    members = GaugeMetricFamily("kafka_consumergroup_members", "Members of the group",
                                labels=["consumergroup"])
    for group in status.groups:
        members.add_metric([group.group_id], len(group.members))
        sums: dict[str, int] = {}
        for offset in group.offsets:
            if offset.committed is None:
                continue
            labels = [group.group_id, offset.topic, str(offset.partition)]
            committed.add_metric(labels, offset.committed)
            if offset.lag is not None:
                lag.add_metric(labels, offset.lag)
                sums[offset.topic] = sums.get(offset.topic, 0) + offset.lag
        for topic, total in sorted(sums.items()):
            lag_sum.add_metric([group.group_id, topic], total)
    yield from (committed, lag, lag_sum, members)
    rebalances = dict(status.rebalances)
    for family, group_type, what in (
            ("group_completed_rebalance", "classic", "classic groups' completed rebalances"),
            ("consumer_group_rebalance", "consumer", "consumer groups' rebalances (KIP-848)")):
        yield CounterMetricFamily(f"kafka_coordinator_group_{family}", f"The {what}",
                                  value=rebalances.get(group_type, 0))


def _telemetry_metrics(status: BrokerStatus) -> Iterator[Metric]:
    values = GaugeMetricFamily("kafka_client_telemetry_metric",
                               "The latest value of a metric a client pushed (KIP-714)",
                               labels=[*_CLIENT, "name", "attributes"])
    pushes = CounterMetricFamily("kafka_client_telemetry_pushes",
                                 "Telemetry pushes accepted from the client instance",
                                 labels=_CLIENT)
    for client in status.telemetry:
        labels = [client.client_instance_id, client.client_id, client.software_name,
                  client.software_version]
        pushes.add_metric(labels, client.pushes)
        for metric in client.metrics:
            if metric.value is None:
                continue
            attributes = ",".join(f"{k}={v}" for k, v in sorted(metric.attributes.items()))
            values.add_metric([*labels, metric.name, attributes], metric.value)
    yield from (values, pushes)
