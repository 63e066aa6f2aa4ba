"""What the client tools (``topics``, ``produce``, ``consume``) share.

Invariants:
- Every tool takes ``--bootstrap`` (alias ``--bootstrap-server``) and repeated
  ``--property``/``-X KEY=VALUE`` librdkafka settings; a user's setting always wins over the
  tool's default for the same key (``client_config``).
- A failure the user can act on is a ``ToolError`` (or a ``KafkaException`` from the client);
  ``tool`` turns either into one line ``sparklog <tool>: <message>`` on stderr and exit code
  1 (2 for a usage error), never a traceback.
- Tools that run until stopped do so under ``sparklog.signals.stop_on_signals``: the first
  SIGINT/SIGTERM only requests a stop, seen between two records, and a blocking wait run
  through ``Stop.wait`` (a read, poll or flush) returns None at once, so a record is never
  half handled (printed but not counted, read but not sent); a second signal aborts as it
  normally would.
- Headers are written and printed in one scheme, ``k1:v1,k2:v2`` (Kafka's
  ``headers.separator`` and ``headers.key.separator``); a header without a value is null.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import KafkaError, KafkaException

from sparklog.client.admin import MISSING_TOPIC, TOPIC_EXISTS, kafka_error
from sparklog.client.errors import KafkaClientError

FAILED, USAGE = 1, 2
Headers = list[tuple[str, bytes | None]]


class ToolError(Exception):
    """A failure explained by its message; ``exit_code`` is what the tool returns."""

    def __init__(self, message: str, exit_code: int = FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


# -- arguments and configs -------------------------------------------------------------------


def separator(text: str) -> str:
    """An argparse type: a separator where ``\\t`` and ``\\n`` may be typed as escapes."""
    if not text:
        raise argparse.ArgumentTypeError("a separator cannot be empty")
    return text.replace("\\t", "\t").replace("\\n", "\n")


def non_negative(text: str) -> int:
    """An argparse type: an integer >= 0."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return int(text)


def client_parent() -> argparse.ArgumentParser:
    """A parent parser with the connection options every tool takes."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--bootstrap", "--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="the broker to connect to")
    parent.add_argument("-X", "--property", action="append", default=[], dest="properties",
                        metavar="KEY=VALUE",
                        help="a librdkafka client setting, e.g. -X acks=all (repeatable)")
    return parent


def add_header_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--header-separator", type=separator, default=",", metavar="SEP",
                        help="between two headers (default ',')")
    parser.add_argument("--header-key-separator", type=separator, default=":", metavar="SEP",
                        help="between a header's key and value (default ':')")


def parse_assignments(items: Iterable[str], what: str) -> dict[str, str]:
    """``["k=v", ...]`` as a dict; an item without ``=`` is a usage error naming ``what``."""
    parsed = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ToolError(f"{what} {item!r} is not KEY=VALUE", USAGE)
        parsed[key.strip()] = value
    return parsed


def client_config(args: argparse.Namespace,
                  defaults: Mapping[str, str | int | bool] | None = None) -> dict[str, object]:
    """The librdkafka config: bootstrap, then the tool's defaults, then the user's -X.

    librdkafka's informational logs (reconnects, queue purges) are left out by default
    (``log_level`` 4 keeps warnings and errors) so they do not mix with the tools' output.
    """
    return {"bootstrap.servers": args.bootstrap, "log_level": 4, **(defaults or {}),
            **parse_assignments(args.properties, "--property")}


# -- errors -----------------------------------------------------------------------------------


def topic_error(topic: str, error: KafkaError) -> ToolError:
    """A failure about ``topic``, worded by us for the common codes, else by the broker."""
    if error.code() in MISSING_TOPIC:
        return ToolError(f"topic {topic!r} does not exist")
    if error.code() in TOPIC_EXISTS:
        return ToolError(f"topic {topic!r} already exists")
    return ToolError(f"topic {topic!r}: {error.str()}")


def tool(name: str, body: Callable[[argparse.Namespace], int]
         ) -> Callable[[argparse.Namespace], int]:
    """Wrap a tool's entry point so its failures become one stderr line and an exit code."""

    def run(args: argparse.Namespace) -> int:
        try:
            return body(args)
        except ToolError as exc:
            complain(name, str(exc))
            return exc.exit_code
        except KafkaException as exc:
            complain(name, kafka_error(exc).str())
            return FAILED
        except KafkaClientError as exc:
            complain(name, str(exc))
            return FAILED

    return run


def complain(name: str, message: str) -> None:
    """One line on stderr in the tools' format, for failures and warnings alike."""
    print(f"sparklog {name}: {message}", file=sys.stderr)


# -- headers ----------------------------------------------------------------------------------


def parse_headers(text: str, separator: str, key_separator: str) -> Headers:
    """``k1:v1,k2`` as ``[("k1", b"v1"), ("k2", None)]``; an empty text has no headers."""
    headers: Headers = []
    for item in text.split(separator) if text else ():
        key, sep, value = item.partition(key_separator)
        headers.append((key, value.encode() if sep else None))
    return headers


def format_headers(headers: Headers, separator: str, key_separator: str) -> str:
    """Headers in the scheme ``parse_headers`` reads; Kafka's ``NO_HEADERS`` when empty."""
    if not headers:
        return "NO_HEADERS"
    return separator.join(f"{key}{key_separator}{show(value)}" for key, value in headers)


def show(data: bytes | None) -> str:
    """Bytes as text for a console (undecodable bytes escaped), ``null`` for None as Kafka."""
    return "null" if data is None else data.decode("utf-8", "backslashreplace")
