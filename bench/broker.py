"""Broker throughput with three Kafka clients, default and tuned, against the loopback ceiling.

Usage: ``python bench/broker.py [--bootstrap HOST:PORT] [--quick] [--clients NAMES]``

Starts its own broker (a child process on a temporary data directory) unless given one.
Measures, in one run:
- the ceiling: raw TCP over loopback (one sender, one receiver, 1 MiB writes);
- for each client (confluent-kafka, kafka-python, aiokafka), each record size (100 B,
  1 KiB) and each of two settings, producing N records into a new topic of one partition
  and then consuming them from offset 0 (records/s, MB/s):
  * ``default``: the client's own defaults (only bootstrap servers, and a group id for
    the consumer): what a user gets out of the box. Producers: confluent-kafka linger.ms 5,
    batch.size 1 MB, acks all; kafka-python linger_ms 0, batch_size 16 KiB, acks all,
    idempotent; aiokafka linger_ms 0, max_batch_size 16 KiB, acks 1. Consumers:
    confluent-kafka stops fetching once queued.min.messages (100,000) are queued and backs
    off fetch.queue.backoff.ms (1 s); kafka-python and aiokafka fetch 1 MiB per partition.
  * ``tuned``: the settings a throughput pipeline uses (``TUNED``): linger 20 ms, 1 MB
    batches, acks all, idempotent; consumers fetching 8 MiB per partition, confluent-kafka
    with queued.min.messages 1,000,000.
- the broker's CPU seconds per million records produced and consumed (utime + stime of its
  process over each measurement), and the cores it used meanwhile: the machine has two,
  which the client competes for;
- end-to-end latency p50/p99 at a moderate rate (1000 records/s, linger.ms 0), unloaded;
- the cost of metrics: produce throughput (100 B records) of two fresh brokers, one without
  and one with ``metrics.listener``, scraped (``/metrics`` every 5 s) with the status page
  open (``/status.json`` every 2 s), in runs ordered off, on, on, off, best of two each;
  also the user CPU time per record of the broker's event loop thread (which a busy machine
  disturbs less than throughput) and the CPU time of the listener's threads (formatting
  scrapes);
- the cost of encryption: one broker with a PLAINTEXT and a SASL_SSL listener (TLS 1.3, a
  ``sparklog certs`` test certificate, SASL/SCRAM-SHA-512), confluent-kafka with its
  default settings producing then consuming 1 KiB records on each, in runs ordered plain,
  TLS, TLS, plain, best of two each; the ratio of SASL_SSL to PLAINTEXT (target >= 0.5);
- the cost of validated produce (``confluent.value.schema.validation``): one broker with
  the schema registry, confluent-kafka (tuned) producing 100 B records in Confluent's wire
  format (magic byte, a registered schema id, a body) to a topic without validation and to
  one with it, in runs ordered plain, validated, validated, plain, best of two each; the
  ratio of validated to plain, and the event loop's user CPU per record;
- the broker's peak RSS (VmHWM).
Prints a table with absolute figures and the ratio to the socket ceiling, then the metrics
and the security rows (ratio to the run without metrics, to PLAINTEXT); the line
``produce_100B_records_per_s=<n>`` (confluent-kafka, tuned) closes the client table.
``--only security`` (or ``clients``, ``metrics``, ``validated``) runs one part.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import (  # bench/ is on sys.path when run
    Row,
    cpu_seconds,
    peak_rss_mib,
    print_table,
    vm_hwm_mib,
)
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from sparklog.broker.process import BrokerProcess
from sparklog.cli import main as sparklog_cli

MB = 1_000_000
MiB = 1 << 20
SETTINGS = ("default", "tuned")
TUNED: dict[str, dict[str, dict[str, Any]]] = {
    "confluent-kafka": {
        "producer": {"linger.ms": 20, "batch.size": 1_000_000,
                     "queue.buffering.max.messages": 2_000_000,
                     "queue.buffering.max.kbytes": 2_097_151, "enable.idempotence": True,
                     "acks": "all"},
        "consumer": {"fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8 * MiB,
                     "queued.max.messages.kbytes": 1_048_576,
                     "queued.min.messages": 1_000_000},
    },
    "kafka-python": {
        "producer": {"linger_ms": 20, "batch_size": 1_000_000, "acks": "all",
                     "enable_idempotence": True, "max_request_size": 8 * MiB},
        "consumer": {"max_partition_fetch_bytes": 8 * MiB, "max_poll_records": 100_000},
    },
    "aiokafka": {
        "producer": {"linger_ms": 20, "max_batch_size": 1_000_000, "acks": "all",
                     "enable_idempotence": True, "max_request_size": 8 * MiB},
        "consumer": {"max_partition_fetch_bytes": 8 * MiB},
    },
}
# records per measurement at full scale, per client and record size: about 5-15 s each
COUNTS = {"confluent-kafka": {100: 3_000_000, 1024: 600_000},
          "kafka-python": {100: 300_000, 1024: 150_000},
          "aiokafka": {100: 300_000, 1024: 150_000}}


def socket_ceiling(total_bytes: int) -> float:
    """MB/s of a plain loopback TCP stream with 1 MiB writes (the network path's ceiling)."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    received = 0

    def drain() -> None:
        nonlocal received
        conn, _ = server.accept()
        with conn:
            buf = bytearray(1 << 20)
            while (n := conn.recv_into(buf)) > 0:
                received += n

    reader = threading.Thread(target=drain)
    reader.start()
    chunk = os.urandom(1 << 20)
    start = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port)) as client:
        sent = 0
        while sent < total_bytes:
            client.sendall(chunk)
            sent += len(chunk)
    reader.join()
    elapsed = time.perf_counter() - start
    server.close()
    return received / elapsed / MB


