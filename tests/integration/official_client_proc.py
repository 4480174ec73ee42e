"""The official RocketMQ C++ client (PyPI ``rocketmq``, librocketmq bundled) in a
process of its own, driven through JSON lines, for the wire-compatibility tests
(``tests/integration/official_client.py`` starts it). A crash of the C library
ends this process only, and its threads never outlive it.

    python -m tests.integration.official_client_proc produce -n NAMESRV -g GROUP
        Reads one JSON request a line from stdin and answers each with one JSON
        line on stdout:
            {"op": "sync"|"oneway", "message": M}
            {"op": "orderly", "message": M, "arg": N}      (queue = N % queues)
            {"op": "batch", "messages": [M, ...]}
        with M = {"topic", "body", "tags"?, "keys"?, "props"?: {k: v}}; the answer
        {"i": <request number>, "status": "OK", "msg_id": ..., "offset": ...},
        {"i": ..., "status": "SENT"} (oneway) or {"i": ..., "error": "..."}; with
        "attempts": N when the C++ client's own connection race made it retry
        (see NOTHING_SENT).
        EOF on stdin: the producer shuts down and {"event": "stopped"} is printed.

    python -m tests.integration.official_client_proc consume -n NAMESRV -g GROUP -t TOPIC
            [-e EXPRESSION] [-i INSTANCE] [-p PROPERTY]...
        A push consumer (clustering). Prints {"event": "started"} once started,
        then one line per message: {"topic", "tags", "keys", "body", "id",
        "queue_id", "queue_offset", "reconsume_times", "props": {PROPERTY: value}}.
        EOF or "stop" on stdin: shuts down (offsets persisted), prints
        {"event": "stopped"}.

    python -m tests.integration.official_client_proc chaos -n NAMESRV -g GROUP -t TOPIC
            --prefix ID --interval S --t0 T0 --max N --send-timeout-ms MS --out FILE
        A producer for the chaos checker (bench/chaos/official.py): sync sends of
        ``bench.chaos.accounting.body(ID-SEQ, begun)`` with keys ID-SEQ, one every S
        seconds (a send that ends late starts the next at once: no burst to catch up),
        until EOF or "stop" on stdin or N sends. Appends one JSON line per send to
        FILE, flushed at once: {"id", "begun", "t", "status": "SEND_OK"|
        "FLUSH_DISK_TIMEOUT"|"FLUSH_SLAVE_TIMEOUT"|"SLAVE_NOT_AVAILABLE", "msg_id",
        "offset"} or {"id", "begun", "t", "error": "..."}; ``begun`` and ``t`` are
        seconds of time.monotonic() since T0 (the checker's clock: CLOCK_MONOTONIC
        is one clock for every process of the host). A send is never retried here.
        Prints {"event": "started"}, and {"event": "stopped", "sent": N} after the
        producer's shutdown.

Each takes ``--access-key KEY --secret-key SECRET [--channel CHANNEL]``: the C++
client then signs every request (set_session_credentials, RocketMQ's plain ACL).

Every command exits after ``--timeout`` seconds (default 120) whatever happens,
printing {"event": "timeout"}. The process ends with ``os._exit`` after its
client is shut down, so no destructor of the C library runs at interpreter exit.
Set HOME for the child: the C++ client logs under ``$HOME/logs/rocketmq-cpp/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

_out_lock = threading.Lock()


def emit(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, ensure_ascii=False)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _text(v: bytes | str | None) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _exit(code: int = 0) -> None:
    with _out_lock:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _watchdog(timeout: float) -> None:
    def fire() -> None:
        emit({"event": "timeout", "after": timeout})
        _exit(3)

    t = threading.Timer(timeout, fire)
    t.daemon = True
    t.start()


def make_message(spec: dict[str, Any]) -> Any:
    from rocketmq.client import Message

    msg = Message(spec["topic"])
    if spec.get("tags"):
        msg.set_tags(spec["tags"])
    if spec.get("keys"):
        msg.set_keys(spec["keys"])
    for k, v in (spec.get("props") or {}).items():
        msg.set_property(k, v)
    msg.set_body(spec.get("body", ""))
    return msg


def _credentials(client: Any, args: argparse.Namespace) -> None:
    if args.access_key:
        client.set_session_credentials(args.access_key, args.secret_key, args.channel)


def _producer(namesrv: str, group: str, timeout_ms: int = 10_000,
              args: argparse.Namespace | None = None) -> Any:
    from rocketmq.client import Producer

    p = Producer(group, timeout=timeout_ms)
    p.set_namesrv_addr(namesrv)
    if args is not None:
        _credentials(p, args)
    p.start()
    return p


def _result(i: int, r: Any) -> dict[str, Any]:
    return {"i": i, "status": r.status.name, "msg_id": r.msg_id, "offset": r.offset}


# The C++ client guards its connection table with a std::timed_mutex (3 s).
# While its heartbeat thread was opening a connection to a broker, a send's
# wait for that lock has been seen to give up at once ("GetTransport of:...
# get timed_mutex timeout" in its log): every attempt fails before anything
# is written and the send raises "No route info of this topic". Such a send
# is tried again until RETRY_FOR seconds have passed, as an application would;
# the answer says how many attempts it took. A route that is really missing
# still fails, after RETRY_FOR.
NOTHING_SENT = "No route info of this topic"
RETRY_FOR = 5.0


def _send(p: Any, req: dict[str, Any]) -> tuple[Any, int]:
    """One request's send (None for oneway) and its attempts."""
    op = req["op"]
    deadline = time.monotonic() + RETRY_FOR
    attempts = 0
    while True:
        attempts += 1
        try:
            if op == "sync":
                return p.send_sync(make_message(req["message"])), attempts
            if op == "oneway":
                p.send_oneway(make_message(req["message"]))
                return None, attempts
            if op == "orderly":
                return p.send_orderly(make_message(req["message"]), int(req["arg"])), attempts
            if op == "batch":
                return p.send_batch([make_message(m) for m in req["messages"]]), attempts
            raise ValueError(f"unknown op {op!r}")
        except Exception as e:
            if NOTHING_SENT not in str(e) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)  # the connection under way takes a few ms


