"""The status page's message browser (``/messages.json``) on an in-process broker.

Records produced by a real client (librdkafka) come back as the page shows them: JSON values
pretty-printed, binary keys, values and headers escaped, timestamps, by offset and by time,
in bounded pages. With a SASL listener the browser asks for one of the broker's users
(HTTP basic auth: PLAIN's JAAS users and SCRAM credentials) and their READ ACL on the topic:
401 without a valid login, 403 without the ACL. The shown forms themselves are checked on
their own (``show``).

In headless Chromium (``test_status_page``'s driver), the page's Messages section opens on a
click of the topic's name and shows the same records through the DOM (the JSON value's
indented lines, the escaped binary, the headers, the UTC timestamps), pages on with "next
page" and starts at a time; its screenshot is checked as the status page's are (saved in
the test's tmp dir).
"""

from __future__ import annotations

import base64
import datetime
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_fixtures import TIMEOUT, confluent_producer, create_topic, topic
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from security_support import plain_jaas
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait
from test_status_page import browser, check_picture, click, text_of, texts_of

from sparklog.broker.embedded import EmbeddedBroker
from sparklog.broker.monitoring.browser import MAX_RECORDS, SHOWN_CHARS, show

__all__ = ["browser", "topic"]

ORDER = {"id": 7, "items": [{"sku": "A-1", "qty": 2}], "note": "café"}
T0 = 1_790_000_000_000  # a fixed CreateTime, ms


@pytest.fixture(scope="module")
def monitored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path_factory.mktemp("browser") / "data",
                        {"metrics.listener": "http://127.0.0.1:0"}) as broker:
        yield broker


def get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, dict[str, str], Any]:
    """(status, headers, JSON body) of a GET, errors included."""
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def messages(broker: EmbeddedBroker, query: str, auth: tuple[str, str] | None = None
             ) -> tuple[int, dict[str, str], Any]:
    assert broker.metrics_url is not None
    return get(f"{broker.metrics_url}messages.json?{query}", auth)


def produce_samples(bootstrap: str, topic: str, **conf: Any) -> None:
    """Three records at T0, T0+1000, T0+2000: JSON with headers, binary, plain text."""
    producer = confluent_producer(bootstrap, **conf)
    producer.produce(topic, key=b"order-7", value=json.dumps(ORDER).encode(), timestamp=T0,
                     headers=[("trace", b"\x00\x01\xfe"), ("source", b"web")])
    producer.produce(topic, key=b"\xff\x00k", value=b"\x00\x01binary\n", timestamp=T0 + 1000)
    producer.produce(topic, key=None, value=b"plain text", timestamp=T0 + 2000)
    assert producer.flush(TIMEOUT) == 0


def test_the_browser_shows_produced_records(monitored: EmbeddedBroker, topic: str) -> None:
    create_topic(monitored.bootstrap, topic, partitions=1)
    produce_samples(monitored.bootstrap, topic)

    status, _, page = messages(monitored, f"topic={topic}&partition=0&offset=0")
    assert status == 200, page
    assert (page["log_start_offset"], page["high_watermark"], page["next_offset"]) == (0, 3, 3)
    first, second, third = page["records"]
    assert (first["offset"], first["timestamp"], first["timestamp_type"]) == \
        (0, T0, "CreateTime")
    assert first["key"] == {"text": "order-7", "kind": "text", "size": 7, "truncated": False}
    assert first["value"]["kind"] == "json"
    assert first["value"]["text"] == json.dumps(ORDER, indent=2, ensure_ascii=False)
    assert [(name, shown["text"], shown["kind"]) for name, shown in first["headers"]] == \
        [("trace", "\\x00\\x01\\xfe", "binary"), ("source", "web", "text")]
    assert (second["key"]["text"], second["key"]["kind"]) == ("\\xff\\x00k", "binary")
    assert (second["value"]["text"], second["value"]["kind"]) == \
        ("\\x00\\x01binary\\n", "binary")
    assert third["key"] == {"text": "null", "kind": "null", "size": -1, "truncated": False}
    assert third["value"]["text"] == "plain text" and third["headers"] == []

    # pages: a bounded one, then from where it stopped; by time; an offset past the end
    _, _, page = messages(monitored, f"topic={topic}&partition=0&offset=0&limit=2")
    assert [r["offset"] for r in page["records"]] == [0, 1] and page["next_offset"] == 2
    _, _, page = messages(monitored, f"topic={topic}&partition=0&offset=2&limit=2")
    assert [r["offset"] for r in page["records"]] == [2] and page["next_offset"] == 3
    _, _, page = messages(monitored, f"topic={topic}&partition=0&timestamp={T0 + 500}")
    assert [r["offset"] for r in page["records"]] == [1, 2]
    _, _, page = messages(monitored, f"topic={topic}&partition=0&timestamp={T0 + 5000}")
    assert page["records"] == [] and page["start_offset"] == 3
    _, _, page = messages(monitored, f"topic={topic}&partition=0&offset=99")
    assert page["records"] == [] and page["start_offset"] == 3