def create_topic(bootstrap: str, topic: str, config: dict[str, str] | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1, config=config or {})]).values():
        future.result(30)


# -- the clients: produce ``count`` copies of ``value``; consume ``count`` records from 0 ---------


def produce_confluent(bootstrap: str, topic: str, value: bytes, count: int,
                      conf: dict[str, Any]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **conf})
    send = producer.produce
    for _ in range(count):
        while True:
            try:
                send(topic, value)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
    if producer.flush(120):
        raise SystemExit("produce benchmark: records left undelivered")


def consume_confluent(bootstrap: str, topic: str, count: int, conf: dict[str, Any]) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", **conf})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = nbytes = 0
    while seen < count:
        for message in consumer.consume(10_000, 5.0):
            value = message.value()
            if value is None:
                raise SystemExit(f"consume benchmark: {message.error()}")
            nbytes += len(value)
            seen += 1
    consumer.close()
    return nbytes


def produce_kafka_python(bootstrap: str, topic: str, value: bytes, count: int,
                         conf: dict[str, Any]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, **conf)
    send = producer.send
    for _ in range(count):
        send(topic, value)
    producer.flush(120)
    producer.close()


def consume_kafka_python(bootstrap: str, topic: str, count: int, conf: dict[str, Any]) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, **conf)
    partition = KpTopicPartition(topic, 0)
    consumer.assign([partition])
    consumer.seek(partition, 0)
    seen = nbytes = 0
    while seen < count:
        for messages in consumer.poll(timeout_ms=5000).values():
            seen += len(messages)
            nbytes += sum(len(m.value) for m in messages)
    consumer.close()
    return nbytes


def produce_aiokafka(bootstrap: str, topic: str, value: bytes, count: int,
                     conf: dict[str, Any]) -> None:
    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **conf)
        await producer.start()
        try:
            pending = []
            for n in range(count):
                pending.append(await producer.send(topic, value))
                if n % 10_000 == 9_999:  # bounded: wait for the oldest deliveries
                    await asyncio.gather(*pending)
                    pending = []
            await asyncio.gather(*pending)
        finally:
            await producer.stop()

    asyncio.run(run())


def consume_aiokafka(bootstrap: str, topic: str, count: int, conf: dict[str, Any]) -> int:
    async def run() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                    enable_auto_commit=False, **conf)
        await consumer.start()
        try:
            partition = AioTopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, 0)
            seen = nbytes = 0
            while seen < count:
                for messages in (await consumer.getmany(timeout_ms=5000)).values():
                    seen += len(messages)
                    nbytes += sum(len(m.value) for m in messages)
            return nbytes
        finally:
            await consumer.stop()

    return asyncio.run(run())


