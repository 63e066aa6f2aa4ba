"""Broker throughput and latency with confluent-kafka, against the loopback socket ceiling.

Usage: ``python bench/broker.py [--bootstrap HOST:PORT] [--quick]``

Starts its own broker (a child process on a temporary data directory) unless given one.
Measures, in one run:
- the ceiling: raw TCP over loopback (one sender, one receiver, 1 MiB writes);
- produce throughput for 100 B and 1 KiB records (records/s, MB/s; linger.ms 20,
  batch.size 1 MB, acks=all, idempotent);
- consume throughput of the same data from offset 0 (records/s, MB/s);
- end-to-end latency p50/p99 at a moderate rate (1000 records/s, linger.ms 0), unloaded;
- the cost of metrics: produce throughput (100 B records) of two fresh brokers, one without
  and one with ``metrics.listener``, scraped (``/metrics`` every 5 s) with the status page
  open (``/status.json`` every 2 s), in runs ordered off, on, on, off, best of two each;
  also the user CPU time per record of the broker's event loop thread (which a busy machine
  disturbs less than throughput) and the CPU time of the listener's threads (formatting
  scrapes);
- the broker's peak RSS (VmHWM).
Prints a table with absolute figures and the ratio to the socket ceiling (for the metrics
row: to the run without metrics); the last line is ``produce_100B_records_per_s=<n>``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import (  # bench/ is on sys.path when run
    Row,
    cpu_seconds,
    peak_rss_mib,
    print_table,
    vm_hwm_mib,
)
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sparklog.broker.process import BrokerProcess

MB = 1_000_000


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


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)


def produce(bootstrap: str, topic: str, size: int, count: int) -> float:
    """Seconds to produce ``count`` records of ``size`` bytes and get every ack."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 2_097_151,
        "enable.idempotence": True, "acks": "all",
    })
    value = os.urandom(size)
    send = producer.produce
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                send(topic, value)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.01)
    if producer.flush(120):
        raise SystemExit("produce benchmark: records left undelivered")
    return time.perf_counter() - start


def consume(bootstrap: str, topic: str, count: int) -> tuple[float, int]:
    """Seconds and bytes to read ``count`` records from offset 0."""
    # librdkafka stops prefetching once queued.min.messages (100k) are queued and then backs
    # off fetch.queue.backoff.ms (1 s): with small records that, not the broker, caps a
    # default consumer near 200k records/s. Throughput consumers raise it.
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
        "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 8_388_608,
        "queued.max.messages.kbytes": 1_048_576, "queued.min.messages": 1_000_000,
    })
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = nbytes = 0
    start = time.perf_counter()
    while seen < count:
        for message in consumer.consume(10_000, 5.0):
            value = message.value()
            if value is None:
                raise SystemExit(f"consume benchmark: {message.error()}")
            nbytes += len(value)
            seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed, nbytes


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
                rate[mode] = max(rate[mode], count / produce(broker.bootstrap, topic, 100, count))
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--quick", action="store_true", help="small volumes (a smoke run)")
    args = parser.parse_args()
    scale = 0.05 if args.quick else 1.0
    root = Path(tempfile.mkdtemp(prefix="sparklog-bench-"))
    broker = None
    try:
        if args.bootstrap:
            bootstrap = args.bootstrap
        else:
            broker = BrokerProcess(root / "data").start()
            bootstrap = broker.bootstrap
        ceiling = socket_ceiling(int(2_000 * MB * scale))
        rows = [Row("loopback TCP ceiling", "", f"{ceiling:,.0f} MB/s", "1.00", "")]
        results: dict[str, float] = {}
        for size, count in ((100, int(3_000_000 * scale)), (1024, int(600_000 * scale))):
            topic = f"bench-{size}-{int(time.time())}"
            create_topic(bootstrap, topic)
            elapsed = produce(bootstrap, topic, size, count)
            mbps = count * size / elapsed / MB
            results[f"produce_{size}"] = count / elapsed
            rows.append(Row(f"produce {size} B", f"{count / elapsed:,.0f} rec/s",
                            f"{mbps:,.1f} MB/s", f"{mbps / ceiling:.2f}",
                            f"{vm_hwm_mib(broker.pid if broker else None):.0f} MiB"))
            elapsed, nbytes = consume(bootstrap, topic, count)
            mbps = nbytes / elapsed / MB
            rows.append(Row(f"consume {size} B", f"{count / elapsed:,.0f} rec/s",
                            f"{mbps:,.1f} MB/s", f"{mbps / ceiling:.2f}",
                            f"{vm_hwm_mib(broker.pid if broker else None):.0f} MiB"))
        topic = f"bench-latency-{int(time.time())}"
        create_topic(bootstrap, topic)
        samples = latency(bootstrap, topic, 1000, 10 * max(scale, 0.3))
        p50 = statistics.median(samples)
        p99 = statistics.quantiles(samples, n=100)[98]
        rows.append(Row("end-to-end latency @1000 rec/s", f"p50 {p50:.2f} ms",
                        f"p99 {p99:.2f} ms", "", ""))
        rate, loop_cpu, listener_ms, scrapes = metrics_overhead(root, int(3_000_000 * scale))
        rows.append(Row("produce 100 B, metrics off", f"{rate['off']:,.0f} rec/s",
                        f"loop {loop_cpu['off']:.3f} user us/rec", "", ""))
        rows.append(Row(f"produce 100 B, metrics on ({scrapes} scrapes)",
                        f"{rate['on']:,.0f} rec/s", f"loop {loop_cpu['on']:.3f} user us/rec",
                        f"{rate['on'] / rate['off']:.3f}", ""))
        print_table(["measure", "records", "bytes", "ratio to TCP", "broker peak RSS"], rows)
        print(f"metrics cost: throughput {100 * (1 - rate['on'] / rate['off']):+.1f}%, event "
              f"loop user CPU per record {100 * (loop_cpu['on'] / loop_cpu['off'] - 1):+.1f}%, "
              f"listener threads {listener_ms:.0f} ms CPU per run at most")
        print(f"bench process peak RSS: {peak_rss_mib():.0f} MiB")
        print(f"produce_100B_records_per_s={results['produce_100']:.0f}")
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
