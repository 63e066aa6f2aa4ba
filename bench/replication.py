"""Replication: acks=all throughput with replication factor 3 against factor 1, end-to-end
latency on a replicated partition, and failover time.

Usage: ``python bench/replication.py [--quick] [--records N]``

Starts its own throwaway ZooKeeper and three brokers (child processes on a temporary
directory, ``zookeeper.session.timeout.ms`` 6000) and measures, in one run:
- produce throughput of N 1 KiB records with confluent-kafka's DEFAULT producer settings
  (acks all, linger.ms 5) into a one-partition topic of replication factor 1, then of
  factor 3 with ``min.insync.replicas`` 2 (records/s, MB/s), ``ROUNDS`` times each; the
  ratio RF3 / RF1 (target >= 0.5) is the cost of waiting for two followers; with each, the
  CPU time the producer (this process), the leader and the two followers spent per 1,000
  records and the share of the machine's cores they kept busy (the median of each figure
  over the runs): where the cores are all busy, the ratio is that of the CPU time per
  record, whatever the waiting costs;
- end-to-end latency p50/p99 (produce call to consumer delivery) at ``LATENCY_RATE``
  records/s on the replicated topic, linger.ms 0 (one request per record): a consumer sees a
  record only once the high watermark passed it, and a broker answers a connection's
  requests one at a time (as Kafka does), so each acks=all request waits for the one before
  it to be replicated (about 1 ms here): from about 400 records/s on this machine the
  requests queue up;
- failover time: the leader of the replicated partition is SIGKILLed, and the time from the
  kill to the first acknowledged produce (a record produced right after the kill) is
  measured, ``FAILOVERS`` times (the victim restarted and back in the ISR in between), each
  kill at a random point of the clients' one-second metadata scans (``KILL_PAUSE_S``):
  median and max against the target ``zookeeper.session.timeout.ms`` + 1 s (the controller
  only notices a dead broker when its session expires, and ZooKeeper checks expiries once
  per tick, 500 ms here), with confluent-kafka's and kafka-python's producers at their
  defaults (``FAILOVER_CLIENTS``);
- the peak RSS (VmHWM) of each broker and of this process.
The last line is ``rf3_to_rf1_throughput_ratio=<r>``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass
from pathlib import Path

from _common import Row, cpu_seconds, peak_rss_mib, print_table, scratch_dir, vm_hwm_mib
from broker import latency  # bench/ is on sys.path when run
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

from sparklog.broker.process import BrokerProcess
from sparklog.cluster.zookeeper_server import ZooKeeperServer

SESSION_TIMEOUT_MS = 6000
LATENCY_RATE = 200
FAILOVERS = 5
ROUNDS = 3
"""Throughput runs per replication factor, alternating RF1 and RF3 (the machine's share of
the two cores and its write-back move between runs); the median run of each counts."""


def confluent_sender(bootstrap: str, topic: str) -> Callable[[bytes], None]:
    """Produce one record with confluent-kafka's defaults (linger.ms 0), until acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})

    def send(value: bytes) -> None:
        producer.produce(topic, value)
        if producer.flush(120):
            raise SystemExit("confluent-kafka: no produce was acknowledged")
    return send


def kafka_python_sender(bootstrap: str, topic: str) -> Callable[[bytes], None]:
    """The same with kafka-python's defaults (acks all, idempotent, retries until
    delivery.timeout.ms)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), linger_ms=0)

    def send(value: bytes) -> None:
        producer.send(topic, value).get(timeout=120)
    return send


FAILOVER_CLIENTS = {"confluent-kafka": confluent_sender, "kafka-python": kafka_python_sender}
"""librdkafka looks for a new leader of a partition whose broker is down on a fixed
one-second scan of its topics, so its figure comes up to a second after the election (and
a second more before brokers listed a departed broker a little longer: librdkafka undid
its move to the new leader when the same answer dropped the old one, ``departures.py``);
kafka-python 3 asks for metadata again each time a reconnection to the dead broker fails,
and those come with an exponential backoff (50 ms doubling, 20 % jitter, up to
``reconnect_backoff_max_ms`` 30 s): the attempt near 6.4 s finds the new leader when the
election (about 6.2 s after the kill) came before it, else the next one near 12.8 s does,
so its figures are either close to the broker's own failover or about twice it."""
KILL_PAUSE_S = 1.0
"""The kill comes after a random pause up to this long once the producer is up. A failure
does not come at a fixed time after a client started; without the pause the kill's fixed
distance from the producer's creation locked the phase of librdkafka's one-second scan,
and every confluent-kafka figure was the election's time rounded up to the same point of
the scan (7.01 s five times out of five) instead of a sample of it."""
RECORD = b"x" * 1024
MB = 1_000_000


def create(bootstrap: str, topic: str, factor: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"min.insync.replicas": "2"} if factor > 1 else {}
    admin.create_topics([NewTopic(topic, 1, factor, config=configs)])[topic].result(60)


def throughput(bootstrap: str, topic: str, count: int) -> float:
    """Records/s of ``count`` 1 KiB records, the producer's defaults, until all acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap})
    failed: list[str] = []
    start = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, RECORD, on_delivery=lambda e, _m: e and failed.append(e))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) or failed:
        raise SystemExit(f"produce failed: {failed[:3]}")
    return count / (time.perf_counter() - start)


@dataclass(frozen=True)
class Run:
    """One throughput run: records/s, and where the CPU went (milliseconds of CPU per
    1,000 records in this process, the producer, and in the brokers) and the share of the
    machine's cores those took."""
    rate: float
    client_ms: float
    leader_ms: float
    followers_ms: float
    busy: float