@dataclass(frozen=True)
class Client:
    produce: Callable[[str, str, bytes, int, dict[str, Any]], None]
    consume: Callable[[str, str, int, dict[str, Any]], int]


CLIENTS = {
    "confluent-kafka": Client(produce_confluent, consume_confluent),
    "kafka-python": Client(produce_kafka_python, consume_kafka_python),
    "aiokafka": Client(produce_aiokafka, consume_aiokafka),
}


# -- measuring ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Measured:
    seconds: float
    broker_cpu: float


def measure(run: Callable[[], object], broker_pid: int | None) -> Measured:
    """``run``'s wall-clock seconds and the broker's CPU seconds meanwhile (NaN when the
    broker is not ours)."""
    def broker_cpu() -> float:
        return float("nan") if broker_pid is None else cpu_seconds(broker_pid)

    cpu_before, started = broker_cpu(), time.perf_counter()
    run()
    seconds = time.perf_counter() - started
    return Measured(seconds, broker_cpu() - cpu_before)


def row(client: str, setting: str, what: str, count: int, nbytes: int, measured: Measured,
        ceiling: float) -> Row:
    mbps = nbytes / measured.seconds / MB
    return Row(client, setting, what, f"{count / measured.seconds:,.0f}", f"{mbps:,.1f}",
               f"{mbps / ceiling:.3f}", f"{measured.broker_cpu / count * 1e6:.2f}",
               f"{measured.broker_cpu / measured.seconds:.2f}")


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    """End-to-end milliseconds (produce call to consumer delivery) at ``rate`` records/s."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                         "fetch.min.bytes": 1})
    consumer.assign([TopicPartition(topic, 0, 0)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    total = int(rate * seconds)
    samples: list[float] = []

    def read() -> None:
        # poll(), not consume(n): consume waits to fill its batch, which would add delay.
        while len(samples) < total:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                samples.append((time.perf_counter_ns() - int(message.value())) / 1e6)

    reader = threading.Thread(target=read)
    reader.start()
    time.sleep(1.0)  # let the consumer's first fetch park on the broker
    start = time.perf_counter()
    for i in range(total):
        target = start + i / rate
        while (now := time.perf_counter()) < target:
            time.sleep(min(target - now, 0.001))
        producer.produce(topic, str(time.perf_counter_ns()).encode())
        producer.poll(0)
    producer.flush(30)
    reader.join(60)
    consumer.close()
    return samples[total // 10:]  # drop the warm-up tenth


class Scraper:
    """Scrapes a broker like an eager Prometheus (``/metrics`` every 5 s, a third of the usual
    15 s) with the status page open (``/status.json`` every 2 s, as the page polls), until
    stopped; ``scrapes`` counts the /metrics scrapes."""

    def __init__(self, metrics_url: str) -> None:
        self.url = metrics_url
        self.scrapes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Scraper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _get(self, path: str) -> None:
        with urllib.request.urlopen(self.url + path, timeout=30) as response:
            response.read()

    def _run(self) -> None:
        tick = 0
        while not self._stop.wait(1.0):
            tick += 1
            if tick % 2 == 0:
                self._get("status.json")
            if tick % 5 == 0:
                self._get("metrics")
                self.scrapes += 1


def metrics_overhead(root: Path, count: int) -> tuple[dict[str, float], dict[str, float],
                                                     float, int]:
    """Per mode ("off", "on"): the best produce rate (100 B records/s) and the least user CPU
    microseconds per record of the broker's event loop thread (where the request path and
    its metrics run); the CPU milliseconds the metrics broker's other threads (the
    listener's) used per run at most; the scrapes made. Runs go off, on, on, off, so that
    what a run leaves to the next (write-back, caches) weighs on both alike."""
    brokers = {"off": BrokerProcess(root / "plain").start(),
               "on": BrokerProcess(root / "measured",
                                   {"metrics.listener": "http://127.0.0.1:0"}).start()}
    metrics_url = brokers["on"].metrics_url
    assert metrics_url is not None
    value = os.urandom(100)
    rate = {"off": 0.0, "on": 0.0}
    loop_cpu = {"off": float("inf"), "on": float("inf")}
    listener_ms = 0.0
    try:
        with Scraper(metrics_url) as scraper:
            for run, mode in enumerate(("off", "on", "on", "off")):
                broker = brokers[mode]
                topic = f"bench-metrics-{run}"
                create_topic(broker.bootstrap, topic)
                process = cpu_seconds(broker.pid)
                loop = cpu_seconds(broker.pid, broker.pid)
                loop_user = cpu_seconds(broker.pid, broker.pid, user_only=True)
                seconds = measure(lambda b=broker.bootstrap, t=topic: produce_confluent(
                    b, t, value, count, TUNED["confluent-kafka"]["producer"]), None).seconds
                rate[mode] = max(rate[mode], count / seconds)
                loop_user = cpu_seconds(broker.pid, broker.pid, user_only=True) - loop_user
                loop_cpu[mode] = min(loop_cpu[mode], loop_user / count * 1e6)
                if mode == "on":
                    others = cpu_seconds(broker.pid) - process
                    others -= cpu_seconds(broker.pid, broker.pid) - loop
                    listener_ms = max(listener_ms, others * 1e3)
        return rate, loop_cpu, listener_ms, scraper.scrapes
    finally:
        for broker in brokers.values():
            broker.stop()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def security_cost(root: Path, count: int) -> tuple[dict[str, dict[str, float]], float]:
    """Per protocol ("PLAINTEXT", "SASL_SSL"): the best records/s of producing and of
    consuming ``count`` 1 KiB records with confluent-kafka's defaults, on one broker that
    serves both listeners (runs go plain, TLS, TLS, plain); and that broker's peak RSS."""
    certs = root / "certs"
    if sparklog_cli(["certs", "create", "--dir", str(certs)]) != 0:
        raise SystemExit("security benchmark: sparklog certs create failed")
    ports = {"PLAINTEXT": _free_port(), "SASL_SSL": _free_port()}
    broker = BrokerProcess(root / "secure", {
        "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs / "broker.pem"),
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }).start()
    plain = broker.bootstrap  # the first listener, which BrokerProcess binds where it says
    if sparklog_cli(["users", "add", "bench", "--password", "bench-secret", "--mechanism",
                     "SCRAM-SHA-512", "--bootstrap-server", plain]) != 0:
        raise SystemExit("security benchmark: sparklog users add failed")
    clients = {"PLAINTEXT": (plain, {}),
               "SASL_SSL": (f"127.0.0.1:{ports['SASL_SSL']}",
                            {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                             "sasl.username": "bench", "sasl.password": "bench-secret",
                             "ssl.ca.location": str(certs / "ca.crt")})}
    value = os.urandom(1024)
    best = {p: {"produce": 0.0, "consume": 0.0} for p in clients}
    try:
        for run, protocol in enumerate(("PLAINTEXT", "SASL_SSL", "SASL_SSL", "PLAINTEXT")):
            bootstrap, conf = clients[protocol]
            topic = f"bench-security-{run}"
            create_topic(plain, topic)
            seconds = measure(lambda b=bootstrap, t=topic, c=conf: produce_confluent(
                b, t, value, count, c), None).seconds
            best[protocol]["produce"] = max(best[protocol]["produce"], count / seconds)
            seconds = measure(lambda b=bootstrap, t=topic, c=conf: consume_confluent(
                b, t, count, c), None).seconds
            best[protocol]["consume"] = max(best[protocol]["consume"], count / seconds)
        rss = vm_hwm_mib(broker.pid)
    finally:
        broker.stop()
    return best, rss


