"""The broker's status page in a real headless browser.

Debian's ``chromium`` is driven through its ``chromedriver`` with selenium (``make test``
installs both with apt when they are missing, as it installs Java): selenium waits on what
the page shows without a reload, which is what "refreshes by itself" means. The page is
loaded once; it must show a topic and a group the test made, then the group's lag must
change by itself after the test produces more. Screenshots of both states are saved in the
test's tmp dir.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_fixtures import (
    TIMEOUT,
    committed_member,
    create_topic,
    produce_per_partition,
    start_broker,
    topic,
)
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from sparklog.broker.process import BrokerProcess

__all__ = ["topic"]

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
# Without the background-networking flags Chromium tries to reach Google's services, which a
# closed network refuses (and which a test has no business calling anyway).
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--window-size=1280,1000")


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        pytest.fail("Debian's chromium and chromium-driver are missing: `make test` installs "
                    "them (or: apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def monitored(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = start_broker(tmp_path, {"metrics.listener": "http://127.0.0.1:0"})
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def _text(driver: WebDriver, selector: str) -> str | None:
    found = driver.find_elements(By.CSS_SELECTOR, selector)
    return found[0].text if found else None


def test_the_page_shows_a_topic_and_a_group_and_follows_its_lag(
        monitored: BrokerProcess, browser: WebDriver, topic: str, tmp_path: Path) -> None:
    create_topic(monitored.bootstrap, topic, partitions=2)
    produce_per_partition(monitored.bootstrap, topic, {0: 40, 1: 10})
    group = f"{topic}.billing"
    member = committed_member(monitored.bootstrap, topic, group, {0: 30, 1: 10})
    try:
        assert monitored.metrics_url is not None
        browser.get(monitored.metrics_url)
        wait = WebDriverWait(browser, TIMEOUT)
        row = f'#topics tr[data-topic="{topic}"][data-partition="0"]'
        wait.until(lambda d: _text(d, row) is not None)
        cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, row + " td")]
        assert cells[:5] == [topic, "0", "0", "40", cells[4]], cells  # name, partition, offsets
        assert cells[7:] == ["0", "0", "0"], "leader, replicas and ISR: this node"
        lag = f'[data-group-lag="{group}"]'
        wait.until(lambda d: _text(d, lag) == "10")
        assert group in browser.find_element(By.ID, "groups").text
        assert "Stable" in browser.find_element(By.ID, "groups").text
        browser.save_screenshot(str(tmp_path / "status-page.png"))

        produce_per_partition(monitored.bootstrap, topic, {0: 25})
        wait.until(lambda d: _text(d, lag) == "35")  # no reload: the page refreshed itself
        assert _text(browser, f'td.lag[data-group="{group}"][data-partition="0"]') == "35"
        # the produce chart has drawn the rate between two samples of the history
        WebDriverWait(browser, 3 * TIMEOUT).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-records polyline"))
        browser.save_screenshot(str(tmp_path / "status-page-after.png"))
    finally:
        member.close()
