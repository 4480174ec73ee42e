"""Every dashboard page against a live name server and broker, without a browser."""

from __future__ import annotations

import html
import time
from dataclasses import dataclass
from urllib.parse import quote

import pytest
import trio

from client import Message, Producer, PullConsumer
from client.admin import MQAdmin
from protocol.message import MessageQueue
from tests.dashboard.web import Page, dashboard
from tests.integration.cluster import Cluster, Daemon
from tests.waits import routed, wait_until

TOPIC = "DashPages"
GROUP = "dash-pages-group"


async def _seed(ns: str, broker_addr: str) -> list[str]:
    """A two-queue topic, 6 messages with keys, a group 2 messages behind on queue 0."""
    async with MQAdmin(ns) as admin:
        await admin.create_topic(TOPIC, broker_addr=broker_addr, read_queue_nums=2,
                                 write_queue_nums=2)
        await wait_until(routed(admin, TOPIC), 10, "routed")
    offset_ids = []
    async with Producer("dash-pages-producer", ns) as producer:
        for i in range(6):
            r = await producer.send(Message(TOPIC, b"hello %d" % i, tags="T", keys=f"key-{i}"),
                                    MessageQueue(TOPIC, "broker-a", i % 2))
            offset_ids.append(r.offset_msg_id or "")
    async with PullConsumer(GROUP, ns) as consumer:
        await consumer.update_consume_offset(MessageQueue(TOPIC, "broker-a", 0), 1)
        await consumer.update_consume_offset(MessageQueue(TOPIC, "broker-a", 1), 3)
    return offset_ids


@dataclass
class Pair:
    ns: Daemon
    broker: Daemon
    offset_ids: list[str]


@pytest.fixture(scope="module")
def pair(module_cluster: Cluster) -> Pair:
    """A name server and a broker, seeded (``_seed``), shared by this module's tests."""
    ns = module_cluster.namesrv()
    broker = module_cluster.broker("broker-a", ns.addr)
    return Pair(ns, broker, trio.run(_seed, ns.addr, broker.addr))


async def test_every_page_renders(pair: Pair) -> None:
    ns, broker, offset_ids = pair.ns, pair.broker, pair.offset_ids
    async with dashboard(ns.addr) as web:
        page = await web.get("/")
        assert page.status == 200 and broker.addr in page.text and "MASTER" in page.text
        assert "broker-a" in page.text and "DefaultCluster" in page.text

        page = await web.get("/topics")
        assert page.status == 200 and f'href="/topics/{TOPIC}"' in page.text
        assert "TBW102" not in page.text.split("topic-list")[1].split("</ul>")[0]
        assert "TBW102" in (await web.get("/topics?system=1")).text

        page = await web.get(f"/topics/{TOPIC}")
        assert page.status == 200
        assert '<td class="num" id="total">6</td>' in page.text
        assert page.text.count("<td>broker-a</td>") == 3  # the route row and two queues

        page = await web.get("/groups")
        assert page.status == 200 and f"/groups/{GROUP}" in page.text

        page = await web.get(f"/groups/{GROUP}")
        assert page.status == 200
        assert '<td class="num" id="total-lag">2</td>' in page.text  # (3 - 1) + (3 - 3)
        assert "No member online" in page.text

        page = await web.get(f"/messages?mode=key&topic={TOPIC}&key=key-4")
        assert page.status == 200 and "1 message(s)" in page.text and "hello 4" in page.text

        page = await web.get(f"/messages?mode=key&topic={TOPIC}&key=key-4&body=hex")
        assert "68 65 6c 6c 6f 20 34" in page.text and "hello 4" not in page.text
        assert "show as text" in page.text

        page = await web.get(f"/messages?mode=id&msgId={offset_ids[5]}")
        assert page.status == 200 and "hello 5" in page.text
        # this broker keeps no trace topic: the page says so, and still shows the message
        assert "No trace read" in page.text and "RMQ_SYS_TRACE_TOPIC" in page.text

        now = int(time.time() * 1000)
        page = await web.get(f"/messages?mode=time&topic={TOPIC}&begin={now - 600_000}&end={now + 60_000}")
        assert page.status == 200 and "6 message(s)" in page.text
        assert all(f"hello {i}" in page.text for i in range(6))
        page = await web.get(f"/messages?mode=time&topic={TOPIC}&begin={now + 60_000}&end={now + 120_000}")
        assert page.status == 200 and "0 message(s)" in page.text

        page = await web.get("/messages")
        assert page.status == 200 and 'id="by-key"' in page.text
        page = await web.get("/producers")
        assert page.status == 200 and 'id="producer-form"' in page.text
        assert (await web.get("/static/style.css")).status == 200


