"""Issue 25 benchmark: a controller-mode failover, measured. Apache 5.1.3's standalone controller
(../shared/rocketmq5; skipped, and said so, without it), a delaymq name server and two delaymq brokers of
one replica group. A stream of level-1 (1 s) delay messages and 1 s timers (alternating) is sent to the
master for ~2 s, so that at any moment some are due; once the slave holds every byte and the topic, the master is killed (SIGKILL).
Measured from the kill: the new master routed as brokerId 0 by the name server, its first scheduled
delivery, all deliveries, and how many were delivered twice (the ConsumeQueue total beyond the sent count);
plus the broker's own figures (delaymq_failover_* as in GET_BROKER_RUNTIME_INFO).

The clients' view: a stock Java 4.9.7 producer (tests/java/agent/JavaAgent.java, routes from the name server)
and Apache's 5.x Python producer (.venv-rmq5, tests/interop/rmq5_agent.py, through a delaymq-proxy on the
name server) each send one plain message every 50 ms to another topic of the group, from before the kill
until they resume; for each, the time from the kill to its first send acknowledged after it (only the new
master can acknowledge one). Either is left out, and said so, when its tool is missing.

controller_sync: SYNC send throughput of a controller-mode master + slave with allAckInSyncStateSet=true
(SyncStateSet of 2) as a share of a lone unreplicated master's (target >= 60 %)."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

from bench import wire
from bench.cluster import Namesrv
from bench.common import Broker, _port_free, pick_port, proc_cpu_s, store_base
from bench.procs import run_here
from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand
from codec.controller import decode_broker_replicas_info, encode_broker_names
from codec.fastjson import loads_lenient
from codec.properties import MessageConst

TOPIC, QUEUES, GROUP = "BenchCtl", 8, "bench-ctl"
CLIENT_TOPIC = "BenchCtlClients"
CLIENT_PAUSE_S = 0.05
CLIENT_WAIT_S = 45.0  # after the kill: the 4.x client re-reads its routes every 30 s


def _start_clients(work: Path, namesrv: str) -> tuple[dict[str, object], dict[str, str]]:
    """The two outside producers (and the proxy the 5.x one dials); which were left out, and why."""
    from tests.helpers.outside_producers import start_outside_producers
    started, missing = start_outside_producers(work, namesrv, CLIENT_TOPIC, CLIENT_PAUSE_S)
    return dict(started), missing


def _ack_times_ms(agent) -> list[int]:  # wall-clock ms of each acknowledged send
    from tests.helpers.outside_producers import ack_times_ms
    return ack_times_ms(agent)


def _ha_port() -> int:
    for _ in range(100):
        p = pick_port()
        if _port_free(p + 1):
            return p
    raise RuntimeError("no free P-2, P, P+1 on 127.0.0.1")


async def _invoke(addr: str, code: int, ext: dict | None = None, body: bytes = b"") -> RemotingCommand:
    c = await wire.connect(addr)
    try:
        return await c.invoke(RemotingCommand.request(code, ext or {}, body), 5)
    finally:
        c.close()


async def _runtime(addr: str) -> dict:
    r = await _invoke(addr, RequestCode.GET_BROKER_RUNTIME_INFO)
    return json.loads(r.body)["table"]


async def _master_at_ns(ns: str) -> str | None:
    r = await _invoke(ns, RequestCode.GET_BROKER_CLUSTER_INFO)
    table = loads_lenient(r.body).get("brokerAddrTable", {}).get(GROUP, {})
    addrs = {str(k): v for k, v in (table.get("brokerAddrs") or {}).items()}
    return addrs.get("0")


async def _until(pred, timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        got = await pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"not within {timeout}s: {what}")
        await asyncio.sleep(step)


def _start_controller(work: Path):
    """Apache 5.1.3's standalone controller (one DLedger peer); (its Rmq5Process, its address)."""
    from tests.helpers.rocketmq5 import Rmq5Process
    ctrl_port, peer_port = pick_port(), pick_port()
    ctrl = f"127.0.0.1:{peer_port}"
    controller = Rmq5Process("mqcontroller", work / "ctrl", {
        "controllerDLegerGroup": "g1", "controllerDLegerPeers": f"n0-{ctrl}", "controllerDLegerSelfId": "n0",
        "controllerStorePath": str(work / "ctrl" / "store"), "listenPort": ctrl_port}, peer_port).start()
    return controller, ctrl


