"""Drive Apache's RocketMQ 5 Python client (PyPI rocketmq-python-client 5.1.2, gRPC) as a subprocess.

Runs under .venv-rmq5 (make setup; that client's top-level package `rocketmq` collides with the C++
client wheel in .venv). Prints one JSON object per line with an "event" key, like cpp_agent.py:

  produce   --endpoint H:P --topic T --count N [--tag X] [--keys K] [--message-group G] [--deliver-at S]
            [--deliver-in S] [--pause S] [--keep-going]
                            -> {"event":"sent","i","id","recall","ts"} ... {"event":"done"}
                               (--keep-going: a failed send is {"event":"send_error","i","error","ts"})
  recall    --endpoint H:P --topic T --handle H          -> {"event":"recalled","id"} or {"event":"error"}
  transaction --endpoint H:P --topic T --count N --end commit|rollback|none --check commit|rollback
            [--linger S]            -> {"event":"sent"} per half, {"event":"checked","id"} per check-back
  simple    --endpoint H:P --group G --topic T --until-count N [--tag X] [--invisible S] [--no-ack]  (first {"event":"started","client_id"})
            [--change-invisible S] [--max-seconds S] [--retry-errors]   -> {"event":"received","id","body","attempt",...}
  push      --endpoint H:P --group G --topic T --until-count N [--fail-first]  -> {"event":"received",...}

--ak/--sk sign every call (MQv2-HMAC-SHA1). Exit 0 when the command reached its goal, 3 on timeout.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time


def emit(**kw) -> None:
    sys.stdout.write(json.dumps(kw) + "\n")
    sys.stdout.flush()


def config(a):
    from rocketmq import ClientConfiguration, Credentials
    return ClientConfiguration(a.endpoint, Credentials(a.ak, a.sk), request_timeout=a.request_timeout)


def msg_event(kind: str, m, **extra) -> None:
    emit(event=kind, id=m.message_id, body=bytes(m.body).decode("utf-8", "replace"), tag=m.tag,
         topic=m.topic, attempt=m.delivery_attempt, keys=sorted(m.keys or []), group=m.message_group,
         properties=dict(m.properties or {}), **extra)


def filter_expression(a):
    """--sql: a SQL92 FilterExpression; else the --tag expression (or everything)."""
    from rocketmq import FilterExpression
    if a.sql:
        from rocketmq.grpc_protocol import FilterType
        return FilterExpression(a.sql, FilterType.SQL)
    return FilterExpression(a.tag or "*")


def produce(a) -> int:
    from rocketmq import Message, Producer
    p = Producer(config(a), (a.topic,), tls_enable=a.tls)
    p.startup()
    try:
        for i in range(a.count):
            m = Message()
            m.topic = a.topic
            m.body = f"{a.body_prefix}{i}".encode()
            if a.tag:
                m.tag = a.tag
            for key in a.keys or ():
                m.keys = key  # the 5.1.2 setter adds one key per assignment
            if a.message_group:
                m.message_group = a.message_group
            for kv in a.prop or ():
                k, _, v = kv.partition("=")
                m.add_property(k, v)
            if a.deliver_at:
                m.delivery_timestamp = int(a.deliver_at)  # 5.1.2 puts this into Timestamp.seconds as is
            elif a.deliver_in:
                m.delivery_timestamp = int(time.time() + a.deliver_in)
            try:
                r = p.send(m)
            except Exception as e:  # --keep-going: a failover under the client; report it and carry on
                if not a.keep_going:
                    raise
                emit(event="send_error", i=i, error=f"{type(e).__name__}: {e}", ts=int(time.time() * 1000))
            else:
                emit(event="sent", i=i, id=r.message_id, recall=r.recall_handle, ts=int(time.time() * 1000),
                     deliver_s=m.delivery_timestamp)
            if a.pause:
                time.sleep(a.pause)  # pacing the sends (a bounded stream through a failover), not synchronisation
    finally:
        p.shutdown()
    emit(event="done")
    return 0


def recall(a) -> int:
    from rocketmq import Producer
    p = Producer(config(a), (a.topic,))
    p.startup()
    try:
        try:
            mid = p.recall_message(a.topic, a.handle)
            emit(event="recalled", id=mid)
        except Exception as e:
            emit(event="error", error=f"{type(e).__name__}: {e}")
    finally:
        p.shutdown()
    return 0


def transaction(a) -> int:
    from rocketmq import Message, Producer, TransactionChecker, TransactionResolution
    stop = threading.Event()
    checked = []

    class Checker(TransactionChecker):
        def check(self, message):
            checked.append(message.message_id)
            emit(event="checked", id=message.message_id, body=bytes(message.body).decode())
            return TransactionResolution.COMMIT if a.check == "commit" else TransactionResolution.ROLLBACK

    p = Producer(config(a), (a.topic,), Checker())
    p.startup()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        for i in range(a.count):
            tx = p.begin_transaction()
            m = Message()
            m.topic = a.topic
            m.body = f"{a.body_prefix}{i}".encode()
            r = p.send(m, tx)
            emit(event="sent", i=i, id=r.message_id)
            if a.end == "commit":
                tx.commit()
            elif a.end == "rollback":
                tx.rollback()
        emit(event="done")
        deadline = time.time() + a.linger
        while not stop.is_set() and time.time() < deadline and len(checked) < a.until_checks:
            stop.wait(0.05)
    finally:
        p.shutdown()
    return 0 if len(checked) >= a.until_checks else 3


def simple(a) -> int:
    from rocketmq import SimpleConsumer
    c = SimpleConsumer(config(a), a.group, {a.topic: filter_expression(a)}, await_duration=a.await_s,
                       tls_enable=a.tls)
    c.startup()
    emit(event="started", client_id=c.client_id)
    got = 0
    deadline = time.time() + a.max_seconds
    try:
        while got < a.until_count and time.time() < deadline:
            t_req = int(time.time() * 1000)  # before the call: the broker popped it at or after this
            try:
                found = c.receive(a.batch, a.invisible) or []
            except Exception as e:
                # Apache's 5.1.3 proxy answers a receive that overtakes the client's first Telemetry
                # settings with an internal error ("settings" is null); the client does not wait for them
                if '"settings" is null' not in str(e) and not a.retry_errors:
                    raise
                emit(event="settings_race" if '"settings" is null' in str(e) else "receive_error", error=str(e)[:200])
                time.sleep(0.2)
                continue
            for m in found:
                got += 1
                msg_event("received", m, t=int(time.time() * 1000), t_req=t_req)
                if a.change_invisible is not None:
                    c.change_invisible_duration(m, a.change_invisible)
                    emit(event="changed", id=m.message_id)
                elif not a.no_ack:
                    try:
                        c.ack(m)
                    except Exception as e:
                        if not a.retry_errors:
                            raise
                        got -= 1  # not acknowledged: the broker hands it out again after its invisible time
                        emit(event="ack_error", id=m.message_id, error=str(e)[:200])
                        continue
                    emit(event="acked", id=m.message_id)
    finally:
        c.shutdown()
    emit(event="done", count=got)
    return 0 if got >= a.until_count else 3


def push(a) -> int:
    from rocketmq import ConsumeResult, MessageListener, PushConsumer
    done = threading.Event()
    count = [0]
    failed = set()

    class Listener(MessageListener):
        def consume(self, m):
            if a.fail_first and m.message_id not in failed:
                failed.add(m.message_id)
                msg_event("failed", m)
                return ConsumeResult.FAILURE
            msg_event("received", m, t=int(time.time() * 1000))
            count[0] += 1
            if count[0] >= a.until_count:
                done.set()
            return ConsumeResult.SUCCESS

    c = PushConsumer(config(a), a.group, Listener(), {a.topic: filter_expression(a)})
    c.startup()
    try:
        done.wait(a.max_seconds)
    finally:
        c.shutdown()
    emit(event="done", count=count[0])
    return 0 if done.is_set() else 3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["produce", "recall", "transaction", "simple", "push"])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--tls", action="store_true", help="TLS (trust: GRPC_DEFAULT_SSL_ROOTS_FILE_PATH)")
    ap.add_argument("--ak", default="")
    ap.add_argument("--sk", default="")
    ap.add_argument("--request-timeout", type=int, default=5)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group")
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--body-prefix", default="m")
    ap.add_argument("--tag")
    ap.add_argument("--sql", help="consume with this SQL92 filter expression")
    ap.add_argument("--prop", action="append", help="KEY=VALUE: a user property on each message sent")
    ap.add_argument("--keys", action="append")
    ap.add_argument("--message-group")
    ap.add_argument("--deliver-at", type=float)
    ap.add_argument("--deliver-in", type=float)
    ap.add_argument("--handle")
    ap.add_argument("--end", choices=["commit", "rollback", "none"], default="commit")
    ap.add_argument("--check", choices=["commit", "rollback"], default="commit")
    ap.add_argument("--linger", type=float, default=0.0)
    ap.add_argument("--until-checks", type=int, default=0)
    ap.add_argument("--until-count", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--invisible", type=int, default=15)
    ap.add_argument("--await-s", type=int, default=2)
    ap.add_argument("--no-ack", action="store_true")
    ap.add_argument("--retry-errors", action="store_true",
                    help="simple: a failed receive or ack is reported and retried (a proxy killed under the client)")
    ap.add_argument("--change-invisible", type=int)
    ap.add_argument("--fail-first", action="store_true")
    ap.add_argument("--max-seconds", type=float, default=40.0)
    ap.add_argument("--pause", type=float, default=0.0, help="produce: seconds between sends")
    ap.add_argument("--keep-going", action="store_true", help="produce: report a failed send and go on")
    a = ap.parse_args()
    return {"produce": produce, "recall": recall, "transaction": transaction, "simple": simple, "push": push}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
