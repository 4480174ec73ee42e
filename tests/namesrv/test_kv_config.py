"""The name server's KV config (RocketMQ's KVConfigManager): PUT/GET/DELETE_KV_CONFIG
and GET_KVLIST_BY_NAMESPACE, its bounds, names, and its kvConfig.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from namesrv.config import NamesrvConfig
from namesrv.controller import NamesrvController
from namesrv.kv_config import KVConfigManager, KVLimitError, KVLimits
from namesrv.processor import NamesrvProcessor
from namesrv.route_info import RouteInfoManager
from protocol.codecs import ROCKETMQ_BINARY, ROCKETMQ_JSON
from protocol.codes import RequestCode, ResponseCode
from protocol.command import RemotingCommand
from protocol.errors import RemoteProtocolError
from protocol.headers import GetKVConfigRequestHeader, PutKVConfigRequestHeader
from protocol.route import DataVersion, TopicConfig
from protocol.trio.client import RemotingClient
from tests.waits import wait_until


class Conn:
    remote_addr = "127.0.0.1:50000"
    closed = False


def processor(kv: KVConfigManager | None = None, **kw: object) -> NamesrvProcessor:
    return NamesrvProcessor(RouteInfoManager(channel_expired_s=120), lambda: 0.0, kv=kv,
                            **kw)  # type: ignore[arg-type]


def call(p: NamesrvProcessor, code: int, fields: dict[str, object],
         codec: object = ROCKETMQ_JSON) -> RemotingCommand:
    """A request as it arrives in RocketMQ's format (every value a string), answered,
    and the answer sent back through the same codec."""
    cmd = RemotingCommand.request(code, {k: str(v) for k, v in fields.items()})
    cmd = codec.decode(codec.encode(cmd))  # type: ignore[attr-defined]
    handler, _ = p.handler_table().lookup(code)
    assert handler is not None
    try:
        response = handler(Conn(), cmd)  # type: ignore[arg-type]
    except RemoteProtocolError as exc:  # what the connection answers (protocol/trio)
        response = cmd.response(ResponseCode.SYSTEM_ERROR, f"bad request: {exc}")
    assert response is not None
    return codec.decode(codec.encode(response))  # type: ignore[attr-defined,no-any-return]


# ---- the table -------------------------------------------------------------------------


def test_put_get_delete_and_namespaces() -> None:
    kv = KVConfigManager()
    kv.put("ORDER_TOPIC_CONFIG", "OrderTopic", "broker-a:8;broker-b:8")
    kv.put("ORDER_TOPIC_CONFIG", "Other", "broker-a:4")
    kv.put("PROJECT_CONFIG", "127.0.0.1", "proj")
    assert kv.get("ORDER_TOPIC_CONFIG", "OrderTopic") == "broker-a:8;broker-b:8"
    assert kv.get("ORDER_TOPIC_CONFIG", "missing") is None
    assert kv.get("missing", "OrderTopic") is None
    kv.put("ORDER_TOPIC_CONFIG", "OrderTopic", "broker-a:2")  # replaced
    assert kv.get("ORDER_TOPIC_CONFIG", "OrderTopic") == "broker-a:2"
    assert (kv.keys, len(kv.table)) == (3, 2)
    assert kv.namespace("ORDER_TOPIC_CONFIG") == {"OrderTopic": "broker-a:2", "Other": "broker-a:4"}
    assert kv.delete("PROJECT_CONFIG", "127.0.0.1")
    assert not kv.delete("PROJECT_CONFIG", "127.0.0.1")
    assert kv.namespace("PROJECT_CONFIG") is None  # an emptied namespace goes
    assert kv.delete("ORDER_TOPIC_CONFIG", "OrderTopic") and kv.delete("ORDER_TOPIC_CONFIG", "Other")
    assert (kv.keys, kv.chars, kv.table) == (0, 0, {})


@pytest.mark.parametrize("namespace,key,value,reason", [
    ("", "k", "v", "namespace must not be empty"),
    ("ns", "", "v", "key must not be empty"),
    ("n" * 256, "k", "v", "namespace is longer than 255"),
    ("ns", "k\x01", "v", "control character"),
    ("ns\n", "k", "v", "control character"),
    ("ns", "k", "v" * 32768, "value is longer than 32767"),
])
def test_bad_names_and_values_are_refused(namespace: str, key: str, value: str,
                                          reason: str) -> None:
    kv = KVConfigManager()
    with pytest.raises(ValueError, match=reason):
        kv.put(namespace, key, value)
    assert kv.table == {} and kv.chars == 0


def test_limits_refuse_a_put_and_change_nothing() -> None:
    kv = KVConfigManager(limits=KVLimits(max_namespaces=2, max_keys_per_namespace=3, max_keys=5,
                                         max_total_chars=100))
    kv.put("a", "1", "x")
    kv.put("b", "1", "x")
    with pytest.raises(KVLimitError, match="namespaces"):
        kv.put("c", "1", "x")
    kv.put("a", "2", "x")
    kv.put("a", "3", "x")
    with pytest.raises(KVLimitError, match="namespace 'a' holds 3 keys"):
        kv.put("a", "4", "x")
    kv.put("b", "2", "x")
    with pytest.raises(KVLimitError, match="holds 5 keys"):
        kv.put("b", "3", "x")
    kv.put("a", "1", "y" * 10)  # replacing a value is no new key
    with pytest.raises(KVLimitError, match="characters"):
        kv.put("a", "1", "y" * 90)
    assert kv.get("a", "1") == "y" * 10 and kv.keys == 5
    assert kv.chars == sum(len(n) + sum(len(k) + len(v) for k, v in t.items())
                           for n, t in kv.table.items())


def test_file_round_trip_in_rocketmqs_layout(tmp_path: Path) -> None:
    path = tmp_path / "namesrv" / "kvConfig.json"
    kv = KVConfigManager(path)
    kv.put("ORDER_TOPIC_CONFIG", "T", "broker-a:4")
    kv.put("ns", "ü-€", "välue")
    data = kv.take_snapshot()
    assert data is not None and kv.take_snapshot() is None  # nothing changed since
    kv.write(data)
    assert json.loads(path.read_text()) == {
        "configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}, "ns": {"ü-€": "välue"}}}
    again = KVConfigManager(path)
    again.load()
    assert again.table == kv.table and (again.keys, again.chars) == (kv.keys, kv.chars)
    assert not again.dirty


def test_a_bad_file_is_set_aside_and_bad_entries_skipped(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    path.write_text("{not json")
    kv = KVConfigManager(path)
    kv.load()
    assert kv.table == {} and not path.exists()
    assert (tmp_path / "kvConfig.json.bad").read_text() == "{not json"
    path.write_text(json.dumps({"configTable": {"ns": {"good": "v", "bad\x00": "v", "n": 5},
                                                "list": ["x"]}}))
    kv.load()
    assert kv.table == {"ns": {"good": "v"}}


# ---- the requests, as RocketMQ's clients send them -----------------------------------------


@pytest.mark.parametrize("codec", [ROCKETMQ_JSON, ROCKETMQ_BINARY])
def test_requests_through_rocketmqs_format(codec: object) -> None:
    changes: list[int] = []
    p = processor()
    p.on_kv_change = lambda: changes.append(1)
    ns, key = "ORDER_TOPIC_CONFIG", "OrderTopic"
    r = call(p, RequestCode.GET_KV_CONFIG, {"namespace": ns, "key": key}, codec)
    assert (r.code, r.remark) == (ResponseCode.QUERY_NOT_FOUND,
                                  f"No config item, Namespace: {ns} Key: {key}")
    r = call(p, RequestCode.PUT_KV_CONFIG, {"namespace": ns, "key": key, "value": "broker-a:8"},
             codec)
    assert r.code == ResponseCode.SUCCESS and changes == [1]
    r = call(p, RequestCode.GET_KV_CONFIG, {"namespace": ns, "key": key}, codec)
    assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"value": "broker-a:8"})
    r = call(p, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": ns}, codec)
    assert r.code == ResponseCode.SUCCESS
    assert json.loads(r.body or b"") == {"table": {key: "broker-a:8"}}
    r = call(p, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": "nothing"}, codec)
    assert (r.code, r.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: nothing")
    r = call(p, RequestCode.DELETE_KV_CONFIG, {"namespace": ns, "key": key}, codec)
    assert r.code == ResponseCode.SUCCESS and changes == [1, 1]
    r = call(p, RequestCode.DELETE_KV_CONFIG, {"namespace": ns, "key": key}, codec)
    assert r.code == ResponseCode.SUCCESS and changes == [1, 1]  # nothing was deleted
    assert call(p, RequestCode.GET_KV_CONFIG, {"namespace": ns, "key": key},
                codec).code == ResponseCode.QUERY_NOT_FOUND


def test_bad_requests_name_the_field() -> None:
    p = processor(KVConfigManager(limits=KVLimits(max_keys=1)))
    r = call(p, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "'value'" in (r.remark or "")
    r = call(p, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "a\tb"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "'key'" in (r.remark or "")
    r = call(p, RequestCode.GET_KV_CONFIG, {"namespace": "", "key": "k"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "'namespace'" in (r.remark or "")
    assert call(p, RequestCode.PUT_KV_CONFIG,
                {"namespace": "ns", "key": "k", "value": "v"}).code == ResponseCode.SUCCESS
    r = call(p, RequestCode.PUT_KV_CONFIG, {"namespace": "ns", "key": "k2", "value": "v"})
    assert r.code == ResponseCode.SYSTEM_ERROR and "at most 1" in (r.remark or "")


def test_headers_read_and_write_rocketmqs_names() -> None:
    h = PutKVConfigRequestHeader("ns", "k", "v")
    assert h.to_fields() == {"namespace": "ns", "key": "k", "value": "v"}
    assert GetKVConfigRequestHeader.from_fields({"namespace": "ns", "key": "k"}) == \
        GetKVConfigRequestHeader("ns", "k")


def test_routes_carry_order_topic_conf_when_enabled() -> None:
    kv = KVConfigManager()
    kv.put("ORDER_TOPIC_CONFIG", "T", "broker-a:4")
    for enabled, conf in ((False, None), (True, "broker-a:4")):
        p = processor(kv, order_message_enable=enabled)
        p.routes.register_broker("C", "127.0.0.1:10911", "broker-a", 0, None,
                                 {"T": TopicConfig("T", 4, 4)}, DataVersion(1, 1), Conn(), 0.0)
        r = call(p, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
        assert json.loads(r.body or b"").get("orderTopicConf") == conf


# ---- the daemon writes its file -----------------------------------------------------------


async def test_name_server_persists_and_reloads_its_kv_config(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    config = NamesrvConfig(listen_port=0, kv_config_path=str(path))

    async def serve(steps: object) -> None:
        controller = NamesrvController(config)
        async with trio.open_nursery() as nursery:
            port = await nursery.start(controller.run)
            async with RemotingClient(codec=ROCKETMQ_JSON) as rc:
                await steps(rc, f"127.0.0.1:{port}", controller)  # type: ignore[operator]
            controller.request_shutdown()

    async def first(rc: RemotingClient, addr: str, controller: NamesrvController) -> None:
        put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG,
                                      {"namespace": "ns", "key": "k", "value": "v1"})
        assert (await rc.invoke(addr, put, 5)).code == ResponseCode.SUCCESS
        # written in the background: wait for the file
        await wait_until(lambda: path.exists() and "v1" in path.read_text(), 5, "v1 in the file",
                         interval=0.01)
        put = RemotingCommand.request(RequestCode.PUT_KV_CONFIG,
                                      {"namespace": "ns", "key": "k", "value": "v2"})
        assert (await rc.invoke(addr, put, 5)).code == ResponseCode.SUCCESS

    async def second(rc: RemotingClient, addr: str, controller: NamesrvController) -> None:
        get = RemotingCommand.request(RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
        r = await rc.invoke(addr, get, 5)
        assert (r.code, r.ext_fields) == (ResponseCode.SUCCESS, {"value": "v2"})

    await serve(first)
    # the last change is on disk at a clean stop at the latest
    assert json.loads(path.read_text()) == {"configTable": {"ns": {"k": "v2"}}}
    await serve(second)