async def test_create_topic_and_bad_input(pair: Pair) -> None:
    ns, broker = pair.ns, pair.broker
    async with dashboard(ns.addr) as web:
        page = await web.post("/topics", {"topic": "DashCreated", "target": f"broker:{broker.addr}",
                                          "readQueueNums": "3", "writeQueueNums": "3", "perm": "6"})
        assert page.status == 303 and page.location is not None
        assert page.location.startswith("/topics/DashCreated?notice=")
        async with MQAdmin(ns.addr) as admin:
            route = await wait_until(routed(admin, "DashCreated"), 10, "routed")
            assert route
            qd = (await admin.topic_route("DashCreated")).queue_datas
            assert [(q.read_queue_nums, q.write_queue_nums) for q in qd] == [(3, 3)]
        page = await web.get(page.location)
        assert page.status == 200 and "created or updated" in page.text

        page = await web.post("/topics", {"topic": "DashCluster", "target": "cluster:DefaultCluster"})
        assert page.status == 303

        bad = [
            ({"topic": "bad name", "target": f"broker:{broker.addr}"}, "characters"),
            ({"topic": "", "target": f"broker:{broker.addr}"}, "topic"),
            ({"topic": "Ok1", "target": ""}, "choose a cluster or a broker"),
            ({"topic": "Ok2", "target": f"broker:{broker.addr}", "readQueueNums": "0"}, "between 1 and 1024"),
            ({"topic": "Ok3", "target": f"broker:{broker.addr}", "writeQueueNums": "x"}, "whole number"),
            ({"topic": "Ok4", "target": f"broker:{broker.addr}", "perm": "5"}, "permission"),
        ]
        for form, why in bad:
            page = await web.post("/topics", form)
            assert page.status == 400, form
            assert page.error is not None and why in html.unescape(page.error), (form, page.error)
            assert 'id="topic-form"' in page.text  # the form is shown again
        # a cross-site form (no CSRF token) changes nothing on the cluster
        page = await web.post("/topics", {"topic": "DashForged", "target": f"broker:{broker.addr}",
                                          "perm": "2"}, csrf=False)
        assert page.status == 403 and "CSRF" in page.text
        async with MQAdmin(ns.addr) as admin:
            assert not {"Ok1", "Ok2", "Ok3", "Ok4", "DashForged"} & set(await admin.topic_list())


async def test_errors_are_pages_and_reset_offset(pair: Pair) -> None:
    ns = pair.ns
    async with dashboard(ns.addr) as web:
        for path in ["/topics/NoSuchTopic", "/messages?mode=key&topic=NoSuchTopic&key=k"]:
            page = await web.get(path)
            assert page.status == 502 and page.error and "Traceback" not in page.text, path
        for path in ["/topics/bad%20name", "/messages?mode=id&msgId=zz",
                     "/messages?mode=time&topic=T&begin=x&end=now",
                     f"/messages?mode=time&topic={TOPIC}&begin=now&end=1",
                     "/messages?mode=nope", "/producers?group=bad%20g&topic=T"]:
            page = await web.get(path)
            assert page.status == 400 and page.error, path
        assert (await web.get("/no/such/page")).status == 404

        reset = f"/groups/{quote(GROUP)}/reset"
        page = await web.post(reset, {"topic": TOPIC, "time": "0"}, csrf=False)
        assert page.status == 403  # a cross-site form: the offsets stay
        page = await web.get(f"/groups/{quote(GROUP)}")
        assert '<td class="num" id="total-lag">2</td>' in page.text
        page = await web.post(reset, {"topic": TOPIC, "time": "yesterday"})
        assert page.status == 400 and page.error and "not a time" in page.error
        page = await web.post(reset, {"topic": TOPIC, "time": "0"})
        assert page.status == 200 and page.error is None
        assert '<td class="num" id="total-lag">6</td>' in page.text
        page = await web.post(reset, {"topic": TOPIC, "time": "2999-01-01T00:00"})
        assert '<td class="num" id="total-lag">0</td>' in page.text


async def test_producers_page(pair: Pair) -> None:
    ns = pair.ns
    async with dashboard(ns.addr) as web:
        path = f"/producers?group=dash-live-producer&topic={TOPIC}"
        page = await web.get(path)
        assert page.status == 200 and "No producer of this group is connected" in page.text
        async with Producer("dash-live-producer", ns.addr) as producer:
            await producer.send(Message(TOPIC, b"x"))  # the producer heart-beats its group

            async def listed() -> Page | None:
                page = await web.get(path)
                assert page.status == 200, page.error
                return page if "No producer of this group" not in page.text else None

            page = await wait_until(listed, 10, "the producer on the producers page")
            assert "<code>127.0.0.1:" in page.text.split('id="producers"')[1]
