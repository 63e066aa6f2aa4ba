"""``sparklog consume``: a console consumer, like ``kafka-console-consumer.sh``.

Prints one line per record: the fields asked for, in Kafka's order and joined by the key
separator (a tab by default), then the value:

    [CreateTime:TS] [Partition:P] [Offset:O] [k1:v1,k2:v2] [KEY] VALUE

A null key, value or header value prints as ``null``, a record without headers as
``NO_HEADERS``, as Kafka's DefaultMessageFormatter does. Its properties work too:
``--property print.key=true print.timestamp=true print.partition=true print.offset=true
print.headers=true print.value=false key.separator=: line.separator=... null.literal=...
headers.separator=, headers.key.separator=:``. Client settings: ``--consumer-property
KEY=VALUE`` (or ``-X``), ``--command-config FILE``.

Kafka's other flags: ``--include REGEX`` reads every topic whose whole name matches instead
of one ``--topic``; ``--isolation-level read_committed|read_uncommitted`` (default
read_committed, librdkafka's; Kafka's console consumer reads uncommitted by default);
``--formatter CLASS`` picks Kafka's formatter by its class name (or the name's last part):
DefaultMessageFormatter (the layout above), LoggingMessageFormatter (that, and each record
logged at INFO), NoOpMessageFormatter (nothing), OffsetsMessageFormatter and
GroupMetadataMessageFormatter (the offset commits, or the group metadata, of
``__consumer_offsets`` as JSON ``{"key": ..., "value": ...}``, the other records left out);
``--skip-message-on-error`` prints a record the formatter cannot read as one stderr line and
goes on, where without it the tool stops there with exit code 1.

Invariants:
- Without ``--group`` the partitions (all, or ``--partition``) are assigned directly at an
  explicit start offset: no group coordinator is needed and nothing is committed
  (librdkafka wants a ``group.id`` anyway; it gets a placeholder that is never used); with
  ``--include`` the topics matching when it starts are read.
- With ``--group`` the topic is subscribed to through the group, committing as librdkafka
  does by default (``--include``: a pattern subscription, librdkafka's regular expression);
  ``--partition`` and ``--offset`` are then refused.
- Reading starts at the log end (new records only) unless ``--from-beginning`` or
  ``--offset``; an offset out of range falls back to that same start.
- It stops after ``--max-messages``, after ``--timeout-ms`` without a record, or at the first
  SIGINT/SIGTERM, and always closes the consumer and prints ``Processed a total of N
  messages`` on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterator

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)

from sparklog.client.admin import MISSING_TOPIC, REQUEST_TIMEOUT_S
from sparklog.client.watch import WatchedConsumer
from sparklog.commands._client import (
    USAGE,
    Property,
    ToolError,
    add_header_arguments,
    add_property_argument,
    apply_properties,
    boolean,
    client_config,
    client_parent,
    complain,
    format_headers,
    nearest,
    non_negative,
    regex,
    separator,
    show,
    tool,
    topic_error,
)
from sparklog.commands.record_decoders import offsets_decoder
from sparklog.signals import Stop, stop_on_signals

log = logging.getLogger(__name__)

PLACEHOLDER_GROUP = "sparklog-console-consumer"
MAX_BATCH = 500  # records already fetched are written (and stdout flushed) this many at once
_TIMESTAMP_TYPES = {TIMESTAMP_CREATE_TIME: "CreateTime", TIMESTAMP_LOG_APPEND_TIME: "LogAppendTime"}
_FATAL = MISSING_TOPIC | {KafkaError._UNKNOWN_PARTITION, KafkaError.TOPIC_AUTHORIZATION_FAILED}
FORMATTER_PROPERTIES: dict[str, Property] = {
    "print.timestamp": ("print_timestamp", boolean),
    "print.partition": ("print_partition", boolean),
    "print.offset": ("print_offset", boolean),
    "print.headers": ("print_headers", boolean),
    "print.key": ("print_key", boolean),
    "print.value": ("print_value", boolean),
    "key.separator": ("key_separator", separator),
    "line.separator": ("line_separator", separator),
    "headers.separator": ("header_separator", separator),
    "headers.key.separator": ("header_key_separator", separator),
    "null.literal": ("null_literal", str),
}


def start_offset(text: str) -> int:
    """An argparse type: ``earliest``, ``latest`` or an offset >= 0."""
    named = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}
    if text in named:
        return named[text]
    if text.isdigit():
        return int(text)
    raise argparse.ArgumentTypeError(f"{text!r} is not an offset >= 0, earliest or latest")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "consume", parents=[client_parent("consumer-property")], help="print records of a topic",
        description=__doc__.split("Invariants:")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic")
    which.add_argument("--include", metavar="REGEX",
                       help="every topic whose whole name matches (Kafka's --include)")
    parser.add_argument("--partition", type=int, help="only this partition (default: all)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the log start offset (default: the log end)")
    start.add_argument("--offset", type=start_offset, metavar="N|earliest|latest",
                       help="start at this offset in every partition read")
    parser.add_argument("--max-messages", type=non_negative, metavar="N",
                        help="stop after N records")
    parser.add_argument("--timeout-ms", type=non_negative, metavar="MS",
                        help="stop when no record came for MS milliseconds")
    parser.add_argument("--group", help="consume as a member of this consumer group")
    parser.add_argument("--print-timestamp", action="store_true")
    parser.add_argument("--print-partition", action="store_true")
    parser.add_argument("--print-offset", action="store_true")
    parser.add_argument("--print-headers", action="store_true")
    parser.add_argument("--print-key", action="store_true")
    parser.add_argument("--key-separator", type=separator, default="\t", metavar="SEP",
                        help="between the printed fields (default: tab)")
    add_header_arguments(parser)
    add_property_argument(parser, "formatter (print.key, print.timestamp, key.separator...)")
    parser.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"),
                        help="read_committed (default) leaves out aborted transactions' "
                             "records; read_uncommitted reads every record")
    parser.add_argument("--formatter", type=_formatter, default=_format, metavar="CLASS",
                        help="Kafka's formatter class: DefaultMessageFormatter (default), "
                             "LoggingMessageFormatter, NoOpMessageFormatter, "
                             "OffsetsMessageFormatter, GroupMetadataMessageFormatter")
    parser.add_argument("--skip-message-on-error", action="store_true",
                        help="a record the formatter cannot read is reported and skipped, "
                             "not the end of the run")
    parser.set_defaults(func=tool("consume", run), print_value=True, line_separator="\n",
                        null_literal="null")


def run(args: argparse.Namespace) -> int:
    apply_properties(args, FORMATTER_PROPERTIES)
    if args.group and (args.partition is not None or args.offset is not None):
        raise ToolError("--partition and --offset assign partitions directly; they cannot be "
                        "used with --group", USAGE)
    if args.include is not None and args.partition is not None:
        raise ToolError("--partition is a partition of one --topic, not of --include", USAGE)
    include = None if args.include is None else regex(args.include)
    isolation = {} if args.isolation_level is None else {"isolation.level": args.isolation_level}
    consumer = WatchedConsumer(client_config(args, {
        "group.id": args.group or PLACEHOLDER_GROUP,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.auto.commit": bool(args.group), **isolation,
    }))
    printed = 0
    try:
        with stop_on_signals() as stop:
            if args.group:
                consumer.subscribe([args.topic] if include is None else
                                   [f"^({include.pattern})$"])
            else:
                consumer.assign([tp for name in _topics(consumer, args.topic, include)
                                 for tp in assignment(consumer, name, args.partition,
                                                      _start_offset(args))])
            for count in _print_records(consumer, args, stop):
                printed = count
    finally:
        consumer.close()
        print(f"Processed a total of {printed} messages", file=sys.stderr)
    return 0


def _topics(consumer: Consumer, topic: str | None, include: re.Pattern[str] | None
            ) -> list[str]:
    """``[topic]``, or the topics whose whole name ``include`` matches."""
    if include is None:
        assert topic is not None
        return [topic]
    names = sorted(name for name in consumer.list_topics(timeout=REQUEST_TIMEOUT_S).topics
                   if include.fullmatch(name))
    if not names:
        raise ToolError(f"no topic matches --include {include.pattern!r}")
    return names


def _start_offset(args: argparse.Namespace) -> int:
    if args.offset is not None:
        return args.offset
    return OFFSET_BEGINNING if args.from_beginning else OFFSET_END


def assignment(consumer: Consumer, name: str, partition: int | None,
               offset: int) -> list[TopicPartition]:
    """The partitions of topic ``name`` to read (all, or ``partition``), each at ``offset``;
    a ``ToolError`` naming the topic or partition when it does not exist."""
    topic = consumer.list_topics(name, timeout=REQUEST_TIMEOUT_S).topics[name]
    if topic.error is not None:
        raise topic_error(name, topic.error)
    partitions = sorted(topic.partitions)
    if partition is not None:
        if partition not in topic.partitions:
            raise ToolError(f"topic {name!r} has no partition {partition} (it has "
                            f"{len(partitions)})")
        partitions = [partition]
    return [TopicPartition(name, p, offset) for p in partitions]


def _print_records(consumer: Consumer, args: argparse.Namespace, stop: Stop) -> Iterator[int]:
    """Write records until a stop condition, yielding the running count after each write."""
    count = 0
    idle_s = None if args.timeout_ms is None else args.timeout_ms / 1000
    deadline = None if idle_s is None else time.monotonic() + idle_s
    while not stop.requested and (args.max_messages is None or count < args.max_messages):
        wait = -1.0 if deadline is None else deadline - time.monotonic()  # -1: no limit
        if deadline is not None and wait <= 0:
            return
        first = stop.wait(consumer.poll, wait)
        if first is None:
            continue
        wanted = MAX_BATCH if args.max_messages is None else args.max_messages - count
        batch = [first] + (consumer.consume(wanted - 1, 0) if wanted > 1 else [])
        records = [m for m in batch if _is_record(m, args.topic)]
        if records:
            sys.stdout.write("".join(_written(m, args) for m in records))
            sys.stdout.flush()
            count += len(records)
            yield count
            deadline = None if idle_s is None else time.monotonic() + idle_s


def _is_record(message: Message, topic: str | None) -> bool:
    """True for a record; a consumer error is raised if fatal, else printed and skipped."""
    error = message.error()
    if error is None:
        return True
    if error.fatal() or error.code() in _FATAL:
        raise topic_error(message.topic() or topic or "", error)
    complain("consume", error.str())
    return False


def _format(message: Message, args: argparse.Namespace) -> str:
    fields = []
    if args.print_timestamp:
        kind, timestamp = message.timestamp()
        name = _TIMESTAMP_TYPES.get(kind)
        fields.append(f"{name}:{timestamp}" if name else "NO_TIMESTAMP")
    if args.print_partition:
        fields.append(f"Partition:{message.partition()}")
    if args.print_offset:
        fields.append(f"Offset:{message.offset()}")
    if args.print_headers:
        fields.append(format_headers(message.headers() or [], args.header_separator,
                                     args.header_key_separator))
    if args.print_key:
        fields.append(_show_data(message.key(), args.null_literal))
    if args.print_value:
        fields.append(_show_data(message.value(), args.null_literal))
    return args.key_separator.join(fields) + args.line_separator


def _show_data(data: bytes | None, null_literal: str) -> str:
    return null_literal if data is None else show(data)


# -- Kafka's formatters -----------------------------------------------------------------------


class FormatError(Exception):
    """The formatter cannot read a record; the message says which and why."""


Formatter = Callable[[Message, argparse.Namespace], str]
"""A record as the text to write (``""``: nothing), or a ``FormatError``."""


def _written(message: Message, args: argparse.Namespace) -> str:
    """What ``--formatter`` makes of a record; with ``--skip-message-on-error`` a record it
    cannot read is one stderr line, else the end of the run."""
    try:
        return args.formatter(message, args)
    except FormatError as exc:
        where = f"{message.topic()}-{message.partition()} offset {message.offset()}"
        if not args.skip_message_on_error:
            raise ToolError(f"{where}: {exc} (--skip-message-on-error skips such records)"
                            ) from None
        complain("consume", f"skipped {where}: {exc}")
        return ""


def _logged(message: Message, args: argparse.Namespace) -> str:
    """Kafka's LoggingMessageFormatter: the default layout, and the record logged."""
    kind, timestamp = message.timestamp()
    log.info("%s:%d, Partition:%d, Offset:%d, key:%s, value:%s",
             _TIMESTAMP_TYPES.get(kind, "NoTimestampType"), timestamp, message.partition(),
             message.offset(), _show_data(message.key(), "null"),
             _show_data(message.value(), "null"))
    return _format(message, args)