async def _in_sync(ctrl: str) -> bool:
    """Both brokers of GROUP in the controller's SyncStateSet."""
    r = await _invoke(ctrl, RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, {}, encode_broker_names([GROUP]))
    info = decode_broker_replicas_info(r.body).get(GROUP) if r.code == ResponseCode.SUCCESS else None
    return info is not None and len(info.in_sync_replicas) == 2


def bench_controller_sync(quick: bool) -> dict:
    """SYNC send throughput in controller mode: a master + slave elected by Apache's controller with
    allAckInSyncStateSet=true and both in the SyncStateSet (every send waits for the slave's ack), vs a
    lone unreplicated master (ASYNC_MASTER, no slave), all three brokers up at once; the same closed-loop
    send as ha_sync_share (bench.ha.send_rate), alternating lone/pair (order swapped each round) so host
    load drifts hit both alike. Bounded: `rounds` x 2 runs of n sends, each under 120 s."""
    from bench.ha import SEND_LOOP, send_rate
    from tests.helpers.rocketmq5 import rocketmq5_available
    if not rocketmq5_available():
        return {"skipped": "no Apache RocketMQ 5.1.3 in ../shared/rocketmq5 or no java", "met": None}
    n, rounds = (8000, 2) if quick else (20000, 3)
    work = Path(tempfile.mkdtemp(prefix="delaymq-bench-ctlsync-", dir=store_base()))
    controller, ctrl = _start_controller(work)
    brokers: list[Broker] = []
    base = {"flushDiskType": "ASYNC_FLUSH", "mappedFileSizeCommitLog": 256 << 20}
    runs: list[dict] = []
    try:
        with Namesrv() as ns:
            conf = {**base, "enableControllerMode": "true", "controllerAddr": ctrl, "namesrvAddr": ns.addr,
                    "brokerName": GROUP, "allAckInSyncStateSet": "true", "slaveSynchronizeIntervalMs": 300}
            for _ in range(2):  # the first becomes master
                b = Broker(dict(conf))
                b.port = _ha_port()
                brokers.append(b.start(timeout=120))
            lone = Broker({**base, "brokerRole": "ASYNC_MASTER", "brokerName": "bench-lone"})
            brokers.append(lone.start(timeout=120))
            m = brokers[0]

            async def ready() -> None:
                await _until(lambda: _in_sync(ctrl), 60, "both brokers in the SyncStateSet")
                for addr in (m.addr, lone.addr):
                    c = await wire.connect(addr)
                    await wire.create_topic(c, TOPIC, QUEUES)
                    c.close()
            run_here(ready)
            for k in range(rounds):
                order = [("lone", lone), ("sync_pair", m)]
                for kind, b in (order if k % 2 == 0 else order[::-1]):
                    if k == 0:
                        send_rate(b.addr, TOPIC, 2000, warmup=0)
                    # the brokers' own CPU time per measured send: on a shared host the rates swing with the
                    # load, while the CPU a send costs each broker is what the SYNC pair adds
                    procs = {"master": b.pid} if kind == "lone" else {"master": m.pid, "slave": brokers[1].pid}
                    cpu0 = {p: proc_cpu_s(pid) for p, pid in procs.items()}
                    r = send_rate(b.addr, TOPIC, n, warmup=0)
                    cpu = {p: round((proc_cpu_s(pid) - cpu0[p]) * 1e6 / n, 1) for p, pid in procs.items()}
                    runs.append({"round": k, "kind": kind, **r, "cpu_us_per_msg": cpu,
                                 "loadavg_1m": os.getloadavg()[0]})
            in_sync_after = run_here(lambda: _in_sync(ctrl))
            ends = [int(run_here(lambda a=b.addr: _runtime(a))["commitLogMaxOffset"]) for b in brokers[:2]]
    finally:
        for b in brokers:
            b.cleanup()
        controller.stop()
    rate = {kind: sorted(r["msg_per_s"] for r in runs if r["kind"] == kind) for kind in ("lone", "sync_pair")}
    med = {kind: v[len(v) // 2] for kind, v in rate.items()}

    def cpu_med(kind: str, proc: str) -> float:
        v = sorted(r["cpu_us_per_msg"][proc] for r in runs if r["kind"] == kind)
        return v[len(v) // 2]
    share = med["sync_pair"] / med["lone"] if med["lone"] else 0.0
    errors = sum(sum(int(c) for c in (r.get("error_codes") or {}).values()) for r in runs)
    return {"config": {"n_per_run": n, "rounds": rounds, **SEND_LOOP, "allAckInSyncStateSet": True,
                       "sync_state_set": 2},
            "raw": {"runs": runs, "in_sync_after": in_sync_after, "master_slave_commitlog_ends": ends},
            "headline": {"lone_msg_s": med["lone"], "sync_pair_msg_s": med["sync_pair"], "sync_share": round(share, 3),
                         "send_errors": errors,
                         # medians of the brokers' CPU microseconds per send (utime + stime over the run)
                         "cpu_us_per_msg": {"lone_master": cpu_med("lone", "master"),
                                            "pair_master": cpu_med("sync_pair", "master"),
                                            "pair_slave": cpu_med("sync_pair", "slave")}},
            "target": "SYNC (SyncStateSet of 2) send throughput >= 60% of an unreplicated master's",
            "met": share >= 0.60 and errors == 0 and bool(in_sync_after)}


def bench_controller_failover(quick: bool) -> dict:
    from tests.helpers.rocketmq5 import rocketmq5_available
    if not rocketmq5_available():
        return {"skipped": "no Apache RocketMQ 5.1.3 in ../shared/rocketmq5 or no java", "met": None}
    n = 1000 if quick else 3000
    work = Path(tempfile.mkdtemp(prefix="delaymq-bench-ctl-", dir=store_base()))
    controller, ctrl = _start_controller(work)
    brokers: list[Broker] = []
    started: list = []  # the outside clients and the proxy (AgentProcess), stopped by their own PIDs
    try:
        with Namesrv() as ns:
            conf = {"enableControllerMode": "true", "controllerAddr": ctrl, "namesrvAddr": ns.addr,
                    "brokerName": GROUP, "flushDiskType": "ASYNC_FLUSH", "messageDelayLevel": "1s 5s",
                    "mappedFileSizeCommitLog": 256 << 20, "slaveSynchronizeIntervalMs": 300}
            for _ in range(2):  # the first becomes master
                b = Broker(dict(conf))
                b.port = _ha_port()
                brokers.append(b.start(timeout=120))
            m, s = brokers

            async def go() -> dict:
                await _until(lambda: _in_sync(ctrl), 60, "both brokers in the SyncStateSet")
                c = await wire.connect(m.addr)
                await wire.create_topic(c, TOPIC, QUEUES)
                await wire.create_topic(c, CLIENT_TOPIC, QUEUES)
                clients, missing = _start_clients(work, ns.addr)
                producers = {k: a for k, a in clients.items() if k != "proxy"}
                started.extend(clients.values())

                async def clients_acked() -> bool:
                    return all(_ack_times_ms(a) for a in producers.values())
                await _until(clients_acked, 120, "each outside producer's first acknowledged send", 0.1)
                delay_props = wire.props_string({MessageConst.DELAY: "1"})

                def props_of(i: int) -> str:  # even: delay level 1 (1 s); odd: a timer 1 s after its send
                    if i % 2 == 0:
                        return delay_props
                    return wire.props_string({MessageConst.TIMER_DELIVER_MS: str(int(time.time() * 1000) + 1000)})
                t_send = time.monotonic()
                for k in range(0, n, 100):  # ~2 s of sends: some are due at any moment after the first second
                    await asyncio.gather(*(c.invoke(wire.send_cmd(TOPIC, b"c%d" % i, i % QUEUES, props_of(i)))
                                           for i in range(k, min(n, k + 100))))
                    await asyncio.sleep(max(0.0, t_send + 2.0 * (k + 100) / n - time.monotonic()))
                c.close()
                end = int((await _runtime(m.addr))["commitLogMaxOffset"])

                async def replicated() -> bool:
                    if int((await _runtime(s.addr))["commitLogMaxOffset"]) < end:
                        return False
                    r = await _invoke(s.addr, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": 0})
                    return r.code == ResponseCode.SUCCESS
                await _until(replicated, 20, "the slave holds every byte and the topic", 0.01)
                cs = await wire.connect(s.addr)
                base = await wire.total_max_offset(cs, TOPIC, QUEUES)
                m.kill()
                t0 = time.monotonic()
                kill_wall_ms = time.time() * 1000
                routed = first = last = None
                while time.monotonic() - t0 < 60:
                    if routed is None and await _master_at_ns(ns.addr) == s.addr:
                        routed = time.monotonic()
                    got = await wire.total_max_offset(cs, TOPIC, QUEUES)
                    if first is None and got > base:
                        first = time.monotonic()
                    if got >= n and routed is not None:
                        last = time.monotonic()
                        break
                    await asyncio.sleep(0.005)
                total = await wire.total_max_offset(cs, TOPIC, QUEUES)
                cs.close()

                async def clients_resumed() -> bool:
                    return all(any(t > kill_wall_ms for t in _ack_times_ms(a)) for a in producers.values())
                try:
                    await _until(clients_resumed, max(1.0, CLIENT_WAIT_S - (time.monotonic() - t0)),
                                 "each outside producer's first send acknowledged after the kill", 0.1)
                except RuntimeError:
                    pass  # reported below as None: that client had not resumed within CLIENT_WAIT_S
                resume: dict[str, object] = dict(missing)
                for k, a in producers.items():
                    after = [t for t in _ack_times_ms(a) if t > kill_wall_ms]
                    resume[k] = round(min(after) - kill_wall_ms, 1) if after else None
                    resume[k + "_send_errors_after_kill"] = sum(
                        1 for e in a.of("send_error") if int(e.get("t_ms", e.get("ts", 0))) > kill_wall_ms)
                info = await _runtime(s.addr)

                def ms(t: float | None) -> float | None:
                    return round((t - t0) * 1000, 1) if t is not None else None
                return {"pending_at_kill": n - base, "kill_to_routed_ms": ms(routed),
                        "kill_to_first_delivery_ms": ms(first), "kill_to_all_ms": ms(last),
                        "duplicates": max(0, total - n), "delivered": total,
                        "broker_failover_master_s": info.get("controllerFailoverMasterSeconds"),
                        "broker_failover_first_delivery_s": info.get("controllerFailoverFirstDeliverySeconds"),
                        "client_kill_to_first_ack_ms": resume}
            r = run_here(go)
    finally:
        for a in started:
            a.kill()
        for b in brokers:
            b.cleanup()
        controller.stop()
    first = r["kill_to_first_delivery_ms"]
    r["duplicates_pct_of_pending"] = round(100.0 * r["duplicates"] / r["pending_at_kill"], 2) if r["pending_at_kill"] else 0.0
    return {"config": {"n": n, "kinds": "delay level 1 (1 s) and 1 s timers, alternating", "send_window_s": 2.0},
            "raw": r,
            "headline": {k: r[k] for k in ("kill_to_routed_ms", "kill_to_first_delivery_ms", "kill_to_all_ms",
                                           "duplicates", "pending_at_kill", "duplicates_pct_of_pending",
                                           "client_kill_to_first_ack_ms")},
            "target": "kill -9 -> routed and first scheduled delivery <= 1 s (Apache 5.1.3: 0.24-0.42 s)",
            "met": first is not None and r["kill_to_routed_ms"] is not None and max(first, r["kill_to_routed_ms"]) <= 1000}


BENCHES = {"controller_failover": bench_controller_failover, "controller_sync": bench_controller_sync}