def measured_throughput(brokers: list[BrokerProcess], topic: str, count: int) -> Run:
    """``throughput`` with the CPU time the producer, the leader and the followers spent."""
    bootstrap = ",".join(b.bootstrap for b in brokers)
    leader = leader_of(bootstrap, topic)
    processes = [os.getpid(), brokers[leader].pid] + [
        b.pid for i, b in enumerate(brokers) if i != leader]
    before = [cpu_seconds(pid) for pid in processes]
    start = time.perf_counter()
    rate = throughput(bootstrap, topic, count)
    wall = time.perf_counter() - start
    spent = [cpu_seconds(pid) - was for pid, was in zip(processes, before, strict=True)]
    per_thousand = 1000 * 1000 / count
    return Run(rate, spent[0] * per_thousand, spent[1] * per_thousand,
               sum(spent[2:]) * per_thousand, sum(spent) / wall / (os.cpu_count() or 1))


def leader_of(bootstrap: str, topic: str) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return metadata.topics[topic].partitions[0].leader


def failover_seconds(brokers: list[BrokerProcess], topic: str,
                     sender: Callable[[str, str], Callable[[bytes], None]]) -> float:
    """One failover: SIGKILL the leader, time the first acknowledged produce after it;
    then the victim restarts and rejoins the ISR before the next one."""
    bootstrap = ",".join(b.bootstrap for b in brokers)
    send = sender(bootstrap, topic)
    send(b"warm-up")
    victim = brokers[leader_of(bootstrap, topic)]
    time.sleep(random.uniform(0, KILL_PAUSE_S))
    killed = time.perf_counter()
    victim.kill()
    send(b"after the kill")
    elapsed = time.perf_counter() - killed
    victim.start(timeout=60)
    deadline = time.monotonic() + 120
    while len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
              .topics[topic].partitions[0].isrs) < len(brokers):
        if time.monotonic() > deadline:
            raise SystemExit("the restarted broker did not rejoin the ISR")
        time.sleep(0.2)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="20,000 records, short latency, one failover")
    parser.add_argument("--records", type=int, help="records per throughput run")
    args = parser.parse_args()
    count = args.records or (20_000 if args.quick else 100_000)
    with scratch_dir(None, "sparklog-bench-replication-") as root:
        zookeeper = ZooKeeperServer(Path(root) / "zookeeper").start()
        brokers = [BrokerProcess(Path(root) / f"broker-{i}", {
            "broker.id": str(i), "zookeeper.connect": f"{zookeeper.connect}/bench",
            "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1",
        }) for i in range(3)]
        try:
            for broker in brokers:
                broker.start(timeout=60)
            bootstrap = ",".join(b.bootstrap for b in brokers)
            runs: dict[int, list[Run]] = {1: [], 3: []}
            for factor in runs:
                create(bootstrap, f"bench-rf{factor}", factor)
            for _ in range(ROUNDS):
                for factor, done in runs.items():
                    os.sync()  # no write-back of the previous run's records under this one
                    done.append(measured_throughput(brokers, f"bench-rf{factor}", count))
            median = {factor: Run(*(statistics.median(field) for field in zip(*(
                astuple(run) for run in done), strict=True))) for factor, done in runs.items()}
            rate = {factor: run.rate for factor, run in median.items()}
            rows = [Row(f"produce 1 KiB acks=all RF{factor}", f"{run.rate:,.0f}",
                        f"{run.rate * len(RECORD) / MB:,.1f}", f"{run.rate / rate[1]:.3f}",
                        f"{run.client_ms:.2f} / {run.leader_ms:.2f} / {run.followers_ms:.2f}",
                        f"{run.busy:.0%}") for factor, run in median.items()]
            print_table(["measurement (confluent-kafka defaults)", "records/s", "MB/s",
                         "ratio to RF1", "CPU ms per 1,000: producer / leader / followers",
                         "cores busy"], rows)
            create(bootstrap, "bench-latency-rf3", 3)
            samples = sorted(latency(bootstrap, "bench-latency-rf3", LATENCY_RATE,
                                     3 if args.quick else 10))
            p50 = samples[len(samples) // 2]
            p99 = samples[int(len(samples) * 0.99)]
            print(f"end-to-end latency @{LATENCY_RATE} rec/s, RF3 (linger.ms 0): p50 {p50:.2f} ms, "
                  f"p99 {p99:.2f} ms")
            target = SESSION_TIMEOUT_MS / 1000 + 1
            kills = 1 if args.quick else FAILOVERS
            for label, sender in FAILOVER_CLIENTS.items():
                failovers = [failover_seconds(brokers, "bench-rf3", sender)
                             for _ in range(kills)]
                failover = statistics.median(failovers)
                print(f"failover (leader SIGKILL to first acknowledged produce), {label} "
                      "defaults, "
                      f"{kills} kills: median {failover:.2f} s, max {max(failovers):.2f} s "
                      f"({', '.join(f'{f:.2f}' for f in failovers)}); target {target:.1f} s "
                      f"(median {failover / target:.2f} of it)")
            print("peak RSS: " + ", ".join(f"broker {i} {vm_hwm_mib(b.pid):.0f} MiB"
                                            for i, b in enumerate(brokers) if b.running)
                  + f", this process {peak_rss_mib():.0f} MiB")
            print(f"rf3_to_rf1_throughput_ratio={rate[3] / rate[1]:.3f}")
        finally:
            for broker in brokers:
                broker.stop()
            zookeeper.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
