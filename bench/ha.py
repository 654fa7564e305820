"""Issue 13 benchmarks (master/slave HA): SYNC_MASTER send throughput as a share of ASYNC_MASTER,
replication lag at 10,000 msg/s, promote-to-first-delivery after a kill -9 of the master."""

from __future__ import annotations

import asyncio
import json
import time

from bench import wire
from bench.common import Broker, _port_free, percentiles, pick_port
from bench.procs import run_here, run_one
from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.properties import MessageConst


def _ha_port() -> int:
    for _ in range(100):
        p = pick_port()
        if _port_free(p + 1):
            return p
    raise RuntimeError("no free P-2, P, P+1 on 127.0.0.1")


def _pair(role: str, extra: dict | None = None) -> tuple[Broker, Broker]:
    conf = {"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": 256 << 20, **(extra or {})}
    m = Broker({**conf, "brokerRole": role})
    m.port = _ha_port()
    m.start()
    s = Broker({**conf, "brokerRole": "SLAVE", "brokerId": 1, "haMasterAddress": f"127.0.0.1:{m.port + 1}",
                "slaveSynchronizeIntervalMs": 1000})
    s.port = _ha_port()
    s.start()
    return m, s


async def _runtime(conn, key: str) -> int:
    return int((await _table(conn))[key])


async def _table(conn) -> dict:
    r = await conn.invoke(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
    return json.loads(r.body)["table"]


def _wait_slave(m: Broker) -> None:
    async def go():
        c = await wire.connect(m.addr)
        await wire.create_topic(c, "BenchHa", 8)
        deadline = time.monotonic() + 30
        while True:  # a SYNC_MASTER answers 0 only once a slave acked; an ASYNC_MASTER: wait for the copy
            r = await c.invoke(wire.send_cmd("BenchHa", b"w", 0))
            if r.code == ResponseCode.SUCCESS:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"slave never connected ({r.code} {r.remark})")
            await asyncio.sleep(0.05)
        c.close()
    run_here(go)


SEND_LOOP = {"conns": 4, "window": 64, "body_size": 128, "queues": 8}  # the SYNC-share benches' send loop


def send_rate(addr: str, topic: str, n: int, warmup: int = 5000, timeout_s: float = 120.0) -> dict:
    """Closed-loop send throughput to `addr` (SEND_LOOP shape, in a generator process): `warmup`
    sends, then `n` measured; topic with 8 queues already made."""
    if warmup:
        run_one("send_closed_loop", addr=addr, topic=topic, n=warmup, timeout_s=timeout_s, **SEND_LOOP)
    r = run_one("send_closed_loop", addr=addr, topic=topic, n=n, timeout_s=timeout_s, **SEND_LOOP)
    return {"msg_per_s": r["rate"], "ok": r["ok"], "error_codes": r.get("error_codes")}


def bench_ha_sync_share(quick: bool) -> dict:
    n = 30000 if quick else 150000
    rates = {}
    for role in ("ASYNC_MASTER", "SYNC_MASTER"):
        m, s = _pair(role)
        try:
            _wait_slave(m)
            rates[role] = send_rate(m.addr, "BenchHa", n)
        finally:
            m.cleanup()
            s.cleanup()
    share = rates["SYNC_MASTER"]["msg_per_s"] / rates["ASYNC_MASTER"]["msg_per_s"]
    return {"config": {"n": n, "body": 128, "connections": 4, "window": 64, "slaves": 1},
            "raw": rates, "headline": {"async_msg_s": rates["ASYNC_MASTER"]["msg_per_s"],
                                       "sync_msg_s": rates["SYNC_MASTER"]["msg_per_s"], "sync_share": share},
            "target": "SYNC_MASTER >= 10% of ASYNC_MASTER (the RocketMQ user report, cluster-ha.md §5.1)",
            "met": share >= 0.10}


