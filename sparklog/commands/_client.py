"""What the client tools (``topics``, ``produce``, ``consume``) share.

Invariants:
- Every tool takes ``--bootstrap-server`` (Kafka's name; ``--bootstrap`` is the same),
  ``--command-config FILE`` (a properties file of client settings, as Kafka's tools) and
  repeated ``-X KEY=VALUE`` settings (the console tools also take Kafka's
  ``--producer-property`` / ``--consumer-property``). Precedence: the tool's defaults < the
  file < ``-X`` and the ``--*-property`` flags (``client_config``).
- ``--property KEY=VALUE`` is Kafka's: a setting of the console producer's line reader or the
  console consumer's formatter (``apply_properties``); an unknown key is a usage error that
  names the nearest known one.
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
import difflib
import re
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer, TopicCollection

from sparklog.client.admin import (
    MISSING_TOPIC,
    REQUEST_TIMEOUT_S,
    TOPIC_EXISTS,
    admin_result,
    kafka_error,
)
from sparklog.client.cluster import TopicPartition
from sparklog.client.errors import KafkaClientError
from sparklog.client.kafka import KafkaClient
from sparklog.client.rdkafka_log import routed
from sparklog.client.settings import (
    SECURITY_KEYS,
    ClientConfig,
    ClientSecurity,
    RetryPolicy,
    SettingsError,
    parse_bootstrap,
)
from sparklog.client.watch import connected_admin
from sparklog.properties import PropertiesError, read_properties
from sparklog.signals import Stop

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


def id_list(what: str) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers (``0,1,2``), ``what`` naming them."""

    def parse(text: str) -> list[int]:
        try:
            return [int(item) for item in text.split(",") if item.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a list of {what} like 0,1"
                                             ) from None

    return parse


def boolean(text: str) -> bool:
    """``true`` or ``false`` (any case), as Kafka's properties."""
    if text.strip().lower() not in ("true", "false"):
        raise ToolError(f"{text!r} is not true or false", USAGE)
    return text.strip().lower() == "true"


def client_parent(client_flag: str | None = None, required: bool = True,
                  broker_list: bool = False) -> argparse.ArgumentParser:
    """A parent parser with the connection options every tool takes; ``client_flag`` adds
    Kafka's ``--producer-property`` or ``--consumer-property`` beside ``-X``; with
    ``required=False`` the tool has another way than a broker to do its work; with
    ``broker_list`` Kafka's old producer name ``--broker-list`` is the bootstrap too."""
    parent = argparse.ArgumentParser(add_help=False)
    names = ("--bootstrap-server", "--bootstrap", *(("--broker-list",) if broker_list else ()))
    parent.add_argument(*names, dest="bootstrap", required=required,
                        metavar="HOST:PORT", help="the broker(s) to connect to")
    parent.add_argument("--command-config", type=Path, metavar="FILE",
                        help="a properties file of client settings")
    flags = ("-X", f"--{client_flag}") if client_flag else ("-X",)
    parent.add_argument(*flags, action="extend", nargs="+", default=[],
                        dest="client_settings", metavar="KEY=VALUE",
                        help="client (librdkafka) settings, e.g. -X acks=all (repeatable; "
                             "several may follow one flag, as Kafka's --producer-props)")
    return parent


def add_property_argument(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--property", action="append", nargs="+", default=[],
                        dest="properties", metavar="KEY=VALUE",
                        help=f"a setting of the {what}, as Kafka's (repeatable)")


Property = tuple[str, Callable[[str], object]]
"""Where a ``--property`` goes: the namespace attribute and the converter of its value."""


def apply_properties(args: argparse.Namespace, known: Mapping[str, Property]) -> None:
    """Set ``args`` attributes from ``--property KEY=VALUE`` items; an unknown key or a bad
    value is a usage error naming it."""
    items = [item for group in args.properties for item in group]
    for key, value in parse_assignments(items, "--property").items():
        if key not in known:
            raise ToolError(f"unknown --property {key!r}{nearest(key, known)}; known: "
                            + ", ".join(sorted(known)), USAGE)
        attribute, convert = known[key]
        try:
            setattr(args, attribute, convert(value))
        except (ToolError, argparse.ArgumentTypeError) as exc:
            raise ToolError(f"--property {key}: {exc}", USAGE) from None


