"""RocketMQ 5 gRPC benchmarks: send throughput, receive+ack throughput, lateness of 5.x scheduled messages.

The client is grpc.aio with the generated stubs in this process (one asyncio loop, `conns` channels,
`window` calls in flight), so on a 2-core host client and broker share the CPU like the remoting
benchmarks' load generators do. Lateness is exact: the delivered record's store timestamp minus the
message's delivery_timestamp (both in the received message's system properties).
"""

from __future__ import annotations

import asyncio
import os
import time

from bench.common import Broker, CpuMeter, percentiles, pick_port

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

    md = (("x-mq-client-id", f"bench-{os.getpid()}-{id(chans)}"), ("x-mq-language", "PYTHON"), ("x-mq-protocol", "v2"))
    telemetry = await _consumer_settings(chans[0][1], md, group, topic)

    async def worker(stub) -> None:
        nonlocal got
        while got < n and time.monotonic() < end:
            req = spb.ReceiveMessageRequest(group=pb.Resource(name=group), batch_size=32,
                                            message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1))
            req.invisible_duration.seconds = 60
            req.long_polling_timeout.FromMilliseconds(1000)
            msgs = [r.message async for r in stub.ReceiveMessage(req, timeout=10, metadata=md) if r.HasField("message")]
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
                                                            topic=pb.Resource(name=topic), entries=entries), timeout=10,
                                      metadata=md)

    await asyncio.gather(*(worker(stub) for _, stub in chans))
    dt = time.monotonic() - t0
    telemetry.cancel()
    for ch, _ in chans:
        await ch.close()
    return {"n": n, "received": got, "seconds": round(dt, 3), "rate": round(got / dt, 1)}


async def _consumer_settings(stub, md, group: str, topic: str):
    """A simple consumer's Telemetry stream with its settings, as the official clients open it before
    receiving (Apache's proxy answers ReceiveMessage only for a client whose settings it holds); the
    call is returned once the server answered the settings, to be cancelled after the receives."""
    from server.grpc.v2 import definition_pb2 as pb
    from server.grpc.v2 import service_pb2 as spb
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER, subscription=pb.Subscription(
        group=pb.Resource(name=group), subscriptions=[pb.SubscriptionEntry(
            topic=pb.Resource(name=topic), expression=pb.FilterExpression(type=pb.TAG, expression="*"))]))
    settings.request_timeout.seconds = 3
    call = stub.Telemetry(metadata=md)
    await call.write(spb.TelemetryCommand(settings=settings))
    await asyncio.wait_for(call.read(), 30)
    return call


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


SEND_METHOD = "/apache.rocketmq.v2.MessagingService/SendMessage"


