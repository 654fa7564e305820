"""Drive the official RocketMQ C++ client (PyPI `rocketmq`, librocketmq.so over ctypes) from a CLI.

The C++ library runs its own threads and may crash or hang on a protocol error, so tests run this
file as a subprocess under a timeout. Output is JSON lines on stdout, one object per event:
  {"event": "started"}                      client started
  {"event": "sent", "i", "msg_id", "offset", "status", "body", "keys", "tags", "shard", "t_ms", "start_ms"}
  {"event": "send_error", "i", "error"}
  {"event": "received", "msg_id", "topic", "tags", "keys", "body", "queue_id", "queue_offset",
   "reconsume_times", "props", "born_ts", "store_ts", "recv_ms", "recv_at", "ack"}
  {"event": "done", ...summary}             last line before exit

  produce --namesrv A --topic T [--mode sync|async|oneway|orderly|batch] [--count N] [--tag X]
          [--key K] [--delay-level L] [--property k=v ...] [--shards S] [--batch-size B]
  consume --namesrv A --group G --topic T [--expr E] [--model clustering|broadcasting] [--orderly]
          --until-count N --timeout S [--reconsume-later-times K] [--want-property P ...]
  pull    --namesrv A --group G --topic T [--expr E] --until-count N --timeout S

A consumer stops on reaching --until-count distinct acknowledged bodies (exit 0), on SIGTERM (exit 0)
or on --timeout (exit 2). It shuts the client down cleanly in every case (offsets get persisted).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import uuid

from rocketmq.client import Message, Producer, PullConsumer, PushConsumer, RecvMessage
from rocketmq.ffi import MSG_CALLBACK_FUNC, MessageModel, _CConsumeStatus, dll

# the client classes produce/consume/pull build, looked up here at call time: tests/security/cpp_acl_agent.py
# replaces them with subclasses that sign every request
__all__ = ["Producer", "PullConsumer", "PushConsumer", "main"]

_out_lock = threading.Lock()
INTEREST = ("UNIQ_KEY", "DELAY", "REAL_TOPIC", "REAL_QID", "RECONSUME_TIME", "CLUSTER", "KEYS", "TAGS")


def emit(event: str, **fields) -> None:
    line = json.dumps({"event": event, **fields}, default=str)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def now_ms() -> int:
    return int(time.time() * 1000)


def _s(v) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def describe(msg: RecvMessage, want: list[str]) -> dict:
    props = {}
    for key in (*INTEREST, *want):
        val = _s(msg.get_property(key))
        if val:
            props[key] = val
    return {
        "msg_id": _s(msg.id), "topic": _s(msg.topic), "tags": _s(msg.tags), "keys": _s(msg.keys),
        "body": _s(msg.body), "queue_id": msg.queue_id, "queue_offset": msg.queue_offset,
        "reconsume_times": msg.reconsume_times, "props": props, "born_ts": msg.born_timestamp,
        "store_ts": msg.store_timestamp, "recv_ms": now_ms(), "recv_at": time.time() * 1000,
    }


# ---- producer -------------------------------------------------------------------------------
def build_message(a, i: int, run: str) -> tuple[Message, dict]:
    msg = Message(a.topic)
    body = f"{a.body_prefix}{run}-{i}"
    keys = f"{a.key}-{i}" if a.key else None
    msg.set_body(body)
    if keys:
        msg.set_keys(keys)
    if a.tag:
        msg.set_tags(a.tag)
    for kv in a.property:
        k, _, v = kv.partition("=")
        msg.set_property(k, v)
    if a.delay_level:
        msg.set_delay_time_level(a.delay_level)
    return msg, {"i": i, "body": body, "keys": keys, "tags": a.tag or None}


def produce(a) -> int:
    producer = Producer(a.group, timeout=a.send_timeout_ms)
    producer.set_namesrv_addr(a.namesrv)
    producer.start()
    emit("started")
    run = a.run_id or uuid.uuid4().hex[:8]
    errors, counted = 0, True  # async sends report their failures one by one: no count ("errors": null)
    if a.mode == "batch":
        for start in range(0, a.count, a.batch_size):
            built = [build_message(a, i, run) for i in range(start, min(a.count, start + a.batch_size))]
            try:
                start_at = time.time() * 1000
                res = producer.send_batch([m for m, _ in built])
                for _, info in built:
                    info["start_ms"] = start_at
                    emit("sent", msg_id=res.msg_id, offset=res.offset, status=res.status.name, t_ms=now_ms(), **info)
            except Exception as exc:  # the client raises its own exception types
                errors += len(built)
                for _, info in built:
                    emit("send_error", i=info["i"], error=repr(exc))
    elif a.mode == "async":
        done = threading.Semaphore(0)
        keep = []
        for i in range(a.count):
            msg, info = build_message(a, i, run)
            keep.append(msg)  # the C++ side reads the message until the callback fires

            def ok(res, info=info):
                emit("sent", msg_id=res.msg_id, offset=res.offset, status=res.status.name, t_ms=now_ms(), **info)
                done.release()

            def fail(exc, info=info):
                emit("send_error", i=info["i"], error=repr(exc))
                done.release()

            try:
                info["start_ms"] = time.time() * 1000
                producer.send_async(msg, ok, fail)
            except Exception as exc:
                fail(exc)
        deadline = time.monotonic() + a.timeout
        for _ in range(a.count):
            if not done.acquire(timeout=max(0.0, deadline - time.monotonic())):
                emit("done", sent=None, error="async callbacks missing at timeout")
                os._exit(3)
        counted = False
    else:
        for i in range(a.count):
            msg, info = build_message(a, i, run)
            try:
                info["start_ms"] = time.time() * 1000  # the send call's start, on this (the producer's) clock
                if a.mode == "sync":
                    res = producer.send_sync(msg)
                elif a.mode == "orderly":
                    shard = i % a.shards
                    info["shard"] = shard
                    res = producer.send_orderly(msg, shard)
                elif a.mode == "oneway":
                    producer.send_oneway(msg)
                    res = None
                else:
                    raise SystemExit(f"unknown mode {a.mode}")
                emit("sent", msg_id=res and res.msg_id, offset=res and res.offset,
                     status=res and res.status.name, t_ms=now_ms(), **info)
            except SystemExit:
                raise
            except Exception as exc:
                errors += 1
                emit("send_error", i=i, error=repr(exc))
                if a.stop_on_error:
                    break
    producer.shutdown()
    emit("done", run=run, errors=errors if counted else None)
    return 0


# ---- push consumer ---------------------------------------------------------------------------
class Tracker:
    def __init__(self, until: int, later_times: int):
        self.until = until
        self.later_times = later_times
        self.lock = threading.Lock()
        self.acked: set[str] = set()
        self.deliveries: dict[str, int] = {}
        self.finished = threading.Event()
        self.idle = threading.Condition(self.lock)
        self.in_flight = 0

    def enter(self) -> None:
        with self.lock:
            self.in_flight += 1

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Callbacks still running must return (and their offsets advance) before shutdown."""
        with self.lock:
            return self.idle.wait_for(lambda: self.in_flight == 0, timeout)

    def decide(self, body: str) -> bool:
        """True = acknowledge (CONSUME_SUCCESS); False = RECONSUME_LATER."""
        with self.lock:
            n = self.deliveries.get(body, 0) + 1
            self.deliveries[body] = n
            if n <= self.later_times:
                return False
            self.acked.add(body)
            if self.until and len(self.acked) >= self.until:
                self.finished.set()
            return True


