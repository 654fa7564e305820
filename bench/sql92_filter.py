"""SQL92 pull of a 1 %-selective group, the bitmap pre-filter off and on (issue 28).

    .venv/bin/python -m bench.sql92_filter [N]        # N messages (default 200,000) over 4 queues

With Apache RocketMQ 4.9.7 in ../shared/rocketmq-java (DELAYMQ_SHARED overrides), the same fill and pulls run
against an Apache broker (`mqbroker`, enablePropertyFilter=true, no name server, RMQ_HEAP -Xms256m -Xmx512m) too,
its CPU read from the java process under the launcher.

For each setting a broker subprocess (enablePropertyFilter=true, enableCalcFilterBitMap=false|true) gets N
messages of 128 B (`region` = 'eu' for 1 in 100, else 'us'); the SQL92 group (`region = 'eu'`) registers before
the fill (its first pull), then pulls every queue from 0 to the end (maxMsgNums 32, one pull in flight per
queue). Reported: pull wall time and rate (units scanned per second), broker CPU µs per scanned unit and per
matched message, CommitLog bytes the filter read (units evaluated x record size: with the bitmap, only the
units its bits could not rule out; GET_BROKER_RUNTIME_INFO filterBitmapSkipped). Bounded: N sends, N scanned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench import wire
from bench.common import Broker, pick_port, proc_cpu_s, store_base, write_result
from codec.codes import RequestCode, ResponseCode
from codec.command import RemotingCommand

TOPIC, GROUP, QUEUES = "SqlBench", "sql_bench_cg", 4
EXPRESSION = "region = 'eu'"
IN_FLIGHT = 256


def sql_pull(queue_id: int, offset: int) -> RemotingCommand:
    cmd = wire.pull_cmd(TOPIC, queue_id, offset, 32, group=GROUP)
    assert cmd.ext_fields is not None
    cmd.ext_fields.update({"subscription": EXPRESSION, "expressionType": "SQL92", "subVersion": "1"})
    return cmd


async def fill(conn: wire.Conn, n: int) -> None:
    sem = asyncio.Semaphore(IN_FLIGHT)
    body = b"x" * 128

    async def one(i: int) -> None:
        props = wire.props_string({"region": "eu" if i % 100 == 0 else "us", "amount": str(i)})
        for _ in range(100):
            async with sem:
                r = await conn.invoke(wire.send_cmd(TOPIC, body, i % QUEUES, props), timeout=60)
            if r.code != ResponseCode.SYSTEM_BUSY:  # Apache's flow control on a loaded machine: back off, resend
                break
            await asyncio.sleep(0.05)
        if r.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"send {i}: {r.code} {r.remark}")

    for start in range(0, n, 10_000):
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + 10_000))))


async def pull_queue(conn: wire.Conn, queue_id: int, end: int) -> tuple[int, int]:
    """(matched messages, bytes of their records) pulling queue_id from 0 to `end`."""
    offset = matched = nbytes = 0
    while offset < end:
        r = await conn.invoke(sql_pull(queue_id, offset), timeout=60)
        if r.code == ResponseCode.SUCCESS:
            body = r.body_bytes()
            nbytes += len(body)
            pos = 0
            while pos < len(body):
                pos += int.from_bytes(body[pos:pos + 4], "big")
                matched += 1
        elif r.code != ResponseCode.PULL_RETRY_IMMEDIATELY:
            raise RuntimeError(f"pull {queue_id}@{offset}: {r.code} {r.remark}")
        offset = int((r.ext_fields or {})["nextBeginOffset"])
    return matched, nbytes


async def runtime_table(conn: wire.Conn) -> dict[str, str]:
    r = await conn.invoke(RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO, {}))
    table: dict[str, str] = json.loads(r.body_bytes() or b"{}").get("table", {})
    return table


REPO = Path(__file__).resolve().parents[1]
ROCKETMQ_JAVA = Path(os.environ.get("DELAYMQ_SHARED") or REPO.parent / "shared") / "rocketmq-java"


class ApacheBroker:
    """Apache RocketMQ 4.9.7's `mqbroker` on a private store and free ports; `pid` is the java process."""

    def __init__(self) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="delaymq-bench-apache-", dir=store_base()))
        self.port = pick_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> ApacheBroker:
        conf = self.work / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in {
            "brokerClusterName": "BenchCluster", "brokerName": "apache-bench", "brokerId": 0,
            "brokerIP1": "127.0.0.1", "listenPort": self.port, "haListenPort": self.port + 1,
            "storePathRootDir": self.work / "store", "storePathCommitLog": self.work / "store" / "commitlog",
            "enablePropertyFilter": "true", "autoCreateTopicEnable": "true", "flushDiskType": "ASYNC_FLUSH",
            "mapedFileSizeCommitLog": 256 << 20}.items()))
        env = dict(os.environ, RMQ_USER_HOME=str(self.work), HOME=str(self.work),
                   RMQ_HEAP="-Xms256m -Xmx512m")
        with open(self.work / "broker.out", "ab") as out:
            self.proc = subprocess.Popen([str(ROCKETMQ_JAVA / "bin" / "mqbroker"), "-c", str(conf)], env=env,
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + 120
        import socket
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mqbroker exited: {(self.work / 'broker.out').read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
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
        shutil.rmtree(self.work, ignore_errors=True)


@contextlib.contextmanager
def broker_for(kind: str) -> Iterator[Broker | ApacheBroker]:
    if kind == "apache":
        a = ApacheBroker()
        try:
            yield a.start()
        finally:
            a.stop()
        return
    with Broker({"enablePropertyFilter": "true", "enableCalcFilterBitMap": str(kind == "bitmap").lower()}) as b:
        yield b


async def one_setting(n: int, kind: str) -> dict[str, object]:
    with broker_for(kind) as b:
        conn = await wire.connect(b.addr)
        try:
            await wire.create_topic(conn, TOPIC, QUEUES)
            for q in range(QUEUES):  # the group registers before the fill (the bitmap is computed at dispatch)
                await conn.invoke(sql_pull(q, 0))
            t0 = time.monotonic()
            await fill(conn, n)
            fill_s = time.monotonic() - t0
            ends = [await wire.max_offset(conn, TOPIC, q) for q in range(QUEUES)]
            cpu0, t0 = proc_cpu_s(b.pid), time.monotonic()
            results = await asyncio.gather(*(pull_queue(conn, q, ends[q]) for q in range(QUEUES)))
            pull_s, cpu_s = time.monotonic() - t0, proc_cpu_s(b.pid) - cpu0
            table = await runtime_table(conn)
        finally:
            conn.close()
    matched = sum(m for m, _ in results)
    record_size = sum(nb for _, nb in results) / max(1, matched)
    scanned = sum(ends)
    skipped = int(table.get("filterBitmapSkipped", 0))
    evaluated = scanned - skipped
    return {"broker": kind, "messages": n, "fill_s": round(fill_s, 2), "matched": matched,
            "pull_s": round(pull_s, 3), "scanned_per_s": round(scanned / pull_s), "broker_cpu_s": round(cpu_s, 3),
            "cpu_us_per_scanned": round(cpu_s * 1e6 / scanned, 2),
            "cpu_us_per_matched": round(cpu_s * 1e6 / max(1, matched), 1),
            "units_evaluated": evaluated, "units_skipped": skipped,
            "commitlog_bytes_read": round(evaluated * record_size)}


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    kinds = ["delaymq", "bitmap"] + (["apache"] if (ROCKETMQ_JAVA / "bin" / "mqbroker").is_file() else [])
    runs = [asyncio.run(one_setting(n, kind)) for kind in kinds]
    off, on = runs[0], runs[1]
    ratio = float(str(on["commitlog_bytes_read"])) / max(1.0, float(str(off["commitlog_bytes_read"])))
    payload = {"runs": runs, "apache": "apache" in kinds, "commitlog_read_ratio_on_off": round(ratio, 4),
               "target": "bitmap on reads <= 5 % of the CommitLog bytes read with it off", "met": ratio <= 0.05}
    path = write_result("sql92_filter", payload)
    print(json.dumps(payload))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