async def _paced_sender(addr: str, topic: str, part: int, parts: int, n: int, send_rate: int, due_offset_ms: int,
                        due_rate: int, window: int, ready, go) -> dict:
    """One sender process: messages i = part, part + parts, ... of n. Message i goes at its slot
    start_ms + i / send_rate (the processes together hold `send_rate`; 0: as fast as `window` allows)
    and is due at start_ms + due_offset_ms + i / due_rate + (i % 997) ms. The messages are built before
    the start (`ready`), serialized once the start is known (`go`), and sent as bytes (no protobuf work
    while paced)."""
    import grpc

    from server.grpc.v2 import service_pb2 as spb
    mine = range(part, n, parts)
    msgs = {i: spb.SendMessageRequest(messages=[_msg(topic, i, b"x" * 128, 1)]) for i in mine}
    ready.put(part)
    start_ms = go.get()
    slot = {i: start_ms + (i * 1000 // send_rate if send_rate else 0) for i in mine}
    due = {i: start_ms + due_offset_ms + i * 1000 // due_rate + (i % 997) for i in mine}
    reqs = {}
    for i, m in msgs.items():
        m.messages[0].system_properties.delivery_timestamp.FromMilliseconds(due[i])
        reqs[i] = m.SerializeToString()
    ch = grpc.aio.insecure_channel(addr)
    call = ch.unary_unary(SEND_METHOD, request_serializer=None, response_deserializer=spb.SendMessageResponse.FromString)
    await ch.channel_ready()
    sem = asyncio.Semaphore(window)
    ok = errors = after_due = 0
    lags: list[int] = []

    async def one(i: int) -> None:
        nonlocal ok, errors, after_due
        try:
            r = await call(reqs[i], timeout=30)
            ok += r.status.code == 20000
            errors += r.status.code != 20000
            if int(time.time() * 1000) >= due[i]:
                after_due += 1  # answered at/after its delivery time: its lateness would be the generator's
        except Exception:
            errors += 1
        finally:
            sem.release()

    tasks = []
    for i in mine:
        wait = slot[i] / 1000 - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        await sem.acquire()
        lags.append(int(time.time() * 1000) - slot[i])
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)
    end_ms = int(time.time() * 1000)
    await ch.close()
    lags.sort()
    return {"ok": ok, "errors": errors, "sent_after_due": after_due, "start_ms": start_ms, "end_ms": end_ms,
            "behind_slot_ms": {"p50": lags[len(lags) // 2], "p99": lags[len(lags) * 99 // 100], "max": lags[-1]}}


def _sender_process(kwargs: dict) -> dict:
    import uvloop
    return uvloop.run(_paced_sender(**kwargs))


def _scheduled_lateness(quick: bool, preload: bool) -> dict:
    """5.x scheduled messages due at 1,000 msg/s.

    Generator: 3 sender processes (spawned, each on its own uvloop and channel), requests serialized
    before the start. live: paced to absolute slots so together they send 1,000 msg/s, each message
    due 3 s (+ i % 997 ms) after its slot, so sends, wheel deliveries and receives overlap.
    preload: sent as fast as the broker takes them, due from 25 s after the start at 1,000 msg/s.
    The consumer (this process) receives and acks on 2 channels. Lateness per delivered message: the
    delivered record's store timestamp minus its delivery_timestamp (broker clock, exact), and the
    consumer's receive time minus delivery_timestamp (same host clock)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    rate, dur, senders = 1000, (5 if quick else (10 if preload else 20)), 3
    due_offset_ms = (12_000 if quick else 25_000) if preload else 3000
    n = rate * dur
    store_late: list[int] = []
    recv_late: list[int] = []

    def on_message(m, now_ms: int) -> None:
        sp = m.system_properties
        due = sp.delivery_timestamp.ToMilliseconds()
        store_late.append(sp.store_timestamp.ToMilliseconds() - due)
        recv_late.append(now_ms - due)

    ctx = mp.get_context("spawn")
    with _broker() as b, ctx.Manager() as mgr, ProcessPoolExecutor(senders, mp_context=ctx) as pool:
        addr = f"127.0.0.1:{b.config['grpcListenPort']}"
        ready, go = mgr.Queue(), mgr.Queue()
        futs = [pool.submit(_sender_process, {"addr": addr, "topic": "BenchGrpcLate", "part": k, "parts": senders,
                                              "n": n, "send_rate": 0 if preload else rate,
                                              "due_offset_ms": due_offset_ms, "due_rate": rate, "window": 64,
                                              "ready": ready, "go": go}) for k in range(senders)]
        for _ in range(senders):
            ready.get(timeout=120)
        start_ms = int(time.time() * 1000) + 500  # every sender has its messages built: start together
        for _ in range(senders):
            go.put(start_ms)
        meter, load0 = CpuMeter(b.pid).start(), os.getloadavg()[0]
        recv = asyncio.run(_receive_all(addr, "BenchGrpcLate", "BenchGrpcLateG", n, conns=2,
                                        deadline_s=dur + due_offset_ms / 1000 + 35, on_message=on_message))
        parts = [f.result() for f in futs]
        broker_cpu, load1 = meter.stop(), os.getloadavg()[0]
    sent_ok = sum(p["ok"] for p in parts)
    send_s = (max(p["end_ms"] for p in parts) - start_ms) / 1000

    st, rv = percentiles(store_late, (50, 99, 99.9)), percentiles(recv_late, (50, 99, 99.9))
    return {"config": {"rate": rate, "duration_s": dur, "mode": "preload" if preload else "live",
                       "senders": f"{senders} processes, 64 in flight each, pre-serialized requests "
                       + ("unpaced (sent ahead)" if preload else "paced to absolute slots at the rate"),
                       "deliver": f"start + {due_offset_ms} ms + i / rate + (i % 997) ms (timer wheel)", "receivers": "2 channels, batch 32, acked",
                       "lateness": "store_ms: delivered record's store_timestamp - delivery_timestamp (broker clock); "
                                   "receive_ms: consumer's receive time - delivery_timestamp"},
            "raw": {"senders": parts, "receive": recv, "send_rate": round(sent_ok / send_s, 1),
                    "broker_cpu": broker_cpu, "host_loadavg_1m": [load0, load1],
                    "lateness_store_ms": st, "lateness_receive_ms": rv},
            "headline": {"send_rate": round(sent_ok / send_s, 1), "sent_after_due": sum(p["sent_after_due"] for p in parts),
                         "store_p50_ms": st.get("p50"), "store_p99_ms": st.get("p99"),
                         "receive_p99_ms": rv.get("p99"), "received": len(store_late), "min_ms": st.get("min")},
            "target": "never early (min >= 0); p99 reported", "met": bool(store_late) and st["min"] >= 0}


def bench_grpc_scheduled_lateness(quick: bool) -> dict:
    return _scheduled_lateness(quick, preload=False)


def bench_grpc_scheduled_lateness_preloaded(quick: bool) -> dict:
    return _scheduled_lateness(quick, preload=True)


BENCHES = {"grpc_send_receive": bench_grpc_send_receive, "grpc_scheduled_lateness": bench_grpc_scheduled_lateness,
           "grpc_scheduled_lateness_preloaded": bench_grpc_scheduled_lateness_preloaded}