def regex(text: str) -> re.Pattern[str]:
    """``text`` compiled; a usage error naming it when it is not a regular expression."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise ToolError(f"{text!r} is not a regular expression: {exc}", USAGE) from None


def nearest(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``known``, or nothing."""
    match = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {match[0]!r}?)" if match else ""


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
    """The librdkafka config: bootstrap, the tool's defaults, ``--command-config``, then -X.

    Kafka's security settings are read in Java's names or librdkafka's (a Kafka
    ``client.properties`` with ``sasl.jaas.config`` or a PEM ``ssl.truststore.location``
    works) and given to librdkafka in its own (``ClientSecurity``).

    librdkafka's log lines go through Python logging (``sparklog.client.rdkafka_log``): the
    CLI prints warnings and errors in the tools' format, the rest only with ``-v``.
    """
    from_file: dict[str, str] = {}
    if args.command_config is not None:
        try:
            from_file = read_properties(args.command_config)
        except (OSError, PropertiesError) as exc:
            raise ToolError(f"--command-config: {exc}", USAGE) from None
    given = {**from_file, **parse_assignments(args.client_settings, "-X")}
    try:
        security = ClientSecurity.from_settings(given)
    except SettingsError as exc:
        raise ToolError(str(exc), USAGE) from None
    plain = {k: v for k, v in given.items() if k.lower() not in SECURITY_KEYS}
    return routed({"bootstrap.servers": args.bootstrap, **(defaults or {}), **plain,
                   **security.librdkafka()})


PROTOCOL_RETRY = RetryPolicy(timeout_s=30.0, backoff_s=0.1)
_PROTOCOL_SETTINGS = frozenset({"bootstrap.servers", "client.id", "request.timeout.ms",
                                "log_level", "logger"})


def protocol_client(args: argparse.Namespace, name: str) -> KafkaClient:
    """sparklog's protocol client (for APIs confluent-kafka lacks), from the connection
    flags: ``client.id``, ``request.timeout.ms`` and Kafka's security settings are used; any
    other setting is reported as unused, as Kafka's clients report unknown configs."""
    settings = client_config(args)
    for key in settings:
        if key not in _PROTOCOL_SETTINGS and key not in SECURITY_KEYS:
            complain(name, f"the setting {key!r} was supplied but is not used")
    try:
        return KafkaClient(ClientConfig(
            parse_bootstrap(args.bootstrap, "--bootstrap-server"),
            client_id=str(settings.get("client.id", "sparklog")),
            request_timeout_s=int(settings.get("request.timeout.ms", 30_000)) / 1000,
            security=ClientSecurity.from_settings(settings)), PROTOCOL_RETRY)
    except (SettingsError, ValueError) as exc:
        raise ToolError(str(exc), USAGE) from None


def send(producer: Producer, topic: str, value: bytes | None, key: bytes | None = None,
         **options: Any) -> None:
    """``producer.produce``, waiting (serving delivery reports) while the local queue is
    full, then serving the reports that are due."""
    while True:
        try:
            producer.produce(topic, value, key, **options)
            break
        except BufferError:
            producer.poll(0.05)
    producer.poll(0)


def throttle(rate: int, started: float) -> Callable[[int, Stop], None]:
    """``pace(sent, stop)`` sleeps until ``sent`` records are no more than ``rate`` per second
    since ``started`` (``time.perf_counter``), as Kafka's ThroughputThrottler; a stop ends
    the sleep at once. A rate of -1 never sleeps."""

    def pace(sent: int, stop: Stop) -> None:
        if rate > 0:
            ahead = started + sent / rate - time.perf_counter()
            if ahead > 0:
                stop.wait(time.sleep, ahead)

    return pace


def replicas_of(args: argparse.Namespace, topics: Iterable[str]
                ) -> dict[TopicPartition, tuple[int, ...]]:
    """Every partition of ``topics`` with its replicas as Metadata lists them; a topic that
    does not exist is a ``ToolError`` naming it."""
    admin = connected_admin(client_config(args))
    names = sorted(set(topics))
    futures = admin.describe_topics(TopicCollection(names), request_timeout=REQUEST_TIMEOUT_S)
    current = {}
    for name, future in futures.items():
        try:
            admin_result(future)
        except KafkaException as exc:
            raise topic_error(name, kafka_error(exc)) from None
        for partition in future.result().partitions:
            current[TopicPartition(name, partition.id)] = tuple(n.id for n in partition.replicas)
    return current


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
