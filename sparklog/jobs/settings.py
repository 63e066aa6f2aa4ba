"""Job settings and the arguments every job takes.

Invariants:
- Defaults come from ``jobs.properties`` and ``spark-local.conf`` in the package's own
  ``sparklog/conf`` (package data), or in the directory ``--conf-dir`` or
  ``SPARKLOG_CONF_DIR`` names; ``--set key=value`` wins over ``jobs.properties``.
- Both files are read with ``sparklog.properties``; a missing ``spark-local.conf`` means no
  Spark settings.
- A missing or malformed setting ends the job with a message naming it (``SystemExit``),
  before Spark starts.
- ``source.<option>`` settings are passed to every ``sparklog`` read as
  ``.option(<option>, value)``; an empty value passes nothing. The source's Kafka security
  settings (``source.kafka.security.protocol``, ``source.kafka.sasl.*``, ...) are also the
  job's other clients' (``client_security``).
- ``--set`` only overrides settings ``jobs.properties`` has, or ``source.<option>``: an
  unknown key is refused with the nearest known one, as a typo would otherwise be ignored.
"""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from sparklog.client.settings import ClientSecurity, SettingsError
from sparklog.properties import PropertiesError, read_properties

CONF_ENV = "SPARKLOG_CONF_DIR"
SOURCE_PREFIX = "source."


def conf_dir(given: str | None = None) -> Path | Traversable:
    """``given``, else ``$SPARKLOG_CONF_DIR``, else the defaults shipped in the package."""
    chosen = given or os.environ.get(CONF_ENV)
    return Path(chosen) if chosen else files("sparklog") / "conf"


@dataclass(frozen=True)
class JobSettings:
    values: Mapping[str, str]
    spark: Mapping[str, str]

    @classmethod
    def load(cls, conf: str | None = None, overrides: Sequence[str] = ()) -> JobSettings:
        directory = conf_dir(conf)
        if not (directory / "jobs.properties").is_file():
            raise SystemExit(f"no jobs.properties in {directory} (--conf-dir or {CONF_ENV})")
        spark_conf = directory / "spark-local.conf"
        try:
            values = read_properties(directory / "jobs.properties")
            spark = read_properties(spark_conf) if spark_conf.is_file() else {}
        except PropertiesError as error:
            raise SystemExit(str(error)) from None
        known = set(values)
        for item in overrides:
            key, sep, value = item.partition("=")
            key = key.strip()
            if not sep:
                raise SystemExit(f"--set expects key=value, got {item!r}")
            if key not in known and not key.startswith(SOURCE_PREFIX):
                near = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise SystemExit(f"--set {key}: no such setting{hint}; the settings are those "
                                 f"of {directory / 'jobs.properties'}, or {SOURCE_PREFIX}<option>")
            values[key] = value.strip()
        return cls(values, spark)

    def __getitem__(self, key: str) -> str:
        if key not in self.values:
            raise SystemExit(f"setting {key} is missing from jobs.properties")
        return self.values[key]

    def integer(self, key: str) -> int:
        try:
            return int(self[key])
        except ValueError:
            raise SystemExit(f"setting {key} must be an integer, got {self[key]!r}") from None

    def source_options(self) -> dict[str, str]:
        return {k[len(SOURCE_PREFIX):]: v for k, v in self.values.items()
                if k.startswith(SOURCE_PREFIX) and v != ""}

    def client_security(self) -> dict[str, str]:
        """The source's Kafka security settings (``source.kafka.security.protocol``,
        ``source.kafka.sasl.*``, ``source.kafka.ssl.*``) in librdkafka's names, for the
        job's other clients (dead-letter producer, replay consumer): one set of credentials
        per job."""
        prefix = "kafka."
        kafka = {k[len(prefix):]: v for k, v in self.source_options().items()
                 if k.startswith(prefix)}
        try:
            return ClientSecurity.from_settings(kafka, SOURCE_PREFIX + prefix).librdkafka()
        except SettingsError as error:
            raise SystemExit(str(error)) from None

    def schema_mode(self) -> str | None:
        mode = self["delta.schemaMode"]
        if mode not in ("strict", "merge"):
            raise SystemExit(f"delta.schemaMode must be strict or merge, got {mode!r}")
        return None if mode == "strict" else mode

    def partition_by(self) -> list[str]:
        return [c.strip() for c in self["delta.partitionBy"].split(",") if c.strip()]


def job_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every job takes: where to read, which table and schema, settings."""
    # help is plain text: the docstring's reStructuredText double backquotes go
    parser = argparse.ArgumentParser(description=description.replace("``", ""))
    parser.add_argument("--bootstrap-server", "--bootstrap", dest="bootstrap", required=True,
                        metavar="HOST:PORT", help="Kafka bootstrap servers")
    parser.add_argument("--table", required=True, help="Delta table path (created if missing)")
    parser.add_argument("--schema",
                        help="DDL schema of the JSON values, e.g. 'id BIGINT NOT NULL, user "
                             "STRING'; NOT NULL top-level fields are required (without it: "
                             "the subject's schema from --schema-registry)")
    parser.add_argument("--schema-registry", metavar="URL",
                        help="schema registry whose latest version of --subject gives the "
                             "table's columns; values in Confluent's wire format (default: "
                             "the schema.registry.url setting)")
    parser.add_argument("--subject", help="the values' subject (default: TOPIC-value)")
    parser.add_argument("--value-format", choices=("avro", "json"),
                        help="the values' format (default: the subject's schema type)")
    parser.add_argument("--conf-dir", help=f"directory with jobs.properties and "
                                           f"spark-local.conf (default: ${CONF_ENV}, else the "
                                           f"defaults in the package)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a jobs.properties setting (repeatable)")
    parser.add_argument("--master", help="Spark master (default: spark-local.conf)")
    parser.add_argument("-v", "--verbose", dest="log_level", action="store_const",
                        const="DEBUG", default="INFO",
                        help="debug logging (same as --log-level DEBUG)")
    parser.add_argument("--log-level", dest="log_level", type=str.upper,
                        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                        help="DEBUG, INFO (default), WARNING or ERROR")
    return parser
