"""SQL92 pull of a 1 %-selective group, the bitmap pre-filter off and on, delaymq next to Apache 4.9.7 (issue 28).

    .venv/bin/python -m bench.sql92_filter --messages 1000000 [--rounds 3] [--no-apache]

Four brokers run at once, each on its own store and filled with the same N messages (128 B body; `region` =
'eu' for 1 in 100, else 'us'; batches of 100 by SEND_BATCH_MESSAGE, the same batch body for every broker):
- delaymq, `enablePropertyFilter=true` (bitmap off) and with `enableCalcFilterBitMap=true` (bitmap on);
- Apache RocketMQ 4.9.7 from ../shared/rocketmq-java (DELAYMQ_SHARED overrides; `mqbroker`, no name server,
  RMQ_HEAP -Xms512m -Xmx512m), `enablePropertyFilter=true`, and with `enableCalcFilterBitMap=true` +
  `enableConsumeQueueExt=true` (its bloom bits live in ConsumeQueueExt).
The SQL92 group (`region = 'eu'`) subscribes as a Java push consumer does before the fill: a HEART_BEAT with the
subscription (renewed every 20 s on the same connection), then pulls without the subscription flag (the broker
uses the registered filter, Apache's bloom data with it), maxMsgNums 32, one pull in flight per queue.

After a warm-up pass over every broker (the JVM's JIT, the page cache), `--rounds` measured passes pull every
queue from 0 to its end; within a round the brokers take turns, the order rotating each round. Per pass:
wall time, units scanned per second, the broker process's CPU (/proc/<pid>/stat; Apache's java process) per
scanned unit, per skipped (non-matching) unit and per matched message, and the CommitLog bytes the filter read:
the units it had to evaluate x the record size. Units evaluated: delaymq's GET_BROKER_RUNTIME_INFO
filterBitmapSkipped; Apache has no counter, so after the run its ConsumeQueueExt units are read back and a unit
counts as evaluated when its bitmap holds all of the group's bloom bits (config/consumerFilter.json) - the test
Apache's ExpressionMessageFilter makes. Medians of the rounds go to the printed table and the JSON
(bench/results/sql92_filter.json). Bounded: N sends per broker, (1 + rounds) x N units scanned per broker.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench import wire
from bench.common import Broker, pick_port, proc_cpu_s, store_base, write_result
from codec.batch import encode_batch
from codec.bodies import ConsumerData, HeartbeatData, SubscriptionData, encode_heartbeat
from codec.codes import DEFAULT_TOPIC, RequestCode, ResponseCode, create_send_message_request_header_v2
from codec.command import RemotingCommand
from codec.filter_bitmap import APACHE_CQ_EXT_UNIT_HEAD
from codec.properties import MessageConst

TOPIC, GROUP, QUEUES = "SqlBench", "sql_bench_cg", 4
EXPRESSION = "region = 'eu'"
SUB_VERSION = 1
BATCH = 100  # messages per SEND_BATCH_MESSAGE: the first is 'eu', the other 99 'us' (1 % selective per queue)
IN_FLIGHT = 16  # batches in flight during the fill
HEARTBEAT_EVERY_S = 20.0  # Apache drops a consumer channel silent for 120 s
KINDS = ("delaymq", "delaymq+bitmap", "apache", "apache+bitmap")

REPO = Path(__file__).resolve().parents[1]
ROCKETMQ_JAVA = Path(os.environ.get("DELAYMQ_SHARED") or REPO.parent / "shared") / "rocketmq-java"


# ---------------------------------------------------------------- requests

def batch_body() -> bytes:
    body = b"x" * 128
    return encode_batch([(0, body, wire.props_string({"region": "eu" if i == 0 else "us", "seq": str(i)}))
                         for i in range(BATCH)])


def batch_cmd(queue_id: int, body: bytes) -> RemotingCommand:
    cmd = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, create_send_message_request_header_v2({
        "producerGroup": "sql_bench_pg", "topic": TOPIC, "defaultTopic": DEFAULT_TOPIC, "defaultTopicQueueNums": 4,
        "queueId": queue_id, "sysFlag": 0, "bornTimestamp": int(time.time() * 1000), "flag": 0,
        "properties": wire.props_string({MessageConst.WAIT: "true"}), "reconsumeTimes": 0, "unitMode": "false",
        "maxReconsumeTimes": 16, "batch": "true"}), body)
    return cmd


def heartbeat_cmd() -> RemotingCommand:
    sub = SubscriptionData(topic=TOPIC, sub_string=EXPRESSION, sub_version=SUB_VERSION, expression_type="SQL92")
    hb = HeartbeatData("127.0.0.1@sql-bench", [ConsumerData(GROUP, "CONSUME_PASSIVELY", "CLUSTERING",
                                                            "CONSUME_FROM_FIRST_OFFSET", [sub])])
    return RemotingCommand.request(RequestCode.HEART_BEAT, {}, encode_heartbeat(hb))


def pull_cmd(queue_id: int, offset: int) -> RemotingCommand:
    """A push consumer's pull (postSubscriptionWhenPull=false): no subscription flag, the registered filter."""
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, {
        "consumerGroup": GROUP, "topic": TOPIC, "queueId": queue_id, "queueOffset": offset, "maxMsgNums": 32,
        "sysFlag": 0, "commitOffset": 0, "suspendTimeoutMillis": 0, "subscription": EXPRESSION,
        "subVersion": SUB_VERSION, "expressionType": "SQL92"})


