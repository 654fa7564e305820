"""storage.supervisor: the one failure policy for background work (log, count, back off, restart)."""

from __future__ import annotations

import asyncio

import structlog

from storage.supervisor import Supervisor


async def test_a_failing_task_is_logged_counted_and_restarted_with_backoff():
    sup = Supervisor(backoff_initial_s=0.01, backoff_max_s=0.04)
    runs: list[float] = []
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def work() -> None:
        runs.append(loop.time())
        if len(runs) < 4:
            raise RuntimeError(f"boom {len(runs)}")
        done.set()

    with structlog.testing.capture_logs() as logs:
        t = sup.spawn("worker", work, level=3)
        await asyncio.wait_for(done.wait(), 30)
        await t.stop()
    assert sup.stats() == {"worker": 3}
    failed = [e for e in logs if e["event"] == "task.failed"]
    assert [e["error"] for e in failed] == ["RuntimeError('boom 1')", "RuntimeError('boom 2')", "RuntimeError('boom 3')"]
    assert all(e["task"] == "worker" and e["level"] == 3 and e["log_level"] == "error" for e in failed)
    assert [e["backoff_s"] for e in failed] == [0.01, 0.02, 0.04]  # doubling, capped
    gaps = [b - a for a, b in zip(runs, runs[1:], strict=False)]
    assert gaps[0] >= 0.009 and gaps[2] >= 0.039  # it really waited before each restart


async def test_stop_reports_the_error_a_task_ended_with():
    sup = Supervisor()

    async def work() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            raise OSError("close failed")  # raised while being cancelled: must not vanish

    t = sup.spawn("closer", work)
    await asyncio.sleep(0)
    with structlog.testing.capture_logs() as logs:
        await t.stop()
    assert any(e["event"] == "task.stop_failed" and e["task"] == "closer" for e in logs)
    assert sup.stats()["closer"] == 1


async def test_failed_counts_work_that_is_not_a_task():
    sup = Supervisor()
    with structlog.testing.capture_logs() as logs:
        sup.failed("timer-flush", ValueError("x"), read_ms=5)
        await sup.run_once("tx-discard", _raise())
        await asyncio.sleep(0)
    assert sup.stats() == {"timer-flush": 1, "tx-discard": 1}
    assert [e["task"] for e in logs if e["event"] == "task.failed"] == ["timer-flush", "tx-discard"]


async def _raise() -> None:
    raise KeyError("gone")
