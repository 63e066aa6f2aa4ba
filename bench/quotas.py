"""The cost of client quota enforcement on the produce path.

Usage: ``python bench/quotas.py [--quick]``

Starts its own broker (a child process on a temporary data directory) and measures, in one
run, confluent-kafka's tuned producer (100 B records, one partition, ``broker.TUNED``):
- ``none``: no quota set anywhere: the path every broker takes by default (each request
  asks whether some entity sets its key: one set lookup each for Produce and the request
  quota);
- ``other client``: quotas set for another client id (``producer_byte_rate`` and
  ``request_percentage``): every request looks up its client's quota (cached per quota
  generation), finds none and goes on;
- ``this client, unreached``: quotas for this client id far above what it sends: every
  request is measured (the rate's samples, the handler's loop time through ``BusyTime``)
  and never throttled: the whole enforcement path.
Runs go none, other, this, this, other, none, best of two each, so that what a run leaves to
the next weighs on all alike. Prints records/s, the ratio to ``none``, the user CPU
microseconds per record of the broker's event loop thread (steadier than throughput on a
shared machine), and the in-process cost of the no-quota check against the broker's CPU
per request, then the broker's and this process's peak RSS.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import timeit
from pathlib import Path

from _common import Row, cpu_seconds, peak_rss_mib, print_table, vm_hwm_mib
from broker import TUNED, create_topic, measure, produce_confluent  # bench/ is on sys.path

from sparklog.broker.process import BrokerProcess
from sparklog.broker.quotas import QuotaManager
from sparklog.broker.security.broker_security import BrokerSecurity
from sparklog.client.client_quotas import alter_client_quotas
from sparklog.client.kafka import KafkaClient
from sparklog.client.settings import ClientConfig, RetryPolicy, parse_bootstrap

CLIENT_ID = "bench-producer"
QUOTAS = {"producer_byte_rate": 10.0**12, "request_percentage": 10.0**6}
MODES = ("none", "other client", "this client, unreached")
ORDER = ("none", "other client", "this client, unreached", "this client, unreached",
         "other client", "none")


def set_quotas(bootstrap: str, mode: str) -> None:
    """Only the quotas of ``mode`` are set on the broker."""
    wanted = {"other client": "someone-else", "this client, unreached": CLIENT_ID}.get(mode)
    with KafkaClient(ClientConfig(parse_bootstrap(bootstrap, "bootstrap")),
                     RetryPolicy(30.0, 0.1)) as client:
        for client_id in ("someone-else", CLIENT_ID):
            alter_client_quotas(client, {"client-id": client_id}, {
                key: value if client_id == wanted else None for key, value in QUOTAS.items()})


def fast_path_ns() -> float:
    """Nanoseconds the no-quota checks of one Produce take in process (its own and the
    request quota's), the broker's state as a broker without quotas has it."""
    with tempfile.TemporaryDirectory() as directory:
        quotas = QuotaManager(BrokerSecurity({}, Path(directory)), {})
        rounds = 1_000_000
        seconds = timeit.timeit(lambda: quotas.enabled("producer_byte_rate")
                                or quotas.enabled("request_percentage"), number=rounds)
        empty = timeit.timeit(lambda: False, number=rounds)
    return (seconds - empty) / rounds * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the records")
    args = parser.parse_args()
    count = 300_000 if args.quick else 3_000_000
    value = os.urandom(100)
    conf = {**TUNED["confluent-kafka"]["producer"], "client.id": CLIENT_ID}
    rate = dict.fromkeys(MODES, 0.0)
    loop_us = dict.fromkeys(MODES, float("inf"))
    requests = 0.0
    with tempfile.TemporaryDirectory(prefix="sparklog-bench-quotas-") as root:
        broker = BrokerProcess(Path(root) / "broker").start()
        try:
            for run, mode in enumerate(ORDER):
                set_quotas(broker.bootstrap, mode)
                topic = f"bench-quotas-{run}"
                create_topic(broker.bootstrap, topic)
                before = cpu_seconds(broker.pid, broker.pid, user_only=True)
                seconds = measure(lambda t=topic: produce_confluent(
                    broker.bootstrap, t, value, count, conf), broker.pid).seconds
                used = cpu_seconds(broker.pid, broker.pid, user_only=True) - before
                rate[mode] = max(rate[mode], count / seconds)
                loop_us[mode] = min(loop_us[mode], used / count * 1e6)
                requests = max(requests, count / seconds)
            rss = vm_hwm_mib(broker.pid)
        finally:
            broker.stop()
    print_table(["quotas (confluent-kafka tuned, 100 B)", "produce records/s", "MB/s",
                 "ratio to none", "event loop user us / record"],
                [Row(mode, f"{rate[mode]:,.0f}", f"{rate[mode] * 100 / 1e6:,.1f}",
                     f"{rate[mode] / rate['none']:.3f}", f"{loop_us[mode]:.3f}")
                 for mode in MODES])
    check = fast_path_ns()
    print(f"no-quota check: {check:.0f} ns per Produce request in process, against "
          f"{loop_us['none'] * 1000:.0f} ns of broker loop CPU per record, and a tuned "
          f"Produce request carries up to 1 MB (thousands of 100 B records)")
    print(f"quota_ratio other={rate['other client'] / rate['none']:.3f} "
          f"unreached={rate['this client, unreached'] / rate['none']:.3f}; broker peak RSS "
          f"{rss:.0f} MiB, bench process {peak_rss_mib():.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
