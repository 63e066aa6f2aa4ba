"""``df.write.format("sparklog")`` save modes, through ``spark.write`` into a real broker:
``append`` writes, ``overwrite`` is refused with a message saying a topic cannot be
overwritten, and the modes Spark refuses for every Python data source (the default
``errorifexists``, ``ignore``) fail with Spark's message; a refused write sends nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from broker_fixtures import broker, create_topic, topic, watermarks

from sparklog.broker.process import BrokerProcess

__all__ = ["broker", "topic"]

pytestmark = pytest.mark.spark


def _write(spark: Any, broker: BrokerProcess, topic: str, mode: str | None) -> None:
    df = spark.createDataFrame([("k1", "v1"), ("k2", "v2")], "key string, value string")
    writer = (df.write.format("sparklog").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("topic", topic))
    if mode is not None:
        writer = writer.mode(mode)
    writer.save()


def test_append_writes(spark: Any, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    _write(spark, broker, topic, "append")
    _write(spark, broker, topic, "append")
    assert watermarks(broker.bootstrap, topic) == (0, 4)


@pytest.mark.parametrize(("mode", "message"), [
    ("overwrite", r'save mode "overwrite" is not allowed: a topic cannot be overwritten.*'
                  r'use \.mode\("append"\)'),
    (None, r"UNSUPPORTED_DATA_SOURCE_SAVE_MODE.*ErrorIfExists"),
    ("ignore", r"UNSUPPORTED_DATA_SOURCE_SAVE_MODE.*Ignore"),
])
def test_other_modes_are_refused_before_sending(spark: Any, broker: BrokerProcess, topic: str,
                                                mode: str | None, message: str) -> None:
    create_topic(broker.bootstrap, topic)
    with pytest.raises(Exception, match=message):
        _write(spark, broker, topic, mode)
    assert watermarks(broker.bootstrap, topic) == (0, 0)