def _coordinator_records(offsets: bool) -> Formatter:
    """Kafka's OffsetsMessageFormatter (``offsets``) or GroupMetadataMessageFormatter: the
    records of ``__consumer_offsets`` of that kind as ``{"key": ..., "value": ...}``."""

    def formatted(message: Message, args: argparse.Namespace) -> str:
        key, value = offsets_decoder(message.key(), message.value())
        for text in (key, value):
            if text.startswith("unknown"):
                reason = text.removeprefix("unknown (").removesuffix(")")
                raise FormatError(f"not a record of __consumer_offsets: {reason}")
        parsed_key = json.loads(key)
        if (parsed_key["type"] in ("0", "1")) != offsets:
            return ""
        parsed_value = None if message.value() is None else json.loads(value)
        return json.dumps({"key": parsed_key, "value": parsed_value},
                          separators=(",", ":")) + args.line_separator

    return formatted


FORMATTERS: dict[str, Formatter] = {
    "DefaultMessageFormatter": _format,
    "LoggingMessageFormatter": _logged,
    "NoOpMessageFormatter": lambda message, args: "",
    "OffsetsMessageFormatter": _coordinator_records(offsets=True),
    "GroupMetadataMessageFormatter": _coordinator_records(offsets=False),
}
"""Kafka's formatters by the last part of their class names (``kafka.tools.X``,
``org.apache.kafka.tools.consumer.X``, ``kafka.coordinator.group.GroupMetadataManager$X``)."""


def _formatter(text: str) -> Formatter:
    """An argparse type: a formatter by Kafka's class name, or its last part."""
    name = re.split(r"[.$]", text)[-1]
    if name not in FORMATTERS:
        raise argparse.ArgumentTypeError(f"unknown formatter {text!r}{nearest(name, FORMATTERS)}"
                                         "; known: " + ", ".join(FORMATTERS))
    return FORMATTERS[name]