def bench_ha_replication_lag(quick: bool) -> dict:
    """ASYNC_MASTER + slave, 10,000 msg/s for 5 s (2 s quick). Every 2 ms both CommitLog ends are
    sampled (GET_BROKER_RUNTIME_INFO, master first); a slave sample at t with end E < the master's end
    has lag t - (first time the master's end was > E), the age of the oldest byte the slave lacks;
    0 when E reached the master's end sampled just before. Resolution: one sample (~2 ms + a round trip)."""
    rate, dur = 10000, 2.0 if quick else 5.0
    m, s = _pair("ASYNC_MASTER")
    try:
        _wait_slave(m)

        async def sample():
            cm, cs = await wire.connect(m.addr), await wire.connect(s.addr)
            mser, lags, k, ages = [], [], 0, []
            loop = asyncio.get_running_loop()
            t_end = loop.time() + dur
            while loop.time() < t_end:
                tm = loop.time()
                mend = await _runtime(cm, "commitLogMaxOffset")
                mser.append((tm, mend))
                st = await _table(cs)
                send = int(st["commitLogMaxOffset"])
                ts = loop.time()
                if int(st.get("haSchedulerProgressAgeMs", -1)) >= 0:
                    ages.append(int(st["haSchedulerProgressAgeMs"]))
                if send >= mend:
                    lags.append(0.0)  # caught up with the master's end sampled just before
                else:  # the age of the oldest byte the slave does not have yet
                    while k < len(mser) and mser[k][1] <= send:
                        k += 1
                    lags.append((ts - mser[k][0]) * 1000)
                await asyncio.sleep(0.002)
            gap = int((await _table(cs)).get("haSchedulerProgressMaxGapMs", -1))
            cm.close()
            cs.close()
            return {"lag_ms": percentiles(lags), "samples": len(lags), "progress_age_ms": percentiles(ages),
                    "progress_max_gap_ms": gap}

        async def both():
            loop = asyncio.get_running_loop()
            sender = loop.run_in_executor(None, lambda: run_one("send_paced", addr=m.addr, topic="BenchHa",
                                                                rate=rate, duration_s=dur, queues=8))
            lag = await sample()
            sent = await sender
            return {"lag": lag, "send": sent}
        r = run_here(both)
    finally:
        m.cleanup()
        s.cleanup()
    p = r["lag"]["lag_ms"]
    return {"config": {"rate_per_s": rate, "duration_s": dur, "body": 128}, "raw": r,
            "headline": {"lag_p50_ms": p["p50"], "lag_p99_ms": p["p99"],
                         "progress_age_p99_ms": r["lag"]["progress_age_ms"]["p99"],
                         "progress_max_gap_ms": r["lag"]["progress_max_gap_ms"]},
            "target": "lag p99 < 100 ms at 10,000 msg/s; scheduler progress adopted at least every 50 ms",
            "met": p["p99"] < 100 and 0 <= r["lag"]["progress_max_gap_ms"] <= 50}


def bench_ha_promote(quick: bool) -> dict:
    """SYNC_MASTER + slave; 2,000 level-1 (1 s) messages sent; master killed (SIGKILL) at once; once all
    are due, PROMOTE_BROKER; time from the promote request until the first delivery on the new master
    (GET_MAX_OFFSET polled every 2 ms) and until all are delivered."""
    n = 2000
    m, s = _pair("SYNC_MASTER", {"messageDelayLevel": "1s 5s"})
    try:
        _wait_slave(m)

        async def go():
            c = await wire.connect(m.addr)
            props = wire.props_string({MessageConst.DELAY: "1", MessageConst.WAIT: "true"})
            futs = [c.invoke(wire.send_cmd("BenchHa", b"p%d" % i, i % 8, props)) for i in range(n)]
            codes = [r.code for r in await asyncio.gather(*futs)]
            sent_at = time.time()
            m.kill()
            await asyncio.sleep(max(0.0, sent_at + 1.2 - time.time()))  # scenario: every message is due
            cs = await wire.connect(s.addr)
            base = await wire.total_max_offset(cs, "BenchHa", 8)
            t0 = time.monotonic()
            resp = await cs.invoke(RemotingCommand.request(RequestCode.PROMOTE_BROKER, {}, b"{}"), 30)
            t_resp = time.monotonic()
            first = last = None
            while time.monotonic() - t0 < 30:
                got = await wire.total_max_offset(cs, "BenchHa", 8) - base
                if got > 0 and first is None:
                    first = time.monotonic()
                if got >= n - 0:
                    last = time.monotonic()
                    break
                await asyncio.sleep(0.002)
            cs.close()
            return {"acked": codes.count(0), "promote_code": resp.code, "promote": json.loads(resp.body or b"{}"),
                    "promote_rtt_ms": (t_resp - t0) * 1000,
                    "first_delivery_ms": (first - t0) * 1000 if first else None,
                    "all_delivered_ms": (last - t0) * 1000 if last else None}
        r = run_here(go)
    finally:
        m.cleanup()
        s.cleanup()
    first = r["first_delivery_ms"]
    return {"config": {"n": n, "level": "1s"}, "raw": r,
            "headline": {"promote_to_first_delivery_ms": first, "promote_to_all_ms": r["all_delivered_ms"]},
            "target": "first delivery within 1 s of promote", "met": first is not None and first < 1000}


BENCHES = {"ha_sync_share": bench_ha_sync_share, "ha_replication_lag": bench_ha_replication_lag,
           "ha_promote": bench_ha_promote}
