"""Issue 24 item 5: RocketMQ 5 (gRPC) topologies side by side, the same client and message for each.

`python -m bench.grpc_topology [--seconds S] [--setups a,b,..] [--rounds R]` (also `grpc_topology` in
run_all, S = 5). Setups, each started fresh, measured, stopped (one after the other; with R > 1 the
whole list again, so a host that slows down mid-run slows every setup alike):

| setup | processes (CPU measured for each) |
|---|---|
| `floor` | the bare grpc.aio SendMessage echo of bench.grpc_echo (sends only) |
| `floor_envoy` | the bare SendMessage echo on pyvoy (Envoy, bench.grpc_echo's ASGI echo; the Envoy process's CPU; sends only): the floor of `grpcServerStack=envoy` |
| `delaymq_remoting4` | a delaymq broker sent the same 128 B message over 4.x remoting (SEND_MESSAGE_V2 with a message id, 2 client processes x 64 in flight; sends only): the broker's CPU per remoting send, the scale for the broker-behind-proxy figure |
| `delaymq_remoting4_envoy` | as `delaymq_remoting4`, the broker on `grpcServerStack=envoy` (not in the default list) |
| `delaymq_local` | a delaymq broker, in-broker gRPC endpoint |
| `delaymq_local_envoy` | the same broker on `grpcServerStack=envoy`: one serving process, Envoy with the whole broker embedded (its CPU, + the launcher's) |
| `delaymq_proxy1` | delaymq name server + broker + one delaymq-proxy |
| `delaymq_proxy2` | delaymq name server + broker + two delaymq-proxies (clients split between them) |
| `delaymq_proxy1_ref` | as `delaymq_proxy1`, the proxy with `sendCoalesce=false` (one write per send; not in the default list) |
| `delaymq_envoy1`, `delaymq_envoy2` | the same with delaymq-proxy on `grpcServerStack=envoy` (each proxy's CPU: its Envoy process, the embedded Python included, + its launcher) |
| `apache_local` | Apache 5.1.3 name server + `mqproxy -pm local` (proxy and broker in one JVM) |
| `apache_cluster` | Apache 5.1.3 name server + broker + `mqproxy -pm cluster` |

The Apache setups need ../shared/rocketmq5 and java (skipped, and said so, without them).

Per setup, three phases:
1. sends: 2 client processes (spawned, uvloop, one grpc.aio channel each, 64 SendMessage in flight,
   one 128 B NORMAL message per call, distinct ids) for S seconds after a warm-up (1 s; `--jvm-warmup`,
   default 30 s, for the Apache setups, whose JIT compiles meanwhile: 30 s brought Apache 5.1.3's local
   proxy to 345 µs per send here, where 8 s had measured 1,414): sends/s and CPU µs per send of
   every process;
2. receive+ack (the Apache setups first receive a third of it, unmeasured, within min(jvm-warmup, 10) s): 4 channels in
   this process (ReceiveMessage batch 32, every batch acked with one AckMessage) drain what phase 1
   stored, for at most S seconds: received/s and CPU µs per message;
   (the receivers open a simple consumer's Telemetry stream with its settings first, as the official
   clients do: Apache's proxy serves ReceiveMessage only to a client whose settings it holds);
3. scheduled: 2 client processes send 5.x DELAY messages paced at 500/s for S seconds (no more than
   3,000), each due 3 s (+ i % 997 ms) after its send slot, to a `message.type=DELAY` topic, received and
   acked as they come: lateness = the delivered message's store timestamp - its delivery timestamp
   (broker clock) and the receive time - delivery timestamp (same host), p50 / p99.

Per-core cost: the CPU µs per message summed over the setup's processes, and 1e6 / that = messages one
core would carry, the figure to scale a larger machine by. Topics are created (8 queues, their
`message.type`) through the broker's remoting port, the group with its offsets at 0 on every queue
(Apache's proxy starts a new group at the queue's end otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import REPO, Broker, percentiles, pick_port, proc_cpu_s, store_base, write_result
from bench.grpc_floor import (
    CLIENTS,
    WARMUP_S,
    WINDOW,
    Proc,
    _client_process,
    _probe,
    closed_loop,
    metadata,
    request_bytes,
)

SETUPS = ["floor", "floor_envoy", "delaymq_remoting4", "delaymq_local", "delaymq_local_envoy", "delaymq_proxy1",
          "delaymq_proxy2", "delaymq_envoy1", "delaymq_envoy2",
          "apache_local", "apache_cluster"]
# not in the default list: delaymq_proxy1 on the proxy's reference send path (sendCoalesce=false, one write per
# send), for the side by side of server.proxy.coalesce; delaymq_remoting4 on a broker of grpcServerStack=envoy (its
# remoting port served inside Envoy's process: must cost what delaymq_remoting4's does)
EXTRA_SETUPS = ["delaymq_proxy1_ref", "delaymq_remoting4_envoy"]
RMQ5 = REPO.parent / "shared" / "rocketmq5"
TOPIC, DELAY_TOPIC, GROUP, DELAY_GROUP = "BenchFloor", "BenchTopoDelay", "BenchTopoG", "BenchTopoDelayG"
QUEUES = 8
SCHEDULED_RATE, SCHEDULED_MAX, DUE_AFTER_MS = 500, 3000, 3000
SENDS_ONLY = frozenset({"floor", "floor_envoy", "delaymq_remoting4", "delaymq_remoting4_envoy"})  # no store to receive from, or no gRPC
JVM_WARMUP_S = 30.0


def rmq5_available() -> bool:
    return (RMQ5 / "bin" / "mqproxy").is_file() and shutil.which("java") is not None


# ------------------------------------------------------------------ processes

def _wait_port(port: int, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), 0.5):
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout} s")


class Java:
    """An Apache RocketMQ 5.1.3 launcher (`bin/NAME ARGS`) in its own session, ready once `port` listens."""

    def __init__(self, name: str, args: list[str], port: int, work: Path) -> None:
        home = work / f"home-{name}-{port}"
        home.mkdir(parents=True)
        env = dict(os.environ, RMQ_USER_HOME=str(home), RMQ_HEAP="-Xms256m -Xmx512m")
        with open(work / f"{name}-{port}.out", "wb") as out:
            self.proc = subprocess.Popen([str(RMQ5 / "bin" / name), *args], cwd=home, env=env, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            _wait_port(port, self.proc, 120, name)
        except RuntimeError:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)


class Setup:
    """What one setup serves: the gRPC addresses clients use, the broker's remoting address (topic and
    group admin), the processes whose CPU counts, and how to stop them."""

    def __init__(self) -> None:
        self.grpc: list[str] = []
        self.remoting = ""
        self.pids: dict[str, int] = {}
        self.closers: list = []
        self.work = Path(tempfile.mkdtemp(prefix="delaymq-topo-", dir=store_base()))

    def close(self) -> None:
        for c in reversed(self.closers):
            try:
                c()
            except Exception:  # a stop failure must not keep the other processes running
                pass
        shutil.rmtree(self.work, ignore_errors=True)


def _delaymq_namesrv(s: Setup) -> str:
    port = pick_port()
    ns = Proc([sys.executable, "-m", "server.cluster.namesrv", "--port", str(port), "--log-level", "warning"],
              r"namesrv ready on")
    s.closers.append(ns.stop)
    s.pids["namesrv"] = ns.pid
    return f"127.0.0.1:{port}"


def _delaymq_broker(s: Setup, extra: dict) -> Broker:
    b = Broker({"flushDiskType": "ASYNC_FLUSH", "defaultTopicQueueNums": QUEUES, **extra})
    b.start()
    s.closers.append(b.cleanup)
    if b.serving_pid is not None:  # grpcServerStack=envoy: the broker runs in the Envoy child
        s.pids["broker"] = b.serving_pid
        s.pids["broker-launcher"] = b.pid
    else:
        s.pids["broker"] = b.pid
    s.remoting = b.addr
    return b


def _delaymq_proxy(s: Setup, ns: str, name: str, stack: str = "grpcio", conf: dict | None = None) -> None:
    port = pick_port()
    extra = ["--config", str(_conf(s.work / f"{name}.conf", conf))] if conf else []
    px = Proc([sys.executable, "-m", "server.proxy", "--namesrv", ns, "--grpc-port", str(port), "--host", "127.0.0.1",
               "--log-level", "warning", "--grpc-server-stack", stack, *extra], r"proxy ready on")
    s.closers.append(px.stop)
    envoy = re.search(r"\(envoy pid (\d+)\)", px.ready_line)
    if envoy:  # the Envoy child serves; the launcher only waits for a signal
        s.pids[name] = int(envoy.group(1))
        s.pids[f"{name}-launcher"] = px.pid
    else:
        s.pids[name] = px.pid
    s.grpc.append(f"127.0.0.1:{port}")


def _apache(s: Setup, cluster: bool) -> None:
    ns_port = pick_port()
    ns = Java("mqnamesrv", ["-c", str(_conf(s.work / "namesrv.conf", {"listenPort": ns_port}))], ns_port, s.work)
    s.closers.append(ns.stop)
    s.pids["namesrv"] = ns.pid
    b_port = pick_port()
    broker_conf = _conf(s.work / "broker.conf", {
        "brokerClusterName": "BenchCluster", "brokerName": "bench-apache", "brokerId": 0,
        "brokerRole": "ASYNC_MASTER", "flushDiskType": "ASYNC_FLUSH", "namesrvAddr": f"127.0.0.1:{ns_port}",
        "brokerIP1": "127.0.0.1", "listenPort": b_port, "haListenPort": pick_port(),
        "storePathRootDir": s.work / "store", "storePathCommitLog": s.work / "store" / "commitlog",
        "timerWheelEnable": "true", "autoCreateTopicEnable": "true", "mappedFileSizeCommitLog": 134217728,
        "mappedFileSizeConsumeQueue": 600000})
    g_port = pick_port()
    proxy_conf = s.work / "proxy.json"
    proxy_conf.write_text(json.dumps({"rocketMQClusterName": "BenchCluster", "grpcServerPort": g_port,
                                      "remotingListenPort": pick_port(), "namesrvAddr": f"127.0.0.1:{ns_port}"}))
    if cluster:
        br = Java("mqbroker", ["-c", str(broker_conf)], b_port, s.work)
        s.closers.append(br.stop)
        s.pids["broker"] = br.pid
        px = Java("mqproxy", ["-pm", "cluster", "-pc", str(proxy_conf)], g_port, s.work)
        s.pids["proxy"] = px.pid
    else:
        px = Java("mqproxy", ["-pm", "local", "-pc", str(proxy_conf), "-bc", str(broker_conf)], g_port, s.work)
        s.pids["proxy+broker"] = px.pid
        _wait_port(b_port, px.proc, 120, "the local-mode proxy's broker")
    s.closers.append(px.stop)
    s.remoting = f"127.0.0.1:{b_port}"
    s.grpc.append(f"127.0.0.1:{g_port}")


def _conf(path: Path, values: dict) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    return path


def start(setup: str) -> Setup:
    s = Setup()
    try:
        if setup in ("floor", "floor_envoy"):
            port = pick_port()
            p = Proc([sys.executable, "-m", "bench.grpc_echo", "pyvoy" if setup == "floor_envoy" else "aio_uvloop",
                      str(port)], r"echo ready on")
            s.closers.append(p.stop)
            served_by = re.search(r" pid (\d+)", p.ready_line)  # pyvoy's Envoy child serves
            s.pids["echo"] = int(served_by.group(1)) if served_by else p.pid
            s.grpc.append(f"127.0.0.1:{port}")
            return s
        if setup in ("delaymq_remoting4", "delaymq_remoting4_envoy"):
            envoy = {"grpcListenPort": pick_port(), "grpcServerStack": "envoy"} if setup.endswith("_envoy") else {}
            _delaymq_broker(s, envoy)
            from bench.meta_load import create_topic
            asyncio.run(create_topic(s.remoting, TOPIC, QUEUES))
            return s
        if setup in ("delaymq_local", "delaymq_local_envoy"):
            stack = {"grpcServerStack": "envoy"} if setup == "delaymq_local_envoy" else {}
            b = _delaymq_broker(s, {"grpcListenPort": pick_port(), **stack})
            s.grpc.append(f"127.0.0.1:{b.config['grpcListenPort']}")
        elif setup in ("delaymq_proxy1", "delaymq_proxy2", "delaymq_envoy1", "delaymq_envoy2", "delaymq_proxy1_ref"):
            ns = _delaymq_namesrv(s)
            _delaymq_broker(s, {"namesrvAddr": ns, "brokerName": "bench-a"})
            ref = setup.endswith("_ref")
            for k in range(1 if ref else int(setup[-1])):
                _delaymq_proxy(s, ns, f"proxy{k + 1}", "envoy" if "envoy" in setup else "grpcio",
                               {"sendCoalesce": "false"} if ref else None)
        elif setup in ("apache_local", "apache_cluster"):
            _apache(s, cluster=setup == "apache_cluster")
        else:
            raise ValueError(f"unknown setup {setup!r}")
        asyncio.run(_admin(s.remoting))
        return s
    except BaseException:
        s.close()
        raise


async def _admin(addr: str) -> None:
    """Both topics with their message.type, both groups, every queue's offset at 0."""
    from bench import wire
    from codec.codes import DEFAULT_TOPIC, RequestCode, ResponseCode
    from codec.command import RemotingCommand
    conn = await wire.connect(addr)
    try:
        from server.grpc.v2 import definition_pb2 as pb
        for topic, mtype, group in ((TOPIC, pb.MessageType.Name(pb.NORMAL), GROUP),
                                    (DELAY_TOPIC, pb.MessageType.Name(pb.DELAY), DELAY_GROUP)):
            r = await conn.invoke(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                "topic": topic, "defaultTopic": DEFAULT_TOPIC, "readQueueNums": QUEUES, "writeQueueNums": QUEUES,
                "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false",
                "attributes": f"+message.type={mtype}"}), timeout=30)
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"create topic {topic}: {r.code} {r.remark}")
            r = await conn.invoke(RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, {},
                                                          json.dumps({"groupName": group}).encode()), timeout=30)
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"create group {group}: {r.code} {r.remark}")
            for q in range(QUEUES):
                r = await conn.invoke(RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, {
                    "consumerGroup": group, "topic": topic, "queueId": q, "commitOffset": 0}), timeout=30)
                if r.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"offset {group} {topic} {q}: {r.code} {r.remark}")
    finally:
        conn.close()


