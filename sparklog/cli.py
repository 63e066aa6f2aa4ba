"""The ``sparklog`` command: a dispatcher over the modules in ``sparklog.commands``.

Invariants:
- This module only wires argparse; every subcommand lives in its own module and returns an
  exit code (0 success, 1 failure the user can act on, 2 usage error).
- ``-v``/``--verbose`` and ``--log-level LEVEL`` are accepted anywhere on the line, before or
  after the subcommand (Kafka's tools take their flags in any order); the last one given
  wins. ``--version`` prints ``sparklog <version>``.
- A flag the subcommand does not know is a usage error naming it as typed and the nearest
  flag the subcommand has (``unrecognized arguments: --intervall (did you mean
  '--interval'?)``).
- Help texts are plain text: the reStructuredText markup of the docstrings they come from
  (double backquotes) is removed.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Iterator

from sparklog import __version__
from sparklog.commands._client import nearest

# Modules registered in this order; each provides add_parser(subparsers).
COMMAND_MODULES = ("broker", "dump_log", "topics", "configs", "produce", "consume", "groups",
                   "partition_offsets", "perf", "verifiable", "transactions", "certs", "users",
                   "acls", "cluster", "elect_leaders", "log_dirs", "reassign", "client_metrics")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparklog", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"sparklog {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"sparklog.commands.{name}").add_parser(subparsers)
    for each in _parsers(parser):
        _add_logging_flags(each, top=each is parser)
        _plain_help(each)
    return parser


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``parser`` and every subcommand parser below it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from _parsers(sub)


def _add_logging_flags(parser: argparse.ArgumentParser, top: bool) -> None:
    """``-v`` and ``--log-level`` on every parser. Below the top one their default is
    SUPPRESS, so a subcommand that does not see the flag keeps what the top one set. A
    subcommand with a ``--verbose`` of its own (Kafka's VerifiableConsumer) keeps it; ``-v``
    is then the logging flag alone."""
    default = {} if top else {"default": argparse.SUPPRESS}
    group = parser.add_argument_group("logging")
    free = [flag for flag in ("-v", "--verbose") if flag not in parser._option_string_actions]
    group.add_argument(*free, dest="log_level", action="store_const",
                       const="DEBUG", help="debug logging (same as --log-level DEBUG)",
                       **({"default": "INFO"} if top else default))
    group.add_argument("--log-level", dest="log_level", type=str.upper, choices=LOG_LEVELS,
                       help="DEBUG, INFO (default), WARNING or ERROR", **default)


def plain(text: str | None) -> str | None:
    """Help text without reStructuredText's double backquotes."""
    return None if text is None else text.replace("``", "")


def _plain_help(parser: argparse.ArgumentParser) -> None:
    parser.description = plain(parser.description)
    for action in parser._actions:
        if action.help not in (None, argparse.SUPPRESS):
            action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help)


def _refuse_unknown(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> None:
    """Exit with a usage error naming each unknown flag and the nearest the command has."""
    sub = next(action.choices[command] for action in parser._actions
               if isinstance(action, argparse._SubParsersAction))
    flags = [flag for action in sub._actions for flag in action.option_strings
             if flag.startswith("--")]
    sub.error("unrecognized arguments: " + " ".join(
        item + nearest(item.partition("=")[0], flags) if item.startswith("--") else item
        for item in unknown))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args.command, unknown)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
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
