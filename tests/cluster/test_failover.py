"""Scheduled-message failover, measured (issue 13 item 6): a SYNC_MASTER and its slave as real
processes; thousands of delay-level and timer messages are sent (each acked only once the slave has
it); the master is killed with SIGKILL while most are pending; `delaymq broker promote` makes the
slave the master. Then, counting every delivered record either broker ever held:
0 acked messages lost, 0 delivered before their due time, and duplicates no more than what the old
master delivered after the last scheduler progress the slave adopted (<= one schedulerSyncIntervalMs);
in fact only what the old master delivered after the last byte the slave replicated.
The time from promote to the first delivery is a benchmark (bench/ha_failover.py), not asserted here."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys
import time

import pytest

from codec.errors import CodecError
from codec.record import decode_record
from tests.helpers.broker import REPO_ROOT, BrokerProcess
from tests.helpers.checks import present
from tests.helpers.wire import create_topic
from tests.server.helpers import pull, send_ext
from tests.server.raw import RawClient, decode_records, props

from .test_ha_replication import ha_port_pair

pytestmark = pytest.mark.process

# long enough that thousands are still pending when the sends end on a loaded host (their SYNC_MASTER
# acks can take several seconds there): level 1 falls due 3 s after its store, timers 2.5-8.5 s after theirs
LEVELS_MS = [3000, 5000, 7000]
N_DELAY = 1500
N_TIMER = 1500  # == N_DELAY: the sends alternate
TOPIC = "FailT"
QUEUES = 4
SEND_MESSAGE_V2 = 310


def scan_commitlog(store) -> list:
    """Every record in a store's CommitLog files (the replicated prefix and the new master's own)."""
    d = os.path.join(store, "commitlog")
    out = []
    for name in sorted(os.listdir(d)):
        buf = open(os.path.join(d, name), "rb").read()
        pos = 0
        while pos + 8 <= len(buf):
            total, magic = struct.unpack_from(">ii", buf, pos)
            if total <= 0 or magic != -626843481:
                break
            try:
                rec, pos = decode_record(buf, pos)
            except CodecError:
                break
            out.append(rec)
    return out


async def drain(c: RawClient, offsets: list[int], seen: dict) -> int:
    """Pull every queue of TOPIC from `offsets` on; record each delivered record by identity."""
    n = 0
    for q in range(QUEUES):
        while True:
            r = await pull(c, "FailG", TOPIC, q, offsets[q], max_nums=32)
            if r.code != 0:
                break
            for m in decode_records(r.body):
                seen[(m["phys"], m["queue_offset"], m["props"]["UNIQ_KEY"])] = m
                n += 1
            offsets[q] = int(r.ext["nextBeginOffset"])
    return n


async def test_kill_master_under_scheduled_load_then_promote(tmp_path):
    common = {"messageDelayLevel": " ".join(f"{ms // 1000}s" for ms in LEVELS_MS),
              "mappedFileSizeCommitLog": 64 << 20, "slaveSynchronizeIntervalMs": 300,
              "schedulerSyncIntervalMs": 50}  # the widest progress lag: the replica holds more after it
    mport, sport = ha_port_pair(), ha_port_pair()
    master = BrokerProcess(tmp_path / "m", {**common, "brokerRole": "SYNC_MASTER"}, port=mport).start()
    slave = BrokerProcess(tmp_path / "s", {**common, "brokerRole": "SLAVE", "brokerId": 1,
                                           "haMasterAddress": f"127.0.0.1:{mport + 1}"}, port=sport).start()
    try:
        create_topic(master.addr, TOPIC, QUEUES)
        c = await RawClient.connect(master.addr)
        # the slave is connected once a SYNC_MASTER send comes back SEND_OK (not SLAVE_NOT_AVAILABLE)
        deadline = time.monotonic() + 20
        while (await c.invoke(SEND_MESSAGE_V2, send_ext("Warm", props(WAIT="true"), 0), b"w")).code != 0:
            assert time.monotonic() < deadline, "slave never connected"
            await asyncio.sleep(0.05)

        due_timer: dict[str, int] = {}

        def request(i: int) -> tuple[str, tuple]:
            if i % 2 == 0:  # delay levels and timers interleaved, so both are pending at the kill
                key = f"d{i // 2}"
                p = props(UNIQ_KEY=key, DELAY=str(1 + (i // 2) % len(LEVELS_MS)), WAIT="true")
            else:  # a timer 2.5 .. 8.5 s after its send (built just before its chunk is sent)
                key = f"t{i // 2}"
                due_timer[key] = int(time.time() * 1000) + 2500 + ((i // 2) * 6000) // N_TIMER
                p = props(UNIQ_KEY=key, TIMER_DELIVER_MS=str(due_timer[key]), WAIT="true")
            return key, (SEND_MESSAGE_V2, send_ext(TOPIC, p, (i // 2) % QUEUES), key.encode(), False)

        acked = set()
        for k in range(0, N_DELAY + N_TIMER, 250):
            built = [request(i) for i in range(k, min(k + 250, N_DELAY + N_TIMER))]
            keys, chunk = [b[0] for b in built], [b[1] for b in built]
            for key, fut in zip(keys, c.pipeline(chunk), strict=True):
                r = await asyncio.wait_for(present(fut), 30)
                assert r.code == 0, (r.code, r.remark)  # SYNC_MASTER: the slave has it
                acked.add(key)
        assert len(acked) == N_DELAY + N_TIMER

        # deliveries start; kill -9 the master once some hundreds are out and thousands pending
        old_seen: dict = {}
        old_offsets = [0] * QUEUES
        deadline = time.monotonic() + 20
        while len(old_seen) < 300:
            assert time.monotonic() < deadline, f"only {len(old_seen)} delivered by the master"
            await drain(c, old_offsets, old_seen)
            await asyncio.sleep(0.02)
        master.kill()
        killed_ms = int(time.time() * 1000)
        await c.close()
        assert len(old_seen) < len(acked) - 1000, "most messages must still be pending at the kill"

        promote = subprocess.run([sys.executable, "-m", "client.cli", "broker", "promote", "-b", slave.addr,
                                  "-n", slave.addr, "--output", "json"], cwd=REPO_ROOT, capture_output=True,
                                 text=True, timeout=60)
        assert promote.returncode == 0, promote.stderr
        info = json.loads(promote.stdout)
        assert info["brokerId"] == 0 and info["brokerRole"] == "ASYNC_MASTER"
        synced_ms = info["syncedTakenMs"]
        assert 0 < synced_ms <= killed_ms

        n = await RawClient.connect(slave.addr)
        new_seen: dict = {}
        new_offsets = [0] * QUEUES
        deadline = time.monotonic() + 60
        while True:
            await drain(n, new_offsets, new_seen)
            got = {k[2] for k in new_seen} | {k[2] for k in old_seen}
            if acked <= got:
                break
            assert time.monotonic() < deadline, f"{len(acked - got)} acked messages never delivered"
            await asyncio.sleep(0.05)
        await n.close()
    finally:
        master.kill()
        slave.stop()

    # every delivered record either broker held, by identity (a replicated one is in both)
    delivered = {**old_seen, **new_seen}
    originals = {}
    for rec in scan_commitlog(slave.store):
        if rec.topic == "SCHEDULE_TOPIC_XXXX":
            lv = int(rec.properties["DELAY"])
            originals[rec.properties["UNIQ_KEY"]] = rec.store_timestamp + LEVELS_MS[lv - 1]
    assert len(originals) == N_DELAY
    due = {**originals, **due_timer}
    early = [(k, m["store_ts"], due[k[2]]) for k, m in delivered.items() if m["store_ts"] < due[k[2]]]
    assert early == []
    per_key: dict[str, int] = {}
    for k in delivered:
        per_key[k[2]] = per_key.get(k[2], 0) + 1
    assert set(per_key) == acked  # 0 acked lost (and nothing else delivered)
    duplicates = sum(v - 1 for v in per_key.values())
    # what the old master delivered after the progress record the new master resumed from
    # (records below the new epoch's start offset were written by the old master)
    by_old = {k: m for k, m in delivered.items() if k in old_seen or k[0] < info["epochStartOffset"]}
    after_sync = sum(1 for m in by_old.values() if m["store_ts"] >= synced_ms)
    assert duplicates <= after_sync, (duplicates, after_sync, killed_ms - synced_ms)
    # issue 25 item 3: the new master skips the delay-level and timer deliveries the replica holds
    # after the adopted record, so a message repeats only if the old master's delivery of it never
    # reached the slave (it sits at or past the new epoch's start offset in the old master's CommitLog)
    unreplicated = {k[2] for k in old_seen if k[0] >= info["epochStartOffset"]}
    repeated = {key for key, v in per_key.items() if v > 1}
    assert repeated <= unreplicated, (sorted(repeated - unreplicated)[:10], info)
