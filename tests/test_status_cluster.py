"""The status page of a cluster (real ZooKeeper, three broker processes), on a follower.

Every broker's page shows the whole cluster: the page of a broker that is neither the
controller nor the group's coordinator lists all brokers (alive, rack, the controller),
every partition's leader, replicas and ISR as the cluster's Metadata answers them, and the
group its coordinator holds (read from the coordinator's page at the URL it registered),
with the coordinator's id. Once a broker is killed, the page shows it no longer
registered, its partitions under-replicated and the one it alone held offline. Both states
are looked at in headless Chromium through the DOM and their screenshots checked as the
single broker's page is (saved in the tmp dir). A peer whose page does not answer is
listed with its error instead of failing the page.
"""

from __future__ import annotations

import json
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import (
    TIMEOUT,
    Cluster,
    admin,
    committed_member,
    create_topic,
    produce_per_partition,
    topic,
    zookeeper,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait
from test_status_page import browser, check_picture, text_of, texts_of

from sparklog.broker.monitoring.listener import _groups_of
from sparklog.broker.monitoring.status import ClusterBroker
from sparklog.cluster.zookeeper_server import ZooKeeperServer

__all__ = ["browser", "topic", "zookeeper"]


RACKS = ("rack-a", "rack-b", "rack-a")


@pytest.fixture
def cluster(zookeeper: ZooKeeperServer, tmp_path: Path,
            request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Three brokers, each with its status page, on two racks."""
    running = Cluster(zookeeper, tmp_path, request.node.name,
                      config={"metrics.listener": "http://127.0.0.1:0",
                              "auto.leader.rebalance.enable": "false"})
    for broker, rack in zip(running.brokers, RACKS, strict=True):
        broker.config["broker.rack"] = rack
    try:
        yield running.start()
    finally:
        running.stop()


def status(url: str) -> Any:
    with urllib.request.urlopen(url + "status.json", timeout=TIMEOUT) as response:
        return json.loads(response.read())


def test_a_followers_page_shows_the_cluster(cluster: Cluster, browser: WebDriver, topic: str,
                                            tmp_path: Path) -> None:
    create_topic(cluster.bootstrap, topic, partitions=2, replication_factor=3)
    for partition in (0, 1):
        cluster.wait_for_isr(topic, {0, 1, 2}, partition)
    produce_per_partition(cluster.bootstrap, topic, {0: 5, 1: 3})
    group = f"{topic}.billing"
    member = committed_member(cluster.bootstrap, topic, group, {0: 2, 1: 3})
    try:
        client = admin(cluster.bootstrap)  # referenced while its future runs
        described = client.describe_consumer_groups([group])[group].result(TIMEOUT)
        coordinator = described.coordinator.id
        urls = [b.metrics_url for b in cluster.brokers]
        controller = status(urls[0])["status"]["controller_id"]
        page = next(i for i in range(3) if i not in (controller, coordinator))
        url = urls[page]
        assert url is not None
        # a topic only one other broker holds: offline once that broker is gone
        gone = next(i for i in range(3) if i != page)
        alone = create_topic(cluster.bootstrap, f"{topic}.alone", replicas=[[gone]])

        browser.get(url)
        wait = WebDriverWait(browser, TIMEOUT)
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#brokers tr")) == 4)
        for broker_id in range(3):
            cells = texts_of(browser, f'#brokers tr[data-broker="{broker_id}"] td')
            assert cells[0] == f"broker {broker_id}" and cells[1].startswith("alive"), cells
            assert cells[2] == RACKS[broker_id], cells
            assert ("controller" in cells[1]) == (broker_id == controller), cells
            assert cells[3].startswith("PLAINTEXT 127.0.0.1:"), cells
            assert cells[4] == ("this page" if broker_id == page else urls[broker_id]), cells
        for partition in (0, 1):
            expected = cluster.partition(topic, partition)
            cells = texts_of(browser, f'#cluster-partitions tr[data-cluster-topic="{topic}"]'
                                      f'[data-partition="{partition}"] td')
            assert cells[1:3] == [str(partition), str(expected.leader)], cells
            assert cells[3] == ", ".join(map(str, expected.replicas)), cells
            assert sorted(map(int, cells[4].split(", "))) == sorted(expected.isrs), cells
            assert cells[5] == "in sync", cells
        # the group, held by another broker, with its coordinator and lag
        wait.until(lambda d: text_of(d, f'[data-coordinator="{group}"]') == f"broker {coordinator}")
        wait.until(lambda d: text_of(d, f'[data-group-lag="{group}"]') is not None)
        assert "Stable" in browser.find_element(By.ID, "groups").text
        summary = browser.find_element(By.ID, "cluster-summary").text
        assert summary.startswith("3 of 3 broker(s) alive · controller broker"), summary
        check_picture(browser, tmp_path / "cluster.png",
                      ["section:has(#brokers)", f'#brokers tr[data-broker="{controller}"]',
                       f'#cluster-partitions tr[data-cluster-topic="{topic}"]',
                       f'[data-coordinator="{group}"]'])
    finally:
        member.close()

    # a broker other than this page's dies: not registered, its partitions under-replicated,
    # the one it alone held offline
    cluster.brokers[gone].kill()
    wait = WebDriverWait(browser, 3 * TIMEOUT)
    wait.until(lambda d: "not registered" in (text_of(d, f'#brokers tr[data-broker="{gone}"]')
                                              or ""))
    def row(partition: int) -> list[str]:
        return texts_of(browser, f'#cluster-partitions tr[data-cluster-topic="{topic}"]'
                                 f'[data-partition="{partition}"] td')

    for partition in (0, 1):
        wait.until(lambda _, p=partition: row(p)[5:] == ["under-replicated"])
        cells = row(partition)
        assert str(gone) not in cells[4].split(", ") and str(gone) in cells[3], cells
        assert int(cells[2]) != gone, cells
    # the topic's two, and the internal topics' partitions with a replica there
    assert int(browser.find_element(By.ID, "partition-summary").get_attribute("data-under")
               or 0) >= 2
    offline = f'#cluster-partitions tr[data-cluster-topic="{alone}"] td'
    # Kafka's controller leaves it without a leader, its last ISR member in the ISR
    wait.until(lambda _: texts_of(browser, offline)[5:] == ["offline"])
    assert texts_of(browser, offline)[2:5] == ["none", str(gone), str(gone)]
    assert browser.find_element(By.ID, "partition-summary").get_attribute("data-offline") == "1"
    assert browser.find_element(By.ID, "cluster-summary").text.startswith(
        "2 of 3 broker(s) alive")
    check_picture(browser, tmp_path / "cluster-after-kill.png",
                  ["section:has(#brokers)", f'#brokers tr[data-broker="{gone}"]'])


def test_a_peer_that_does_not_answer_is_listed() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    found = _groups_of(ClusterBroker(2, True, False, None, (), f"http://127.0.0.1:{port}/"))
    assert found["broker_id"] == 2 and found["groups"] is None
    assert "refused" in found["error"].lower(), found
