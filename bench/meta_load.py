"""The `meta_scale` benchmark's load generators (bench/meta.py runs the phases): each coroutine here
runs in its own spawned process on a fresh uvloop (`bench.procs.run_job("bench.meta_load", name, kwargs)`)
and talks to the broker over the wire only: topic and group creates, the GET_MAX_OFFSET prober, the
offset commits, the requests that walk the tables."""

from __future__ import annotations

import asyncio
import json
import os
import time

from bench import wire
from bench.common import percentiles
from codec.bodies import ConsumerData, HeartbeatData, build_subscription, encode_heartbeat
from codec.codes import BROKER_VERSION, DEFAULT_TOPIC, RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.frame import FRAME_PREFIX

PROBE_RATE = 200


def _topic_cmd(name: str) -> RemotingCommand:
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": name, "defaultTopic": DEFAULT_TOPIC, "readQueueNums": "4", "writeQueueNums": "4", "perm": "6",
        "topicFilterType": "SINGLE_TAG", "topicSysFlag": "0", "order": "false"})


def _group_cmd(name: str) -> RemotingCommand:
    body = json.dumps({"groupName": name, "consumeEnable": True, "consumeFromMinEnable": True,
                       "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
                       "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True}).encode()
    return RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {}, body)


async def create_many(addr: str, kind: str, start: int, n: int, window: int) -> dict:
    """Create topics `tenant-<i>` / groups `cg-<i>` for i in [start, start+n), `window` in flight;
    completion times of every 1000th for the rate curve."""
    conn = await wire.connect(addr)
    make = _topic_cmd if kind == "topic" else _group_cmd
    loop = asyncio.get_running_loop()
    sem = asyncio.Semaphore(window)
    errors = 0
    marks: list[float] = []
    done = 0
    t0 = time.monotonic()

    async def one(i: int) -> None:
        nonlocal errors, done
        try:
            r = await conn.invoke(make(f"tenant-{i:06d}" if kind == "topic" else f"cg-{i:05d}"), timeout=30)
            errors += r.code != ResponseCode.SUCCESS
        finally:
            sem.release()
        done += 1
        if done % 1000 == 0:
            marks.append(time.monotonic() - t0)

    tasks = []
    for i in range(start, start + n):
        await sem.acquire()
        tasks.append(loop.create_task(one(i)))
    await asyncio.gather(*tasks)
    conn.close()
    return {"n": n, "errors": errors, "seconds": time.monotonic() - t0, "marks": marks}


async def probe(addr: str, stop_file: str, max_s: float, rate: float = PROBE_RATE) -> dict:
    """GET_MAX_OFFSET round trips at `rate`/s until `stop_file` exists: (wall time, rtt ms) samples."""
    conn = await wire.connect(addr)
    samples: list[tuple[float, float]] = []
    errors = 0
    loop = asyncio.get_running_loop()
    t_next = loop.time()
    t_end = time.monotonic() + max_s
    i = 0
    while time.monotonic() < t_end:
        if i % 50 == 0 and os.path.exists(stop_file):
            break
        i += 1
        t0 = time.perf_counter()
        try:
            r = await conn.invoke(RemotingCommand.request(RequestCode.GET_MAX_OFFSET,
                                                          {"topic": DEFAULT_TOPIC, "queueId": str(i % 8)}), timeout=10)
            errors += r.code != ResponseCode.SUCCESS
        except TimeoutError:  # counted with its 10 s: the broker did not answer in time
            errors += 1
        samples.append((time.time(), (time.perf_counter() - t0) * 1000))
        t_next += 1.0 / rate
        delay = t_next - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        else:
            t_next = loop.time()
    conn.close()
    return {"samples": samples, "errors": errors}


_COMMIT_TAIL = f',"flag":0,"language":"JAVA","opaque":%d,"serializeTypeCurrentRPC":"JSON","version":{BROKER_VERSION}}}'


def _commit_frame_reference(group: str, topic: str, queue_id: int, offset: int, opaque: int) -> bytes:
    cmd = RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {  # strings, as Java sends
        "consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)})
    cmd.opaque = opaque
    return wire.encode_frame_bytes(cmd)


def _commit_frame(group: str, topic: str, queue_id: int, offset: int, opaque: int) -> bytes:
    """`_commit_frame_reference` in one format (the generator's CPU is the host's too: 40,000 encodes a
    second through RemotingCommand cost more than the broker's decode). Checked equal at every run's start."""
    header = (f'{{"code":{int(RequestCode.UPDATE_CONSUMER_OFFSET)},"extFields":{{"consumerGroup":"{group}",'
              f'"topic":"{topic}","queueId":"{queue_id}","commitOffset":"{offset}"}}'
              + _COMMIT_TAIL % opaque).encode()
    return FRAME_PREFIX.pack(4 + len(header), len(header)) + header


async def commit_offsets(addr: str, g0: int, g1: int, duration_s: float, topics: int) -> dict:
    """Groups cg-<g0>..cg-<g1-1> commit offsets on 4 queues of topic tenant-<g % topics> every second,
    spread over 100 ticks a second; acknowledged requests, all in flight at once per tick."""
    sample = ("cg-00001", "tenant-000001", 3, 123, 1 << 30)
    assert _commit_frame(*sample) == _commit_frame_reference(*sample), "the commit frame format drifted"
    conn = await wire.connect(addr)
    loop = asyncio.get_running_loop()
    groups = list(range(g0, g1))
    ticks = 100
    per_tick = [groups[i::ticks] for i in range(ticks)]
    sent = ok = errors = 0
    rtts: list[float] = []
    pending: dict[int, float] = {}

    def on_resp(cmd) -> None:
        nonlocal ok, errors
        t = pending.pop(cmd.opaque, None)
        if t is not None:
            rtts.append((time.perf_counter() - t) * 1000)
        if cmd.code == ResponseCode.SUCCESS:
            ok += 1
        else:
            errors += 1

    t_start = loop.time()
    t_end = t_start + duration_s
    tick = 0
    second = 0
    while loop.time() < t_end:
        if conn.closed.done():  # the broker closed the connection: report it, do not write into it
            break
        second = tick // ticks + 1
        frames = []
        for g in per_tick[tick % ticks]:
            for q in range(4):
                opaque = conn.next_opaque()
                conn.waiters[opaque] = on_resp
                pending[opaque] = time.perf_counter()
                frames.append(_commit_frame(f"cg-{g:05d}", f"tenant-{g % topics:06d}", q, second * 10 + q, opaque))
        conn.write(b"".join(frames))
        sent += len(frames)
        tick += 1
        delay = t_start + tick / ticks - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
    deadline = loop.time() + 30
    while pending and loop.time() < deadline:
        await asyncio.sleep(0.05)
    elapsed = loop.time() - t_start
    conn.close()
    return {"sent": sent, "ok": ok, "errors": errors, "lost": len(pending), "seconds": elapsed,
            "connection_closed": conn.closed.done(), "rtt_ms": percentiles(rtts)}


HEARTBEAT_SUBSCRIPTIONS = 1000  # the consumer of the whole-table phase subscribes this many tenant topics


def _heartbeat_cmd(topics: int) -> RemotingCommand:
    """HEART_BEAT of one client whose consumer group cg-00003 subscribes HEARTBEAT_SUBSCRIPTIONS topics."""
    subs = [build_subscription(f"tenant-{(i * 97) % topics:06d}", "*") for i in range(HEARTBEAT_SUBSCRIPTIONS)]
    hb = HeartbeatData("127.0.0.1@meta-bench", [ConsumerData("cg-00003", "CONSUME_PASSIVELY", "CLUSTERING",
                                                             "CONSUME_FROM_LAST_OFFSET", subs)])
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, encode_heartbeat(hb))


async def _scrape(metrics_port: int) -> tuple[int, int]:
    """GET /metrics (HTTP/1.0: the body ends at close); (status, body bytes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", metrics_port)
    writer.write(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), len(body)


async def whole_tables(addr: str, topics: int, metrics_port: int) -> dict:
    """The requests that walk the tables, once each (0.5 s apart, with the prober running): the four
    whole-table bodies, a route, heartbeats with HEARTBEAT_SUBSCRIPTIONS subscriptions, a /metrics scrape."""
    conn = await wire.connect(addr)
    out = {}
    steps: list[tuple[str, RemotingCommand | None]] = [
        ("GET_ALL_TOPIC_CONFIG", RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {})),
        ("GET_ALL_TOPIC_CONFIG_again", RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG, {})),
        ("GET_ALL_TOPIC_LIST", RemotingCommand.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, {})),
        ("GET_ALL_SUBSCRIPTIONGROUP_CONFIG", RemotingCommand.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})),
        ("GET_ALL_CONSUMER_OFFSET", RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET, {})),
        ("GET_ROUTEINFO_BY_TOPIC", RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC,
                                                           {"topic": f"tenant-{topics // 2:06d}"})),
        (f"HEART_BEAT_{HEARTBEAT_SUBSCRIPTIONS}_subscriptions", _heartbeat_cmd(topics)),
        (f"HEART_BEAT_{HEARTBEAT_SUBSCRIPTIONS}_subscriptions_again", _heartbeat_cmd(topics)),
        ("metrics_scrape", None)]
    for name, cmd in steps:
        t0 = time.perf_counter()
        if cmd is None:
            code, size = await _scrape(metrics_port)
        else:
            r = await conn.invoke(cmd, timeout=60)
            code, size = r.code, len(r.body_bytes())
        out[name] = {"ms": round((time.perf_counter() - t0) * 1000, 1), "code": code, "bytes": size}
        await asyncio.sleep(0.5)
    conn.close()
    return out


async def create_topic(addr: str, name: str, queues: int = 1) -> int:
    conn = await wire.connect(addr)
    try:
        cmd = _topic_cmd(name)
        cmd.ext_fields.update(readQueueNums=str(queues), writeQueueNums=str(queues))
        return (await conn.invoke(cmd, timeout=30)).code
    finally:
        conn.close()