# ------------------------------------------------------------------ phases

def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {k: proc_cpu_s(p) for k, p in pids.items()}


def _per_msg(c0: dict[str, float], c1: dict[str, float], n: int) -> dict[str, float | None]:
    out: dict[str, float | None] = {k: (round((c1[k] - c0[k]) / n * 1e6, 1) if n else None) for k in c0}
    out["total"] = round(sum(c1[k] - c0[k] for k in c0) / n * 1e6, 1) if n else None
    return out


def phase_send(s: Setup, seconds: float, pool, warmup_s: float) -> dict:
    start_at = time.time() + 1.5
    measure_from = start_at + warmup_s
    end_at = measure_from + seconds
    if s.grpc:
        futs = [pool.submit(_client_process, {"addr": s.grpc[c % len(s.grpc)], "client": c, "window": WINDOW,
                                              "start_at": start_at, "measure_from": measure_from, "end_at": end_at})
                for c in range(CLIENTS)]
    else:  # delaymq_remoting4
        futs = [pool.submit(_remoting_client_process, {"addr": s.remoting, "client": c, "window": WINDOW,
                                                       "start_at": start_at, "measure_from": measure_from,
                                                       "end_at": end_at})
                for c in range(CLIENTS)]
    time.sleep(max(0.0, measure_from - time.time()))
    c0, w0 = _cpu(s.pids), time.monotonic()
    time.sleep(max(0.0, end_at - time.time()))
    c1, wall = _cpu(s.pids), time.monotonic() - w0
    parts = [f.result(timeout=seconds + 120) for f in futs]
    ok = sum(p["ok"] for p in parts)
    return {"sent": ok, "errors": sum(p["errors"] for p in parts), "sends_s": round(ok / wall, 1),
            "cpu_us_per_msg": _per_msg(c0, c1, ok),
            "first_error": next((p["first_error"] for p in parts if p["first_error"]), "")}


