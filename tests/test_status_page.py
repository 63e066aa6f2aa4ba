"""The broker's status page in a real headless browser.

Debian's ``chromium`` is driven through its ``chromedriver`` with selenium (``make test``
installs both with apt when they are missing, as it installs Java): selenium waits on what
the page shows without a reload, which is what "refreshes by itself" means. The page is
loaded once; it must show a topic and a group the test made, and the metrics its member
(librdkafka) pushes under the broker's telemetry subscription (KIP-714), then the group's
lag must change by itself after the test produces more.

The screenshots of both states (saved in the test's tmp dir) are read back
(``png_support``) and checked as a person would look at them: the picture has the window's
size, is not blank, and shows each section where the page laid it out, in its own
background with something drawn in it (the topic's row, the group's lag, the chart's line in
its colour). Chromium's ``--dump-dom`` of the same page, loaded without selenium, must hold
the same section headings and the test's topic and group: the page renders the same for
any browser, not only for the driver.
"""
from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import confluent_kafka
import pytest
from broker_fixtures import (
    TIMEOUT,
    committed_member,
    create_topic,
    produce_per_partition,
    start_broker,
    topic,
)
from png_support import read_png
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
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
         "--window-size=1280,2400")


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
    proc = start_broker(tmp_path, {"metrics.listener": "http://127.0.0.1:0",
                                   # every client pushes its metrics each second (KIP-714)
                                   "client.telemetry.default.metrics": "*",
                                   "client.telemetry.default.interval.ms": "1000"})
    try:
        yield proc
    finally:
        assert proc.stop() == 0


def text_of(driver: WebDriver, selector: str) -> str | None:
    """The text of the first element ``selector`` finds; None without one (or while the
    page's redraw replaced it)."""
    found = driver.find_elements(By.CSS_SELECTOR, selector)
    try:
        return found[0].text if found else None
    except StaleElementReferenceException:
        return None


def texts_of(driver: WebDriver, selector: str) -> list[str]:
    """The rendered text of every element ``selector`` finds, read in one step of the page
    (a redraw cannot replace them halfway)."""
    return driver.execute_script(  # type: ignore[no-any-return]
        "return Array.from(document.querySelectorAll(arguments[0]), (n) => n.innerText)",
        selector)


def click(driver: WebDriver, selector: str) -> None:
    """Click the first element ``selector`` finds, in one step of the page."""
    driver.execute_script("document.querySelector(arguments[0]).click()", selector)


MANY_COLOURS = 200
"""Distinct colours a screenshot of the page has at least: text is anti-aliased, so any
page with words on it has hundreds; a blank or one-colour picture has a handful."""
INKED = 8
"""Distinct colours at least in the box of an element that shows text or a line."""
LINE_PAD = 3
"""Device pixels around an SVG line's box where its stroke may be drawn."""
NEAR = 48
"""How far (per channel) a pixel of a line may be from its stroke colour (anti-aliasing)."""

_BOX = """const node = document.querySelector(arguments[0]);
const r = node.getBoundingClientRect();
const colour = (c) => (c.match(/\\d+/g) || []).slice(0, 4).map(Number);
return [r.left, r.top, r.right, r.bottom, colour(getComputedStyle(node).backgroundColor),
        colour(getComputedStyle(node).stroke)];"""


@dataclass(frozen=True)
class Box:
    """Where an element is in the screenshot (device pixels), and its own colours."""

    left: int
    top: int
    right: int
    bottom: int
    background: tuple[int, ...]  # r, g, b (and a when not opaque: then no background)
    stroke: tuple[int, ...]


def _box(driver: WebDriver, selector: str, ratio: float) -> Box:
    left, top, right, bottom, background, stroke = driver.execute_script(_BOX, selector)
    return Box(round(left * ratio), round(top * ratio), round(right * ratio),
               round(bottom * ratio), tuple(background), tuple(stroke))


def _screenshot(driver: WebDriver, selectors: Sequence[str]
                ) -> tuple[bytes, dict[str, Box], float]:
    """A screenshot, with where each selector's element was on it: taken again while the
    page's two-second redraw moved one of them meanwhile."""
    ratio = driver.execute_script("return window.devicePixelRatio")
    for _ in range(5):
        before = {selector: _box(driver, selector, ratio) for selector in selectors}
        png = driver.get_screenshot_as_png()
        if before == {selector: _box(driver, selector, ratio) for selector in selectors}:
            return png, before, ratio
    raise AssertionError(f"the page kept moving {list(selectors)}")