def consume(a) -> int:
    model = MessageModel.BROADCASTING if a.model == "broadcasting" else MessageModel.CLUSTERING
    consumer = PushConsumer(a.group, orderly=a.orderly, message_model=model)
    consumer.set_namesrv_addr(a.namesrv)
    consumer.set_instance_name(a.instance or f"agent-{os.getpid()}")
    consumer.set_thread_count(a.threads)
    # One message per callback batch: the C API answers RECONSUME_LATER for a whole batch as soon as
    # one message of it fails, which would send back messages this agent never saw or acknowledged.
    consumer.set_message_batch_max_size(a.batch_max_size)
    tracker = Tracker(a.until_count, a.reconsume_later_times)
    stop = threading.Event()

    def on_message(_consumer, cmsg):
        tracker.enter()
        try:
            info = describe(RecvMessage(cmsg), a.want_property)
            ack = tracker.decide(info["body"] or "")
            emit("received", ack=ack, **info)
            return _CConsumeStatus.CONSUME_SUCCESS.value if ack else _CConsumeStatus.RECONSUME_LATER.value
        except Exception as exc:  # never let an exception cross into C++
            emit("callback_error", error=repr(exc))
            return _CConsumeStatus.RECONSUME_LATER.value
        finally:
            tracker.leave()

    # Register the callback directly: the wrapper's subscribe() can only say RECONSUME_LATER by raising.
    callback = MSG_CALLBACK_FUNC(on_message)
    check(dll.Subscribe(consumer._handle, a.topic.encode(), a.expr.encode()))
    register = dll.RegisterMessageCallbackOrderly if a.orderly else dll.RegisterMessageCallback
    check(register(consumer._handle, callback))
    def on_sigterm(*_):
        stop.set()
        tracker.finished.set()  # one event wakes the main thread for either reason

    signal.signal(signal.SIGTERM, on_sigterm)
    consumer.start()
    emit("started", pid=os.getpid())
    if tracker.finished.wait(a.timeout):
        reason = "signal" if stop.is_set() else "count"
    else:
        reason = "timeout"
    emit("stopping", reason=reason, acked=len(tracker.acked))
    tracker.wait_idle(10)
    consumer.shutdown()
    emit("done", reason=reason, acked=len(tracker.acked))
    del callback  # kept alive until the C++ consumer is shut down
    return 0 if reason in ("count", "signal") else 2


