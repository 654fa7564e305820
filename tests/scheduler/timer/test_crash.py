"""kill -9 a process running MessageStore + TimerMessageStore under timer load, several times; then
every timer message is delivered, none early, none twice (scheduleProgress: scheduler.progress_file)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time

import pytest

from tests.scheduler.timer.conftest import Harness

pytestmark = pytest.mark.process

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


async def _run_child(root: str, first: int, count: int):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.scheduler.timer.crash_child", root, str(first), str(count),
        cwd=REPO, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    await _expect(proc, b"READY")
    return proc


async def _expect(proc, marker: bytes) -> None:
    """Read the child's stdout (structlog lines too) until `marker` appears."""
    async def scan():
        while True:
            line = await proc.stdout.readline()
            assert line, f"child ended before {marker!r}"
            if line.strip() == marker:
                return
    await asyncio.wait_for(scan(), 60)


@pytest.mark.slow
async def test_kill9_under_timer_load_loses_nothing(tmp_path):
    root = str(tmp_path / "store")
    rng = random.Random(42)
    kills: list[int] = []
    per_round, rounds = 300, 4
    for r in range(rounds):
        proc = await _run_child(root, r * per_round, per_round)
        try:
            await asyncio.wait_for(proc.wait(), rng.uniform(0.3, 1.5))  # the child never exits by itself
        except TimeoutError:
            pass
        kills.append(int(time.time() * 1000))
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    total = rounds * per_round
    proc = await _run_child(root, total, 0)
    await _expect(proc, b"DRAINED")
    assert await proc.wait() == 0

    h = Harness(root)
    h.open()
    try:
        seen: dict[str, int] = {}
        early = []
        for m in h.messages("CRASH"):
            key = m.properties["UNIQ_KEY"]
            seen[key] = seen.get(key, 0) + 1
            if m.store_timestamp < int(m.body):
                early.append(key)
        missing = [f"M{i}" for i in range(total) if f"M{i}" not in seen]
        assert not missing, f"{len(missing)} timer messages lost: {missing[:10]}"
        assert not early, f"delivered early: {early[:10]}"
        dups = {k: n - 1 for k, n in seen.items() if n > 1}
        assert not dups, f"{len(dups)} delivered twice: {sorted(dups)[:10]} (kills at {kills})"
        print(f"kill -9 x{rounds}: {total} timers, none lost, early or twice")
    finally:
        await h.close()
