"""kill -9 while delivering: after restart nothing is lost and nothing is delivered twice, although
delayOffset.json lags (scheduleProgress is written with every delivery put; scheduler.progress_file)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import pytest
import structlog

from scheduler.delay_levels import DelayLevelService
from scheduler.delay_offsets import DelayOffsetTable
from scheduler.levels import SCHEDULE_TOPIC
from storage.meta_store import DelayOffsetFile
from tests.helpers.checks import present
from tests.scheduler.helpers import QueueWatcher, delay_config, open_store, read_queue

pytestmark = pytest.mark.process

log = structlog.get_logger(__name__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


async def test_kill9_mid_delivery_no_loss_no_duplicates(tmp_path):
    total = 6000
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.scheduler.kill9_child", str(tmp_path), str(total), "30",
        cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        async def until_mid_way() -> int:
            while True:
                line = (await present(proc.stdout).readline()).decode()
                assert line, "child exited early"
                if line.startswith("delivered") and int(line.split()[1]) >= total // 3:
                    return int(line.split()[1])
        reported = await asyncio.wait_for(until_mid_way(), 30)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL

    persisted = DelayOffsetTable(DelayOffsetFile(str(tmp_path / "config" / "delayOffset.json")))
    persisted.load()
    p = persisted.get(1)
    store = open_store(tmp_path)
    try:
        scheduled = [r.properties["UNIQ_KEY"] for _, r in read_queue(store, SCHEDULE_TOPIC, 0)]
        delivered_before = store.max_offset("K9", 0)
        assert reported <= delivered_before < len(scheduled) <= total  # killed mid-way, mid-production
        assert p < delivered_before  # delayOffset.json alone would re-deliver (the old behaviour)
        svc = DelayLevelService(store, delay_config(tmp_path))
        watch = QueueWatcher(store, "K9", 0)
        svc.start()
        assert svc.levels[0].offset >= delivered_before  # resumed from scheduleProgress, not delayOffset.json
        await watch.wait_for(len(scheduled), timeout=30)
        await svc.shutdown()  # lets the level finish its pass: any duplicate would be in the queue now
        assert svc.levels[0].offset == len(scheduled)
        got = [r.properties["UNIQ_KEY"] for _, r in read_queue(store, "K9")]
        dups = len(got) - len(set(got))
        assert set(got) == set(scheduled)  # nothing lost
        assert dups == 0
        assert got == scheduled  # in schedule order, each once
        log.info("kill9.exact", delivered_before_kill=delivered_before, delay_offset_json=p,
                 scheduled=len(scheduled))
    finally:
        await store.shutdown()
