"""``make demo``: a topic of JSON events streamed exactly once into a Delta table.

1. Start ``sparklog broker`` on a temporary directory (127.0.0.1, any free port), with its
   metrics and status page (``metrics.listener``, any free port): the URL is printed, and
   the page can be watched while the demo runs; and its schema registry
   (``schema.registry.listeners``, any free port), whose URL is printed for
   ``sparklog schemas --schema-registry-url URL ...`` and Confluent's clients.
2. Produce 10,000 JSON events to topic ``events`` (3 partitions) with confluent-kafka; every
   50th one is malformed (truncated JSON, not an object, no id, a non-numeric amount).
3. Run ``python -m sparklog.jobs.stream_to_delta --trigger availableNow`` as a child process
   (with its defaults from the package): good events go to a Delta table, malformed ones to
   the dead-letter topic ``events.dlq``.
4. Print the counts (produced, rows in Delta, dead letters by error), a few rows, and the
   records in per topic as the broker's metrics endpoint reports them.

``python -m sparklog.demo produce --bootstrap HOST:PORT [--topic T] [--count N]`` only does
step 2 against a running broker (docker-compose uses it).

Invariants:
- Everything lives in a temporary directory that is removed at the end; the process exits
  non-zero unless every good event is in the table once and every malformed one is in the
  dead-letter topic once.
- It needs only the installed package (no repository checkout): the broker and the job are
  modules run with this interpreter, which Spark's Python workers run too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from sparklog.broker.process import BrokerProcess
from sparklog.client.admin import ensure_topics
from sparklog.sample_events import SCHEMA, produce_events, read_topic

EVENTS = 10_000
BAD_EVERY = 50  # 2% malformed
METRICS = {"metrics.listener": "http://127.0.0.1:0",
           "schema.registry.listeners": "http://127.0.0.1:0"}


def _produce(bootstrap: str, topic: str, count: int) -> tuple[int, int]:
    ensure_topics(bootstrap, {topic: 3})
    started = time.monotonic()
    produced = produce_events(bootstrap, topic, count, bad_every=BAD_EVERY)
    print(f"produced {count} events to {topic} ({produced.bad} malformed) in "
          f"{time.monotonic() - started:.1f}s")
    return produced.good, produced.bad


def _stream(bootstrap: str, root: Path) -> None:
    command = [sys.executable, "-m", "sparklog.jobs.stream_to_delta",
               "--bootstrap", bootstrap, "--topic", "events", "--table", str(root / "table"),
               "--checkpoint", str(root / "checkpoint"), "--schema", SCHEMA,
               "--trigger", "availableNow"]
    print("running python -m sparklog.jobs.stream_to_delta --topic events --trigger "
          f"availableNow --schema '{SCHEMA}' (Spark starts in ~15 s)")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()
    output = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env) as job:
        assert job.stdout is not None
        for line in job.stdout:
            output.append(line)
            if " sparklog." in line:  # the job's own log lines, not Spark's
                print("   " + line.rstrip().split(" ", 2)[-1])
    if job.returncode != 0:
        raise SystemExit("the job failed:\n" + "".join(output[-40:]))
    print(f"job finished in {time.monotonic() - started:.1f}s")


def _report(bootstrap: str, root: Path, good: int, bad: int) -> None:
    from deltalake import DeltaTable

    table = DeltaTable(str(root / "table")).to_pyarrow_table()
    ids = table.column("id").to_pylist()
    dead = read_topic(bootstrap, "events.dlq")
    errors = Counter(dict(headers).get("dlq.error.class", b"?").decode()
                     for *_, headers in dead)
    print(f"Delta table: {len(ids)} rows, {len(set(ids))} distinct ids (expected {good})")
    print(f"dead-letter topic events.dlq: {len(dead)} records (expected {bad}): "
          + ", ".join(f"{name} {n}" for name, n in sorted(errors.items())))
    rows = sorted(table.to_pylist(), key=lambda r: r["id"])[:5]
    for row in rows:
        print("   " + ", ".join(f"{k}={v}" for k, v in row.items()))
    if len(ids) != good or len(set(ids)) != good or len(dead) != bad:
        raise SystemExit("counts do not match")


def _metrics(metrics_url: str) -> None:
    with urllib.request.urlopen(metrics_url + "metrics", timeout=30) as response:
        families = text_string_to_metric_families(response.read().decode())
    records_in = {s.labels["topic"]: int(s.value) for f in families
                  if f.name == "kafka_server_brokertopicmetrics_messagesin"
                  for s in f.samples if s.labels.get("topic", "").startswith("events")}
    print("metrics: records in " + ", ".join(f"{topic} {count}"
                                             for topic, count in sorted(records_in.items())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("``", ""))
    sub = parser.add_subparsers(dest="command")
    produce = sub.add_parser("produce", help="only produce sample events to a running broker")
    produce.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", required=True)
    produce.add_argument("--topic", default="events")
    produce.add_argument("--count", type=int, default=EVENTS)
    args = parser.parse_args(argv)
    if args.command == "produce":
        _produce(args.bootstrap, args.topic, args.count)
        return 0

    root = Path(tempfile.mkdtemp(prefix="sparklog-demo-"))
    try:
        with BrokerProcess(root / "broker", METRICS) as broker:
            print(f"== broker listening on {broker.bootstrap} (data in {root / 'broker'})")
            assert broker.metrics_url is not None
            print(f"== status page and Prometheus metrics (/metrics) on {broker.metrics_url} "
                  "while the demo runs")
            print(f"== schema registry (Confluent's REST API) on {broker.schema_registry_url}")
            good, bad = _produce(broker.bootstrap, "events", EVENTS)
            print("== streaming into Delta, exactly once")
            _stream(broker.bootstrap, root)
            print("== results")
            _report(broker.bootstrap, root, good, bad)
            _metrics(broker.metrics_url)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("demo finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