def cmd_produce(args: argparse.Namespace) -> None:
    p = _producer(args.namesrv, args.group, args=args)
    emit({"event": "started"})
    for i, line in enumerate(sys.stdin):
        line = line.strip()
        if not line:
            continue
        try:
            r, attempts = _send(p, json.loads(line))
        except Exception as e:  # the wrapper's exceptions carry the C++ client's message
            emit({"i": i, "error": f"{type(e).__name__}: {e}"})
            continue
        answer = {"i": i, "status": "SENT"} if r is None else _result(i, r)
        if attempts > 1:
            answer["attempts"] = attempts
        emit(answer)
    p.shutdown()
    emit({"event": "stopped"})
    _exit(0)


# the wheel's SendStatus names -> the names of RocketMQ's SendStatus
_STATUS = {"OK": "SEND_OK"}
MAX_ERROR_CHARS = 500


def cmd_chaos(args: argparse.Namespace) -> None:
    from bench.chaos.accounting import body

    p = _producer(args.namesrv, args.group, timeout_ms=args.send_timeout_ms, args=args)
    stop = threading.Event()

    def watch_stdin() -> None:  # EOF also when the checker is gone
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    emit({"event": "started"})
    seq = 0
    with open(args.out, "a", encoding="utf-8") as out:
        nxt = time.monotonic()
        while not stop.is_set() and seq < args.max:
            mid = f"{args.prefix}-{seq}"
            seq += 1
            begun = time.monotonic() - args.t0
            rec: dict[str, Any] = {"id": mid, "begun": round(begun, 6)}
            try:
                r = p.send_sync(make_message({"topic": args.topic, "body": body(mid, begun),
                                              "keys": mid}))
            except Exception as e:  # the C++ client's message, counted by the checker
                rec["error"] = f"{type(e).__name__}: {e}"[:MAX_ERROR_CHARS]
            else:
                rec.update(status=_STATUS.get(r.status.name, r.status.name), msg_id=r.msg_id,
                           offset=r.offset)
            rec["t"] = round(time.monotonic() - args.t0, 6)
            out.write(json.dumps(rec) + "\n")
            out.flush()
            nxt += args.interval
            now = time.monotonic()
            if nxt > now:
                stop.wait(nxt - now)
            else:
                nxt = now  # behind (a fault): no burst to catch up
    p.shutdown()
    emit({"event": "stopped", "sent": seq})
    _exit(0)


def _push_consumer(namesrv: str, group: str, instance: str | None) -> Any:
    from rocketmq.client import PushConsumer

    c = PushConsumer(group)
    c.set_namesrv_addr(namesrv)
    if instance:
        c.set_instance_name(instance)
    return c


def _wait_for_stop() -> None:
    for line in sys.stdin:
        if line.strip() == "stop":
            break


def cmd_consume(args: argparse.Namespace) -> None:
    c = _push_consumer(args.namesrv, args.group, args.instance)
    _credentials(c, args)
    props: list[str] = args.prop or []

    def on_message(msg: Any) -> None:
        emit({
            "topic": _text(msg.topic), "tags": _text(msg.tags), "keys": _text(msg.keys),
            "body": _text(msg.body), "id": _text(msg.id), "queue_id": msg.queue_id,
            "queue_offset": msg.queue_offset, "reconsume_times": msg.reconsume_times,
            "props": {k: _text(msg.get_property(k)) for k in props},
        })

    c.subscribe(args.topic, on_message, args.expression)
    c.start()
    emit({"event": "started"})
    _wait_for_stop()
    c.shutdown()
    emit({"event": "stopped"})
    _exit(0)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="official_client_proc")
    sub = ap.add_subparsers(dest="command", required=True)

    def common(name: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name)
        sp.add_argument("-n", "--namesrv", required=True)
        sp.add_argument("--timeout", type=float, default=120.0)
        sp.add_argument("--access-key", default=None)
        sp.add_argument("--secret-key", default=None)
        sp.add_argument("--channel", default="ALIYUN")
        return sp

    sp = common("produce")
    sp.add_argument("-g", "--group", default="PID-official")
    sp.set_defaults(fn=cmd_produce)
    sp = common("consume")
    sp.add_argument("-g", "--group", required=True)
    sp.add_argument("-t", "--topic", required=True)
    sp.add_argument("-e", "--expression", default="*")
    sp.add_argument("-i", "--instance", default=None)
    sp.add_argument("-p", "--prop", action="append")
    sp.set_defaults(fn=cmd_consume)
    sp = common("chaos")
    sp.add_argument("-g", "--group", required=True)
    sp.add_argument("-t", "--topic", required=True)
    sp.add_argument("--prefix", required=True)
    sp.add_argument("--interval", type=float, required=True)
    sp.add_argument("--t0", type=float, required=True)
    sp.add_argument("--max", type=int, required=True)
    sp.add_argument("--send-timeout-ms", type=int, default=3000)
    sp.add_argument("--out", required=True)
    sp.set_defaults(fn=cmd_chaos)
    args = ap.parse_args(argv)
    _watchdog(args.timeout)
    args.fn(args)


if __name__ == "__main__":
    main()
