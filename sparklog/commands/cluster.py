"""``sparklog cluster``: a local cluster on loopback (a ZooKeeper and N brokers) for trying
replication out: ``up``, ``status``, ``down``.

Invariants:
- ``up --brokers N --data-dir D`` starts a throwaway ZooKeeper (Debian's package, data in
  ``D/zookeeper``) and brokers ``0..N-1`` (``D/broker-<id>``, logs beside), each in a
  session of its own so they outlive the command, with ``zookeeper.connect`` under the
  chroot ``/sparklog``, ``default.replication.factor``, ``offsets.topic.replication.factor``
  and ``transaction.state.log.replication.factor`` min(N, 3) (so groups and transactions
  work on one or two brokers too), ``transaction.state.log.min.isr`` min(N, 2) and
  ``broker.rack`` from ``--racks`` (``--set`` overrides any of them); it records what it
  started in ``D/cluster.json`` and prints the bootstrap list as its last stdout line. A
  failure stops whatever it had started.
- ``D`` holding a running cluster is refused by ``up``; ``down`` stops the brokers
  (SIGTERM: controlled shutdowns) then ZooKeeper, waits for each to exit, and removes
  ``cluster.json`` (the data stays, and ``up`` starts the same cluster again).
- ``status`` prints one line per process (running or not) and the bootstrap list; exit
  code 1 when something is not running.
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
from sparklog.cluster.zookeeper_server import ZooKeeperError, ZooKeeperServer

STATE_FILE = "cluster.json"
CHROOT = "/sparklog"


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
                               ("down", _down, "stop the brokers, then ZooKeeper")):
        sub = actions.add_parser(name, help=text)
        sub.add_argument("--data-dir", type=Path, required=True)
        sub.set_defaults(func=_run(action))


def _run(action: object) -> object:
    def run(args: argparse.Namespace) -> int:
        try:
            return action(args)  # type: ignore[operator]
        except (ClusterToolError, ZooKeeperError, RuntimeError, OSError) as exc:
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
    if state is not None and any(_alive(p["pid"]) for p in [state["zookeeper"],
                                                            *state["brokers"]]):
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
            broker = BrokerProcess(data_dir / f"broker-{i}", config,
                                   port=previous.get(i, 0), detached=True)
            started.append(broker.start(timeout=60))
    except BaseException:
        for broker in started:
            broker.stop()
        zookeeper.stop()
        raise
    state = {"zookeeper": {"pid": zookeeper.pid, "port": zookeeper.port},
             "brokers": [{"id": i, "pid": b.pid, "port": b.port} for i, b in enumerate(started)]}
    (data_dir / STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")
    print(f"ZooKeeper on {zookeeper.connect}, chroot {CHROOT}")
    for i, broker in enumerate(started):
        print(f"broker {i} on {broker.bootstrap}" + (f", rack {racks[i]}" if racks else ""))
    print(_bootstrap(state))
    return 0


def _status(args: argparse.Namespace) -> int:
    state = _read_state(args.data_dir)
    if state is None:
        raise ClusterToolError(f"no cluster in {args.data_dir} (no {STATE_FILE})")
    ok = True
    zk = state["zookeeper"]
    for name, entry in [(f"zookeeper on 127.0.0.1:{zk['port']}", zk)] + [
            (f"broker {b['id']} on 127.0.0.1:{b['port']}", b) for b in state["brokers"]]:
        alive = _alive(entry["pid"])
        ok &= alive
        print(f"{name}: {'running' if alive else 'not running'} (pid {entry['pid']})")
    print(_bootstrap(state))
    return 0 if ok else 1


def _down(args: argparse.Namespace) -> int:
    state = _read_state(args.data_dir)
    if state is None:
        raise ClusterToolError(f"no cluster in {args.data_dir} (no {STATE_FILE})")
    for entry in [*state["brokers"], state["zookeeper"]]:  # brokers first
        pid = entry["pid"]
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 60
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    (args.data_dir / STATE_FILE).unlink()
    print(f"stopped {len(state['brokers'])} broker(s) and ZooKeeper")
    return 0
