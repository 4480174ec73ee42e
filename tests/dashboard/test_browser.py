"""The dashboard in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``) driven by selenium against a live name server and broker.

With ``DASHBOARD_SCREENSHOTS=1`` the main pages are saved to ``docs/screenshots/``.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from client import Message, Producer, PullConsumer, PullStatus
from client.admin import MQAdmin
from dashboard.auth import add_user
from protocol.message import MessageQueue
from tests.integration.cluster import BIN, Cluster, free_port, wait_port
from tests.waits import wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
TOPIC = "BrowserTopic"
GROUP = "browser-group"
USER, PASSWORD = "admin", "browser-pass-1"

pytest.importorskip("selenium", reason="selenium is not installed")
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip(f"needs {CHROMIUM} and {CHROMEDRIVER} (Debian: apt-get install chromium "
                "chromium-driver; `make test` does it as root)", allow_module_level=True)

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import (  # noqa: E402
    StaleElementReferenceException,
    WebDriverException,
)
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.remote.webelement import WebElement  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    # Chromium's profile in the test's own directory; the directory of its
    # singleton socket (made under TMPDIR, left behind after quit) in a short
    # one of its own, removed after: a Unix socket's path holds at most 107
    # bytes, and a worker's tmp_path (.../pytest-N/popen-gwK/test_...0/) with
    # Chromium's "org.chromium.Chromium.XXXXXX/SingletonSocket" is longer, so
    # Chromium exited at start
    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,860", "--disable-extensions", "--no-first-run",
                f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(arg)
    with tempfile.TemporaryDirectory(prefix="chr-") as short_tmp:
        service = Service(str(CHROMEDRIVER), env={**os.environ, "TMPDIR": short_tmp})
        driver = webdriver.Chrome(service=service, options=options)
        driver.set_page_load_timeout(20)
        try:
            yield driver
        finally:
            driver.quit()


@pytest.fixture
def live(cluster: Cluster) -> Iterator[tuple[str, str, str]]:
    """(dashboard URL, name server, broker address): ``mqdashboard`` as a process."""
    ns = cluster.namesrv()
    broker = cluster.broker("broker-a", ns.addr)
    port = free_port(1)
    users = cluster.root / "dashboard-users"
    add_user(users, USER, PASSWORD)
    log = open(cluster.root / "dashboard.log", "wb")
    proc = subprocess.Popen([str(BIN / "mqdashboard"), "-n", ns.addr, "--port", str(port),
                             "--users-file", str(users)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    log.close()
    try:
        wait_port(port, 15, proc=proc)
        yield f"http://127.0.0.1:{port}", ns.addr, broker.addr
    finally:
        proc.terminate()
        try:
            assert proc.wait(10) == 0, (cluster.root / "dashboard.log").read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = (cluster.root / "dashboard.log").read_text()
    assert "Traceback" not in text, text


def replaced(old: WebElement) -> bool:
    """Whether ``old`` left the document. Mid-navigation, Chromium may answer
    "Node with given id does not belong to the document" instead of a stale
    element reference: that is the same news."""
    try:
        old.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in (exc.msg or ""):
            return True
        raise
    return False


def click_and_load(driver: WebDriver, element: WebElement) -> None:
    """Click what loads a new page, and wait until the new page has replaced
    the old one (a click does not wait for the navigation it starts)."""
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    wait = WebDriverWait(driver, 15)
    wait.until(lambda _: replaced(old))
    wait.until(lambda drv: drv.execute_script("return document.readyState") == "complete")


def shot(driver: WebDriver, name: str) -> None:
    if os.environ.get("DASHBOARD_SCREENSHOTS") == "1":
        SHOTS.mkdir(parents=True, exist_ok=True)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, max(600, min(int(height) + 40, 1400)))
        driver.save_screenshot(str(SHOTS / f"{name}.png"))
        driver.set_window_size(1280, 860)


async def send_and_consume(ns: str) -> None:
    """8 messages over 4 queues (keys order-0..7); the group consumes 5 of them:
    queues 0 and 1 wholly, one message of queue 2."""
    async with Producer("browser-producer", ns) as producer:
        for i in range(8):
            await producer.send(Message(TOPIC, f"order {i} paid".encode(), tags="paid",
                                        keys=f"order-{i}"), MessageQueue(TOPIC, "broker-a", i % 4))
    async with PullConsumer(GROUP, ns) as consumer:
        for qid, take in ((0, 2), (1, 2), (2, 1), (3, 0)):
            mq = MessageQueue(TOPIC, "broker-a", qid)
            r = await consumer.pull(mq, "*", 0, take) if take else None
            if r is not None:
                assert r.pull_status is PullStatus.FOUND and len(r.msg_found_list) == take
            await consumer.update_consume_offset(mq, take)
    async with MQAdmin(ns) as admin:  # the index is built after the put: wait for it

        async def indexed() -> bool:
            return len(await admin.query_by_key(TOPIC, "order-5")) == 1

        await wait_until(indexed, 10, "order-5 in the index")


def test_dashboard_in_chromium(live: tuple[str, str, str], browser: WebDriver) -> None:
    url, ns, broker_addr = live
    d = browser

    d.get(url + "/")  # sent to the login form first
    assert d.current_url.startswith(f"{url}/login")
    d.find_element(By.ID, "login-user").send_keys(USER)
    d.find_element(By.ID, "login-password").send_keys(PASSWORD)
    click_and_load(d, d.find_element(By.ID, "login"))
    assert d.current_url == f"{url}/" and d.find_element(By.ID, "user").text == USER
    assert broker_addr in d.find_element(By.ID, "brokers").text
    assert "MASTER" in d.find_element(By.ID, "brokers").text

    # create the topic through the form
    d.get(url + "/topics")
    d.find_element(By.ID, "topic").send_keys(TOPIC)
    Select(d.find_element(By.ID, "target")).select_by_value(f"broker:{broker_addr}")
    for field in ("readQueueNums", "writeQueueNums"):
        d.find_element(By.ID, field).clear()
        d.find_element(By.ID, field).send_keys("4")
    click_and_load(d, d.find_element(By.ID, "create"))
    assert d.current_url.startswith(f"{url}/topics/{TOPIC}")
    assert "created or updated" in d.find_element(By.ID, "notice").text

    trio.run(send_and_consume, ns)

    d.get(url + "/")  # a second view: the write rate since the first
    assert d.find_element(By.ID, "brokers").text.count("/s") == 1
    shot(d, "cluster")

    d.get(f"{url}/topics/{TOPIC}")
    assert d.find_element(By.ID, "total").text == "8"
    assert len(d.find_elements(By.CSS_SELECTOR, "#queues tbody tr")) == 4
    shot(d, "topic")
    d.get(f"{url}/topics")
    assert TOPIC in d.find_element(By.ID, "topic-list").text
    shot(d, "topics")

    # find a message by key
    d.get(url + "/messages")
    d.find_element(By.ID, "key-topic").send_keys(TOPIC)
    d.find_element(By.ID, "key").send_keys("order-5")
    click_and_load(d, d.find_element(By.ID, "key-search"))
    results = d.find_element(By.ID, "results")
    assert "order 5 paid" in results.text and "order-5" in results.text
    assert len(d.find_elements(By.CSS_SELECTOR, "#results article.msg")) == 1
    shot(d, "messages")
    click_and_load(d, d.find_element(By.ID, "toggle-body"))
    assert "6f 72 64 65 72 20 35" in d.find_element(By.CSS_SELECTOR, "pre.body").text

    # the consumer lag
    d.get(url + "/groups")
    assert GROUP in d.find_element(By.ID, "groups").text
    shot(d, "groups")
    click_and_load(d, d.find_element(By.LINK_TEXT, GROUP))
    assert d.find_element(By.ID, "total-lag").text == "3"
    lags = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#lag tbody td.lag")]
    assert lags == ["0", "0", "1", "2"]
    shot(d, "group-lag")