async def _remoting_load(addr: str, client: int, window: int, start_at: float, measure_from: float,
                         end_at: float) -> dict:
    """bench.grpc_floor's load over 4.x remoting: the same 128 B body, a distinct message id (UNIQ_KEY) per
    message as the 5.x sends carry, SEND_MESSAGE_V2 on one connection with `window` in flight."""
    from bench import wire
    from codec.codes import ResponseCode
    from codec.properties import MessageConst

    conn = await wire.connect(addr)
    body = b"x" * 128

    async def one(i: int) -> str:
        props = wire.props_string({MessageConst.UNIQ_KEY: f"01BENCHREMOTING{client:04d}{i:012d}",
                                   MessageConst.WAIT: "true"})
        r = await conn.invoke(wire.send_cmd(TOPIC, body, i % QUEUES, props, int(time.time() * 1000)), timeout=10)
        return "" if r.code == ResponseCode.SUCCESS else f"{r.code} {r.remark}"

    out = await closed_loop(one, window, start_at, measure_from, end_at)
    conn.close()
    return out


def _remoting_client_process(kwargs: dict) -> dict:
    import uvloop
    return uvloop.run(_remoting_load(**kwargs))


def phase_receive(s: Setup, seconds: float, expect: int) -> dict:
    from bench.grpc import _receive_all

    async def all_channels() -> list[dict]:
        per = max(1, 4 // len(s.grpc))
        return await asyncio.gather(*(_receive_all(a, TOPIC, GROUP, expect // len(s.grpc) + 1, conns=per,
                                                   deadline_s=seconds) for a in s.grpc))

    c0, w0 = _cpu(s.pids), time.monotonic()
    parts = asyncio.run(all_channels())
    c1, wall = _cpu(s.pids), time.monotonic() - w0
    got = sum(p["received"] for p in parts)
    return {"received": got, "receive_ack_s": round(got / wall, 1), "cpu_us_per_msg": _per_msg(c0, c1, got)}


async def _scheduled_sender(addr: str, client: int, clients: int, n: int, start_ms: int) -> dict:
    """Messages i = client, client + clients, ... of n: sent at start_ms + i / rate, due DUE_AFTER_MS
    (+ i % 997 ms) after that slot. Each call's round trip (ms) is kept, and how far behind its slot the
    sender itself started it (the client's own lateness)."""
    import grpc

    from server.grpc.v2 import definition_pb2 as pb
    from server.grpc.v2 import service_pb2 as spb
    ch = grpc.aio.insecure_channel(addr)
    call = ch.unary_unary("/apache.rocketmq.v2.MessagingService/SendMessage", request_serializer=None,
                          response_deserializer=spb.SendMessageResponse.FromString)
    await ch.channel_ready()
    ok = errors = 0
    rtt: list[float] = []
    behind: list[float] = []
    tasks = []
    md = metadata(client)

    async def one(data: bytes) -> None:
        nonlocal ok, errors
        t0 = time.monotonic()
        try:
            r = await call(data, timeout=30, metadata=md)
            ok += r.status.code == 20000
            errors += r.status.code != 20000
        except Exception:
            errors += 1
        rtt.append((time.monotonic() - t0) * 1000)

    for i in range(client, n, clients):
        slot = start_ms + i * 1000 // SCHEDULED_RATE
        m = pb.Message(topic=pb.Resource(name=DELAY_TOPIC), body=b"x" * 128)
        # start_ms in the id: a setup probed again (bench.grpc_scheduled_probe) gets new ids
        m.system_properties.message_id = f"01BENCHTOPO{client:04d}{i:012d}{start_ms}"
        m.system_properties.message_type = pb.DELAY
        m.system_properties.delivery_timestamp.FromMilliseconds(slot + DUE_AFTER_MS + i % 997)
        data = spb.SendMessageRequest(messages=[m]).SerializeToString()
        wait = slot / 1000 - time.time()
        if wait > 0:
            await asyncio.sleep(wait)
        behind.append(max(0.0, -wait * 1000))
        tasks.append(asyncio.ensure_future(one(data)))
    await asyncio.gather(*tasks)
    await ch.close()
    return {"ok": ok, "errors": errors, "rtt": rtt, "behind": behind}


def _scheduled_process(kwargs: dict) -> dict:
    import uvloop
    return uvloop.run(_scheduled_sender(**kwargs))


def phase_scheduled(s: Setup, seconds: float, pool) -> dict:
    from bench.grpc import _receive_all
    n = min(SCHEDULED_MAX, int(SCHEDULED_RATE * seconds))
    start_ms = int(time.time() * 1000) + 1500
    futs = [pool.submit(_scheduled_process, {"addr": s.grpc[c % len(s.grpc)], "client": c, "clients": CLIENTS,
                                             "n": n, "start_ms": start_ms}) for c in range(CLIENTS)]
    store_late: list[int] = []
    recv_late: list[int] = []

    def on_message(m, now_ms: int) -> None:
        sp = m.system_properties
        due = sp.delivery_timestamp.ToMilliseconds()
        store_late.append(sp.store_timestamp.ToMilliseconds() - due)
        recv_late.append(now_ms - due)

    deadline = seconds + (DUE_AFTER_MS + 997) / 1000 + 20

    async def all_channels() -> list[dict]:
        return await asyncio.gather(*(_receive_all(a, DELAY_TOPIC, DELAY_GROUP, n // len(s.grpc), conns=1,
                                                   deadline_s=deadline, on_message=on_message) for a in s.grpc))

    asyncio.run(all_channels())
    sent = [f.result(timeout=120) for f in futs]
    pick = (50, 99)
    return {"n": n, "sent_ok": sum(p["ok"] for p in sent), "send_errors": sum(p["errors"] for p in sent),
            "received": len(store_late), "store_late_ms": percentiles(store_late, pick),
            "receive_late_ms": percentiles(recv_late, pick),
            "send_rtt_ms": percentiles([x for p in sent for x in p["rtt"]], pick),
            "sender_behind_ms": percentiles([x for p in sent for x in p["behind"]], pick)}


def measure(setup: str, seconds: float, pool, jvm_warmup_s: float = JVM_WARMUP_S) -> dict:
    if setup.startswith("apache") and not rmq5_available():
        return {"setup": setup, "skipped": f"no Apache RocketMQ 5.1.3 at {RMQ5} or no java"}
    t0 = time.monotonic()
    try:
        s = start(setup)
    except RuntimeError as e:
        return {"setup": setup, "failed": f"did not start: {e}"[:400]}
    try:
        why = ""
        for addr in s.grpc:  # the route reaches the proxies once the broker registered the topic
            why = why or _probe(addr, request_bytes())
        if why:
            return {"setup": setup, "failed": f"no send answered OK: {why}"[:400]}
        out: dict = {"setup": setup, "processes": sorted(s.pids), "start_s": round(time.monotonic() - t0, 1)}
        # a JVM compiles its hot paths during the first seconds of load: the Apache setups warm up longer
        out["send"] = phase_send(s, seconds, pool, jvm_warmup_s if setup.startswith("apache") else WARMUP_S)
        if setup not in SENDS_ONLY:
            left = out["send"]["sent"]
            if setup.startswith("apache"):  # the pop path compiles too: receive (unmeasured) before measuring
                left -= phase_receive(s, min(jvm_warmup_s, 10.0), left // 3)["received"]  # most left to measure
            out["receive"] = phase_receive(s, seconds, left)
            out["scheduled"] = phase_scheduled(s, seconds, pool)
        return out
    finally:
        s.close()


def run(setups: list[str], seconds: float, rounds: int, jvm_warmup_s: float = JVM_WARMUP_S) -> list[dict]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    runs = []
    with ProcessPoolExecutor(CLIENTS, mp_context=mp.get_context("spawn")) as pool:
        for r in range(rounds):
            for setup in setups:
                res = measure(setup, seconds, pool, jvm_warmup_s)
                res["round"] = r
                res["loadavg"] = os.getloadavg()[0]
                runs.append(res)
                print(json.dumps(res), file=sys.stderr, flush=True)
    return runs


def _median_of(rows: list[dict], get) -> float | None:
    vals = [v for v in (get(r) for r in rows) if v is not None]
    return round(statistics.median(vals), 1) if vals else None


def summary(runs: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for setup in dict.fromkeys(r["setup"] for r in runs):
        mine = [r for r in runs if r["setup"] == setup and "send" in r]
        if not mine:
            bad = next(r for r in runs if r["setup"] == setup)
            out[setup] = {"unavailable": bad.get("skipped") or bad.get("failed", "")}
            continue

        def med(get, rows=mine) -> float | None:
            return _median_of(rows, get)

        row: dict = {"sends_s": med(lambda r: r["send"]["sends_s"]),
                     "send_cpu_us": {k: med(lambda r, k=k: r["send"]["cpu_us_per_msg"].get(k))
                                     for k in mine[0]["send"]["cpu_us_per_msg"]}}
        if "receive" in mine[0]:
            row["receive_ack_s"] = med(lambda r: r["receive"]["receive_ack_s"])
            row["receive_cpu_us"] = {k: med(lambda r, k=k: r["receive"]["cpu_us_per_msg"].get(k))
                                     for k in mine[0]["receive"]["cpu_us_per_msg"]}
            row["late_store_p50_ms"] = med(lambda r: r["scheduled"]["store_late_ms"].get("p50"))
            row["late_store_p99_ms"] = med(lambda r: r["scheduled"]["store_late_ms"].get("p99"))
            row["late_receive_p99_ms"] = med(lambda r: r["scheduled"]["receive_late_ms"].get("p99"))
            row["scheduled_received"] = f"{mine[0]['scheduled']['received']}/{mine[0]['scheduled']['n']}"
        total = row["send_cpu_us"].get("total")
        row["sends_per_core_s"] = round(1e6 / total) if total else None
        out[setup] = row
    return out


def table(summ: dict[str, dict]) -> str:
    lines = ["| setup | 5.x sends/s | send CPU µs/msg (total; per process) | sends per core-second | "
             "receive+ack/s | receive CPU µs/msg (total) | scheduled lateness p50 / p99 ms (store) | "
             "received |", "|---|---|---|---|---|---|---|---|"]
    for setup, r in summ.items():
        if "unavailable" in r:
            lines.append(f"| {setup} | {r['unavailable'][:100]} | | | | | | |")
            continue
        cpu = r["send_cpu_us"]
        each = ", ".join(f"{k} {v}" for k, v in cpu.items() if k != "total")
        lines.append(f"| {setup} | {r['sends_s']:,.0f} | {cpu.get('total')} ({each}) | {r['sends_per_core_s']} | "
                     f"{r.get('receive_ack_s', '')} | {(r.get('receive_cpu_us') or {}).get('total', '')} | "
                     f"{r.get('late_store_p50_ms', '')} / {r.get('late_store_p99_ms', '')} | "
                     f"{r.get('scheduled_received', '')} |")
    return "\n".join(lines)


def bench_grpc_topology(quick: bool) -> dict:
    seconds = 3.0 if quick else 5.0
    runs = run(SETUPS, seconds, 1)
    summ = summary(runs)
    head = {f"{k}_sends_s": v.get("sends_s") for k, v in summ.items() if "sends_s" in v}
    print(table(summ), file=sys.stderr)
    return {"config": {"seconds": seconds, "setups": SETUPS}, "raw": {"runs": runs, "summary": summ},
            "headline": head, "target": "(report; issue 24's targets are read from the table)", "met": None}


BENCHES = {"grpc_topology": bench_grpc_topology}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.grpc_topology")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds of each phase (default 5)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--setups", default=",".join(SETUPS), help="comma-separated: " + ",".join(SETUPS + EXTRA_SETUPS))
    p.add_argument("--jvm-warmup", type=float, default=JVM_WARMUP_S,
                   help=f"seconds of send load before the Apache setups are measured (default {JVM_WARMUP_S:g}; "
                        "their JIT compiles meanwhile, and its threads' CPU counts in the process's)")
    a = p.parse_args(argv)
    setups = [x for x in a.setups.split(",") if x]
    bad = [x for x in setups if x not in SETUPS + EXTRA_SETUPS]
    if bad:
        p.error(f"unknown setups {bad}")
    runs = run(setups, a.seconds, a.rounds, a.jvm_warmup)
    summ = summary(runs)
    write_result("grpc_topology", {"config": {"seconds": a.seconds, "rounds": a.rounds, "setups": setups,
                                              "jvm_warmup_s": a.jvm_warmup},
                                   "raw": {"runs": runs, "summary": summ},
                                   "headline": {f"{k}_sends_s": v.get("sends_s") for k, v in summ.items()}})
    print(table(summ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
