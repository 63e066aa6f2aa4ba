"""The ``sparklog`` command: a dispatcher over the modules in ``sparklog.commands``.

Invariants:
- This module only wires argparse; every subcommand lives in its own module and returns an
  exit code (0 success, 1 failure the user can act on, 2 usage error).
- ``-v``/``--verbose`` and ``--log-level LEVEL`` are accepted anywhere on the line, before or
  after the subcommand (Kafka's tools take their flags in any order); the last one given
  wins. ``--version`` prints ``sparklog <version>``.
- librdkafka's log lines (``sparklog.client.rdkafka_log``) are printed as the tools' own
  lines, ``sparklog <command>: warning: OFFSET: ...``, on stderr: warnings and errors
  always, the rest (routed at DEBUG) with ``-v``.
- A flag the subcommand does not know is a usage error naming it as typed and the nearest
  flag the subcommand has (``unrecognized arguments: --intervall (did you mean
  '--interval'?)``).
- Help texts are plain text: the reStructuredText markup of the docstrings they come from
  (double backquotes) is removed.
- A command with actions (``topics list``) also takes Kafka's flag form, the action as a
  flag anywhere after the command (``topics --bootstrap-server B --list``), with the same
  options: ``Parser`` moves that flag to the action's place before argparse reads the line,
  for every command alike, and each such command's help says so. Two actions on one line, or
  none, is a usage error naming the actions in both forms.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Iterator, Sequence

from sparklog import __version__
from sparklog.client.rdkafka_log import LOGGER as CLIENT_LOGGER
from sparklog.commands._client import complain, nearest

# Modules registered in this order; each provides add_parser(subparsers).
COMMAND_MODULES = ("broker", "dump_log", "topics", "configs", "produce", "consume", "groups",
                   "partition_offsets", "perf", "verifiable", "transactions", "certs", "users",
                   "acls", "cluster", "elect_leaders", "log_dirs", "reassign", "client_metrics",
                   "schemas")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class Parser(argparse.ArgumentParser):
    """The top parser: reads Kafka's action flags (``topics --list``) as the action
    (``topics list``) of the command they follow."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(_action_first(self, argv), namespace)


def _actions(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((action for action in parser._actions
                 if isinstance(action, argparse._SubParsersAction)), None)


def _positionals(argv: list[str], start: int) -> Iterator[int]:
    """Indexes of the tokens from ``start`` on that are neither flags nor the value of
    ``--log-level`` (the one flag with a value the top parser knows)."""
    for index in range(start, len(argv)):
        if not argv[index].startswith("-") and (index == 0 or argv[index - 1] != "--log-level"):
            yield index


def _action_first(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with a command's action given as Kafka's flag (``--list``) moved to the
    action's place right after the command; anything else unchanged. A positional action
    wins only when every action flag on the line is an option of that action."""
    commands = _actions(parser)
    first = next(_positionals(argv, 0), None)
    if commands is None or first is None or argv[first] not in commands.choices:
        return argv
    command = commands.choices[argv[first]]
    actions = _actions(command)
    if actions is None or {"-h", "--help"} & set(argv):
        return argv
    flags = {f"--{name}": name for name in actions.choices}
    named = [index for index in range(first + 1, len(argv)) if argv[index] in flags]
    given = next(_positionals(argv, first + 1), None)
    if given is not None and argv[given] in actions.choices and all(
            argv[index] in actions.choices[argv[given]]._option_string_actions
            for index in named):
        return argv
    if len({argv[index] for index in named}) != 1:
        command.error(f"give exactly one action: {_both_forms(actions)}")
    rest = [token for index, token in enumerate(argv) if index > first and index not in named]
    return [*argv[:first + 1], flags[argv[named[0]]], *rest]


def _both_forms(actions: argparse._SubParsersAction) -> str:
    names = list(actions.choices)
    return (", ".join(names) + " (or as Kafka's tools: "
            + ", ".join(f"--{name}" for name in names) + ")")


def _describe_flag_form(parser: argparse.ArgumentParser) -> None:
    """Say in a command's help that its actions may be given in Kafka's flag form."""
    actions = _actions(parser)
    if actions is None or parser.prog == "sparklog":
        return
    example = next(iter(actions.choices))
    parser.epilog = (f"ACTION is one of {_both_forms(actions)}; the flag form may come "
                     f"anywhere on the line, e.g. {parser.prog} --bootstrap-server B "
                     f"--{example} is {parser.prog} {example} --bootstrap-server B.")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="sparklog", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"sparklog {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"sparklog.commands.{name}").add_parser(subparsers)
    for each in _parsers(parser):
        _add_logging_flags(each, top=each is parser)
        _plain_help(each)
        _describe_flag_form(each)
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


class _ToolLines(logging.Handler):
    """Client log lines in the tools' format, on the stderr of the moment."""

    command = "sparklog"

    def emit(self, record: logging.LogRecord) -> None:
        complain(self.command, f"{record.levelname.lower()}: {record.getMessage()}")


_TOOL_LINES = _ToolLines()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args.command, unknown)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    _TOOL_LINES.command = args.command
    before = CLIENT_LOGGER.handlers, CLIENT_LOGGER.propagate, CLIENT_LOGGER.level
    CLIENT_LOGGER.handlers, CLIENT_LOGGER.propagate = [_TOOL_LINES], False
    CLIENT_LOGGER.setLevel(args.log_level)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    finally:  # called in-process (tests, the demo): leave logging as it was
        CLIENT_LOGGER.handlers, CLIENT_LOGGER.propagate = before[:2]
        CLIENT_LOGGER.setLevel(before[2])


if __name__ == "__main__":
    sys.exit(main())