def test_a_page_is_bounded(monitored: EmbeddedBroker, topic: str) -> None:
    create_topic(monitored.bootstrap, topic, partitions=1)
    producer = confluent_producer(monitored.bootstrap, **{"linger.ms": 50})
    for i in range(MAX_RECORDS + 30):
        producer.produce(topic, value=str(i).encode())
    assert producer.flush(TIMEOUT) == 0
    _, _, page = messages(monitored, f"topic={topic}&partition=0&offset=5&limit=100000")
    assert [r["offset"] for r in page["records"]] == list(range(5, 5 + MAX_RECORDS))
    assert page["next_offset"] == 5 + MAX_RECORDS
    _, _, page = messages(monitored, f"topic={topic}&partition=0&limit=0")
    assert [r["offset"] for r in page["records"]] == [0]


def test_what_the_browser_cannot_read(monitored: EmbeddedBroker, topic: str) -> None:
    create_topic(monitored.bootstrap, topic, partitions=1)
    status, _, answer = messages(monitored, f"topic={topic}&partition=3")
    assert status == 404 and answer["error"] == f"no replica of {topic}-3 on broker 0"
    status, _, answer = messages(monitored, f"topic={topic}&partition=zero")
    assert status == 400 and "partition=P" in answer["error"]
    status, _, answer = messages(monitored, "partition=0")
    assert status == 400
    # no login is asked without a SASL listener
    assert monitored.metrics_url is not None
    assert get(monitored.metrics_url + "status.json")[2]["login_required"] is False


ADMIN = ("admin", "admin-secret")
ALICE = ("alice", "alice-secret")  # PLAIN, READ on the topic
BOB = ("bob", "bob-secret")  # PLAIN, no ACL
CAROL = ("carol", "carol-secret")  # SCRAM-SHA-256 only, READ on the topic


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    config = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(dict([ADMIN, ALICE,
                                                                               BOB])),
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin",
        "metrics.listener": "http://127.0.0.1:0",
    }
    with EmbeddedBroker(tmp_path / "data", config) as broker:
        yield broker


@pytest.fixture
def secured_topic(secured: EmbeddedBroker, topic: str) -> str:
    """``topic`` with the sample records, ALICE and CAROL allowed to READ it."""
    sasl = f"127.0.0.1:{secured.listeners['SASL_PLAINTEXT']}"
    as_admin = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                "sasl.username": ADMIN[0], "sasl.password": ADMIN[1]}
    admin = AdminClient({"bootstrap.servers": sasl, **as_admin})
    admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        CAROL[0], ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
        CAROL[1].encode())])[CAROL[0]].result(TIMEOUT)
    for who in (ALICE, CAROL):
        binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                             f"User:{who[0]}", "*", AclOperation.READ, AclPermissionType.ALLOW)
        admin.create_acls([binding])[binding].result(TIMEOUT)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT)
    produce_samples(sasl, topic, **as_admin)
    return topic


def test_the_browser_needs_a_sasl_user_with_read(secured: EmbeddedBroker,
                                                 secured_topic: str) -> None:
    topic = secured_topic
    query = f"topic={topic}&partition=0"

    status, headers, answer = messages(secured, query)
    assert status == 401 and headers["WWW-Authenticate"].startswith('Basic realm="sparklog')
    assert "SASL users" in answer["error"]
    # the page's own requests: a challenge the browser leaves to the page's login fields
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(urllib.request.Request(
            f"{secured.metrics_url}messages.json?{query}",
            headers={"X-Requested-With": "status-page"}), timeout=TIMEOUT)
    assert refused.value.code == 401
    assert refused.value.headers["WWW-Authenticate"].startswith("PageBasic ")
    assert "SASL users" in answer["error"]
    for wrong in [("alice", "bob-secret"), ("carol", "wrong"), ("nobody", "x")]:
        assert messages(secured, query, wrong)[0] == 401, wrong
    status, _, answer = messages(secured, query, BOB)
    assert status == 403 and answer["error"] == f"User:bob may not READ topic {topic}"
    for who in (ALICE, CAROL, ADMIN):
        status, _, page = messages(secured, query, who)
        assert status == 200 and [r["offset"] for r in page["records"]] == [0, 1, 2], who
    # the rest of the page stays open, and says a login is needed
    assert secured.metrics_url is not None
    status, _, data = get(secured.metrics_url + "status.json")
    assert status == 200 and data["login_required"] is True


def test_shown_forms() -> None:
    assert show(b'[1, {"a": null}]').text == show(b'[1,{"a":null}]').text
    assert show(b'[1,{"a":null}]').text == '[\n  1,\n  {\n    "a": null\n  }\n]'
    assert show(b"{not json").kind == "text"
    assert show(b"42").kind == "text"  # a bare JSON scalar is shown as the text it is
    assert (show(b"tab\tand\nlines").kind, show(b"bell\x07").kind) == ("text", "binary")
    assert show(b"bell\x07").text == "bell\\x07"
    assert show("naïve".encode()).text == "naïve"
    assert show(b"<b>&amp;</b>").text == "<b>&amp;</b>"  # text: the page sets it as text
    long = show(b"x" * (SHOWN_CHARS + 10))
    assert long.truncated and len(long.text) == SHOWN_CHARS and long.size == SHOWN_CHARS + 10