def check(status) -> None:
    if int(status) != 0:
        raise RuntimeError(f"C++ client call failed with status {int(status)}: {dll.GetLatestErrorMessage()!r}")


# ---- pull consumer ---------------------------------------------------------------------------
def pull(a) -> int:
    consumer = PullConsumer(a.group)
    consumer.set_namesrv_addr(a.namesrv)
    consumer.start()
    emit("started")
    seen: set[str] = set()
    deadline = time.monotonic() + a.timeout
    passes = 0
    while time.monotonic() < deadline and len(seen) < a.until_count:
        passes += 1
        for msg in consumer.pull(a.topic, a.expr, a.max_num):
            info = describe(msg, a.want_property)
            seen.add(info["body"] or "")
            emit("received", ack=True, **info)
        if len(seen) < a.until_count:
            # Nothing is held server-side for this API (no long polling); back off before a new pass.
            threading.Event().wait(0.2)
    reason = "count" if len(seen) >= a.until_count else "timeout"
    consumer.shutdown()
    emit("done", reason=reason, acked=len(seen), passes=passes)
    return 0 if reason == "count" else 2


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="cpp_agent")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("produce", "consume", "pull"):
        s = sub.add_parser(name)
        s.add_argument("--namesrv", required=True)
        s.add_argument("--topic", required=True)
        s.add_argument("--group", default=f"GID_cpp_{name}")
        s.add_argument("--timeout", type=float, default=60.0)
        s.add_argument("--want-property", action="append", default=[])
    pr = sub.choices["produce"]
    pr.add_argument("--mode", choices=("sync", "async", "oneway", "orderly", "batch"), default="sync")
    pr.add_argument("--count", type=int, default=10)
    pr.add_argument("--tag", default=None)
    pr.add_argument("--key", default=None)
    pr.add_argument("--body-prefix", default="cpp-")
    pr.add_argument("--run-id", default=None)
    pr.add_argument("--delay-level", type=int, default=0)
    pr.add_argument("--property", action="append", default=[])
    pr.add_argument("--shards", type=int, default=4)
    pr.add_argument("--batch-size", type=int, default=10)
    pr.add_argument("--send-timeout-ms", type=int, default=5000)
    pr.add_argument("--stop-on-error", action="store_true")
    for name in ("consume", "pull"):
        s = sub.choices[name]
        s.add_argument("--expr", default="*")
        s.add_argument("--until-count", type=int, required=True)
    co = sub.choices["consume"]
    co.add_argument("--model", choices=("clustering", "broadcasting"), default="clustering")
    co.add_argument("--orderly", action="store_true")
    co.add_argument("--reconsume-later-times", type=int, default=0)
    co.add_argument("--instance", default=None)
    co.add_argument("--threads", type=int, default=2)
    co.add_argument("--batch-max-size", type=int, default=1)
    sub.choices["pull"].add_argument("--max-num", type=int, default=32)
    a = p.parse_args(argv)
    code = {"produce": produce, "consume": consume, "pull": pull}[a.cmd](a)
    # Skip interpreter teardown: the wrapper's __del__ would shut the C++ client down a second time.
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
