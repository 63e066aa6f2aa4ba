"""The Spark source and sink fail within seconds, with the cause where PySpark shows it: no
bootstrap server accepting a connection (at ``load()`` and at the sink's write or start), a
refused login, an option of the other mode (a stream's ``endingOffsets``); a ``kafka.*``
option that is no Kafka setting is warned about with the nearest one.

One in-process broker with a PLAINTEXT and a SASL_SSL listener serves the module; the
session's Spark is the ``spark`` fixture.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import Any

import pytest
from security_support import certificates, listener_broker

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.datasource.read.client_options import client_config

__all__ = ["certificates", "listener_broker"]
pytestmark = pytest.mark.spark

NOWHERE = "127.0.0.1:1"  # nothing listens there
FAST_S = 45.0
"""Under the minute these took (``BOOTSTRAP_TIMEOUT_S`` is 5 s; a loaded machine's Spark
starting its Python workers adds the rest)."""


def _reader(spark: Any, stream: bool, bootstrap: str, **options: str) -> Any:
    reader = (spark.readStream if stream else spark.read).format("sparklog")
    return reader.option("kafka.bootstrap.servers", bootstrap).options(**options)


def _fails_fast(action: Any, message: str) -> str:
    """Run ``action``: it must raise within ``FAST_S`` with ``message``; the error text."""
    started = time.monotonic()
    with pytest.raises(Exception, match=re.escape(message)) as raised:
        action()
    assert time.monotonic() - started < FAST_S
    return str(raised.value)


NO_BROKER = f"no broker answered at bootstrap servers {NOWHERE} within 5 s"


@pytest.mark.parametrize("stream", [False, True], ids=["batch", "stream"])
def test_a_read_fails_at_load_when_no_bootstrap_server_answers(spark: Any,
                                                              stream: bool) -> None:
    _fails_fast(_reader(spark, stream, NOWHERE, subscribe="t").load, NO_BROKER)


def test_the_sink_fails_at_write_and_start_when_no_bootstrap_server_answers(
        spark: Any, tmp_path: Path) -> None:
    frame = spark.createDataFrame([("v",)], "value string")
    _fails_fast(frame.write.format("sparklog").mode("append")
                .option("kafka.bootstrap.servers", NOWHERE).option("topic", "t").save,
                NO_BROKER)
    rows = spark.readStream.format("rate").option("rowsPerSecond", 1).load()

    def start() -> None:
        query = (rows.selectExpr("CAST(value AS STRING) AS value").writeStream
                 .format("sparklog").option("kafka.bootstrap.servers", NOWHERE)
                 .option("topic", "t").option("checkpointLocation", str(tmp_path / "ck"))
                 .start())
        try:
            query.awaitTermination(60)
        finally:
            query.stop()

    _fails_fast(start, NO_BROKER)


def test_a_refused_login_fails_the_read_at_load_and_the_write_naming_user_and_listener(
        spark: Any, listener_broker: EmbeddedBroker, certificates: Path) -> None:
    address = f"127.0.0.1:{listener_broker.listeners['SASL_SSL']}"
    login = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-256",
             "kafka.sasl.username": "alice", "kafka.sasl.password": "wrong",
             "kafka.ssl.ca.location": str(certificates / "ca.crt")}
    message = (f"authentication failed on the SASL_SSL listener at {address} for user "
               "'alice' with SASL mechanism SCRAM-SHA-256")
    _fails_fast(_reader(spark, False, address, subscribe="t", **login).load, message)
    frame = spark.createDataFrame([("v",)], "value string")
    _fails_fast(frame.write.format("sparklog").mode("append").options(**login)
                .option("kafka.bootstrap.servers", address).option("topic", "t").save,
                message)


def test_a_streams_ending_offsets_is_the_error_spark_reports(
        spark: Any, listener_broker: EmbeddedBroker, tmp_path: Path) -> None:
    plaintext = f"127.0.0.1:{listener_broker.listeners['PLAINTEXT']}"
    batch = _reader(spark, False, plaintext, subscribe="t", startingOffsets="latest").load()
    with pytest.raises(Exception, match="latest \\(-1\\) is not a valid start for batch"):
        batch.collect()
    stream = _reader(spark, True, plaintext, subscribe="t", endingOffsets="latest").load()
    query = (stream.writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    text = _fails_fast(lambda: query.awaitTermination(60),
                       "OptionError: option endingOffsets is not valid in streaming queries")
    assert "UnboundLocalError" not in text and "During handling" not in text, text


def test_a_kafka_option_that_is_no_kafka_setting_warns_with_the_nearest(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, "sparklog.datasource.read.client_options"):
        client_config({"bootstrap.servers": NOWHERE, "fetch.max.byte": "1",
                       "sasl.mechansim": "PLAIN", "max.poll.records": "5"})
    assert ("option kafka.fetch.max.byte is not a Kafka consumer setting (did you mean "
            "kafka.fetch.max.bytes?); it is ignored") in caplog.text
    assert "(did you mean kafka.sasl.mechanism?)" in caplog.text
    assert "kafka options not used by the sparklog source: max.poll.records" in caplog.text
