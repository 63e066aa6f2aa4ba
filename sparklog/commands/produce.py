"""``sparklog produce``: a console producer, like ``kafka-console-producer.sh``.

Each input line (stdin, or each ``--value``) is one record, read as

    [HEADERS <headers-delimiter>] [KEY <key-separator>] VALUE

- Without ``--key-separator`` the whole line is the value and the key is null; with it, the
  line is split at the first separator (Kafka's ``parse.key=true``), e.g. ``-k :`` reads
  ``user1:clicked`` as key ``user1``, value ``clicked``.
- With ``--headers`` the line starts with headers ``k1:v1,k2:v2`` ended by the headers
  delimiter (a tab by default), as Kafka's ``parse.headers=true``: ``h1:v1,h2\\tk:v`` with
  ``-k :`` is headers h1=v1 and h2=null, key k, value v. An empty header block means none.
- Separators may be typed as escapes: ``'\\t'`` is a tab.
- Kafka's reader properties work too: ``--property parse.key=true key.separator=:``,
  ``parse.headers``, ``headers.delimiter``, ``headers.separator``, ``headers.key.separator``
  (``parse.key=true`` without a separator splits at a tab, as Kafka's).
- Client settings: ``--producer-property KEY=VALUE`` (or ``-X``), ``--command-config FILE``;
  Kafka's ``--compression-codec [none|gzip|snappy|lz4|zstd]`` (gzip without a value) and
  ``--request-required-acks -1|0|1|all`` set ``compression.type`` and ``acks`` (a ``-X``
  setting of the same name wins); ``--broker-list`` is ``--bootstrap-server``.

Invariants:
- Every delivery report is checked: the producer is flushed at the end, a summary
  ``Sent N records to T`` goes to stderr, and the exit code is 1 when any record was not
  delivered (the first error is printed) or a line did not parse (reading stops there;
  the records before it are still delivered).
- The first SIGINT/SIGTERM stops reading; what was read is still flushed and reported. When
  it comes during that flush, the wait stops and the records still queued count as not
  delivered; a second signal aborts.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from sparklog.client.admin import kafka_error
from sparklog.client.watch import WatchedProducer
from sparklog.commands._client import (
    FAILED,
    Headers,
    Property,
    ToolError,
    add_header_arguments,
    add_property_argument,
    apply_properties,
    boolean,
    client_config,
    client_parent,
    complain,
    non_negative,
    parse_headers,
    send,
    separator,
    tool,
)
from sparklog.signals import stop_on_signals

Record = tuple[bytes | None, bytes, Headers]
KAFKA_KEY_SEPARATOR = "\t"
READER_PROPERTIES: dict[str, Property] = {
    "parse.key": ("parse_key", boolean),
    "key.separator": ("key_separator", separator),
    "parse.headers": ("headers", boolean),
    "headers.delimiter": ("headers_delimiter", separator),
    "headers.separator": ("header_separator", separator),
    "headers.key.separator": ("header_key_separator", separator),
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce", parents=[client_parent("producer-property", broker_list=True)],
        help="send lines of stdin as records",
        description=__doc__.split("Invariants:")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int,
                        help="the partition (default: chosen by the key, or spread)")
    parser.add_argument("-k", "--key-separator", type=separator, metavar="SEP",
                        help="split each line into KEY SEP VALUE")
    parser.add_argument("--headers", action="store_true",
                        help="each line starts with headers k1:v1,k2:v2 then the delimiter")
    parser.add_argument("--headers-delimiter", type=separator, default="\t", metavar="SEP",
                        help="ends the headers (default: tab)")
    add_header_arguments(parser)
    add_property_argument(parser, "line reader (parse.key, key.separator, parse.headers...)")
    parser.add_argument("--value", action="append", metavar="LINE",
                        help="an input line given here instead of on stdin (repeatable)")
    parser.add_argument("--compression-codec", nargs="?", const="gzip",
                        choices=("none", "gzip", "snappy", "lz4", "zstd"),
                        help="compress batches (without a value: gzip)")
    parser.add_argument("--request-required-acks", choices=("-1", "0", "1", "all"),
                        metavar="-1|0|1|all", help="the producer's acks")
    parser.add_argument("--num-records", type=non_negative, metavar="N",
                        help="send N records: stop after N lines of stdin, or repeat the "
                             "--value lines until N are sent")
    parser.set_defaults(func=tool("produce", run), parse_key=None)


@dataclass(frozen=True)
class LineFormat:
    """How a line splits into headers, key and value."""

    key_separator: str | None
    headers_delimiter: str | None
    header_separator: str
    header_key_separator: str

    def parse(self, number: int, line: str) -> Record:
        headers: Headers = []
        if self.headers_delimiter is not None:
            block, line = self._split(number, line, self.headers_delimiter, "headers delimiter")
            headers = parse_headers(block, self.header_separator, self.header_key_separator)
        key = None
        if self.key_separator is not None:
            key_text, line = self._split(number, line, self.key_separator, "key separator")
            key = key_text.encode()
        return key, line.encode(), headers

    @staticmethod
    def _split(number: int, line: str, sep: str, name: str) -> tuple[str, str]:
        head, found, rest = line.partition(sep)
        if not found:
            raise ToolError(f"line {number} has no {name} {sep!r}: {line!r}")
        return head, rest


@dataclass
class Deliveries:
    """Counts delivery reports (the producer's ``on_delivery`` callback)."""

    delivered: int = 0
    failed: int = 0
    first_error: str | None = None
    sent: int = 0

    @property
    def unreported(self) -> int:
        """Records sent without a report yet (not ``len(producer)``: librdkafka's log events,
        routed through Python logging, wait in that queue too)."""
        return self.sent - self.delivered - self.failed

    def __call__(self, error: KafkaError | None, message: Message | None) -> None:
        if error is None:
            self.delivered += 1
        else:
            self.fail(error)

    def fail(self, error: KafkaError, count: int = 1) -> None:
        self.failed += count
        if self.first_error is None:
            self.first_error = error.str()


def line_format(args: argparse.Namespace) -> LineFormat:
    """How lines split, from the flags and Kafka's ``--property`` settings."""
    apply_properties(args, READER_PROPERTIES)
    parse_key = args.key_separator is not None if args.parse_key is None else args.parse_key
    key_separator = (args.key_separator or KAFKA_KEY_SEPARATOR) if parse_key else None
    return LineFormat(key_separator, args.headers_delimiter if args.headers else None,
                      args.header_separator, args.header_key_separator)


def run(args: argparse.Namespace) -> int:
    reader = line_format(args)
    flags = {"compression.type": args.compression_codec, "acks": args.request_required_acks}
    producer = WatchedProducer(client_config(args, {k: v for k, v in flags.items()
                                                    if v is not None}))
    deliveries = Deliveries()
    bad_line = None
    with stop_on_signals() as stop:
        lines = _input_lines(args)
        number = 0
        while not stop.requested and (line := stop.wait(next, lines, None)) is not None:
            number += 1
            try:
                record = reader.parse(number, line)
            except ToolError as exc:
                bad_line = exc
                break
            _send(producer, args, record, deliveries)
        if stop.requested:  # reading stopped: deliver what was read (a second signal aborts)
            producer.flush()
        else:
            stop.wait(producer.flush)
    if queued := deliveries.unreported:
        deliveries.fail(KafkaError(KafkaError._FAIL, "stopped before delivery"), queued)
    print(f"Sent {deliveries.delivered} records to {args.topic}", file=sys.stderr)
    if deliveries.failed:
        complain("produce", f"{deliveries.failed} of {deliveries.delivered + deliveries.failed}"
                            f" records were not delivered to {args.topic}: "
                            f"{deliveries.first_error}")
    if bad_line is not None:
        complain("produce", str(bad_line))
    return FAILED if deliveries.failed or bad_line else 0


def _input_lines(args: argparse.Namespace) -> Iterator[str]:
    if args.value:
        lines = itertools.cycle(args.value) if args.num_records else iter(args.value)
    else:
        lines = (line.removesuffix("\n").removesuffix("\r") for line in sys.stdin)
    return itertools.islice(lines, args.num_records)


def _send(producer: Producer, args: argparse.Namespace, record: Record,
          deliveries: Deliveries) -> None:
    key, value, headers = record
    partition = {} if args.partition is None else {"partition": args.partition}
    deliveries.sent += 1
    try:
        send(producer, args.topic, value, key, headers=headers, on_delivery=deliveries,
             **partition)
    except KafkaException as exc:  # refused before it was queued, e.g. too large
        deliveries.fail(kafka_error(exc))