# ---------------------------------------------------------------- Apache 4.9.7

class ApacheBroker:
    """Apache RocketMQ 4.9.7's `mqbroker` on a private store and free ports; `pid` is the java process."""

    def __init__(self, bitmap: bool) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="delaymq-bench-apache-", dir=store_base()))
        self.store = self.work / "store"
        self.port = pick_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.bitmap = bitmap
        self.proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        conf = self.work / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in {
            "brokerClusterName": "BenchCluster", "brokerName": f"apache-bench-{self.port}", "brokerId": 0,
            "brokerIP1": "127.0.0.1", "listenPort": self.port, "haListenPort": self.port + 1,
            "storePathRootDir": self.store, "storePathCommitLog": self.store / "commitlog",
            "enablePropertyFilter": "true", "enableCalcFilterBitMap": str(self.bitmap).lower(),
            "enableConsumeQueueExt": str(self.bitmap).lower(), "autoCreateTopicEnable": "true",
            "flushDiskType": "ASYNC_FLUSH", "mapedFileSizeCommitLog": 256 << 20}.items()))
        env = dict(os.environ, RMQ_USER_HOME=str(self.work), HOME=str(self.work), RMQ_HEAP="-Xms512m -Xmx512m")
        with open(self.work / "broker.out", "ab") as out:
            self.proc = subprocess.Popen([str(ROCKETMQ_JAVA / "bin" / "mqbroker"), "-c", str(conf)], env=env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def wait_ready(self, timeout: float = 180.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mqbroker exited: {(self.work / 'broker.out').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)  # a port that is not open yet: nothing to wait on
        raise RuntimeError("mqbroker did not open its port")

    @property
    def pid(self) -> int:
        """The java process: the launcher's deepest descendant."""
        assert self.proc is not None
        pid = self.proc.pid
        while True:
            try:
                kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                return pid
            if not kids:
                return pid
            pid = int(kids[0])

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(30)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.work, ignore_errors=True)

    def evaluated_by_bitmap(self) -> int | None:
        """Units Apache's bitmap could not rule out (read back from its files after stop()): ConsumeQueueExt
        units (short size, long tagsCode, long msgStoreTime, short bitMapSize, bitmap; -1 pads a file's end)
        whose bitmap holds every bit of the group's bloom data in config/consumerFilter.json."""
        try:
            doc = json.loads((self.store / "config" / "consumerFilter.json").read_text())
            bloom = doc["filterDataByTopic"][TOPIC]["groupFilterData"][GROUP]["bloomFilterData"]
            bit_pos = [int(b) for b in bloom["bitPos"]]
        except (OSError, KeyError, TypeError, ValueError):
            return None
        head = APACHE_CQ_EXT_UNIT_HEAD
        evaluated = units = 0
        for qdir in sorted((self.store / "consumequeue_ext" / TOPIC).glob("*")):
            for f in sorted(qdir.iterdir()):
                data = f.read_bytes()
                pos = 0
                while pos + head.size <= len(data):
                    size, _tags, _store_ms, nbits = head.unpack_from(data, pos)
                    if size <= 0:
                        break
                    bitmap = data[pos + head.size:pos + head.size + nbits]
                    units += 1
                    if all(bitmap[b >> 3] & (1 << (b & 7)) for b in bit_pos):
                        evaluated += 1
                    pos += size
        return evaluated if units else None


# ---------------------------------------------------------------- one broker's session

@dataclass
class Target:
    kind: str
    server: Broker | ApacheBroker
    conn: wire.Conn | None = None
    ends: list[int] = field(default_factory=list)
    fill_s: float = 0.0
    passes: list[dict[str, float]] = field(default_factory=list)
    beat: asyncio.Task[None] | None = None

    async def heartbeats(self) -> None:
        assert self.conn is not None
        while True:
            await asyncio.sleep(HEARTBEAT_EVERY_S)
            await self.conn.invoke(heartbeat_cmd())

    async def subscribe(self) -> None:
        self.conn = await wire.connect(self.server.addr)
        await wire.create_topic(self.conn, TOPIC, QUEUES)
        r = await self.conn.invoke(heartbeat_cmd())
        if r.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"{self.kind} HEART_BEAT: {r.code} {r.remark}")
        self.beat = asyncio.get_running_loop().create_task(self.heartbeats())
        for q in range(QUEUES):  # the first pull (delaymq registers its bitmap selector on it)
            r = await self.conn.invoke(pull_cmd(q, 0))
            if r.code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.SUCCESS):
                raise RuntimeError(f"{self.kind} first pull: {r.code} {r.remark}")

    async def fill(self, n: int, body: bytes) -> None:
        assert self.conn is not None
        conn, sem = self.conn, asyncio.Semaphore(IN_FLIGHT)

        async def one(i: int) -> None:
            async with sem:
                for _ in range(200):
                    r = await conn.invoke(batch_cmd(i % QUEUES, body), timeout=60)
                    if r.code != ResponseCode.SYSTEM_BUSY:  # Apache's flow control: back off, resend
                        break
                    await asyncio.sleep(0.05)
            if r.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"{self.kind} send batch {i}: {r.code} {r.remark}")

        t0 = time.monotonic()
        batches = n // BATCH
        for start in range(0, batches, 1000):
            await asyncio.gather(*(one(i) for i in range(start, min(batches, start + 1000))))
        # Apache's dispatch (ReputMessageService) may trail the send answers: wait for the last unit
        deadline = time.monotonic() + 120
        while True:
            self.ends = [await wire.max_offset(conn, TOPIC, q) for q in range(QUEUES)]
            if sum(self.ends) >= batches * BATCH or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)  # polling GET_MAX_OFFSET: the broker offers nothing to wait on
        self.fill_s = time.monotonic() - t0

    async def pull_queue(self, queue_id: int) -> tuple[int, int]:
        """(matched messages, bytes of their records) pulling queue_id from 0 to its end."""
        assert self.conn is not None
        offset = matched = nbytes = 0
        end = self.ends[queue_id]
        while offset < end:
            r = await self.conn.invoke(pull_cmd(queue_id, offset), timeout=60)
            if r.code == ResponseCode.SUCCESS:
                body = r.body_bytes()
                nbytes += len(body)
                pos = 0
                while pos < len(body):
                    pos += int.from_bytes(body[pos:pos + 4], "big")
                    matched += 1
            elif r.code not in (ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_NOT_FOUND):
                raise RuntimeError(f"{self.kind} pull {queue_id}@{offset}: {r.code} {r.remark}")
            offset = int((r.ext_fields or {})["nextBeginOffset"])
        return matched, nbytes

    async def skipped_counter(self) -> int:
        if isinstance(self.server, ApacheBroker):
            return 0
        assert self.conn is not None
        r = await self.conn.invoke(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
        table: dict[str, str] = json.loads(r.body_bytes() or b"{}").get("table", {})
        return int(table.get("filterBitmapSkipped", 0))

    async def one_pass(self) -> dict[str, float]:
        skipped0 = await self.skipped_counter()
        pid = self.server.pid
        cpu0, t0 = proc_cpu_s(pid), time.monotonic()
        results = await asyncio.gather(*(self.pull_queue(q) for q in range(QUEUES)))
        wall, cpu = time.monotonic() - t0, proc_cpu_s(pid) - cpu0
        skipped = await self.skipped_counter() - skipped0
        matched = sum(m for m, _ in results)
        return {"pull_s": wall, "broker_cpu_s": cpu, "matched": matched,
                "record_bytes": sum(b for _, b in results) / max(1, matched), "bitmap_skipped": skipped}

    async def close(self) -> None:
        if self.beat is not None:
            self.beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.beat
        if self.conn is not None:
            self.conn.close()


@contextlib.contextmanager
def servers(kinds: list[str]) -> Iterator[dict[str, Broker | ApacheBroker]]:
    out: dict[str, Broker | ApacheBroker] = {}
    try:
        apaches = [ApacheBroker(bitmap=k.endswith("+bitmap")) for k in kinds if k.startswith("apache")]
        for a in apaches:  # the JVMs start while the delaymq brokers do
            a.launch()
        for k in kinds:
            if k.startswith("delaymq"):
                out[k] = Broker({"enablePropertyFilter": "true",
                                 "enableCalcFilterBitMap": str(k.endswith("+bitmap")).lower()}).start()
        for a in apaches:
            a.wait_ready()
            out["apache+bitmap" if a.bitmap else "apache"] = a
        yield out
    finally:
        for s in out.values():
            s.cleanup()


def summarise(t: Target, n: int, apache_evaluated: int | None) -> dict[str, object]:
    scanned = sum(t.ends)
    med = {k: statistics.median(p[k] for p in t.passes) for k in t.passes[0]}
    matched = int(med["matched"])
    if t.kind.startswith("apache"):
        evaluated = scanned if apache_evaluated is None else apache_evaluated
    else:
        evaluated = scanned - int(med["bitmap_skipped"])
    cpu = med["broker_cpu_s"]
    return {
        "broker": t.kind, "messages": n, "units_scanned": scanned, "fill_s": round(t.fill_s, 1),
        "matched": matched, "pull_s": round(med["pull_s"], 3), "scanned_per_s": round(scanned / med["pull_s"]),
        "broker_cpu_s": round(cpu, 3), "cpu_us_per_scanned": round(cpu * 1e6 / scanned, 3),
        "cpu_us_per_skipped": round(cpu * 1e6 / max(1, scanned - matched), 3),
        "cpu_us_per_matched": round(cpu * 1e6 / max(1, matched), 1),
        "units_evaluated": evaluated, "units_ruled_out_by_bitmap": scanned - evaluated,
        "evaluated_source": ("filterBitmapSkipped" if t.kind.startswith("delaymq") else
                             "ConsumeQueueExt bloom bits" if apache_evaluated is not None else "every unit"),
        "record_bytes": round(med["record_bytes"], 1), "commitlog_bytes_read": round(evaluated * med["record_bytes"]),
        "passes": [{k: round(v, 4) for k, v in p.items()} for p in t.passes]}


async def run(n: int, rounds: int, kinds: list[str], live: dict[str, Broker | ApacheBroker]) -> list[Target]:
    targets = [Target(k, live[k]) for k in kinds]
    body = batch_body()
    for t in targets:
        await t.subscribe()
    for t in targets:
        await t.fill(n, body)
        print(f"{t.kind}: filled {sum(t.ends)} in {t.fill_s:.1f} s", file=sys.stderr)
    try:
        for t in targets:  # warm-up: the JIT, the page cache, delaymq's first reads
            await t.one_pass()
        for r in range(rounds):
            order = targets[r % len(targets):] + targets[:r % len(targets)]
            for t in order:
                t.passes.append(await t.one_pass())
                p = t.passes[-1]
                print(f"round {r + 1} {t.kind}: {p['pull_s']:.2f} s, cpu {p['broker_cpu_s']:.2f} s, "
                      f"matched {int(p['matched'])}", file=sys.stderr)
    finally:
        for t in targets:
            await t.close()
    return targets


def table(runs: list[dict[str, object]]) -> str:
    head = ("broker", "units/s", "CPU µs/scanned", "CPU µs/skipped", "CPU µs/matched", "evaluated",
            "CommitLog MB read")
    rows = [head] + [(str(r["broker"]), f"{r['scanned_per_s']:,}", str(r["cpu_us_per_scanned"]),
                      str(r["cpu_us_per_skipped"]), str(r["cpu_us_per_matched"]), f"{r['units_evaluated']:,}",
                      f"{float(str(r['commitlog_bytes_read'])) / 1e6:.2f}") for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows)


def measure(n: int, rounds: int, apache: bool) -> dict[str, object]:
    """The whole comparison: the payload of bench/results/sql92_filter.json (run_all's `sql92_filter`)."""
    n = max(BATCH * QUEUES, n // (BATCH * QUEUES) * BATCH * QUEUES)
    apache = apache and (ROCKETMQ_JAVA / "bin" / "mqbroker").is_file()
    kinds = [k for k in KINDS if apache or k.startswith("delaymq")]
    with servers(kinds) as live:
        targets = asyncio.run(run(n, rounds, kinds, live))
        apache_bitmap = live.get("apache+bitmap")
        evaluated = None
        if isinstance(apache_bitmap, ApacheBroker):
            apache_bitmap.stop()  # persists config/consumerFilter.json
            evaluated = apache_bitmap.evaluated_by_bitmap()
    runs = [summarise(t, n, evaluated if t.kind == "apache+bitmap" else None) for t in targets]
    by = {str(r["broker"]): r for r in runs}

    def num(kind: str, key: str) -> float:
        return float(str(by[kind][key]))

    def ratio(on: str, off: str) -> float | None:
        return round(num(on, "commitlog_bytes_read") / max(1.0, num(off, "commitlog_bytes_read")), 4) \
            if on in by and off in by else None

    read_ratio = ratio("delaymq+bitmap", "delaymq")
    rate_vs = {k: round(num(k, "scanned_per_s") / num(a, "scanned_per_s"), 3) if a in by else None
               for k, a in (("delaymq", "apache"), ("delaymq+bitmap", "apache+bitmap"))}
    cpu_vs = {k: round(num(k, "cpu_us_per_scanned") / num(a, "cpu_us_per_scanned"), 3) if a in by else None
              for k, a in (("delaymq", "apache"), ("delaymq+bitmap", "apache+bitmap"))}
    met = read_ratio is not None and read_ratio <= 0.05 and all(v is None or v >= 1.0 for v in rate_vs.values())
    return {"messages": n, "rounds": rounds, "expression": EXPRESSION, "runs": runs,
            "commitlog_read_ratio_on_off": read_ratio,
            "apache_commitlog_read_ratio_on_off": ratio("apache+bitmap", "apache"),
            "rate_vs_apache": rate_vs, "cpu_per_unit_vs_apache": cpu_vs,
            "headline": {"read_ratio_on_off": read_ratio,
                         **{f"{k}_units_s": by[k]["scanned_per_s"] for k in by},
                         **{f"{k}_cpu_us_unit": by[k]["cpu_us_per_scanned"] for k in by}},
            "target": "bitmap on reads <= 5 % of the CommitLog bytes read with it off; SQL92 pull >= Apache 4.9.7's "
                      "rate (bitmap off and on)",
            "met": met}


def bench_sql92_filter(quick: bool) -> dict[str, object]:
    """`make bench`'s size: 200,000 messages (40,000 with --quick), 3 rounds; the README's figure is 1,000,000."""
    return measure(40_000 if quick else 200_000, 2 if quick else 3, apache=True)


BENCHES = {"sql92_filter": bench_sql92_filter}


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.sql92_filter", description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--messages", type=int, default=200_000, help="messages per broker (a multiple of 400)")
    ap.add_argument("--rounds", type=int, default=3, help="measured pull passes per broker")
    ap.add_argument("--no-apache", action="store_true", help="delaymq only")
    args = ap.parse_args()
    payload = measure(args.messages, args.rounds, apache=not args.no_apache)
    path = write_result("sql92_filter", payload)
    runs = payload["runs"]
    assert isinstance(runs, list)
    print(table(runs))
    print(json.dumps({k: v for k, v in payload.items() if k not in ("runs", "headline")}))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