def register(url: str, subject: str, schema: str) -> int:
    """Register an AVRO ``schema`` under ``subject`` with the registry at ``url``: its id."""
    request = urllib.request.Request(
        f"{url}/subjects/{subject}/versions", data=json.dumps({"schema": schema}).encode(),
        method="POST", headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as answer:
        return int(json.loads(answer.read())["id"])


def validation_cost(root: Path, count: int) -> dict[str, tuple[float, float]]:
    """Per mode ("plain", "validated"): the best produce rate of ``count`` 100 B records in
    Confluent's wire format and the least event loop user CPU microseconds per record."""
    broker = BrokerProcess(root / "validated",
                           {"schema.registry.listeners": "http://127.0.0.1:0"}).start()
    url = broker.schema_registry_url
    assert url is not None
    schema = json.dumps({"type": "record", "name": "Bench", "fields": [
        {"name": "payload", "type": "bytes"}]})
    best = {"plain": (0.0, float("inf")), "validated": (0.0, float("inf"))}
    try:
        value = b"\x00" + register(url, "bench-value", schema).to_bytes(4, "big") \
            + os.urandom(95)
        for run, mode in enumerate(("plain", "validated", "validated", "plain")):
            topic = f"bench-{mode}-{run}"
            validated = mode == "validated"
            create_topic(broker.bootstrap, topic,
                         {"confluent.value.schema.validation": "true"} if validated else {})
            if validated:  # the topic's subject (TopicNameStrategy) gets the same id
                register(url, f"{topic}-value", schema)
            loop_user = cpu_seconds(broker.pid, broker.pid, user_only=True)
            seconds = measure(lambda t=topic: produce_confluent(
                broker.bootstrap, t, value, count, TUNED["confluent-kafka"]["producer"]),
                None).seconds
            loop_user = cpu_seconds(broker.pid, broker.pid, user_only=True) - loop_user
            best[mode] = (max(best[mode][0], count / seconds),
                          min(best[mode][1], loop_user / count * 1e6))
        return best
    finally:
        broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--quick", action="store_true", help="small volumes (a smoke run)")
    parser.add_argument("--clients", default=",".join(CLIENTS),
                        help=f"comma-separated, of {', '.join(CLIENTS)}")
    parser.add_argument("--only", choices=("clients", "metrics", "security", "validated"),
                        help="run one part of the benchmark")
    args = parser.parse_args()
    parts = {args.only} if args.only else {"clients", "metrics", "security", "validated"}
    scale = 0.05 if args.quick else 1.0
    clients = [name.strip() for name in args.clients.split(",")]
    unknown = [name for name in clients if name not in CLIENTS]
    if unknown:
        parser.error(f"unknown client(s) {', '.join(unknown)}; choose from {', '.join(CLIENTS)}")
    root = Path(tempfile.mkdtemp(prefix="sparklog-bench-"))
    try:
        if "clients" in parts:
            client_table(args.bootstrap, root, clients, scale)
        if "metrics" in parts:
            metrics_table(root, scale)
        if "security" in parts:
            security_table(root, scale)
        if "validated" in parts:
            validated_table(root, scale)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


def client_table(given: str | None, root: Path, clients: list[str], scale: float) -> None:
    """Every client's rows against the socket ceiling, latency, peak RSS."""
    broker = None
    try:
        if given:
            bootstrap, pid = given, None
        else:
            broker = BrokerProcess(root / "data").start()
            bootstrap, pid = broker.bootstrap, broker.pid
        ceiling = socket_ceiling(int(2_000 * MB * scale))
        rows = []
        results: dict[tuple[str, str, int], float] = {}
        for name in clients:
            client = CLIENTS[name]
            for size in (100, 1024):
                count = max(1000, int(COUNTS[name][size] * scale))
                value = os.urandom(size)
                for setting in SETTINGS:
                    conf = TUNED[name] if setting == "tuned" else {"producer": {}, "consumer": {}}
                    topic = f"bench-{name}-{size}-{setting}-{int(time.time())}"
                    create_topic(bootstrap, topic)
                    produced = measure(lambda c=conf, t=topic, v=value, n=count, cl=client:
                                       cl.produce(bootstrap, t, v, n, c["producer"]), pid)
                    results[(name, setting, size)] = count / produced.seconds
                    rows.append(row(name, setting, f"produce {size} B", count, count * size,
                                    produced, ceiling))
                    nbytes: list[int] = []
                    consumed = measure(lambda c=conf, t=topic, n=count, cl=client, out=nbytes:
                                       out.append(cl.consume(bootstrap, t, n, c["consumer"])),
                                       pid)
                    rows.append(row(name, setting, f"consume {size} B", count, nbytes[0],
                                    consumed, ceiling))
                    print(*rows[-2], sep="  ", flush=True)
                    print(*rows[-1], sep="  ", flush=True)
        topic = f"bench-latency-{int(time.time())}"
        create_topic(bootstrap, topic)
        samples = latency(bootstrap, topic, 1000, 10 * max(scale, 0.3))
        p50 = statistics.median(samples)
        p99 = statistics.quantiles(samples, n=100)[98]
        print()
        print(f"loopback TCP ceiling: {ceiling:,.0f} MB/s; broker CPU s per 1M records and "
              "cores are the broker process's own (the client's are not counted)")
        print_table(["client", "settings", "measure", "records/s", "MB/s", "ratio to TCP",
                     "broker CPU s / 1M rec", "broker cores"], rows)
        print(f"end-to-end latency @1000 rec/s (confluent-kafka, linger.ms 0): p50 {p50:.2f} ms, "
              f"p99 {p99:.2f} ms")
        print(f"broker peak RSS: {vm_hwm_mib(pid):.0f} MiB; bench process peak RSS: "
              f"{peak_rss_mib():.0f} MiB")
        if ("confluent-kafka", "tuned", 100) in results:
            print(f"produce_100B_records_per_s={results[('confluent-kafka', 'tuned', 100)]:.0f}")
    finally:
        if broker is not None:
            broker.stop()


def metrics_table(root: Path, scale: float) -> None:
    rate, loop_cpu, listener_ms, scrapes = metrics_overhead(root, int(3_000_000 * scale))
    print_table(["metrics", "produce 100 B records/s", "event loop user us / record",
                 "ratio to off"],
                [Row("off", f"{rate['off']:,.0f}", f"{loop_cpu['off']:.3f}", ""),
                 Row(f"on ({scrapes} scrapes)", f"{rate['on']:,.0f}",
                     f"{loop_cpu['on']:.3f}", f"{rate['on'] / rate['off']:.3f}")])
    print(f"metrics cost: throughput {100 * (1 - rate['on'] / rate['off']):+.1f}%, event "
          f"loop user CPU per record {100 * (loop_cpu['on'] / loop_cpu['off'] - 1):+.1f}%, "
          f"listener threads {listener_ms:.0f} ms CPU per run at most")


def security_table(root: Path, scale: float) -> None:
    count = max(2000, int(400_000 * scale))
    best, rss = security_cost(root, count)
    rows = [Row(protocol, f"{best[protocol]['produce']:,.0f}",
                f"{best[protocol]['produce'] * 1024 / MB:,.1f}",
                f"{best[protocol]['produce'] / best['PLAINTEXT']['produce']:.3f}",
                f"{best[protocol]['consume']:,.0f}",
                f"{best[protocol]['consume'] * 1024 / MB:,.1f}",
                f"{best[protocol]['consume'] / best['PLAINTEXT']['consume']:.3f}")
            for protocol in best]
    print_table(["listener (confluent-kafka defaults, 1 KiB)", "produce rec/s", "MB/s",
                 "ratio", "consume rec/s", "MB/s", "ratio"], rows)
    print(f"sasl_ssl_ratio produce={rows[1][3]} consume={rows[1][6]} (target >= 0.5); broker "
          f"peak RSS {rss:.0f} MiB, bench process {peak_rss_mib():.0f} MiB")



def validated_table(root: Path, scale: float) -> None:
    best = validation_cost(root, max(20_000, int(2_000_000 * scale)))
    plain, validated = best["plain"], best["validated"]
    print_table(["topic (confluent-kafka tuned, 100 B)", "produce rec/s",
                 "event loop user us / record", "ratio to plain"],
                [Row("plain", f"{plain[0]:,.0f}", f"{plain[1]:.3f}", ""),
                 Row("confluent.value.schema.validation", f"{validated[0]:,.0f}",
                     f"{validated[1]:.3f}", f"{validated[0] / plain[0]:.3f}")])
    print(f"validated_produce_ratio={validated[0] / plain[0]:.3f}")


if __name__ == "__main__":
    sys.exit(main())
