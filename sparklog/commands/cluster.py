"""``sparklog cluster``: a local cluster on loopback (a ZooKeeper and N brokers) for trying
replication out: ``up``, ``status``, ``start|stop|restart <broker id>``, ``restart
--rolling``, ``down``.

Invariants:
- ``up --brokers N --data-dir D`` starts a throwaway ZooKeeper (Debian's package, data in
  ``D/zookeeper``) and brokers ``0..N-1`` (``D/broker-<id>``, logs beside), each in a
  session of its own so they outlive the command, with ``zookeeper.connect`` under the
  chroot ``/sparklog``, ``default.replication.factor``, ``offsets.topic.replication.factor``
  and ``transaction.state.log.replication.factor`` min(N, 3) (so groups and transactions
  work on one or two brokers too), ``transaction.state.log.min.isr`` min(N, 2) and
  ``broker.rack`` from ``--racks`` (``--set`` overrides any of them); it records what it
  started (each broker's id, port and config) in ``D/cluster.json`` and prints the
  bootstrap list as its last stdout line. A failure stops whatever it had started.
- A broker is found by its data directory, not by a remembered pid: the process holding
  ``D/broker-<id>/.lock`` (``storage.dir_lock.lock_holder``) is broker ``id``, however it
  was started (by ``up``, ``start``, or by hand with ``sparklog broker --data-dir``);
  ZooKeeper is the recorded pid only while its command line names ``D/zookeeper``.
- ``D`` holding a running cluster is refused by ``up``; ``down`` stops every broker found
  (``D/broker-*``; SIGTERM: controlled shutdowns) then ZooKeeper, waits for each to exit,
  and removes ``cluster.json`` (the data stays, and ``up`` starts the same cluster again).
- ``stop <id>`` stops one broker (SIGTERM, SIGKILL after ``STOP_TIMEOUT_S``); ``start <id>``
  starts it again with its recorded port and config, refused while it runs; ``restart
  <id>`` is both. ``restart --rolling`` restarts every broker in turn, the controller last
  (as Kafka's rolling restarts do), and before each one and after the last waits until
  every partition has a leader and its full replica set in the ISR (``--timeout``, else it
  stops there with exit code 1 naming the partitions).
- ``status`` prints one line per process (running or not, with the pid found) and the
  bootstrap list; exit code 1 when something is not running.
- Errors are one stderr line, ``sparklog cluster: <cause>``, and exit code 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

from sparklog.broker.process import BrokerProcess
from sparklog.client.errors import KafkaClientError
from sparklog.client.watch import connected_admin
from sparklog.cluster.zookeeper_server import ZooKeeperError, ZooKeeperServer
from sparklog.storage.dir_lock import lock_holder

STATE_FILE = "cluster.json"
CHROOT = "/sparklog"
STOP_TIMEOUT_S = 60.0
ISR_TIMEOUT_S = 300.0


class ClusterToolError(Exception):
    """One line for stderr."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    cluster = subparsers.add_parser("cluster", help="a local cluster: ZooKeeper and N brokers",
                                    description=__doc__.split("\n\n")[0])
    actions = cluster.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start ZooKeeper and the brokers")
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument("--racks", help="broker.rack of each broker in turn, e.g. a,b,c")
    up.add_argument("--data-dir", type=Path, required=True)
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker config for every broker (repeatable)")
    up.set_defaults(func=_run(_up))
    for name, action, text in (("status", _status, "show what runs"),
                               ("down", _down, "stop the brokers, then ZooKeeper"),
                               ("start", _start, "start one broker again"),
                               ("stop", _stop, "stop one broker"),
                               ("restart", _restart, "restart one broker, or all in turn")):
        sub = actions.add_parser(name, help=text)
        sub.add_argument("--data-dir", type=Path, required=True)
        if name in ("start", "stop", "restart"):
            sub.add_argument("broker_id", type=int, nargs="?" if name == "restart" else None,
                             metavar="BROKER_ID", help="the broker's id (broker.id)")
        if name == "restart":
            sub.add_argument("--rolling", action="store_true",
                             help="every broker in turn, the controller last, waiting for "
                                  "full ISRs between two")
            sub.add_argument("--timeout", type=float, default=ISR_TIMEOUT_S, metavar="SECONDS",
                             help=f"how long to wait for full ISRs (default {ISR_TIMEOUT_S:g})")
        sub.set_defaults(func=_run(action))


