"""RocketMQ 5 gRPC benchmarks: send throughput, receive+ack throughput, lateness of 5.x scheduled messages.

The client is grpc.aio with the generated stubs in this process (one asyncio loop, `conns` channels,
`window` calls in flight), so on a 2-core host client and broker share the CPU like the remoting
benchmarks' load generators do. Lateness is exact: the delivered record's store timestamp minus the
message's delivery_timestamp (both in the received message's system properties).
"""

from __future__ import annotations

import asyncio
import statistics
import time

from bench.common import Broker, pick_port

TOPIC_QUEUES = 8


def _stub(addr: str):
    import grpc

    from server.grpc.v2 import service_pb2_grpc as sg
    ch = grpc.aio.insecure_channel(addr)
    return ch, sg.MessagingServiceStub(ch)


def _msg(topic: str, i: int, body: bytes, deliver_ms: int | None = None):
    from server.grpc.v2 import definition_pb2 as pb
    m = pb.Message(topic=pb.Resource(name=topic), body=body)
    sp = m.system_properties
    sp.message_id = f"B{i:012d}"
    sp.message_type = pb.DELAY if deliver_ms else pb.NORMAL
    if deliver_ms:
        sp.delivery_timestamp.FromMilliseconds(deliver_ms)
    return m


async def _send_all(addr: str, topic: str, n: int, conns: int, window: int, body: bytes,
                    deliver_of=None, rate: int = 0) -> dict:
    from server.grpc.v2 import service_pb2 as spb
    chans = [_stub(addr) for _ in range(conns)]
    sem = asyncio.Semaphore(window * conns)
    ok = errors = late = 0
    t0 = time.monotonic()

    async def one(i: int) -> None:
        nonlocal ok, errors, late
        try:
            stub = chans[i % conns][1]
            deliver = deliver_of(i) if deliver_of else None
            if deliver is not None and deliver <= time.time() * 1000:
                late += 1  # the load generator fell behind: this one was sent after its delivery time
            r = await stub.SendMessage(spb.SendMessageRequest(messages=[_msg(topic, i, body, deliver)]), timeout=30)
            if r.status.code == 20000:
                ok += 1
            else:
                errors += 1
        finally:
            sem.release()

    tasks = []
    for i in range(n):
        if rate:
            due = t0 + i / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        await sem.acquire()
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)
    dt = time.monotonic() - t0
    for ch, _ in chans:
        await ch.close()
    return {"n": n, "ok": ok, "errors": errors, "seconds": round(dt, 3), "rate": round(ok / dt, 1),
            "sent_after_due": late}


async def _receive_all(addr: str, topic: str, group: str, n: int, conns: int, deadline_s: float,
                       ack: bool = True, on_message=None) -> dict:
    from server.grpc.v2 import definition_pb2 as pb
    from server.grpc.v2 import service_pb2 as spb
    chans = [_stub(addr) for _ in range(conns)]
    got = 0
    t0 = time.monotonic()
    end = t0 + deadline_s

    async def worker(stub) -> None:
        nonlocal got
        while got < n and time.monotonic() < end:
            req = spb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=32,
                                            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1))
            req.invisible_duration.seconds = 60
            req.long_polling_timeout.FromMilliseconds(1000)
            msgs = [r.message async for r in stub.ReceiveMessage(req, timeout=10) if r.HasField("message")]
            if not msgs:
                continue
            got += len(msgs)
            if on_message is not None:
                now = int(time.time() * 1000)
                for m in msgs:
                    on_message(m, now)
            if ack:
                entries = [spb.AckMessageEntry(message_id=m.system_properties.message_id,
                                               receipt_handle=m.system_properties.receipt_handle) for m in msgs]
                await stub.AckMessage(spb.AckMessageRequest(group=pb.Resource(name=group),
                                                            topic=pb.Resource(name=topic), entries=entries), timeout=10)

    await asyncio.gather(*(worker(stub) for _, stub in chans))
    dt = time.monotonic() - t0
    for ch, _ in chans:
        await ch.close()
    return {"n": n, "received": got, "seconds": round(dt, 3), "rate": round(got / dt, 1)}


def _broker() -> Broker:
    return Broker({"flushDiskType": "ASYNC_FLUSH", "grpcListenPort": pick_port(), "defaultTopicQueueNums": TOPIC_QUEUES})


def bench_grpc_send_receive(quick: bool) -> dict:
    n = 5000 if quick else 20000
    with _broker() as b:
        addr = f"127.0.0.1:{b.config['grpcListenPort']}"
        send = asyncio.run(_send_all(addr, "BenchGrpc", n, conns=4, window=32, body=b"x" * 128))
        recv = asyncio.run(_receive_all(addr, "BenchGrpc", "BenchGrpcG", send["ok"], conns=4, deadline_s=120))
    return {"config": {"n": n, "body": 128, "send": "1 message per SendMessage, 4 channels x 32 in flight",
                       "receive": "4 channels, batch 32, each batch acked in one AckMessage"},
            "raw": {"send": send, "receive_ack": recv},
            "headline": {"grpc_send_msg_s": send["rate"], "grpc_receive_ack_msg_s": recv["rate"]},
            "target": "(report, next to the remoting numbers)", "met": None}


def bench_grpc_scheduled_lateness(quick: bool) -> dict:
    rate, dur = 1000, (5 if quick else 10)
    n = rate * dur
    lateness: list[int] = []

    def on_message(m, now_ms: int) -> None:
        sp = m.system_properties
        lateness.append(sp.store_timestamp.ToMilliseconds() - sp.delivery_timestamp.ToMilliseconds())

    async def run(addr: str) -> tuple[dict, dict]:
        t0 = int(time.time() * 1000)
        recv = asyncio.ensure_future(_receive_all(addr, "BenchGrpcLate", "BenchGrpcLateG", n, conns=2,
                                                  deadline_s=dur + 30, on_message=on_message))
        send = await _send_all(addr, "BenchGrpcLate", n, conns=2, window=16, body=b"x" * 128, rate=rate,
                               deliver_of=lambda i: t0 + 3000 + i * 1000 // rate + (i % 997))
        return send, await recv

    with _broker() as b:
        send, recv = asyncio.run(run(f"127.0.0.1:{b.config['grpcListenPort']}"))
    q = sorted(lateness)

    def pct(p: float):
        return q[min(len(q) - 1, int(p * len(q)))] if q else None

    return {"config": {"rate": rate, "duration_s": dur, "deliver": "start + 3 s + i ms + (i % 997) ms (timer wheel)",
                       "lateness": "delivered record's store_timestamp - delivery_timestamp (exact, ms)"},
            "raw": {"send": send, "receive": recv, "lateness_ms": {
                "p50": pct(0.5), "p99": pct(0.99), "max": q[-1] if q else None, "min": q[0] if q else None,
                "mean": round(statistics.fmean(q), 2) if q else None, "count": len(q)}},
            "headline": {"p50_ms": pct(0.5), "p99_ms": pct(0.99), "received": len(q),
                         "sent_after_due": send["sent_after_due"]},
            "target": "never early (min >= 0); p99 reported", "met": bool(q) and q[0] >= 0}


BENCHES = {"grpc_send_receive": bench_grpc_send_receive, "grpc_scheduled_lateness": bench_grpc_scheduled_lateness}