def _utc(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def test_the_message_browser_in_chromium(monitored: EmbeddedBroker, browser: WebDriver,
                                         topic: str, tmp_path: Path) -> None:
    create_topic(monitored.bootstrap, topic, partitions=1)
    produce_samples(monitored.bootstrap, topic)
    assert monitored.metrics_url is not None
    browser.get(monitored.metrics_url)
    wait = WebDriverWait(browser, TIMEOUT)
    link = f'#topics tr[data-topic="{topic}"] a'
    wait.until(lambda d: text_of(d, link) == topic)
    click(browser, link)
    row = '#messages tr[data-offset="{}"]'.format
    wait.until(lambda d: text_of(d, row(2)) is not None)

    def content(selector: str) -> list[str]:
        return [e.get_attribute("textContent") or ""
                for e in browser.find_elements(By.CSS_SELECTOR, selector)]

    cells = texts_of(browser, row(0) + " td")
    assert cells[:3] == ["0", f"{_utc(T0)} CreateTime", "order-7"], cells
    assert content(row(0) + " pre.json") == [json.dumps(ORDER, indent=2, ensure_ascii=False)]
    assert content(row(0) + " [data-header]") == ["trace: \\x00\\x01\\xfe", "source: web"]
    assert content(row(0) + " [data-header] pre") == ["\\x00\\x01\\xfe", "web"]
    assert content(row(1) + " pre.binary") == ["\\xff\\x00k", "\\x00\\x01binary\\n"]
    assert content(row(2) + " pre.null") == ["null"]
    assert content(row(2) + " pre.text") == ["plain text"]
    assert "offsets 0 to 2 of [0, 3)" in browser.find_element(By.ID, "browse-status").text
    browser.execute_script("document.getElementById('browse').scrollIntoView()")
    check_picture(browser, tmp_path / "message-browser.png",
                  ["section:has(#messages)", row(0) + " pre.json", row(1) + " pre.binary",
                   row(0) + " [data-header]"])

    # two at a time, then the next page; then from a time
    limit = browser.find_element(By.ID, "browse-limit")
    limit.clear()
    limit.send_keys("2")
    browser.find_element(By.ID, "browse-show").click()
    wait.until(lambda d: text_of(d, row(2)) is None and text_of(d, row(1)) is not None)
    browser.find_element(By.ID, "browse-next").click()
    wait.until(lambda d: text_of(d, row(0)) is None and text_of(d, row(2)) is not None)
    assert not browser.find_element(By.ID, "browse-next").is_enabled()
    browser.execute_script(
        "const from = document.getElementById('browse-from'); from.value = 'timestamp';"
        "from.dispatchEvent(new Event('change'));"
        "document.getElementById('browse-time').value = arguments[0];",
        _utc(T0 + 1000).replace(" ", "T")[:19])
    browser.find_element(By.ID, "browse-show").click()
    wait.until(lambda d: text_of(d, row(1)) is not None and text_of(d, row(2)) is not None
               and text_of(d, row(0)) is None)


def test_the_pages_login_in_chromium(secured: EmbeddedBroker, secured_topic: str,
                                     browser: WebDriver, tmp_path: Path) -> None:
    """The Messages section asks for a user when the broker has SASL listeners, refuses
    without one or without READ, and shows the records to a user with READ."""
    assert secured.metrics_url is not None
    browser.get(secured.metrics_url)
    wait = WebDriverWait(browser, TIMEOUT)
    wait.until(lambda d: d.find_element(By.ID, "browse-user").is_displayed())
    link = f'#topics tr[data-topic="{secured_topic}"] a'
    wait.until(lambda d: text_of(d, link) == secured_topic)
    shown = '#messages tr[data-offset="0"] pre.json'

    def attempt(user: str, password: str) -> str:
        for field, value in (("browse-user", user), ("browse-password", password)):
            browser.find_element(By.ID, field).clear()
            browser.find_element(By.ID, field).send_keys(value)
        before = browser.find_element(By.ID, "browse-status").text
        click(browser, link)
        wait.until(lambda d: d.find_element(By.ID, "browse-status").text not in
                   (before, "reading…"))
        return browser.find_element(By.ID, "browse-status").text

    assert attempt("", "") == "401: log in as one of the broker's SASL users"
    assert attempt(*BOB) == f"403: User:bob may not READ topic {secured_topic}"
    assert not browser.find_element(By.ID, "messages").is_displayed()
    assert attempt(*CAROL).startswith(f"{secured_topic}-0: offsets 0 to 2")
    assert json.loads(text_of(browser, shown) or "") == ORDER
    check_picture(browser, tmp_path / "message-browser-login.png",
                  ["section:has(#messages)", "#browse-login", shown])