def _run(action: object) -> object:
    def run(args: argparse.Namespace) -> int:
        try:
            return action(args)  # type: ignore[operator]
        except (ClusterToolError, ZooKeeperError, KafkaClientError, RuntimeError,
                OSError) as exc:
            print(f"sparklog cluster: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 1
    return run


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return not stat.parent.exists()  # no /proc here: trust kill(0)


def _read_state(data_dir: Path) -> dict | None:
    path = data_dir / STATE_FILE
    return json.loads(path.read_text()) if path.exists() else None


def _state(data_dir: Path) -> dict:
    state = _read_state(data_dir)
    if state is None:
        raise ClusterToolError(f"no cluster in {data_dir} (no {STATE_FILE})")
    return state


def _write_state(data_dir: Path, state: dict) -> None:
    (data_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def _broker_dir(data_dir: Path, broker_id: int) -> Path:
    return data_dir / f"broker-{broker_id}"


def _broker_pid(data_dir: Path, broker_id: int) -> int | None:
    """The running broker ``broker_id`` of the cluster in ``data_dir`` (its data directory's
    lock holder), or None."""
    return lock_holder(_broker_dir(data_dir, broker_id))


def _zookeeper_pid(data_dir: Path, state: dict) -> int | None:
    """The recorded ZooKeeper, if that pid still runs it (not a process that reused it)."""
    pid = state["zookeeper"]["pid"]
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return pid if _alive(pid) else None
    wanted = str(data_dir / "zookeeper" / "data").encode()
    return pid if wanted in command and _alive(pid) else None


def _entry(state: dict, broker_id: int) -> dict:
    for entry in state["brokers"]:
        if entry["id"] == broker_id:
            return entry
    known = ", ".join(str(b["id"]) for b in state["brokers"])
    raise ClusterToolError(f"no broker {broker_id} in this cluster (brokers: {known})")


def _terminate(pid: int) -> None:
    """SIGTERM (a controlled shutdown), SIGKILL after ``STOP_TIMEOUT_S``; waits for the exit."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.05)


def _bootstrap(state: dict) -> str:
    return ",".join(f"127.0.0.1:{b['port']}" for b in state["brokers"])


def _up(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise ClusterToolError(f"--brokers {args.brokers}: at least 1")
    racks = args.racks.split(",") if args.racks else []
    if racks and len(racks) != args.brokers:
        raise ClusterToolError(f"--racks names {len(racks)} racks for {args.brokers} brokers")
    data_dir: Path = args.data_dir.resolve()
    state = _read_state(data_dir)
    if state is not None and (_zookeeper_pid(data_dir, state) is not None or any(
            _broker_pid(data_dir, b["id"]) is not None for b in state["brokers"])):
        raise ClusterToolError(f"a cluster already runs in {data_dir}: sparklog cluster down "
                               f"--data-dir {args.data_dir}")
    data_dir.mkdir(parents=True, exist_ok=True)
    previous = {b["id"]: b["port"] for b in state["brokers"]} if state else {}
    zookeeper = ZooKeeperServer(data_dir / "zookeeper",
                                state["zookeeper"]["port"] if state else 0)
    zookeeper.start(detached=True)
    started: list[BrokerProcess] = []
    try:
        for i in range(args.brokers):
            factor = str(min(args.brokers, 3))
            config = {"broker.id": str(i), "zookeeper.connect": zookeeper.connect + CHROOT,
                      "default.replication.factor": factor,
                      "offsets.topic.replication.factor": factor,
                      "transaction.state.log.replication.factor": factor,
                      "transaction.state.log.min.isr": str(min(args.brokers, 2)),
                      **dict(item.split("=", 1) for item in args.set)}
            if racks:
                config["broker.rack"] = racks[i]
            broker = BrokerProcess(_broker_dir(data_dir, i), config,
                                   port=previous.get(i, 0), detached=True)
            started.append(broker.start(timeout=60))
    except BaseException:
        for broker in started:
            broker.stop()
        zookeeper.stop()
        raise
    state = {"zookeeper": {"pid": zookeeper.pid, "port": zookeeper.port},
             "brokers": [{"id": i, "pid": b.pid, "port": b.port, "config": b.config}
                         for i, b in enumerate(started)]}
    _write_state(data_dir, state)
    print(f"ZooKeeper on {zookeeper.connect}, chroot {CHROOT}")
    for i, broker in enumerate(started):
        print(f"broker {i} on {broker.bootstrap}" + (f", rack {racks[i]}" if racks else ""))
    print(_bootstrap(state))
    return 0


def _status(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir.resolve()
    state = _state(data_dir)
    ok = True
    zk = state["zookeeper"]
    for name, pid in [(f"zookeeper on 127.0.0.1:{zk['port']}", _zookeeper_pid(data_dir, state))
                      ] + [(f"broker {b['id']} on 127.0.0.1:{b['port']}",
                            _broker_pid(data_dir, b["id"])) for b in state["brokers"]]:
        ok &= pid is not None
        print(f"{name}: " + ("not running" if pid is None else f"running (pid {pid})"))
    print(_bootstrap(state))
    return 0 if ok else 1


def _down(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir.resolve()
    state = _state(data_dir)
    ids = {b["id"] for b in state["brokers"]} | {
        int(d.name.removeprefix("broker-")) for d in data_dir.glob("broker-*")
        if d.is_dir() and d.name.removeprefix("broker-").isdigit()}
    stopped = 0
    for broker_id in sorted(ids):  # brokers first
        pid = _broker_pid(data_dir, broker_id)
        if pid is not None:
            _terminate(pid)
            stopped += 1
    zookeeper = _zookeeper_pid(data_dir, state)
    if zookeeper is not None:
        _terminate(zookeeper)
    (data_dir / STATE_FILE).unlink()
    print(f"stopped {stopped} broker(s)" + (" and ZooKeeper" if zookeeper else ""))
    return 0


def _stop_broker(data_dir: Path, broker_id: int) -> bool:
    """Stop broker ``broker_id`` if it runs; whether it did."""
    pid = _broker_pid(data_dir, broker_id)
    if pid is None:
        return False
    _terminate(pid)
    print(f"broker {broker_id} stopped (pid {pid})")
    return True


def _start_broker(data_dir: Path, state: dict, broker_id: int) -> None:
    entry = _entry(state, broker_id)
    running = _broker_pid(data_dir, broker_id)
    if running is not None:
        raise ClusterToolError(f"broker {broker_id} already runs (pid {running})")
    if "config" not in entry:
        raise ClusterToolError(f"{STATE_FILE} has no config for broker {broker_id} (written by "
                               "an older sparklog): run cluster down, then up")
    broker = BrokerProcess(_broker_dir(data_dir, broker_id), entry["config"],
                           port=entry["port"], detached=True).start(timeout=60)
    entry["pid"] = broker.pid
    _write_state(data_dir, state)
    print(f"broker {broker_id} started on {broker.bootstrap} (pid {broker.pid})")


def _stop(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir.resolve()
    _entry(_state(data_dir), args.broker_id)
    if not _stop_broker(data_dir, args.broker_id):
        raise ClusterToolError(f"broker {args.broker_id} is not running")
    return 0


def _start(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir.resolve()
    _start_broker(data_dir, _state(data_dir), args.broker_id)
    return 0


def _restart(args: argparse.Namespace) -> int:
    data_dir: Path = args.data_dir.resolve()
    state = _state(data_dir)
    if (args.broker_id is None) == (not args.rolling):
        raise ClusterToolError("restart takes a BROKER_ID or --rolling (one of them)")
    if not args.rolling:
        _entry(state, args.broker_id)
        _stop_broker(data_dir, args.broker_id)
        _start_broker(data_dir, state, args.broker_id)
        return 0
    ids = sorted(b["id"] for b in state["brokers"])
    controller = _wait_for_full_isr(_bootstrap(state), ids, args.timeout)
    for broker_id in sorted(ids, key=lambda i: i == controller):  # the controller last
        _stop_broker(data_dir, broker_id)
        _start_broker(data_dir, state, broker_id)
        _wait_for_full_isr(_bootstrap(state), ids, args.timeout)
    print(f"rolling restart of {len(ids)} broker(s) done, every ISR full")
    return 0


def _wait_for_full_isr(bootstrap: str, ids: list[int], timeout: float) -> int:
    """Wait until every broker of ``ids`` is in the cluster and every partition has a
    leader and all its replicas in the ISR; the controller's id."""
    deadline = time.monotonic() + timeout
    admin = connected_admin({"bootstrap.servers": bootstrap}, timeout)
    started = time.monotonic()
    while True:
        metadata = admin.list_topics(timeout=max(1.0, deadline - time.monotonic()))
        lagging = [f"{name}-{p.id}" for name, topic in sorted(metadata.topics.items())
                   for p in topic.partitions.values()
                   if p.leader < 0 or sorted(p.isrs) != sorted(p.replicas)]
        missing = sorted(set(ids) - set(metadata.brokers))
        if not lagging and not missing:
            print(f"every ISR full ({time.monotonic() - started:.1f} s)")
            return metadata.controller_id
        if time.monotonic() >= deadline:
            why = (f"brokers {', '.join(map(str, missing))} not in the cluster"
                   if missing else "partitions without a full ISR: " + ", ".join(lagging[:10])
                   + (" ..." if len(lagging) > 10 else ""))
            raise ClusterToolError(f"still waiting after {timeout:g} s: {why}")
        time.sleep(0.5)
