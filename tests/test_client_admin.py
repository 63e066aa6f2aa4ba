"""``sparklog.client.admin``: the topic helpers the jobs and the demo use, against a broker
with topic auto-creation off (so a missing topic stays missing)."""

from __future__ import annotations

import pytest
from broker_fixtures import module_broker

from sparklog.broker.process import BrokerProcess
from sparklog.client.admin import TopicError, ensure_topics, partition_count

broker = module_broker({"auto.create.topics.enable": "false"})


def test_ensure_topics_creates_only_what_is_missing(broker: BrokerProcess) -> None:
    ensure_topics(broker.bootstrap, {"ensured": 3})
    ensure_topics(broker.bootstrap, {"ensured": 5, "ensured-too": 1})  # exists: left as is
    assert partition_count(broker.bootstrap, "ensured") == 3
    assert partition_count(broker.bootstrap, "ensured-too") == 1


def test_a_missing_topic_is_an_error_naming_it(broker: BrokerProcess) -> None:
    with pytest.raises(TopicError, match=f"^topic nowhere on {broker.bootstrap}: not found$"):
        partition_count(broker.bootstrap, "nowhere")
    with pytest.raises(TopicError, match=r"^could not create topic bad/name: "):
        ensure_topics(broker.bootstrap, {"bad/name": 1})
