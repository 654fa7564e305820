"""kill -9 while delivering: after restart nothing is lost, and duplicates are exactly the messages
delivered since the last delayOffset.json persist (bounded by flushDelayOffsetInterval's worth)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import structlog

from scheduler.delay_levels import DelayLevelService
from scheduler.delay_offsets import DelayOffsetTable
from scheduler.levels import SCHEDULE_TOPIC
from tests.scheduler.helpers import QueueWatcher, delay_config, open_store, read_queue

log = structlog.get_logger(__name__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def test_kill9_mid_delivery_no_loss_bounded_duplicates(tmp_path):
    total = 6000
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.scheduler.kill9_child", str(tmp_path), str(total), "30",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        async def until_mid_way() -> int:
            while True:
                line = (await proc.stdout.readline()).decode()
                assert line, "child exited early"
                if line.startswith("delivered") and int(line.split()[1]) >= total // 3:
                    return int(line.split()[1])
        reported = await asyncio.wait_for(until_mid_way(), 30)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL

    persisted = DelayOffsetTable(str(tmp_path / "config"))
    persisted.load()
    p = persisted.get(1)
    store = open_store(tmp_path)
    try:
        scheduled = [r.properties["UNIQ_KEY"] for _, r in read_queue(store, SCHEDULE_TOPIC, 0)]
        delivered_before = store.max_offset("K9", 0)
        assert reported <= delivered_before < len(scheduled) <= total  # killed mid-way, mid-production
        assert 0 < p <= delivered_before
        svc = DelayLevelService(store, delay_config(tmp_path))
        watch = QueueWatcher(store, "K9", 0)
        svc.start()
        expected_dups = delivered_before - p
        await watch.wait_for(len(scheduled) + expected_dups, timeout=30)
        await svc.shutdown()
        got = [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "K9")]
        dups = len(got) - len(set(got))
        assert set(got) == set(scheduled)  # nothing lost
        assert dups == expected_dups  # exactly the deliveries after the last persist
        assert got[delivered_before:delivered_before + dups] == scheduled[p:delivered_before]
        log.warning("kill9.duplicates", duplicates=dups, delivered_before_kill=delivered_before,
                    persisted_offset=p, scheduled=len(scheduled), flush_offset_interval_ms=100)
        print(f"\nKILL9 duplicates={dups} delivered_before_kill={delivered_before} persisted_offset={p} "
              f"scheduled={len(scheduled)} flushDelayOffsetInterval=100ms")
    finally:
        await store.shutdown()