def check_picture(driver: WebDriver, path: Path, inked: Sequence[str],
                   lines: Sequence[str] = ()) -> None:
    """Take a screenshot (saved at ``path``) and check what it shows: the viewport's size,
    many colours, each selector of ``inked`` inside the picture with something drawn in its
    box and (for elements with a background of their own) that background around it, and
    each SVG line of ``lines`` drawn in its stroke colour."""
    png, boxes, ratio = _screenshot(driver, [*inked, *lines])
    path.write_bytes(png)
    picture = read_png(png)
    width, height = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    assert (picture.width, picture.height) == (round(width * ratio), round(height * ratio))
    assert len(picture.colours()) >= MANY_COLOURS, "a blank screenshot"
    for selector in inked:
        box = boxes[selector]
        assert 0 <= box.left < box.right <= picture.width and \
            0 <= box.top < box.bottom <= picture.height, f"{selector} outside the picture"
        drawn = picture.colours(box.left, box.top, box.right, box.bottom)
        assert len(drawn) >= INKED, f"nothing drawn in {selector}: {sorted(drawn)}"
        if len(box.background) == 3:  # opaque: its inner edge (padding) shows it
            assert picture.pixel(box.left + 6, (box.top + box.bottom) // 2) == \
                box.background, f"{selector} not in its background {box.background}"
    for selector in lines:  # a flat line's box has no height: look around it
        box = boxes[selector]
        assert len(box.stroke) == 3, f"{selector} has no stroke colour: {box.stroke}"
        around = picture.colours(box.left - LINE_PAD, box.top - LINE_PAD,
                                 box.right + LINE_PAD, box.bottom + LINE_PAD)
        assert any(max(abs(a - b) for a, b in zip(c, box.stroke, strict=True)) <= NEAR
                   for c in around), f"{selector} not drawn in its colour {box.stroke}"


SECTIONS = ["header", *(f"section:has(#{inside})" for inside in
                        ("chart-records", "topics", "groups", "clients", "telemetry",
                         "cleaner"))]
"""The page's header and its six sections (by what each holds)."""


def _headings(html: str) -> list[str]:
    """The text of every h1, h2 and h3 of ``html``, without their small text and labels."""

    class Headings(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[str] = []
            self._depth = 0  # inside a heading
            self._aside = False  # inside a heading's small text or checkbox label

        def handle_starttag(self, tag: str, attrs: object) -> None:
            if tag in ("h1", "h2", "h3"):
                self._depth += 1
                self.found.append("")
            elif tag in ("small", "label") and self._depth:
                self._aside = True

        def handle_endtag(self, tag: str) -> None:
            if tag in ("h1", "h2", "h3"):
                self._depth -= 1
                self.found[-1] = " ".join(self.found[-1].split())
            elif tag in ("small", "label"):
                self._aside = False

        def handle_data(self, data: str) -> None:
            if self._depth and not self._aside:
                self.found[-1] += data

    parser = Headings()
    parser.feed(html)
    return parser.found


def _dump_dom(url: str) -> str:
    """The page's DOM as plain headless Chromium leaves it (no driver), after its scripts
    had a few seconds of virtual time to fetch the status and draw it."""
    result = subprocess.run([str(CHROMIUM), *FLAGS, "--virtual-time-budget=5000",
                             "--dump-dom", url], capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


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
        wait.until(lambda d: text_of(d, row) is not None)
        cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, row + " td")]
        assert cells[:5] == [topic, "0", "0", "40", cells[4]], cells  # name, partition, offsets
        assert cells[7:] == ["0", "0", "0"], "leader, replicas and ISR: this node"
        lag = f'[data-group-lag="{group}"]'
        wait.until(lambda d: text_of(d, lag) == "10")
        assert group in browser.find_element(By.ID, "groups").text
        assert "Stable" in browser.find_element(By.ID, "groups").text
        # the group's member is a librdkafka client, which names itself (KIP-511)
        client = '#clients tr[data-software="confluent-kafka-python"]'
        wait.until(lambda d: text_of(d, client) is not None)
        software = [c.text for c in browser.find_elements(By.CSS_SELECTOR, client + " td")]
        assert software[1].endswith("-rdkafka-" + confluent_kafka.libversion()[0]), software
        assert software[2] == "PLAINTEXT" and int(software[3]) >= 1, software
        # and pushes its metrics (KIP-714): its row shows the partitions it was assigned
        pushed = ('#telemetry td.metrics span[data-metric='
                  '"org.apache.kafka.consumer.coordinator.assigned.partitions"]')
        wait.until(lambda d: text_of(d, pushed) == "consumer.coordinator.assigned.partitions 2")
        telemetry = f'#telemetry tr[data-telemetry-client]:has({pushed.split(" ", 1)[1]})'
        cells = [c.text for c in browser.find_elements(By.CSS_SELECTOR, telemetry + " td")]
        assert cells[1].startswith("confluent-kafka-python\n") and cells[2] == "127.0.0.1", cells
        assert cells[3] == "1 s" and int(cells[4]) >= 1 and int(cells[7]) >= 4, cells
        check_picture(browser, tmp_path / "status-page.png",
                       [*SECTIONS, row, lag, client, telemetry])

        # the same page without the driver: the same headings, the same topic and group
        dumped = _dump_dom(monitored.metrics_url)
        headings = _headings(dumped)
        assert {"sparklog broker", "Produce and consume", "Topics", "Consumer groups",
                "Clients", "Client telemetry", "Log cleaner"} <= set(headings), headings
        shown = browser.find_element(By.TAG_NAME, "body").text
        assert [h for h in headings if h not in shown] == [], "headings the driver's page lacks"
        assert f'data-topic="{topic}"' in dumped and f'data-group-lag="{group}"' in dumped

        produce_per_partition(monitored.bootstrap, topic, {0: 25})
        wait.until(lambda d: text_of(d, lag) == "35")  # no reload: the page refreshed itself
        assert text_of(browser, f'td.lag[data-group="{group}"][data-partition="0"]') == "35"
        # the produce chart has drawn the rate between two samples of the history
        WebDriverWait(browser, 3 * TIMEOUT).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#chart-records polyline"))
        check_picture(browser, tmp_path / "status-page-after.png", [*SECTIONS, row, lag],
                       lines=["#chart-records polyline"])
    finally:
        member.close()
