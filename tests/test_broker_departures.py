"""Metadata's broker list on a cluster broker (``broker/replication/departures.py``): a
broker that left stays listed for a few seconds, so that librdkafka moves its partitions to
their new leaders before it forgets the broker (else it undoes the move and waits one more second
per failover); after that only live brokers are listed."""

from __future__ import annotations

from sparklog.broker.replication.departures import Departures
from sparklog.cluster.layout import BrokerInfo, Endpoint


def info(broker_id: int) -> BrokerInfo:
    endpoint = Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092 + broker_id)
    return BrokerInfo(broker_id, (endpoint,))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_departed_broker_is_listed_for_a_while_then_forgotten() -> None:
    clock = Clock()
    departures = Departures(listed_for_s=3, clock=clock)
    everyone = {0: info(0), 1: info(1), 2: info(2)}
    departures.update({}, everyone)
    assert list(departures.listed(everyone)) == [0, 1, 2]
    survivors = {1: info(1), 2: info(2)}
    departures.update(everyone, survivors)
    clock.now += 2.9
    assert departures.listed(survivors) == everyone  # with its endpoint
    clock.now += 0.1
    assert list(departures.listed(survivors)) == [1, 2]


def test_a_broker_back_before_its_time_is_up_is_live_and_leaves_afresh() -> None:
    clock = Clock()
    departures = Departures(listed_for_s=3, clock=clock)
    everyone = {0: info(0), 1: info(1)}
    departures.update(everyone, {1: info(1)})
    clock.now += 2
    departures.update({1: info(1)}, everyone)  # restarted
    clock.now += 2
    assert list(departures.listed(everyone)) == [0, 1]
    departures.update(everyone, {1: info(1)})  # and gone again: a full window from now
    clock.now += 2.5
    assert list(departures.listed({1: info(1)})) == [0, 1]
    clock.now += 0.5
    assert list(departures.listed({1: info(1)})) == [1]
