"""The ``sparklog`` command: a dispatcher over the modules in ``sparklog.commands``.

Invariant: this module only wires argparse; every subcommand lives in its own module and
returns an exit code (0 success, 1 failure the user can act on, 2 usage error).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# Modules registered in this order; each provides add_parser(subparsers).
COMMAND_MODULES = ("broker", "dump_log", "topics", "produce", "consume", "groups",
                   "transactions")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparklog", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"sparklog.commands.{name}").add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
