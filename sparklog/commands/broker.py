"""``sparklog broker``: run a broker in the foreground (like ``kafka-server-start.sh``).

Exit codes: 0 after a clean stop (SIGTERM or Ctrl-C), 1 when it cannot start (the port is
in use, the data directory is a file or another broker's), 2 for a bad option or config
value. Every start-up error is one line on stderr, ``sparklog broker: <cause>``, and none
touches the data directory (see ``sparklog.broker.runner``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sparklog.broker.config import BrokerConfig
from sparklog.broker.runner import StartupError, parse_listen, run
from sparklog.errors import InvalidConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("broker", help="run a broker in the foreground")
    p.add_argument("--data-dir", type=Path, help="directory of the logs (log.dirs)")
    p.add_argument("--listen", help="HOST:PORT to listen on (port 0: any free port)")
    p.add_argument("--config", type=Path, help="a server.properties file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a broker config (repeatable)")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        config = BrokerConfig.load(args.config, args.set)
        listen = args.listen or config.get("listeners").split(",")[0]
        parse_listen(listen)
    except (InvalidConfigError, ValueError, OSError) as exc:
        print(f"sparklog broker: {exc}", file=sys.stderr)
        return 2
    data_dir = args.data_dir or Path(config.get("log.dirs").split(",")[0])
    try:
        return run(config, data_dir, listen)
    except StartupError as exc:
        print(f"sparklog broker: {exc}", file=sys.stderr)
        return 1
